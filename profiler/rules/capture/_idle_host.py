"""Where a device's launching threads were during its idle gaps, the evidence ``gpu_idle`` reports: the
time their CUDA and OS runtime calls and NVTX ranges overlap the gaps (by name, and per gap for the few
gaps a finding lists) and the time no call covers.

Launch-bound and OS-runtime-heavy captures hold tens of millions of calls. The calls are read once, as a
merge of every launching thread's calls of each table in start order, a window of start time at a time
(:func:`call_windows`), and only sums are kept (:class:`_HostTally`: per name, per listed gap and name,
and per gap the furthest end its calls reached), so no temporary grows with the number of calls.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import blockwise
from profiler.capture import summary as SM
from profiler.capture.keys import expand
from profiler.capture.series import HostCalls, SeriesTable, Sorted
from profiler.rules.capture import _common
from profiler.capture.context import CaptureContext

TOP_NAMES = 8
"""Call names (and NVTX ranges) listed per kind in the evidence, longest first."""

LABELS = ("cuda_api", "os_runtime")
"""The evidence's names for the call tables (``SeriesTable.api``, ``SeriesTable.osrt``), in its order."""

_SHARES = 16
"""A stretch's block is at least this share of ``CALL_BLOCK``, however many threads launch (a window costs
a few numpy calls per stretch)."""


def host_during(ctx: CaptureContext, d: SM.DeviceGaps, gs: np.ndarray, ge: np.ndarray,
                detail: np.ndarray | None = None) -> tuple[dict, dict[int, dict], np.ndarray]:
    """Where the launching threads were during the gaps ``[gs, ge)``: API, OS runtime and NVTX time
    overlapping them (the evidence), per-gap detail, and the NVTX time (ns) per series id.

    ``per_gap`` (gap index -> call kind -> call name -> ms inside that gap) holds only the gaps in
    ``detail`` (all when None): the finding lists a few top gaps.
    """
    table = ctx.table
    want = np.ones(len(gs), dtype=bool) if detail is None else np.isin(np.arange(len(gs)), detail)
    waited = _GapThreads(table.activity, d, ge) if len(d.launch_tids) > 1 else None
    tally = _HostTally(gs, ge, want, {"cuda_api": table.api, "os_runtime": table.osrt}, waited)
    for window in call_windows(table, d.launch_tids):
        tally.add(window)
    agg: dict[str, Any] = {label: tally.top_names(label) for label in LABELS}
    nvtx, ranges_ns = _nvtx_during(ctx, d.launch_tids, gs, ge, waited)
    if nvtx is not None:
        agg["nvtx"] = nvtx
    agg["outside_cuda_and_os_calls_ms"] = max(float((ge - gs).sum()) - tally.covered_ns, 0.0) / 1e6
    return agg, tally.per_gap_ms(), ranges_ns


class _GapThreads:
    """Per gap, the threads that launched the work ending it: the GPU waited for them. ``mine(g, tid)`` says
    whether thread ``tid``'s time counts for gap ``g`` (every thread's does where no such work is known)."""

    def __init__(self, act: Any, d: SM.DeviceGaps, ge: np.ndarray):
        """The non-empty activity of ``d``'s device starting exactly at each gap end ``ge``."""
        self.tids = np.unique(np.asarray(d.launch_tids, dtype=np.int64))
        lo, hi = np.searchsorted(act.start_ns, ge, "left"), np.searchsorted(act.start_ns, ge, "right")
        q, rows = expand(lo, hi)  # every row starting at a gap's end, on any device
        ok = (act.device_id[rows] == d.device_id) & (act.end_ns[rows] > act.start_ns[rows]) & (act.api_tid[rows] >= 0)
        q, tid = q[ok], act.api_tid[rows[ok]]
        self.known = np.zeros(len(ge), dtype=bool)
        self.known[q] = True
        self.keys = np.unique(self._key(q, tid))

    def _key(self, g: np.ndarray, tid: np.ndarray) -> np.ndarray:
        code = np.minimum(np.searchsorted(self.tids, tid), max(len(self.tids) - 1, 0))
        return g.astype(np.int64) * max(len(self.tids), 1) + code

    def mine(self, g: np.ndarray, tid: np.ndarray) -> np.ndarray:
        return ~self.known[g] | np.isin(self._key(g, tid), self.keys)


