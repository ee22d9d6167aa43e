"""Op factories: shapes and indexing, and the shape-only ops folded at build time (Shape, Constant, ...)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from profiler.backends.cuda_ref.nodes import Node, tensor_from_proto, op
from profiler.backends.cuda_ref.ops_nn import torch_pad
from profiler.backends.cuda_ref._torch import bind

torch: Any = None  # bound to PyTorch by _torch.load_torch()
F: Any = None
bind(globals())


# -- shapes and indexing -----------------------------------------------------------------------------
@op("Reshape")
def _reshape(n: Node) -> Any:
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
def _flatten(n: Node) -> Any:
    shape = n.shape(0)
    axis = int(n.attrs.get("axis", 1)) % (len(shape) + 1) if shape else 0
    final = (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))
    return lambda x: x.reshape(final)


@op("Transpose")
def _transpose(n: Node) -> Any:
    rank = len(n.shape(0))
    perm = tuple(n.attrs.get("perm", list(reversed(range(rank)))))
    return lambda x: x.permute(perm)


def _axes_of(n: Node) -> list[int]:
    if "axes" in n.attrs:
        return list(n.attrs["axes"])
    if n.has(1):
        return n.ints(1, "axes")
    return []


@op("Squeeze")
def _squeeze(n: Node) -> Any:
    shape = n.shape(0)
    axes = [a % len(shape) for a in _axes_of(n)] or [i for i, d in enumerate(shape) if d == 1]
    final = tuple(d for i, d in enumerate(shape) if i not in axes)
    return (lambda x: x.reshape(final)), [0]


@op("Unsqueeze")
def _unsqueeze(n: Node) -> Any:
    shape = list(n.shape(0))
    axes = _axes_of(n)
    rank = len(shape) + len(axes)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    final = tuple(shape)
    return (lambda x: x.reshape(final)), [0]


@op("Concat")
def _concat(n: Node) -> Any:
    axis = int(n.attrs["axis"])
    used = [i for i in range(len(n.values)) if n.has(i) and n.values[i].numel() > 0] or [0]
    return (lambda *xs: torch.cat(xs, axis)), used


@op("Split")
def _split(n: Node) -> Any:
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
def _slice(n: Node) -> Any:
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
def _gather(n: Node) -> Any:
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
def _expand(n: Node) -> Any:
    target = n.ints(1, "shape")
    src = n.shape(0)
    final = tuple(np.broadcast_shapes(tuple(src), tuple(target)))
    return (lambda x: x.expand(final)), [0]


@op("Tile")
def _tile(n: Node) -> Any:
    reps = tuple(n.ints(1, "repeats"))
    return (lambda x: x.repeat(reps)), [0]


@op("Pad")
def _pad(n: Node) -> Any:
    mode = n.attrs.get("mode", "constant")
    pads = list(n.attrs["pads"]) if n.opset < 11 else n.ints(1, "pads")
    value = float(n.attrs.get("value", 0.0)) if n.opset < 11 else (n.floats(2)[0] if n.has(2) else 0.0)
    if n.has(3):
        raise n.unsupported("Pad with axes")
    tp = torch_pad(pads)
    while len(tp) >= 2 and tp[-2:] == [0, 0] and mode != "constant":
        tp = tp[:-2]
    tmode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(mode)
    if tmode is None:
        raise n.unsupported(f"Pad mode {mode!r}")
    if tmode == "constant":
        return (lambda x: F.pad(x, tp, value=value)), [0]
    return (lambda x: F.pad(x, tp, mode=tmode)), [0]



#: ops whose outputs depend only on shapes or constants: always folded (never a runtime step)
SHAPE_OPS = {"Shape", "Size", "ConstantOfShape", "Range", "Constant"}


def fold_shape_op(n: Node, outputs: int) -> list[Any] | None:
    """Build-time values of shape-only ops (Shape, Size, Constant, ConstantOfShape, Range)."""
    if n.op == "Constant":
        a = n.proto.attribute[0]
        from onnx import helper

        v = helper.get_attribute_value(a)
        if a.name == "value":
            return [tensor_from_proto(v)]
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
            v = tensor_from_proto(n.attrs["value"])
            return [torch.full(shape, v.reshape(-1)[0].item(), dtype=v.dtype)]
        return [torch.zeros(shape, dtype=torch.float32)]
    if n.op == "Range":
        start, limit, delta = (n.const(i) for i in range(3))
        return [torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]
    return None
