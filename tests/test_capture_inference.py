"""The inference unit, layers, phases, streams and calibrated findings on synthetic captures: the edges
real captures lack (a TensorRT enqueue beside user ranges, --unit, warm-up, a start-up gap, overlapping
streams, negligible and one-off findings)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from profiler.capture import unit as U
from profiler.capture.analyze import AnalysisOptions, analyze, analyze_path
from profiler.capture.trace import Trace
from profiler.errors import UsageError
from tests.capture_builders import T, api, kernels, ranges
from tests.conftest import SAMPLE_TRACES


def trt_app(n: int = 20, warm_us: int = 0, stream_of=lambda i: 7, layer_us=(30, 10), startup_gap_us: int = 0):
    """A TensorRT-shaped loop: per inference an enqueue range (domain TensorRT, 20 us on the host) holding
    two layer ranges, each launching one kernel that runs after the range (async). Inference 0 takes
    ``warm_us`` longer on the GPU; a ``startup_gap_us`` idle gap (module loading) precedes it."""
    krows, nv, arows = [], [], []
    t = startup_gap_us * T
    if startup_gap_us:
        arows.append(("cuLibraryLoadData", 0, startup_gap_us * T - T, 5, "other"))
    corr = 1
    for i in range(n):
        nv.append(("ExecutionContext::enqueue", t, t + 20 * T, 5, "TensorRT"))
        g = t + 50 * T  # GPU time cursor
        for j, dur in enumerate(layer_us):
            ls = t + 2 * T + j * 8 * T
            nv.append((f"layer{j}", ls, ls + 6 * T, 5, "TensorRT"))
            d = dur + (warm_us if i == 0 and j == 0 else 0)
            krows.append({"start_ns": g, "end_ns": g + d * T, "api_tid": 5, "api_start_ns": ls + T,
                          "api_end_ns": ls + 3 * T, "correlation_id": corr, "device_id": 0,
                          "stream_id": stream_of(i), "pid": 1, "name": f"sm80_xmma_gemm_f16_{j}" if j == 0 else "k1",
                          "short_name": "k"})
            arows.append(("cudaLaunchKernel", ls + T, ls + 3 * T, 5, "launch"))
            corr += 1
            g += d * T
        t += 200 * T
    return Trace(kernels=pd.DataFrame(krows), nvtx=ranges(*nv), api=api(*arows))


def test_tensorrt_enqueue_is_the_unit_with_async_gpu_time():
    data = analyze(trt_app()).to_json()
    inf = data["inference"]
    assert inf["source"] == "tensorrt" and inf["series"] == "TensorRT:ExecutionContext::enqueue"
    assert inf["count"] == 20 and inf["steady_count"] == 19  # a TensorRT context's first enqueue is setup
    assert inf["gpu_ms"]["median"] == pytest.approx(0.040)   # 30 + 10 us, after the 20 us host range
    assert inf["host_ms"]["median"] == pytest.approx(0.020)
    assert inf["gpu_latency_ms"]["median"] == pytest.approx(0.040)
    # queue: launch call of the first kernel (t + 3 us) to its start (t + 50 us)
    assert inf["queue_ms"]["median"] == pytest.approx(0.047)
    enq = next(r for r in data["ranges"] if r["name"] == "ExecutionContext::enqueue")
    assert 0 <= enq["gpu_busy_fraction"] <= 1  # busy over max(wall, GPU span): 40 / 40, never 40 / 20
    assert enq["gpu_busy_fraction"] == pytest.approx(1.0)


def test_layers_are_children_with_shares_that_sum_to_the_inference():
    data = analyze(trt_app(layer_us=(30, 10))).to_json()
    by = {r["name"]: r for r in data["ranges"]}
    assert by["layer0"]["parent"] == "TensorRT:ExecutionContext::enqueue" and by["layer0"]["depth"] == 1
    assert by["ExecutionContext::enqueue"]["parent"] is None and by["ExecutionContext::enqueue"]["depth"] == 0
    layers = data["layers"]
    assert [x["name"] for x in layers] == ["TensorRT:layer0", "TensorRT:layer1"]  # most GPU time first
    assert [x["share"] for x in layers] == pytest.approx([0.75, 0.25])
    assert layers[0]["gpu_ms"]["median"] == pytest.approx(0.030)
    # "k1" says neither that it uses Tensor Cores nor that it does not: unknown, not "no"
    assert layers[0]["tensor_cores"] is True and layers[1]["tensor_cores"] is None
    assert data["layer_total"]["difference_ms"] == pytest.approx(0.0, abs=1e-9)


def test_user_unit_outermost_repeated_and_window():
    tr = trt_app()
    assert U.choose_series.__doc__
    data = analyze(tr, AnalysisOptions(unit="TensorRT:layer1")).to_json()
    assert data["inference"]["series"] == "TensorRT:layer1" and data["inference"]["gpu_ms"]["median"] == \
        pytest.approx(0.010)
    with pytest.raises(UsageError, match="names no NVTX range"):
        analyze(tr, AnalysisOptions(unit="nope"))
    # without TensorRT's domain: the outermost repeated range, not its children
    nv = tr.nvtx.assign(domain="")
    data = analyze(Trace(kernels=tr.kernels, api=tr.api, nvtx=nv)).to_json()
    assert data["inference"]["source"] == "nvtx" and data["inference"]["series"] == "ExecutionContext::enqueue"
    data = analyze(Trace(kernels=tr.kernels, api=tr.api)).to_json()
    assert data["inference"]["source"] == "window" and data["inference"]["count"] == 1


def test_time_to_first_inference_needs_the_start_up_in_the_capture():
    # the same app captured from the middle of the run (no module loading or context creation in it)
    late = analyze(trt_app(n=20, warm_us=3000)).to_json()["phases"]
    assert late["startup_in_capture"] is False and late["time_to_first_inference_ms"] is None
    early = analyze(trt_app(n=20, warm_us=3000, startup_gap_us=100_000)).to_json()["phases"]
    assert early["startup_in_capture"] is True and early["time_to_first_inference_ms"] > 100


def test_a_long_first_allocation_is_the_start_up_seen_in_the_capture():
    """The context is created lazily inside the first allocation: a capture that begins with a 300 ms
    cudaHostAlloc holds the start-up; the same call 1 ms long in the middle of a run does not."""
    tr = trt_app(n=20, warm_us=3000)
    shift = 400_000 * T

    def with_first_call(ms: float):
        first = api(("cudaHostAlloc_v3020", 0, int(ms * 1e6), 5, "other"))
        return Trace(kernels=tr.kernels.assign(**{c: tr.kernels[c] + shift for c in
                                                   ("start_ns", "end_ns", "api_start_ns", "api_end_ns")}),
                     nvtx=tr.nvtx.assign(start_ns=tr.nvtx["start_ns"] + shift, end_ns=tr.nvtx["end_ns"] + shift),
                     api=pd.concat([first, tr.api.assign(start_ns=tr.api["start_ns"] + shift,
                                                         end_ns=tr.api["end_ns"] + shift)], ignore_index=True))
    assert analyze(with_first_call(300.0)).to_json()["phases"]["startup_in_capture"] is True
    assert analyze(with_first_call(1.0)).to_json()["phases"]["startup_in_capture"] is False


def _begun_mid_run(first_calls) -> Trace:
    """trt_app captured from the middle of its run, its capture opening with ``first_calls`` (api rows)."""
    tr = trt_app(n=20, warm_us=3000)
    shift = 100_000 * T
    moved = {c: tr.kernels[c] + shift for c in ("start_ns", "end_ns", "api_start_ns", "api_end_ns")}
    return Trace(kernels=tr.kernels.assign(**moved),
                 nvtx=tr.nvtx.assign(start_ns=tr.nvtx["start_ns"] + shift, end_ns=tr.nvtx["end_ns"] + shift),
                 api=pd.concat([api(*first_calls), tr.api.assign(start_ns=tr.api["start_ns"] + shift,
                                                                 end_ns=tr.api["end_ns"] + shift)], ignore_index=True))


def test_a_kernels_lazy_module_load_after_the_first_launch_is_no_start_up():
    """A capture range opened by cudaProfilerStart after the warm-up (seen on the H200: torch's relu kernel
    loaded its module, 25.6 ms, at its first use inside the capture) holds no start-up, and neither does a
    capture whose long module load follows a launch; the same load before any launch is the start-up."""
    lazy = ("cuLibraryLoadData", 10 * T, 10 * T + 25_000_000, 5, "other")
    launch = ("cudaLaunchKernel", 2 * T, 4 * T, 5, "launch")
    for first in ([("cuProfilerStart", 0, T, 5, "other"), launch, lazy], [launch, lazy]):
        ph = analyze(_begun_mid_run(first)).to_json()["phases"]
        assert ph["startup_in_capture"] is False and ph["time_to_first_inference_ms"] is None, first
    ph = analyze(_begun_mid_run([("cuLibraryLoadData", 0, 25_000_000, 5, "other")])).to_json()["phases"]
    assert ph["startup_in_capture"] is True and ph["time_to_first_inference_ms"] > 100


def test_the_steady_state_ends_with_the_work_the_loop_launched_not_the_programs_next_phase():
    """A busy loop of 20 requests, then an unranged pass of 50 small kernels over 25 ms (a sweep's per-layer
    pass after its timed loop, seen on harness_cls_streams: 44% busy and 'bound by the host' for a loop the
    GPU ran 98% busy). The last request's kernel, still running after its range ends, stays in."""
    krows, nv, t = [], [], 0
    for i in range(20):
        nv.append(("request", t, t + 100 * T, 5))
        krows.append((t + 10 * T, t + 190 * T, 5, t + 5 * T))  # runs on past the range: async
        t += 200 * T
    loop_end = krows[-1][1]
    for j in range(50):  # the next phase: launched after the loop
        s0 = t + 500 * T + j * 500 * T
        krows.append((s0, s0 + 10 * T, 5, s0 - 5 * T))
    data = analyze(Trace(kernels=kernels(*krows), nvtx=ranges(*nv))).to_json()
    steady = data["phases"]["steady"]
    assert steady["end_ms"] == pytest.approx(loop_end / 1e6)
    assert steady["gpu_busy_fraction"] > 0.85 and data["inference"]["bound_by"] == "compute"
    assert not [f for f in data["findings"] if f["rule"] == "gpu_idle"]


