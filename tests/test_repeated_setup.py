"""repeated_setup: an engine rebuilt for every inference (modules loaded and unloaded, a stream created, buffers
allocated, the weights uploaded again) against the same program that sets up once; and gpu_idle, whose advice for
those gaps was warm-up, defers to it."""

from __future__ import annotations

import pytest

from profiler.capture.analyze import AnalysisOptions, analyze
from tests.capture_builders import SETUP_MODULES as MODULES, SETUP_N as N, SETUP_WEIGHTS_BYTES as WEIGHTS
from tests.capture_builders import rebuild_app as _app


def _setup_ms_between_images() -> float:
    """What one interval between images holds, computed from the builder's numbers: 5 loads of 0.99 ms, the stream
    creation 0.05 ms, three mallocs of 0.1 ms, the upload 6 ms (overlapping no call), 5 unloads of 0.995 ms and
    three frees of 0.05 ms."""
    return 5 * 0.99 + 0.05 + 3 * 0.1 + 6.0 + 5 * 0.995 + 3 * 0.05


def test_an_engine_rebuilt_for_every_inference_is_setup_in_the_steady_state():
    res = analyze(_app(rebuild=True), AnalysisOptions(include_setup=True))
    [f] = [f for f in res.findings if f.rule == "repeated_setup"]
    ev = f.evidence
    assert (ev["intervals"], ev["intervals_with_setup"]) == (N - 1, N - 1)
    assert ev["intervals_by_kind"] == {"module": N - 1, "stream": N - 1, "allocation": N - 1, "upload": N - 1}
    assert ev["calls"]["cuModuleLoadData"] == MODULES * (N - 1) and ev["calls"]["cuModuleUnload"] == MODULES * (N - 1)
    assert ev["calls_per_interval"]["cudaMalloc_v3020"] == 3 and ev["upload_bytes_per_interval"] == WEIGHTS
    assert ev["setup_ms_per_interval"] == pytest.approx(_setup_ms_between_images())
    # the interval after the last image is not between two images; neither is the set-up before the first
    assert ev["setup_ms_total"] == pytest.approx((N - 1) * _setup_ms_between_images())
    assert f.impact["ms_total"] == pytest.approx(ev["setup_ms_total"]) and f.severity == "high"
    assert "Build or deserialise it once" in f.recommendation and "reuse them" in f.recommendation
    [idle] = [g for g in res.findings if g.rule == "gpu_idle"]  # the gaps: mostly cuModuleUnload
    assert idle.evidence["host_cause"] == "api" and idle.evidence["setup_repeats"]
    assert idle.impact["included_in"] == "repeated_setup" and idle.severity == "low"
    assert "repeats between inferences" in idle.recommendation
    for g in res.findings:  # no warm-up advice for setup that repeats
        assert "warm" not in g.recommendation.lower() and "eagerly" not in g.recommendation, (g.rule, g.recommendation)


def test_setup_done_once_is_silent():
    for setup in (False, True):
        res = analyze(_app(rebuild=False), AnalysisOptions(include_setup=setup))
        assert [f for f in res.findings if f.rule == "repeated_setup"] == []
