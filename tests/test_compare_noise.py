"""The between-run noise model of `trtprof compare` (profiler.compare.noise) and `trtprof sweep --repeat`.

Real runs on ONNX Runtime's CPU provider: the same configuration swept repeatedly (each sweep with
process-level repeats) must never be called a regression or an improvement, and a model that does
ten times the work behind the same interface must be, with the variant named. Synthetic rows pin the
rule's edges (overlapping repeats, the margin, history, inconclusive)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest

from profiler.compare import compare_runs
from profiler.compare.noise import judge, separation_p_value, spread_margin
from profiler.compare.stats import DEFAULT_RULE
from profiler.errors import UsageError
from profiler.harness.hostload import read_proc_stat
from profiler.store import Store

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _matmul_chain(path, layers: int, width: int = 192, out: str = "y"):
    """y = x @ W1 @ ... @ Wn: same interface for every n, n times the work."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / width ** 0.5)
                                             .astype(np.float32), f"w{i}"))
        name = out if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [name]))
        prev = name
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [8, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _sweep(store, model, label, tmp_path, repeat=3, **extra):
    from profiler.sweep import SweepConfig, run_sweep

    cfg = SweepConfig(model=str(model), precisions=["fp32"], backend="onnxruntime", label=label, iterations=20,
                      duration_s=0.25, warmup_ms=30, layers=False, repeat=repeat,
                      cache_dir=str(tmp_path / "cache"), **extra)
    return run_sweep(cfg, store=store)


@contextlib.contextmanager
def _host_load(share: str):
    """Every timed phase (this process's and its repeat processes') reports ``share`` as the others' load."""
    old = os.environ.get("TRTPROF_HOST_LOAD")
    os.environ["TRTPROF_HOST_LOAD"] = share
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRTPROF_HOST_LOAD"]
        else:
            os.environ["TRTPROF_HOST_LOAD"] = old


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """Six sweeps of one model under the machine's real load (its probe measuring it); then, with the load
    probe injected, the same model with the baseline reported half taken by other processes and a model with
    10x the layers on a quiet host: all with 3 process repeats."""
    tmp = tmp_path_factory.mktemp("noise")
    store = Store.open(f"sqlite:///{tmp / 'n.db'}")
    fast, slow = _matmul_chain(tmp / "fast.onnx", 4), _matmul_chain(tmp / "slow.onnx", 40)
    for i in range(6):
        _sweep(store, fast, f"same{i}", tmp)
    with _host_load("0.5"):
        _sweep(store, fast, "loaded-base", tmp)
    with _host_load("0"):
        _sweep(store, slow, "slow", tmp)
    return store, tmp


def test_sweep_repeat_stores_one_median_per_process(cpu_runs):
    store, _ = cpu_runs
    run = store.run_dict("same0")
    rep = run["variants"][0]["metrics"]["repeats"]
    assert rep["processes"] == 3 and len(rep["medians_ms"]) == 3 and not rep["errors"]
    main_median = run["variants"][0]["latency_ms"]["median"]
    # each process measured the same work: every repeat within 3x of the main measurement (a busy CI box)
    assert all(main_median / 3 < m < main_median * 3 for m in rep["medians_ms"])
    # the host load of the main measurement travels with the fingerprint's history (the history rule reads it)
    hist = store.fingerprint_history(run["variants"][0]["fingerprint"])
    assert len(hist) >= 6 and all(h["host_others_share"] is None or 0 <= h["host_others_share"] <= 1 for h in hist)
    if read_proc_stat() is not None:
        assert all(h["host_others_share"] is not None for h in hist)


def test_same_config_pairs_are_never_a_change(cpu_runs):
    store, _ = cpu_runs
    verdicts = []
    for i in range(5):  # five back-to-back pairs of one configuration
        out = compare_runs(store, f"same{i}", f"same{i + 1}")
        v = out["variants"][0]
        verdicts.append((v["verdict"], v.get("verdict_within_run"), v["noise"].get("source")))
        # never a change; inconclusive only where the host was measurably shared (a parallel test worker)
        # or the repeats moved beyond their spread but short of the margin three repeats need
        assert out["verdict"] in ("no_change", "inconclusive"), (i, v["reason"])
        if out["verdict"] == "inconclusive":
            ev = v["noise"]
            assert (ev.get("host_shared") and ev["host_others_share"] > 0) or ev.get("weak") \
                or ev.get("underpowered"), (i, v["reason"])
        every = v["noise"].get("host_others_share")
        assert every is None or 0 <= every <= 1
    # the between-run evidence is what decided whenever the per-iteration test alone saw a change
    assert all(src == "repeats" for verdict, within, src in verdicts if within)
    shares = store.run_dict("same0")["variants"][0]["metrics"]["repeats"]["host_others_shares"]
    assert len(shares) == 3 and all(x is None or 0 <= x <= 1 for x in shares)


def test_a_slower_model_is_a_regression_with_the_variant_named(cpu_runs):
    """Load on the baseline side (injected: the machine's own load must not decide) cannot explain a slower
    candidate: 10x the MatMuls is a regression."""
    store, tmp = cpu_runs
    base = store.run_dict("loaded-base")["variants"][0]["metrics"]["repeats"]["host_others_shares"]
    assert base == [0.5, 0.5, 0.5]
    out = compare_runs(store, "loaded-base", "slow")
    v = out["variants"][0]
    assert v["verdict"] == "regression" and v["noise"]["source"] == "repeats" and v["noise"]["confirmed"]
    assert v["noise"]["repeat_ratio"] > 3  # 10x the MatMuls: at least 3x the time on any box
    assert out["latency_regressions"] == ["fp32-wsdefault-s1"]
    assert any(e["field"] == "source_hash" for e in out["environment_changes"])  # the model changed, and says so
    db = f"sqlite:///{tmp / 'n.db'}"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "loaded-base", "slow",
                        "--json", str(tmp / "c.json"), "--report", str(tmp / "c.html")],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert "regression in 1 variant(s): fp32-wsdefault-s1" in r.stderr
    assert (tmp / "c.json").stat().st_size > 0 and (tmp / "c.html").stat().st_size > 0


