"""Streams: busy time per stream, how much the streams overlap, and copy/compute overlap.

``gpu_concurrency`` = (sum of per-stream busy time) / (busy union per device, summed over devices):
1.0 when the streams never overlap, 2.0 when two streams run side by side all the time. What overlap
bought is the difference (``overlap_saved_ms``): the GPU time that would have run back to back. Overlap of
streams that race (:mod:`profiler.capture.races`: a kernel starting on one while a copy of the same inference still
runs on another, nothing ordering them) is no saving: it is left out of both figures and given as
``racing_overlap_ms`` (and ``copy_compute_overlap.racing_ms``), present only where there is some.

The activity has millions of rows on long captures: every per-row step here runs over blocks of rows
(:mod:`profiler.capture.blockwise`), so the transient memory is a few blocks, not copies of the columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import series as S
from profiler.capture.blockwise import blocks, union_lengths


def streams_json(act: S.Activity, racing_ns: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """``streams`` (list, busiest first), ``gpu_concurrency`` and ``copy_compute_overlap``; ``racing_ns`` is
    (racing overlap, the part of it whose producer is a copy) in ns, left out of the overlap figures."""
    if not len(act):
        return {"streams": [], "gpu_concurrency": None,
                "copy_compute_overlap": {"overlap_ms": 0.0, "copy_ms": 0.0, "compute_ms": 0.0,
                                         "share_of_copy": None}, "overlap_saved_ms": 0.0}
    codes, pairs = _pair_codes(act)
    devs = list(dict.fromkeys(d for d, _ in pairs))  # in order of first appearance
    dev_of_pair = np.array([devs.index(d) for d, _ in pairs], dtype=np.int32)
    busy = union_lengths(act.start_ns, act.end_ns, lambda sl: codes[sl], len(pairs), act.sorted_by_start)
    union = union_lengths(act.start_ns, act.end_ns, lambda sl: dev_of_pair[codes[sl]], len(devs),
                          act.sorted_by_start)
    counts, copy_ns_by_pair = _counts(act, codes, len(pairs))
    rows = [{"device": int(d), "stream": int(s), "busy_ms": busy[i] / 1e6, "kernels": int(counts[i, S.KERNEL]),
             "graph_launches": int(counts[i, S.GRAPH]), "copies": int(counts[i, S.MEMCPY]),
             "copy_ms": copy_ns_by_pair[i] / 1e6}
            for i, (d, s) in enumerate(pairs)]
    rows.sort(key=lambda r: -r["busy_ms"])
    total_union = float(union.sum())
    ov, copy_ns, comp_ns = _copy_compute(act, codes, dev_of_pair, union, counts[:, S.MEMCPY].any())
    race, copy_race = racing_ns
    saved = max(float(busy.sum()) - total_union, 0.0)
    copy_race = min(copy_race, ov)
    out = {
        "streams": rows,
        "gpu_concurrency": float(busy.sum()) / total_union if total_union > 0 else None,
        "overlap_saved_ms": max(saved - race, 0.0) / 1e6,
        "copy_compute_overlap": {"overlap_ms": (ov - copy_race) / 1e6, "copy_ms": copy_ns / 1e6,
                                 "compute_ms": comp_ns / 1e6,
                                 "share_of_copy": (ov - copy_race) / copy_ns if copy_ns > 0 else None},
    }
    if race > 0:
        out["racing_overlap_ms"] = min(race, saved) / 1e6
        out["copy_compute_overlap"]["racing_ms"] = copy_race / 1e6
    return out


def _pair_codes(act: S.Activity) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Per row, the index of its (device, stream) pair in ``pairs`` (pairs in order of first appearance)."""
    codes = np.empty(len(act), dtype=np.int32)
    index: dict[tuple[int, int], int] = {}
    for sl in blocks(len(act)):
        d_codes, d_vals = pd.factorize(act.device_id[sl])
        s_codes, s_vals = pd.factorize(act.stream_id[sl])
        key, uniq = pd.factorize(d_codes * len(s_vals) + s_codes)  # (device, stream), exact
        local = [index.setdefault((int(d_vals[u // len(s_vals)]), int(s_vals[u % len(s_vals)])), len(index))
                 for u in uniq]
        codes[sl] = np.array(local, dtype=np.int32)[key]
    return codes, list(index)


def _counts(act: S.Activity, codes: np.ndarray, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows per pair and kind: an (n_pairs, 4) array, copy time per pair in ns)."""
    counts = np.zeros(n_pairs * len(S.KIND_NAMES), dtype=np.int64)
    copy_ns = np.zeros(n_pairs, dtype=np.int64)
    for sl in blocks(len(act)):
        kind = act.kind[sl]
        counts += np.bincount(codes[sl] * len(S.KIND_NAMES) + kind, minlength=len(counts))
        c = np.flatnonzero(kind == S.MEMCPY)
        if len(c):
            np.add.at(copy_ns, codes[sl][c], act.end_ns[sl][c] - act.start_ns[sl][c])
    return counts.reshape(n_pairs, len(S.KIND_NAMES)), copy_ns


def _copy_compute(act: S.Activity, codes: np.ndarray, dev_of_pair: np.ndarray, union: np.ndarray,
                  any_copy: bool) -> tuple[int, int, int]:
    """(copy/compute overlap, copy union, compute union) in ns, summed over devices. A device's overlap is
    its copy union plus its compute union minus its whole union (exact in integers); a device with one kind
    of work only overlaps nothing."""
    if not any_copy:
        return 0, 0, int(union.sum())
    def dev_and_kind(sl: slice) -> np.ndarray:  # 2 x device + 1 for a copy
        return dev_of_pair[codes[sl]] * 2 + (act.kind[sl] == S.MEMCPY)

    by_kind = union_lengths(act.start_ns, act.end_ns, dev_and_kind, 2 * len(union),
                            act.sorted_by_start).reshape(len(union), 2)
    comp_ns, copy_ns = int(by_kind[:, 0].sum()), int(by_kind[:, 1].sum())
    return comp_ns + copy_ns - int(union.sum()), copy_ns, comp_ns
