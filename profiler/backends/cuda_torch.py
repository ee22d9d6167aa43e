"""The ``cuda`` backend: ONNX models on a CUDA GPU through PyTorch's kernels, without TensorRT.

The baseline a TensorRT engine is compared against, and the proof of trtprof's GPU path (streams,
CUDA graphs, NVTX, nsys) on machines that have a GPU but no TensorRT.

Route. The ONNX graph is *compiled* once per engine into a flat list of steps, each a closure over
attributes and shapes that were all resolved at build time: the model runs once on zero inputs of the
fixed shapes while building, every node whose inputs are all constant (``Shape`` chains, ``Reshape``
targets, weight transforms) is folded into a constant, and every remaining node becomes one step that
only launches kernels. The forward pass does no host work (no ``.item()``, no shape arithmetic on
tensors, no allocation of host memory), so ``torch.cuda.graph`` capture works on real models, which
converting to ``torch.nn`` modules with onnx2torch did not allow. Unsupported ops raise
:class:`~profiler.backends.base.UnsupportedOp` naming the op and node.

Precision. FP32 runs the model as given. FP16 runs the float16 ONNX model the sweep prepares
(``profiler.variants``: onnxconverter-common with the block list and fp32 I/O), so the ops kept in
float32 stay in float32 exactly as in the ONNX model; handed a model without any float16 tensor, the
backend casts its float constants and inputs to float16 itself and returns float32 outputs (noted in
``engine.info["notes"]``). INT8 is unsupported: PyTorch's CUDA kernels have no path for ONNX's
quantize/dequantize graphs here.

Execution. One execution context per stream: its own cuda-python stream (``profiler.cuda``, handed
to PyTorch as an ``ExternalStream``), pinned host buffers, device inputs and timing events. A query is
H2D copies, compute (the steps, or one ``cudaGraphLaunch`` of the captured graph), D2H copies, each
part timed with CUDA events and the enqueue with the host clock. The harness's timed phase is
``CudaTorchContext.run_loop``: two queries in flight by default, as trtexec does.

Timing events. By default the compute events are recorded from the host around one captured graph;
``graph_events=True`` captures two graphs that record them from inside (event-record nodes) and
alternates them. Measured on the H200 (``benchmarks/bench_gpu_overhead.py``), the two ways cost the
same on small graphs, and alternating between two graphs cost a 400-step model 11-12 us per query, so
host records are the default; either way two timing events cost a few microseconds of GPU time per
query, as they do in trtexec.

NVTX. When a tool is attached (nsys), each ONNX node's step runs inside an NVTX range named after the
node in domain ``trtprof``, as TensorRT emits one range per layer. They are on in timed passes too
(``node_ranges="auto"``), like TensorRT's default, because that is what lets a capture of a sweep be
cut per layer; ``node_ranges="off"`` removes them. Under CUDA graphs they are emitted once, at capture
time, as TensorRT does. Without a tool attached the hot loop never calls NVTX.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from profiler.backends.base import (
    Backend,
    BuildError,
    Engine,
    ExecutionContext,
    QueryTiming,
    TensorInfo,
    UnsupportedOp,
    VariantSpec,
)

torch: Any = None  # set by _load_torch(); closures use the module globals
F: Any = None

BACKEND_NAME = "cuda"
INT8_REASON = ("the cuda backend runs ONNX models through PyTorch's CUDA kernels, which have no INT8 path "
               "for ONNX quantize/dequantize graphs; use the tensorrt backend for INT8")


def _load_torch() -> Any:
    global torch, F
    if torch is None:
        from profiler.errors import require

        torch = require("torch", "torch", "the cuda backend")
        import torch.nn.functional as _F

        F = _F
    return torch


# -- ONNX helpers ------------------------------------------------------------------------------------
def _onnx_dtype(code: int) -> Any:
    t = _load_torch()
    table = {1: t.float32, 2: t.uint8, 3: t.int8, 5: t.int16, 6: t.int32, 7: t.int64, 9: t.bool,
             10: t.float16, 11: t.float64, 16: t.bfloat16}
    if code not in table:
        raise BuildError(f"the cuda backend does not support ONNX tensor type {code}")
    return table[code]


_NP_NAMES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int64": np.int64,
             "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_, "int16": np.int16}


def _np_dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _tensor_from_proto(proto: Any) -> Any:
    from onnx import numpy_helper

    arr = numpy_helper.to_array(proto)
    return torch.from_numpy(np.array(arr, copy=True))


class _Node:
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


Factory = Callable[[_Node], Any]  # returns fn or (fn, used_input_indices)
OPS: dict[str, Factory] = {}


def op(*names: str) -> Callable[[Factory], Factory]:
    def deco(f: Factory) -> Factory:
        for n in names:
            OPS[n] = f
        return f
    return deco


# -- elementwise -------------------------------------------------------------------------------------
_UNARY = {
    "Relu": lambda: F.relu, "Sigmoid": lambda: torch.sigmoid, "Tanh": lambda: torch.tanh,
    "Sqrt": lambda: torch.sqrt, "Exp": lambda: torch.exp, "Log": lambda: torch.log, "Neg": lambda: torch.neg,
    "Abs": lambda: torch.abs, "Reciprocal": lambda: torch.reciprocal, "Erf": lambda: torch.erf,
    "Floor": lambda: torch.floor, "Ceil": lambda: torch.ceil, "Not": lambda: torch.logical_not,
    "HardSwish": lambda: F.hardswish, "Sin": lambda: torch.sin, "Cos": lambda: torch.cos,
    "Softplus": lambda: F.softplus, "Round": lambda: torch.round, "Sign": lambda: torch.sign,
}


@op(*_UNARY)
def _unary(n: _Node) -> Any:
    return _UNARY[n.op]()


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "Equal": "eq",
           "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge", "And": "logical_and",
           "Or": "logical_or", "Xor": "logical_xor"}


@op(*_BINARY)
def _binary(n: _Node) -> Any:
    name = _BINARY[n.op]
    f = getattr(torch, name)
    a, b = n.values[0], n.values[1]
    integer = not a.is_floating_point() and a.dtype != torch.bool
    if n.op == "Div" and integer:
        return lambda x, y: torch.div(x, y, rounding_mode="trunc")
    if n.op == "Pow":
        e = n.scalar(1)
        if e is not None and b.dim() <= a.dim():
            if e == 2.0:
                return (lambda x: x * x), [0]
            if e == 0.5:
                return torch.sqrt, [0]
            return (lambda x: torch.pow(x, e)), [0]
        return f
    if name in ("add", "sub", "mul", "div"):
        # one-element float constants become Python scalars: no tensor read, same broadcast shape
        s1 = n.scalar(1)
        if s1 is not None and b.dim() <= a.dim() and a.is_floating_point():
            return {"add": lambda x: x + s1, "sub": lambda x: x - s1, "mul": lambda x: x * s1,
                    "div": lambda x: x / s1}[name], [0]
        s0 = n.scalar(0)
        if s0 is not None and a.dim() <= b.dim() and b.is_floating_point():
            return {"add": lambda y: s0 + y, "sub": lambda y: s0 - y, "mul": lambda y: s0 * y,
                    "div": lambda y: s0 / y}[name], [1]
    return f


@op("Max", "Min", "Sum", "Mean")
def _variadic(n: _Node) -> Any:
    f = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add}.get(n.op)
    count = len(n.values)

    def run(*xs: Any) -> Any:
        acc = xs[0]
        for x in xs[1:]:
            acc = (f or torch.add)(acc, x)
        return acc / count if n.op == "Mean" else acc
    return run


@op("Where")
def _where(n: _Node) -> Any:
    return torch.where


@op("Clip")
def _clip(n: _Node) -> Any:
    if n.opset < 11:
        lo, hi = n.attrs.get("min"), n.attrs.get("max")
    else:
        lo = n.floats(1)[0] if n.has(1) else None
        hi = n.floats(2)[0] if n.has(2) else None
    if lo is not None and hi is not None and lo == 0.0 and hi == 6.0:
        return F.relu6, [0]
    return (lambda x: torch.clamp(x, lo, hi)), [0]


@op("HardSigmoid")
def _hardsigmoid(n: _Node) -> Any:
    alpha, beta = float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
    if abs(alpha - 1.0 / 6.0) < 1e-6 and beta == 0.5:
        return F.hardsigmoid
    return lambda x: torch.clamp(x * alpha + beta, 0.0, 1.0)


@op("LeakyRelu")
def _leaky(n: _Node) -> Any:
    a = float(n.attrs.get("alpha", 0.01))
    return lambda x: F.leaky_relu(x, a)


@op("Elu")
def _elu(n: _Node) -> Any:
    a = float(n.attrs.get("alpha", 1.0))
    return lambda x: F.elu(x, a)


@op("PRelu")
def _prelu(n: _Node) -> Any:
    return lambda x, s: torch.where(x >= 0, x, x * s)


@op("Gelu")
def _gelu(n: _Node) -> Any:
    approx = n.attrs.get("approximate", "none")
    return lambda x: F.gelu(x, approximate=approx)


@op("Cast")
def _cast(n: _Node) -> Any:
    dt = _onnx_dtype(int(n.attrs["to"]))
    return lambda x: x.to(dt)


@op("Identity", "Dropout")
def _identity(n: _Node) -> Any:
    return (lambda x: x), [0]


# -- convolution, pooling, normalisation -------------------------------------------------------------
def _pads_for(n: _Node, spatial: tuple[int, ...], kernel: list[int], strides: list[int],
              dilations: list[int]) -> list[int]:
    """ONNX pads [x1_begin, x2_begin, ..., x1_end, ...], from ``pads`` or ``auto_pad``."""
    nd = len(kernel)
    auto = n.attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(n.attrs.get("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return [0] * (2 * nd)
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = math.ceil(size / s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _torch_pad(pads: list[int]) -> list[int]:
    """ONNX begin/end pads -> F.pad's order (last dimension first)."""
    nd = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(nd)):
        out += [pads[i], pads[i + nd]]
    return out


