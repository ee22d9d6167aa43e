"""Capture rules: the registry, each rule's thresholds on synthetic traces, and the right diagnosis of
every sample trace (sample_traces/README.md states it), checked against nsys's own analysis."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze, analyze_path
from profiler.capture.trace import Trace
from profiler.cli.analyze import inference_lines
from profiler.errors import UsageError
from profiler.rules import get_rule, registry, resolve_thresholds
from tests.conftest import NSYS_FIXTURES, SAMPLE_TRACES
from tests.capture_builders import T, api, kernels, ranges

CAPTURE_RULES = {"launch_overhead", "gpu_idle", "jitter", "sync_api", "pageable_memcpy", "transfer_bound",
                 "fp32_math", "time_slicing", "serialised_threads", "decode_drift"}
REFERENCE = SAMPLE_TRACES / "reference"
_CACHE: dict[str, object] = {}


def sample(name: str, include_setup: bool = False):
    """The analysis of a sample trace: steady state (the default), or every event (to compare with nsys)."""
    path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present")
    if (name, include_setup) not in _CACHE:
        _CACHE[name, include_setup] = analyze_path(path, AnalysisOptions(include_setup=include_setup))
    return _CACHE[name, include_setup]


def fired(res, rule: str, rng: str | None = "any") -> list:
    return [f for f in res.findings if f.rule == rule and (rng == "any" or f.range == rng)]


# ----------------------------------------------------------------------------- registry

def test_registry_holds_the_public_rules_with_documented_defaults():
    specs = {s.id: s for s in registry("capture")}
    assert set(specs) == CAPTURE_RULES
    assert specs["gpu_idle"].defaults["min_gap_us"] == 50.0  # microseconds, never nsys's 500 ms
    assert all(s.summary for s in specs.values())
    assert get_rule("capture", "jitter").scope == "capture"
    assert get_rule("layers", "jitter").defaults != get_rule("capture", "jitter").defaults  # one id, two scopes
    with pytest.raises(UsageError, match="unknown capture rule 'variant_failed'"):
        get_rule("capture", "variant_failed")  # a sweep rule


def test_threshold_overrides_are_validated_and_reported():
    t = resolve_thresholds("capture", {"jitter": {"max_cov_pct": 3}})
    assert t["jitter"]["max_cov_pct"] == 3 and t["jitter"]["max_tail_ratio"] == 1.5
    with pytest.raises(UsageError, match="unknown capture rule"):
        resolve_thresholds("capture", {"nope": {}})
    with pytest.raises(UsageError, match="has no threshold"):
        resolve_thresholds("capture", {"jitter": {"bogus": 1}})
    res = analyze(Trace(kernels=kernels((0, 1, 5, 0))), AnalysisOptions(min_gap_us=7, rules=["gpu_idle"]))
    assert res.to_json()["thresholds"]["gpu_idle"]["min_gap_us"] == 7


# ----------------------------------------------------------------------------- synthetic traces

def _eager_loop(kernel_us: float, launch_us: float, iterations: int = 20, per_iter: int = 50,
                blocking: bool = False):
    """An eager loop: each launch call takes launch_us on thread 5, its kernel kernel_us on the GPU, starting
    after the call returns, or (``blocking``: CUDA_LAUNCH_BLOCKING=1) inside it, the call returning after."""
    krows, arows, nv = [], [], []
    t, corr = 0, 1
    for _ in range(iterations):
        start = t
        gpu_free = t
        for _ in range(per_iter):
            arows.append(("cudaLaunchKernel", t, t + int(launch_us * T), 5, "launch"))
            ks = max(t + int((launch_us - kernel_us - 1 if blocking else launch_us) * T), gpu_free)
            krows.append((ks, ks + int(kernel_us * T), 5, t, corr))
            gpu_free = ks + int(kernel_us * T)
            t += int(launch_us * T) + 1 * T
            corr += 1
        t = max(t, gpu_free) + 2 * T
        nv.append(("iter", start, t, 5))
        t += 5 * T
    return Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv))


def test_launch_overhead_fires_on_short_kernels_behind_long_launch_calls():
    res = analyze(_eager_loop(kernel_us=1, launch_us=6))
    [f] = fired(res, "launch_overhead")
    ev = f.evidence
    assert f.range == "iter"
    assert ev["launches_per_instance"] == 50
    assert ev["median_kernel_us"] == pytest.approx(1.0)
    assert ev["median_launch_call_us"] == pytest.approx(6.0)
    assert ev["gpu_busy_fraction"] < 0.2
    # a graph would run 50 x (1 us + 1 us node overhead) = 0.1 ms of a ~0.36 ms iteration
    assert ev["graph_wall_ms_estimate"] == pytest.approx(0.1, rel=0.01)
    assert ev["graph_saving_ms_per_instance"] == pytest.approx(ev["wall_ms_median"] - 0.1, rel=0.01)
    assert f.threshold["max_busy_fraction"] == 0.5


def test_launches_that_wait_for_their_kernel_are_named_before_a_cuda_graph():
    """CUDA_LAUNCH_BLOCKING=1 on the H200 (torch MLP): every kernel ended before its launch call returned,
    against 0.1-0.4% of them on asynchronous launch-bound loops; the advice was a CUDA graph."""
    blocking = fired(analyze(_eager_loop(kernel_us=2, launch_us=10, blocking=True)), "launch_overhead")[0]
    assert blocking.evidence["blocking_launch_share"] == 1.0
    assert blocking.title.startswith("Launch-bound, each launch waiting for its kernel")
    assert "CUDA_LAUNCH_BLOCKING" in blocking.recommendation
    usual = fired(analyze(_eager_loop(kernel_us=2, launch_us=10)), "launch_overhead")[0]
    assert usual.evidence["blocking_launch_share"] == 0.0
    assert "CUDA_LAUNCH_BLOCKING" not in usual.recommendation and "CUDA graph" in usual.recommendation


def test_launch_overhead_silent_when_kernels_dominate_or_thresholds_raised():
    assert not fired(analyze(_eager_loop(kernel_us=40, launch_us=6)), "launch_overhead")  # GPU-bound
    assert not fired(analyze(_eager_loop(kernel_us=1, launch_us=6),
                             AnalysisOptions(thresholds={"launch_overhead": {"min_launches_per_instance": 51}})),
                     "launch_overhead")


def _gappy(gap_us: int, n: int = 20, init_call: str | None = None):
    krows, arows = [], []
    t = 0
    for i in range(n):
        krows.append((t, t + 20 * T, 5, t - 2 * T, i + 1))
        if init_call and i == 0:
            arows.append((init_call, t + 20 * T, t + 20 * T + gap_us * T, 5, "other"))
        t += (20 + gap_us) * T
    return Trace(kernels=kernels(*krows), api=api(*arows) if arows else None)


def test_gpu_idle_uses_microsecond_thresholds():
    assert not fired(analyze(_gappy(30)), "gpu_idle")  # 30 us gaps: under the 50 us default
    [f] = fired(analyze(_gappy(30), AnalysisOptions(min_gap_us=20)), "gpu_idle")
    assert f.evidence["gaps"] == 19
    assert f.evidence["idle_fraction"] == pytest.approx(19 * 30 / (20 * 20 + 19 * 30))
    assert f.threshold["min_gap_us"] == 20
    [f] = fired(analyze(_gappy(80)), "gpu_idle")
    assert f.evidence["largest_gap_ms"] == pytest.approx(0.08)
    assert f.evidence["host_during_gaps_ms"]["outside_cuda_and_os_calls_ms"] == pytest.approx(19 * 0.08)


def test_gpu_idle_sets_start_up_gaps_apart():
    # one 5 ms gap spent in lazy module loading, then 50 us gaps: only the latter count
    res = analyze(_gappy(5000, n=2, init_call="cuLibraryLoadData"))
    assert not fired(res, "gpu_idle")
    trace = _gappy(5000, n=2, init_call="cudaMalloc")  # an allocation is not start-up work
    [f] = fired(analyze(trace), "gpu_idle")
    assert f.evidence["host_during_gaps_ms"]["cuda_api"] == {"cudaMalloc": pytest.approx(5.0)}
    assert "cudaMalloc" in f.title


def _sync_loop(syncs: list[str], n: int = 10):
    arows, krows, nv = [], [], []
    t = 0
    for i in range(n):
        nv.append(("step", t, t + 100 * T, 5))
        krows.append((t + 2 * T, t + 30 * T, 5, t + 1 * T, i + 1))
        for j, name in enumerate(syncs):
            arows.append((name, t + 10 * T + j * 40 * T, t + 45 * T + j * 40 * T, 5, "sync"))
        t += 200 * T
    return Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv))


def test_sync_api_allows_one_wait_for_the_result_but_not_more():
    assert not fired(analyze(_sync_loop(["cudaStreamSynchronize"])), "sync_api")
    assert not fired(analyze(_sync_loop(["cudaStreamWaitEvent", "cudaStreamWaitEvent"])), "sync_api")
    [f] = fired(analyze(_sync_loop(["cudaStreamSynchronize", "cudaStreamSynchronize"])), "sync_api")
    assert f.evidence["sync_calls_per_instance"] == 2
    assert f.evidence["sync_fraction"] == pytest.approx(0.7)
    [f] = fired(analyze(_sync_loop(["cudaDeviceSynchronize"])), "sync_api")
    # the GPU idles 15 us of each 35 us wait: severity follows that impact (15 us per 200 us step)
    assert f.evidence["device_syncs_per_instance"] == 1
    assert f.impact["share"] == pytest.approx(15 / 200, rel=0.1) and f.severity == "medium"


def _copies(copy_us: int, compute_us: int, pageable: bool = False, pinned_twin: bool = False):
    mc, krows, nv = [], [], []
    t = 0
    for i in range(10):
        nv.append(("step", t, t + 1000 * T, 5))
        mc.append({"start_ns": t + 5 * T, "end_ns": t + (5 + copy_us) * T, "api_tid": 5, "api_start_ns": t + 1 * T,
                   "bytes": 1 << 20, "copy_kind": "HtoD", "src_kind": "pageable" if pageable else "pinned",
                   "dst_kind": "device", "correlation_id": 1000 + i, "device_id": 0, "stream_id": 7, "pid": 1})
        if pinned_twin:
            mc.append({"start_ns": t + 600 * T, "end_ns": t + 600 * T + copy_us * T // 4, "api_tid": 9,
                       "api_start_ns": t + 590 * T, "bytes": 1 << 20, "copy_kind": "HtoD", "src_kind": "pinned",
                       "dst_kind": "device", "correlation_id": 2000 + i, "device_id": 0, "stream_id": 7, "pid": 1})
        if compute_us:
            krows.append((t + (6 + copy_us) * T, t + (6 + copy_us + compute_us) * T, 5, t + 2 * T, i + 1))
        t += 2000 * T
    return Trace(kernels=kernels(*krows) if krows else None, memcpy=pd.DataFrame(mc), nvtx=ranges(*nv))


def test_transfer_bound_needs_copies_at_least_as_long_as_compute():
    [f] = fired(analyze(_copies(copy_us=400, compute_us=100)), "transfer_bound")
    assert f.evidence["copy_to_compute"] == pytest.approx(4.0)
    assert f.evidence["copy_ms_per_instance"] == pytest.approx(0.4)
    assert f.evidence["by_direction"]["HtoD"]["gbps"] == pytest.approx((1 << 20) / 400e3)
    assert not fired(analyze(_copies(copy_us=50, compute_us=100)), "transfer_bound")
    assert not fired(analyze(_copies(copy_us=400, compute_us=0)), "transfer_bound")  # a copy-only step


def test_pageable_memcpy_compares_with_pinned_copies_of_the_same_size():
    assert not fired(analyze(_copies(400, 100)), "pageable_memcpy")
    [f] = fired(analyze(_copies(400, 100, pageable=True, pinned_twin=True)), "pageable_memcpy")
    [c] = f.evidence["pinned_comparison"]
    assert (c["direction"], c["bytes"], c["pageable_count"], c["pinned_count"]) == ("HtoD", 1 << 20, 10, 10)
    assert c["pinned_speedup"] == pytest.approx(4.0)
    assert f.evidence["estimated_saving_ms"] == pytest.approx(10 * 0.3)
    assert f.range == "step"
    [f] = fired(analyze(_copies(400, 100, pageable=True)), "pageable_memcpy")
    assert f.evidence["pinned_comparison"] == [] and "no pinned copy" in f.title


def test_pageable_severity_by_share_unless_pinned_twins_run_much_faster():
    from profiler.rules import Thresholds
    from profiler.rules.capture.pageable_memcpy import _severity
    t = Thresholds("pageable_memcpy", get_rule("capture", "pageable_memcpy").defaults)  # high 10%, medium 1%, 2x
    assert [_severity(s, [], t) for s in (0.005, 0.01, 0.099, 0.1)] == ["low", "medium", "medium", "high"]
    # a 1% share is high when pinned copies of some size run at least 2x faster, whichever size it is
    assert _severity(0.01, [{"pinned_speedup": 1.5}, {"pinned_speedup": 2.0}], t) == "high"
    assert _severity(0.01, [{"pinned_speedup": 1.9}], t) == "medium"
    assert _severity(0.001, [{"pinned_speedup": float("nan")}], t) == "low"  # no rate to compare


def test_jitter_reports_the_outermost_jittery_range_only():
    nv, t = [], 0
    for i in range(30):
        w = 2000 * T if i in (5, 20) else 200 * T
        nv.append(("outer", t, t + w, 5))
        nv.append(("inner", t + 1 * T, t + w - 1 * T, 5))
        t += 5000 * T
    res = analyze(Trace(kernels=kernels(*[(i * 5000 * T + 5 * T, i * 5000 * T + 9 * T, 5, i * 5000 * T + 2 * T)
                                          for i in range(30)]), nvtx=ranges(*nv)))
    [f] = fired(res, "jitter")
    assert f.range == "outer"
    assert [o["index"] for o in f.evidence["outliers"]] == [5, 20]
    assert f.evidence["p99_over_median"] == pytest.approx(10.0)


# ----------------------------------------------------------------------------- the sample traces

def test_launch_bound_sample():
    res = sample("launch_bound")
    [f] = fired(res, "launch_overhead", "launch_bound.iter")
    ev = f.evidence
    assert ev["launches_per_instance"] == 100
    assert 0.75 < ev["median_kernel_us"] < 1.0          # README: 0.85 us
    assert 4.0 < ev["median_launch_call_us"] < 8.0      # README: 6.0 us
    assert ev["gpu_busy_fraction"] < 0.15               # ~85 us of GPU work in a ~1023 us range
    assert ev["graph_saving_pct"] > 50 and f.severity == "high"
    for rule in ("sync_api", "pageable_memcpy", "transfer_bound"):
        assert not fired(res, rule), rule


@pytest.mark.parametrize("name", ["graph", "graph_node"])
def test_graph_replay_is_not_launch_bound(name: str):
    res = sample(name)
    assert not fired(res, "launch_overhead")
    assert [f.rule for f in res.findings if f.range == "graph.iter"] == []
    r = next(r for r in res.to_json()["ranges"] if r["name"] == "graph.iter")
    assert r["launches_per_instance"] == 1  # one cudaGraphLaunch per iteration, whatever the tracing mode
    assert r["gpu_busy_ms"]["median"] == pytest.approx(0.093 if name == "graph" else 0.0986, rel=0.1)
    if name == "graph":
        # the host runs ahead: the graph's work outlasts the 27 us range; busy time is a fraction of the longer
        # of the wall time and the span of that work, never of the wall time alone (that gave 340%)
        assert r["gpu_busy_ms"]["median"] > r["wall_ms"]["median"]
        assert 0.9 < r["gpu_busy_fraction"] <= 1


def test_outliers_waiting_on_a_hand_over_are_not_told_to_avoid_locks():
    """The host_stall sample's 5 ms sleeps renamed sem_wait: the range's thread waits for another to hand over
    (a serving pool's future on the H200: 'mostly host stall', advice about locks and core pinning)."""
    trace = sample("host_stall").trace()
    osrt = trace.osrt.copy()
    osrt["name"] = osrt["name"].astype(str).replace("clock_nanosleep", "sem_wait")
    res = analyze(Trace(**{**{k: getattr(trace, k) for k in ("kernels", "memcpy", "memset", "api", "nvtx")},
                           "osrt": osrt, "meta": trace.meta}))
    [f] = fired(res, "jitter", "host_stall.query")
    assert "(mostly waiting on another thread or process)" in f.title
    assert "hand-over" in f.recommendation and "pin the thread" not in f.recommendation
    [g] = fired(sample("host_stall"), "jitter", "host_stall.query")
    assert "(mostly host stall)" in g.title and "pin the thread" in g.recommendation


def _two_paths(n: int = 200) -> Trace:
    """Requests alternating between one 40 us kernel (a replayed graph: one launch) and 16 kernels of 2.5 us,
    each behind a 20 us launch call (the eager path): the same GPU time, 5x the host time."""
    krows, arows, nv, t, corr = [], [], [], 0, 1
    for i in range(n):
        start = t
        for _ in range(1 if i % 2 else 16):
            dur = 40 if i % 2 else 2.5
            arows.append(("cudaLaunchKernel", t, t + 20 * T, 5, "launch"))
            krows.append((t + 21 * T, t + 21 * T + int(dur * T), 5, t, corr))
            t += 21 * T + int(dur * T)
            corr += 1
        t += 5 * T
        nv.append(("request", start, t, 5))
        t += 10 * T
    return Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv))


