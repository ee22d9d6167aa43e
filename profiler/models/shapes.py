"""Concrete input shapes: ``--shape name:1x3x224x224`` parsing and checking against the model.

Every engine is built and timed for concrete shapes. Static inputs keep the model's shape; a dynamic
input needs ``--shape``, and the error says which input and which of its dimensions are dynamic.
"""

from __future__ import annotations

import re
from typing import Iterable

from profiler.errors import UsageError
from profiler.models.inspect import ModelInfo, is_static

_DIMS_RE = re.compile(r"\d+(?:[x,]\d+)*")


def parse_shape_args(args: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``["x:1x3x224x224"]`` -> ``{"x": (1, 3, 224, 224)}``; UsageError on bad syntax or repeats.

    The name is everything before the last colon, so TensorFlow-style names (``input:0``) work.
    Dimensions are separated by ``x`` as trtexec spells them (or commas) and must be positive integers;
    Polygraphy's spelling, the dimensions in brackets (``x:[1,3,224,224]``), is accepted as well.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for raw in args:
        text = raw.strip()
        name, sep, dims = text.rpartition(":")
        dims = _unbracketed(dims.strip().lower())
        if not sep or not name or not _DIMS_RE.fullmatch(dims):
            raise UsageError(f"--shape {raw!r} is not NAME:DIMS with DIMS like 1x3x224x224 (or [1,3,224,224])")
        shape = tuple(int(d) for d in re.split(r"[x,]", dims))
        if any(d <= 0 for d in shape):
            raise UsageError(f"--shape {raw!r} has a dimension that is not a positive integer")
        if name in shapes:
            raise UsageError(f"--shape gives input {name!r} twice")
        check_shape_size(raw, shape)
        shapes[name] = shape
    return shapes


def _unbracketed(dims: str) -> str:
    """'[1, 3, 224, 224]' -> '1,3,224,224' (Polygraphy's spelling); other text unchanged but for spaces
    after commas."""
    if len(dims) >= 2 and dims[0] == "[" and dims[-1] == "]":
        dims = dims[1:-1]
    return re.sub(r"\s*,\s*", ",", dims)


def check_shape_size(raw: str, shape: tuple[int, ...], *, item_bytes: int = 4) -> None:
    """UsageError, before anything is allocated, for a shape whose one tensor would not fit in half
    of this machine's memory (x:1x3x100000x100000 is 112 GiB of float32)."""
    elements = 1
    for d in shape:
        elements *= d
    need = elements * item_bytes
    limit = max_tensor_bytes()
    if need > limit:
        raise UsageError(f"--shape {raw!r} is {elements:.3g} elements: one float32 tensor needs "
                         f"{_gib(need)}, more than the {_gib(limit)} (half this machine's memory) allowed")


def max_tensor_bytes() -> int:
    """Half the physical memory (TRTPROF_MAX_TENSOR_BYTES overrides), 1 TiB when it cannot be read."""
    import os

    env = os.environ.get("TRTPROF_MAX_TENSOR_BYTES")
    if env and env.isdigit():
        return int(env)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def format_shape(shape: Iterable[int]) -> str:
    """(1, 3, 224, 224) -> '1x3x224x224'."""
    return "x".join(str(d) for d in shape)


def _example(dims: tuple) -> str:
    """A plausible concrete shape to suggest: 1 for a dynamic leading (batch) dim, 224 elsewhere."""
    out = []
    for i, d in enumerate(dims):
        out.append(str(d) if isinstance(d, int) and d > 0 else ("1" if i == 0 else "224"))
    return "x".join(out)


def resolve_shapes(info: ModelInfo, shapes: dict[str, tuple[int, ...]] | None) -> dict[str, tuple[int, ...]]:
    """A concrete shape for every model input, in the model's input order.

    Raises UsageError when ``shapes`` names an unknown input, contradicts a static dimension or has
    the wrong rank, or when a dynamic input has no shape.
    """
    shapes = dict(shapes or {})
    names = [t.name for t in info.inputs]
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise UsageError(f"--shape names input {unknown[0]!r}, which the model does not have "
                         f"(its inputs: {', '.join(repr(n) for n in names)})")
    resolved: dict[str, tuple[int, ...]] = {}
    for t in info.inputs:
        given = shapes.get(t.name)
        rank_known = t.name not in info.unknown_rank
        if given is None:
            if rank_known and is_static(t.shape):
                resolved[t.name] = tuple(d for d in t.shape if isinstance(d, int))  # static: all ints
                continue
            if not rank_known:
                raise UsageError(f"input {t.name!r} has no declared shape; give --shape {t.name}:DIMS "
                                 f"(e.g. {t.name}:1x3x224x224)")
            raise UsageError(f"input {t.name!r} has dynamic dimensions {list(t.shape)}; "
                             f"give --shape {t.name}:{_example(t.shape)}")
        given = tuple(int(d) for d in given)
        if rank_known:
            if len(given) != len(t.shape):
                raise UsageError(f"--shape {t.name}:{format_shape(given)} has rank {len(given)}, but input "
                                 f"{t.name!r} has rank {len(t.shape)} {list(t.shape)}")
            for axis, (g, d) in enumerate(zip(given, t.shape)):
                if isinstance(d, int) and d > 0 and g != d:
                    raise UsageError(f"--shape {t.name}:{format_shape(given)} contradicts the model: "
                                     f"dimension {axis} of input {t.name!r} is fixed at {d} ({list(t.shape)})")
        resolved[t.name] = given
    return resolved
