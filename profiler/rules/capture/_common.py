"""What the capture rules share: the cap on findings per rule, severity bands, keeping the outermost of
nested candidate ranges, and a range's member rows in bounded blocks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.keys import ROW_CHUNK
from profiler.capture.series import SeriesTable, expand
from profiler.rules.context import CaptureContext

MAX_FINDINGS_PER_RULE = 5
"""Per-range rules report at most this many ranges (the costliest), so nested series do not flood."""


_SEVERITY_ORDER = ("high", "medium", "low")


def band(value: float, high: float, medium: float) -> str:
    """'high' from ``high`` on, 'medium' from ``medium`` on, else 'low' (a rule's severity bands)."""
    return "high" if value >= high else "medium" if value >= medium else "low"


def worse(a: str, b: str) -> str:
    """The more severe of two severities."""
    return min(a, b, key=_SEVERITY_ORDER.index)


def milder(a: str, b: str) -> str:
    """The less severe of two severities."""
    return max(a, b, key=_SEVERITY_ORDER.index)


def pct(x: float) -> float:
    """A fraction as a percentage with one decimal, for titles."""
    return round(100.0 * x, 1)


def ranges_of(ctx: CaptureContext, min_count: int = 1) -> list[dict[str, Any]]:
    """The range summaries with at least ``min_count`` instances."""
    return [r for r in ctx.ranges if r["count"] >= min_count]


NESTED_SHARE = 0.5
"""A candidate range is dropped when at least this share of its instances sit inside another candidate
of the same rule: the outer range already carries the finding (PyTorch op ranges nest deeply)."""


def outermost(ctx: CaptureContext, cands: list[tuple], limit: int) -> list[tuple]:
    """Candidates (cost, range dict, evidence) without those nested in another candidate; costliest first."""
    ids = {c[1]["series_id"] for c in cands}
    kept = []
    for c in sorted(cands, key=lambda c: -c[0]):
        anc = ctx.table.ancestor_share(c[1]["series_id"]) if len(ids) > 1 else {}
        if any(share >= NESTED_SHARE for a, share in anc.items() if a in ids):
            continue
        kept.append(c)
    return kept[:limit]


CALL_BLOCK = 1 << 16
"""Rows of a call table (CUDA API, OS runtime) per block where a rule walks all of them (``gpu_idle``):
bounds the temporaries on captures of millions of calls."""

MEMBER_BLOCK = ROW_CHUNK
"""Sorted rows per block in :func:`member_blocks`: a launch-bound capture's one range holds millions of
API calls, and expanding them at once took over 100 MB of temporaries."""


def member_blocks(table: SeriesTable, instances: pd.DataFrame, which: str,
                  block: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``table.member_counts(instances, which)`` in pieces of at most ``block`` rows: (rows, how many of
    ``instances`` hold each). Concatenated, the pieces are member_counts' arrays."""
    block = block or MEMBER_BLOCK
    srt = {"activity": table.act_sorted, "api": table.api_sorted, "osrt": table.osrt_sorted}[which]
    prefix = {"activity": "act", "api": "api", "osrt": "osrt"}[which]
    lo = instances[f"{prefix}_lo"].to_numpy()
    hi = instances[f"{prefix}_hi"].to_numpy()
    if not len(lo):
        return
    if (lo[1:] >= hi[:-1]).all():  # windows one after another (not nested): each row once, in window order
        size = np.maximum(hi - lo, 0)
        ends = np.cumsum(size)
        for first in range(0, int(ends[-1]), block):
            last = min(first + block, int(ends[-1]))  # members [first, last) of all, in windows w0 .. w1 - 1
            w0, w1 = int(np.searchsorted(ends, first, "right")), int(np.searchsorted(ends, last - 1, "right")) + 1
            start, n = lo[w0:w1].copy(), size[w0:w1].copy()
            skip = first - int(ends[w0] - size[w0])
            start[0] += skip
            n[0] -= skip
            n[-1] -= int(ends[w1 - 1]) - last
            _, pos = expand(start, start + n)
            yield srt.rows(pos), np.ones(len(pos), dtype=np.int64)
        return
    for b in range(int(lo.min()), int(hi.max()), block):  # nested: per block of positions, how many cover each
        counts = intervals.cover_counts(lo - b, hi - b, min(block, len(srt) - b))
        pos = np.flatnonzero(counts)
        yield srt.rows(b + pos), counts[pos]


def member_rows(table: SeriesTable, instances: pd.DataFrame, which: str,
                keep: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The member rows of ``instances`` that ``keep(rows)`` selects and how many instances hold each,
    gathered block by block (few rows kept of many: a range's copies among its kernels)."""
    rows_kept, counts_kept = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for rows, n in member_blocks(table, instances, which):
        m = keep(rows)
        rows_kept.append(rows[m])
        counts_kept.append(n[m])
    return np.concatenate(rows_kept), np.concatenate(counts_kept)


def member_values(table: SeriesTable, instances: pd.DataFrame, which: str,
                  keep: Callable[[np.ndarray], np.ndarray], value: Callable[[np.ndarray], np.ndarray],
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """``value(rows)`` as float64 for the member rows of ``instances`` that ``keep(rows)`` selects, block by
    block, and how many instances hold each (None when every one is held once, the usual case)."""
    vals, counts = [], []
    for rows, n in member_blocks(table, instances, which):
        m = keep(rows)
        rows, n = rows[m], n[m]
        vals.append(np.asarray(value(rows), dtype=np.float64))
        counts.append(None if (n == 1).all() else n)
    lengths = [len(v) for v in vals]
    values = np.concatenate(vals) if vals else np.zeros(0)
    del vals[:]
    if all(c is None for c in counts):
        return values, None
    return values, np.concatenate([np.ones(k, np.int64) if c is None else c for k, c in zip(lengths, counts)])


def median_of(values: np.ndarray, counts: np.ndarray | None) -> float:
    """``intervals.weighted_median(values, counts)`` (NaN when empty); with every count one (None), the
    plain median selected in place: ``values`` is consumed."""
    if counts is not None:
        return intervals.weighted_median(values, counts)
    return float(np.median(values, overwrite_input=True)) if len(values) else float("nan")
