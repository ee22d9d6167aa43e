"""Run-against-run review: statistics (pure functions) and the comparison of stored runs."""

from profiler.compare.stats import DEFAULT_RULE, decide, detect_step, mann_whitney_u
from profiler.compare.runs import compare_runs, trend

__all__ = ["DEFAULT_RULE", "compare_runs", "decide", "detect_step", "mann_whitney_u", "trend"]
