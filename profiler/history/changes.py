"""Change points of a series of run medians, judged by the noise model ``trtprof compare`` uses.

A candidate step is the least-squares split of a stretch of runs (``profiler.compare.stats.detect_step``). It
counts only when it beats the run-to-run spread:

- with ``MIN_SEGMENT_RUNS`` or more runs on each side (up to ``WINDOW_RUNS``), each run's median is one value
  of a between-run test: ``stats.decide`` on the two sets of run medians (Mann-Whitney p < alpha, a bootstrap
  interval of the ratio that excludes 1, beyond the relevance threshold) and the ratio beyond the margin
  ``noise.spread_margin`` times the larger side's relative spread (``noise.relative_spread``), as compare's
  repeats rule asks of process-level repeats. Each split that stands splits the stretch in two, which are
  searched again (binary segmentation);
- the newest runs (fewer than ``MIN_SEGMENT_RUNS`` after a split): compare's history rule
  (``noise._from_history``) holds for every one of them: outside the range of the earlier runs and beyond their
  spread, on the same side.

Larger is worse (latency): a ratio above 1 is a regression.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from profiler.compare import noise
from profiler.compare.stats import DEFAULT_RULE, decide, detect_step

#: Runs on each side of a candidate step that measure the two levels and their spread.
WINDOW_RUNS = 10
#: The fewest runs on each side for the between-run rank test: 6 against 6 allow p = 0.0051, below alpha 0.01
#: (5 against 5 cannot go below 0.012).
MIN_SEGMENT_RUNS = 6
#: The newest runs after a step, fewer than MIN_SEGMENT_RUNS, are judged by compare's history rule against
#: at least this many earlier runs.
MIN_PRIOR_RUNS = noise.MIN_HISTORY
#: ... and at most this many earlier runs measure the spread the newest runs must beat: 20 rather than 10 marks a
#: series of 100 runs with 3% noise and no step in 0.3% of builds instead of 2% (300 draws), and still marks a
#: newest run 20% slower in 99.7%; a 10% step the newest run alone shows is marked in 39% (instead of 60%), and
#: by the rank test once 6 runs follow it.
TAIL_WINDOW_RUNS = 20


def change_points(values: Sequence[float], rule: dict | None = None) -> list[dict[str, Any]]:
    """Every change point of ``values`` (run medians, oldest first) that beats the run-to-run spread, by index:
    [{index (the first run after the step), before_ms, after_ms (the medians of the runs between it and its
    neighbouring steps), ratio, direction, confidence, p_value, run_to_run_spread, needed, rule}]. Non-finite values are not allowed (drop them first)."""
    r = {**DEFAULT_RULE, **(rule or {})}
    x = np.asarray(values, dtype=float)
    found: list[dict[str, Any]] = []
    _segment(x, 0, len(x), r, found)
    found.sort(key=lambda c: c["index"])
    tail = _tail_step(x, found[-1]["index"] if found else 0, r)
    if tail is not None and all(c["index"] != tail["index"] for c in found):
        found.append(tail)
    _levels(x, found)
    return found


def _levels(x: np.ndarray, found: list[dict[str, Any]]) -> None:
    """Each step's size from the whole stretches between its neighbouring steps (the windows decided it; the
    stretches, holding more runs, measure it more closely)."""
    bounds = [0, *(c["index"] for c in found), len(x)]
    for i, c in enumerate(found):
        before, after = float(np.median(x[bounds[i]:bounds[i + 1]])), float(np.median(x[bounds[i + 1]:bounds[i + 2]]))
        c.update(before_ms=before, after_ms=after, ratio=after / before)


def _segment(x: np.ndarray, lo: int, hi: int, r: dict, found: list[dict[str, Any]]) -> None:
    if hi - lo < 2 * MIN_SEGMENT_RUNS:
        return
    step = detect_step(x[lo:hi], min_rel=float(r["rel_threshold"]))
    if step is None:
        return
    s = lo + int(step["index"])
    if s - lo < MIN_SEGMENT_RUNS:  # a step too near the stretch's start to test: look on in the rest
        _segment(x, s, hi, r, found)
        return
    if hi - s < MIN_SEGMENT_RUNS:  # too near its end: the rest (and the tail rule) look on
        _segment(x, lo, s, r, found)
        return
    judged = _judge_split(x[max(lo, s - WINDOW_RUNS):s], x[s:min(hi, s + WINDOW_RUNS)], r)
    if judged is None:
        return
    found.append({"index": s, **judged})
    _segment(x, lo, s, r, found)
    _segment(x, s, hi, r, found)


def _judge_split(before: np.ndarray, after: np.ndarray, r: dict) -> dict[str, Any] | None:
    """The step between two sets of run medians when it beats the run-to-run spread, else None."""
    v = decide(before, after, r, modes=False)
    if v.verdict not in ("regression", "improvement"):
        return None
    spread = max(noise.relative_spread(before) or 0.0, noise.relative_spread(after) or 0.0)
    margin = noise.spread_margin(min(len(before), len(after)))
    needed = max(margin * spread, float(r["rel_threshold"]))
    if abs(v.median_ratio - 1.0) <= needed:
        return None
    return {"before_ms": v.baseline_median_ms, "after_ms": v.candidate_median_ms, "ratio": v.median_ratio,
            "direction": v.verdict, "confidence": 1.0 - v.p_value, "p_value": v.p_value,
            "ci": [v.ci_low, v.ci_high], "run_to_run_spread": spread, "needed": needed,
            "rule": f"{len(before)} runs against {len(after)}: {v.reason}; beyond {margin:.2g}x the run-to-run "
                    f"spread {spread * 100:.1f}%"}


def _tail_step(x: np.ndarray, last: int, r: dict) -> dict[str, Any] | None:
    """The step before the newest runs (fewer than MIN_SEGMENT_RUNS after it), by compare's history rule; the
    longest such tail wins (its step is the earliest)."""
    n = len(x)
    for t in range(min(MIN_SEGMENT_RUNS - 1, n - 1), 0, -1):
        s = n - t
        prior = x[max(last, s - TAIL_WINDOW_RUNS):s]
        if len(prior) < MIN_PRIOR_RUNS:
            continue
        after = x[s:]
        centre = float(np.median(after))
        direction = 1 if centre > float(np.median(prior)) else -1
        rel = float(r["rel_threshold"])
        # each newest run on its own stands by the history rule, so one noisy run cannot join a real step
        if not all(noise._from_history(direction, prior, float(v), rel)["confirmed"] for v in after):
            continue
        ev = noise._from_history(direction, prior, centre, rel)
        p = noise.separation_p_value(len(prior), t)
        return {"index": s, "before_ms": float(np.median(prior)), "after_ms": centre, "ratio": ev["history_ratio"],
                "direction": "regression" if direction > 0 else "improvement", "confidence": 1.0 - p,
                "p_value": p, "ci": None, "run_to_run_spread": ev["run_to_run_spread"], "needed": ev["needed"],
                "rule": f"the newest {t} run(s) against {len(prior)} before: {ev['why']}"}
    return None
