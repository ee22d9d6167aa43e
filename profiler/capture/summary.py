"""What the series table says: per-series statistics, GPU idle gaps per device and the causes of outlier
instances. Pure functions of a :class:`~profiler.capture.series.SeriesTable` (built by
:func:`~profiler.capture.series.build_series`); the capture rules and the analysis JSON read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import blockwise, intervals, spill
from profiler.capture.series import (
    _PREFIX, INSTANCE_METRICS, PAIR_CHUNK, Activity, ApiCategory, SeriesTable, expand,
)


# ----------------------------------------------------------------------------- summaries

def ms(values_ns: np.ndarray) -> np.ndarray:
    return np.asarray(values_ns, dtype=np.float64) / 1e6


def series_summary(table: SeriesTable) -> list[dict[str, Any]]:
    """One dict per series: count, wall and GPU-busy statistics (ms), busy fraction, host time.

    ``_totals`` (sums of every ``INSTANCE_METRICS`` column over the series, ns) is for the rules and
    is not part of the JSON output.
    """
    out: list[dict[str, Any]] = []
    inst = table.instances
    if inst.empty:
        return out
    first = table.series["first_row"].to_numpy()
    cols = {m: inst[m].to_numpy() for m in INSTANCE_METRICS}
    sums = {m: np.add.reduceat(v, first) for m, v in cols.items()}
    wall, busy = cols["wall_ns"], cols["gpu_busy_ns"]
    idx, outlier, depth, tid = (inst[c].to_numpy() for c in ("idx", "outlier", "depth", "tid"))
    parent_sid, series_depth = series_tree(table)
    for row in table.series.itertuples(index=False):
        sid = int(row.series_id)
        sl = slice(int(row.first_row), int(row.first_row) + int(row.count))
        totals = {m: int(sums[m][sid]) for m in INSTANCE_METRICS}
        wall_total = float(totals["wall_ns"])
        count = int(row.count)
        out.append({
            "series_id": sid,
            "name": row.name,
            "domain": row.domain,
            "parent_id": int(parent_sid[sid]),
            "depth": int(series_depth[sid]),
            "count": count,
            "wall_ms": stats.summarize(ms(wall[sl])),
            "gpu_busy_ms": stats.summarize(ms(busy[sl])),
            "gpu_busy_fraction": busy_fraction(totals["gpu_busy_ns"], totals["span_ns"]),
            "total_wall_ms": wall_total / 1e6,
            "total_gpu_busy_ms": float(totals["gpu_busy_ns"]) / 1e6,
            "api_ms_per_instance": float(totals["api_ns"]) / 1e6 / count,
            "launches_per_instance": float(totals["launches"]) / count,
            "kernels_per_instance": float(totals["kernels"]) / count,
            "sync_calls_per_instance": float(totals["sync_count"]) / count,
            "compute_ms_per_instance": float(totals["compute_ns"]) / 1e6 / count,
            "copy_ms_per_instance": float(totals["copy_ns"]) / 1e6 / count,
            "osrt_ms_per_instance": float(totals["osrt_ns"]) / 1e6 / count,
            "threads": int(len(np.unique(tid[sl]))),
            "top_level_share": float((depth[sl] == 0).mean()),
            "distinct_raw_names": int(row.raw_names),
            "outlier_indices": idx[sl][outlier[sl]].tolist(),
            "_totals": totals,
        })
    return out


def busy_fraction(busy_ns: float, span_ns: float) -> float:
    """GPU busy time over the span it happened in, in [0, 1] (NaN without a span)."""
    if span_ns <= 0:
        return float("nan")
    return min(max(float(busy_ns) / float(span_ns), 0.0), 1.0)


def series_tree(table: SeriesTable) -> tuple[np.ndarray, np.ndarray]:
    """(parent series id or -1, depth) per series: the series enclosing most of its instances, and the
    most common nesting depth of its instances (0 = outermost on its thread)."""
    n = len(table.series)
    inst = table.instances
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    if inst.empty or "parent" not in inst.columns:
        return parent, depth
    sid = inst["series_id"].to_numpy()
    prow = inst["parent"].to_numpy()
    psid = np.where(prow >= 0, sid[np.maximum(prow, 0)], -1)
    pairs = pd.DataFrame({"s": sid, "p": psid, "d": inst["depth"].to_numpy()})
    top_p = pairs.groupby(["s", "p"]).size().reset_index(name="n").sort_values(["s", "n", "p"],
                                                                             ascending=[True, False, False])
    first = top_p.drop_duplicates("s")
    parent[first["s"].to_numpy()] = first["p"].to_numpy()
    top_d = pairs.groupby(["s", "d"]).size().reset_index(name="n").sort_values(["s", "n", "d"],
                                                                             ascending=[True, False, True])
    first = top_d.drop_duplicates("s")
    depth[first["s"].to_numpy()] = first["d"].to_numpy()
    parent[parent == np.arange(n)] = -1  # recursion: a series is not its own parent
    return parent, depth


# ----------------------------------------------------------------------------- devices and gaps

@dataclass
class DeviceGaps:
    """GPU activity of one device: its active window, busy union and every idle gap in it."""

    device_id: int
    active_start_ns: int
    active_end_ns: int
    busy_ns: int
    gap_start_ns: np.ndarray
    gap_end_ns: np.ndarray
    launch_tids: np.ndarray  # threads that launched work on this device
    focused: bool = False  # the window spans the work launched inside NVTX ranges, not all of the device's

    @property
    def active_ns(self) -> int:
        return self.active_end_ns - self.active_start_ns

    @property
    def gap_ns(self) -> np.ndarray:
        return self.gap_end_ns - self.gap_start_ns

    def gaps_of_at_least(self, min_ns: float) -> np.ndarray:
        """Indices of the gaps at least ``min_ns`` long, a block of gaps at a time: a launch-bound capture has
        a gap per kernel, and their lengths are never held at once."""
        if min_ns <= 0:
            return np.arange(len(self.gap_start_ns))
        found = [sl.start + np.flatnonzero(self.gap_end_ns[sl] - self.gap_start_ns[sl] >= min_ns)
                 for sl in blockwise.blocks(len(self.gap_start_ns))]
        return np.concatenate(found) if found else np.zeros(0, np.int64)


def attributed_activity(table: SeriesTable) -> np.ndarray:
    """Boolean mask over ``table.activity``: launched from inside at least one range instance."""
    if table.instances.empty:
        return np.zeros(len(table.activity), dtype=bool)
    return launched_inside(table, table.instances)


def launched_inside(table: SeriesTable, instances: pd.DataFrame) -> np.ndarray:
    """Boolean mask over ``table.activity``: the rows that :meth:`SeriesTable.members` pairs with one of
    ``instances``, from their windows of thread-sorted rows (a sweep over the window edges), without the pairs."""
    n = len(table.activity)
    edges = np.zeros(n + 1, dtype=np.int32)  # +1 where a window opens, -1 where it closes
    np.add.at(edges, instances["act_lo"].to_numpy(), 1)
    np.add.at(edges, instances["act_hi"].to_numpy(), -1)
    inside = np.cumsum(edges[:-1], dtype=np.int32) > 0  # by position in thread order
    del edges
    if table.act_sorted.identity:  # rows already in thread order: positions are rows
        return inside
    out = np.zeros(n, dtype=bool)
    for sl in blockwise.blocks(n):  # the positions a block at a time: no row-length index array
        out[table.act_sorted.rows(sl.start + np.flatnonzero(inside[sl]))] = True
    return out


GAP_BLOCK_ROWS = 1 << 16
"""Rows per block of the gap sweep (a module constant so tests can cross block boundaries)."""


def device_gaps(act: Activity, focus: np.ndarray | None = None, sorted_by_start: bool | None = None
                ) -> list[DeviceGaps]:
    """Idle gaps of each device between its first and last GPU activity (all kinds, all streams).

    With ``focus`` (a mask of activities, e.g. those launched inside NVTX ranges), a device's active
    window is narrowed to the span of its focused activities, so start-up (module loading, warm-up
    before the first range) does not count as idleness of the measured region. ``sorted_by_start``: True
    where the caller knows the rows are in start order (an Activity from build_activity and its subsets),
    None to have it checked once for all devices.
    """
    out = []
    devices = blockwise.distinct(act.device_id)
    sorted_by_start = blockwise.in_start_order(act.start_ns, sorted_by_start)
    for dev in devices:
        sel = None if len(devices) == 1 else act.device_id == dev
        a0, a1 = _extent(act, sel)
        whole = (a0, a1)
        fsel = None if focus is None else (focus if sel is None else focus & sel)
        focused = fsel is not None and bool(fsel.any())
        if focused:
            a0, a1 = _extent(act, fsel)
        gs, ge, idle_ns = _gaps(act, sel, a0, a1, sorted_by_start)
        tids = blockwise.distinct(act.api_tid, None if sel is None else lambda rows: sel[rows])
        out.append(DeviceGaps(int(dev), a0, a1, int(a1 - a0 - idle_ns), gs, ge, tids[tids >= 0],
                              focused=focused and (a0, a1) != whole))
    return out


def _extent(act: Activity, sel: np.ndarray | None) -> tuple[int, int]:
    """(first start, last end) of the rows ``sel`` (a mask; None: all rows), without copying them."""
    if sel is None:
        return int(act.start_ns.min()), int(act.end_ns.max())
    i64 = np.iinfo(np.int64)
    return int(act.start_ns.min(where=sel, initial=i64.max)), int(act.end_ns.max(where=sel, initial=i64.min))


def _gaps(act: Activity, sel: np.ndarray | None, lo: int, hi: int, sorted_by_start: bool
          ) -> tuple[np.ndarray, np.ndarray, int]:
    """(gap starts, gap ends, their total ns): :func:`intervals.gaps` of the rows ``sel`` (None: all) inside
    ``[lo, hi)``; rows in start order (``sorted_by_start``) are swept a block at a time."""
    start, end = act.start_ns, act.end_ns
    if not sorted_by_start:  # not what build_activity gives: the plain union
        s, e = (start, end) if sel is None else (start[sel], end[sel])
        gs, ge = intervals.gaps(s, e, lo, hi)
        return gs, ge, int((ge - gs).sum())
    gs, ge = _swept_gaps(start, end, sel, lo, hi)
    idle_ns = sum(int((ge[sl] - gs[sl]).sum()) for sl in blockwise.blocks(len(gs), GAP_BLOCK_ROWS))
    return gs, ge, idle_ns


def _swept_gaps(start: np.ndarray, end: np.ndarray, sel: np.ndarray | None, lo: int, hi: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of the non-empty rows ``sel`` (None: all), sorted by start, inside ``[lo, hi)``, with no
    temporary spanning the whole activity: the time from a row's :class:`~profiler.capture.blockwise.Reach`
    (the latest end of the rows before it, at least ``lo``) to its start is covered by none, so each
    non-empty such stretch is one gap, and so is the stretch from the last reach to ``hi``."""
    # at most one gap before each row and one after the last: filled in place, then cut to size, so the
    # result is never held twice (parts and their concatenation)
    cap = (len(start) if sel is None else int(np.count_nonzero(sel))) + 1
    gs, ge = spill.empty(cap, np.int64), spill.empty(cap, np.int64)
    reach, k = blockwise.Reach(lo), 0
    for sl in blockwise.blocks(len(start), GAP_BLOCK_ROWS):
        s, e = start[sl], end[sl]
        keep = e > s if sel is None else sel[sl] & (e > s)  # empty rows cover nothing
        s, e = s[keep], e[keep]
        before = reach.before_each(e)
        gap_end = np.minimum(s, hi)
        new = gap_end > before
        m = int(np.count_nonzero(new))
        np.compress(new, before, out=gs[k:k + m])
        np.compress(new, gap_end, out=ge[k:k + m])
        k += m
    if reach.value < hi:
        gs[k], ge[k] = reach.value, hi
        k += 1
    return spill.cut(gs, k), spill.cut(ge, k)  # no view of either exists: shrinking in place is safe


