"""Where a device's launching threads were during its idle gaps, the evidence ``gpu_idle`` reports: the
time their CUDA and OS runtime calls and NVTX ranges overlap the gaps (by name, and per gap for the few
gaps a finding lists) and the time no call covers.

Launch-bound and OS-runtime-heavy captures hold tens of millions of calls. Every pass here reads the call
tables a block of rows at a time and keeps only sums (per name, per listed gap, and per gap the furthest
end its calls reached), so no temporary grows with the number of calls in the gaps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import blockwise, intervals
from profiler.capture import summary as SM
from profiler.capture.series import HostCalls, SeriesTable, Sorted
from profiler.rules.capture import _common
from profiler.rules.context import CaptureContext

_FEW_THREADS = 8
"""Up to this many launching threads, a call's thread is matched by comparisons (np.isin would build
temporaries the size of the call table)."""

TOP_NAMES = 8
"""Call names (and NVTX ranges) listed per kind in the evidence, longest first."""


def host_during(ctx: CaptureContext, d: SM.DeviceGaps, gs: np.ndarray, ge: np.ndarray,
                detail: np.ndarray | None = None) -> tuple[dict, dict[int, dict], np.ndarray]:
    """Where the launching threads were during the gaps ``[gs, ge)``: API, OS runtime and NVTX time
    overlapping them (the evidence), per-gap detail, and the NVTX time (ns) per series id.

    ``per_gap`` (gap index -> call kind -> call name -> ms inside that gap) holds only the gaps in
    ``detail`` (all when None): the finding lists a few top gaps.
    """
    table = ctx.table
    want = np.ones(len(gs), dtype=bool) if detail is None else np.isin(np.arange(len(gs)), detail)
    per_gap: dict[int, dict[str, dict[str, int]]] = {int(i): {} for i in np.flatnonzero(want)}  # ns
    agg: dict[str, Any] = {}
    for label, calls in (("cuda_api", table.api), ("os_runtime", table.osrt)):
        agg[label] = _time_by_name(calls, d.launch_tids, gs, ge, per_gap, label, want)
    nvtx, ranges_ns = _nvtx_during(ctx, d.launch_tids, gs, ge)
    if nvtx is not None:
        agg["nvtx"] = nvtx
    in_calls = covered_ns(table, d.launch_tids, gs, ge)
    agg["outside_cuda_and_os_calls_ms"] = max(float((ge - gs).sum()) - in_calls, 0.0) / 1e6
    per_gap_ms = {i: {label: {name: ns / 1e6 for name, ns in where.items()} for label, where in by_label.items()}
                  for i, by_label in per_gap.items()}
    return agg, per_gap_ms, ranges_ns


def on_threads(tid: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """``np.isin(tid, tids)``, by comparisons when the threads are few."""
    if len(tids) > _FEW_THREADS:
        return np.isin(tid, tids)
    out = np.zeros(len(tid), dtype=bool)
    for t in np.unique(tids).tolist():
        out |= tid == t
    return out


def _time_by_name(calls: HostCalls, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray, per_gap: dict[int, dict],
                  label: str, want: np.ndarray) -> dict[str, float]:
    """The ``TOP_NAMES`` call names of ``calls`` that the threads ``tids`` spend longest in inside the gaps
    (ms, top-level calls only), read ``CALL_BLOCK`` rows at a time; each wanted gap's overlap per name is
    added into ``per_gap[gap][label]`` as the blocks go."""
    sums = np.zeros(len(calls.names), np.int64)
    for sl in blockwise.blocks(len(calls), _common.CALL_BLOCK):
        blk = sl.start + np.flatnonzero(calls.top_level[sl] & on_threads(calls.tid[sl], tids))
        g, q, ov = SM.overlap_by_name(gs, ge, calls.start_ns[blk], calls.end_ns[blk])
        rows = blk[q]
        del q, blk
        # per name code; float sums of integer ns are exact below 2**53 ns (104 days) per name
        sums += np.bincount(calls.name_code[rows], weights=ov, minlength=len(sums)).astype(np.int64)
        _add_per_gap(per_gap, label, calls, g, rows, ov, want)
    present = np.flatnonzero(sums > 0)  # every overlap is positive: the names that overlap a gap
    if not len(present):
        return {}
    # then by name (codes can share a name)
    s = pd.Series(sums[present], index=calls.names[present]).groupby(level=0).sum().sort_values(ascending=False)
    return {str(k): v / 1e6 for k, v in s.head(TOP_NAMES).items()}


def _add_per_gap(per_gap: dict[int, dict], label: str, calls: HostCalls, g: np.ndarray, rows: np.ndarray, ov: np.ndarray,
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


def _nvtx_during(ctx: CaptureContext, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray,
                 ) -> tuple[dict[str, float] | None, np.ndarray]:
    """The NVTX ranges of the threads ``tids`` overlapping the gaps: the ``TOP_NAMES`` longest by label (ms;
    None when no range overlaps, or the capture has none) and the overlap (ns) per series id."""
    table = ctx.table
    inst = table.instances
    ranges_ns = np.zeros(len(table.series))
    if table.window or not len(inst):
        return None, ranges_ns
    sub = inst[np.isin(inst["tid"].to_numpy(), tids)]
    g, q, ov = SM.overlap_by_name(gs, ge, sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy())
    if not len(q):
        return None, ranges_ns
    ranges_ns = np.bincount(sub["series_id"].to_numpy()[q], weights=ov, minlength=len(table.series))
    by_series = np.array([ctx.label(i) for i in range(len(ctx.ranges))], dtype=object)
    labels = by_series[sub["series_id"].to_numpy()[q]]
    s = pd.Series(ov, index=labels).groupby(level=0).sum().sort_values(ascending=False)
    return {str(k): v / 1e6 for k, v in s.head(TOP_NAMES).items()}, ranges_ns


def covered_ns(table: SeriesTable, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> int:
    """Time (ns) inside the gaps ``[gs, ge)`` (sorted, disjoint) that the top-level CUDA and OS runtime calls
    of the threads ``tids`` cover: the length of the union of the calls' pieces in each gap, summed.

    The calls are read as a merge of every (table, thread) stretch of the tables' thread-sorted rows, each
    in start order, in windows of start time: a window takes, from each stretch's block at hand, the calls
    starting by the earliest last start among those blocks. So in each gap the pieces come in order of
    start, window after window, and each window's union adds only what lies beyond the furthest end the
    gap's earlier pieces reached. Exact int64 sums, as one union of all the pieces; held at once: a block
    of calls and the furthest end per gap.
    """
    streams = [s for calls, srt in ((table.api, table.api_sorted), (table.osrt, table.osrt_sorted))
               for s in _thread_stretches(calls, srt, tids)]
    for s in streams:  # a window holds at most CALL_BLOCK calls while there are up to _SHARES stretches
        s.block = max(_common.CALL_BLOCK // max(len(streams), 1), _common.CALL_BLOCK // _SHARES, 1)
    reach = np.full(len(gs), np.iinfo(np.int64).min, dtype=np.int64)  # the furthest end covered per gap
    covered = 0
    while streams:
        lasts = [s.last_start_ns() for s in streams]
        streams = [s for s, last in zip(streams, lasts) if last is not None]
        if streams:
            until_ns = min(last for last in lasts if last is not None)
            covered += _beyond_reach_ns(streams, until_ns, gs, ge, reach)
    return covered


_SHARES = 16
"""A stretch's block is at least this share of ``CALL_BLOCK``, however many threads launch (a window costs
a few numpy calls per stretch)."""


def _beyond_reach_ns(streams: list[_Stretch], until_ns: int, gs: np.ndarray, ge: np.ndarray,
                     reach: np.ndarray) -> int:
    """Take from every stretch the calls starting at or before ``until_ns``; the time (ns) their pieces in
    the gaps cover beyond each gap's ``reach`` (the furthest end of the gap's pieces so far, all starting
    no later than these), which is moved on to the pieces' ends."""
    starts, ends = [], []
    for s in streams:
        rows = s.take_until(until_ns)
        starts.append(s.calls.start_ns[rows])
        ends.append(s.calls.end_ns[rows])
    start, end = np.concatenate(starts), np.concatenate(ends)
    del starts, ends
    g, q, _ = SM.overlap_by_name(gs, ge, start, end)
    if not len(g):
        return 0
    g, us, ue = intervals.union_by_group(g, np.maximum(start[q], gs[g]), np.minimum(end[q], ge[g]))
    added = ue - np.maximum(us, reach[g])
    np.maximum(added, 0, out=added)
    heads = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))  # union pieces come by gap, then start
    gh = g[heads]
    reach[gh] = np.maximum(reach[gh], np.maximum.reduceat(ue, heads))
    return int(added.sum())


