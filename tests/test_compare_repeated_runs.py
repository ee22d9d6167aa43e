"""Real repeated runs: the same sweep run twice, back to back, on an H200 (sample_traces/repeated/h200_cls_two_runs.json).

The CUDA-graph variants are GPU-bound and stable: the comparison must call them unchanged. The eager
variants are enqueue-bound: their medians moved 40% (fp32) and 7% (fp16) between the two identical
processes. That is host noise, which per-iteration statistics inside one run cannot see, so the
comparison must not call it a regression or an improvement without a history that measures it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from profiler import stats
from profiler.compare import compare_runs
from profiler.store import Store
from tests.conftest import SAMPLE_TRACES

FIXTURE = SAMPLE_TRACES / "repeated" / "h200_cls_two_runs.json"


def _store_run(store, label, variants, gpu="NVIDIA H200"):
    rid = store.create_run(kind="sweep", source="ch_ppocr_mobile_v2.0_cls_infer.onnx", label=label, gpu=gpu)
    for v in variants:
        lat, enq, comp = (np.asarray(v[k], dtype=float) for k in ("latency_ms", "enqueue_ms", "compute_ms"))
        store.add_variant(rid, {"key": v["key"], "precision": v["precision"], "cuda_graph": v["cuda_graph"],
                                "backend": "cuda", "fingerprint": f"h200-cls-{v['key']}",
                                "latency_ms": stats.summarize(lat), "enqueue_ms": stats.summarize(enq),
                                "compute_ms": stats.summarize(comp)},
                          samples=[{"idx": i, "latency_ms": float(a), "enqueue_ms": float(b), "compute_ms": float(c)}
                                   for i, (a, b, c) in enumerate(zip(lat, enq, comp))])
    store.finish_run(rid)
    return rid


@pytest.fixture
def repeated():
    if not FIXTURE.exists():
        pytest.skip("sample_traces/repeated/h200_cls_two_runs.json is missing")
    return json.loads(FIXTURE.read_text())


def _store_both(repeated, tmp_path):
    """The two stored H200 runs as rep-a and rep-b in a new SQLite store at tmp_path/r.db."""
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    a, b = repeated["runs"]
    _store_run(store, "rep-a", a["variants"])
    _store_run(store, "rep-b", b["variants"])
    return store


def test_same_sweep_twice_on_an_h200_is_not_a_change(repeated, tmp_path):
    store = _store_both(repeated, tmp_path)
    out = compare_runs(store, "rep-a", "rep-b")
    by = {v["key"]: v for v in out["variants"]}
    for key in ("fp32-wsdefault-s1-graph", "fp16-wsdefault-s1-graph"):
        assert by[key]["verdict"] == "no_change" and not by[key]["host_bound"]
        assert abs(by[key]["median_ratio"] - 1) < 0.01
    for key in ("fp32-wsdefault-s1", "fp16-wsdefault-s1"):
        v = by[key]
        assert v["host_bound"] and v["verdict"] == "inconclusive"
        assert v["verdict_within_run"] == "improvement" and v["p_value"] < 1e-10  # what the samples alone say
        assert "enqueue-bound" in v["reason"] and "need 3" in v["reason"]
    assert by["fp32-wsdefault-s1"]["median_ratio"] == pytest.approx(0.60, abs=0.02)
    assert out["verdict"] == "inconclusive" and out["latency_regressions"] == []
    assert sorted(out["inconclusive"]) == ["fp16-wsdefault-s1", "fp32-wsdefault-s1"]
    # the gate does not fail on noise
    db = f"sqlite:///{tmp_path / 'r.db'}"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", db, "compare", "rep-a", "rep-b"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "inconclusive" in r.stdout


def _host_bound_run(store, label, median_ms, rng, n=200):
    lat = rng.normal(median_ms, median_ms * 0.02, n)
    return _store_run(store, label, [{"key": "fp32-wsdefault-s1", "precision": "fp32", "cuda_graph": False,
                                      "latency_ms": lat, "enqueue_ms": lat * 0.99, "compute_ms": lat * 0.98}])


def test_with_history_a_host_bound_change_is_judged_against_the_run_to_run_spread(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    rng = np.random.default_rng(11)
    for i, med in enumerate([3.0, 5.0, 4.0]):  # earlier runs: medians spread by 67%
        _host_bound_run(store, f"old{i}", med, rng)
    _host_bound_run(store, "within", 4.8, rng)  # 20% above old2: inside the spread
    v = compare_runs(store, "old2", "within")["variants"][0]
    # not beyond the spread, and a 50% spread cannot show a 5% change: inconclusive, never no change
    assert v["verdict"] == "inconclusive" and v["verdict_within_run"] == "regression" and v["noise"]["underpowered"]
    assert v["run_to_run_spread"] == pytest.approx(0.5, abs=0.02)  # (5.0 - 3.0) / median 4.0
    _host_bound_run(store, "beyond", 9.6, rng)  # 2x old2: beyond any spread seen
    v = compare_runs(store, "old2", "beyond")["variants"][0]
    assert v["verdict"] == "regression" and "beyond the" in v["reason"]


def test_compare_report_says_inconclusive(repeated, tmp_path):
    from profiler.report.compare import build_compare_page, verdict_summary

    store = _store_both(repeated, tmp_path)
    out = compare_runs(store, "rep-a", "rep-b")
    head = verdict_summary(out)
    assert head["cls"] == "warn" and "Inconclusive: 2 of 4 compared variants changed within one run, but" in head["headline"]
    assert sum("inconclusive: " in line for line in head["lines"]) == 2
    build_compare_page(out)  # renders without error


def test_only_runs_before_the_candidate_count_as_history(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    rng = np.random.default_rng(12)
    for i, med in enumerate([3.0, 5.0, 4.0]):
        _host_bound_run(store, f"old{i}", med, rng)
    _host_bound_run(store, "within", 4.8, rng)
    _host_bound_run(store, "later", 20.0, rng)  # a later run must not widen the spread for 'within'
    v = compare_runs(store, "old2", "within")["variants"][0]
    assert v["run_to_run_spread"] == pytest.approx(0.5, abs=0.02) and v["verdict"] == "inconclusive"