def overlap_by_name(gap_start: np.ndarray, gap_end: np.ndarray, start: np.ndarray, end: np.ndarray,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gap index, interval index, overlap ns) for every interval overlapping a gap, by interval index.

    ``gap_*`` must be sorted and disjoint (as :func:`profiler.capture.intervals.gaps` returns them). The
    intervals are taken a block at a time: the search positions of millions of calls are never all held.
    """
    parts = [_overlaps(gap_start, gap_end, start[sl], end[sl], sl.start) for sl in blockwise.blocks(len(start))]
    if len(parts) == 1 or not parts:
        return parts[0] if parts else _overlaps(gap_start, gap_end, start, end, 0)
    g, q, ov = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return g, q, ov


def _overlaps(gap_start: np.ndarray, gap_end: np.ndarray, start: np.ndarray, end: np.ndarray, first: int,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`overlap_by_name` of one block of intervals, the first of which has index ``first``."""
    lo = np.searchsorted(gap_end, start, "right")
    hi = np.searchsorted(gap_start, end, "left")
    span = hi - lo
    if len(span) and span.max() <= 1:  # no interval reaches over two gaps (the usual case): no expansion
        q = np.flatnonzero(span > 0)
        g = lo[q]
    else:
        q, g = expand(lo, hi)
    ov = np.minimum(end[q], gap_end[g]) - np.maximum(start[q], gap_start[g])
    keep = ov > 0
    return g[keep], q[keep] + first, ov[keep]


