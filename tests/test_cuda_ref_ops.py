"""The reference executor's op set, checked without PyTorch (importing the package does not import it).

The op set is frozen: adding or removing an op is a decision this test makes visible. The real models the
project measures on must compile with it, op for op."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from profiler.backends.cuda_ref import OPS
from profiler.backends.cuda_ref.ops_shape import SHAPE_OPS

FROZEN_OPS = {
    "Abs", "Add", "And", "ArgMax", "ArgMin", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip", "Concat",
    "Conv", "ConvTranspose", "Cos", "DepthToSpace", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand",
    "Flatten", "Floor", "Gather", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
    "HardSigmoid", "HardSwish", "Identity", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "LogSoftmax", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Not", "Or", "PRelu",
    "Pad", "Pow", "QuantizeLinear", "DequantizeLinear", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare", "Relu", "Reshape", "Resize", "Round", "Sigmoid", "Sign", "Sin", "Slice", "Softmax", "Softplus",
    "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Tile", "Transpose", "Unsqueeze", "Upsample", "Where", "Xor",
}


def test_the_op_set_is_frozen():
    assert set(OPS) == FROZEN_OPS and len(OPS) == 85
    assert not SHAPE_OPS & set(OPS)  # shape-only ops are folded at build time, never a step


def _model_files() -> list[Path]:
    from profiler.models import default_model_path

    files = [Path(default_model_path())]
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is not None and spec.origin:
        files += sorted((Path(spec.origin).parent / "models").glob("*.onnx"))
    return files


@pytest.mark.parametrize("path", _model_files(), ids=lambda p: p.name)
def test_every_op_of_the_real_models_is_supported(path):
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(path), load_external_data=False)
    used = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    assert len(used) >= 3
    assert used - set(OPS) - SHAPE_OPS == set()
