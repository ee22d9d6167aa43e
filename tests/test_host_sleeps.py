"""host_sleeps: a feeding thread whose select() returns after the same 50.06 ms every time is sleeping on a
timeout, not waiting for input: said so and priced, never "waits for its next input"; a thread whose select()
returns when input arrives (times that vary) is waiting, and host_sleeps stays silent."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze
from profiler.capture.trace import Trace
from tests.capture_builders import SLEEP_N as N, exact_timeouts_us as _exact, sleep_app as _app


def _findings(trace: Trace, rule: str):
    res = analyze(trace, AnalysisOptions(include_setup=True))
    return [f for f in res.findings if f.rule == rule]


def _gaps_inside_select_ms(trace: Trace) -> float:
    """The GPU's idle time that the select calls cover, from the frames: the gap between consecutive kernels
    intersected with each call."""
    k = trace.kernels.sort_values("start_ns")
    gs, ge = k["end_ns"].to_numpy()[:-1], k["start_ns"].to_numpy()[1:]
    total = 0
    for s, e in zip(trace.osrt["start_ns"], trace.osrt["end_ns"]):
        total += int(np.clip(np.minimum(ge, e) - np.maximum(gs, s), 0, None).sum())
    return total / 1e6


def test_select_returning_after_the_same_timeout_is_the_program_sleeping():
    trace = _app(_exact())
    [f] = _findings(trace, "host_sleeps")
    [g] = f.evidence["groups"]
    assert (g["name"], g["calls"], g["of_calls"]) == ("select", N - 1, N - 1)
    assert g["duration_ms"] == pytest.approx(float(np.median(_exact()[1:])) / 1e3)
    assert g["spread_us"] == pytest.approx(max(_exact()[1:]) - min(_exact()[1:]))
    assert f.evidence["gpu_idle_during_sleeps_ms"] == pytest.approx(_gaps_inside_select_ms(trace))
    assert f.impact["ms_total"] == pytest.approx(_gaps_inside_select_ms(trace)) and f.severity == "high"
    assert "timeout" in f.title and "input arriving" in f.title
    [idle] = _findings(trace, "gpu_idle")  # the same gaps: named sleeps, priced once
    assert idle.evidence["host_sleeps"] and idle.impact["included_in"] == "host_sleeps"
    for h in (f, idle):
        assert "waits for its next input" not in h.recommendation and "producer is slower" not in h.recommendation
        assert "sleeps" in h.recommendation


def test_select_that_returns_when_input_arrives_is_a_wait():
    rng = np.random.default_rng(3)
    trace = _app([int(w) for w in rng.integers(5_000, 80_000, N)])
    assert _findings(trace, "host_sleeps") == []
    [idle] = _findings(trace, "gpu_idle")
    assert "waits for its next input" in idle.recommendation and "host_sleeps" not in idle.evidence


def test_too_few_equal_calls_are_no_pattern():
    waits = _exact()
    rng = np.random.default_rng(4)
    varied = [int(w) for w in rng.integers(5_000, 80_000, N)]
    assert _findings(_app(waits[:4] + varied[4:]), "host_sleeps") == []  # 3 equal calls, 6 others


def test_outliers_sleeping_in_select_are_no_hand_over():
    from tests.capture_builders import sleep_in_range_app

    res = analyze(sleep_in_range_app(), AnalysisOptions(include_setup=True))
    [j] = [f for f in res.findings if f.rule == "jitter"]
    assert j.evidence["outlier_causes"] == {"host_stall": 8}
    assert "another thread" not in j.title and "hand-over" not in j.recommendation
    [s] = [f for f in res.findings if f.rule == "host_sleeps"]
    assert s.evidence["groups"][0]["calls"] == 8 and s.evidence["groups"][0]["duration_ms"] == pytest.approx(50.06)