def test_a_few_requests_after_a_long_unranged_warm_up_are_the_inference():
    """Four ranged requests (0.1 ms of GPU work each) after 30 ms of warm-up GPU work outside any range
    (first-call autotuning): under a quarter of the capture's GPU work, but nearly all of it in their span.
    A repeated range that launches nothing (a sync point) is never the unit."""
    krows = [(i * 10_000 * T, (i + 1) * 10_000 * T - T, 5, i * 10_000 * T) for i in range(3)]  # warm-up
    nv, t = [], 40_000 * T
    for i in range(4):
        nv.append(("request", t, t + 300 * T, 5))
        krows.append((t + 20 * T, t + 120 * T, 5, t + 10 * T))
        nv.append(("sync", t + 250 * T, t + 260 * T, 5))
        t += 1_000 * T
    data = analyze(Trace(kernels=kernels(*krows), nvtx=ranges(*nv))).to_json()
    inf = data["inference"]
    assert inf["source"] == "nvtx" and inf["series"] == "request" and inf["count"] == 4
    assert inf["gpu_ms"]["median"] == pytest.approx(0.1)
    # the same requests beside about five times their GPU work in their own span, launched outside them
    # (the last one after the span): not the unit
    for i in range(4):
        t0 = 40_000 * T + i * 1_000 * T + 310 * T
        krows.append((t0, t0 + 650 * T, 5, t0 - 5 * T))
    data = analyze(Trace(kernels=kernels(*krows), nvtx=ranges(*nv))).to_json()
    assert data["inference"]["source"] == "window"
    # two marked iterations in the middle of a 100-iteration loop: the loop goes on after them, no unit (the
    # other iterations carry one-off names: numbered ones, iter#0 ... iter#99, would be a series of their own)
    loop, marks = [], []
    for i in range(100):
        t = 100_000 * T + i * 200 * T
        loop.append((t + 20 * T, t + 120 * T, 5, t + 10 * T))
        marks.append(("iter" if i in (50, 51) else f"iter{chr(65 + i % 26)}{chr(65 + i // 26)}", t, t + 150 * T, 5))
    data = analyze(Trace(kernels=kernels(*loop), nvtx=ranges(*marks))).to_json()
    assert data["inference"]["source"] == "window"


@pytest.mark.parametrize("name", ["v2026.1.1_testcuda_rtx4060ti_report1.sqlite", "v2023.2.3_clue_t4_report3.sqlite"])
def test_real_captures_that_begin_with_the_cuda_start_up_say_so(nsys_fixtures, name):
    """testcuda begins with cuModuleGetLoadingMode and a 341 ms cudaHostAlloc, clue with a 216 ms
    cudaMallocManaged: the process's CUDA start-up is in the capture (the review saw the opposite claimed)."""
    from profiler.cli.analyze import inference_lines
    from tests.capture_builders import result_of

    data = result_of(nsys_fixtures / name).to_json()
    assert data["phases"]["startup_in_capture"] is True
    assert not any("starts after the process's CUDA start-up" in line for line in inference_lines(data))


def test_pageable_vs_pinned_gets_its_time_to_first_inference():
    """nsys launched python itself: the capture holds its start-up, and the 4.5 s setup is its time to the
    first inference (the review saw "the capture starts after the process's CUDA start-up" beside it)."""
    from profiler.cli.analyze import inference_lines
    from tests.capture_builders import capture_or_skip, result_of

    data = result_of(capture_or_skip(SAMPLE_TRACES / "pageable_vs_pinned.sqlite")).to_json()
    ph = data["phases"]
    assert ph["startup_in_capture"] is True
    assert ph["time_to_first_inference_ms"] == pytest.approx(ph["setup"]["duration_ms"], rel=0.01)
    assert ph["setup"]["duration_ms"] > 4000
    [line] = [x for x in inference_lines(data) if x.startswith("setup:")]
    assert "time to first inference 45" in line and "starts after" not in line


def test_warmup_and_startup_gap_are_setup_not_steady_state():
    tr = trt_app(n=20, warm_us=3000, startup_gap_us=100_000, layer_us=(150, 40))  # GPU busy 190 of 200 us
    res = analyze(tr)
    data = res.to_json()
    ph = data["phases"]
    assert data["inference"]["warmup_count"] == 1
    assert ph["setup"]["end_ms"] == pytest.approx(100.2)  # inference 1 starts at 100 ms + 200 us
    assert ph["setup"]["what"]["module_loading_ms"] == pytest.approx(99.999)
    assert ph["time_to_first_inference_ms"] == pytest.approx(100 + 0.05 + 3.19)
    # the 100 ms start-up gap and the 3 ms warm-up kernel are not steady-state idleness or jitter
    assert not [f for f in data["findings"] if f["rule"] in ("gpu_idle", "jitter")]
    whole = analyze(tr, AnalysisOptions(include_setup=True)).to_json()
    enq = next(r for r in whole["ranges"] if r["name"] == "ExecutionContext::enqueue")
    assert enq["count"] == 20 and whole["phases"]["included_in_statistics"] == "whole capture"
    steady = next(r for r in data["ranges"] if r["name"] == "ExecutionContext::enqueue")
    assert steady["count"] == 19 and steady["instances"]["start_ms"][0] == pytest.approx(100.2)


def test_streams_overlap_and_concurrency():
    k = kernels((0, 100 * T, 5, 0, 1), (50 * T, 150 * T, 5, 1, 2))
    k.loc[1, "stream_id"] = 8
    mc = pd.DataFrame([{"start_ns": 120 * T, "end_ns": 220 * T, "api_tid": 5, "api_start_ns": 2, "bytes": 1 << 20,
                        "copy_kind": "HtoD", "src_kind": "pinned", "dst_kind": "device", "correlation_id": 3,
                        "device_id": 0, "stream_id": 9, "pid": 1}])
    data = analyze(Trace(kernels=k, memcpy=mc)).to_json()
    streams = {s["stream"]: s for s in data["streams"]}
    assert streams[7]["busy_ms"] == pytest.approx(0.1) and streams[9]["copies"] == 1
    assert data["gpu_concurrency"] == pytest.approx(300 / 220)  # 300 us of stream time in a 220 us union
    assert data["overlap_saved_ms"] == pytest.approx(0.08)
    ov = data["copy_compute_overlap"]
    assert ov["overlap_ms"] == pytest.approx(0.03) and ov["share_of_copy"] == pytest.approx(0.3)


