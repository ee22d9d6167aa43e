"""gpu_idle: idle gaps on a device inside its active window, and where the launching threads were
meanwhile (CUDA and OS runtime calls, NVTX ranges, their own code); start-up gaps are warm-up."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import summary as SM
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture import _common
from profiler.rules.capture._common import band, pct
from profiler.rules.capture._idle_cause import advice, dominant_cause
from profiler.rules.context import CaptureContext

IDLE_MIN_GAP_US = 50.0
"""A gap shorter than this is launch latency, not idleness (nsys's own 500 ms is far too coarse)."""
IDLE_MIN_FRACTION = 0.10
"""Fire when gaps of at least ``min_gap_us`` add up to this share of the device's active window."""
IDLE_TOP_GAPS = 5
IDLE_HIGH_FRACTION, IDLE_MEDIUM_FRACTION = 0.5, 0.25
"""Severity bands over the idle share of the active window."""
ONE_OFF_SHARE = 0.5
"""A gap holding at least this share of the idle time, without which the rest stays under
``min_idle_fraction``, is a one-time pause: reported low, not as steady idleness."""
IDLE_INIT_SHARE = 0.5
"""A gap at least this share of which the launching threads spend in start-up calls is warm-up."""
INIT_API_PREFIXES = ("cuInit", "cuCtxCreate", "cuDevicePrimaryCtxRetain", "cuLibraryLoad", "cuLibraryGet",
                     "cuModuleLoad", "cuModuleGet", "cuKernelGet", "cudaSetDevice", "cudaFree")
"""One-off start-up work (context creation, lazy module loading): a gap spent mostly in these calls is
warm-up, reported apart and not counted as idleness. ``cudaFree(0)`` is the customary context init."""

TRT_IDLE_ADVICE = (
    " With TensorRT: keep the next inference queued before waiting on this one (enqueueV3 on a second execution "
    "context with its own stream), and replay the enqueue as a CUDA graph (--useCudaGraph) so the host feeds the "
    "GPU in one call.")


_FEW_THREADS = 8
"""Up to this many launching threads, a call's thread is matched by comparisons (np.isin would build
temporaries the size of the call table)."""


def _host_during(ctx: CaptureContext, d: SM.DeviceGaps, gs: np.ndarray, ge: np.ndarray, detail: np.ndarray | None = None,
                 ) -> tuple[dict, dict[int, dict], np.ndarray]:
    """Where the launching threads were during the gaps: API, OS runtime and NVTX time overlapping them
    (the evidence), per-gap detail, and the NVTX time (ns) per series id.

    ``per_gap`` (gap index -> call name -> ms inside that gap) holds only the gaps in ``detail`` (all when
    None): the finding lists a few top gaps, and a per-row loop over every gap's calls would cost
    seconds on millions of calls.
    """
    table = ctx.table
    want = np.ones(len(gs), dtype=bool) if detail is None else np.isin(np.arange(len(gs)), detail)
    total = float((ge - gs).sum())
    agg: dict[str, Any] = {}
    per_gap: dict[int, dict[str, dict[str, int]]] = {int(i): {} for i in np.flatnonzero(want)}  # ns
    pieces: list[tuple[np.ndarray, np.ndarray]] = []  # the calls' (start, end) inside the gaps, per block
    pieces_per_gap = np.zeros(len(gs), np.int64)
    for label, calls in (("cuda_api", table.api), ("os_runtime", table.osrt)):
        # the table in blocks of rows, so every temporary stays small: per block, the launching threads'
        # top-level calls that overlap a gap add the overlap time to their call name (exact int64 sums
        # per name code), keep the pieces inside the gaps for the union, and go through the per-gap loop
        sums = np.zeros(len(calls.names), np.int64)
        step = _common.CALL_BLOCK
        for b in range(0, len(calls), step):
            blk = b + np.flatnonzero(calls.top_level[b:b + step] & _on_threads(calls.tid[b:b + step], d.launch_tids))
            g, q, ov = SM.overlap_by_name(gs, ge, calls.start_ns[blk], calls.end_ns[blk])
            rows = blk[q]
            del q, blk
            # per name code; float sums of integer ns are exact below 2**53 ns (104 days) per name
            sums += np.bincount(calls.name_code[rows], weights=ov, minlength=len(sums)).astype(np.int64)
            _add_per_gap(per_gap, label, calls, g, rows, ov, want)
            if len(rows):
                ps = np.maximum(calls.start_ns[rows], gs[g])
                order = np.argsort(ps)
                pieces.append((ps[order], np.minimum(calls.end_ns[rows], ge[g])[order]))
                first = int(g.min())  # a block's calls fall in few gaps: counted over those only
                counts = np.bincount(g - first)
                pieces_per_gap[first:first + len(counts)] += counts
        present = np.flatnonzero(sums > 0)  # every overlap is positive: the names that overlap a gap
        if len(present):
            # then by name as before (codes can share a name)
            s = pd.Series(sums[present], index=calls.names[present]).groupby(level=0).sum().sort_values(ascending=False)
            agg[label] = {str(k): v / 1e6 for k, v in s.head(8).items()}
        else:
            agg[label] = {}
    inst = table.instances
    ranges_ns = np.zeros(len(table.series))
    if not table.window and len(inst):
        m = np.isin(inst["tid"].to_numpy(), d.launch_tids)
        sub = inst[m]
        g, q, ov = SM.overlap_by_name(gs, ge, sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy())
        if len(q):
            ranges_ns = np.bincount(sub["series_id"].to_numpy()[q], weights=ov, minlength=len(table.series))
            by_series = np.array([ctx.label(i) for i in range(len(ctx.ranges))], dtype=object)
            labels = by_series[sub["series_id"].to_numpy()[q]]
            s = pd.Series(ov, index=labels).groupby(level=0).sum().sort_values(ascending=False)
            agg["nvtx"] = {str(k): v / 1e6 for k, v in s.head(8).items()}

    in_calls = _covered_ns(pieces, gs, pieces_per_gap)
    agg["outside_cuda_and_os_calls_ms"] = max(total - in_calls, 0.0) / 1e6
    per_gap_ms = {i: {label: {name: ns / 1e6 for name, ns in where.items()} for label, where in by_label.items()}
                  for i, by_label in per_gap.items()}
    return agg, per_gap_ms, ranges_ns


def _on_threads(tid: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """``np.isin(tid, tids)``, by comparisons when the threads are few."""
    if len(tids) > _FEW_THREADS:
        return np.isin(tid, tids)
    out = np.zeros(len(tid), dtype=bool)
    for t in np.unique(tids).tolist():
        out |= tid == t
    return out


def _init_ns(api: Any, is_init: np.ndarray, d: SM.DeviceGaps, bi: np.ndarray) -> np.ndarray:
    """Time (ns) the launching threads spend in start-up calls during each of the gaps ``bi``; the calls in
    blocks of rows (a capture can make a cuKernelGetName call per launch)."""
    gs, ge = d.gap_start_ns[bi], d.gap_end_ns[bi]
    init_ns = np.zeros(len(bi))
    for b in range(0, len(api), _common.CALL_BLOCK):
        blk = slice(b, b + _common.CALL_BLOCK)
        rows = b + np.flatnonzero(is_init[api.name_code[blk]] & _on_threads(api.tid[blk], d.launch_tids))
        g, _, ov = SM.overlap_by_name(gs, ge, api.start_ns[rows], api.end_ns[rows])
        init_ns += np.bincount(g, weights=ov, minlength=len(bi))  # integer ns: the float sums are exact
    return init_ns


def _add_per_gap(per_gap: dict[int, dict], label: str, calls: Any, g: np.ndarray, rows: np.ndarray, ov: np.ndarray,
                 want: np.ndarray) -> None:
    """Add each wanted gap's overlap (ns) per call name into ``per_gap[gap][label]``: exact sums per
    (gap, name code) first, so a gap overlapping many calls costs no per-call Python; names appear in the
    order of their first call."""
    sel = np.flatnonzero(want[g])
    if not len(sel):
        return
    n_codes = max(len(calls.names), 1)
    key = g[sel].astype(np.int64) * n_codes + calls.name_code[rows[sel]]
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=ov[sel], minlength=len(uniq))
    for k in np.argsort(first, kind="stable").tolist():
        gi, code = divmod(int(uniq[k]), n_codes)
        name = calls.names[code]
        where = per_gap[gi].setdefault(label, {})
        where[name] = where.get(name, 0) + int(sums[k])  # ns, made ms once all blocks are in


def _covered_ns(pieces: list[tuple[np.ndarray, np.ndarray]], gs: np.ndarray, pieces_per_gap: np.ndarray) -> int:
    """Length of the union of intervals inside the gaps (ns), given in blocks of (start, end) sorted by
    start; emptied. The gaps are disjoint, so the union is summed group by group of consecutive gaps of
    about ``CALL_BLOCK`` pieces, each group's pieces gathered from every block: no temporary is the size
    of all pieces (a launch-bound capture has millions of OS runtime calls in its gaps). Cutting at a
    gap's start is exact: every piece was clipped to one gap, so no piece, and no union of pieces,
    reaches from one group into the next."""
    ends_at = np.cumsum(pieces_per_gap)
    step = _common.CALL_BLOCK
    first_gaps = np.searchsorted(ends_at, np.arange(step, int(ends_at[-1]) if len(ends_at) else 0, step), "right")
    cuts = gs[np.unique(first_gaps[first_gaps < len(gs)])]  # a group's pieces start at or after its first gap
    at = [np.concatenate([[0], np.searchsorted(ps, cuts), [len(ps)]]) for ps, _ in pieces]
    covered = 0
    for j in range(len(cuts) + 1):
        s = np.concatenate([ps[a[j]:a[j + 1]] for (ps, _), a in zip(pieces, at)] or [np.zeros(0, np.int64)])
        e = np.concatenate([pe[a[j]:a[j + 1]] for (_, pe), a in zip(pieces, at)] or [np.zeros(0, np.int64)])
        order = np.argsort(s)  # any order of equal starts gives the same union
        s, e = s[order], e[order]
        # sorted by start, each interval adds what reaches beyond both its start and every earlier end
        np.maximum.accumulate(e, out=e)
        s[1:] = np.maximum(s[1:], e[:-1])
        covered += int(np.maximum(e - s, 0).sum())
    del pieces[:]
    return covered


@rule("gpu_idle", scope="capture", defaults={
    "min_gap_us": IDLE_MIN_GAP_US, "min_idle_fraction": IDLE_MIN_FRACTION, "top_gaps": IDLE_TOP_GAPS,
    "init_gap_share": IDLE_INIT_SHARE, "one_off_gap_share": ONE_OFF_SHARE, "high_idle_fraction": IDLE_HIGH_FRACTION,
    "medium_idle_fraction": IDLE_MEDIUM_FRACTION})
def gpu_idle(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Idle gaps on a device inside its active window, and where the host was meanwhile."""
    min_gap_ns = float(t["min_gap_us"]) * 1e3
    names = ctx.gpu_names()
    out = []
    api = ctx.table.api
    is_init = np.array([str(n).startswith(INIT_API_PREFIXES) for n in api.names], dtype=bool)
    for d in ctx.devices:
        if d.active_ns <= 0:
            continue
        # only the gaps long enough to count are looked at (a launch-bound loop has a short gap per kernel);
        # of those, gaps spent mostly in start-up calls on the launching threads are warm-up, not idleness
        bi = np.flatnonzero(d.gap_ns >= min_gap_ns)
        gap_ns = d.gap_end_ns[bi] - d.gap_start_ns[bi]
        init_gap = _init_ns(api, is_init, d, bi) >= t["init_gap_share"] * gap_ns
        big = bi[~init_gap]
        active_ns = d.active_ns - float(gap_ns[init_gap].sum())
        idle_ns = float(gap_ns[~init_gap].sum())
        frac = idle_ns / active_ns if active_ns > 0 else 0.0
        if frac < t["min_idle_fraction"] or not len(big):
            continue
        gs, ge = d.gap_start_ns[big], d.gap_end_ns[big]
        top = np.argsort(-(ge - gs), kind="stable")[: int(t["top_gaps"])]
        host, per_gap, ranges_ns = _host_during(ctx, d, gs, ge, detail=top)
        top_gaps = []
        for i in top:
            where = per_gap[int(i)]
            top_gaps.append({
                "start_ms": (gs[i] - ctx.capture_start_ns) / 1e6, "duration_ms": (ge[i] - gs[i]) / 1e6,
                "host": {k: dict(sorted(v.items(), key=lambda kv: -kv[1])[:3]) for k, v in where.items()},
            })
        cause = dominant_cause(ctx, host, ranges_ns, idle_ns / 1e6)
        sev = band(frac, t["high_idle_fraction"], t["medium_idle_fraction"])
        dev_label = f"GPU {d.device_id}" + (f" ({names[d.device_id]})" if names.get(d.device_id) else "")
        n_gaps = len(big)
        largest = float((ge - gs).max())
        one_off = n_gaps > 1 and largest >= t["one_off_gap_share"] * idle_ns and \
            (idle_ns - largest) / active_ns < t["min_idle_fraction"]
        if one_off:  # one pause (phases of the program, a one-time allocation), not steady idleness
            sev = "low"
            what = (f"{dev_label} idle {pct(frac)}% of its active window, {pct(largest / idle_ns)}% of it in one "
                    f"gap of {largest / 1e6:.3g} ms at {(gs[top[0]] - ctx.capture_start_ns) / 1e6:.6g} ms (a one-time "
                    f"pause; the other {n_gaps - 1} {_plural(n_gaps - 1, 'gap')} idle {pct((idle_ns - largest) / active_ns)}%)")
        else:
            what = (f"{dev_label} idle {pct(frac)}% of its active window in {n_gaps} {_plural(n_gaps, 'gap')} of "
                    f"{t['min_gap_us']:g} us or more")
        out.append(Finding(
            rule="gpu_idle", severity=sev, range=None,
            title=f"{what}; meanwhile the host was {cause.sentence()}",
            evidence={
                "device_id": d.device_id, "active_window_ms": active_ns / 1e6, "busy_ms": d.busy_ns / 1e6,
                "initialization_gaps": int(init_gap.sum()),
                "initialization_gaps_ms": float(gap_ns[init_gap].sum()) / 1e6,
                "idle_ms": idle_ns / 1e6, "idle_fraction": frac, "gaps": n_gaps,
                "largest_gap_ms": largest / 1e6, "median_gap_us": float(np.median(ge - gs)) / 1e3,
                "largest_gap_share": largest / idle_ns, "one_time_pause": one_off, "host_cause": cause.kind,
                "host_cause_range": cause.name if cause.kind == "range" else None,
                "host_during_gaps_ms": host, "top_gaps": top_gaps,
            },
            threshold=t.pick("min_gap_us", "min_idle_fraction"),
            recommendation=advice(cause, ctx.tensorrt) + (TRT_IDLE_ADVICE if ctx.tensorrt and cause.kind != "range" else ""),
        ))
    return out


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
