"""Op factories: QuantizeLinear and DequantizeLinear (the plan is :mod:`.quant`'s; see ops_math for the
factory contract).

Both run as the ONNX graph says, one kernel sequence per node: QuantizeLinear writes a real int8/uint8
tensor (rounded half to even, saturated), DequantizeLinear turns it back into float. The Conv, MatMul
and Gemm between them run in floating point on the dequantized values (fake quantization): a TensorRT
INT8 engine fuses the same Q/DQ pairs into integer kernels with int32 accumulation. Weights quantized by
a constant Q/DQ pair are folded at build time into their dequantized float32 values."""

from __future__ import annotations

from typing import Any

from profiler.backends.cuda_ref._torch import bind
from profiler.backends.cuda_ref.nodes import Node, onnx_dtype, op
from profiler.backends.cuda_ref.quant import check_scale, qdq_plan

torch: Any = None  # bound to PyTorch by _torch.load_torch()
F: Any = None
bind(globals())


def onnx_code(dtype: Any) -> int:
    """The ONNX TensorProto code of a torch dtype (0 when it has none here)."""
    table = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6, torch.int64: 7,
             torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}
    return table.get(dtype, 0)


def _plan(n: Node) -> Any:
    x, scale = n.values[0], n.values[1]
    zp = n.values[2] if n.has(2) else None
    if n.consts[1]:
        check_scale(n.op, n.name, scale.detach().float().cpu().reshape(-1).tolist())
    return qdq_plan(n.op, n.name, n.opset, n.attrs, tuple(x.shape), onnx_code(x.dtype), tuple(scale.shape),
                    None if zp is None else tuple(zp.shape), None if zp is None else onnx_code(zp.dtype))


def _shaped(value: Any, shape: tuple[int, ...]) -> Any:
    """A scale or zero point reshaped to broadcast against the input (a view; per-tensor: one element)."""
    return value.reshape(shape) if shape else value.reshape(())


def _params(n: Node, shape: tuple[int, ...], scale_dtype: Any) -> tuple[Any, Any] | None:
    """(scale, float32 zero point or None) on the device, ready to broadcast, when both are constant
    (every quantizer's graph): the step then reads only its input. None when either is computed."""
    if not all(n.consts[i] for i in range(1, min(len(n.values), 3)) if n.has(i)):
        return None
    s = _shaped(n.values[1], shape).to(n.device, scale_dtype)
    z = _shaped(n.values[2], shape).to(n.device, torch.float32) if n.has(2) else None
    return s, z


@op("QuantizeLinear")
def _quantize(n: Node) -> Any:
    plan = _plan(n)
    shape, qmin, qmax = plan.broadcast_shape(), float(plan.qmin), float(plan.qmax)
    out = getattr(torch, plan.int_type)
    x_dt, s_dt = n.values[0].dtype, n.values[1].dtype
    div_dt = x_dt if x_dt == s_dt else torch.float32  # mixed float types divide in float32, as ONNX's reference
    params = _params(n, shape, div_dt)
    if params is not None:
        s, z = params
        if z is None:
            return (lambda x: torch.clamp(torch.round(x.to(div_dt) / s), qmin, qmax).to(out)), [0]
        return (lambda x: torch.clamp(torch.round(x.to(div_dt) / s) + z, qmin, qmax).to(out)), [0]

    def quantize(x: Any, s: Any, z: Any = None) -> Any:
        y = torch.round(x.to(div_dt) / _shaped(s, shape).to(div_dt))
        if z is not None:
            y = y + _shaped(z, shape).to(torch.float32)
        return torch.clamp(y, qmin, qmax).to(out)
    return quantize, ([0, 1, 2] if n.has(2) else [0, 1])


@op("DequantizeLinear")
def _dequantize(n: Node) -> Any:
    plan = _plan(n)
    shape = plan.broadcast_shape()
    code = n.attrs.get("output_dtype") or None
    out = onnx_dtype(int(code)) if code else n.values[1].dtype
    f32 = torch.float32
    params = _params(n, shape, n.values[1].dtype)
    if params is not None:
        s, z = params
        if z is None:
            return (lambda x: (x.to(f32) * s).to(out)), [0]
        return (lambda x: ((x.to(f32) - z) * s).to(out)), [0]

    def dequantize(x: Any, s: Any, z: Any = None) -> Any:
        y = x.to(f32)
        if z is not None:
            y = y - _shaped(z, shape).to(f32)
        return (y * _shaped(s, shape)).to(out)
    return dequantize, ([0, 1, 2] if n.has(2) else [0, 1])