def test_one_instance_and_negligible_findings_are_dropped_and_severity_follows_impact():
    from profiler.findings import Finding
    from profiler.rules.impact import calibrate

    res = analyze(trt_app())
    ctx = res.context
    steady_ms = ctx.steady_ns / 1e6
    mk = lambda rule, ev, rng=None: Finding(rule=rule, severity="high", title="t", range=rng, evidence=ev)  # noqa: E731
    out = calibrate(ctx, [
        mk("gpu_idle", {"idle_ms": 0.001 * steady_ms}),                       # 0.1%: negligible, dropped
        mk("gpu_idle", {"idle_ms": 0.10 * steady_ms}),                        # 10%: medium
        mk("jitter", {"excess_ms_total": 0.5 * steady_ms}, "TensorRT:ExecutionContext::enqueue"),  # 50%: high
        mk("pageable_memcpy", {"estimated_saving_ms": None, "cost_upper_bound_ms": 0.0001}),  # negligible
        mk("pageable_memcpy", {"estimated_saving_ms": None}),                 # unknown: at most low
    ])
    assert [(f.rule, f.severity) for f in out] == [("jitter", "high"), ("gpu_idle", "medium"),
                                                    ("pageable_memcpy", "low")]
    assert out[0].impact["share"] == pytest.approx(0.5)
    assert out[0].impact["ms_per_instance"] == pytest.approx(0.5 * steady_ms / 19)
    # a one-instance series needs a large impact
    one = Trace(kernels=kernels((10 * T, 11 * T, 5, 9 * T)), nvtx=ranges(("once", 0, 20 * T, 5)))
    ctx1 = analyze(one).context
    assert calibrate(ctx1, [mk("jitter", {"excess_ms_total": 0.1 * ctx1.steady_ns / 1e6}, "once")]) == []


def test_an_unpriced_finding_is_medium_only_when_what_it_is_known_to_take_is_large():
    """H200: 16 MB inputs copied with .to(device, non_blocking=True) from pageable memory took 291 of 755 ms of the
    steady state's GPU time. With no pinned copy in the capture to compare with, the saving is unknown, and the
    finding was low under a 'no problem worth acting on' headline. Copies that take a quarter of the GPU time or
    more are worth pinning: medium, with what they take said and the share still unknown (never high)."""
    from profiler.findings import Finding
    from profiler.rules.impact import IMPACT_HIGH_SHARE, calibrate

    ctx = analyze(trt_app()).context
    steady_ms = ctx.steady_ns / 1e6
    mk = lambda sev, gpu_share: Finding(rule="pageable_memcpy", severity=sev, title="t", evidence={  # noqa: E731
        "estimated_saving_ms": None, "gpu_ms": gpu_share * steady_ms})
    big, small, rule_low = calibrate(ctx, [mk("high", 0.386), mk("high", 0.9 * IMPACT_HIGH_SHARE), mk("low", 0.5)])
    assert (big.severity, small.severity, rule_low.severity) == ("medium", "low", "low")
    assert big.impact["share"] is None and big.impact["exposure_share"] == pytest.approx(0.386)
    assert big.impact["text"].endswith("38.6% of the steady state's GPU time; the saving is not measured")
    assert "exposure_share" not in rule_low.impact  # the rule's own low stands


def test_explained_jitter_stays_as_information_when_what_is_left_is_negligible():
    """A range whose spread is waits for the GPU's backlog (or the work each instance brings) costs almost
    nothing once those are set apart; dropping the finding left the range table's CoV of 330% unexplained."""
    from profiler.findings import Finding
    from profiler.rules.impact import calibrate

    ctx = analyze(trt_app()).context
    left = 0.001 * ctx.steady_ns / 1e6
    rng = "TensorRT:ExecutionContext::enqueue"
    mk = lambda **ev: Finding(rule="jitter", severity="low", title="t", range=rng, evidence=ev)  # noqa: E731
    for explained in ({"backlog_wait_ms": 30.0}, {"launch_queue_wait_ms": 30.0}, {"by_work": {"cov_pct_max": 5.0}}):
        [f] = calibrate(ctx, [mk(excess_ms_total=left, **explained)])
        assert f.severity == "info" and f.impact["share"] == pytest.approx(0.001)
    assert calibrate(ctx, [mk(excess_ms_total=left)]) == []  # unexplained and negligible: dropped as before


def test_a_capture_too_short_to_judge_gets_low_findings_only():
    from profiler.findings import Finding
    from profiler.rules.impact import MIN_JUDGED_MS, calibrate

    short = Trace(kernels=kernels((10 * T, 11 * T, 5, 9 * T)), nvtx=ranges(("once", 0, 20 * T, 5)))
    ctx = analyze(short).context
    assert ctx.steady_ns / 1e6 < MIN_JUDGED_MS
    (f,) = calibrate(ctx, [Finding(rule="gpu_idle", severity="high", title="t",
                                   evidence={"idle_ms": 0.8 * ctx.steady_ns / 1e6})])
    assert f.severity == "low" and f.impact["share"] == pytest.approx(0.8)


def test_a_finding_inside_a_range_with_the_same_finding_is_reported_once():
    from profiler.findings import Finding
    from profiler.rules.impact import calibrate

    ctx = analyze(trt_app()).context
    steady_ms = ctx.steady_ns / 1e6
    mk = lambda rng, share: Finding(rule="transfer_bound", severity="high", title="t", range=rng,  # noqa: E731
                                    evidence={"exposed_copy_ms_total": share * steady_ms})
    out = calibrate(ctx, [mk("TensorRT:layer0", 0.4), mk("TensorRT:ExecutionContext::enqueue", 0.3),
                          Finding(rule="jitter", severity="high", title="t", range="TensorRT:layer1",
                                  evidence={"excess_ms_total": 0.2 * steady_ms})])
    assert [(f.rule, f.range) for f in out] == [("transfer_bound", "TensorRT:ExecutionContext::enqueue"),
                                                 ("jitter", "TensorRT:layer1")]  # another rule stays
    assert out[0].evidence["also_inside"] == ["TensorRT:layer0"]


def test_sync_on_a_busy_gpu_is_not_a_finding():
    """Two stream syncs per step: while the GPU runs the step's kernel the waits cost nothing."""
    krows, arows, nv = [], [], []
    t = 0
    for i in range(20):
        nv.append(("step", t, t + 100 * T, 5))
        krows.append((t + 2 * T, t + 96 * T, 5, t + 1 * T, i + 1))
        arows += [("cudaStreamSynchronize", t + 5 * T, t + 40 * T, 5, "sync"),
                  ("cudaStreamSynchronize", t + 41 * T, t + 96 * T, 5, "sync")]
        t += 100 * T
    res = analyze(Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv)))
    assert not [f for f in res.findings if f.rule == "sync_api"]


def test_cuda_graph_inference_says_layers_exist_only_at_capture():
    tr = trt_app(n=5)
    g = pd.DataFrame([{"start_ns": i * 200 * T + 50 * T, "end_ns": i * 200 * T + 90 * T, "api_tid": 5,
                       "api_start_ns": i * 200 * T + 3 * T, "correlation_id": 100 + i, "device_id": 0,
                       "stream_id": 7, "pid": 1, "graph_id": 1} for i in range(5)])
    nv = tr.nvtx[tr.nvtx["name"] == "ExecutionContext::enqueue"]
    data = analyze(Trace(graphs=g, nvtx=nv)).to_json()
    assert data["inference"]["graph_launches"] == 5 and data["layers"] == []
    assert "captured" in data["layer_total"]["note"] and "trtexec" in data["layer_total"]["note"]
    # the same replays in a range of the application's own (a PyTorch CUDA graph): no trtexec advice
    own = analyze(Trace(graphs=g, nvtx=nv.assign(domain="", name="batch"))).to_json()
    assert own["inference"]["source"] == "nvtx" and own["inference"]["graph_launches"] == 5
    note = own["layer_total"]["note"]
    assert "captured" in note and "TensorRT" not in note and "trtexec" not in note


