"""Per-instance metrics of the series table: sums over each instance's member rows (kernel and copy time,
bytes, launches, API, sync and OS runtime time), GPU busy unions, and the outlier flags."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.activity import Activity, HostCalls
from profiler.capture.frames import DEVICE_SYNC_NAMES, KERNEL, MEMCPY, ApiCategory
from profiler.capture.keys import Sorted, WindowSums, expand

OUTLIER_MEDIAN_RATIO = 1.5
"""An instance is an outlier when its wall time exceeds this multiple of the series median ..."""
OUTLIER_IQR_FENCE = 3.0
"""... and also exceeds Q3 + this many interquartile ranges (so a wide distribution is not all outliers)."""
OUTLIER_MIN_COUNT = 5
"""Series with fewer instances get no outliers: there is no typical instance to compare with."""


PAIR_CHUNK = 1 << 18


def activity_metrics(inst: pd.DataFrame, act: Activity, srt: Sorted, unknown: np.ndarray) -> None:
    lo, hi = inst["act_lo"].to_numpy(), inst["act_hi"].to_numpy()

    def block(first: int, stop: int) -> list[np.ndarray]:  # rows in (thread, launch time) order
        kind = srt.part(act.kind, first, stop)
        is_kernel, is_copy = kind == KERNEL, kind == MEMCPY
        dur = srt.part(act.end_ns, first, stop) - srt.part(act.start_ns, first, stop)
        return [np.where(is_kernel, dur, 0), np.where(is_copy, dur, 0),
                np.where(is_copy, srt.part(act.bytes, first, stop), 0),
                is_copy & srt.part(act.pageable, first, stop), is_kernel, srt.part(act.is_launch, first, stop)]

    names = ("kernel_sum_ns", "copy_sum_ns", "copy_bytes", "pageable_copies", "kernels", "launches")
    for name, total in zip(names, WindowSums(lo, hi, len(srt)).columns(block, len(names))):
        inst[name] = total
    inst["activities"] = hi - lo
    n = len(inst)
    busy = np.zeros(n, np.int64)
    compute = np.zeros(n, np.int64)
    copy = np.zeros(n, np.int64)
    first = np.zeros(n, np.int64)  # first start and last end of the instance's GPU work (0, 0 without)
    last = np.zeros(n, np.int64)
    pairs = int(np.maximum(hi - lo, 0).sum())
    if pairs > PAIR_CHUNK and pairs > NESTED_RATIO * (len(srt) + n):
        # windows hold the same rows many times over (deeply nested ranges): a sweep, not the pairs
        inst["gpu_busy_ns"], inst["compute_ns"], inst["copy_ns"] = _nested_unions(act, srt, lo, hi)
        first = intervals.window_extreme(srt.take(act.start_ns), lo, hi, np.minimum)
        last = intervals.window_extreme(srt.take(act.end_ns), lo, hi, np.maximum)
        inst["span_ns"] = np.maximum(inst["wall_ns"].to_numpy(), last - first)
        inst["gpu_start_ns"], inst["gpu_end_ns"] = first, last
        return
    # Unions need the member rows themselves: expand windows in chunks of whole instances.
    cum = np.concatenate([[0], np.cumsum(np.maximum(hi - lo, 0))])
    start_i = 0
    while start_i < n:
        stop = int(np.searchsorted(cum, cum[start_i] + PAIR_CHUNK, "right")) - 1
        stop = min(max(stop, start_i + 1), n)
        q, pos = expand(lo[start_i:stop], hi[start_i:stop])
        rows = srt.rows(pos)
        s, e, k = act.start_ns[rows], act.end_ns[rows], act.kind[rows]
        m = stop - start_i
        busy[start_i:stop] = b = intervals.union_length_by_group(q, s, e, m)
        if len(q):
            heads = np.flatnonzero(np.concatenate(([True], q[1:] != q[:-1])))  # q is sorted (expand)
            who = start_i + q[heads]
            first[who] = np.minimum.reduceat(s, heads)
            last[who] = np.maximum.reduceat(e, heads)
        c = k != MEMCPY
        if c.all():
            compute[start_i:stop] = b
        elif not c.any():
            copy[start_i:stop] = b
        else:
            compute[start_i:stop] = intervals.union_length_by_group(q[c], s[c], e[c], m)
            copy[start_i:stop] = intervals.union_length_by_group(q[~c], s[~c], e[~c], m)
        start_i = stop
    inst["gpu_busy_ns"], inst["compute_ns"], inst["copy_ns"] = busy, compute, copy
    # the longer of the range's wall time and the GPU span of its work (first start to last end): an async
    # launch's work runs after the range closes, so busy time over this (never over the wall time alone)
    # is a fraction in [0, 1] that neither counts the host's queueing nor exceeds 1
    inst["span_ns"] = np.maximum(inst["wall_ns"].to_numpy(), last - first)
    inst["gpu_start_ns"], inst["gpu_end_ns"] = first, last  # 0, 0 without GPU work


NESTED_RATIO = 20
"""Above this many (window, member) pairs per row and window, the unions come from the offline sweep."""


def _nested_unions(act: Activity, srt: Sorted, lo: np.ndarray, hi: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU busy, compute and copy union per window [lo, hi) of the rows in ``srt`` order, by
    :func:`intervals.window_union_lengths` (O((rows + windows) log rows), however nested the windows)."""
    s, e, kind = srt.take(act.start_ns), srt.take(act.end_ns), srt.take(act.kind)
    out = [intervals.window_union_lengths(s, e, lo, hi)]
    for keep in (kind != MEMCPY, kind == MEMCPY):
        before = np.concatenate([[0], np.cumsum(keep)])  # positions among the kept rows
        out.append(intervals.window_union_lengths(s[keep], e[keep], before[lo], before[hi]))
    return out[0], out[1], out[2]


