"""Precision localization: the error curve finds the node where FP16 loses precision, and keeping it
in FP32 buys the accuracy back."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.compare.precision import localize, verify
from profiler.variants.fp16 import convert_fp16
from tests.onnx_models import overflow_model


def test_localize_finds_the_node_that_loses_precision(tmp_path):
    ref = overflow_model(tmp_path / "m.onnx")
    fp16 = tmp_path / "m16.onnx"
    convert_fp16(ref, fp16)
    feeds = [{"x": np.random.default_rng(0).uniform(0.5, 2.0, (4, 64)).astype(np.float32)}]
    out = localize(ref, fp16, feeds)
    nodes = [c["node"] for c in out["curve"]]
    assert nodes == ["relu_in", "scale_up", "square", "root", "scale_down", "residual"]
    first = out["first_jumps"][0]
    assert first["node"] == "square"
    assert first["input_rel_l2"] < 1e-3 and first["rel_l2"] == float("inf")
    assert [c["node"] for c in out["curve"] if c["rel_l2"] < 1e-3] == ["relu_in", "scale_up"]
    assert out["final_rel_l2"] == float("inf")


def test_localize_says_each_step_and_node_k_of_n_once_a_second(tmp_path):
    ref = overflow_model(tmp_path / "m.onnx")
    fp16 = tmp_path / "m16.onnx"
    convert_fp16(ref, fp16)
    feeds = [{"x": np.random.default_rng(0).uniform(0.5, 2.0, (4, 64)).astype(np.float32)}]
    ticks = iter(np.arange(0.0, 100.0, 0.6))  # each clock read 0.6 s later: a node line every other node
    said = []
    out = localize(ref, fp16, feeds, progress=said.append, clock=lambda: float(next(ticks)))
    assert said[0] == "running the fp32 model with all 6 node outputs exposed (1 input(s))"
    assert said[1] == "running the variant the same way"
    nodes = [m for m in said[2:]]
    assert nodes and all(m.startswith("comparing node ") and m.endswith(" of 6") for m in nodes)
    ks = [int(m.split()[2]) for m in nodes]
    assert ks == sorted(ks) and len(ks) < 6  # throttled, in order
    by_node = {c["node"]: c["consumers"] for c in out["curve"]}
    assert by_node["scale_up"] == ["square"]  # square reads s twice: one consumer
    assert by_node["relu_in"] == ["scale_up", "residual"] and by_node["residual"] == []


def test_verify_keeping_the_node_in_fp32_restores_accuracy(tmp_path):
    ref = overflow_model(tmp_path / "m.onnx")
    feeds = [{"x": np.random.default_rng(1).uniform(0.5, 2.0, (4, 64)).astype(np.float32)}]
    res = verify(ref, "fp16", ["square", "root"], feeds, work_dir=tmp_path / "v", latency_rounds=2)
    plain = res["variants"]["fp16"]["accuracy"]["y"]["rel_l2"]
    kept = res["variants"]["fp16+kept"]["accuracy"]["y"]["rel_l2"]
    assert plain == float("inf") or res["variants"]["fp16"]["accuracy"]["y"]["inf_count"] > 0
    assert kept < 1e-2
    assert all(v["latency_ms"] > 0 for v in res["variants"].values())


def test_localize_on_a_real_model_is_quiet_where_fp16_is_fine(cls_model, tmp_path):
    fp16 = tmp_path / "cls16.onnx"
    convert_fp16(cls_model, fp16)
    feeds = [{"x": np.random.default_rng(2).uniform(-1, 1, (2, 3, 48, 192)).astype(np.float32)}]
    out = localize(cls_model, fp16, feeds)
    assert out["nodes_compared"] > 200  # every Conv/BN/activation of the real network
    assert out["final_rel_l2"] < 5e-3
    assert max(c["rel_l2"] for c in out["curve"]) < 5e-2


def test_int8_on_a_real_model_error_curve_and_verification(cls_model, tmp_path):
    """Real pretrained classifier, Q/DQ INT8 (minmax calibration on 4 samples): the error grows through
    the network; keeping the first jump in FP32 is measured, and the conclusion follows the numbers."""
    from profiler.compare.precision import keep_candidates
    from profiler.variants.int8 import quantize_int8

    rng = np.random.default_rng(3)
    calib = [{"x": rng.uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)} for _ in range(4)]
    feeds = [{"x": rng.uniform(-1, 1, (2, 3, 48, 192)).astype(np.float32)}]
    q = tmp_path / "cls8.onnx"
    quantize_int8(cls_model, q, calib, method="minmax", keep_fp32=[], work_dir=tmp_path, progress=None)
    out = localize(cls_model, q, feeds)
    curve = out["curve"]
    assert out["nodes_compared"] > 100
    assert 1e-3 < out["final_rel_l2"] < 1.0  # measurable, not broken
    assert curve[-1]["rel_l2"] > curve[0]["rel_l2"]  # error accumulates
    # BatchNormalization folded into its Conv by the quantizer: attributed to the variant's Conv
    assert any(c["op"] == "BatchNormalization" and c["variant_node"] and c["variant_node"] != c["node"]
               for c in curve)
    keep = keep_candidates(out)
    assert keep
    res = verify(cls_model, "int8", keep, feeds, variant_model=q, work_dir=tmp_path / "v", calib_samples=calib,
                 calib_method="minmax", latency_rounds=2)
    plain = res["variants"]["int8"]["accuracy"]["save_infer_model/scale_0.tmp_1"]["rel_l2"]
    kept = res["variants"]["int8+kept"]["accuracy"]["save_infer_model/scale_0.tmp_1"]["rel_l2"]
    share = res["conclusion"]["error_removed"]
    assert share == pytest.approx(max(0.0, 1 - kept / plain))
    assert res["conclusion"]["localized"] == (share >= 0.5)