def test_layer_info_join(tmp_path):
    info = tmp_path / "layers.json"
    info.write_text(json.dumps({"Layers": [
        {"Name": "layer0", "LayerType": "CaskConvolution", "TacticName": "sm80_xmma_fprop", "Inputs": [
            {"Name": "x", "Format/Datatype": "Channel major FP16 format"}], "Outputs": []},
        {"Name": "other", "LayerType": "Reformat"}]}))
    data = analyze(trt_app(), AnalysisOptions(layer_info=str(info))).to_json()
    by = {x["name"]: x for x in data["layers"]}
    assert by["TensorRT:layer0"]["engine"]["type"] == "CaskConvolution"
    assert by["TensorRT:layer0"]["engine"]["tactic"] == "sm80_xmma_fprop"
    assert data["layer_info"]["matched"] == 1 and data["layer_info"]["unmatched"] == ["TensorRT:layer1"]


def test_cli_flags(tmp_path):
    import subprocess
    import sys

    def trtprof(*args):
        return subprocess.run([sys.executable, "-m", "profiler", *args], capture_output=True, text=True)

    r = trtprof("analyze", str(tmp_path / "cap.sqlite"), "--no-store", "--layer-info", str(tmp_path / "no.json"))
    assert r.returncode == 3 and "--layer-info" in r.stderr


@pytest.mark.parametrize("name", ["trt_eager", "transfer_bound", "no_nvtx"])
def test_steady_subset_equals_a_rebuild_of_the_cut_capture(name):
    """``SeriesTable.subset`` (no re-sort) gives the metrics a fresh build of the cut trace gives."""
    from profiler.capture import load_trace
    from profiler.capture import series as S
    from profiler.capture.phases import split
    from tests.conftest import SAMPLE_TRACES

    path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present")
    trace = load_trace(path)
    full = S.build_series(trace)
    ph = split(full, U.build_unit(full), int(trace.meta["capture_start_ns"]))
    lo, hi = ph.steady_start_ns, ph.steady_end_ns
    assert ph.has_setup
    cut = {}
    for f in ("kernels", "memcpy", "memset", "graphs", "api", "nvtx", "osrt"):
        df = getattr(trace, f)
        cut[f] = df[(df["start_ns"] >= lo) & (df["start_ns"] <= hi)].reset_index(drop=True) if len(df) else df
    fresh = S.build_series(Trace(meta=trace.meta, **cut))
    sub = full.subset(lo, hi)
    assert list(sub.series["name"]) == list(fresh.series["name"])
    assert list(sub.series["count"]) == list(fresh.series["count"])
    for col in ("wall_ns", "gpu_busy_ns", "compute_ns", "copy_ns", "launches", "api_ns", "sync_ns", "osrt_ns",
                "depth", "outlier"):
        assert sub.instances[col].tolist() == fresh.instances[col].tolist(), col
    assert len(sub.activity) == len(fresh.activity) and len(sub.api) == len(fresh.api)


@pytest.mark.parametrize("name,first_event_s", [("v2026.2.1_nsysai_h100_2gpu_1s_nvtx.sqlite", 155.0),
                                                ("v2026.2.1_nsysai_mfu_2gpu_after.sqlite", 72.0)])
def test_real_captures_that_begin_mid_run_have_no_time_to_first_inference(nsys_fixtures, name, first_event_s):
    """Both captures begin tens of seconds into a training run: their first inference is not the process's."""
    from tests.capture_builders import result_of

    ph = result_of(nsys_fixtures / name).to_json()["phases"]
    assert ph["setup"]["start_ms"] > first_event_s * 1000
    assert ph["startup_in_capture"] is False and ph["time_to_first_inference_ms"] is None


def test_training_capture_copies_are_not_charged_per_inference_and_gpu_time_shares_count_both_gpus(nsys_fixtures):
    """The nsysai H100 capture: FSDP::pre_forward (2 instances) is the repeated range chosen as the unit, but
    it launched almost none of the steady state's compute: the steady state's copies (on two GPUs) are not
    divided among its two instances, and the aten::to copies' cost is a share of both GPUs' time."""
    from tests.capture_builders import result_of

    data = result_of(nsys_fixtures / "v2026.2.1_nsysai_h100_2gpu_1s_nvtx.sqlite").to_json()
    assert data["inference"]["series"] == "FSDP::pre_forward (shared)"
    tb = [f for f in data["findings"] if f["rule"] == "transfer_bound"]
    assert all("by_direction" not in f["evidence"] or "bound_by" not in f["evidence"] for f in tb)
    assert not any(f["range"] == "FSDP::pre_forward (shared)" and "bound_by" in f["evidence"] for f in tb)
    to = next(f for f in tb if f["range"] == "aten::to")
    assert to["impact"]["gpus"] == 2 and 0.3 < to["impact"]["share"] < 1.0  # 1041 ms of copies / (2 x 969 ms)


def _trt_app_copying_every_other(unknown_launch: bool = False) -> Trace:
    """trt_app's loop where inferences 2, 4, ..., 20 copy, as TensorRT's samples do, outside the enqueue: an
    88 us HtoD copy launched 30 us before the enqueue and a 40 us DtoH copy launched after it; the other
    inferences only enqueue (40 us of kernels each). ``unknown_launch``: one copy's launch call is not in the
    capture."""
    tr = trt_app(n=21)
    rows = []
    for i in range(2, 21, 2):
        t = i * 200 * T
        for kind, api_ns, start, end in (("HtoD", t - 30 * T, t - 40 * T, t + 48 * T),
                                          ("DtoH", t + 25 * T, t + 92 * T, t + 132 * T)):
            rows.append({"start_ns": start, "end_ns": end, "api_tid": 5, "api_start_ns": api_ns, "bytes": 1 << 20,
                         "copy_kind": kind, "src_kind": "pinned", "dst_kind": "pinned", "device_id": 0,
                         "correlation_id": 10_000 + len(rows), "stream_id": 7, "pid": 1})
    if unknown_launch:
        rows[0]["api_tid"] = -1
    tr.memcpy = pd.DataFrame(rows)
    return tr


def test_steady_copy_figures_are_per_inference_that_copies():
    """Half the steady inferences copy: each that does copies 88 us in, 2.2x its 40 us of compute (not 44 us
    "on average" in "0.5 copies per inference", 1.1x); the cost stays all of the steady state's exposed copy time."""
    [f] = [f for f in analyze(_trt_app_copying_every_other()).findings if f.rule == "transfer_bound"]
    ev = f.evidence
    assert ev["bound_by"] == "HtoD" and ev["instances"] == 20 and ev["instances_with_copies"] == 10
    assert ev["by_direction"]["HtoD"]["instances"] == 10 and ev["by_direction"]["HtoD"]["copies_per_instance"] == 1
    assert ev["by_direction"]["HtoD"]["gpu_ms_per_instance"] == pytest.approx(0.088)
    assert ev["compute_ms_per_instance"] == pytest.approx(0.040)
    assert ev["copy_to_compute"] == pytest.approx(2.2)
    assert f.title.startswith("HtoD-bound: HtoD copies take 0.088 ms of GPU time per inference in the 10 of 20 "
                              "inferences that copy (1 copy per inference of 1 MiB")
    assert "against 0.04 ms of compute (2.20x)" in f.title
    copy_ms = ev["gpu_ms_by_kind"]["HtoD"] + ev["gpu_ms_by_kind"]["DtoH"]  # no copy overlaps a kernel
    assert ev["exposed_copy_ms_total"] == pytest.approx(copy_ms) == pytest.approx(f.impact["ms_total"])
    # a copy whose launch call is not in the capture: which inferences copy is unknown, all are taken to
    [g] = [g for g in analyze(_trt_app_copying_every_other(True)).findings if g.rule == "transfer_bound"]
    assert g.evidence["instances_with_copies"] == 20 and "per inference on average" in g.title
    assert g.evidence["exposed_copy_ms_total"] == pytest.approx(ev["exposed_copy_ms_total"])