def test_latency_from_two_paths_that_differ_on_the_host_says_so():
    """A graph path beside an eager path (alternating requests on the H200: CoV 79%, p99 3.9x, no outlier
    stands out) was 'Unstable latency' with advice to trace the OS runtime, which was traced."""
    [f] = fired(analyze(_two_paths()), "jitter")
    assert "2 paths that differ on the host, not on the GPU" in f.title
    paths = f.evidence["host_paths"]
    assert [p["kernels"] for p in paths] == [1, 16] and paths[0]["instances"] == 100 and paths[1]["instances"] >= 99
    assert paths[1]["wall_ms_median"] > 4 * paths[0]["wall_ms_median"]
    assert "fast path" in f.recommendation and "nsys -t osrt" not in f.recommendation
    assert "work_sizes" not in f.evidence  # not 'latency follows the GPU work': the GPU work is the same


def test_host_stall_sample():
    res = sample("host_stall")
    stalled = [7, 17, 27, 37, 47, 57, 67, 77, 87, 97]
    [f] = fired(res, "jitter", "host_stall.query")
    assert [o["index"] for o in f.evidence["outliers"]] == stalled
    assert f.evidence["outlier_causes"] == {"host_stall": 10}
    for o in f.evidence["outliers"]:
        assert o["call"] == "clock_nanosleep" and o["call_ms"] == pytest.approx(5.0, abs=0.3)
    r = next(r for r in res.to_json()["ranges"] if r["name"] == "host_stall.query")
    assert [o["index"] for o in r["outliers"]] == stalled
    [g] = fired(res, "gpu_idle")
    assert g.evidence["largest_gap_ms"] == pytest.approx(5.2, abs=0.3)
    host = g.evidence["host_during_gaps_ms"]["os_runtime"]
    assert next(iter(host)) == "clock_nanosleep" and host["clock_nanosleep"] > 45  # 10 stalls of ~5 ms
    assert all("clock_nanosleep" in gap["host"]["os_runtime"] for gap in g.evidence["top_gaps"])
    assert "clock_nanosleep" in g.title
    for rule in ("launch_overhead", "pageable_memcpy"):
        assert not fired(res, rule), rule