class _Stretch:
    """One thread's calls of one table in start order: its stretch ``[first, stop)`` of the table's rows
    sorted by (thread, start), read a block of rows at a time. ``rows``/``start_ns`` hold the part of the
    block at hand not taken yet."""

    def __init__(self, calls: HostCalls, srt: Sorted, first: int, stop: int):
        """The stretch ``[first, stop)`` of ``srt``'s positions, none of it read yet."""
        self.calls, self.srt = calls, srt
        self.next, self.stop, self.block = first, stop, _common.CALL_BLOCK
        self.rows = np.zeros(0, np.int64)
        self.start_ns = np.zeros(0, np.int64)

    def last_start_ns(self) -> int | None:
        """The start of the last call of the block at hand (the next block is read once that one is all
        taken); None when the stretch is all taken."""
        if not len(self.rows):
            if self.next >= self.stop:
                return None
            stop = min(self.next + self.block, self.stop)
            self.rows = self.srt.rows(np.arange(self.next, stop))
            self.start_ns = self.calls.start_ns[self.rows]
            self.next = stop
        return int(self.start_ns[-1])

    def take_until(self, until_ns: int) -> np.ndarray:
        """The top-level calls (rows) of the block at hand that start at or before ``until_ns``, taken."""
        k = int(np.searchsorted(self.start_ns, until_ns, "right"))
        rows = self.rows[:k]
        self.rows, self.start_ns = self.rows[k:], self.start_ns[k:]
        return rows[self.calls.top_level[rows]]