def test_training_capture_transfer_cost_is_every_copy_on_both_gpus(nsys_fixtures):
    """The nsysai H100 capture (FSDP, 2 GPUs, one stream each): per GPU 223 pinned HtoD copies (~921 ms) and
    225 DtoD, against ~22 ms of kernels. The aten::to ranges hold 1041 ms of the copies; most of the rest were
    launched by threads the capture does not show. The cost is all the copies' exposed time on both GPUs
    (~97% of their GPU time, none hidden behind compute), and the title says how much aten::to holds."""
    data = analyze_path(nsys_fixtures / "v2026.2.1_nsysai_h100_2gpu_1s_nvtx.sqlite").to_json()  # as `analyze` shows it
    [f] = [f for f in data["findings"] if f["rule"] == "transfer_bound"]
    ev, st, ov = f["evidence"], f["evidence"]["steady_state"], data["copy_compute_overlap"]  # per GPU, summed
    assert f["range"] == "aten::to" and st["gpus"] == 2 and st["bound_by"] == "HtoD" and f["severity"] == "high"
    assert ev["exposed_copy_ms_total"] == pytest.approx(ov["copy_ms"] - ov["overlap_ms"]) == f["impact"]["ms_total"]
    assert st["copy_ms"] == pytest.approx(sum(s["copy_ms"] for s in data["streams"]))  # one stream per GPU
    assert f["impact"]["share"] == pytest.approx(ov["copy_ms"] / (2 * data["phases"]["steady"]["duration_ms"]))
    assert f["impact"]["share"] > 0.95 and f["impact"]["gpus"] == 2
    assert st["range_exposed_copy_ms_total"] == pytest.approx(1041.0, abs=0.5)  # 1190 x 0.875 ms
    assert 800 < st["unknown_launch_copy_ms"] < st["copy_ms"] - st["range_exposed_copy_ms_total"]
    assert f["title"].startswith("HtoD-bound steady state: copies take 1875 ms of the 1939 ms of GPU time on 2 GPUs "
                                 "(96.7%), 41.8x the 44.9 ms of compute; 0% of copy time overlaps compute. "
                                 "aten::to holds 1041 ms of the copies (0.875 ms per instance")
    assert "815.3 ms were launched by threads the capture does not show" in f["title"]


@pytest.fixture(scope="module")
def tensorrt_dtoh() -> dict:
    """The TensorRT cookbook's DtoH-bound capture as `trtprof analyze` shows it (steady state)."""
    from profiler.capture.analyze import analyze_path
    from tests.capture_builders import capture_or_skip
    from tests.conftest import SHARED

    return analyze_path(capture_or_skip(SHARED / "fixtures" / "nsys-tensorrt" / "multistream_DtoH-bound.sqlite"),
                        cache=False).to_json()


def test_tensor_core_labels_say_unknown_when_the_name_says_neither():
    from profiler.capture.layer_table import gpu_tensor_cores, uses_tensor_cores

    assert uses_tensor_cores("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc") is True
    # FlashAttention's kernels run their matrix products on MMA atoms (the one table, profiler.kernel_math)
    assert uses_tensor_cores("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>") is True
    assert uses_tensor_cores("__myl_AddMulRouMaxMinTra_0xa2e185eeee77c88be9eabf5c34ef6679") is None
    assert uses_tensor_cores("ampere_sgemm_128x64_nn") is False
    assert uses_tensor_cores("void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float>") is False
    assert uses_tensor_cores("void at::native::<unnamed>::adaptive_average_pool<float>") is False
    # cuBLASLt's separate bias/activation epilogue after an FP32 sgemm (an H200 capture of torch Linear layers):
    # no MMA, so the layer reads "no Tensor Cores", not "unknown"; a CUTLASS tensor-op GEMM with a fused
    # epilogue in its template arguments still says it uses them
    assert uses_tensor_cores("void cublasLt::epilogue::impl::globalKernel<(int)8, (int)32, float, float, float, "
                             "(bool)1, (bool)1, (int)1>(int, int, long, T3 *, cublasLtEpilogue_t, int, T4 *)") is False
    assert uses_tensor_cores("cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4> "
                             "cutlass::epilogue::thread::LinearCombination") is True
    # an xmma kernel doing FP32 FMA on the CUDA cores (the multistream TensorRT captures' convolution), read
    # as the import rule reads the same tactic name
    from profiler.rules.layers import tensor_core_kind

    ffma = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage1_warpsize1x2x1_g1_ffma_t1r1s1"
    assert uses_tensor_cores(ffma) is False and tensor_core_kind(ffma) == "no-tensor-core"
    assert gpu_tensor_cores([{"compute_major": 6, "compute_minor": 1}]) is False
    assert gpu_tensor_cores([{"compute_major": 9}, {"compute_major": 9}]) is True
    assert gpu_tensor_cores([{"name": None, "compute_major": None}]) is None


def test_flash_attention_is_not_said_to_miss_tensor_cores(nsys_fixtures):
    """nsysai mfu capture: flash::flash_fwd_kernel runs on Tensor Cores (FlashAttention's MMA atoms)."""
    from profiler.cli.analyze import inference_lines
    from tests.capture_builders import result_of

    data = result_of(nsys_fixtures / "v2026.2.1_nsysai_mfu_2gpu_after.sqlite").to_json()
    flash = next(r for r in data["layers"] if r["name"] == "flash_attn::_flash_attn_forward")
    assert "flash_fwd_kernel" in flash["kernels"][0]["name"] and flash["tensor_cores"] is True
    [line] = [x for x in inference_lines(data) if "flash_attn::_flash_attn_forward" in x]
    assert "Tensor Cores" in line and "no Tensor Cores" not in line and "unknown" not in line


def test_pascal_gpu_is_said_to_have_no_tensor_cores_once(tensorrt_dtoh):
    """The cookbook captures ran on a GTX 1070 (compute capability 6.1): one line says the GPU has none."""
    from profiler.cli.analyze import inference_lines

    data = tensorrt_dtoh
    assert data["layer_total"]["gpu_tensor_cores"] is False and data["layers"][0]["tensor_cores"] is False
    lines = inference_lines(data)
    assert "  (no Tensor Cores on this GPU: NVIDIA GeForce GTX 1070, compute capability 6.1)" in lines
    layer_lines = [x for x in lines if x.startswith("  TensorRT:")]
    assert layer_lines and not any("Tensor Cores" in x for x in layer_lines)


def test_terminal_summary_labels_means_counts_and_minor_streams(tensorrt_dtoh):
    from profiler.cli.analyze import inference_lines

    lines = inference_lines(tensorrt_dtoh)
    # the layer sum is of means (the layer column beside it shows medians)
    assert any(x.startswith("  sum of layer means ") and "vs inference mean" in x for x in lines)
    # 8 streams have GPU work; 5 of them hold a few microseconds of the 1.4 s (uploads, build)
    busy = sorted(s["busy_ms"] for s in tensorrt_dtoh["streams"] if s["busy_ms"] > 0)
    total = sum(busy)
    big = sum(1 for b in busy if b > 0.01 * total)
    assert len(busy) == 8 and big == 3
    assert any(x.startswith("streams: 8 with GPU work (3 with more than 1% of the GPU time);") for x in lines)
    # an inference unit with a single instance: '1 instance', not '1 instances'
    one = analyze(trt_app(n=1)).to_json()
    assert one["inference"]["count"] == 1 and ", 1 instance (" in inference_lines(one)[0]


def test_unnamed_gpus_are_not_called_none(nsys_fixtures):
    """The nsysai 2-GPU capture has no GPU names: findings say "GPU 0", never "GPU 0 (None)"."""
    from tests.capture_builders import result_of

    data = result_of(nsys_fixtures / "v2026.2.1_nsysai_mfu_2gpu_after.sqlite").to_json()
    assert data["capture"]["gpus"][0]["name"] is None
    assert not any("(None)" in f["title"] for f in data["findings"])


def _window_app(alloc_ms: float = 300.0, teardown_ms: float = 100.0, n: int = 50, busy_us: int = 80):
    """No NVTX: a 300 ms first allocation (the context is made inside it), then n launches 100 us apart whose
    kernels keep the GPU busy ``busy_us`` of each 100 us, then a long teardown (frees)."""
    t0 = int(alloc_ms * 1e6)
    arows = [("cudaMalloc_v3020", 0, t0, 5, "other")]
    krows = []
    for i in range(n):
        s = t0 + i * 100 * T
        arows.append(("cudaLaunchKernel_v7000", s, s + 2 * T, 5, "launch"))
        krows.append((s + 10 * T, s + (10 + busy_us) * T, 5, s, i + 1))
    end = t0 + n * 100 * T
    arows.append(("cudaFree_v3020", end, end + int(teardown_ms * 1e6), 5, "other"))
    return Trace(kernels=kernels(*krows), api=api(*arows))