def test_severity_bands_are_thresholds_the_rule_reads():
    """The host_stall capture's jitter (p99 far above the median) is high by the default bands; raising the
    high bands above its figures makes the same rule call it medium, raising the medium ones too, low."""
    ctx = sample("host_stall").context
    spec = get_rule("capture", "jitter")

    def severity(**bands):
        [f] = [f for f in spec.run(ctx, {**spec.defaults, **bands}) if f.range == "host_stall.query"]
        return f.severity, f.evidence["p99_over_median"], f.evidence["cov_pct"]

    sev, tail, cov = severity()
    assert sev == "high" and (tail >= 3.0 or cov >= 50.0)
    assert severity(high_tail_ratio=tail + 1, high_cov_pct=cov + 1)[0] == "medium"
    assert severity(high_tail_ratio=tail + 1, high_cov_pct=cov + 1, medium_tail_ratio=tail + 1,
                    medium_cov_pct=cov + 1)[0] == "low"


def test_pageable_vs_pinned_sample():
    res = sample("pageable_vs_pinned")
    [f] = fired(res, "pageable_memcpy")
    ev = f.evidence
    # 40 H2D + 40 D2H in the ranges; the 3 of each in the warm-up before them are setup
    assert ev["copies"] == 80 and f.range == "copy.pageable"
    assert ev["by_direction"]["HtoD"]["count"] == 40 and ev["by_direction"]["DtoH"]["count"] == 40
    assert sample("pageable_vs_pinned", include_setup=True).findings[0].evidence["copies"] == 86
    cmp = {c["direction"]: c for c in ev["pinned_comparison"]}
    assert cmp["HtoD"]["bytes"] == 16 << 20
    assert cmp["HtoD"]["pageable_median_us"] == pytest.approx(2190, rel=0.15)  # README: 2.19 ms vs 0.327 ms
    assert cmp["HtoD"]["pinned_median_us"] == pytest.approx(327, rel=0.15)
    assert cmp["DtoH"]["pinned_speedup"] > 2
    assert ev["async_calls_made_synchronous"] >= 43  # dev.copy_(pageable) issues cudaMemcpyAsync
    assert not fired(res, "launch_overhead")