# ----------------------------------------------------------------------------- outlier causes

CAUSES = {
    "host_stall": "an OS runtime call (sleep, lock, I/O) inside the range",
    "slow_gpu": "a slower GPU phase (more kernel time than usual)",
    "memory_copy": "a memory copy that took longer than usual",
    "synchronization": "a synchronisation call that blocked longer than the GPU work explains",
    "gpu_backlog": ("a synchronisation call that waited for the GPU work queued by earlier instances "
                    "(the host ran ahead of the GPU)"),
    "cuda_api": "CUDA API calls other than copies and synchronisation (lazy module loading, allocation, launches)",
    "host_code": "host code outside CUDA and OS runtime calls",
    "unknown": "nothing in the capture accounts for it",
}
CAUSE_MIN_SHARE = 0.3
"""A component explains an outlier when it grew by at least this share of the wall-time excess."""
BACKLOG_SLACK = 1.2
"""A synchronisation outlier waited for the GPU backlog when it blocked at most this multiple of the GPU work
still queued at its start (the estimate leaves out work of two instances that overlapped on the GPU)."""


def explain_outliers(table: SeriesTable, min_share: float = CAUSE_MIN_SHARE) -> pd.DataFrame:
    """The outlier instances with their cause: which measured component grew the most over its median.

    Components: OS runtime time (``host_stall``), kernel/graph GPU time (``slow_gpu``), copy time
    (``memory_copy``: GPU copy union or memcpy API time, whichever is larger), synchronisation time
    beyond what slower GPU work or copies explain (``synchronization``), other CUDA API time
    (``cuda_api``: lazy module loading on first use, allocation) and the rest of the host time outside
    any CUDA or OS runtime call (``host_code``). The detail names the largest call. A synchronisation
    outlier that blocked no longer than the GPU work still queued by the earlier instances since the
    series last synchronised is ``gpu_backlog``: the host ran ahead and the sync drained the queue.
    """
    inst = table.instances
    cols = ["series_id", "idx", "wall_ms", "excess_ms", "cause", "detail"]
    if inst.empty or not inst["outlier"].any():
        return pd.DataFrame({c: [] for c in cols})
    sid = inst["series_id"].to_numpy()
    copy_ns = np.maximum(inst["copy_ns"].to_numpy(), inst["memcpy_api_ns"].to_numpy())
    host_ns = np.maximum(inst["wall_ns"].to_numpy() - inst["api_ns"].to_numpy() - inst["osrt_ns"].to_numpy(), 0)
    other_api = np.maximum(inst["api_ns"].to_numpy() - inst["sync_ns"].to_numpy() - inst["memcpy_api_ns"].to_numpy(), 0)
    comp = pd.DataFrame({"wall": inst["wall_ns"].to_numpy(), "osrt": inst["osrt_ns"].to_numpy(),
                         "gpu": inst["compute_ns"].to_numpy(), "copy": copy_ns,
                         "sync": inst["sync_ns"].to_numpy(), "api": other_api, "host": host_ns},
                        dtype=np.float64)
    med = comp.groupby(sid).transform("median")
    exc = comp - med
    out_mask = inst["outlier"].to_numpy()
    e = exc[out_mask]
    sync_adj = e["sync"] - e["gpu"].clip(lower=0) - e["copy"].clip(lower=0)
    cand = pd.DataFrame({"host_stall": e["osrt"], "slow_gpu": e["gpu"], "memory_copy": e["copy"],
                         "synchronization": sync_adj, "cuda_api": e["api"], "host_code": e["host"]})
    best = cand.idxmax(axis=1).to_numpy(dtype=object)
    best_val = cand.max(axis=1).to_numpy()
    wall_exc = e["wall"].to_numpy()
    cause = np.where(best_val >= min_share * np.maximum(wall_exc, 1), best, "unknown")
    synced = np.flatnonzero(cause == "synchronization")
    rows = np.flatnonzero(out_mask)[synced]
    backlog_ns, earlier = np.zeros(len(cause)), np.zeros(len(cause), np.int64)
    backlog_ns[synced], earlier[synced] = gpu_backlog(table, rows)
    sync_now = np.zeros(len(cause))
    sync_now[synced] = inst["sync_ns"].to_numpy()[rows]
    drained = (earlier > 0) & (backlog_ns > 0) & (sync_now <= BACKLOG_SLACK * backlog_ns)
    cause = np.where(drained, "gpu_backlog", cause)
    sub = inst[out_mask].reset_index(drop=True)
    details = _cause_details(table, sub, cause, exc[out_mask].reset_index(drop=True), med[out_mask].reset_index(drop=True))
    for i in np.flatnonzero(drained):
        details[i].update(backlog_ms=backlog_ns[i] / 1e6, instances_queued=int(earlier[i]))
    return pd.DataFrame({"series_id": sub["series_id"].to_numpy(), "idx": sub["idx"].to_numpy(),
                         "wall_ms": ms(sub["wall_ns"].to_numpy()), "excess_ms": wall_exc / 1e6,
                         "cause": cause, "detail": details})