def test_without_nvtx_the_steady_state_is_the_gpu_work_window_not_its_start_up_or_teardown():
    """The review's 'start-up blamed on steady state' for captures without NVTX: a 300 ms allocation before
    5 ms of GPU work 80% busy read as a steady state of 405 ms, 1% busy and bound by the host."""
    data = analyze(_window_app()).to_json()
    ph = data["phases"]
    assert ph["steady"]["start_ms"] == pytest.approx(300.0)  # the first launch
    assert ph["steady"]["duration_ms"] == pytest.approx(4.99)  # to the last kernel's end, not the frees'
    assert ph["steady"]["gpu_busy_fraction"] == pytest.approx(4.0 / 4.99, rel=1e-3)
    assert ph["setup"]["duration_ms"] == pytest.approx(300.0)
    assert ph["setup"]["what"]["allocation_ms"] == pytest.approx(300.0)
    # a launch every 100 us for 80 us of work, the host never waiting on it: the host sets the pace
    assert data["inference"]["bound_by"] == "host"
    assert not [f for f in data["findings"] if f["rule"] == "gpu_idle"]  # 20 us gaps: none long enough
    assert analyze(_window_app(busy_us=95)).to_json()["inference"]["bound_by"] == "compute"  # 5% idle: saturated
    idle = analyze(_window_app(busy_us=5)).to_json()  # the same loop, the GPU busy 5% of its window
    assert idle["inference"]["bound_by"] == "host"
    assert idle["phases"]["steady"]["duration_ms"] == pytest.approx(4.915)


def test_without_nvtx_the_setup_line_names_the_calls_before_the_work():
    from profiler.cli.analyze import inference_lines

    [line] = [x for x in inference_lines(analyze(_window_app()).to_json()) if x.startswith("setup:")]
    assert line.startswith("setup: 300.0 ms before the steady state (allocations 300.0 ms); steady state 5.0 ms")
    assert "warm-up" not in line and "inferences" not in line


def test_testcuda_is_copy_bound_in_its_work_window(nsys_fixtures):
    """testcuda (RTX 4060 Ti, no NVTX): 710 ms of cudaHostAlloc/cudaMalloc, 118 ms of work whose copies take
    91.6 ms, then 145 ms of frees. Its steady state is the 118 ms: copy-bound (HtoD 61 ms against DtoH 30 ms),
    one transfer finding (not one for the window and one for its 'inferences'), high: 77% of the work."""
    data = analyze_path(nsys_fixtures / "v2026.1.1_testcuda_rtx4060ti_report1.sqlite").to_json()
    ph = data["phases"]
    assert ph["steady"]["duration_ms"] == pytest.approx(118.43, abs=0.01)
    assert ph["setup"]["what"]["allocation_ms"] == pytest.approx(710.5, abs=0.1)
    assert data["inference"]["bound_by"] == "HtoD"
    [f] = [f for f in data["findings"] if f["rule"] == "transfer_bound"]
    assert f["severity"] == "high" and f["range"] is None
    assert f["impact"]["share"] == pytest.approx(91.65 / 118.43, rel=1e-3)


def _step_loop(helper_tid: int = 9, second_ranged_thread: bool = False, helper_kernels: int = 1):
    """Training-shaped steps on thread 5: each 'step' range launches a 20 us forward kernel itself while a
    helper thread (PyTorch's autograd thread) launches the backward inside the range: ``helper_kernels``
    kernels of 60 us in all."""
    nv, krows = [], []
    corr = 1
    for i in range(10):
        t = i * 200 * T
        nv.append(("step", t, t + 150 * T, 5))
        krows.append((t + 10 * T, t + 30 * T, 5, t + 2 * T, corr))  # forward, launched by the range's thread
        each = 60 // helper_kernels
        for j in range(helper_kernels):  # backward, by the helper
            krows.append((t + (40 + j * each) * T, t + (40 + (j + 1) * each) * T, helper_tid, t + (35 + j) * T,
                          corr + 1 + j))
        corr += 1 + helper_kernels
    if second_ranged_thread:
        nv.append(("other", 0, 5 * T, 7))
    return Trace(kernels=kernels(*krows), nvtx=ranges(*nv))


def test_gpu_work_of_a_thread_without_ranges_counts_in_the_one_ranged_threads_range():
    """The train capture on the H200 showed 0.50 ms of GPU per step against 0.81 ms busy: the backward
    kernels, launched by the autograd thread, were in no range."""
    data = analyze(_step_loop()).to_json()
    [step] = [r for r in data["ranges"] if r["name"] == "step"]
    assert step["gpu_busy_ms"]["median"] == pytest.approx(0.080)  # 20 us forward + 60 us backward
    assert step["kernels_per_instance"] == 2
    assert any("open no NVTX range" in w for w in data["capture"]["warnings"])


def test_the_cross_thread_note_says_how_many_of_a_ranges_launches_its_own_thread_made():
    """The H200 train capture's range table counted 23 launches per step, its own thread's 14 calls and the
    autograd thread's 9: the note says which part is whose, in the range table's terms."""
    from profiler.cli.analyze import summary_lines

    data = analyze(_step_loop(helper_kernels=3)).to_json()
    [step] = [r for r in data["ranges"] if r["name"] == "step"]
    assert step["launches_per_instance"] == 4 and step["kernels_per_instance"] == 4
    [note] = [w for w in data["capture"]["warnings"] if "open no NVTX range" in w]
    assert note.endswith("; of the launches per instance in the range table they make 3 of step's 4 (its own "
                         "thread 1) in the median instance")
    assert note.startswith("30 GPU activities launched by 1 thread(s)")
    assert any(x.endswith("launches: the kernel and graph launches of that work per instance)")
               for x in summary_lines(data))
    # two threads open ranges: whose range the helper served is unknown, so its work stays out
    both = analyze(_step_loop(second_ranged_thread=True)).to_json()
    [step] = [r for r in both["ranges"] if r["name"] == "step"]
    assert step["gpu_busy_ms"]["median"] == pytest.approx(0.020)
    assert not any("open no NVTX range" in w for w in both["capture"]["warnings"])


def test_a_second_loops_slow_first_instance_is_its_warm_up_not_jitter():
    """Two worker threads serve batches (the H200 streams capture): worker1's first batch took 155 ms
    creating its cuBLAS handle against 0.37 ms for the rest, and read as HIGH jitter of the steady state."""
    nv, krows, corr = [], [], 1
    for tid, name, offset in ((5, "worker0", 0), (6, "worker1", 50 * T)):
        t = offset
        for i in range(20):
            wall = (5000 if i == 0 else 100) * T  # each thread's first batch is its warm-up
            nv.append((name, t, t + wall, tid))
            krows.append((t + wall - 60 * T, t + wall - 10 * T, tid, t + wall - 70 * T, corr))
            corr += 1
            t += wall + 20 * T
    data = analyze(Trace(kernels=kernels(*krows), nvtx=ranges(*nv))).to_json()
    counts = {r["name"]: r["count"] for r in data["ranges"]}
    assert counts == {"worker0": 19, "worker1": 19}  # both first batches are setup
    assert not [f for f in data["findings"] if f["rule"] == "jitter"]
    assert data["phases"]["steady"]["start_ms"] == pytest.approx(5.02)  # worker0's second batch, the earlier


def _launches_without_kernels(begin_capture: bool = False):
    """A loop whose launch calls are in the export but whose kernels are not (an nsys --delay capture on the
    H200 held 84,096 cudaLaunchKernel calls, 16,820 memsets and no kernel table), each step one memset."""
    nv, arows, ms = [], [], []
    for i in range(30):
        t = i * 200 * T
        nv.append(("infer", t, t + 150 * T, 5))
        arows += [("cudaLaunchKernel_v7000", t + 5 * T, t + 8 * T, 5, "launch"),
                  ("cudaStreamSynchronize_v3020", t + 10 * T, t + 140 * T, 5, "sync")]
        ms.append({"start_ns": t + 9 * T, "end_ns": t + 10 * T, "api_tid": 5, "api_start_ns": t + 8 * T,
                   "correlation_id": 500 + i, "device_id": 0, "stream_id": 7, "pid": 1, "bytes": 64})
    if begin_capture:
        arows.append(("cudaStreamBeginCapture_v10000", 0, T, 5, "other"))
    return Trace(memset=pd.DataFrame(ms), api=api(*arows), nvtx=ranges(*nv))


