"""Regression review: the statistics against scipy, the decision rule leg by leg, real repeated
timings that must not be called a regression, and comparisons of stored runs through both stores."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sps

from profiler.compare import compare_runs, decide, detect_step, mann_whitney_u
from profiler.compare.stats import bootstrap_median_ratio
from profiler.store import Store


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mann_whitney_matches_scipy_with_ties(seed):
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(1.0, 0.05, 120), 2)  # rounding makes many ties
    b = np.round(rng.normal(1.01, 0.05, 90), 2)
    u, p = mann_whitney_u(a, b)
    ref = sps.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic")
    assert u == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-9)


def test_bootstrap_ci_covers_the_true_ratio():
    rng = np.random.default_rng(3)
    base = rng.lognormal(0.0, 0.1, 800)
    cand = rng.lognormal(np.log(1.07), 0.1, 800)
    ratio, lo, hi = bootstrap_median_ratio(base, cand, seed=1)
    assert lo < 1.07 < hi and lo < ratio < hi and hi - lo < 0.05


def test_each_leg_of_the_rule_can_veto():
    rng = np.random.default_rng(4)
    base = rng.normal(1.0, 0.01, 400)
    assert decide(base, base * 1.10).verdict == "regression"
    assert decide(base, base * 0.90).verdict == "improvement"
    # significant but below the relative threshold
    small = decide(base, base * 1.03)
    assert small.verdict == "no_change" and small.significant and "> 5%" in small.reason
    # significant and relatively large, but below the absolute floor (1 us on a 10 us kernel)
    tiny = rng.normal(0.010, 0.0001, 400)
    floor = decide(tiny, tiny * 1.10)
    assert floor.verdict == "no_change" and "> 5 us" in floor.reason
    assert decide(tiny, tiny * 1.10, {"abs_floor_ms": 0.0005}).verdict == "regression"
    # large but not significant: two noisy samples of eight (of five, no p could reach 0.01: inconclusive)
    noisy = decide([1, 2, 3, 1.5, 2.5, 1.8, 2.2, 2.7], [1.2, 2.6, 3.1, 1.4, 2.9, 1.9, 2.0, 2.8])
    assert noisy.verdict == "no_change" and not noisy.significant and noisy.median_ratio > 1.05
    assert decide([1.0], [2.0]).verdict == "missing"


def _timing(trtexec_fixtures, rel):
    rows = json.loads((trtexec_fixtures / rel).read_text())
    return np.array([r["latencyMs"] for r in rows if r["startComputeMs"] >= 200.0])  # drop warm-up


def test_same_engine_twice_is_not_a_regression_on_real_timings(trtexec_fixtures):
    """Two interleaved halves of one real trtexec run of one engine are 'the same build run twice'."""
    for rel in ("pytorch/resnet/A100/fp32/resnet.onnx.engine.timing.json",
                "pytorch/resnet/A100/fp16/resnet.onnx.engine.timing.json",
                "tensorflow/resnet/RTX-3090/fp32/resnet.onnx.engine.timing.json"):
        x = _timing(trtexec_fixtures, rel)
        v = decide(x[0::2], x[1::2])
        assert v.verdict == "no_change", (rel, v.reason)
        assert abs(v.median_ratio - 1) < 0.02


def test_fp16_against_fp32_on_real_timings_is_an_improvement(trtexec_fixtures):
    fp32 = _timing(trtexec_fixtures, "pytorch/resnet/A100/fp32/resnet.onnx.engine.timing.json")
    fp16 = _timing(trtexec_fixtures, "pytorch/resnet/A100/fp16/resnet.onnx.engine.timing.json")
    v = decide(fp32, fp16)
    assert v.verdict == "improvement" and 0.35 < v.median_ratio < 0.55  # ~0.87 ms vs ~2.0 ms
    assert decide(fp16, fp32).verdict == "regression"


def test_detect_step_finds_the_change():
    series = [2.0, 2.02, 1.98, 2.01, 2.3, 2.31, 2.29]
    step = detect_step(series)
    assert step["index"] == 4 and step["relative_change"] == pytest.approx(0.15, abs=0.01)
    assert detect_step([2.0, 2.01, 1.99, 2.0]) is None


def _store_run(store, label, samples, *, driver="580.1", cosine=0.9999, passed=True, layers=(), findings=(),
               config=None):
    rid = store.create_run(kind="sweep", source="m.onnx", label=label, gpu="NVIDIA H200", driver_version=driver,
                           config=config)
    store.add_variant(rid, {"key": "fp16-ws1G-s1", "precision": "fp16", "fingerprint": "fp-1",
                            "throughput_qps": 1000 / float(np.median(samples)),
                            "latency_ms": {"median": float(np.median(samples))}},
                      samples=[{"idx": i, "latency_ms": float(v)} for i, v in enumerate(samples)],
                      layers=list(layers), accuracy=[{"output": "y", "cosine": cosine, "passed": passed}])
    store.add_findings(rid, list(findings))
    store.finish_run(rid)
    return rid


def test_nothing_compared_is_inconclusive_never_no_change(db_url):
    """One sample a side (a capture without repeated ranges) compares nothing: a gate must not read it as
    no change. With two samples a side the same runs compare."""
    store = Store.open(db_url)
    _store_run(store, "one-a", np.array([1.0]))
    _store_run(store, "one-b", np.array([1.0]))
    out = compare_runs(store, "one-a", "one-b")
    assert [v["verdict"] for v in out["variants"]] == ["missing"]
    assert out["verdict"] == "inconclusive"
    _store_run(store, "two-a", np.array([1.0, 1.001, 0.999]))
    _store_run(store, "two-b", np.array([1.0, 1.001, 0.999]))
    assert compare_runs(store, "two-a", "two-b")["verdict"] == "no_change"


def test_an_async_enqueue_whose_gpu_work_got_slower_is_a_regression(db_url):
    """TensorRT's enqueue ranges end before their GPU work: comparing their wall time (the enqueue) called an
    engine whose GPU time doubled 'no change'. Their latency is now their GPU work's, first start to last end."""
    from profiler.capture.analyze import analyze
    from profiler.capture.record import store_analysis
    from tests.test_capture_inference import trt_app

    store = Store.open(db_url)
    for label, layer_us in (("fast", (30, 10)), ("fast-again", (30, 10)), ("slow", (60, 20))):
        store_analysis(store, analyze(trt_app(n=200, layer_us=layer_us)), source="app.sqlite", label=label)
    slow = compare_runs(store, "fast", "slow")
    enqueue = next(v for v in slow["variants"] if v["key"] == "TensorRT/ExecutionContext::enqueue")
    assert slow["verdict"] == "regression" and enqueue["verdict"] == "regression"
    assert enqueue["median_ratio"] == pytest.approx(80 / 40, rel=0.02)  # the GPU latency of its two kernels
    assert compare_runs(store, "fast", "fast-again")["verdict"] == "no_change"
    frame = store.samples_frame(store.run_dict("slow")["variants"][0]["id"])
    assert frame["enqueue_ms"].dropna().median() == pytest.approx(0.020)  # the enqueue's own time, kept
    # the same engine with the host running ahead (a queue in front of each inference): no change, though the
    # time from each enqueue to its work's end grows with the queue (graph vs graph_node read -92.8% that way)
    for label, period_us in (("paced", 100), ("ahead", 25)):
        store_analysis(store, analyze(_queued_app(period_us)), source="app.sqlite", label=label)
    assert compare_runs(store, "paced", "ahead")["variants"][0]["median_ratio"] == pytest.approx(1.0, abs=0.01)