def test_pageable_copies_agree_with_nsys_cuda_memcpy_async():
    ref = pd.read_csv(REFERENCE / "pageable_vs_pinned_analyze_cuda_memcpy_async.csv")
    act = sample("pageable_vs_pinned", include_setup=True).context.table.activity
    ours = {(int(s), int(e - s)) for s, e, p in zip(act.start_ns, act.end_ns, act.pageable) if p}
    theirs = {(int(s), int(d)) for s, d in zip(ref["Start (ns)"], ref["Duration (ns)"])}
    assert theirs <= ours  # nsys lists (at most 50 of) the same pageable async copies


def test_multistream_saturated_sample():
    res = sample("multistream_saturated")
    assert not fired(res, "launch_overhead")
    table = res.context.table
    for r in res.context.ranges:
        tot = r["_totals"]
        # saturating matmuls do not overlap: the union equals the summed kernel time (README: 1794 us)
        assert tot["compute_ns"] == pytest.approx(tot["kernel_sum_ns"], rel=0.01)
        assert tot["compute_ns"] / r["count"] / 1e3 == pytest.approx(1794, rel=0.03)
    assert len(table.series) == 2


def test_no_nvtx_sample_is_one_window():
    res = sample("no_nvtx")
    data = res.to_json()
    assert [r["name"] for r in data["ranges"]] == ["(capture)"]
    [f] = fired(res, "launch_overhead")
    assert f.range is None
    assert f.evidence["launches_per_instance"] >= 6000  # 60 x 100 in the loop, plus warm-up
    # no inference was identified: nothing is priced or worded per inference
    assert data["inference"]["source"] == "window" and f.impact["ms_per_instance"] is None
    assert f.impact["ms_total"] > 0 and "per instance" not in f.title and "launches in it" in f.title
    assert inference_lines(data)[0].startswith("inference: none identified (no NVTX ranges)")