def test_different_models_or_shapes_are_refused_unless_forced(cpu_runs, tmp_path):
    store, tmp = cpu_runs
    _sweep(store, _matmul_chain(tmp_path / "scores.onnx", 4, out="scores"), "other-model", tmp, repeat=0)
    _sweep(store, _matmul_chain(tmp_path / "narrow.onnx", 4, width=64), "other-shape", tmp, repeat=0)
    with pytest.raises(UsageError, match="different models"):
        compare_runs(store, "same0", "other-model")
    with pytest.raises(UsageError, match=r"different input shapes \(\{'x': \[8, 192\]\} and \{'x': \[8, 64\]\}\)"):
        compare_runs(store, "same0", "other-shape")
    out = compare_runs(store, "same0", "other-model", force=True)
    assert out["forced"] and "different models" in out["forced"][0]
    from profiler.report.compare import verdict_summary

    assert verdict_summary(out)["headline"].startswith("Forced comparison: ")
    db = f"sqlite:///{tmp / 'n.db'}"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "same0", "other-model"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--force" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# -- the rule on synthetic rows ---------------------------------------------------------------------
def _row(verdict="regression", ratio=1.3, cand_median=1.3):
    return {"verdict": verdict, "median_ratio": ratio, "candidate_median_ms": cand_median,
            "reason": f"median up {(ratio - 1) * 100:.0f}%"}


def _variant(repeats=None, cov=1.0, synchronous=False, enqueue=None, compute=None, shares=None, share=None):
    v = {"latency_ms": {"median": 1.0, "cov_pct": cov}, "synchronous_enqueue": synchronous,
         "host_others_share": share}
    if repeats is not None:
        v["repeats"] = {"medians_ms": repeats, "host_others_shares": shares or [None] * len(repeats)}
    if enqueue is not None:
        v["enqueue_ms"], v["compute_ms"] = {"median": enqueue}, {"median": compute}
    return v


def test_overlapping_repeats_overrule_the_within_run_test():
    row = _row()
    judge(row, _variant([1.0, 1.2, 1.4]), _variant([1.1, 1.3, 1.5]), [], DEFAULT_RULE, 5.0)
    # a 33% spread: no 5% change could have been seen, so not "no change" either
    assert row["verdict"] == "inconclusive" and row["verdict_within_run"] == "regression"
    assert "overlap" in row["reason"] and row["noise"]["underpowered"]


