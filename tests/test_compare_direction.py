"""The direction and the power of `trtprof compare`'s noise model (profiler.compare.noise).

Host load on one side explains only a change in the direction it pushes: load on the baseline slows the baseline
(an apparent improvement), load on the candidate slows the candidate (an apparent regression). Every verdict states
the smallest change the comparison could have detected; a threshold below it is inconclusive with the repeats that
would decide, never no change. Synthetic rows with injected repeat medians and host loads pin each case; real
CPU sweeps (ONNX Runtime) with host loads injected into their stored repeats show it end to end."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from profiler.compare.noise import (CAPTURE_RUN_TO_RUN_FACTOR, disturbance, judge, power, repeats_to_decide,
                                    spread_margin)
from profiler.compare.stats import DEFAULT_RULE

#: The expected range of n standard normal values (d2, from quality-control tables).
D2 = {3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 10: 3.078}


def _row(within="regression", ratio=2.0):
    return {"verdict": within, "reason": f"median {'up' if ratio > 1 else 'down'} {abs(ratio - 1) * 100:.0f}%",
            "median_ratio": ratio, "candidate_median_ms": ratio, "ci_low": ratio * 0.98, "ci_high": ratio * 1.02}


def _cpu(repeats, shares):
    """A CPU-backend variant (its latency follows the host) with process repeats and their host loads."""
    return {"synchronous_enqueue": True, "latency_ms": {"median": float(np.median(repeats)), "cov_pct": 2.0},
            "repeats": {"medians_ms": list(repeats), "host_others_shares": list(shares)}}


def test_load_on_the_baseline_never_explains_a_regression():
    # the CRNN: a 2x heavier model, every repeat apart; the baseline busier (0.49-0.66) than the candidate
    base, cand = _cpu([1.0, 1.03, 1.06], [0.49, 0.58, 0.66]), _cpu([2.0, 2.04, 2.1], [0.47, 0.48, 0.50])
    row = _row("regression", 2.0)
    judge(row, base, cand, [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "regression", row["reason"]
    dist = row["noise"]["disturbance"]
    assert dist["baseline"]["pushes_toward"] == "improvement" and dist["candidate"]["pushes_toward"] == "regression"
    # the candidate's load (0.48) is below the baseline's (0.58): it explains no regression at all
    assert dist["explains"]["regression"] == 1.0
    assert dist["explains"]["improvement"] == pytest.approx((1 - 0.48) / (1 - 0.58))


def test_load_on_the_baseline_explains_an_improvement():
    # the same model timed on a loaded host (baseline) and on a quiet one (candidate): 0.469x, all repeats apart
    base, cand = _cpu([2.10, 2.13, 2.2], [0.55, 0.55, 0.56]), _cpu([1.0, 1.0, 1.02], [0.01, 0.0, 0.02])
    row = _row("improvement", 0.469)
    judge(row, base, cand, [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "inconclusive" and row["noise"]["host_shared"]
    factor = (1 - 0.01) / (1 - 0.55)  # the baseline slowed by 1/(1-0.55), the candidate by 1/(1-0.01)
    assert row["noise"]["load_adjusted_ratio"] == pytest.approx(1.0 / 2.13 * factor)
    assert "while the baseline was timed" in row["reason"]
    # ... and the model with more work, after that same loaded baseline, is a regression: the load cannot explain it
    slow = _row("regression", 1.5)
    judge(slow, base, _cpu([3.2, 3.25, 3.3], [0.0, 0.01, 0.0]), [], DEFAULT_RULE, 5.0)
    assert slow["verdict"] == "regression", slow["reason"]


def test_load_on_the_candidate_explains_a_regression_never_an_improvement():
    quiet = [0.0, 0.01, 0.0]
    row = _row("regression", 1.3)
    judge(row, _cpu([1.0, 1.01, 1.02], quiet), _cpu([1.3, 1.31, 1.33], [0.5, 0.5, 0.5]), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "inconclusive" and row["noise"]["host_shared"] and "candidate was timed" in row["reason"]
    row = _row("improvement", 0.7)
    judge(row, _cpu([1.0, 1.01, 1.02], quiet), _cpu([0.7, 0.71, 0.72], [0.5, 0.5, 0.5]), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "improvement", row["reason"]


def test_a_change_beyond_all_the_noise_on_both_sides_stands_whatever_the_load():
    # the same heavy load on both sides cancels; a change beyond the load the busier side adds stands too
    busy = [0.6, 0.6, 0.6]
    row = _row("regression", 2.0)
    judge(row, _cpu([1.0, 1.02, 1.04], busy), _cpu([2.0, 2.04, 2.08], busy), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "regression"
    row = _row("regression", 4.0)  # the candidate alone at 60% explains 2.5x, not 4x
    judge(row, _cpu([1.0, 1.02, 1.04], [0.0] * 3), _cpu([4.0, 4.1, 4.2], busy), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "regression"
    assert row["noise"]["load_adjusted_ratio"] == pytest.approx(4.1 / 1.02 * (1 - 0.6))


def test_an_underpowered_comparison_is_inconclusive_never_no_change():
    # the 234% spread: a change would have to exceed 2 x 234% to count
    b, c = [1.0, 1.5, 3.34], [0.35, 0.5, 0.9]
    row = _row("improvement", 1.268)
    judge(row, _cpu(b, [0.0] * 3), _cpu(c, [0.0] * 3), [], DEFAULT_RULE, 5.0)
    spread = (3.34 - 1.0) / 1.5
    assert row["verdict"] == "inconclusive" and row["noise"]["underpowered"]
    assert row["detectable_change"]["rel"] == pytest.approx(2 * spread)
    assert f"{2 * spread * 100:.1f}%" in row["reason"]
    # no change within the run, the repeats spread 4%: a 5% change could not be seen; 6 repeats a side could
    row = _row("no_change", 1.01)
    judge(row, _cpu([1.0, 1.02, 1.04], [0.0] * 3), _cpu([1.01, 1.02, 1.03], [0.0] * 3), [], DEFAULT_RULE, 5.0)
    spread = 0.04 / 1.02
    sigma = spread / D2[3]
    need = next(n for n in range(3, 21) if _margin(n) * D2[n] * sigma <= 0.05) if spread else None
    assert row["verdict"] == "inconclusive" and row["verdict_within_run"] == "no_change"
    assert row["detectable_change"]["repeats_to_decide"] == need == 6
    assert "--repeat 6" in row["reason"]
    # spread 1%: a 2% change could be seen, so no change stands, with what it could have detected
    row = _row("no_change", 1.0)
    judge(row, _cpu([1.0, 1.005, 1.01], [0.0] * 3), _cpu([1.0, 1.004, 1.01], [0.0] * 3), [], DEFAULT_RULE, 5.0)
    assert row["verdict"] == "no_change" and row["detectable_change"]["rel"] == pytest.approx(2 * 0.01 / 1.004)  # the wider side


def _margin(n: int) -> float:
    """spread_margin by its definition: 2, 1.5, 1, then d2(5) / d2(n) x sqrt(5 / n)."""
    return {3: 2.0, 4: 1.5, 5: 1.0}.get(n) or D2[5] / D2[n] * math.sqrt(5 / n)


def test_the_margin_keeps_shrinking_past_five_repeats():
    for n in (6, 7, 8, 10):
        assert spread_margin(n) == pytest.approx(_margin(n), rel=0.01)
    assert repeats_to_decide(0.5, 3, 0.05) is None  # no count up to 20 decides a 5% change on a 50% spread
    assert power("repeats", 0.05, spread=0.5, n=3)["text"].endswith("(a quieter host, a longer timed phase)")


def test_one_capture_a_side_needs_the_declared_factor_and_the_bulk_apart():
    rng = np.random.default_rng(1)
    noisy = {"kind": "range", "latency_ms": {"cov_pct": 12.0}}
    base = rng.normal(1.0, 0.1, 200)
    for ratio, verdict in ((1.5, "inconclusive"), (CAPTURE_RUN_TO_RUN_FACTOR * 1.2, "regression"),
                           (1 / (CAPTURE_RUN_TO_RUN_FACTOR * 1.2), "improvement")):
        row = _row("regression" if ratio > 1 else "improvement", ratio)
        judge(row, noisy, noisy, [], DEFAULT_RULE, 5.0, samples=(base, base * ratio))
        assert row["verdict"] == verdict, (ratio, row["reason"])
        assert row["detectable_change"]["rel"] == pytest.approx(CAPTURE_RUN_TO_RUN_FACTOR - 1)
    row = _row("no_change", 1.0)  # the same capture twice: never no change below what one capture a side can see
    judge(row, noisy, noisy, [], DEFAULT_RULE, 5.0, samples=(base, base))
    assert row["verdict"] == "inconclusive" and row["noise"]["underpowered"]


def test_disturbance_of_unknown_or_idle_sides():
    d = disturbance(None, 0.0)
    assert d["baseline"]["host_others_share"] is None and d["candidate"]["pushes_toward"] is None
    assert d["explains"] == {"regression": 1.0, "improvement": 1.0}


def test_the_report_says_what_the_verdict_is_and_the_detectable_change():
    from profiler.report.compare import build_compare_page, verdict_summary

    row = _row("no_change", 1.01)
    row["key"] = "fp32"
    judge(row, _cpu([1.0, 1.02, 1.04], [0.6] * 3), _cpu([1.01, 1.02, 1.03], [0.0] * 3), [], DEFAULT_RULE, 5.0)
    doc = {"kind": "compare", "verdict": "inconclusive", "variants": [row], "rule": DEFAULT_RULE}
    head = verdict_summary(doc)
    assert head["cls"] == "warn" and "smallest change the comparison could detect" in head["headline"]
    assert any("baseline 60% (slows the baseline: pushes toward an improvement)" in line for line in head["lines"])
    page = build_compare_page(doc)
    text = repr(page)
    assert "verdict (within the run)" not in text and "within the run: no change" in text
    assert "smallest detectable change" in text


# ----------------------------------------------------------------------------- real CPU sweeps

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _chain(path, layers: int, width: int = 320):
    """y = x @ W1 @ ... @ Wn on a 32 x width input: the same interface for every n, n times the work."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / width ** 0.5)
                                             .astype(np.float32), f"w{i}"))
        name = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [name]))
        prev = name
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _inject_load(store, label, shares):
    """Replace the host load the sweep's repeats measured with ``shares`` (the real machine's must not decide)."""
    run = store.run_dict(label)
    for v in run["variants"]:
        rep = dict((v.get("metrics") or {}).get("repeats") or {})
        rep["host_others_shares"] = list(shares)
        store.update_variant_metrics(run["id"], v["key"], {"repeats": rep})


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    from profiler.backends.onnxruntime import OnnxRuntimeBackend
    from profiler.store import Store
    from profiler.sweep import SweepConfig, run_sweep

    tmp = tmp_path_factory.mktemp("direction")
    store = Store.open(f"sqlite:///{tmp / 'd.db'}")
    light, heavy = _chain(tmp / "light.onnx", 6), _chain(tmp / "heavy.onnx", 12)
    for model, label in ((light, "base"), (light, "again"), (heavy, "heavy")):
        # one intra-op thread: on a shared 2-core box a second thread waits on whatever else runs there
        run_sweep(SweepConfig(model=str(model), precisions=["fp32"], backend="onnxruntime", label=label,
                              iterations=20, duration_s=0.4, warmup_ms=30, layers=False, repeat=3,
                              cache_dir=str(tmp / "cache")), store=store,
                  backend=OnnxRuntimeBackend(intra_op_threads=1))
    measured = {label: store.run_dict(label)["variants"][0]["metrics"]["repeats"]["host_others_shares"]
                for label in ("base", "again")}
    return store, tmp, measured