def test_sync_heavy_sample_and_nsys_cuda_api_sync():
    res = sample("sync_heavy")
    [f] = fired(res, "sync_api", "sync_heavy.step")
    ev = f.evidence
    assert ev["device_syncs_per_instance"] == 8 and ev["sync_calls_per_instance"] == 9
    assert ev["calls"]["cudaDeviceSynchronize"]["count"] == 480
    assert ev["calls"]["cudaDeviceSynchronize"]["median_us"] == pytest.approx(53, rel=0.2)
    # the matmuls keep the GPU busy during each wait; what the syncs cost is the relaunch gap after each of
    # the 8 device syncs: about a quarter of the step, and the severity follows that impact
    assert 0.15 < f.impact["share"] < 0.35 and f.severity in ("high", "medium")
    summary = {s["name"]: s for s in res.to_json()["sync_summary"]}
    assert summary["cudaDeviceSynchronize"]["count"] == 480  # the steady state: the 60 steps
    whole = {s["name"]: s for s in sample("sync_heavy", include_setup=True).to_json()["sync_summary"]}
    assert whole["cudaDeviceSynchronize"]["count"] == 482  # README: 482 (two outside the loop)
    for rule in ("launch_overhead", "pageable_memcpy"):
        assert not fired(res, rule), rule


@pytest.mark.parametrize("name", ["sync_heavy", "host_stall", "graph", "pageable_vs_pinned", "transfer_bound"])
def test_blocking_sync_calls_agree_with_nsys_cuda_api_sync(name: str):
    """nsys lists the 50 longest blocking sync calls; they are exactly our 50 longest."""
    path = REFERENCE / f"{name}_analyze_cuda_api_sync.csv"
    if not path.exists() or path.stat().st_size == 0:
        pytest.skip("no nsys reference")
    ref = pd.read_csv(path)
    a = sample(name, include_setup=True).context.table.api
    m = a.blocking_sync
    dur, start = (a.end_ns - a.start_ns)[m], a.start_ns[m]
    order = np.lexsort((start, -dur))[: len(ref)]
    ours = sorted(zip(start[order].tolist(), dur[order].tolist()))
    theirs = sorted(zip(ref["Start (ns)"].tolist(), ref["Duration (ns)"].tolist()))
    assert ours == theirs
    if len(ref) < 50:
        assert int(m.sum()) == len(ref)


def test_transfer_bound_names_the_same_directions_on_a_recapture():
    """sample_traces/columnar/transfer_bound is the same workload captured again: HtoD was a microsecond
    slower there and DtoH here; both captures name both directions."""
    path = SAMPLE_TRACES / "columnar" / "transfer_bound.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present")
    a, b = analyze_path(path), sample("transfer_bound")
    [f], [g] = fired(a, "transfer_bound"), fired(b, "transfer_bound")
    assert f.evidence["bound_by"] == g.evidence["bound_by"] == "HtoD + DtoH"
    # the inference's bound agrees with the finding (it picked one direction by 2 us before)
    assert a.to_json()["inference"]["bound_by"] == b.to_json()["inference"]["bound_by"] == "HtoD + DtoH"
    assert f.title.split(":")[0] == g.title.split(":")[0] == "HtoD + DtoH-bound"


def test_transfer_bound_pinned_copies_at_the_link_rate_get_no_pinning_advice():
    """testcuda (RTX 4060 Ti): 91.6 ms of pinned copies per run at 13 GB/s (its x8 link's limit)."""
    path = NSYS_FIXTURES / "v2026.1.1_testcuda_rtx4060ti_report1.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is absent)")
    [f] = fired(analyze_path(path), "transfer_bound")
    assert f.evidence["pageable_copies"] == 0
    assert all(12 < d["gbps"] < 14 for d in f.evidence["by_direction"].values())
    assert f.recommendation.startswith("The copies are already pinned: move fewer bytes")
    assert "Use pinned" not in f.recommendation