def gpu_backlog(table: SeriesTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For instance rows of the table: the GPU work (ns) their series still had queued on their thread when
    each started, and how many earlier instances queued it, counted since the last instance of the series
    on that thread that synchronised.

    The queue is the GPU busy time of those instances and of the instance itself, less the time the host
    spent since that synchronisation (the GPU worked through the queue meanwhile; it drained it at the
    sync): an estimate that assumes the GPU kept busy, as it does while the host runs ahead.
    """
    inst = table.instances
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0), np.zeros(0, np.int64)
    sid = inst["series_id"].to_numpy()
    first, count = table.series["first_row"].to_numpy(), table.series["count"].to_numpy()
    member = np.concatenate([np.arange(first[s], first[s] + count[s]) for s in np.unique(sid[rows])])
    tid, start = inst["tid"].to_numpy()[member], inst["start_ns"].to_numpy()[member]
    member = member[np.lexsort((start, tid, sid[member]))]  # each series' instances per thread, in start order
    tid, start, end = (inst[c].to_numpy()[member] for c in ("tid", "start_ns", "end_ns"))
    n, pos = len(member), np.arange(len(member))
    head = np.ones(n, dtype=bool)
    head[1:] = (sid[member][1:] != sid[member][:-1]) | (tid[1:] != tid[:-1])
    group_first = np.maximum.accumulate(np.where(head, pos, 0))
    synced = np.maximum.accumulate(np.where(inst["sync_count"].to_numpy()[member] > 0, pos, -1))
    prev = np.concatenate([[-1], synced[:-1]])
    prev = np.where(prev >= group_first, prev, -1)  # the last one synchronising before, same series and thread
    seg = np.where(prev >= 0, prev + 1, group_first)
    since_ns = np.maximum(np.where(prev >= 0, start - end[np.maximum(prev, 0)], start - start[group_first]), 0)
    cum = np.concatenate([[0.0], np.cumsum(inst["gpu_busy_ns"].to_numpy()[member], dtype=np.float64)])
    backlog = np.maximum(cum[pos + 1] - cum[seg] - since_ns, 0.0)
    where = np.full(len(inst), -1, dtype=np.int64)
    where[member] = pos
    at = where[rows]
    return backlog[at], at - seg[at]


def _largest_call(table: SeriesTable, sub: pd.DataFrame, which: str, mask_rows: np.ndarray | None = None,
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per instance of ``sub``: (name, duration ns) of the longest top-level call of ``which``."""
    calls = table.osrt if which == "osrt" else table.api
    names = np.full(len(sub), "", dtype=object)
    durs = np.zeros(len(sub), dtype=np.int64)
    for first, stop in pair_chunks(sub, which):  # nested instances share calls: bounded pairs per step
        q, rows = table.members(sub.iloc[first:stop], which)
        q = q + first
        keep = calls.top_level[rows]
        if mask_rows is not None:
            keep &= mask_rows[rows]
        q, rows = q[keep], rows[keep]
        if len(q):
            d = calls.end_ns[rows] - calls.start_ns[rows]
            o = np.lexsort((d, q))
            last = np.ones(len(o), dtype=bool)
            last[:-1] = q[o][1:] != q[o][:-1]
            names[q[o][last]] = calls.name_of(rows[o][last])
            durs[q[o][last]] = d[o][last]
    return names, durs


def pair_chunks(instances: pd.DataFrame, table: str) -> list[tuple[int, int]]:
    """[first, stop) row slices of ``instances`` holding about ``PAIR_CHUNK`` member pairs each."""
    n = len(instances)
    sizes = np.maximum(instances[f"{_PREFIX[table]}_hi"].to_numpy() - instances[f"{_PREFIX[table]}_lo"].to_numpy(), 0)
    cum = np.concatenate([[0], np.cumsum(sizes)])
    out, first = [], 0
    while first < n:
        stop = int(np.searchsorted(cum, cum[first] + PAIR_CHUNK, "right")) - 1
        stop = min(max(stop, first + 1), n)
        out.append((first, stop))
        first = stop
    return out


def _cause_details(table: SeriesTable, sub: pd.DataFrame, cause: np.ndarray, exc: pd.DataFrame,
                   med: pd.DataFrame) -> list[dict[str, Any]]:
    osrt_name, osrt_dur = _largest_call(table, sub, "osrt")
    sync_name, sync_dur = _largest_call(table, sub, "api", table.api.blocking_sync)
    copy_name, copy_dur = _largest_call(table, sub, "api", table.api.category == ApiCategory.memcpy)
    other = ~table.api.blocking_sync & (table.api.category != 4)
    api_name, api_dur = _largest_call(table, sub, "api", other)
    out = []
    for i, c in enumerate(cause):
        d: dict[str, Any] = {"description": CAUSES[c]}
        if c == "host_stall":
            d.update(call=osrt_name[i], call_ms=osrt_dur[i] / 1e6, os_runtime_ms=sub["osrt_ns"].iat[i] / 1e6,
                     typical_os_runtime_ms=med["osrt"].iat[i] / 1e6)
        elif c == "slow_gpu":
            d.update(gpu_compute_ms=sub["compute_ns"].iat[i] / 1e6, typical_gpu_compute_ms=med["gpu"].iat[i] / 1e6)
        elif c == "memory_copy":
            d.update(call=copy_name[i], call_ms=copy_dur[i] / 1e6, copy_ms=float(exc["copy"].iat[i] + med["copy"].iat[i]) / 1e6,
                     typical_copy_ms=med["copy"].iat[i] / 1e6, copy_bytes=int(sub["copy_bytes"].iat[i]))
        elif c in ("synchronization", "gpu_backlog"):
            d.update(call=sync_name[i], call_ms=sync_dur[i] / 1e6, sync_ms=sub["sync_ns"].iat[i] / 1e6,
                     typical_sync_ms=med["sync"].iat[i] / 1e6)
        elif c == "cuda_api":
            d.update(call=api_name[i], call_ms=api_dur[i] / 1e6,
                     cuda_api_ms=float(exc["api"].iat[i] + med["api"].iat[i]) / 1e6,
                     typical_cuda_api_ms=med["api"].iat[i] / 1e6)
        elif c == "host_code":
            d.update(host_ms=float(exc["host"].iat[i] + med["host"].iat[i]) / 1e6, typical_host_ms=med["host"].iat[i] / 1e6)
        out.append(d)
    return out
