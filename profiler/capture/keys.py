"""(thread, time) keys and the sorted orders built on them: one ``numpy.searchsorted`` attributes millions
of rows to their thread's windows without a Python loop over rows or threads; sums over windows of
sorted positions."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pandas as pd

class ThreadKeys:
    """Order-preserving int64 keys for (thread, time) pairs.

    key = thread_code << shift | (time - t0): sorting by key sorts by thread then time, and a
    per-thread search becomes one global ``searchsorted``. When threads x time span would not fit
    in 62 bits, times are replaced by their rank among every time given at construction (so the
    queries must be among them), which keeps the order and the sweep exact.
    """

    def __init__(self, tids: Iterable[np.ndarray], times: Iterable[np.ndarray]):
        tids = [np.asarray(t, dtype=np.int64) for t in tids]
        times = [np.asarray(t, dtype=np.int64) for t in times]
        # distinct threads of each array first (hashing, no sorted copy of millions of ids)
        self.utids = np.unique(np.concatenate([pd.unique(t) for t in tids])) if tids else np.zeros(0, np.int64)
        nonempty = [t for t in times if len(t)]
        self._ranks: np.ndarray | None = None
        if not nonempty:
            self.t0, self.shift = 0, 1
            return
        t0 = min(int(t.min()) for t in nonempty)
        t1 = max(int(t.max()) for t in nonempty)
        shift = max(int(t1 - t0 + 1).bit_length(), 1)
        if shift + max(len(self.utids), 1).bit_length() > 62:
            self._ranks = np.unique(np.concatenate(nonempty))
            t0, shift = 0, max(len(self._ranks).bit_length(), 1)
        self.t0, self.shift = t0, shift

    def code(self, tid: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.utids, np.asarray(tid, dtype=np.int64)).astype(np.int64, copy=False)

    def key(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        key = self.code(tid)
        key <<= self.shift
        if self._ranks is not None:
            key += np.searchsorted(self._ranks, t)
        else:
            key += t
            key -= self.t0
        return key

    def shifted(self, key: np.ndarray, t_from: np.ndarray, t_to: np.ndarray) -> np.ndarray:
        """The keys of (thread, ``t_to``) from those of (thread, ``t_from``), without looking threads up:
        the time is the key's low bits (when times are ranks, they are looked up again)."""
        if self._ranks is not None:
            return (key >> self.shift << self.shift) + np.searchsorted(self._ranks, np.asarray(t_to, dtype=np.int64))
        return key + (np.asarray(t_to, dtype=np.int64) - t_from)


ROW_CHUNK = 1 << 18
"""Rows per step where a pass over millions of rows is walked in chunks to bound its temporaries."""


def blocks(n: int, rows: int | None = None) -> list[slice]:
    """``[0, n)`` as consecutive slices of at most ``rows`` (default ``ROW_CHUNK``) rows, in order."""
    rows = rows or ROW_CHUNK
    return [slice(lo, min(lo + rows, n)) for lo in range(0, n, rows)]


def row_index(rows: np.ndarray) -> np.ndarray:
    """Row numbers as int32 when they fit (half the memory of the millions-long permutations)."""
    return rows.astype(np.int32, copy=False) if len(rows) < 1 << 31 else rows


class Sorted:
    """Rows of one table sorted by (thread, start), with their keys and the permutation used. The keys
    serve while the series table is built (windows, nesting of calls) and are then let go (None).

    Rows already in that order (one thread calling in start order: ``identity``) keep no permutation:
    :meth:`take`, :meth:`part` and :meth:`rows` then gather nothing, and :attr:`order` is made on demand.
    """

    def __init__(self, order: np.ndarray | None, key: np.ndarray | None, identity: bool = False, n: int = 0):
        if order is None and not identity:
            raise ValueError("Sorted needs the permutation unless the rows are already in order (identity=True)")
        self.key = key
        self.identity = identity
        self.n = n if order is None else len(order)
        self._order = None if identity else order

    def __len__(self) -> int:
        return self.n

    @property
    def order(self) -> np.ndarray:
        """The permutation (row of each sorted position). For an identity it is made anew on each read (a
        row-length arange): the analysis never reads it there (``rows``, ``part`` and ``take`` gather
        nothing; a test checks it), so it is not kept; it is for tests and inspection."""
        return np.arange(self.n, dtype=np.int32 if self.n < 1 << 31 else np.int64) if self._order is None \
            else self._order

    def rows(self, pos: np.ndarray) -> np.ndarray:
        """The rows at sorted positions ``pos``."""
        return pos if self._order is None else self._order[pos]

    def take(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per row) in sorted order: the array itself when ``identity`` (do not write into
        it), else a new one."""
        return values if self._order is None else values[self._order]

    def part(self, values: np.ndarray, first: int, stop: int) -> np.ndarray:
        """``take(values)[first:stop]`` without the whole gather (a view when ``identity``)."""
        return values[first:stop] if self._order is None else values[self._order[first:stop]]

    def window(self, qkey_lo: np.ndarray, qkey_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions [lo, hi) of the rows whose key lies in [qkey_lo, qkey_hi]."""
        return (np.searchsorted(self.key, qkey_lo, "left"), np.searchsorted(self.key, qkey_hi, "right"))


def expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query index, position) pairs for every position in each [lo, hi) window."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    q = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    first = np.cumsum(n) - n
    pos = np.arange(total, dtype=np.int64) - np.repeat(first - lo, n)
    return q, pos