def test_copies_by_direction_counts_a_copy_as_often_as_the_instances_hold_it():
    from types import SimpleNamespace
    from profiler.capture.frames import CopyKind
    from profiler.rules.capture.transfer_bound import _copies_by_direction, _pageable_share
    # four copies: two HtoD (one held by two nested instances), one DtoH taking no GPU time, one DtoD
    act = SimpleNamespace(copy_kind=np.array([1, 2, 1, 3]), start_ns=np.array([0, 10, 20, 30]),
                          end_ns=np.array([4, 10, 28, 31]), bytes=np.array([400, 50, 1600, 7]),
                          pageable=np.array([True, False, False, False]))
    rows, times = np.array([0, 1, 2]), np.array([2, 1, 1])
    d = _copies_by_direction(act, rows, times, 4, [CopyKind.DtoD, CopyKind.DtoH, CopyKind.HtoD])
    assert list(d) == ["DtoH", "HtoD"]  # in the order asked for; DtoD is not among the rows
    assert d["HtoD"] == {"copies_per_instance": 3 / 4, "bytes_per_instance": (2 * 400 + 1600) / 4,
                         "gpu_ms_per_instance": (2 * 4 + 8) / 1e6 / 4, "gbps": (2 * 400 + 1600) / (2 * 4 + 8)}
    assert d["DtoH"]["gbps"] is None and d["DtoH"]["copies_per_instance"] == 1 / 4
    assert _pageable_share(act, rows, times) == (2 * 4) / (2 * 4 + 0 + 8)
    assert _pageable_share(act, np.array([1]), np.array([3])) == 0.0  # no copy time


def test_transfer_advice_leads_with_pinning_only_when_pageable_copies_take_the_copy_time():
    from profiler.rules.capture.transfer_bound import transfer_advice

    pageable = transfer_advice(False, 60, 0.54, ["DtoH"])
    assert pageable.startswith("Use pinned host buffers (cudaHostAlloc / cudaMallocHost) for the 60 pageable")
    assert "this batch's output copy with the next batch's compute" in pageable and "input copy" not in pageable
    few = transfer_advice(False, 4, 3e-6, ["HtoD"])  # the H100 capture's aten::to: 4 tiny pageable copies
    assert few.startswith("Most copy time is in pinned copies: move fewer bytes")
    assert few.index("for the 4 pageable copies") > few.index("overlap the next batch's input copy")
    assert transfer_advice(False, 0, 0.0, ["HtoD", "DtoH"]).startswith("The copies are already pinned: move fewer")
    trt = transfer_advice(True, 0, 0.0, ["DtoH"])
    assert trt.startswith("TensorRT: the copies are already pinned: shrink I/O") and "pinned host" not in trt
    assert "output copy with the next batch's enqueue" in trt and trt.endswith("compute-only bound.")


def test_bounding_copy_directions():
    from profiler.capture.phases import bounding_copy_directions
    assert bounding_copy_directions({"compute": 9.0, "HtoD": 0.607, "DtoH": 0.609, "DtoD": 0.0}) == ["HtoD", "DtoH"]
    assert bounding_copy_directions({"compute": 1.0, "HtoD": 184.0, "DtoH": 728.0}) == ["DtoH"]
    assert bounding_copy_directions({"HtoD": 150.0, "DtoH": 100.0}) == ["HtoD", "DtoH"]  # 1.5x: comparable
    assert bounding_copy_directions({"HtoD": 151.0, "DtoH": 100.0}) == ["HtoD"]
    assert bounding_copy_directions({"compute": 1.0, "HtoD": 0.0}) == []


def test_transfer_bound_sample():
    res = sample("transfer_bound")
    [f] = fired(res, "transfer_bound", "transfer_bound.step")
    assert f.evidence["copy_ms_per_instance"] == pytest.approx(1.22, rel=0.05)
    assert f.evidence["compute_ms_per_instance"] == pytest.approx(0.027, rel=0.15)
    # 32 MiB each way per step (0.607 and 0.609 ms): both directions bound it, named together with their
    # total against the compute (not whichever was a microsecond slower in this capture)
    assert f.evidence["pageable_copies"] == 0 and f.evidence["bound_by"] == "HtoD + DtoH"
    assert set(f.evidence["by_direction"]) == {"HtoD", "DtoH"}
    assert f.title.startswith("HtoD + DtoH-bound: HtoD + DtoH copies take 1.2")
    both = sum(f.evidence["by_direction"][d]["gpu_ms_per_instance"] for d in ("HtoD", "DtoH"))
    assert f.evidence["copy_to_compute"] == pytest.approx(both / f.evidence["compute_ms_per_instance"], rel=0.02)
    assert 40 < f.evidence["copy_to_compute"] < 52
    # every copy is pinned and runs at ~55 GB/s (PCIe 5): pinning is no advice; fewer bytes lead
    assert f.recommendation.startswith("The copies are already pinned: move fewer bytes")
    assert "Use pinned" not in f.recommendation and "input and output copies" in f.recommendation
    for rule in ("pageable_memcpy", "launch_overhead"):
        assert not fired(res, rule), rule
    # the first step is slow because it loads modules lazily: it is warm-up, part of the setup ...
    data = res.to_json()
    assert data["inference"]["warmup_count"] == 1 and data["inference"]["steady_count"] == 39
    assert data["phases"]["setup"]["what"]["module_loading_ms"] > 0
    # ... and with the setup included, the outlier says why
    r = next(r for r in sample("transfer_bound", include_setup=True).to_json()["ranges"]
             if r["name"] == "transfer_bound.step")
    assert [(o["index"], o["cause"]) for o in r["outliers"]] == [(0, "cuda_api")]
    assert r["outliers"][0]["detail"]["call"] == "cuLibraryLoadData"