def host_metrics(inst: pd.DataFrame, api: HostCalls, api_srt: Sorted, osrt: HostCalls, osrt_srt: Sorted) -> None:
    sync_name = api.sync_names()  # per name code, as HostCalls.blocking_sync
    device_sync_name = np.isin(api.names, list(DEVICE_SYNC_NAMES))

    def calls(first: int, stop: int) -> list[np.ndarray]:  # rows in (thread, start) order
        top, cat = api_srt.part(api.top_level, first, stop), api_srt.part(api.category, first, stop)
        code = api_srt.part(api.name_code, first, stop)
        dur = np.where(top, api_srt.part(api.end_ns, first, stop) - api_srt.part(api.start_ns, first, stop), 0)
        launch = top & ((cat == ApiCategory.launch) | (cat == ApiCategory.graph_launch))
        sync = top & (cat == ApiCategory.sync) & sync_name[code]  # nested calls count through their caller
        return [dur, np.where(launch, dur, 0), launch, np.where(sync, dur, 0), sync, sync & device_sync_name[code],
                np.where(cat == ApiCategory.memcpy, dur, 0)]

    names = ("api_ns", "launch_api_ns", "launch_calls", "sync_ns", "sync_count", "device_sync_count",
             "memcpy_api_ns")
    sums = WindowSums(inst["api_lo"].to_numpy(), inst["api_hi"].to_numpy(), len(api_srt))
    for name, total in zip(names, sums.columns(calls, len(names))):
        inst[name] = total

    def os_calls(first: int, stop: int) -> list[np.ndarray]:
        top = osrt_srt.part(osrt.top_level, first, stop)
        dur = osrt_srt.part(osrt.end_ns, first, stop) - osrt_srt.part(osrt.start_ns, first, stop)
        return [np.where(top, dur, 0), top]

    osums = WindowSums(inst["osrt_lo"].to_numpy(), inst["osrt_hi"].to_numpy(), len(osrt_srt))
    inst["osrt_ns"], inst["osrt_count"] = osums.columns(os_calls, 2)


def mark_outliers(inst: pd.DataFrame, median_ratio: float = OUTLIER_MEDIAN_RATIO,
                  iqr_fence: float = OUTLIER_IQR_FENCE, min_count: int = OUTLIER_MIN_COUNT) -> np.ndarray:
    """Outlier flags: wall time above both median x ``median_ratio`` and Q3 + ``iqr_fence`` x IQR."""
    if inst.empty:
        return np.zeros(0, dtype=bool)
    sid = inst["series_id"].to_numpy()
    g = inst["wall_ns"].astype(np.float64).groupby(sid)
    med = g.median().reindex(sid).to_numpy()
    q1 = g.quantile(0.25).reindex(sid).to_numpy()
    q3 = g.quantile(0.75).reindex(sid).to_numpy()
    n = g.size().reindex(sid).to_numpy()
    limit = np.maximum(med * median_ratio, q3 + iqr_fence * (q3 - q1))
    return (n >= min_count) & (inst["wall_ns"].to_numpy(dtype=float) > limit)