def sort_by_thread(keys: ThreadKeys, tid: np.ndarray, t: np.ndarray, later_first: np.ndarray | None = None
                   ) -> Sorted:
    """Rows sorted by (thread, time); equal keys ordered by ``later_first`` descending (only the tied rows
    are re-sorted). Rows already in key order (one thread, calls in start order) are not sorted again."""
    key = keys.key(tid, t)
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        order, ks = None, key
    else:
        order = row_index(np.argsort(key, kind="stable"))  # int32 before the gather: one less int64 column held
        ks = key[order]
    del key
    if later_first is not None and len(ks) > 1:
        tie = ks[1:] == ks[:-1]
        if tie.any():
            pos = np.flatnonzero(np.concatenate([tie, [False]]) | np.concatenate([[False], tie]))
            sub = pos if order is None else order[pos]
            resorted = sub[np.lexsort((-later_first[sub], ks[pos]))]
            if order is None and (resorted != sub).any():
                order = row_index(np.arange(len(ks)))
            if order is not None:
                order[pos] = resorted
    if order is None:
        return Sorted(order=None, key=ks, identity=True, n=len(ks))
    return Sorted(order=row_index(order), key=ks)


class WindowSums:
    """Sums of per-row values over windows ``[lo, hi)`` of sorted positions (the instances' member rows).

    The windows' distinct edges cut the rows into segments; each column costs one ``np.add.reduceat``
    over those segments per block of ``ROW_CHUNK`` positions, so no column is ever made at full length
    (:meth:`columns` takes a function that makes a block of them). Sums are exact int64.
    """

    def __init__(self, lo: np.ndarray, hi: np.ndarray, n: int):
        self.n = int(n)
        lo = np.clip(np.asarray(lo, dtype=np.int64), 0, self.n)
        hi = np.clip(np.asarray(hi, dtype=np.int64), 0, self.n)
        edges = np.unique(np.concatenate(([0], lo, hi)))
        self.cut = edges[edges < self.n]  # first row of each segment
        self.ilo, self.ihi = np.searchsorted(edges, lo), np.searchsorted(edges, hi)

    def __call__(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Per window: the sum of ``values`` (in sorted order), over the rows where ``mask`` holds if given."""
        def block(first: int, stop: int) -> list[np.ndarray]:
            part = values[first:stop]
            return [part if mask is None else np.where(mask[first:stop], part, 0)]

        return self.columns(block, 1)[0]

    def columns(self, block: Callable[[int, int], list[np.ndarray]], k: int) -> list[np.ndarray]:
        """Per window, the sums of ``k`` per-row columns (int64 values or bool counts) that
        ``block(first, stop)`` makes for sorted positions [first, stop), a block at a time; a block's rows
        before its first segment start belong to the segment already open."""
        seg = np.zeros((k, len(self.cut)), dtype=np.int64)
        for sl in blocks(self.n):
            i0, i1 = (int(i) for i in np.searchsorted(self.cut, [sl.start, sl.stop]))
            starts = self.cut[i0:i1] - sl.start
            carry = not len(starts) or starts[0] > 0
            if carry:
                starts = np.concatenate(([0], starts))
            for j, column in enumerate(block(sl.start, sl.stop)):
                part = np.add.reduceat(column, starts, dtype=np.int64)
                if carry:
                    seg[j, i0 - 1] += part[0]
                seg[j, i0:i1] += part[1:] if carry else part
        prefix = np.zeros((k, len(self.cut) + 1), dtype=np.int64)
        np.cumsum(seg, axis=1, out=prefix[:, 1:])
        return list(prefix[:, self.ihi] - prefix[:, self.ilo])


def nesting(keys: ThreadKeys, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (0 = outermost on its thread) and parent instance (-1 = none) of each range instance.

    NVTX exports do not store nesting; it is rebuilt per thread from start/end by one sweep over
    start/end events (ends before starts at the same time, outer starts before inner ones).
    """
    n = len(tid)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ks, ke = keys.key(tid, start), keys.key(tid, end)
    ev_key = np.concatenate([ks, ke])
    zero = ke == ks
    ev_type = np.concatenate([np.ones(n, np.int64), np.where(zero, 2, 0)])  # 0 end, 1 start, 2 end of empty
    ev_tie = np.concatenate([-(end - start), np.zeros(n, np.int64)])
    ev_inst = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((ev_inst, ev_tie, ev_type, ev_key))
    step = np.where(ev_type[order] == 1, 1, -1)
    before = np.cumsum(step) - step
    is_start = ev_type[order] == 1
    pos = np.flatnonzero(is_start)
    inst_of = ev_inst[order][is_start]
    depth_at = before[is_start]
    depth = np.empty(n, np.int64)
    depth[inst_of] = depth_at
    m = len(order) + 1
    key2 = depth_at * m + pos
    srt = np.argsort(key2, kind="stable")
    j = np.searchsorted(key2[srt], (depth_at - 1) * m + pos) - 1
    ok = (depth_at > 0) & (j >= 0)
    jj = srt[np.clip(j, 0, None)]
    ok &= depth_at[jj] == depth_at - 1
    parent = np.full(n, -1, np.int64)
    parent[inst_of[ok]] = inst_of[jj[ok]]
    return np.maximum(depth, 0), parent