def test_separated_repeats_need_the_margin_for_few_repeats():
    # 3 against 3, spread 10%: the change must exceed 2 x 10% = 20%; between 10% and 20% more repeats decide
    b = [1.0, 1.05, 1.1]
    row = _row(ratio=1.15)
    judge(row, _variant(b), _variant([1.16, 1.18, 1.2]), [], DEFAULT_RULE, 5.0)  # x1.124: one spread, not two
    assert row["verdict"] == "inconclusive" and row["noise"]["spread_margin"] == 2.0 and row["noise"]["weak"]
    assert "--repeat 5" in row["reason"]
    row = _row(ratio=1.08)  # within one spread: no change
    judge(row, _variant(b), _variant([1.12, 1.13, 1.135]), [], DEFAULT_RULE, 5.0)
    # ... not beyond the spread, and a 10% spread cannot show a 5% change: inconclusive, not no change
    assert row["verdict"] == "inconclusive" and not row["noise"]["weak"] and row["noise"]["underpowered"]
    row = _row(ratio=1.3)
    judge(row, _variant(b), _variant([1.33, 1.36, 1.4]), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "regression" and row["noise"]["repeat_ratio"] == pytest.approx(1.36 / 1.05)
    assert spread_margin(5) == 1.0 and spread_margin(2) == float("inf")
    assert separation_p_value(5, 5) == pytest.approx(2 / 252)


def test_history_is_used_when_there_are_no_repeats():
    row = _row(ratio=1.1, cand_median=1.1)
    judge(row, _variant(), _variant(), [1.0, 1.2, 0.95], DEFAULT_RULE, 5.0)  # inside the history's range
    # ... whose 25% spread cannot show a 5% change
    assert row["verdict"] == "inconclusive" and row["noise"]["source"] == "history"
    row = _row(ratio=1.6, cand_median=1.6)
    judge(row, _variant(), _variant(), [1.0, 1.05, 0.98], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "regression"


@pytest.mark.parametrize("side", [dict(synchronous=True), dict(cov=40.0), dict(enqueue=2.0, compute=1.0)])
def test_a_noisy_variant_without_evidence_is_inconclusive(side):
    row = _row(ratio=2.07)
    judge(row, _variant(**side), _variant(**side), [1.0], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "inconclusive" and row["verdict_within_run"] == "regression"
    assert "--repeat" in row["reason"]


def test_a_change_the_hosts_other_load_can_explain_is_inconclusive():
    # the CI failure: same configuration, repeats of each side back to back, 0.798x apart
    base, cand = [1.25, 1.26, 1.28], [1.0, 1.01, 1.02]
    quiet = _row("improvement", ratio=0.8)
    judge(quiet, _variant(base, synchronous=True, shares=[0.02] * 3), _variant(cand, synchronous=True, shares=[0.01] * 3),
          [], DEFAULT_RULE, 5.0)
    assert quiet["verdict"] == "improvement" and quiet["noise"]["host_others_share"] == pytest.approx(0.02)
    busy = _row("improvement", ratio=0.8)
    judge(busy, _variant(base, synchronous=True, shares=[0.45, 0.5, 0.55]),
          _variant(cand, synchronous=True, shares=[0.3] * 3), [], DEFAULT_RULE, 5.0)
    assert busy["verdict"] == "inconclusive" and busy["verdict_within_run"] == "improvement"
    assert busy["noise"]["host_shared"] and busy["noise"]["host_others_share"] == pytest.approx(0.5)
    # the baseline's load (50%) over the candidate's (30%) explains an improvement of up to 0.7 / 0.5
    assert "50% of the host's CPU" in busy["reason"] and "up to 1.40x" in busy["reason"]
    # a change well beyond what half the host explains (2x) stands on the same busy host
    big = _row(ratio=3.0)
    judge(big, _variant([1.0, 1.01, 1.02], synchronous=True, shares=[0.5] * 3),
          _variant([3.0, 3.02, 3.05], synchronous=True, shares=[0.5] * 3), [], DEFAULT_RULE, 5.0)
    # (the same load on both sides cancels: it explains nothing)
    assert big["verdict"] == "regression" and big["noise"]["load_adjusted_ratio"] == pytest.approx(3.02 / 1.01)
    # a device-bound GPU query does not follow the host: the load is recorded, not held against it
    gpu = _row("improvement", ratio=0.8)
    judge(gpu, _variant(base, enqueue=0.1, compute=1.0, shares=[0.5] * 3),
          _variant(cand, enqueue=0.1, compute=1.0, shares=[0.5] * 3), [], DEFAULT_RULE, 5.0)
    assert gpu["verdict"] == "improvement"
    # history path: the candidate's own measurement was taken on a busy host
    hist = _row(ratio=1.6, cand_median=1.6)
    judge(hist, _variant(synchronous=True), _variant(synchronous=True, share=0.6), [1.0, 1.05, 0.98],
          DEFAULT_RULE, 5.0)
    assert hist["verdict"] == "inconclusive" and "60%" in hist["reason"]
    # ... or the earlier runs were: they ran slow on a busy host, the quiet candidate looks faster
    prior = _row("improvement", ratio=0.7, cand_median=0.7)
    judge(prior, _variant(synchronous=True), _variant(synchronous=True, share=0.0), [1.0, 1.05, 0.98],
          DEFAULT_RULE, 5.0, prior_shares=[0.55, None, 0.1])
    assert prior["verdict"] == "inconclusive" and "55%" in prior["reason"]
    quiet = _row("improvement", ratio=0.7, cand_median=0.7)
    judge(quiet, _variant(synchronous=True), _variant(synchronous=True, share=0.0), [1.0, 1.05, 0.98],
          DEFAULT_RULE, 5.0, prior_shares=[0.0, 0.01, None])
    assert quiet["verdict"] == "improvement"


def test_a_quiet_device_bound_variant_keeps_its_within_run_verdict():
    row = _row()
    judge(row, _variant(cov=0.5), _variant(cov=0.5), [], DEFAULT_RULE, 2.5)
    assert row["verdict"] == "regression" and row["noise"]["source"] == "within-run only"


def test_compare_of_runs_with_differing_and_statless_variants_writes_both_files(tmp_path):
    """The `NoneType.__format__` crash: variants only on one side, a failed one, one with no samples."""
    from profiler import stats

    db = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store.open(db)
    for label, keys in (("a", ["fp32", "fp16", "int8"]), ("b", ["fp32", "fp16", "graph"])):
        rid = store.create_run(kind="sweep", source="m.onnx", label=label)
        for k in keys:
            ok = not (label == "b" and k == "fp16")
            lat = np.random.default_rng(1).normal(1, 0.01, 50)
            store.add_variant(rid, {"key": k, "precision": "fp32", "status": "ok" if ok else "failed",
                                    "latency_ms": stats.summarize(lat) if ok and k != "int8" else None},
                              samples=[{"idx": i, "latency_ms": float(x)} for i, x in enumerate(lat)]
                              if ok and k != "int8" else None)
        store.finish_run(rid)
    store.close()
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "a", "b",
                        "--json", str(tmp_path / "c.json"), "--report", str(tmp_path / "c.html")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import json

    out = json.loads((tmp_path / "c.json").read_text())
    assert {v["key"]: v["verdict"] for v in out["variants"]} == {
        "fp32": "no_change", "fp16": "missing", "graph": "missing", "int8": "missing"}
    assert (tmp_path / "c.html").stat().st_size > 10_000
    assert "fp16" in r.stdout and " - " in r.stdout  # a missing ratio prints as '-'


def test_layer_deltas_carry_their_uncertainty_or_are_hidden():
    from profiler.compare.runs import _judged_layers

    base = {"latency_ms": {"cov_pct": 2.0}, "layers": [{"name": "conv1", "time_avg_ms": 1.0},
                                                       {"name": "conv2", "time_avg_ms": 0.5}]}
    cand = {"latency_ms": {"cov_pct": 2.0}, "layers": [{"name": "conv1", "time_avg_ms": 1.5},
                                                       {"name": "conv2", "time_avg_ms": 0.52}]}
    row = {"verdict": "no_change"}
    _judged_layers(row, base, cand)  # no latency change: every per-layer difference is noise
    assert row["layer_deltas"] == [] and "2 per-layer deltas hidden" in row["layer_deltas_hidden"]
    row = {"verdict": "regression", "run_to_run_spread": 0.2}
    _judged_layers(row, base, cand)  # +50% on conv1 beats a 20% uncertainty; +4% on conv2 does not
    assert [r["name"] for r in row["layer_deltas"]] == ["conv1"]
    assert row["layer_deltas"][0]["uncertainty_ms"] == pytest.approx(0.3)  # 20% of 1.5 ms
    assert "1 per-layer deltas within their uncertainty" in row["layer_deltas_hidden"]


def test_an_underflowing_p_value_is_never_printed_as_zero():
    from profiler.compare.stats import decide, fmt_p

    from profiler.report.compare import p_text

    assert fmt_p(0.0) == "<1e-300" and fmt_p(0.031) == "=0.031"
    assert p_text(0.0) == "<1e-300" and p_text(0.031) == "0.031" and p_text(2e-7) == "2.0e-07"
    rng = np.random.default_rng(0)
    row = decide(rng.normal(1.0, 0.001, 3000), rng.normal(2.0, 0.001, 3000), DEFAULT_RULE)
    assert row.p_value == 0.0 and "p<1e-300" in row.reason and "p=0," not in row.reason


def test_a_run_compared_with_itself_is_a_usage_error(cpu_runs):
    store, _ = cpu_runs
    run_id = store.run_dict("same0")["id"]
    with pytest.raises(UsageError, match=r"'same0' and '\d+' are the same run"):
        compare_runs(store, "same0", str(run_id))