@op("Conv")
def _conv(n: _Node) -> Any:
    w_shape = n.shape(1)
    nd = len(w_shape) - 2
    kernel = list(n.attrs.get("kernel_shape", w_shape[2:]))
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    groups = int(n.attrs.get("group", 1))
    pads = _pads_for(n, n.shape(0)[2:], kernel, strides, dil)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(nd)
    if conv is None:
        raise n.unsupported(f"a {nd}-D convolution")
    sym = pads[:nd] == pads[nd:]
    padding = tuple(pads[:nd]) if sym else 0
    tp = None if sym else _torch_pad(pads)
    used = [0, 1, 2] if n.has(2) else [0, 1]
    if tp is None:
        return (lambda x, w, b=None: conv(x, w, b, strides, padding, dil, groups)), used
    return (lambda x, w, b=None: conv(F.pad(x, tp), w, b, strides, 0, dil, groups)), used


@op("ConvTranspose")
def _conv_t(n: _Node) -> Any:
    w_shape = n.shape(1)
    nd = len(w_shape) - 2
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    groups = int(n.attrs.get("group", 1))
    out_pad = list(n.attrs.get("output_padding", [0] * nd))
    pads = list(n.attrs.get("pads", [0] * (2 * nd)))
    if "output_shape" in n.attrs or n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise n.unsupported("output_shape/auto_pad")
    convt = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}.get(nd)
    if convt is None:
        raise n.unsupported(f"a {nd}-D transposed convolution")
    used = [0, 1, 2] if n.has(2) else [0, 1]
    if pads[:nd] == pads[nd:]:
        padding = tuple(pads[:nd])
        return (lambda x, w, b=None: convt(x, w, b, strides, padding, out_pad, groups, dil)), used
    # asymmetric: compute unpadded, then crop begin/end per spatial dimension
    crop = tuple([slice(None), slice(None)] + [slice(pads[i], -pads[i + nd] if pads[i + nd] else None)
                                                for i in range(nd)])
    return (lambda x, w, b=None: convt(x, w, b, strides, 0, out_pad, groups, dil)[crop]), used


@op("BatchNormalization")
def _batchnorm(n: _Node) -> Any:
    eps = float(n.attrs.get("epsilon", 1e-5))
    scale, bias, mean, var = (n.const(i).double() for i in range(1, 5))
    a = scale / torch.sqrt(var + eps)
    b = bias - mean * a
    view = (-1,) + (1,) * (len(n.shape(0)) - 2)
    dt = n.values[0].dtype
    a_dev = a.to(dt).reshape(view).to(n.device)
    b_dev = b.to(dt).reshape(view).to(n.device)
    return (lambda x: torch.addcmul(b_dev, x, a_dev)), [0]


@op("InstanceNormalization")
def _instnorm(n: _Node) -> Any:
    eps = float(n.attrs.get("epsilon", 1e-5))
    return lambda x, s, b: F.instance_norm(x, None, None, s, b, False, 0.0, eps)


@op("LayerNormalization")
def _layernorm(n: _Node) -> Any:
    axis = int(n.attrs.get("axis", -1))
    eps = float(n.attrs.get("epsilon", 1e-5))
    shape = n.shape(0)
    axis = axis % len(shape)
    norm = shape[axis:]
    used = [0, 1, 2] if n.has(2) else [0, 1]
    return (lambda x, w, b=None: F.layer_norm(x, norm, w, b, eps)), used


def _pool_common(n: _Node) -> tuple[list[int], list[int], list[int], list[int], int]:
    kernel = list(n.attrs["kernel_shape"])
    nd = len(kernel)
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    pads = _pads_for(n, n.shape(0)[2:], kernel, strides, dil)
    return kernel, strides, dil, pads, nd


@op("MaxPool")
def _maxpool(n: _Node) -> Any:
    kernel, strides, dil, pads, nd = _pool_common(n)
    ceil = bool(n.attrs.get("ceil_mode", 0))
    if len(n.proto.output) > 1 and n.proto.output[1]:
        raise n.unsupported("MaxPool's indices output")
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    if pads[:nd] == pads[nd:] and all(p * 2 <= k for p, k in zip(pads[:nd], kernel)):
        padding = tuple(pads[:nd])
        return lambda x: pool(x, kernel, strides, padding, dil, ceil)
    tp = _torch_pad(pads)
    return lambda x: pool(F.pad(x, tp, value=float("-inf")), kernel, strides, 0, dil, ceil)


@op("AveragePool")
def _avgpool(n: _Node) -> Any:
    kernel, strides, dil, pads, nd = _pool_common(n)
    if any(d != 1 for d in dil):
        raise n.unsupported("a dilated AveragePool")
    ceil = bool(n.attrs.get("ceil_mode", 0))
    include = bool(n.attrs.get("count_include_pad", 0))
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    if pads[:nd] == pads[nd:] and all(p * 2 <= k for p, k in zip(pads[:nd], kernel)):
        padding = tuple(pads[:nd])
        return lambda x: pool(x, kernel, strides, padding, ceil, include)
    if include:
        tp = _torch_pad(pads)
        return lambda x: pool(F.pad(x, tp), kernel, strides, 0, ceil, True)
    raise n.unsupported("asymmetric AveragePool padding without count_include_pad")


@op("GlobalAveragePool")
def _gap(n: _Node) -> Any:
    dims = tuple(range(2, len(n.shape(0))))
    return lambda x: x.mean(dims, keepdim=True)


@op("GlobalMaxPool")
def _gmp(n: _Node) -> Any:
    dims = tuple(range(2, len(n.shape(0))))
    return lambda x: torch.amax(x, dims, keepdim=True)


# -- matrix products, softmax, reductions ------------------------------------------------------------
@op("MatMul")
def _matmul(n: _Node) -> Any:
    return torch.matmul