class _HostTally:
    """What the evidence needs from the calls in the gaps ``[gs, ge)`` (sorted, disjoint), summed window by
    window: the overlap (ns) per call name code of each table, per wanted gap and call name (with the
    call's first row, which orders the names as the table does), and the union of the calls' pieces in
    each gap (``covered_ns``, with the furthest end each gap's pieces reached so far).

    With several launching threads, only the calls of the threads that launched the work ending a gap count
    for it (``waited``): while one thread waits on a condition variable for another (PyTorch's main thread
    during the backward pass), the GPU waits for the other, and the wait is no cause."""

    def __init__(self, gs: np.ndarray, ge: np.ndarray, want: np.ndarray, tables: dict[str, HostCalls],
                 waited: _GapThreads | None = None):
        """No calls yet; ``want`` marks the gaps whose time per call name is kept."""
        self.gs, self.ge, self.want, self.tables, self.waited = gs, ge, want, tables, waited
        self.by_code = {label: np.zeros(len(calls.names), np.int64) for label, calls in tables.items()}
        self.per_gap: dict[int, dict[str, dict[str, list[int]]]] = {int(i): {} for i in np.flatnonzero(want)}
        self.reach = np.full(len(gs), blockwise.NO_REACH, dtype=np.int64)
        self.covered_ns = 0

    def add(self, window: dict[str, np.ndarray]) -> None:
        """Add the calls ``window`` (rows per table label), all starting no earlier than those added before."""
        pieces = []
        for label, rows in window.items():
            calls = self.tables[label]
            start, end = calls.start_ns[rows], calls.end_ns[rows]
            g, q, ov = SM.overlap_by_name(self.gs, self.ge, start, end)
            if self.waited is not None:  # the calls of the threads the gap waited for
                mine = self.waited.mine(g, calls.tid[rows[q]])
                g, q, ov = g[mine], q[mine], ov[mine]
            rows = rows[q]
            # per name code; float sums of integer ns are exact below 2**53 ns (104 days) per name
            self.by_code[label] += np.bincount(calls.name_code[rows], weights=ov,
                                               minlength=len(self.by_code[label])).astype(np.int64)
            self._add_per_gap(label, calls, g, rows, ov)
            pieces.append((g, np.maximum(start[q], self.gs[g]), np.minimum(end[q], self.ge[g])))
        if pieces:
            self.covered_ns += self._beyond_reach_ns(*(np.concatenate(p) for p in zip(*pieces)))

    def _beyond_reach_ns(self, g: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> int:
        """The time (ns) the pieces ``[ps, pe)`` of gaps ``g`` cover beyond what the gaps' earlier pieces
        (all starting no later) covered; the gaps' reach is moved on to the pieces' ends."""
        if not len(g):
            return 0
        order = np.argsort(ps, kind="stable")  # by start, so by gap too: a gap's pieces lie inside it
        g, ps, pe = g[order], ps[order], pe[order]
        # the furthest end before each piece, of this window's and of its gap's earlier windows' pieces (an
        # earlier gap's pieces end before this gap starts, so they never count)
        before = blockwise.Reach().before_each(pe)
        np.maximum(before, self.reach[g], out=before)
        np.maximum(before, ps, out=before)
        np.subtract(pe, before, out=before)
        last = np.flatnonzero(np.append(g[1:] != g[:-1], True))  # each gap's last piece reaches furthest
        self.reach[g[last]] = np.maximum(self.reach[g[last]], np.maximum.accumulate(pe)[last])
        return int(before.sum(where=before > 0))

    def _add_per_gap(self, label: str, calls: HostCalls, g: np.ndarray, rows: np.ndarray, ov: np.ndarray) -> None:
        """Add each wanted gap's overlap (ns) per call name, and the name's first row, into ``per_gap``:
        exact sums per (gap, name code) first, so a gap overlapping many calls costs no per-call Python."""
        sel = np.flatnonzero(self.want[g])
        if not len(sel):
            return
        n_codes = max(len(calls.names), 1)
        key = g[sel].astype(np.int64) * n_codes + calls.name_code[rows[sel]]
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.ravel()
        sums = np.bincount(inv, weights=ov[sel], minlength=len(uniq))
        first = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, inv, rows[sel])
        for k in range(len(uniq)):
            gi, code = divmod(int(uniq[k]), n_codes)
            entry = self.per_gap[gi].setdefault(label, {}).setdefault(calls.names[code], [0, int(first[k])])
            entry[0] += int(sums[k])  # ns, made ms once all windows are in
            entry[1] = min(entry[1], int(first[k]))

    def top_names(self, label: str) -> dict[str, float]:
        """The ``TOP_NAMES`` call names of table ``label`` longest inside the gaps (ms)."""
        sums, names = self.by_code[label], self.tables[label].names
        present = np.flatnonzero(sums > 0)  # every overlap is positive: the names that overlap a gap
        if not len(present):
            return {}
        # then by name (codes can share a name)
        s = pd.Series(sums[present], index=names[present]).groupby(level=0).sum().sort_values(ascending=False)
        return {str(k): v / 1e6 for k, v in s.head(TOP_NAMES).items()}

    def per_gap_ms(self) -> dict[int, dict[str, dict[str, float]]]:
        """Wanted gap -> call kind -> call name -> ms inside the gap, names in the order of their first row."""
        return {gi: {label: {name: ns / 1e6 for name, (ns, _) in sorted(by_label[label].items(), key=lambda kv: kv[1][1])}
                     for label in LABELS if label in by_label}
                for gi, by_label in self.per_gap.items()}