def test_a_sweeps_per_layer_pass_is_frames_and_leaves_the_timed_loop_the_unit():
    """harness_cls: each variant's range holds its 40 timed ``iter`` ranges and, directly, a per-layer pass (each
    ONNX node's range once per pass, 17 passes in all). Read node by node the pass hid the loop ('none
    identified'); as frames (every node once, in the same order, no range around a pass) the timed iterations
    make 40 of the 57 children of the variant's range: the eager loop is the unit, the graph variant's the other."""
    inf = sample("harness_cls").to_json()["inference"]
    assert (inf["series"], inf["count"], inf["inside"]) == ("trtprof:fp32-wsdefault-s1/iter", 40,
                                                            "trtprof:sweep/fp32-wsdefault-s1")
    assert inf["other_loops"] == ["trtprof:fp32-wsdefault-s1-graph/iter x40"]
    assert sample("no_nvtx").to_json()["inference"]["why"] == "no NVTX ranges"


def test_sync_cost_is_at_most_the_time_the_host_blocks_in_the_syncs():
    """64 tiny pageable copies per request on the H200, each followed by a sync: the GPU idles from each
    sync's return to the next copy, but that time is the host's own work, which stays without the syncs.
    The sync finding was priced at 83% of the steady state while the host blocked in syncs 16% of it."""
    nv, krows, arows, corr = [], [], [], 1
    for i in range(20):
        t = i * 1000 * T
        nv.append(("request", t, t + 900 * T, 5))
        for j in range(10):  # 10 steps: a 2 us kernel, a 10 us sync, then 70 us of host code
            c = t + j * 85 * T
            krows.append((c + 3 * T, c + 5 * T, 5, c + T, corr))
            arows += [("cudaLaunchKernel", c + T, c + 3 * T, 5, "launch"),
                      ("cudaStreamSynchronize", c + 4 * T, c + 14 * T, 5, "sync")]
            corr += 1
    res = analyze(Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv)))
    [f] = fired(res, "sync_api")
    blocked_ms = f.evidence["sync_ms_per_instance"] * f.evidence["instances"]
    assert f.evidence["gpu_idle_during_sync_ms"] > 5 * blocked_ms  # the relaunch gaps: the host's own work
    assert f.impact["ms_total"] == pytest.approx(blocked_ms)


def _copy_then_compute(copy_stream: int):
    """Each step copies 100 us (HtoD, pinned) and then computes 30 us; the host waits for the copy first."""
    nv, krows, copies = [], [], []
    for i in range(20):
        t = i * 200 * T
        nv.append(("step", t, t + 160 * T, 5))
        copies.append({"start_ns": t + 10 * T, "end_ns": t + 110 * T, "api_tid": 5, "api_start_ns": t + 5 * T,
                       "correlation_id": 1000 + i, "device_id": 0, "stream_id": copy_stream, "pid": 1,
                       "bytes": 1 << 26, "copy_kind": "HtoD", "src_kind": "pinned", "dst_kind": "device"})
        krows.append((t + 120 * T, t + 150 * T, 5, t + 115 * T, i + 1))
    return Trace(kernels=kernels(*krows), memcpy=pd.DataFrame(copies), nvtx=ranges(*nv))


def test_copies_on_their_own_stream_that_overlap_nothing_are_called_serialised():
    """An H200 loop copied on a stream of its own but synchronised the host on it before computing: the
    advice to overlap on another stream was what it already did."""
    [own] = [f for f in analyze(_copy_then_compute(9)).findings if f.rule == "transfer_bound"]
    assert own.evidence["copies_on_own_streams"] is True
    assert own.recommendation.startswith("The copies already run on a stream of their own")
    [same] = [f for f in analyze(_copy_then_compute(7)).findings if f.rule == "transfer_bound"]
    assert same.evidence["copies_on_own_streams"] is False and "stream of their own" not in same.recommendation


# ----------------------------------------------------------------------------- jitter that is no instability

def _pipeline(n: int = 64, every: int = 8, kernel_us: int = 400, extra_wait_us: int = 0) -> Trace:
    """A host that runs ahead: each 'infer' enqueues one kernel in 100 us; every ``every``-th instance
    synchronises the device, waiting for the kernels queued so far (and ``extra_wait_us`` more, for
    something else)."""
    nv, krows, arows = [], [], []
    t = gpu_free = 0
    for i in range(n):
        k_start = max(gpu_free, t + 10 * T)
        gpu_free = k_start + kernel_us * T
        krows.append((k_start, gpu_free, 5, t + 5 * T, i + 1))
        end = t + 100 * T
        if i % every == every - 1:
            done = gpu_free + extra_wait_us * T
            arows.append(("cudaDeviceSynchronize", t + 50 * T, done, 5, "sync"))
            end = done + 10 * T
        nv.append(("infer", t, end, 5))
        t = end + 10 * T
    return Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv))


def test_syncs_that_drain_the_gpu_backlog_are_not_priced_as_jitter():
    """Every 8th instance waits for the kernels it and the 7 before it queued (the host ran ahead): the
    cause is the backlog, the waits cost nothing a fix saves, and no HIGH jitter is reported."""
    res = analyze(_pipeline())
    assert not [f for f in res.findings if f.rule == "jitter" and f.severity in ("high", "medium")]
    spec = get_rule("capture", "jitter")
    [f] = spec.run(res.context, spec.defaults)
    ev = f.evidence
    assert ev["outlier_causes"] == {"gpu_backlog": 8}
    o = ev["outliers"][1]  # instance 15: it and 7 earlier ones queued 8 x 400 us; 7 x 110 us of host time passed
    assert o["index"] == 15 and o["instances_queued"] == 7
    assert o["backlog_ms"] == pytest.approx(8 * 0.4 - (7 * 0.11 + 0.01), abs=0.02)
    assert o["call_ms"] <= o["backlog_ms"] * 1.2
    assert ev["backlog_wait_ms"] == pytest.approx(ev["outlier_excess_ms"])
    assert ev["excess_ms_total"] < 0.05 * ev["backlog_wait_ms"] and f.severity == "low"
    assert f.title.startswith("Enqueue time plus GPU backlog waits, not unstable latency")
    assert "8 syncs wait 2.39 ms (median) for the work queued by the 7 instances before them" in f.title
    assert "GPU latency" in f.recommendation