@op("Gemm")
def _gemm(n: _Node) -> Any:
    alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
    ta, tb = int(n.attrs.get("transA", 0)), int(n.attrs.get("transB", 0))
    has_c = n.has(2)
    if not ta and tb and alpha == 1.0 and (not has_c or (beta == 1.0 and len(n.shape(2)) <= 1)):
        return (lambda a, b, c=None: F.linear(a, b, c)), ([0, 1, 2] if has_c else [0, 1])

    def gemm(a: Any, b: Any, c: Any = None) -> Any:
        y = torch.matmul(a.t() if ta else a, b.t() if tb else b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y
    return gemm, ([0, 1, 2] if has_c else [0, 1])


def _softmax_like(n: _Node, f: Callable[..., Any]) -> Any:
    shape = n.shape(0)
    rank = len(shape)
    default = -1 if n.opset >= 13 else 1
    axis = int(n.attrs.get("axis", default)) % max(rank, 1)
    if n.opset >= 13 or axis == rank - 1:
        return lambda x: f(x, dim=axis)
    # opset < 13: the input is coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])]
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    flat = (rows, -1)
    return lambda x: f(x.reshape(flat), dim=1).reshape(shape)


@op("Softmax")
def _softmax(n: _Node) -> Any:
    return _softmax_like(n, torch.softmax)


@op("LogSoftmax")
def _logsoftmax(n: _Node) -> Any:
    return _softmax_like(n, torch.log_softmax)


def _reduce_axes(n: _Node) -> tuple[int, ...] | None:
    rank = len(n.shape(0))
    if "axes" in n.attrs:
        axes = list(n.attrs["axes"])
    elif n.has(1):
        axes = n.ints(1, "axes")
    else:
        axes = []
    if not axes:
        if int(n.attrs.get("noop_with_empty_axes", 0)):
            return None
        return tuple(range(rank))
    return tuple(sorted(a % rank for a in axes))


@op("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare")
def _reduce(n: _Node) -> Any:
    axes = _reduce_axes(n)
    keep = bool(int(n.attrs.get("keepdims", 1)))
    if axes is None:
        return (lambda x: x), [0]
    f = {
        "ReduceMean": lambda x: x.mean(axes, keepdim=keep),
        "ReduceSum": lambda x: x.sum(axes, keepdim=keep),
        "ReduceMax": lambda x: torch.amax(x, axes, keepdim=keep),
        "ReduceMin": lambda x: torch.amin(x, axes, keepdim=keep),
        "ReduceSumSquare": lambda x: (x * x).sum(axes, keepdim=keep),
        "ReduceL2": lambda x: torch.sqrt((x * x).sum(axes, keepdim=keep)),
    }.get(n.op)
    if f is None:  # ReduceProd over several axes
        def f(x: Any) -> Any:
            for a in reversed(axes):
                x = torch.prod(x, a, keepdim=keep)
            return x
    return f, [0]


@op("ArgMax", "ArgMin")
def _argmax(n: _Node) -> Any:
    axis = int(n.attrs.get("axis", 0))
    keep = bool(int(n.attrs.get("keepdims", 1)))
    if int(n.attrs.get("select_last_index", 0)):
        raise n.unsupported("select_last_index")
    f = torch.argmax if n.op == "ArgMax" else torch.argmin
    return lambda x: f(x, dim=axis, keepdim=keep)


# -- shapes and indexing -----------------------------------------------------------------------------
@op("Reshape")
def _reshape(n: _Node) -> Any:
    target = n.ints(1, "shape")
    src = n.shape(0)
    allowzero = int(n.attrs.get("allowzero", 0))
    shape = [src[i] if (d == 0 and not allowzero) else d for i, d in enumerate(target)]
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape[shape.index(-1)] = int(np.prod(src, dtype=np.int64)) // max(known, 1)
    final = tuple(shape)
    return (lambda x: x.reshape(final)), [0]


@op("Flatten")
def _flatten(n: _Node) -> Any:
    shape = n.shape(0)
    axis = int(n.attrs.get("axis", 1)) % (len(shape) + 1) if shape else 0
    final = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
    return lambda x: x.reshape(final)


@op("Transpose")
def _transpose(n: _Node) -> Any:
    rank = len(n.shape(0))
    perm = tuple(n.attrs.get("perm", list(reversed(range(rank)))))
    return lambda x: x.permute(perm)


def _axes_of(n: _Node) -> list[int]:
    if "axes" in n.attrs:
        return list(n.attrs["axes"])
    if n.has(1):
        return n.ints(1, "axes")
    return []


@op("Squeeze")
def _squeeze(n: _Node) -> Any:
    shape = n.shape(0)
    axes = [a % len(shape) for a in _axes_of(n)] or [i for i, d in enumerate(shape) if d == 1]
    final = tuple(d for i, d in enumerate(shape) if i not in axes)
    return (lambda x: x.reshape(final)), [0]


@op("Unsqueeze")
def _unsqueeze(n: _Node) -> Any:
    shape = list(n.shape(0))
    axes = _axes_of(n)
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    final = tuple(shape)
    return (lambda x: x.reshape(final)), [0]


@op("Concat")
def _concat(n: _Node) -> Any:
    axis = int(n.attrs["axis"])
    used = [i for i in range(len(n.values)) if n.has(i) and n.values[i].numel() > 0] or [0]
    return (lambda *xs: torch.cat(xs, axis)), used


@op("Split")
def _split(n: _Node) -> Any:
    shape = n.shape(0)
    axis = int(n.attrs.get("axis", 0)) % len(shape)
    if "split" in n.attrs:
        sizes = list(n.attrs["split"])
    elif n.has(1):
        sizes = n.ints(1, "split")
    else:
        parts = int(n.attrs.get("num_outputs", len(n.proto.output)))
        each = math.ceil(shape[axis] / parts)
        sizes = [min(each, shape[axis] - i * each) for i in range(parts)]
    return (lambda x: torch.split(x, sizes, axis)), [0]


@op("Slice")
def _slice(n: _Node) -> Any:
    shape = n.shape(0)
    if n.opset < 10:
        starts, ends = list(n.attrs["starts"]), list(n.attrs["ends"])
        axes = list(n.attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = n.ints(1, "starts"), n.ints(2, "ends")
        axes = n.ints(3, "axes") if n.has(3) else list(range(len(starts)))
        steps = n.ints(4, "steps") if n.has(4) else [1] * len(starts)
    index: list[Any] = [slice(None)] * len(shape)
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a %= len(shape)
        dim = shape[a]
        if st > 0:
            s = max(0, min(dim, s + dim if s < 0 else s))
            e = max(0, min(dim, e + dim if e < 0 else e))
            index[a] = slice(s, max(s, e), st)
        else:
            s = max(-1, min(dim - 1, s + dim if s < 0 else s))
            e = max(-1, min(dim - 1, e + dim if e < 0 else e))
            # reverse slice: take indices s, s+st, ... > e
            idx = list(range(s, e, st))
            if not idx:
                index[a] = slice(0, 0)
            else:
                lo, hi = idx[-1], idx[0]
                index[a] = slice(lo, hi + 1, -st)
                flips.append(a)
    key = tuple(index)
    if flips:
        fl = tuple(flips)
        return (lambda x: torch.flip(x[key], fl)), [0]
    return (lambda x: x[key]), [0]


@op("Gather")
def _gather(n: _Node) -> Any:
    shape = n.shape(0)
    axis = int(n.attrs.get("axis", 0)) % len(shape)
    if n.consts[1]:
        idx = n.const(1).to(torch.int64)
        idx = torch.where(idx < 0, idx + shape[axis], idx)
        if idx.dim() == 0:
            i = int(idx.item())
            return (lambda x: x.select(axis, i)), [0]
        flat = idx.reshape(-1).to(n.device)
        out_shape = tuple(shape[:axis]) + tuple(idx.shape) + tuple(shape[axis + 1:])
        return (lambda x: torch.index_select(x, axis, flat).reshape(out_shape)), [0]
    ishape = n.shape(1)
    out_shape = tuple(shape[:axis]) + tuple(ishape) + tuple(shape[axis + 1:])
    size = shape[axis]
    return lambda x, i: torch.index_select(x, axis, torch.remainder(i.reshape(-1), size)).reshape(out_shape)


@op("Expand")
def _expand(n: _Node) -> Any:
    target = n.ints(1, "shape")
    src = n.shape(0)
    final = tuple(np.broadcast_shapes(tuple(src), tuple(target)))
    return (lambda x: x.expand(final)), [0]


@op("Tile")
def _tile(n: _Node) -> Any:
    reps = tuple(n.ints(1, "repeats"))
    return (lambda x: x.repeat(reps)), [0]


@op("Pad")
def _pad(n: _Node) -> Any:
    mode = n.attrs.get("mode", "constant")
    pads = list(n.attrs["pads"]) if n.opset < 11 else n.ints(1, "pads")
    value = float(n.attrs.get("value", 0.0)) if n.opset < 11 else (n.floats(2)[0] if n.has(2) else 0.0)
    if n.has(3):
        raise n.unsupported("Pad with axes")
    tp = _torch_pad(pads)
    while len(tp) >= 2 and tp[-2:] == [0, 0] and mode != "constant":
        tp = tp[:-2]
    tmode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(mode)
    if tmode is None:
        raise n.unsupported(f"Pad mode {mode!r}")
    if tmode == "constant":
        return (lambda x: F.pad(x, tp, value=value)), [0]
    return (lambda x: F.pad(x, tp, mode=tmode)), [0]


@op("Resize", "Upsample")
def _resize(n: _Node) -> Any:
    shape = n.shape(0)
    mode = n.attrs.get("mode", "nearest")
    ctm = n.attrs.get("coordinate_transformation_mode", "half_pixel" if n.op == "Resize" else "asymmetric")
    nearest_mode = n.attrs.get("nearest_mode", "round_prefer_floor")
    sizes = None
    scales = None
    if n.op == "Upsample":
        scales = n.floats(1) if n.has(1) else list(n.attrs["scales"])
    elif n.opset < 11:
        scales = n.floats(1)
    else:
        if n.has(3) and n.values[3].numel() > 0:
            sizes = n.ints(3, "sizes")
        elif n.has(2) and n.values[2].numel() > 0:
            scales = n.floats(2)
    if sizes is None:
        if scales is None:
            raise n.unsupported("Resize without scales or sizes")
        sizes = [int(math.floor(d * s)) for d, s in zip(shape, scales)]
    if list(sizes[:2]) != list(shape[:2]):
        raise n.unsupported("Resize of the batch or channel dimension")
    out = tuple(int(s) for s in sizes[2:])
    if mode == "nearest":
        if ctm == "asymmetric" and nearest_mode == "floor":
            return (lambda x: F.interpolate(x, size=out, mode="nearest")), [0]
        if ctm in ("half_pixel", "pytorch_half_pixel") and nearest_mode in ("round_prefer_ceil", "round_prefer_floor"):
            return (lambda x: F.interpolate(x, size=out, mode="nearest-exact")), [0]
        if ctm == "asymmetric" and all(o % i == 0 for o, i in zip(out, shape[2:])):
            return (lambda x: F.interpolate(x, size=out, mode="nearest")), [0]  # integer factors: same
        raise n.unsupported(f"nearest Resize with {ctm}/{nearest_mode}")
    if mode in ("linear", "bilinear", "cubic"):
        tmode = {2: "bilinear", 1: "linear", 3: "trilinear"}.get(len(out)) if mode != "cubic" else "bicubic"
        if ctm == "align_corners":
            return (lambda x: F.interpolate(x, size=out, mode=tmode, align_corners=True)), [0]
        if ctm in ("half_pixel", "pytorch_half_pixel"):
            return (lambda x: F.interpolate(x, size=out, mode=tmode, align_corners=False)), [0]
        raise n.unsupported(f"{mode} Resize with coordinate_transformation_mode {ctm!r}")
    raise n.unsupported(f"Resize mode {mode!r}")


@op("DepthToSpace")
def _d2s(n: _Node) -> Any:
    b = int(n.attrs["blocksize"])
    if n.attrs.get("mode", "DCR") == "CRD":
        return lambda x: F.pixel_shuffle(x, b)
    nb, c, h, w = n.shape(0)
    return lambda x: x.reshape(nb, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2).reshape(
        nb, c // (b * b), h * b, w * b)


#: ops whose outputs depend only on shapes or constants: always folded (never a runtime step)
_SHAPE_OPS = {"Shape", "Size", "ConstantOfShape", "Range", "Constant"}


def _fold_special(n: _Node, outputs: int) -> list[Any] | None:
    """Build-time values of shape-only ops (Shape, Size, Constant, ConstantOfShape, Range)."""
    if n.op == "Constant":
        a = n.proto.attribute[0]
        from onnx import helper

        v = helper.get_attribute_value(a)
        if a.name == "value":
            return [_tensor_from_proto(v)]
        if a.name in ("value_float", "value_int"):
            return [torch.tensor(v, dtype=torch.float32 if a.name == "value_float" else torch.int64)]
        if a.name in ("value_floats", "value_ints"):
            return [torch.tensor(list(v), dtype=torch.float32 if a.name == "value_floats" else torch.int64)]
        raise n.unsupported(f"Constant with {a.name}")
    if n.op == "Shape":
        shape = list(n.shape(0))
        start = int(n.attrs.get("start", 0))
        end = n.attrs.get("end")
        return [torch.tensor(shape[start:end] if end is not None else shape[start:], dtype=torch.int64)]
    if n.op == "Size":
        return [torch.tensor(int(np.prod(n.shape(0), dtype=np.int64)), dtype=torch.int64)]
    if n.op == "ConstantOfShape":
        shape = n.ints(0, "shape")
        if "value" in n.attrs:
            v = _tensor_from_proto(n.attrs["value"])
            return [torch.full(shape, v.reshape(-1)[0].item(), dtype=v.dtype)]
        return [torch.zeros(shape, dtype=torch.float32)]
    if n.op == "Range":
        start, limit, delta = (n.const(i) for i in range(3))
        return [torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]
    return None


# -- the compiled program ----------------------------------------------------------------------------
@dataclass
class Step:
    """One ONNX node at run time: ``fn(*env[ins])`` into ``outs``; ``frees`` are dead after it."""

    name: str
    op: str
    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    multi: bool
    frees: tuple[int, ...] = ()


@dataclass
class Program:
    """An ONNX graph compiled for fixed input shapes on one torch device (see the module docstring)."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    steps: list[Step]
    template: list[Any]
    input_slots: list[int]
    output_slots: list[int]
    input_casts: list[Any]  # per input: dtype to cast to inside the program, or None
    output_casts: list[Any]
    nodes_total: int
    nodes_folded: int
    op_counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    _plans: dict[bool, list[tuple]] = field(default_factory=dict)

    @property
    def device(self) -> Any:
        return None

    def plan(self, ranges: Any = None) -> list[tuple]:
        """The hot loop's tuples; with ``ranges`` (an enabled ``profiler.harness.nvtx.Ranges``) each step
        is wrapped in an NVTX range named after its ONNX node."""
        if ranges is None:
            if False not in self._plans:
                self._plans[False] = [(s.fn, s.ins, s.outs[0] if not s.multi else s.outs, s.multi, s.frees)
                                      for s in self.steps]
            return self._plans[False]
        out = []
        for s in self.steps:
            push, pop = ranges.pusher(s.name, color="yellow")
            out.append((_ranged(s.fn, push, pop), s.ins, s.outs[0] if not s.multi else s.outs, s.multi, s.frees))
        return out

    def forward(self, inputs: Sequence[Any], plan: list[tuple] | None = None) -> list[Any]:
        """Run the steps on ``inputs`` (tensors on the program's device, in input order)."""
        env = list(self.template)
        for slot, t, cast in zip(self.input_slots, inputs, self.input_casts):
            env[slot] = t if cast is None else t.to(cast)
        for fn, ins, out, multi, frees in (plan if plan is not None else self.plan()):
            r = fn(*[env[i] for i in ins])
            if multi:
                for k, s in enumerate(out):
                    env[s] = r[k]
            else:
                env[out] = r
            for f in frees:
                env[f] = None
        return [env[s] if c is None else env[s].to(c) for s, c in zip(self.output_slots, self.output_casts)]

    def run_numpy(self, feeds: dict[str, np.ndarray], device: Any = "cpu") -> dict[str, np.ndarray]:
        """Convenience for tests and checks: numpy in, numpy out (synchronous)."""
        t = _load_torch()
        ins = [t.from_numpy(np.ascontiguousarray(feeds[i.name], dtype=_NP_NAMES.get(i.dtype, None))).to(device)
               for i in self.inputs]
        with t.inference_mode():
            outs = self.forward(ins)
        return {o.name: v.detach().cpu().numpy() for o, v in zip(self.outputs, outs)}


def _ranged(fn: Callable[..., Any], push: Callable[[], None], pop: Callable[[], None]) -> Callable[..., Any]:
    def run(*xs: Any) -> Any:
        push()
        try:
            return fn(*xs)
        finally:
            pop()
    return run


def _topo_nodes(graph: Any) -> list[Any]:
    """Nodes in an order where every input is produced before use (ONNX asks for it; check anyway)."""
    produced = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        rest = []
        for nd in pending:
            if all(x in produced for x in nd.input):
                ordered.append(nd)
                produced.update(nd.output)
            else:
                rest.append(nd)
        if len(rest) == len(pending):
            missing = sorted({x for nd in rest for x in nd.input if x not in produced})[:3]
            raise BuildError(f"the ONNX graph uses tensors nothing produces: {', '.join(missing)}")
        pending = rest
    return ordered


def compile_model(model: Any, shapes: dict[str, tuple[int, ...]] | None = None, device: Any = "cpu",
                  half: bool = False) -> Program:
    """Compile an ONNX ``ModelProto`` (or path) for fixed input ``shapes`` on a torch ``device``.

    ``half``: cast float32 constants and inputs to float16 and outputs back to float32 (used when
    FP16 is asked of a model that has no float16 tensors).
    """
    t = _load_torch()
    import onnx

    if not hasattr(model, "graph"):
        try:
            model = onnx.load(str(model))
        except Exception as exc:
            raise BuildError(f"cannot read the ONNX model {model}: {exc}") from exc
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    for o in model.opset_import:
        if o.domain not in ("", "ai.onnx"):
            used = [n.op_type for n in graph.node if n.domain == o.domain]
            if used:
                raise UnsupportedOp(f"{o.domain}.{used[0]}", None, BACKEND_NAME)
    shapes = dict(shapes or {})
    dev = t.device(device)
    init_names = {i.name for i in graph.initializer}

    values: dict[str, Any] = {}  # name -> tensor (build-time value on dev)
    const: dict[str, bool] = {}
    for init in graph.initializer:
        v = _tensor_from_proto(init)
        if half and v.dtype == t.float32:
            v = v.half()
        values[init.name], const[init.name] = v.to(dev), True

    inputs: list[TensorInfo] = []
    input_casts: list[Any] = []
    for gi in graph.input:
        if gi.name in init_names:
            continue
        tt = gi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                for d in tt.shape.dim]
        shape = shapes.get(gi.name)
        if shape is None:
            if any(not isinstance(d, int) for d in dims):
                raise BuildError(f"input {gi.name!r} has dynamic dimensions {dims}: give its shape (--shape)")
            shape = tuple(dims)
        shape = tuple(int(d) for d in shape)
        dt = _onnx_dtype(tt.elem_type)
        inputs.append(TensorInfo(gi.name, shape, _np_dtype_name(dt)))
        cast = t.float16 if (half and dt == t.float32) else None
        input_casts.append(cast)
        values[gi.name] = t.zeros(shape, dtype=cast or dt, device=dev)
        const[gi.name] = False

    slots: dict[str, int] = {}

    def slot(name: str) -> int:
        if name not in slots:
            slots[name] = len(slots)
        return slots[name]

    input_slots = [slot(i.name) for i in inputs]
    steps: list[Step] = []
    folded = 0
    op_counts: dict[str, int] = {}
    notes: list[str] = []
    nodes = _topo_nodes(graph)
    with t.inference_mode():
        for idx, nd in enumerate(nodes):
            op_counts[nd.op_type] = op_counts.get(nd.op_type, 0) + 1
            if nd.domain not in ("", "ai.onnx"):
                raise UnsupportedOp(f"{nd.domain}.{nd.op_type}", nd.name or None, BACKEND_NAME)
            ins = [values[x] if x else None for x in nd.input]
            cons = [const.get(x, True) if x else True for x in nd.input]
            n = _Node(nd, idx, ins, cons, opset, dev)
            if nd.op_type == "Cast" and half and int(n.attrs.get("to", 0)) == 1:
                n.attrs["to"] = 10  # half mode: float32 casts become float16 casts
            special = _fold_special(n, len(nd.output)) if nd.op_type in _SHAPE_OPS else None
            if special is not None:
                for name, v in zip(nd.output, special):
                    if half and v.dtype == t.float32:
                        v = v.half()
                    values[name], const[name] = v.to(dev), True
                folded += 1
                continue
            factory = OPS.get(nd.op_type)
            if factory is None:
                raise UnsupportedOp(nd.op_type, nd.name or None, BACKEND_NAME)
            made = factory(n)
            fn, used = made if isinstance(made, tuple) else (made, [i for i in range(len(ins)) if ins[i] is not None])
            try:
                result = fn(*[ins[i] for i in used])
            except BuildError:
                raise
            except Exception as exc:
                raise BuildError(f"node {n.name!r} ({nd.op_type}) failed on inputs of shapes "
                                 f"{[tuple(ins[i].shape) for i in used]}: {type(exc).__name__}: {exc}") from exc
            multi = isinstance(result, (tuple, list))
            results = list(result) if multi else [result]
            outs = [o for o in nd.output]
            all_const = all(cons[i] for i in used)
            for k, name in enumerate(outs):
                if not name or k >= len(results):
                    continue
                values[name], const[name] = results[k], all_const
            if all_const:
                folded += 1
                continue
            in_slots = []
            for i in used:
                in_slots.append(slot(nd.input[i]))
            out_slots = tuple(slot(o) if o else -1 for o in outs[:len(results)]) if multi else (slot(outs[0]),)
            steps.append(Step(n.name, nd.op_type, fn, tuple(in_slots), out_slots, multi))

    outputs: list[TensorInfo] = []
    output_slots: list[int] = []
    output_casts: list[Any] = []
    for go in graph.output:
        v = values.get(go.name)
        if v is None:
            raise BuildError(f"the graph output {go.name!r} is never produced")
        s = slot(go.name)
        needs_copy = const.get(go.name, False) or go.name in {i.name for i in inputs} or not v.is_contiguous()
        if needs_copy:  # outputs must be fresh contiguous tensors written inside the program
            copy_name = f"{go.name}::out"
            s2 = slot(copy_name)
            steps.append(Step(f"{go.name}/contiguous", "Copy", lambda x: x.contiguous().clone(), (s,), (s2,), False))
            s = s2
        cast = t.float32 if (half and v.dtype == t.float16) else None
        output_slots.append(s)
        output_casts.append(cast)
        outputs.append(TensorInfo(go.name, tuple(v.shape), _np_dtype_name(cast or v.dtype)))

    # the template holds constants the steps read; everything else starts empty
    template: list[Any] = [None] * len(slots)
    for name, s in slots.items():
        if const.get(name, False) and name in values:
            template[s] = values[name]
    # liveness: a slot that is neither constant nor an output dies after its last reader
    last_use: dict[int, int] = {}
    for k, st in enumerate(steps):
        for s in st.ins:
            last_use[s] = k
        for s in st.outs:
            last_use.setdefault(s, k)
    keep = set(output_slots) | {s for s in range(len(template)) if template[s] is not None}
    frees: dict[int, list[int]] = {}
    for s, k in last_use.items():
        if s not in keep and s >= 0:
            frees.setdefault(k, []).append(s)
    for k, st in enumerate(steps):
        st.frees = tuple(frees.get(k, ()))
    if half:
        notes.append("fp16 by casting the fp32 model's float constants and inputs to float16 (outputs float32)")
    return Program(inputs, outputs, steps, template, input_slots, output_slots, input_casts, output_casts,
                   nodes_total=len(nodes), nodes_folded=folded, op_counts=op_counts, notes=notes)


def has_float16(model: Any) -> bool:
    """True when the ONNX model holds float16 tensors (a precision-transformed fp16 model)."""
    g = model.graph
    if any(i.data_type == 10 for i in g.initializer):
        return True
    for nd in g.node:
        if nd.op_type == "Cast" and any(a.name == "to" and a.i == 10 for a in nd.attribute):
            return True
    return any(v.type.tensor_type.elem_type == 10 for v in list(g.input) + list(g.output))


# -- the backend -------------------------------------------------------------------------------------
class CudaTorchBackend(Backend):
    """``--backend cuda``: ONNX on CUDA through PyTorch kernels (see the module docstring)."""

    name = BACKEND_NAME
    uses_workspace = False

    def __init__(self, device_index: int = 0, node_ranges: str = "auto", graph_events: bool = False):
        if node_ranges not in ("auto", "on", "off"):
            raise ValueError("node_ranges must be auto, on or off")
        self.device_index = device_index
        self.node_ranges = node_ranges
        self.graph_events = graph_events

    def describe(self) -> dict[str, Any]:
        from profiler import __version__

        d: dict[str, Any] = {"name": self.name, "version": f"trtprof {__version__}"}
        try:
            t = _load_torch()
            d["torch"] = t.__version__
            d["version"] = f"trtprof {__version__} / torch {t.__version__}"
        except Exception as exc:
            d["torch"] = None
            d["unavailable"] = str(exc)
        try:
            from profiler import cuda

            info = cuda.device_info(self.device_index)
            d.update(device=info.name, compute_capability=info.compute_capability,
                     driver_cuda_version=info.driver_version, cuda_runtime_version=info.runtime_version,
                     cuda_bindings=info.bindings_version, total_memory_bytes=info.total_memory_bytes)
        except Exception as exc:
            d["device"] = None
            d.setdefault("unavailable", str(exc))
        return d

    def unsupported(self, spec: VariantSpec) -> str | None:
        if spec.precision == "int8":
            return INT8_REASON
        return None

    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> "CudaTorchEngine":
        reason = self.unsupported(spec)
        if reason:
            raise BuildError(reason)
        t = _load_torch()
        from profiler import cuda

        try:
            cuda.set_device(self.device_index)
            before = cuda.mem_info()
            torch_before = int(t.cuda.memory_allocated(self.device_index)) if t.cuda.is_available() else 0
        except cuda.CudaUnavailable as exc:
            raise BuildError(str(exc)) from exc
        if not t.cuda.is_available():
            raise BuildError("PyTorch sees no CUDA GPU (a CPU-only torch build?), so the cuda backend cannot run")
        import onnx

        started = time.perf_counter()
        try:
            model = onnx.load(model_path)
        except Exception as exc:
            raise BuildError(f"cannot read the ONNX model {model_path}: {exc}") from exc
        half = spec.precision == "fp16" and not has_float16(model)
        dev = t.device("cuda", self.device_index)
        try:
            program = compile_model(model, spec.shape_dict, dev, half=half)
            t.cuda.synchronize(dev)
        except (BuildError, cuda.CudaError) as exc:
            raise BuildError(str(exc)) from exc
        except RuntimeError as exc:  # torch's CUDA errors (out of memory, ...)
            raise BuildError(f"building on the GPU failed: {exc}".splitlines()[0]) from exc
        after = cuda.mem_info()
        info = {
            "build_time_s": time.perf_counter() - started,
            # cudaMemGetInfo sees the driver's view, which PyTorch's caching allocator hides once it holds
            # memory from an earlier engine; the allocator's own count says what this build keeps
            "device_memory": {"free_before_bytes": before.free_bytes, "free_after_bytes": after.free_bytes,
                              "total_bytes": after.total_bytes,
                              "used_by_build_bytes": before.free_bytes - after.free_bytes,
                              "torch_allocated_by_build_bytes": int(t.cuda.memory_allocated(dev)) - torch_before},
            "engine_size_bytes": int(sum(v.numel() * v.element_size() for v in program.template if v is not None)),
            "nodes": program.nodes_total, "nodes_folded": program.nodes_folded, "steps": len(program.steps),
            "op_counts": program.op_counts, "notes": list(program.notes),
            "fp16_route": ("cast by the backend" if half else "fp16 ONNX model") if spec.precision == "fp16" else None,
            "torch": t.__version__,
        }
        return CudaTorchEngine(self, program, spec, dev, info)


class CudaTorchEngine(Engine):
    def __init__(self, backend: CudaTorchBackend, program: Program, spec: VariantSpec, device: Any,
                 info: dict[str, Any]):
        self.backend, self.program, self.spec, self.device = backend, program, spec, device
        self.inputs, self.outputs, self.info = program.inputs, program.outputs, info
        self._contexts: list[CudaTorchContext] = []

    def _ranges(self) -> Any:
        mode = self.backend.node_ranges
        if mode == "off":
            return None
        from profiler.harness.nvtx import ranges

        r = ranges()
        return r if r.enabled else None

    def create_context(self, stream_index: int = 0) -> "CudaTorchContext":
        ctx = CudaTorchContext(self, stream_index)
        self._contexts.append(ctx)
        return ctx

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int = 10) -> list[dict[str, Any]]:
        """Per ONNX node: CUDA events around each step on one stream, in a separate eager pass."""
        from profiler import cuda

        ctx = CudaTorchContext(self, 0, graph_ok=False)
        try:
            ctx.set_inputs(feeds)
            ctx.query()
            steps = self.program.steps
            events = [cuda.Event() for _ in range(len(steps) + 1)]
            totals = [0.0] * len(steps)
            plan = self.program.plan(None)
            t = _load_torch()
            for _ in range(iterations):
                ctx._h2d()
                with t.cuda.stream(ctx.ext):
                    env = list(self.program.template)
                    for slot, x, cast in zip(self.program.input_slots, ctx.dev_inputs, self.program.input_casts):
                        env[slot] = x if cast is None else x.to(cast)
                    events[0].record(ctx.stream)
                    for k, (fn, ins, out, multi, frees) in enumerate(plan):
                        r = fn(*[env[i] for i in ins])
                        if multi:
                            for j, s in enumerate(out):
                                env[s] = r[j]
                        else:
                            env[out] = r
                        events[k + 1].record(ctx.stream)
                ctx.stream.synchronize()
                for k in range(len(steps)):
                    totals[k] += cuda.elapsed_ms(events[k], events[k + 1])
            for e in events:
                e.destroy()
            total_all = sum(totals) or 1.0
            return [{"name": s.name, "type": s.op, "time_total_ms": tot, "time_avg_ms": tot / iterations,
                     "count": iterations, "percent": 100.0 * tot / total_all, "index": k}
                    for k, (s, tot) in enumerate(zip(steps, totals))]
        finally:
            ctx.close()

    def close(self) -> None:
        for c in list(self._contexts):
            c.close()
        self._contexts.clear()
        self.program = None  # type: ignore[assignment]


class _Resolved:
    """A field of :class:`_EventTiming` kept in ``slot``: reading it first reads the pending events."""

    def __init__(self, slot: str):
        self.slot = slot

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        if obj._pending is not None:
            obj._resolve()
        return obj.__dict__[self.slot]

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


class _EventTiming(QueryTiming):
    """A QueryTiming whose event-timed parts are read from the GPU events when first needed.

    ``cudaEventElapsedTime`` costs about a microsecond of host time per call; reading the three parts
    right after the wait would put that on every query's critical path. The context instead resolves
    a query's times while the *next* query runs on the GPU (two alternating event sets), or on first
    access, whichever comes first.
    """

    _pending: Any = None

    def _resolve(self) -> None:
        ctx, events = self._pending
        self._pending = None
        el = ctx._rt.cudaEventElapsedTime
        e0, e1, e2, e3 = events
        self._h2d = el(e0, e1)[1]
        self._compute = el(e1, e2)[1]
        self._d2h = el(e2, e3)[1]

    compute_ms = _Resolved("_compute")  # type: ignore[assignment]
    h2d_ms = _Resolved("_h2d")  # type: ignore[assignment]
    d2h_ms = _Resolved("_d2h")  # type: ignore[assignment]


class _ComputeTiming(_EventTiming):
    """An _EventTiming of a query without transfers: only the compute pair is read; h2d/d2h are None."""

    def _resolve(self) -> None:
        ctx, events = self._pending
        self._pending = None
        self._compute = ctx._rt.cudaEventElapsedTime(events[1], events[2])[1]


_new_timing = object.__new__


class CudaTorchContext(ExecutionContext):
    """One stream: its cuda-python stream, pinned I/O, device inputs, events, optional CUDA graph."""

    overlaps = True  # run_loop keeps two queries in flight when asked

    def __init__(self, engine: CudaTorchEngine, stream_index: int = 0, graph_ok: bool = True):
        from profiler import cuda

        t = _load_torch()
        self.engine, self.stream_index, self.program = engine, stream_index, engine.program
        self._cuda = cuda
        self.stream = cuda.Stream(non_blocking=True)
        self.ext = t.cuda.ExternalStream(self.stream.ptr, device=engine.device)
        self.ev = [cuda.Event() for _ in range(8)]  # two sets of four: see _EventTiming
        self._set = 0
        self._handles = {0: tuple(e.handle for e in self.ev[0:4]), 4: tuple(e.handle for e in self.ev[4:8])}
        self._last: _EventTiming | None = None
        self._graph_events = False  # True when the compute events are recorded inside the graph
        self._graph_ran = False  # a graph query has run since the capture (outputs() reads its buffers)
        self.dev_inputs = [t.empty(i.shape, dtype=getattr(t, i.dtype), device=engine.device)
                           for i in self.program.inputs]
        self.pinned_in = [cuda.PinnedBuffer(x.numel() * x.element_size()) for x in self.dev_inputs]
        self.host_in = [b.array(i.dtype, tuple(i.shape)) for b, i in zip(self.pinned_in, self.program.inputs)]
        self.pinned_out = [cuda.PinnedBuffer(int(np.prod(o.shape, dtype=np.int64)) * np.dtype(o.dtype).itemsize)
                           for o in self.program.outputs]
        self.host_out = [b.array(o.dtype, tuple(o.shape)) for b, o in zip(self.pinned_out, self.program.outputs)]
        self.dev_outputs: list[Any] = []
        self.graph: Any = None
        self._torch_graph: Any = None
        self._graph_ok = graph_ok
        self._plan = self.program.plan(engine._ranges())
        rt = cuda.runtime()
        self._rt = rt
        self._h2d_args = [(x.data_ptr(), b.ptr, b.nbytes) for x, b in zip(self.dev_inputs, self.pinned_in)]
        self._k_h2d = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._k_d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._d2h_args: list[tuple[int, int, int]] = []

    # -- pieces of a query --
    def _h2d(self) -> None:
        cp, s, k = self._rt.cudaMemcpyAsync, self.stream.handle, self._k_h2d
        for dptr, hptr, n in self._h2d_args:
            err = cp(dptr, hptr, n, k, s)[0]
            if err:
                self._cuda.check((err,), "cudaMemcpyAsync")

    def _compute(self) -> None:
        t = torch
        with t.cuda.stream(self.ext):
            outs = self.program.forward(self.dev_inputs, self._plan)
        self.dev_outputs = outs
        self._d2h_args = [(h.ptr, o.data_ptr(), h.nbytes) for h, o in zip(self.pinned_out, outs)]

    def _d2h(self) -> None:
        cp, s, k = self._rt.cudaMemcpyAsync, self.stream.handle, self._k_d2h
        for hptr, dptr, n in self._d2h_args:
            err = cp(hptr, dptr, n, k, s)[0]
            if err:
                self._cuda.check((err,), "cudaMemcpyAsync")

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        for info, host in zip(self.program.inputs, self.host_in):
            if info.name not in feeds:
                raise BuildError(f"no data for input {info.name!r}")
            arr = np.asarray(feeds[info.name])
            if tuple(arr.shape) != tuple(host.shape):
                raise BuildError(f"input {info.name!r} has shape {tuple(arr.shape)}; the engine was built for "
                                 f"{tuple(host.shape)}")
            np.copyto(host, arr, casting="same_kind" if arr.dtype.kind == host.dtype.kind else "unsafe")
        if not self.transfers:
            self._h2d()  # the one copy the following queries compute on
            self.stream.synchronize()

    def set_transfers(self, on: bool) -> None:
        """Off: queries skip the copies and their two events (see ExecutionContext.set_transfers).

        The choice is made once here, not per query: ``query`` is rebound on the instance, so the
        harness (which looks ``ctx.query`` up once per run) pays no branch for it."""
        self.transfers = bool(on)
        if self.transfers:
            self.__dict__.pop("query", None)
        else:
            self.query = self._query_compute  # type: ignore[method-assign]
            if self.pinned_in:
                self._h2d()  # the inputs already set reach the device once
                self.stream.synchronize()

    def _query_compute(self) -> QueryTiming:
        """A query without transfers: graph launch (its compute events are inside the graph when
        event nodes work, else two records around it) or the eager enqueue between two records; then
        the previous query's compute time is read while this one runs, and the stream is waited on."""
        rt = self._rt
        s = self.stream.handle
        k = self._set
        self._set = 4 - k
        events = self._handles[k]
        graph = self.graph
        t0 = time.perf_counter_ns()
        if graph is not None and self._graph_events:
            err = rt.cudaGraphLaunch(self._graph_execs[k], s)[0]
            if err:
                self._cuda.check((err,), "cudaGraphLaunch")
        else:
            rec = rt.cudaEventRecord
            rec(events[1], s)
            if graph is not None:
                err = rt.cudaGraphLaunch(self._graph_execs[k], s)[0]
                if err:
                    self._cuda.check((err,), "cudaGraphLaunch")
            else:
                with self._eager_stream():
                    self.dev_outputs = self.program.forward(self.dev_inputs, self._plan)
            err = rec(events[2], s)[0]
            if err:
                self._cuda.check((err,), "cudaEventRecord")
        t1 = time.perf_counter_ns()
        self._graph_ran = graph is not None
        last = self._last
        if last is not None and last._pending is not None:
            last._resolve()  # the previous query's compute time, read while this one runs
        err = rt.cudaStreamSynchronize(s)[0]
        t2 = time.perf_counter_ns()
        if err:
            self._cuda.check((err,), "cudaStreamSynchronize (the query failed on the GPU)")
        timing = _new_timing(_ComputeTiming)
        timing.__dict__.update(start_ns=t0, end_ns=t2, enqueue_ms=(t1 - t0) / 1e6, stream=self.stream_index,
                               _compute=0.0, _h2d=None, _d2h=None, _pending=(self, events))
        self._last = timing
        return timing

    def _eager_stream(self) -> Any:
        """The context manager that makes eager kernels run on this context's stream (torch's).

        Separate so that the timed loop's logic can run on a simulated runtime without PyTorch."""
        return _load_torch().cuda.stream(self.ext)

    def query(self) -> QueryTiming:
        rt = self._rt
        rec, s = rt.cudaEventRecord, self.stream.handle
        k = self._set
        self._set = 4 - k
        events = self._handles[k]
        e0, e1, e2, e3 = events
        t0 = time.perf_counter_ns()
        rec(e0, s)
        self._h2d()
        if self.graph is not None:
            in_graph = self._graph_events
            if not in_graph:
                rec(e1, s)
            err = rt.cudaGraphLaunch(self._graph_execs[k], s)[0]
            if err:
                self._cuda.check((err,), "cudaGraphLaunch")
            if not in_graph:
                rec(e2, s)
            self._d2h_args = self._graph_d2h[k]
            self._graph_ran = True
        else:
            rec(e1, s)
            self._compute()
            rec(e2, s)
        self._d2h()
        err = rec(e3, s)[0]
        if err:
            self._cuda.check((err,), "cudaEventRecord")
        t1 = time.perf_counter_ns()
        last = self._last
        if last is not None and last._pending is not None:
            last._resolve()  # the previous query's times, read while this one runs
        err = rt.cudaEventSynchronize(e3)[0]
        t2 = time.perf_counter_ns()
        if err:
            self._cuda.check((err,), "cudaEventSynchronize (the query failed on the GPU)")
        timing = _new_timing(_EventTiming)  # filled directly: the dataclass __init__ costs a microsecond
        timing.__dict__.update(start_ns=t0, end_ns=t2, enqueue_ms=(t1 - t0) / 1e6, stream=self.stream_index,
                               _compute=0.0, _h2d=None, _d2h=None, _pending=(self, events))
        self._last = timing
        return timing

    def run_loop(self, iterations: int, deadline_ns: int, stop: Any,
                 clock: Callable[[], int] = time.perf_counter_ns, overlap: bool = False) -> list[QueryTiming]:
        """The timed phase: what ``query`` does, in one loop, with one or two queries in flight.

        ``overlap`` (trtexec's default; its ``--exposeDMA`` turns it off): the next query is enqueued
        before the previous one is waited for, so the GPU never waits for the host between queries.
        Without it each query is waited for before the next is enqueued. Either way, between a wait
        returning and the next CUDA call the host only reads the clock and checks the stop conditions;
        a query's event times are read, and its QueryTiming built, while a later query runs on the GPU.
        The two event sets (and, with event nodes, the two graphs) alternate, so a set is reused only
        after its query's times were read."""
        cuda = self._cuda
        rt = self._rt
        last = self._last
        if last is not None and last._pending is not None:
            last._resolve()  # a query made before the loop (the warm-up's last)
        self._last = None
        launch, rec, sync = rt.cudaGraphLaunch, rt.cudaEventRecord, rt.cudaStreamSynchronize
        el, wait_event = rt.cudaEventElapsedTime, rt.cudaEventSynchronize
        memcpy = rt.cudaMemcpyAsync
        pc = time.perf_counter_ns
        s = self.stream.handle
        graph = self.graph is not None
        execs = (self._graph_execs[0], self._graph_execs[4]) if graph else (None, None)
        sets = (self._handles[0], self._handles[4])
        moves = self.transfers
        nodes = graph and self._graph_events
        last_event = 3 if moves else 2  # the event that closes a query
        h2d = [(d, h, nb, self._k_h2d, s) for d, h, nb in self._h2d_args]
        d2h = tuple([(h, d, nb, self._k_d2h, s) for h, d, nb in self._graph_d2h[k]] for k in (0, 4)) if graph else ()
        pinned_out, k_d2h = self.pinned_out, self._k_d2h
        program, inputs, plan = self.program, self.dev_inputs, self._plan
        index = self.stream_index
        new = _new_timing
        kept: list[QueryTiming] = []
        append = kept.append

        def finish(t0: int, t1: int, t2: int, ev: tuple) -> None:
            timing = new(QueryTiming)  # filled directly: the dataclass __init__ costs a microsecond
            c = el(ev[1], ev[2])
            if moves:
                a, b = el(ev[0], ev[1]), el(ev[2], ev[3])
                if a[0] or b[0] or c[0]:
                    cuda.check((a[0] or b[0] or c[0],), "cudaEventElapsedTime")
                timing.__dict__.update(start_ns=t0, end_ns=t2, enqueue_ms=(t1 - t0) / 1e6, stream=index,
                                       h2d_ms=a[1], compute_ms=c[1], d2h_ms=b[1])
            else:
                if c[0]:
                    cuda.check((c[0],), "cudaEventElapsedTime")
                timing.__dict__.update(start_ns=t0, end_ns=t2, enqueue_ms=(t1 - t0) / 1e6, stream=index,
                                       h2d_ms=None, compute_ms=c[1], d2h_ms=None)
            append(timing)

        def land(q: tuple) -> None:
            """Wait for an in-flight query (overlap on), then read its times."""
            t0, t1, ev = q
            bad = wait_event(ev[last_event])[0]
            t2 = pc()
            if bad:
                cuda.check((bad,), "cudaEventSynchronize (the query failed on the GPU)")
            finish(t0, t1, t2, ev)

        k = self._set // 4
        done: tuple | None = None  # overlap off: the last query, waited for, times not yet read
        flying: tuple | None = None  # overlap on: the query enqueued before the current one
        n = 0
        eager = None if graph else self._eager_stream()
        if eager is not None:
            eager.__enter__()
        try:
            while not stop.set:
                ev = sets[k]
                t0 = pc()
                if moves:
                    bad = rec(ev[0], s)[0]
                    for a in h2d:
                        bad = memcpy(*a)[0] or bad
                    if not nodes:
                        bad = rec(ev[1], s)[0] or bad
                    if graph:
                        bad = launch(execs[k], s)[0] or bad
                        copies = d2h[k]
                    else:
                        outs = program.forward(inputs, plan)
                        self.dev_outputs = outs
                        copies = [(h.ptr, o.data_ptr(), h.nbytes, k_d2h, s) for h, o in zip(pinned_out, outs)]
                    if not nodes:
                        bad = rec(ev[2], s)[0] or bad
                    for a in copies:
                        bad = memcpy(*a)[0] or bad
                    bad = rec(ev[3], s)[0] or bad
                elif nodes:
                    bad = launch(execs[k], s)[0]
                else:
                    bad = rec(ev[1], s)[0]
                    if graph:
                        bad = launch(execs[k], s)[0] or bad
                    else:
                        self.dev_outputs = program.forward(inputs, plan)
                    bad = rec(ev[2], s)[0] or bad
                t1 = pc()
                if bad:
                    cuda.check((bad,), "enqueueing a query")
                if overlap:
                    if flying is not None:  # wait for the previous query while this one is queued behind it
                        land(flying)
                    flying = (t0, t1, ev)
                else:
                    if done is not None:
                        finish(*done)  # the previous query's times, read while this one runs
                    bad = sync(s)[0]
                    t2 = pc()
                    if bad:
                        cuda.check((bad,), "cudaStreamSynchronize (the query failed on the GPU)")
                    done = (t0, t1, t2, ev)
                k ^= 1
                n += 1
                if n >= iterations and clock() >= deadline_ns:
                    break
            if flying is not None:
                land(flying)
            if done is not None:
                finish(*done)
        finally:
            if eager is not None:
                eager.__exit__(None, None, None)
            self._set = 4 * k
            self._graph_ran = self._graph_ran or (graph and n > 0)
        return kept

    def outputs(self) -> dict[str, np.ndarray]:
        if not self.transfers:  # the last query's outputs are still on the device: copy them now
            if self.graph is not None and self._graph_ran:
                self._d2h_args = self._graph_d2h[4 - self._set]  # the graph (event set) the last query used
            elif self.graph is None and self.dev_outputs:
                self._d2h_args = [(h.ptr, o.data_ptr(), h.nbytes) for h, o in zip(self.pinned_out, self.dev_outputs)]
            self._d2h()
            self.stream.synchronize()
        return {o.name: h.copy() for o, h in zip(self.program.outputs, self.host_out)}

    def enable_cuda_graph(self) -> str | None:
        """Capture the compute (the steps) with torch.cuda.graph on this context's stream and launch it
        with cudaGraphLaunch per query. Returns None, or why it fell back to plain enqueue.

        One graph is captured, and the compute events are recorded around its launch. With the
        backend's ``graph_events``, two graphs are captured instead, one per event set, each recording
        its set's compute-start and compute-end events from inside (event-record nodes); queries then
        alternate between them. Either way a query's times are read while a later query runs."""
        if not self._graph_ok:
            return "CUDA graphs are off for this pass"
        t = torch
        ev_in_graph = self._event_nodes_ok()
        captured = []
        try:
            for _ in range(3):  # warm-up on the capture stream: lazy library init stays out of the graph
                self._h2d()
                self._compute()
            self.stream.synchronize()
            for k in ((0, 4) if ev_in_graph else (0,)):  # host-recorded events: one graph serves both sets
                g = t.cuda.CUDAGraph()
                with t.cuda.graph(g, stream=self.ext):
                    if ev_in_graph:
                        self._record_external(self.ev[k + 1].handle)
                    outs = self.program.forward(self.dev_inputs, self._plan)
                    if ev_in_graph:
                        self._record_external(self.ev[k + 2].handle)
                self.stream.synchronize()
                captured.append((g, outs))
        except Exception as exc:  # capture failed: say why and keep running eagerly
            try:
                self._rt.cudaGetLastError()
                self.stream.synchronize()
            except Exception:
                pass
            return f"graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        try:
            execs = [g.raw_cuda_graph_exec() for g, _ in captured]
        except Exception as exc:
            return f"the captured graph has no launchable handle: {type(exc).__name__}: {exc}"
        if len(captured) == 1:
            captured.append(captured[0])
            execs.append(execs[0])
        self._torch_graph = captured
        self._graph_execs = {0: execs[0], 4: execs[1]}
        self._graph_d2h = {k: [(h.ptr, o.data_ptr(), h.nbytes) for h, o in zip(self.pinned_out, outs)]
                           for k, (_, outs) in zip((0, 4), captured)}
        self.dev_outputs = captured[0][1]
        self._d2h_args = self._graph_d2h[0]
        self.graph = self._cuda.CudaGraph.from_exec(execs[0])
        self._graph_events = ev_in_graph
        self._graph_ran = False
        return None

    def _event_nodes_ok(self) -> bool:
        """Event-record nodes (cudaEventRecordExternal) time the compute from inside the graph, so a
        query launches one graph with no event records of its own around it."""
        return bool(getattr(self._rt, "cudaEventRecordExternal", None) is not None) and self.engine.backend.graph_events

    def _record_external(self, event: Any) -> None:
        rt = self._rt
        self._cuda.check(rt.cudaEventRecordWithFlags(event, self.stream.handle, rt.cudaEventRecordExternal),
                         "cudaEventRecordWithFlags (inside graph capture)")

    def close(self) -> None:
        last, self._last = self._last, None
        if last is not None and last._pending is not None and self.ev:
            try:
                last._resolve()
            except Exception:
                pass
        try:
            if self.graph is not None:
                self.graph.destroy()
            self.graph = None
            self._torch_graph = None
            self.stream.synchronize()
        except Exception:
            pass
        for b in self.pinned_in + self.pinned_out:
            try:
                b.free()
            except Exception:
                pass
        self.pinned_in, self.pinned_out, self.host_in, self.host_out = [], [], [], []
        for e in self.ev:
            try:
                e.destroy()
            except Exception:
                pass
        self.ev = []
        self.dev_inputs, self.dev_outputs = [], []
        try:
            self.stream.destroy()
        except Exception:
            pass
