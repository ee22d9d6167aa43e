"""Progress for long sweep phases and trtexec's latency line."""

from __future__ import annotations

import time

import pytest

from profiler.progress import phase, trtexec_line


def test_a_long_phase_ticks_and_says_how_long_it_took():
    said: list[str] = []
    with phase(said.append, "  fp16: localizing", every_s=0.05, quiet_s=0.1):
        time.sleep(0.32)
    ticks = [s for s in said if s.startswith("  fp16: localizing... ")]
    assert len(ticks) >= 3 and said[-1].startswith("  fp16: localizing: done in 0.")


def test_a_short_or_failed_phase_stays_quiet():
    said: list[str] = []
    with phase(said.append, "quick", every_s=10, quiet_s=1.0):
        pass
    with pytest.raises(ValueError), phase(said.append, "broken", every_s=10, quiet_s=0.0):
        raise ValueError("x")
    assert said == []


def test_trtexec_line_has_every_statistic():
    stats = {"min": 0.5, "max": 9.0, "mean": 1.25, "median": 1.0, "p90": 2.0, "p99": 8.0, "cov_pct": 55.5}
    assert trtexec_line(stats) == ("Latency: min = 0.5 ms, max = 9 ms, mean = 1.25 ms, median = 1 ms, "
                                   "percentile(90%) = 2 ms, percentile(99%) = 8 ms, CoV = 55.5%")
    assert trtexec_line({"median": float("nan")}).startswith("Latency: min = -, max = -")
    assert trtexec_line(None) == "Latency: not measured"