def _thread_stretches(calls: HostCalls, srt: Sorted, tids: np.ndarray) -> list[_Stretch]:
    """The stretches of the threads ``tids`` (those with calls) in ``srt``, the table's rows sorted by
    thread, then start: a thread's stretch begins after the rows of every lower thread id, so counting the
    rows below and up to each thread (a block of rows at a time) places it."""
    u = np.unique(np.asarray(tids, dtype=np.int64))
    below = np.zeros(len(u) + 1, np.int64)  # below[j]: rows of thread ids under u[j]; through[j]: up to u[j]
    through = np.zeros(len(u) + 1, np.int64)
    for sl in blockwise.blocks(len(calls), _common.CALL_BLOCK):
        below += np.bincount(np.searchsorted(u, calls.tid[sl], "right"), minlength=len(u) + 1)
        through += np.bincount(np.searchsorted(u, calls.tid[sl], "left"), minlength=len(u) + 1)
    below, through = np.cumsum(below)[:-1], np.cumsum(through)[:-1]
    out = []
    for t, first, stop in zip(u.tolist(), below.tolist(), through.tolist()):
        if stop > first:
            if calls.tid[srt.rows(np.array([first, stop - 1]))].tolist() != [t, t]:
                raise RuntimeError("the call table's sorted rows are not in thread order")
            out.append(_Stretch(calls, srt, first, stop))
    return out
