"""What the capture rules share: the cap on findings per rule, severity bands, keeping the outermost of
nested candidate ranges, and a range's member rows in bounded blocks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.keys import ROW_CHUNK
from profiler.capture.series import SeriesTable
from profiler.capture.unit import wrapped_loops
from profiler.capture.context import CaptureContext

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


def unit_series_id(ctx: CaptureContext) -> int | None:
    """The inference unit's series id in ``ctx.table`` (the steady-state table numbers its series afresh: the
    unit's own id is the full capture's), found by its label; None without an NVTX unit."""
    unit = ctx.unit
    if unit is None or unit.source == "window" or unit.series_id is None or ctx.table.window:
        return None
    return next((int(r["series_id"]) for r in ctx.ranges if ctx.label(r["series_id"]) == unit.label), None)


def repeated_series_id(ctx: CaptureContext, min_count: int) -> tuple[int | None, str | None]:
    """(series id, label) of what repeats per inference: the unit's series, else, where no range qualified as the
    inference (one that launches little of the GPU work, as a loop that uploads an engine's weights for every image
    does), the outermost NVTX range of at least ``min_count`` instances with the most of them; (None, None)
    without NVTX ranges."""
    sid = unit_series_id(ctx)
    if sid is not None:
        return sid, ctx.label(sid)
    if ctx.table.window or (ctx.unit is not None and ctx.unit.source != "window"):
        return None, None
    top = [r for r in ctx.ranges if r["depth"] == 0 and r["count"] >= min_count]
    if not top:
        return None, None
    best = max(top, key=lambda r: (r["count"], -r["series_id"]))
    return int(best["series_id"]), ctx.label(best["series_id"])


def ranges_of(ctx: CaptureContext, min_count: int = 1) -> list[dict[str, Any]]:
    """The range summaries with at least ``min_count`` instances."""
    return [r for r in ctx.ranges if r["count"] >= min_count]


NESTED_SHARE = 0.5
"""A candidate range is dropped when at least this share of its instances sit inside another candidate
of the same rule: the outer range already carries the finding (PyTorch op ranges nest deeply)."""


def outermost(ctx: CaptureContext, cands: list[tuple], limit: int) -> list[tuple]:
    """Candidates (cost, range dict, evidence) without those nested in another candidate; costliest first.
    A one-off range around a loop (:func:`~profiler.capture.unit.wrapped_loops`) is no candidate: its one
    instance is the whole loop, whose per-instance figures (launches, latency) are the iterations' sums;
    the loop's own ranges are judged instead."""
    wrappers = wrapped_loops(ctx.table)[1] if cands else set()
    cands = [c for c in cands if c[1]["series_id"] not in wrappers]
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
"""Sorted rows per block of :meth:`SeriesTable.member_blocks` where a rule reads a range's members: a
launch-bound capture's one range holds millions of API calls, and expanding them at once took over 100 MB
of temporaries."""


def member_rows(table: SeriesTable, instances: pd.DataFrame, which: str,
                keep: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The member rows of ``instances`` that ``keep(rows)`` selects and how many instances hold each,
    gathered block by block (few rows kept of many: a range's copies among its kernels)."""
    rows_kept, counts_kept = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for rows, n in table.member_blocks(instances, which, MEMBER_BLOCK):
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
    for rows, n in table.member_blocks(instances, which, MEMBER_BLOCK):
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