def test_a_sync_that_waits_beyond_the_backlog_stays_jitter():
    """The same loop whose syncs wait 5 ms after the GPU finished (for another stream or process): that is
    synchronisation jitter, priced in full."""
    res = analyze(_pipeline(extra_wait_us=5000))
    [f] = fired(res, "jitter")
    assert f.evidence["outlier_causes"] == {"synchronization": 8} and "backlog_wait_ms" not in f.evidence
    assert f.severity == "high" and "other streams or processes" in f.recommendation


def _requests(kernels_of: list[int], kernel_us: list[int] | None = None, host_us: list[int] | None = None) -> Trace:
    """Requests that launch ``kernels_of[i]`` kernels of 300 us (``kernel_us[i]`` each when given) after
    ``host_us[i]`` (50 us) of host work and wait for them with a stream sync."""
    nv, krows, arows = [], [], []
    t = 0
    for i, k in enumerate(kernels_of):
        dur = (kernel_us[i] if kernel_us else 300) * T
        host = (host_us[i] if host_us else 50 + i % 3) * T  # a microsecond or two of host noise
        gpu = t + host
        for j in range(k):
            krows.append((gpu + j * dur, gpu + (j + 1) * dur, 5, t + (j + 1) * T, len(krows) + 1))
        done = gpu + k * dur
        arows.append(("cudaStreamSynchronize", t + 10 * T, done, 5, "sync"))
        nv.append(("request", t, done + 5 * T, 5))
        t = done + 20 * T
    return Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv))


SIZES = [1, 3, 2, 1, 1, 3, 1, 1, 2, 1, 1, 3, 2, 3, 1, 1, 1, 3, 1, 2] * 3  # most requests are small


def test_latency_that_follows_the_work_of_each_request_is_not_instability():
    """Requests of three sizes (1, 2 or 3 kernels): the wall time follows the GPU work, and within one size
    it is steady. The finding says so, with the sizes, and prices only the variation within a size."""
    res = analyze(_requests(SIZES))
    assert not [f for f in res.findings if f.rule == "jitter" and f.severity in ("high", "medium")]
    spec = get_rule("capture", "jitter")
    [f] = spec.run(res.context, spec.defaults)
    w, sizes = f.evidence["by_work"], f.evidence["work_sizes"]
    assert [s["kernels"] for s in sizes] == [1, 2, 3]
    assert [s["instances"] for s in sizes] == [SIZES.count(k) for k in (1, 2, 3)]
    assert [s["gpu_busy_ms_median"] for s in sizes] == pytest.approx([0.3, 0.6, 0.9])
    assert [s["wall_ms_median"] for s in sizes] == pytest.approx([0.356, 0.656, 0.956], abs=0.002)
    assert f.evidence["cov_pct"] > 25 and w["cov_pct_max"] < 1
    # the median instance has 1 kernel: those of 2 take 0.3 ms longer, those of 3 0.6 ms, all of it explained
    above = 0.3 * SIZES.count(2) + 0.6 * SIZES.count(3)
    assert w["above_median_ms"] == pytest.approx(above, rel=0.02) and w["explained_ms"] > 0.99 * above
    assert f.evidence["excess_ms_total"] < 0.01 * above
    assert f.severity == "low" and f.title.startswith("Latency follows the GPU work of each instance, not instability: 3 work sizes")
    assert "per input size" in f.recommendation


@pytest.mark.parametrize("case", ["same_work_slower", "host_differs"])
def test_variation_the_work_does_not_explain_stays_jitter(case: str):
    """Slower kernels for the same work (throttling, a neighbour on the GPU), or sizes whose wall times
    differ by host work, not GPU work: unstable latency, priced in full."""
    n = len(SIZES)
    if case == "same_work_slower":
        trace = _requests([2] * n, kernel_us=[300 if k != 3 else 900 for k in SIZES])
    else:
        trace = _requests(SIZES, kernel_us=[10] * n, host_us=[1000 if k == 3 else 50 for k in SIZES])
    [f] = fired(analyze(trace), "jitter")
    assert "by_work" not in f.evidence and f.title.startswith("Unstable latency")
    assert f.severity == "high"


def test_the_gpu_backlog_is_counted_on_the_instance_s_own_thread():
    """A range on two threads: one instance on thread 6 synchronises for 39 ms; on thread 5, every 8th
    instance waits 9 ms in a sync with next to no GPU work queued. Counting the backlog from thread 6's sync
    (it ends after thread 5's next instances start) made a queue out of nothing; on thread 5 there is none,
    so those waits stay synchronisation jitter."""
    nv = [("infer", 1_000 * T, 40_010 * T, 6)]
    krows, arows = [], [("cudaStreamSynchronize", 1_005 * T, 40_000 * T, 6, "sync")]
    t = 0
    for i in range(48):
        krows.append((t + 20 * T, t + 30 * T, 5, t + 5 * T, i + 1))
        end = t + 100 * T
        if i % 8 == 7:
            arows.append(("cudaStreamSynchronize", t + 40 * T, t + 9_040 * T, 5, "sync"))
            end = t + 9_050 * T
        nv.append(("infer", t, end, 5))
        t = end + 10 * T
    res = analyze(Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv)))
    [f] = fired(res, "jitter")
    assert f.evidence["outlier_causes"].get("gpu_backlog", 0) == 0
    assert f.evidence["outlier_causes"]["synchronization"] >= 6 and f.severity == "high"
