"""Per-row passes over the GPU activity a block of rows at a time, for the tables built from it.

Long captures hold millions of activities. A union of some of them built with whole-array masks and
copies holds several row-length temporaries at once (60-100 MB for 1.26 M rows); the passes here hold a
few blocks of ``BLOCK_ROWS`` rows instead and give exactly what the whole-array computation gives.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.keys import ROW_CHUNK

BLOCK_ROWS = ROW_CHUNK
"""Rows per block (the capture's one row-chunk size; a module constant so tests can cross block boundaries)."""


DISTINCT_BLOCK_ROWS = 1 << 16
"""Rows per block of :func:`distinct` (its hash table is sized by the block)."""


def blocks(n: int, rows: int | None = None) -> list[slice]:
    """``[0, n)`` as consecutive slices of at most ``rows`` (default ``BLOCK_ROWS``) rows."""
    rows = rows or BLOCK_ROWS
    return [slice(lo, min(lo + rows, n)) for lo in range(0, n, rows)]


def union_lengths(start: np.ndarray, end: np.ndarray, group_of: Callable[[slice], np.ndarray],
                  n_groups: int) -> np.ndarray:
    """Union length (ns, int64) of the intervals ``[start, end)`` of each group ``0..n_groups-1``, where
    ``group_of(rows)`` labels the rows of a block (a slice) and -1 leaves a row out.

    With rows sorted by start, a group's union pieces from one block start no earlier than those of the
    blocks before: each piece adds what lies beyond the group's reach so far (the latest end of its earlier
    pieces). Exact int64 sums, the same as one union per group of all its rows. Rows out of start order
    (not what :func:`~profiler.capture.activity.build_activity` gives) are taken in one pass."""
    if not (start[1:] >= start[:-1]).all():
        g = group_of(slice(0, len(start)))
        keep = g >= 0
        return intervals.union_length_by_group(g[keep], start[keep], end[keep], n_groups)
    if n_groups == 1:
        return np.array([_swept_length(start, end, group_of)], dtype=np.int64)
    total = np.zeros(n_groups, dtype=np.int64)
    reach = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
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
    """The union length of one group, rows sorted by start: each row adds what lies beyond the reach of the
    rows before it (an empty or reversed row adds nothing and moves the reach past no later start)."""
    total, reach = 0, np.iinfo(np.int64).min
    for sl in blocks(len(start)):
        _, s, e = _kept(start, end, group_of, sl)
        if not len(s):
            continue
        covered = np.empty(len(e), dtype=np.int64)  # max(start, reach before the row)
        covered[0] = reach
        np.maximum.accumulate(e[:-1], out=covered[1:])
        np.maximum(covered, reach, out=covered)
        np.maximum(covered, s, out=covered)
        np.subtract(e, covered, out=covered)
        total += int(covered.sum(where=covered > 0))
        reach = max(reach, int(e.max()))
    return total


def union_length(start: np.ndarray, end: np.ndarray, keep: Callable[[slice], np.ndarray] | None = None) -> int:
    """:func:`intervals.union_length` of the rows that ``keep(rows)`` (a mask per block; None: all) selects."""
    def group_of(sl: slice) -> np.ndarray:
        return np.zeros(sl.stop - sl.start, dtype=np.int8) if keep is None else keep(sl).astype(np.int8) - 1

    return int(union_lengths(start, end, group_of, 1)[0])


def distinct(values: np.ndarray, keep: Callable[[slice], np.ndarray] | None = None) -> np.ndarray:
    """The distinct values of the rows ``keep(rows)`` selects (None: all), sorted (``np.unique``). Hashed a
    block at a time: pandas sizes its hash table by the length of its input (+34 MB for 1.26 M rows)."""
    parts = [pd.unique(values[sl] if keep is None else values[sl][keep(sl)])
             for sl in blocks(len(values), DISTINCT_BLOCK_ROWS)]
    return np.unique(np.concatenate(parts)) if parts else values[:0].copy()
