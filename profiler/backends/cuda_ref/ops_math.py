"""Op factories: elementwise, activations, casts, matrix products, softmax, reductions.

A factory takes a :class:`~profiler.backends.cuda_ref.nodes.Node` (attributes and the build-time values
of its inputs) and returns the step's function, or ``(function, used input indices)``; everything that
can be decided at build time is decided here, so the function only launches kernels."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from profiler.backends.cuda_ref.nodes import Node, onnx_dtype, op
from profiler.backends.cuda_ref._torch import bind

torch: Any = None  # bound to PyTorch by _torch.load_torch()
F: Any = None
bind(globals())


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
def _unary(n: Node) -> Any:
    return _UNARY[n.op]()


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "Equal": "eq",
           "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge", "And": "logical_and",
           "Or": "logical_or", "Xor": "logical_xor"}


@op(*_BINARY)
def _binary(n: Node) -> Any:
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
def _variadic(n: Node) -> Any:
    f = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add}.get(n.op)
    count = len(n.values)

    def run(*xs: Any) -> Any:
        acc = xs[0]
        for x in xs[1:]:
            acc = (f or torch.add)(acc, x)
        return acc / count if n.op == "Mean" else acc
    return run


@op("Where")
def _where(n: Node) -> Any:
    return torch.where


@op("Clip")
def _clip(n: Node) -> Any:
    if n.opset < 11:
        lo, hi = n.attrs.get("min"), n.attrs.get("max")
    else:
        lo = n.floats(1)[0] if n.has(1) else None
        hi = n.floats(2)[0] if n.has(2) else None
    if lo is not None and hi is not None and lo == 0.0 and hi == 6.0:
        return F.relu6, [0]
    return (lambda x: torch.clamp(x, lo, hi)), [0]


@op("HardSigmoid")
def _hardsigmoid(n: Node) -> Any:
    alpha, beta = float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
    if abs(alpha - 1.0 / 6.0) < 1e-6 and beta == 0.5:
        return F.hardsigmoid
    return lambda x: torch.clamp(x * alpha + beta, 0.0, 1.0)


@op("LeakyRelu")
def _leaky(n: Node) -> Any:
    a = float(n.attrs.get("alpha", 0.01))
    return lambda x: F.leaky_relu(x, a)


@op("Elu")
def _elu(n: Node) -> Any:
    a = float(n.attrs.get("alpha", 1.0))
    return lambda x: F.elu(x, a)


@op("PRelu")
def _prelu(n: Node) -> Any:
    return lambda x, s: torch.where(x >= 0, x, x * s)


@op("Gelu")
def _gelu(n: Node) -> Any:
    approx = n.attrs.get("approximate", "none")
    return lambda x: F.gelu(x, approximate=approx)


@op("Cast")
def _cast(n: Node) -> Any:
    dt = onnx_dtype(int(n.attrs["to"]))
    return lambda x: x.to(dt)


@op("Identity", "Dropout")
def _identity(n: Node) -> Any:
    return (lambda x: x), [0]


# -- matrix products, softmax, reductions ------------------------------------------------------------
@op("MatMul")
def _matmul(n: Node) -> Any:
    return torch.matmul


@op("Gemm")
def _gemm(n: Node) -> Any:
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


def _softmax_like(n: Node, f: Callable[..., Any]) -> Any:
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
def _softmax(n: Node) -> Any:
    return _softmax_like(n, torch.softmax)


@op("LogSoftmax")
def _logsoftmax(n: Node) -> Any:
    return _softmax_like(n, torch.log_softmax)


def _reduce_axes(n: Node) -> tuple[int, ...] | None:
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
def _reduce(n: Node) -> Any:
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
def _argmax(n: Node) -> Any:
    axis = int(n.attrs.get("axis", 0))
    keep = bool(int(n.attrs.get("keepdims", 1)))
    if int(n.attrs.get("select_last_index", 0)):
        raise n.unsupported("select_last_index")
    f = torch.argmax if n.op == "ArgMax" else torch.argmin
    return lambda x: f(x, dim=axis, keepdim=keep)