def _nvtx_during(ctx: CaptureContext, tids: np.ndarray, gs: np.ndarray, ge: np.ndarray,
                 waited: _GapThreads | None = None) -> tuple[dict[str, float] | None, np.ndarray]:
    """The NVTX ranges of the threads ``tids`` (of each gap's ``waited`` threads, when given) overlapping the
    gaps: the ``TOP_NAMES`` longest by label (ms; None when no range overlaps, or the capture has none) and
    the overlap (ns) per series id."""
    table = ctx.table
    inst = table.instances
    ranges_ns = np.zeros(len(table.series))
    if table.window or not len(inst):
        return None, ranges_ns
    sub = inst[np.isin(inst["tid"].to_numpy(), tids)]
    g, q, ov = SM.overlap_by_name(gs, ge, sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy())
    if waited is not None:
        mine = waited.mine(g, sub["tid"].to_numpy()[q])
        g, q, ov = g[mine], q[mine], ov[mine]
    if not len(q):
        return None, ranges_ns
    ranges_ns = np.bincount(sub["series_id"].to_numpy()[q], weights=ov, minlength=len(table.series))
    by_series = np.array([ctx.label(i) for i in range(len(ctx.ranges))], dtype=object)
    labels = by_series[sub["series_id"].to_numpy()[q]]
    s = pd.Series(ov, index=labels).groupby(level=0).sum().sort_values(ascending=False)
    return {str(k): v / 1e6 for k, v in s.head(TOP_NAMES).items()}, ranges_ns


def call_windows(table: SeriesTable, tids: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
    """The top-level CUDA API and OS runtime calls of the threads ``tids`` (rows per label of ``LABELS``)
    in windows of start time, every call of a window starting no earlier than those of the windows before.

    A merge of every (table, thread) stretch of the tables' thread-sorted rows, each in start order: a
    window takes, from each stretch's block at hand, the calls starting by the earliest last start among
    those blocks. A window holds at most ``CALL_BLOCK`` calls while up to ``_SHARES`` stretches are read.
    """
    stretches = [s for label, calls, srt in (("cuda_api", table.api, table.api_sorted),
                                             ("os_runtime", table.osrt, table.osrt_sorted))
                 for s in _thread_stretches(label, calls, srt, tids)]
    for s in stretches:
        s.block = max(_common.CALL_BLOCK // len(stretches), _common.CALL_BLOCK // _SHARES, 1)
    while stretches:
        lasts = [s.last_start_ns() for s in stretches]
        stretches = [s for s, last in zip(stretches, lasts) if last is not None]
        if not stretches:
            return
        until_ns = min(last for last in lasts if last is not None)
        parts: dict[str, list[np.ndarray]] = {}
        for s in stretches:
            parts.setdefault(s.label, []).append(s.take_until(until_ns))
        yield {label: np.concatenate(p) for label, p in parts.items()}


class _Stretch:
    """One thread's calls of one table in start order: its stretch ``[first, stop)`` of the table's rows
    sorted by (thread, start), read a block of rows at a time. ``rows``/``start_ns`` hold the part of the
    block at hand not taken yet."""

    def __init__(self, label: str, calls: HostCalls, srt: Sorted, first: int, stop: int):
        """The stretch ``[first, stop)`` of ``srt``'s positions, none of it read yet."""
        self.label, self.calls, self.srt = label, calls, srt
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


def _thread_stretches(label: str, calls: HostCalls, srt: Sorted, tids: np.ndarray) -> list[_Stretch]:
    """The stretches of the threads ``tids`` that have calls in ``srt``, the table's rows sorted by thread
    id, then start: each found by bisection over the thread ids in sorted order."""
    def tid_at(pos: int) -> int:
        return int(calls.tid[srt.rows(pos)])

    out = []
    for t in np.unique(np.asarray(tids, dtype=np.int64)).tolist():
        first = bisect.bisect_left(range(len(srt)), t, key=tid_at)
        stop = bisect.bisect_right(range(len(srt)), t, key=tid_at)
        if stop > first:
            out.append(_Stretch(label, calls, srt, first, stop))
    return out