def _queued_app(period_us: int, n: int = 200):
    """TensorRT-shaped: an enqueue range (5 us) every ``period_us`` on the host, its two 20 us kernels run in
    order on one stream: with a period under 40 us the GPU falls behind and a queue builds."""
    import pandas as pd

    from profiler.capture.trace import Trace
    from tests.capture_builders import T, api, ranges

    krows, nv, arows, gpu_free, corr = [], [], [], 0, 1
    for i in range(n):
        t = i * period_us * T
        nv.append(("ExecutionContext::enqueueV3", t, t + 5 * T, 5, "TensorRT"))
        for j in range(2):
            ks = max(t + (2 + j) * T + 5 * T, gpu_free)
            krows.append({"start_ns": ks, "end_ns": ks + 20 * T, "api_tid": 5, "api_start_ns": t + (1 + j) * T,
                          "api_end_ns": t + (2 + j) * T, "correlation_id": corr, "device_id": 0, "stream_id": 7,
                          "pid": 1, "name": "k", "short_name": "k"})
            arows.append(("cudaLaunchKernel", t + (1 + j) * T, t + (2 + j) * T, 5, "launch"))
            gpu_free, corr = ks + 20 * T, corr + 1
    return Trace(kernels=pd.DataFrame(krows), nvtx=ranges(*nv), api=api(*arows))


