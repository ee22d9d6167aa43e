"""repeated_setup: an engine rebuilt for every inference (modules loaded and unloaded, a stream created, buffers
allocated, the weights uploaded again) against the same program that sets up once; and gpu_idle, whose advice for
those gaps was warm-up, defers to it."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze
from profiler.capture.trace import Trace
from tests.capture_builders import T, api, kernels, ranges

N = 12
PERIOD = 19_600 * T  # 15.5 ms per image: the host is in setup calls for most of the time the GPU idles
WEIGHTS = 64 << 20
MODULES = 5


def _setup_calls(t: int) -> list[tuple]:
    """Before an inference: MODULES cuModuleLoadData of 1 ms, a stream creation, three cudaMalloc of 100 us."""
    calls = [("cuModuleLoadData", t + j * 1000 * T, t + (j + 1) * 1000 * T - 10 * T, 5, "other") for j in range(MODULES)]
    calls.append(("cudaStreamCreateWithFlags", t + 5000 * T, t + 5050 * T, 5, "other"))
    calls += [("cudaMalloc_v3020", t + (5100 + 200 * j) * T, t + (5200 + 200 * j) * T, 5, "other") for j in range(3)]
    return calls


def _teardown_calls(t: int) -> list[tuple]:
    """After an inference: the modules unloaded (1 ms each) and the buffers freed (50 us each)."""
    calls = [("cuModuleUnload", t + j * 1000 * T, t + (j + 1) * 1000 * T - 5 * T, 5, "other") for j in range(MODULES)]
    calls += [("cudaFree", t + (5000 + 100 * j) * T, t + (5050 + 100 * j) * T, 5, "other") for j in range(3)]
    return calls


def _app(rebuild: bool) -> Trace:
    """N images; each inference is an 'infer' range of 10 kernels of 200 us. ``rebuild``: every image first loads
    the engine (_setup_calls), uploads its 64 MiB of weights (6 ms) and afterwards tears it down (_teardown_calls);
    else that happens once, before the first image."""
    krows, copies, calls, nv = [], [], [], []
    for i in range(N):
        t = i * PERIOD
        if rebuild or i == 0:
            calls += _setup_calls(t)
            copies.append({"start_ns": t + 5800 * T, "end_ns": t + 11_800 * T, "api_tid": 5, "api_start_ns": t + 5790 * T,
                           "correlation_id": 9000 + i, "device_id": 0, "stream_id": 7, "pid": 1, "bytes": WEIGHTS,
                           "copy_kind": "HtoD", "src_kind": "pageable", "dst_kind": "device"})
        s = t + 12_000 * T
        nv.append(("infer", s, s + 2100 * T, 5))
        for j in range(10):
            krows.append((s + (10 + 205 * j) * T, s + (210 + 205 * j) * T, 5, s + (2 + 3 * j) * T, 100 * i + j + 1))
        calls.append(("cudaStreamSynchronize", s + 40 * T, s + 2080 * T, 5, "sync"))
        if rebuild:
            calls += _teardown_calls(s + 2200 * T)
    return Trace(kernels=kernels(*krows), memcpy=pd.DataFrame(copies), api=api(*calls), nvtx=ranges(*nv))


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
