"""QuantizeLinear / DequantizeLinear as the reference executor runs them: what is decided at build time.

Everything here is plain Python (no PyTorch): which element type a node quantizes to, its range, whether
it is per-tensor or per-axis and along which (normalised) axis, and what is refused with a reason. The
kernels (:mod:`.ops_quant`) only apply the plan.

Semantics, ONNX opsets 10-21 (and later ones where only types this executor refuses were added):

* ``QuantizeLinear``: ``y = saturate(round_half_even(x / scale) + zero_point)``, the division in the
  input's float type, saturation to the target integer range (int8 [-128, 127], uint8 [0, 255], int16);
* ``DequantizeLinear``: ``y = (float32(x) - float32(zero_point)) * scale``, in the scale's float type;
  int32 inputs (the quantizer's biases) have no zero point but a scale;
* a scale of one element is per-tensor; a 1-D scale of ``x.shape[axis]`` elements is per-axis (opset 13+,
  ``axis`` default 1, negative counts from the end); the zero point, when given, has the scale's shape
  and sets the quantized type (uint8 when absent, or ``output_dtype``, opset 21).

Refused, each with one sentence: a scale that is infinite, NaN or zero (the quantizer writes ``inf``
when a calibrated range overflows float32, e.g. a transformer's attention mask of -3.4e38: ONNX leaves
integer quantization of inf and NaN undefined, so every result downstream would be an implementation's
accident; a TensorRT builder refuses such scales too), block quantization (``block_size``, a scale of rank > 1), 4-bit, float8
and float4 types (and ``saturate``, which only they read), ``precision`` (opset 23), a per-axis scale
below opset 13, a zero point whose shape or type disagrees, a non-float input to QuantizeLinear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from profiler.backends.base import BuildError

#: ONNX TensorProto codes this executor quantizes to / dequantizes from, with their integer ranges
INT_RANGES: dict[int, tuple[str, int, int]] = {
    2: ("uint8", 0, 255), 3: ("int8", -128, 127), 5: ("int16", -32768, 32767),
}
#: DequantizeLinear also reads int32 (the quantizer's biases: zero point 0)
DQ_INPUT_TYPES: dict[int, tuple[str, int, int]] = {**INT_RANGES, 6: ("int32", -(2 ** 31), 2 ** 31 - 1)}
FLOAT_TYPES = {1: "float32", 10: "float16", 16: "bfloat16"}
#: types ONNX allows in Q/DQ that are refused here, named in the refusal
REFUSED_TYPES = {4: "uint16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
                 21: "uint4", 22: "int4", 23: "float4e2m1"}
#: the first opset with a per-axis scale (``axis``)
PER_AXIS_OPSET = 13


@dataclass(frozen=True)
class QdqPlan:
    """One Q/DQ node, decided: its integer type and range, per-tensor (``axis`` None) or per-axis."""

    op: str
    int_type: str
    qmin: int
    qmax: int
    axis: int | None
    channels: int
    has_zero_point: bool
    rank: int

    def broadcast_shape(self) -> tuple[int, ...]:
        """The shape the scale and zero point take to broadcast against the input."""
        if self.axis is None:
            return ()
        dims = [1] * self.rank
        dims[self.axis] = self.channels
        return tuple(dims)


def _type_name(code: int) -> str:
    if code in DQ_INPUT_TYPES:
        return DQ_INPUT_TYPES[code][0]
    return FLOAT_TYPES.get(code) or REFUSED_TYPES.get(code) or f"ONNX type {code}"


def refuse(op: str, node: str, why: str) -> BuildError:
    return BuildError(f"node {node!r} ({op}): {why} is not supported by the cuda backend")


def _refuse_attributes(op: str, node: str, attrs: dict[str, Any]) -> None:
    block = int(attrs.get("block_size", 0) or 0)
    if block:
        raise refuse(op, node, f"block quantization (block_size={block})")
    if attrs.get("precision"):
        raise refuse(op, node, f"an explicit precision for the division (precision={attrs['precision']})")


def _int_type(op: str, node: str, attrs: dict[str, Any], x_type: int, zp_type: int | None) -> tuple[str, int, int]:
    if op == "QuantizeLinear":
        if x_type not in FLOAT_TYPES:
            raise refuse(op, node, f"quantizing a {_type_name(x_type)} input (only float inputs)")
        out = attrs.get("output_dtype") or None
        if out and zp_type is not None and int(out) != zp_type:
            raise BuildError(f"node {node!r} (QuantizeLinear): output_dtype {_type_name(int(out))} disagrees "
                             f"with the zero point's type {_type_name(zp_type)}")
        code = zp_type if zp_type is not None else int(out or 2)
        table = INT_RANGES
    else:
        code = x_type
        if zp_type is not None and zp_type != x_type:
            raise BuildError(f"node {node!r} (DequantizeLinear): the zero point is {_type_name(zp_type)} but the "
                             f"input is {_type_name(x_type)}")
        table = DQ_INPUT_TYPES
    if code not in table:
        raise refuse(op, node, f"the quantized type {_type_name(code)}")
    return table[code]


def _axis(op: str, node: str, opset: int, attrs: dict[str, Any], x_shape: tuple[int, ...],
          scale_shape: tuple[int, ...]) -> tuple[int | None, int]:
    """(normalised axis or None for per-tensor, channel count)."""
    size = 1
    for d in scale_shape:
        size *= int(d)
    if len(scale_shape) > 1:
        raise refuse(op, node, f"a scale of shape {list(scale_shape)} (block quantization)")
    if size == 1:
        return None, 1
    if opset < PER_AXIS_OPSET:
        raise refuse(op, node, f"a per-axis scale ({size} values) at opset {opset} (per-axis needs opset "
                     f"{PER_AXIS_OPSET})")
    rank = len(x_shape)
    axis = int(attrs.get("axis", 1))
    if not -rank <= axis < rank:
        raise BuildError(f"node {node!r} ({op}): axis {axis} is out of range for an input of rank {rank}")
    axis %= rank
    if int(x_shape[axis]) != size:
        raise BuildError(f"node {node!r} ({op}): the scale has {size} values but the input has {x_shape[axis]} "
                         f"along axis {axis}")
    return axis, size


def qdq_plan(op: str, node: str, opset: int, attrs: dict[str, Any], x_shape: tuple[int, ...], x_type: int,
             scale_shape: tuple[int, ...], zp_shape: tuple[int, ...] | None, zp_type: int | None) -> QdqPlan:
    """The build-time decisions for one QuantizeLinear/DequantizeLinear node, or a BuildError saying why not.

    Types are ONNX TensorProto codes; ``zp_shape``/``zp_type`` are None when the zero point is absent."""
    _refuse_attributes(op, node, attrs)
    name, qmin, qmax = _int_type(op, node, attrs, x_type, zp_type)
    axis, channels = _axis(op, node, opset, attrs, tuple(x_shape), tuple(scale_shape))
    if zp_shape is not None and tuple(zp_shape) != tuple(scale_shape):
        zp_size = 1
        for d in zp_shape:
            zp_size *= int(d)
        if not (zp_size == 1 and channels == 1):
            raise BuildError(f"node {node!r} ({op}): the zero point's shape {list(zp_shape)} differs from the "
                             f"scale's {list(scale_shape)}")
    return QdqPlan(op, name, qmin, qmax, axis, channels, zp_shape is not None, len(x_shape))


def check_scale(op: str, node: str, values: Sequence[float]) -> None:
    """A BuildError naming the node when a constant scale holds inf, NaN or 0."""
    bad = [v for v in values if not math.isfinite(v) or v == 0.0]
    if bad:
        raise BuildError(f"node {node!r} ({op}): its scale is {bad[0]!r}; quantizing with a scale that is not "
                         "finite and non-zero is undefined (a calibrated range that overflowed float32, such as an "
                         "attention mask's): the tensor it quantizes has to stay in float")
