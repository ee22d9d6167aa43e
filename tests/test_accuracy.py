"""Accuracy metrics, thresholds and precision_regression findings.

Synthetic arrays pin the formulas; the real-model checks (fp16/int8 of rapidocr's models through
ONNX Runtime) live in test_variants.py, which feeds these same functions.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from profiler.accuracy import (
    DEFAULT_THRESHOLDS,
    compare_batches,
    compare_outputs,
    evaluate,
    looks_like_class_scores,
    merge_thresholds,
    parse_threshold_args,
)
from profiler.errors import UsageError
from profiler.rules.sweep_accuracy import accuracy_findings


def test_metrics_match_hand_computation():
    r = np.array([[3.0, 4.0, 0.0]], np.float32)
    c = np.array([[3.0, 4.0, 1.0]], np.float32)
    m = compare_outputs({"y": r}, {"y": c})["y"]
    assert m["max_abs"] == pytest.approx(1.0)
    assert m["mean_abs"] == pytest.approx(1 / 3)
    assert m["rel_l2"] == pytest.approx(1 / 5)  # ||(0,0,1)|| / ||(3,4,0)||
    assert m["cosine"] == pytest.approx(25 / (5 * math.sqrt(26)))
    assert m["top1_agreement"] is None  # (3, 4, 0) is not a probability row: no top-1 unless declared
    assert m["nan_count"] == 0 and m["inf_count"] == 0
    assert compare_outputs({"y": r}, {"y": c}, kinds={"y": "logits"})["y"]["top1_agreement"] == 1.0


def test_identical_outputs_are_perfect_and_zero_reference_is_handled():
    a = np.random.default_rng(0).normal(size=(4, 10)).astype(np.float32)
    m = compare_outputs({"y": a}, {"y": a.copy()})["y"]
    assert (m["max_abs"], m["rel_l2"], m["cosine"], m["top1_agreement"]) == (0.0, 0.0, 1.0, None)
    z = np.zeros((2, 3), np.float32)
    assert compare_outputs({"y": z}, {"y": z})["y"]["rel_l2"] == 0.0
    m = compare_outputs({"y": z}, {"y": z + 1})["y"]
    assert m["rel_l2"] == math.inf and m["cosine"] == 0.0


def test_top1_only_for_class_score_shapes():
    assert looks_like_class_scores((1, 10)) and looks_like_class_scores((1, 40, 6625))
    assert not looks_like_class_scores((1, 1, 96, 96))  # a detection map: last axis is a width
    assert not looks_like_class_scores((10,)) and not looks_like_class_scores((4, 1))
    r = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    c = np.array([[0.2, 0.8], [0.4, 0.6], [0.3, 0.7], [0.7, 0.3]])
    assert compare_outputs({"p": r}, {"p": c})["p"]["top1_agreement"] == 0.75
    det = np.ones((1, 1, 8, 8))
    assert compare_outputs({"m": det}, {"m": det})["m"]["top1_agreement"] is None


def test_nan_and_inf_are_counted_and_always_breach():
    r = np.ones((1, 4), np.float32)
    c = np.array([[1.0, np.nan, np.inf, 1.0]], np.float32)
    m = compare_outputs({"y": r}, {"y": c})["y"]
    assert m["nan_count"] == 1 and m["inf_count"] == 1
    assert m["max_abs"] == 0.0  # the finite elements agree
    passed, breaches = evaluate({"y": m}, "fp16", {"fp16": {}})  # even with no limits at all
    assert not passed and {b["metric"] for b in breaches} == {"nan_count", "inf_count"}
    passed, _ = evaluate({"y": m}, "fp32")
    assert not passed


def test_missing_output_and_shape_mismatch_breach():
    r = {"a": np.ones((1, 3)), "b": np.ones((1, 3))}
    res = compare_outputs(r, {"a": np.ones((1, 4))})
    assert "shape" in res["a"]["error"] and "missing" in res["b"]["error"]
    passed, breaches = evaluate(res, "fp16")
    assert not passed and len(breaches) == 2


def test_compare_batches_pools_elements():
    rng = np.random.default_rng(1)
    refs = [{"y": rng.normal(size=(1, 5))} for _ in range(3)]
    cands = [{"y": r["y"] + 0.01 * (i + 1)} for i, r in enumerate(refs)]
    pooled = compare_batches(refs, cands)["y"]
    one = compare_outputs({"y": np.concatenate([r["y"] for r in refs])},
                          {"y": np.concatenate([c["y"] for c in cands])})["y"]
    assert pooled["batches"] == 3
    for k in ("max_abs", "mean_abs", "rel_l2", "cosine", "p99_abs", "median_rel"):
        assert pooled[k] == pytest.approx(one[k])
    assert pooled["max_abs"] == pytest.approx(0.03)
    with pytest.raises(ValueError):
        compare_batches(refs, cands[:2])


def test_evaluate_against_defaults_and_overrides():
    good = {"y": {"cosine": 0.9999, "rel_l2": 0.002, "top1_agreement": 1.0, "nan_count": 0, "inf_count": 0}}
    assert evaluate(good, "fp16") == (True, [])
    bad = {"y": {"cosine": 0.995, "rel_l2": 0.05, "top1_agreement": 0.95, "nan_count": 0, "inf_count": 0}}
    passed, breaches = evaluate(bad, "fp16")
    assert not passed and {b["metric"] for b in breaches} == {"cosine", "rel_l2", "top1_agreement"}
    assert evaluate(bad, "int8")[0]  # within int8's looser limits
    strict = merge_thresholds(parse_threshold_args(["int8.cosine_min=0.999"]))
    assert strict["int8"]["cosine_min"] == 0.999 and strict["fp16"] == DEFAULT_THRESHOLDS["fp16"]
    assert not evaluate(bad, "int8", strict)[0]
    assert evaluate(bad, "int8", {"cosine_min": 0.99})[0]  # limits of one precision directly
    for text in ["fp16.cosine=0.9", "cosine_min=0.9", "fp16.speed_min=1", "fp16.cosine_min=abc"]:
        with pytest.raises(UsageError):
            parse_threshold_args([text])


def test_default_thresholds_are_ordered():
    fp16, int8 = DEFAULT_THRESHOLDS["fp16"], DEFAULT_THRESHOLDS["int8"]
    assert fp16["cosine_min"] > int8["cosine_min"] and fp16["rel_l2_max"] < int8["rel_l2_max"]


def test_accuracy_findings_carry_metrics_limits_and_advice():
    metrics = {"probs": {"cosine": 0.95, "rel_l2": 0.3, "top1_agreement": 0.8, "max_abs": 0.4,
                         "nan_count": 0, "inf_count": 0},
               "aux": {"cosine": 1.0, "rel_l2": 0.0, "top1_agreement": None, "nan_count": 0, "inf_count": 0}}
    findings = accuracy_findings("int8-wsdefault-s1", "int8", metrics)
    assert len(findings) == 1
    f = findings[0]
    assert f.rule == "precision_regression" and f.variant == "int8-wsdefault-s1" and f.severity == "high"
    assert f.evidence["output"] == "probs" and f.evidence["cosine"] == 0.95
    assert set(f.evidence["breaches"]) == {"cosine", "rel_l2", "top1_agreement"}
    assert f.threshold == DEFAULT_THRESHOLDS["int8"]
    assert "--calib-method" in f.recommendation and "float32" in f.recommendation
    assert "cosine 0.95 < 0.99" in f.title
    d = f.to_dict()
    assert d["evidence"]["rel_l2"] == 0.3
    # random calibration: still reported, but as information that the numbers mean nothing
    f2 = accuracy_findings("int8-wsdefault-s1", "int8", metrics, calibration={"meaningless": True})[0]
    assert f2.severity == "info" and "random inputs" in f2.recommendation
    # fp16 advice is about keeping layers in fp32; a mild miss is medium
    mild = {"y": {"cosine": 0.9985, "rel_l2": 0.005, "top1_agreement": 1.0, "nan_count": 0, "inf_count": 0}}
    f3 = accuracy_findings("fp16-wsdefault-s1", "fp16", mild)[0]
    assert f3.severity == "medium" and "block list" in f3.recommendation
    assert accuracy_findings("fp16-wsdefault-s1", "fp16", {"y": {"cosine": 1.0, "rel_l2": 0.0}}) == []


def test_nan_output_finding_is_high_even_for_fp32_limits():
    m = compare_outputs({"y": np.ones((1, 3))}, {"y": np.array([[1.0, np.nan, 1.0]])})
    f = accuracy_findings("fp16-ws1G-s1", "fp16", m)
    assert len(f) == 1 and f[0].severity == "high" and "NaN" in f[0].title


def test_error_statistics_and_histogram_match_hand_computation():
    r = np.array([1.0, 2.0, 4.0, 8.0, 0.0], np.float64)
    c = r + np.array([0.0, 0.02, -0.04, 0.8, 1e-9])
    m = compare_outputs({"y": r}, {"y": c})["y"]
    diff = np.array([0.0, 0.02, 0.04, 0.8, 1e-9])
    assert m["max_abs"] == pytest.approx(0.8) and m["median_abs"] == pytest.approx(0.02)
    assert m["p90_abs"] == pytest.approx(np.percentile(diff, 90))
    assert m["max_rel"] > 1e3  # 1e-9 against a reference of exactly 0: relative error explodes, as it should
    assert m["median_rel"] == pytest.approx(0.01)  # 0.02/2, 0.04/4 and 0.8/8 are 0.01, 0.01 and 0.1
    h = m["abs_error_histogram"]
    assert sum(h["counts"]) == 5 and h["counts"][0] == 2  # 0 and 1e-9 in [0, 1e-8)
    assert h["counts"][h["edges"].index(1e-2)] == 2  # 0.02 and 0.04 in [1e-2, 1e-1)


def test_elementwise_check_uses_atol_plus_rtol_times_reference():
    r = np.array([100.0, 1.0, 0.001, 0.0])
    c = r + np.array([0.9, 0.02, 0.0005, 0.0011])
    m = compare_outputs({"b": r}, {"b": c}, tolerances={"b": {"atol": 1e-3, "rtol": 1e-2}})["b"]
    # allowed: 1.001, 0.011, 0.00100001, 0.001 -> the second and the last fail
    assert m["elementwise_failures"] == 2 and m["elementwise_fail_frac"] == 0.5
    passed, breaches = evaluate({"b": m}, "fp16")
    assert not passed and [b["metric"] for b in breaches] == ["elementwise_fail_frac"]


def test_output_kinds_detected_from_values_and_declared():
    from profiler.accuracy import detect_kind, parse_output_options

    probs = np.random.default_rng(0).dirichlet(np.ones(5), size=3)
    assert detect_kind(probs)[0] == "classes"
    boxes = np.random.default_rng(0).uniform(0, 640, (1, 84, 8400)).astype(np.float32)  # YOLOv8-style head
    kind, why = detect_kind(boxes)
    assert kind == "regression" and "not probability" in why
    assert detect_kind(np.array([[3, 1, 2]], np.int64))[0] == "integer"
    # a detector whose anchors near-tie: top-1 along the anchor axis would flip, elementwise does not
    near = boxes.copy()
    near[0, :, :2] = 500.0
    flipped = near.copy()
    flipped[0, :, 0] += 0.01
    m = compare_outputs({"out": near}, {"out": flipped}, tolerances={"out": {"atol": 1e-3, "rtol": 1e-2}})["out"]
    assert m["top1_agreement"] is None and m["elementwise_fail_frac"] == 0.0 and evaluate({"out": m}, "fp16")[0]
    assert parse_output_options(["output0:boxes", "a:b:logits"], ["output0:atol=0.5,rtol=0"]) == (
        {"output0": "boxes", "a:b": "logits"}, {"output0": {"atol": 0.5, "rtol": 0.0}})
    for bad in (["x:scores"], ["nokind"]):
        with pytest.raises(UsageError):
            parse_output_options(bad, [])
    with pytest.raises(UsageError):
        parse_output_options([], ["x:atol"])


def test_integer_outputs_are_compared_exactly_and_reference_nans_are_not_blamed():
    ids = np.array([[5, 7, 7, 1]], np.int64)
    m = compare_outputs({"argmax": ids}, {"argmax": np.array([[5, 7, 2, 1]], np.int64)})["argmax"]
    assert m["kind"] == "integer" and m["exact_match"] == 0.75 and m["mismatches"] == 1
    passed, breaches = evaluate({"argmax": m}, "fp16")
    assert not passed and breaches[0]["metric"] == "exact_match"
    r = np.array([1.0, np.nan, 3.0])
    m = compare_outputs({"y": r}, {"y": np.array([1.0, np.nan, 3.0])})["y"]
    assert m["nan_count"] == 0 and m["reference_nonfinite"] == 1 and evaluate({"y": m}, "fp16")[0]
    m = compare_outputs({"y": r}, {"y": np.array([np.nan, np.nan, 3.0])})["y"]
    assert m["nan_count"] == 1  # only the NaN the reference does not have


def test_a_failed_variant_fails_the_sweep_but_a_skip_does_not(tmp_path):
    """An fp16 variant the converter cannot make (the model is float16 already) fails the gate with the
    variant named; a combination the backend cannot run (a CUDA graph on the CPU provider) is a skip."""
    import json
    import subprocess
    import sys

    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.eye(4, dtype=np.float16), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "half",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "half.onnx"))
    common = [sys.executable, "-m", "profiler", "sweep", str(tmp_path / "half.onnx"), "--no-store", "--no-layers",
              "--duration", "0", "--warmup", "0", "--iterations", "3", "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(common + ["--precision", "fp32,fp16", "--out", str(tmp_path / "a")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "1 variant(s) failed (fp16-wsdefault-s1)" in r.stderr, r.stderr
    found = json.loads((tmp_path / "a" / "summary.json").read_text())["findings"]
    failed = [f for f in found if f["rule"] == "variant_failed"]
    assert [(f["variant"], f["severity"]) for f in failed] == [("fp16-wsdefault-s1", "high")]
    r = subprocess.run(common + ["--precision", "fp32", "--cuda-graph", "off,on", "--out", str(tmp_path / "b")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert [v["status"] for v in summary["variants"]] == ["ok", "skipped"]


def test_default_tolerances_are_reported_user_tolerances_gate():
    from profiler.accuracy import tolerances_for

    r = np.linspace(5.0, 20.0, 1000)
    c = r + 0.12  # beyond atol 1e-2 + rtol 1e-2 * |r| below r = 11, yet rel L2 0.009 and cosine ~1
    default = tolerances_for("fp16", None, ["y"])
    assert default["y"] == {"atol": 1e-2, "rtol": 1e-2, "source": "default"}
    m = compare_outputs({"y": r}, {"y": c}, tolerances=default)["y"]
    assert m["elementwise_fail_frac"] == pytest.approx(0.4, abs=0.01) and m["tolerance_source"] == "default"
    assert evaluate({"y": m}, "fp16")[0]  # reported, not gated: rel L2 and cosine are fine
    given = tolerances_for("fp16", None, ["y"], {"y": {"atol": 1e-3}})
    assert given["y"]["source"] == "user" and given["y"]["atol"] == 1e-3
    m = compare_outputs({"y": r}, {"y": c}, tolerances=given)["y"]
    passed, breaches = evaluate({"y": m}, "fp16")
    assert not passed and breaches[0]["metric"] == "elementwise_fail_frac"  # Polygraphy: every element
    assert tolerances_for("fp16", None, ["y"], None, {"fp16": {"rtol": 0.1}})["y"]["source"] == "user"