def test_launch_calls_without_kernel_records_are_not_judged_as_an_idle_gpu():
    from profiler.report.verdict import analysis_verdict

    data = analyze(_launches_without_kernels()).to_json()
    assert data["capture"]["kernel_launches_without_records"] == 30
    assert any("30 kernel launch calls but no kernel records" in m for m in data["capture"]["missing"])
    assert not [f for f in data["findings"] if f["rule"] in ("gpu_idle", "launch_overhead", "transfer_bound")]
    assert data["phases"]["steady"]["gpu_busy_fraction"] is None and data["inference"]["bound_by"] is None
    v = analysis_verdict(data)
    assert v["status"] == "INCONCLUSIVE" and v["headline"].startswith("GPU time not judged")
    # the same calls made while capturing a CUDA graph ran nothing: no kernels are missing there
    captured = analyze(_launches_without_kernels(begin_capture=True)).to_json()
    assert "kernel_launches_without_records" not in captured["capture"]
    assert captured["phases"]["steady"]["gpu_busy_fraction"] is not None


def test_work_of_another_process_or_beside_a_ranged_thread_that_launches_nothing_stays_out():
    """The review's counter-examples: a second process (no NVTX) launching during the steps, and a data
    loader thread opening the only ranges while the main thread launches every kernel."""
    other_process = 2 << 24 | 9  # nsys's global thread id: the process id above bit 24
    data = analyze(_step_loop(helper_tid=other_process)).to_json()
    [step] = [r for r in data["ranges"] if r["name"] == "step"]
    assert step["gpu_busy_ms"]["median"] == pytest.approx(0.020) and step["kernels_per_instance"] == 1
    nv = [("load_batch", i * 200 * T, i * 200 * T + 150 * T, 7) for i in range(10)]
    k = kernels(*[(i * 200 * T + 40 * T, i * 200 * T + 60 * T, 5, i * 200 * T + 35 * T, i + 1) for i in range(10)])
    loader = analyze(Trace(kernels=k, nvtx=ranges(*nv))).to_json()
    [batch] = [r for r in loader["ranges"] if r["name"] == "load_batch"]
    assert batch["kernels_per_instance"] == 0
    assert not any("open no NVTX range" in w for w in loader["capture"]["warnings"])


def test_an_inference_without_gpu_work_says_so_instead_of_a_zero_gpu_time():
    """ONNX Runtime on the CPU provider under nsys (H200 host): NVTX ranges and no GPU work at all. The line read
    'GPU 0.000 ms median (p99 0.000), GPU latency - ms, queue - ms'; an inference with one kernel keeps its GPU
    figures."""
    from profiler.cli.analyze import inference_lines

    cpu_only = Trace(nvtx=ranges(*[("infer", i * 100 * T, (i * 100 + 40) * T, 5) for i in range(12)]))
    [line] = [x for x in inference_lines(analyze(cpu_only).to_json()) if x.startswith("inference:")]
    assert "no GPU work in any instance, host 0.040 ms" in line and "GPU latency" not in line
    one = Trace(kernels=kernels(*[(i * 100 * T + 5 * T, i * 100 * T + 25 * T, 5, i * 100 * T + T, i + 1)
                                  for i in range(12)]),
                nvtx=ranges(*[("infer", i * 100 * T, (i * 100 + 40) * T, 5) for i in range(12)]))
    [line] = [x for x in inference_lines(analyze(one).to_json()) if x.startswith("inference:")]
    assert "GPU 0.020 ms median" in line and "no GPU work" not in line


def _loop(name: str, t: int, n: int, busy_us: int = 100, step_us: int = 200, layers: tuple[str, ...] = (),
          sync: bool = True, tid: int = 5, launch: bool = False):
    """``n`` iterations of ``name`` from ``t`` on thread ``tid``, each launching one kernel (its layers ranged
    inside it when ``layers`` are named; with ``launch`` the launch call is in the capture) and, with ``sync``,
    waiting for it: (range rows, kernel rows, call rows, end)."""
    nv, krows, calls = [], [], []
    for _ in range(n):
        nv.append((name, t, t + (step_us - 20) * T, tid))
        nv.extend((lay, t + (2 + j) * T, t + (3 + j) * T, tid) for j, lay in enumerate(layers))
        krows.append((t + 10 * T, t + (10 + busy_us) * T, tid, t + 5 * T))
        if launch:
            calls.append(("cudaLaunchKernel", t + 5 * T, t + 7 * T, tid, "launch"))
        if sync:
            calls.append(("cudaStreamSynchronize", t + 15 * T, t + (12 + busy_us) * T, tid, "sync"))
        t += step_us * T
    return nv, krows, calls, t


def test_a_loop_inside_a_one_off_range_is_the_inference_and_its_findings_name_the_loop():
    """``with range("benchmark"): for ...: with range("iter")`` (nsys -c nvtx -p benchmark records the wrapper
    too), each iteration waiting for its result: the iterations are the inference, not 'none identified';
    the wrapper, whose one instance is the whole loop, is no candidate of a rule's range findings."""
    from types import SimpleNamespace

    from profiler.capture.series import build_series
    from profiler.rules.capture._common import outermost

    nv, krows, calls, end = _loop("iter", 1_000 * T, 30, layers=("Linear", "GELU"))
    nv.append(("benchmark", 1_000 * T - 5 * T, end, 5))
    tr = Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))
    inf = analyze(tr).to_json()["inference"]
    assert (inf["source"], inf["series"], inf["count"]) == ("nvtx", "iter", 30)
    assert inf["inside"] == "benchmark" and inf["other_loops"] == []
    table = build_series(tr)
    sid = {n: i for i, n in enumerate(table.series["name"])}
    assert U.wrapped_loops(table) == ({sid["iter"]}, {sid["benchmark"]})
    ctx = SimpleNamespace(table=table)
    cands = [(9.0, {"series_id": sid["benchmark"]}, {}), (1.0, {"series_id": sid["iter"]}, {}),
             (0.5, {"series_id": sid["Linear"]}, {})]
    assert [c[1]["series_id"] for c in outermost(ctx, cands, 5)] == [sid["iter"]]
    assert [c[1]["series_id"] for c in outermost(ctx, cands[:1] + cands[2:], 5)] == [sid["Linear"]]
    # --unit on a layer: no enclosing loop range or other loops are claimed for it
    inf = analyze(tr, AnalysisOptions(unit="Linear")).to_json()["inference"]
    assert inf["series"] == "Linear" and "inside" not in inf

def test_a_throughput_loop_inside_a_one_off_range_is_the_inference_when_it_launches_all_of_its_work():
    """The H200 capture asyncwrap.sqlite: ``benchmark`` around 300 ``iter`` ranges queued without waiting, one
    sync after the loop, read 'none identified' and 'HIGH launch_overhead [benchmark]: 3600 launches per
    instance'. Iterations that wait for nothing are still a loop when they make every launch call of the
    range around them; a forward pass whose embedding and head launch outside its ranged blocks is not."""
    nv, krows, calls, end = _loop("iter", 1_000 * T, 30, sync=False, launch=True)
    nv.append(("benchmark", 1_000 * T - 5 * T, end + 50 * T, 5))
    calls.append(("cudaDeviceSynchronize", end, end + 40 * T, 5, "sync"))
    inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
    assert (inf["source"], inf["series"], inf["count"], inf["inside"]) == ("nvtx", "iter", 30, "benchmark")
    # without its launch calls in the capture nothing says the iterations launched all of it
    assert analyze(Trace(kernels=kernels(*krows), nvtx=ranges(*nv))).to_json()["inference"]["source"] == "window"
    # twelve ranged blocks between an embedding and a head launched in the forward range itself
    nv, krows, calls, end = _loop("block", 1_000 * T, 12, sync=False, launch=True)
    for at in (1_000 * T - 30 * T, end + 10 * T):
        krows.append((at + 5 * T, at + 20 * T, 5, at))
        calls.append(("cudaLaunchKernel", at, at + 2 * T, 5, "launch"))
    nv.append(("forward", 1_000 * T - 40 * T, end + 60 * T, 5))
    calls.append(("cudaDeviceSynchronize", end + 30 * T, end + 55 * T, 5, "sync"))
    inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
    assert inf["source"] == "window" and "inside" not in inf
    # a small forward pass with each of its 8 layers ranged alike, nothing launched outside them: too few
    # iterations for a throughput loop
    nv, krows, calls, end = _loop("layer", 1_000 * T, 8, sync=False, launch=True)
    nv.append(("forward", 1_000 * T - 5 * T, end + 50 * T, 5))
    calls.append(("cudaDeviceSynchronize", end, end + 40 * T, 5, "sync"))
    inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
    assert inf["source"] == "window"