def test_tensorrt_inference_ranges_match_across_api_names(db_url):
    """TensorRT 8's enqueueV2 against TensorRT 10's enqueueV3 range: the same inference, matched (nothing
    was compared before, and the verdict read no_change); a second unmatched one on a side is left alone."""
    from profiler.compare.runs import _tensorrt_renamed

    store = Store.open(db_url)
    rng = np.random.default_rng(3)
    for label, key, scale in (("trt8", "ExecutionContext::enqueueV2", 1.0), ("trt10", "ExecutionContext::enqueueV3", 1.3)):
        rid = store.create_run(kind="analyze", source="app.sqlite", label=label)
        store.add_variant(rid, {"key": key, "domain": "TensorRT"},
                          samples=[{"idx": i, "latency_ms": float(x)} for i, x in enumerate(rng.normal(scale, 0.01, 200))])
        store.finish_run(rid)
    out = compare_runs(store, "trt8", "trt10")
    [v] = out["variants"]
    assert v["key"] == "TensorRT/ExecutionContext::enqueueV3"
    assert v["baseline_key"] == "TensorRT/ExecutionContext::enqueueV2"
    assert v["median_ratio"] == pytest.approx(1.3, abs=0.02) and v["verdict"] != "missing"
    two = ["TensorRT/ExecutionContext::enqueue", "TensorRT/ExecutionContext::execute"]
    assert _tensorrt_renamed(two, ["TensorRT/ExecutionContext::enqueueV3"]) == {}
    assert _tensorrt_renamed(["TensorRT/layer0"], ["TensorRT/layer1"]) == {}
    # the same engine run eagerly and as trtexec --useCudaGraph's replays (a range made per graph launch)
    assert _tensorrt_renamed(["TensorRT/ExecutionContext::enqueue"], ["TensorRT/cudaGraphLaunch"]) == \
        {"TensorRT/cudaGraphLaunch": "TensorRT/ExecutionContext::enqueue"}


