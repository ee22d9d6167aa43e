"""Precision localisation: the error curve finds the node where FP16 loses precision, and keeping it
in FP32 buys the accuracy back."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from profiler.compare.precision import localize, verify
from profiler.variants.fp16 import convert_fp16


def _overflow_model(path):
    """y = sqrt((1000 x)^2) / 1000 + x: exact in fp32, but (1000 x)^2 exceeds float16's range (65504)
    for x > 0.256, so the Mul named 'square' is where precision is lost (its input is fine, its output
    is inf), and everything after it inherits the damage."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
        helper.make_node("Mul", ["r", "k_up"], ["s"], name="scale_up"),
        helper.make_node("Mul", ["s", "s"], ["q"], name="square"),
        helper.make_node("Sqrt", ["q"], ["t"], name="root"),
        helper.make_node("Mul", ["t", "k_down"], ["u"], name="scale_down"),
        helper.make_node("Add", ["u", "r"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
                              [c("k_up", 1000.0), c("k_down", 1e-3)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_localize_finds_the_node_that_loses_precision(tmp_path):
    ref = _overflow_model(tmp_path / "m.onnx")
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


def test_verify_keeping_the_node_in_fp32_restores_accuracy(tmp_path):
    ref = _overflow_model(tmp_path / "m.onnx")
    feeds = [{"x": np.random.default_rng(1).uniform(0.5, 2.0, (4, 64)).astype(np.float32)}]
    res = verify(ref, "fp16", ["square", "root"], feeds, work_dir=tmp_path / "v", latency_runs=3)
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