def test_a_loop_on_each_worker_thread_inside_a_range_of_that_thread_is_the_inference():
    """The H200 capture perthread.sqlite: two threads, each a ``worker`` range around its own 200 synchronised
    ``iter`` ranges, read 'inference: worker, 2 instances' and 'HIGH launch_overhead [worker]: 2400 launches per
    instance'. A range that runs once on each of its threads is a one-off range of that thread: the
    iterations of both threads are the inference, and the workers are no candidate of a rule's findings."""
    from types import SimpleNamespace

    from profiler.capture.series import build_series
    from profiler.rules.capture._common import outermost

    a, ka, ca, end_a = _loop("iter", 1_000 * T, 20, tid=5)
    b, kb, cb, end_b = _loop("iter", 1_090 * T, 20, tid=6)
    nv = a + b + [("worker", 1_000 * T - T, end_a, 5), ("worker", 1_090 * T - T, end_b, 6)]
    tr = Trace(kernels=kernels(*ka, *kb), api=api(*ca, *cb), nvtx=ranges(*nv))
    data = analyze(tr).to_json()
    inf = data["inference"]
    assert (inf["source"], inf["series"], inf["count"], inf["inside"]) == ("nvtx", "iter", 40, "worker")
    table = build_series(tr)
    sid = {n: i for i, n in enumerate(table.series["name"])}
    assert U.wrapped_loops(table) == ({sid["iter"]}, {sid["worker"]})
    cands = [(9.0, {"series_id": sid["worker"]}, {}), (1.0, {"series_id": sid["iter"]}, {})]
    assert [c[1]["series_id"] for c in outermost(SimpleNamespace(table=table), cands, 5)] == [sid["iter"]]
    # worker > epoch > iter on three threads: the iterations, and no 'epoch' named as another loop
    nv, krows, calls = [], [], []
    for k, tid in enumerate((5, 6, 7)):
        it, kk, cc, end = _loop("iter", (1_000 + 30 * k) * T, 25, tid=tid)
        nv += it + [("epoch", (999 + 30 * k) * T, end, tid), ("worker", (998 + 30 * k) * T, end + T, tid)]
        krows += kk
        calls += cc
    inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
    assert (inf["series"], inf["count"], inf["inside"], inf["other_loops"]) == ("iter", 75, "epoch", [])
    # the same two ranges one after the other on one thread are two instances of a range: not one-off
    a, ka, ca, t = _loop("iter", 1_000 * T, 20)
    b, kb, cb, end = _loop("iter", t + 10 * T, 20)
    nv = a + b + [("worker", 1_000 * T - T, t, 5), ("worker", t + 9 * T, end, 5)]
    table = build_series(Trace(kernels=kernels(*ka, *kb), api=api(*ca, *cb), nvtx=ranges(*nv)))
    assert U.wrapped_loops(table) == (set(), set())


def test_a_thread_per_request_server_keeps_its_requests():
    """Eight threads serving one request each (a range once per thread, like a worker's): each request's 6 or 12
    synchronised layers, or its preprocess, infer and postprocess steps, are no loop of a worker (under 20
    iterations); the requests are the inference."""
    for steps in (["layer"] * 6, ["layer"] * 12, ["preprocess", "infer", "postprocess"]):
        nv, krows, calls = [], [], []
        for k in range(8):
            tid, t0 = 100 + k, (1_000 + 37 * k) * T
            it, kk, cc, end = _loop("x", t0, len(steps), tid=tid)
            nv += [(name, *row[1:]) for name, row in zip(steps, it)] + [("request", t0 - T, end, tid)]
            krows += kk
            calls += cc
        inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
        assert (inf["series"], inf["count"]) == ("request", 8) and "inside" not in inf


def test_one_forward_pass_whose_blocks_or_layers_have_ranges_stays_one_window():
    """One ``forward`` range around 12 ranged blocks (embedding and head beside them), or around Linear/GELU
    pairs: the blocks make 12 of 14 children but are queued without waiting for the GPU, so no block is an
    inference; the layers repeat but none makes two thirds of the children."""
    for names, per in ((["embed"] + ["block"] * 12 + ["head"], 1), (["Linear", "GELU"] * 12, 1)):
        nv, krows, t = [], [], 1_000 * T
        for name in names:
            nv.append((name, t, t + 40 * T, 5))
            krows.extend((t + 10 * T, t + 30 * T, 5, t + 5 * T) for _ in range(per))
            t += 50 * T
        nv.append(("forward", 1_000 * T - 5 * T, t, 5))
        calls = [("cudaDeviceSynchronize", t - 5 * T, t, 5, "sync")]
        inf = analyze(Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv))).to_json()["inference"]
        assert inf["source"] == "window" and "nested ones repeat" in inf["why"] and "inside" not in inf


def test_loops_in_one_off_ranges_of_their_own():
    """Warm-up and timed loops of one ``iter`` in ranges of their own are one unit (the timed range named);
    a sweep's layout (``trtprof`` > ``sweep/a`` > ``a/iter``, then ``sweep/b`` > ``b/iter``) takes the loop
    with the most time, not the last one, and names the other; the other variant's loop is not in its steady
    state. A layer pass ranged directly in the variant's range (more ranges than iterations) hides the loop."""
    warm, k1, c1, t = _loop("iter", 1_000 * T, 5)
    timed, k2, c2, end = _loop("iter", t + 50 * T, 20)
    nv = warm + timed + [("warmup", 1_000 * T - T, t, 5), ("timed", t + 49 * T, end, 5)]
    inf = analyze(Trace(kernels=kernels(*k1, *k2), api=api(*c1, *c2), nvtx=ranges(*nv))).to_json()["inference"]
    assert (inf["series"], inf["count"], inf["inside"]) == ("iter", 25, "timed")

    a, ka, ca, t = _loop("a/iter", 1_000 * T, 20, step_us=300, busy_us=200)
    b, kb, cb, end = _loop("b/iter", t + 1_000 * T, 20, step_us=200)
    nv = a + b + [("sweep/a", 1_000 * T - T, t, 5), ("sweep/b", t + 999 * T, end, 5), ("trtprof", 0, end + T, 5)]
    # after the variants, ten times their GPU work outside any loop (a per-layer pass): each loop is judged
    # on the work in its own range, not on everything from its first instance on
    later = [(end + (50 + 2_100 * j) * T, end + (2_050 + 2_100 * j) * T, 5, end + (45 + 2_100 * j) * T)
             for j in range(30)]
    data = analyze(Trace(kernels=kernels(*ka, *kb, *later), api=api(*ca, *cb), nvtx=ranges(*nv))).to_json()
    inf = data["inference"]
    assert (inf["series"], inf["inside"], inf["other_loops"]) == ("a/iter", "sweep/a", ["b/iter x20"])
    assert data["phases"]["steady"]["end_ms"] < (t + 1_000 * T) / 1e6  # b's loop is not a's steady state
    from profiler.cli.analyze import inference_lines
    assert "an iteration of a loop inside the range sweep/a; other loops: b/iter x20, --unit NAME takes one" in \
        inference_lines(data)[0]
    from profiler.report.verdict import analysis_verdict
    assert analysis_verdict(data)["headline"].endswith("(judged: the loop a/iter; not judged: b/iter x20, "
                                                        "--unit NAME judges one)")

    layer_pass = [(f"Conv@{j}", end + (10 + 5 * j) * T, end + (12 + 5 * j) * T, 5) for j in range(30)]
    nv = b + layer_pass + [("sweep/b", 1_000 * T - T, end + 200 * T, 5)]
    inf = analyze(Trace(kernels=kernels(*kb), api=api(*cb), nvtx=ranges(*nv))).to_json()["inference"]
    assert inf["source"] == "window"