def test_compare_stored_runs(db_url):
    store = Store.open(db_url)
    rng = np.random.default_rng(5)
    base = rng.normal(1.0, 0.01, 300)
    layers_b = [{"name": "conv1", "time_avg_ms": 0.4}, {"name": "fc", "time_avg_ms": 0.1}]
    layers_c = [{"name": "conv1", "time_avg_ms": 0.5}, {"name": "fc", "time_avg_ms": 0.1}]
    _store_run(store, "v1", base, layers=layers_b,
               findings=[{"rule": "jitter", "severity": "medium", "title": "unstable"}])
    _store_run(store, "v1-again", rng.normal(1.0, 0.01, 300), layers=layers_b)
    _store_run(store, "v2", base * 1.12, driver="581.0", cosine=0.97, passed=False, layers=layers_c,
               findings=[{"rule": "launch_overhead", "severity": "high", "title": "enqueue-bound"}])

    same = compare_runs(store, "v1", "v1-again")
    assert same["verdict"] == "no_change" and same["environment_changes"] == []

    out = compare_runs(store, "v1", "v2")
    v = out["variants"][0]
    assert out["verdict"] == "regression" and out["latency_regressions"] == ["fp16-ws1G-s1"]
    assert out["accuracy_regressions"] == ["fp16-ws1G-s1"]
    assert v["median_ratio"] == pytest.approx(1.12, abs=0.01) and v["ci_low"] > 1.05
    assert v["throughput_ratio"] == pytest.approx(1 / 1.12, abs=0.01)
    assert v["accuracy"]["y"]["cosine"]["delta"] == pytest.approx(-0.0299)
    assert v["layer_deltas"][0]["name"] == "conv1" and v["layer_deltas"][0]["delta_ms"] == pytest.approx(0.1)
    assert {"field": "driver_version", "baseline": "580.1", "candidate": "581.0"} in out["environment_changes"]
    assert [f["rule"] for f in out["findings_appeared"]] == ["launch_overhead"]
    assert [f["rule"] for f in out["findings_disappeared"]] == ["jitter"]
    trend = v["trend"]
    assert [p["label"] for p in trend["points"]] == ["v1", "v1-again", "v2"]
    assert trend["step"]["index"] == 2 and trend["step"]["run_id"] == out["candidate"]["id"]


def test_compare_says_when_the_runs_were_measured_differently(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    rng = np.random.default_rng(6)
    _store_run(store, "old", rng.normal(1.0, 0.01, 200), config={"transfers": True})  # stored before --no-overlap
    _store_run(store, "new", rng.normal(1.0, 0.01, 200), config={"transfers": True, "overlap": True})
    _store_run(store, "new-noio", rng.normal(1.0, 0.01, 200), config={"transfers": False, "overlap": True})
    assert compare_runs(store, "old", "new")["environment_changes"] == [
        {"field": "config.overlap", "baseline": False, "candidate": True}]
    assert compare_runs(store, "new", "new-noio")["environment_changes"] == [
        {"field": "config.transfers", "baseline": True, "candidate": False}]
    _store_run(store, "new-again", rng.normal(1.0, 0.01, 200), config={"transfers": True, "overlap": True})
    assert compare_runs(store, "new", "new-again")["environment_changes"] == []


def test_cli_compare_exit_codes(tmp_path):
    db = f"sqlite:///{tmp_path / 'h.db'}"
    store = Store.open(db)
    rng = np.random.default_rng(6)
    base = rng.normal(2.0, 0.02, 200)
    _store_run(store, "a", base)
    _store_run(store, "b", rng.normal(2.0, 0.02, 200))
    _store_run(store, "c", base * 1.2)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", *args],
                              capture_output=True, text=True)

    ok = run("a", "b", "--json", str(tmp_path / "ab.json"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads((tmp_path / "ab.json").read_text())["verdict"] == "no_change"
    bad = run("a", "c")
    assert bad.returncode == 1 and "regression in 1 variant(s): fp16-ws1G-s1" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert run("a", "c", "--threshold-pct", "30").returncode == 0  # the threshold is honoured
    missing = run("a", "nope")
    assert missing.returncode == 3 and "no run with id or label 'nope'" in missing.stderr


def test_cli_compare_json_to_stdout_is_pure_json(tmp_path):
    db = f"sqlite:///{tmp_path / 'h.db'}"
    store = Store.open(db)
    rng = np.random.default_rng(7)
    _store_run(store, "a", rng.normal(1.0, 0.01, 50))
    _store_run(store, "b", rng.normal(1.0, 0.01, 50))
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "a", "b", "--json", "-"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "no_change"
    assert "verdict: no_change" in r.stderr


def test_cli_compare_unwritable_json_is_one_sentence(tmp_path):
    db = f"sqlite:///{tmp_path / 'h.db'}"
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "1", "2", "--json",
                        str(blocker / "out.json")], capture_output=True, text=True)
    assert r.returncode == 3 and "--json" in r.stderr and "Traceback" not in r.stderr


