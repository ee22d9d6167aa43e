"""Small ONNX models built by the tests (IR version 8: readable by the ONNX Runtime on the H200 too), and
the fast sweep settings they run with. Test modules import these from here, never from one another.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Sweep settings for tests: a dozen queries, no minimum duration, no warm-up.
FAST_SWEEP = dict(iterations=12, duration_s=0.0, warmup_ms=0.0, layer_iterations=2)


def conv_model(path, *, dynamic: bool = False, opset: int = 17) -> str:
    """A small conv net (Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax)."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    fc = rng.normal(0, 0.3, (8, 5)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], name="fc"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    dims = ["N", 3, "H", "W"] if dynamic else [1, 3, 16, 16]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N" if dynamic else 1, 5])],
                              [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
                               helper.make_tensor("fc", TensorProto.FLOAT, fc.shape, fc.ravel())])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def overflow_model(path):
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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by older ONNX Runtimes too
    onnx.save(model, str(path))
    return path
