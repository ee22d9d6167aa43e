"""Progress for long sweep phases and trtexec's latency line."""

from __future__ import annotations

import threading
import time

import pytest

from profiler.progress import phase, trtexec_line


class FakeTime:
    """A clock that moves only when the ticker waits: each wait is one ``every_s`` step, until ``steps``
    of them have passed; then the ticker blocks until the block ends."""

    def __init__(self, steps: int):
        self.now, self.steps, self.ticked = 100.0, steps, threading.Event()

    def clock(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, every_s: float) -> bool:
        if self.steps == 0:
            self.ticked.set()
            return stop.wait()
        self.steps -= 1
        self.now += every_s
        return stop.is_set()


def test_a_long_phase_ticks_and_says_how_long_it_took():
    said: list[str] = []
    fake = FakeTime(steps=3)
    with phase(said.append, "  fp16: localizing", every_s=3.0, quiet_s=1.0, clock=fake.clock, wait=fake.wait):
        assert fake.ticked.wait(timeout=60), "the ticker thread never ran"
        fake.now += 0.5
    assert said == ["  fp16: localizing... 3 s", "  fp16: localizing... 6 s", "  fp16: localizing... 9 s",
                    "  fp16: localizing: done in 9.5 s"]


def test_the_real_ticker_says_something_for_a_long_phase():
    """The default clock and wait: a phase of at least 0.2 s ends with its closing line, and every line
    before it is a tick (how many ticks a loaded machine schedules is not asserted)."""
    said: list[str] = []
    with phase(said.append, "slow", every_s=0.01, quiet_s=0.1):
        time.sleep(0.2)
    assert said[-1].startswith("slow: done in ") and all(s.startswith("slow... ") for s in said[:-1])


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