def test_per_output_findings_and_new_outputs(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'o.db'}")
    rng = np.random.default_rng(8)
    x = rng.normal(1.0, 0.01, 100)

    def run(label, findings, accuracy):
        rid = store.create_run(kind="sweep", source="m.onnx", label=label)
        store.add_variant(rid, {"key": "fp16-wsdefault-s1", "precision": "fp16", "fingerprint": "f"},
                          samples=[{"idx": i, "latency_ms": float(v)} for i, v in enumerate(x)], accuracy=accuracy)
        store.add_findings(rid, findings)
        store.finish_run(rid)

    breach = lambda out: {"rule": "precision_regression", "severity": "medium", "title": out,  # noqa: E731
                          "variant": "fp16-wsdefault-s1", "evidence": {"output": out}}
    run("a", [breach("boxes")], [{"output": "boxes", "passed": False}])
    run("b", [breach("scores")], [{"output": "boxes", "passed": False}, {"output": "scores", "passed": False}])
    out = compare_runs(store, "a", "b")
    assert [f["evidence"]["output"] for f in out["findings_appeared"]] == ["scores"]
    assert [f["evidence"]["output"] for f in out["findings_disappeared"]] == ["boxes"]
    # 'scores' is new in b (no baseline to have passed) and 'boxes' failed in both: no accuracy regression
    assert out["accuracy_regressions"] == []


def test_a_change_too_few_samples_can_confirm_is_inconclusive_not_no_change():
    """tiny vs fewiters (H200 captures of 4 requests each): ratio 1.66 read 'no change beyond noise', exit 0;
    with 4 samples a side the Mann-Whitney p (normal approximation, continuity corrected) never goes below
    0.030, nor with 5 below 0.012: too few for p < 0.01, whatever the change."""
    from profiler.compare.noise import inconclusive_cause, judge
    from profiler.compare.stats import smallest_p

    assert smallest_p(4, 4) == pytest.approx(mann_whitney_u([0, 1, 2, 3], [4, 5, 6, 7])[1]) and \
        smallest_p(4, 4) > 0.01 > smallest_p(6, 6)
    base, cand = [1.0, 1.02, 0.98, 1.01], [1.66, 1.7, 1.62, 1.65]
    v = decide(base, cand)
    assert v.verdict == "inconclusive" and "too few for p < 0.01" in v.reason and v.median_ratio > 1.6
    row = v.to_dict()
    judge(row, {}, {}, [], {"rel_threshold": 0.05}, 5.0)
    assert row["verdict"] == "inconclusive" and inconclusive_cause(row) == "few_samples"
    assert decide(base + [1.0, 0.99], cand + [1.64, 1.67]).verdict == "regression"  # 6 a side can: p 0.005
    assert decide(base, [1.0, 1.01, 0.99, 1.02]).verdict == "no_change"  # no change of any size to confirm


def test_a_noisy_capture_range_is_not_told_to_rerun_as_a_sweep():
    """trt_graph vs trt_eager: a capture's range has no repeats and no fingerprint history, so its advice
    cannot be 'trtprof sweep --repeat 5 on both sides'; a sweep variant's still is."""
    from profiler.compare.noise import inconclusive_cause, judge

    for kind, says, never in (("range", "one capture a side carries no spread", "--repeat"),
                              ("sweep", "trtprof sweep --repeat 5", "one capture a side")):
        row = {"verdict": "regression", "reason": "median up 104%", "candidate_median_ms": 0.73}
        noisy = {"kind": kind, "latency_ms": {"cov_pct": 9.9}}
        judge(row, noisy, noisy, [], {"rel_threshold": 0.05}, 5.0)
        assert row["verdict"] == "inconclusive" and says in row["noise"]["summary"]
        assert inconclusive_cause(row) == ("capture" if kind == "range" else "unmeasured")
        assert never not in row["noise"]["summary"] and never not in row["reason"]
