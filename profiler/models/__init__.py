"""Models: inspect an ONNX model, resolve its input shapes, make its input data.

    info = inspect_model("model.onnx")                  # inputs/outputs, opset, ops, sha256
    shapes = resolve_shapes(info, parse_shape_args(["x:1x3x224x224"]))
    batches = make_inputs(info, shapes, source=None, seed=0, count=4)
"""

from profiler.models.default import default_model_path
from profiler.models.inputs import (
    load_samples,
    make_inputs,
    random_samples,
    samples_hash,
    split_holdout,
)
from profiler.models.inspect import ModelInfo, file_sha256, inspect_model, is_static, load_model_proto
from profiler.models.shapes import format_shape, parse_shape_args, resolve_shapes

__all__ = [
    "ModelInfo", "default_model_path", "file_sha256", "format_shape", "inspect_model", "is_static",
    "load_model_proto", "load_samples", "make_inputs", "parse_shape_args", "random_samples",
    "resolve_shapes", "samples_hash", "split_holdout",
]
