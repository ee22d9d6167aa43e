"""Streams: busy time per stream, how much the streams overlap, and copy/compute overlap.

``gpu_concurrency`` = (sum of per-stream busy time) / (busy union per device, summed over devices):
1.0 when the streams never overlap, 2.0 when two streams run side by side all the time. What overlap
bought is the difference (``overlap_saved_ms``): the GPU time that would have run back to back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture import series as S


def streams_json(act: S.Activity) -> dict[str, Any]:
    """``streams`` (list, busiest first), ``gpu_concurrency`` and ``copy_compute_overlap``."""
    if not len(act):
        return {"streams": [], "gpu_concurrency": None,
                "copy_compute_overlap": {"overlap_ms": 0.0, "copy_ms": 0.0, "compute_ms": 0.0,
                                         "share_of_copy": None}, "overlap_saved_ms": 0.0}
    dev_codes, devs = pd.factorize(act.device_id)
    s_codes, s_ids = pd.factorize(act.stream_id)
    codes, pairs = pd.factorize(dev_codes.astype(np.int64) * len(s_ids) + s_codes)  # (device, stream), exact
    uniq = [(devs[p // len(s_ids)], s_ids[p % len(s_ids)]) for p in pairs]
    busy = intervals.union_length_by_group(codes, act.start_ns, act.end_ns, len(uniq))
    is_copy = act.kind == S.MEMCPY
    kernels = np.bincount(codes[act.kind == S.KERNEL], minlength=len(uniq))
    graphs = np.bincount(codes[act.kind == S.GRAPH], minlength=len(uniq))
    copies = np.bincount(codes[is_copy], minlength=len(uniq))
    copy_ms = np.bincount(codes[is_copy], weights=act.end_ns[is_copy] - act.start_ns[is_copy], minlength=len(uniq))
    rows = [{"device": int(d), "stream": int(s), "busy_ms": busy[i] / 1e6, "kernels": int(kernels[i]),
             "graph_launches": int(graphs[i]), "copies": int(copies[i]), "copy_ms": copy_ms[i] / 1e6}
            for i, (d, s) in enumerate(uniq)]
    rows.sort(key=lambda r: -r["busy_ms"])
    union = intervals.union_length_by_group(dev_codes, act.start_ns, act.end_ns, len(devs))
    total_union = float(union.sum())
    ov = copy_ns = comp_ns = 0
    for d in range(len(devs)):
        m = dev_codes == d
        c, k = m & is_copy, m & ~is_copy
        if not c.any() or not k.any():  # one kind of work only: its union is the device's, no overlap
            copy_ns += int(union[d]) if c.any() else 0
            comp_ns += int(union[d]) if k.any() else 0
            continue
        ov += intervals.overlap_length(act.start_ns[c], act.end_ns[c], act.start_ns[k], act.end_ns[k])
        copy_ns += intervals.union_length(act.start_ns[c], act.end_ns[c])
        comp_ns += intervals.union_length(act.start_ns[k], act.end_ns[k])
    return {
        "streams": rows,
        "gpu_concurrency": float(busy.sum()) / total_union if total_union > 0 else None,
        "overlap_saved_ms": max(float(busy.sum()) - total_union, 0.0) / 1e6,
        "copy_compute_overlap": {"overlap_ms": ov / 1e6, "copy_ms": copy_ns / 1e6, "compute_ms": comp_ns / 1e6,
                                 "share_of_copy": ov / copy_ns if copy_ns > 0 else None},
    }