def test_a_2x_heavier_model_is_a_regression_even_with_load_on_the_baseline(sweeps):
    from profiler.compare import compare_runs

    store, tmp, _ = sweeps
    _inject_load(store, "base", [0.6, 0.65, 0.7])  # others took most of the host while the baseline was timed
    _inject_load(store, "heavy", [0.0, 0.0, 0.0])
    out = compare_runs(store, "base", "heavy")
    v = out["variants"][0]
    assert out["verdict"] == "regression", v["reason"]
    assert v["noise"]["disturbance"]["baseline"]["pushes_toward"] == "improvement"
    assert v["detectable_change"]["rel"] is not None
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", f"sqlite:///{tmp / 'd.db'}", "compare", "base",
                        "heavy"], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "host load: baseline 65% (slows the baseline: pushes toward an improvement)" in r.stdout


def test_the_same_config_twice_is_never_a_regression(sweeps):
    from profiler.compare import compare_runs

    """Timed for real, so the machine's load decides how far apart the two runs land: the first comparison
    keeps the load each side's probe measured (what lets the noise model explain a busy moment on a shared
    box), the second reports the candidate timed on a host 60% taken by others."""
    store, _, measured = sweeps
    for shares in (measured["again"], [0.6] * 3):
        _inject_load(store, "base", measured["base"])
        _inject_load(store, "again", shares)
        out = compare_runs(store, "base", "again")
        v = out["variants"][0]
        assert out["verdict"] in ("no_change", "inconclusive"), v["reason"]
        d = v["detectable_change"]
        assert d["rel"] is not None and f"{d['rel'] * 100:.1f}%" in d["text"]
        if out["verdict"] == "inconclusive":  # it says what it could have seen and why it cannot say more
            ev = v["noise"]
            assert ev.get("underpowered") or ev.get("weak") or ev.get("host_shared"), v["reason"]
