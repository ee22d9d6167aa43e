"""Per-row passes over the GPU activity a block of rows at a time, for the tables built from it.

Long captures hold millions of activities. A union of some of them built with whole-array masks and
copies holds several row-length temporaries at once (60-100 MB for 1.26 M rows); the passes here hold a
few blocks of ``BLOCK_ROWS`` rows instead and give exactly what the whole-array computation gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Callable

import numpy as np
import pandas as pd

from profiler.capture import intervals, keys

BLOCK_ROWS = keys.ROW_CHUNK
"""Rows per block (the capture's one row-chunk size; a module constant so tests can cross block boundaries)."""


DISTINCT_BLOCK_ROWS = 1 << 16
"""Rows per block of :func:`distinct` (its hash table is sized by the block)."""


def blocks(n: int, rows: int | None = None) -> Iterator[slice]:
    """``[0, n)`` as consecutive slices of at most ``rows`` (default ``BLOCK_ROWS``, read at the call) rows,
    in order, made as they are walked: :func:`profiler.capture.keys.blocks` lists them, every caller of this
    one walks them once."""
    step = rows or BLOCK_ROWS
    return (slice(lo, min(lo + step, n)) for lo in range(0, n, step))


NO_REACH = np.iinfo(np.int64).min
"""The reach before any row: no time is covered yet."""


class Reach:
    """The furthest end of the rows swept so far, carried from block to block of rows in start order.

    Invariant: once :meth:`before_each` has been given the ends of blocks 0..b (each block once, in row
    order), ``value`` is the largest of the initial reach and every end given, and the arrays it returned
    are, joined, ``max(initial, np.maximum.accumulate(ends)[i - 1])`` for row i (the initial reach for row
    0): the same as one whole-length pass, with no row-length temporary."""

    def __init__(self, initial: int = NO_REACH):
        self.value = int(initial)

    def before_each(self, ends: np.ndarray) -> np.ndarray:
        """The reach before each row of the next block (a new int64 array the caller may write into): the
        largest of the carried reach and the ends of the block's earlier rows. The block is then carried."""
        before = np.empty(len(ends), dtype=np.int64)
        if len(ends):
            before[0] = self.value
            np.maximum.accumulate(ends[:-1], out=before[1:])
            np.maximum(before, self.value, out=before)
            self.value = max(int(before[-1]), int(ends[-1]))
        return before


def in_start_order(start: np.ndarray, known: bool | None = None) -> bool:
    """Whether the rows are sorted by ``start``: ``known`` when the caller says (True for an Activity from
    :func:`~profiler.capture.activity.build_activity` and its subsets), else checked a block at a time (no
    row-length mask; stops at the first block out of order)."""
    if known is not None:
        return known
    for sl in blocks(len(start)):
        s = start[max(sl.start - 1, 0):sl.stop]  # one row of overlap: the boundary counts
        if not (s[1:] >= s[:-1]).all():
            return False
    return True


def union_lengths(start: np.ndarray, end: np.ndarray, group_of: Callable[[slice], np.ndarray],
                  n_groups: int, sorted_by_start: bool | None = None) -> np.ndarray:
    """Union length (ns, int64) of the intervals ``[start, end)`` of each group ``0..n_groups-1``, where
    ``group_of(rows)`` labels the rows of a block (a slice) and -1 leaves a row out.

    Rows sorted by start are swept a block at a time, each row or piece adding what lies beyond its
    group's reach so far: exact int64 sums, the same as one union per group of all its rows. Rows out of
    start order are taken in one pass; ``sorted_by_start`` is :func:`in_start_order`'s ``known``."""
    if not in_start_order(start, sorted_by_start):
        g = group_of(slice(0, len(start)))
        keep = g >= 0
        return intervals.union_length_by_group(g[keep], start[keep], end[keep], n_groups)
    if n_groups == 1:
        return np.array([_swept_length(start, end, group_of)], dtype=np.int64)
    return _grouped_lengths(start, end, group_of, n_groups)


def _grouped_lengths(start: np.ndarray, end: np.ndarray, group_of: Callable[[slice], np.ndarray],
                     n_groups: int) -> np.ndarray:
    """:func:`union_lengths` of rows sorted by start, several groups: each block's union pieces per group
    (by group, then start) start no earlier than the group's pieces of the blocks before, so each adds
    what lies beyond the group's reach (the latest end of its earlier pieces), one reach per group.

    Not a :class:`Reach`: the reach before each row within a block is per group (the block's own union
    gives it), and only the reach carried in from earlier blocks is applied here, per piece."""
    total = np.zeros(n_groups, dtype=np.int64)
    reach = np.full(n_groups, NO_REACH, dtype=np.int64)
    for sl in blocks(len(start)):
        g, s, e = _kept(start, end, group_of, sl)
        g, us, ue = intervals.union_by_group(g, s, e)
        if not len(g):
            continue
        heads = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))  # pieces come by group, then start
        gh = g[heads]
        added = ue - np.maximum(us, reach[g])
        np.maximum(added, 0, out=added)
        total[gh] += np.add.reduceat(added, heads)
        reach[gh] = np.maximum(reach[gh], np.maximum.reduceat(ue, heads))
    return total


def _kept(start: np.ndarray, end: np.ndarray, group_of: Callable[[slice], np.ndarray], sl: slice
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, starts, ends) of the block's rows that ``group_of`` does not leave out."""
    g = group_of(sl)
    keep = g >= 0
    if keep.all():
        return g, start[sl], end[sl]
    return g[keep], start[sl][keep], end[sl][keep]


def _swept_length(start: np.ndarray, end: np.ndarray, group_of: Callable[[slice], np.ndarray]) -> int:
    """The union length of one group, rows sorted by start: each row adds what lies beyond the
    :class:`Reach` of the rows before it (an empty or reversed row adds nothing and moves the reach past
    no later start)."""
    total, reach = 0, Reach()
    for sl in blocks(len(start)):
        _, s, e = _kept(start, end, group_of, sl)
        covered = reach.before_each(e)
        np.maximum(covered, s, out=covered)  # the part of each row the rows before it cover ends here
        np.subtract(e, covered, out=covered)
        total += int(covered.sum(where=covered > 0))
    return total


def union_length(start: np.ndarray, end: np.ndarray, keep: Callable[[slice], np.ndarray] | None = None,
                 sorted_by_start: bool | None = None) -> int:
    """:func:`intervals.union_length` of the rows that ``keep(rows)`` (a mask per block; None: all) selects;
    ``sorted_by_start`` as for :func:`union_lengths`."""
    def group_of(sl: slice) -> np.ndarray:
        return np.zeros(sl.stop - sl.start, dtype=np.int8) if keep is None else keep(sl).astype(np.int8) - 1

    return int(union_lengths(start, end, group_of, 1, sorted_by_start)[0])


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D numeric array by sorting: numpy 2's hashing unique took 3.3 s for 2.5 M
    distinct int64 keys on the 2-core machine, where a sort takes a tenth of a second."""
    out = np.sort(values)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def distinct(values: np.ndarray, keep: Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
    """The distinct values of the rows ``keep(rows)`` selects (None: all), sorted (``np.unique``). Hashed a
    block at a time: pandas sizes its hash table by the length of its input (+34 MB for 1.26 M rows)."""
    parts = [pd.unique(values[sl] if keep is None else values[sl][keep(sl)])
             for sl in blocks(len(values), DISTINCT_BLOCK_ROWS)]
    return np.unique(np.concatenate(parts)) if parts else values[:0].copy()
