"""What the capture rules share: the cap on findings per rule, severity bands, and keeping the outermost of
nested candidate ranges."""

from __future__ import annotations

from typing import Any

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
