"""What an op factory sees of one ONNX node, the op registry, and the ONNX-to-torch dtype helpers."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from profiler.backends.base import BuildError
from profiler.backends.cuda_ref._torch import bind, load_torch

torch: Any = None  # bound to PyTorch by _torch.load_torch()
F: Any = None
bind(globals())


# -- ONNX helpers ------------------------------------------------------------------------------------
def onnx_dtype(code: int) -> Any:
    """The torch dtype of an ONNX TensorProto data type code."""
    t = load_torch()
    table = {1: t.float32, 2: t.uint8, 3: t.int8, 5: t.int16, 6: t.int32, 7: t.int64, 9: t.bool,
             10: t.float16, 11: t.float64, 16: t.bfloat16}
    if code not in table:
        raise BuildError(f"the cuda backend does not support ONNX tensor type {code}")
    return table[code]


NP_NAMES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
            "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "int16": np.int16}


def np_dtype_name(dtype: Any) -> str:
    """torch.float32 -> 'float32' (the numpy name TensorInfo carries)."""
    return str(dtype).replace("torch.", "")


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def tensor_from_proto(proto: Any) -> Any:
    """An ONNX TensorProto as a CPU torch tensor (a copy)."""
    from onnx import numpy_helper

    arr = numpy_helper.to_array(proto)
    return torch.from_numpy(np.array(arr, copy=True))


class Node:
    """What an op factory sees: attributes, input values of the build-time run, constness."""

    def __init__(self, node: Any, index: int, values: list[Any], consts: list[bool], opset: int,
                 device: Any):
        self.proto, self.index, self.values, self.consts = node, index, values, consts
        self.op, self.opset, self.device = node.op_type, opset, device
        self.name = node.name or f"{node.op_type}_{index}"
        self.attrs = _attrs(node)

    def has(self, i: int) -> bool:
        return i < len(self.values) and self.values[i] is not None

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.values[i].shape)

    def const(self, i: int, what: str = "") -> Any:
        """The value of input ``i`` on the CPU; it must be constant once input shapes are fixed."""
        if not self.has(i):
            raise BuildError(f"node {self.name!r} ({self.op}) lacks input {i}")
        if not self.consts[i]:
            label = what or (self.proto.input[i] if i < len(self.proto.input) else str(i))
            raise BuildError(f"node {self.name!r} ({self.op}): input {label!r} is computed at run time, but "
                             "the cuda backend needs it constant once the input shapes are fixed")
        return self.values[i].detach().cpu()

    def ints(self, i: int, what: str = "") -> list[int]:
        return [int(v) for v in self.const(i, what).reshape(-1).tolist()]

    def floats(self, i: int) -> list[float]:
        return [float(v) for v in self.const(i).reshape(-1).tolist()]

    def scalar(self, i: int) -> float | None:
        """A Python number when input ``i`` is a one-element float constant, else None."""
        if self.has(i) and self.consts[i] and self.values[i].numel() == 1 and self.values[i].is_floating_point():
            return float(self.values[i].reshape(-1)[0].item())
        return None

    def unsupported(self, why: str) -> BuildError:
        return BuildError(f"node {self.name!r} ({self.op}): {why} is not supported by the cuda backend")


Factory = Callable[[Node], Any]  # returns fn or (fn, used_input_indices)
OPS: dict[str, Factory] = {}


def op(*names: str) -> Callable[[Factory], Factory]:
    """Register the decorated factory for the ONNX op types ``names``."""
    def deco(f: Factory) -> Factory:
        for n in names:
            OPS[n] = f
        return f
    return deco
