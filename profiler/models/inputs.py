"""Input data for a model: user files (``--inputs``/``--calib``) or seeded random tensors.

A data source is an ``.npz`` file keyed by input name, or a directory of them (read in name order).
In each file an array either has exactly the input's resolved shape (one sample), or one extra
leading axis of N samples (``x`` of shape ``(N, 1, 3, 224, 224)`` holds N samples); every input in a
file must then hold the same N. Keys that are not model inputs are ignored (labels may ride along).
Dtypes must match the model exactly: silently casting float64 images hides preprocessing bugs.

Random data, when no source is given, stays in the range a normalized network input lives in:
floats uniform in [-1, 1), integers in [0, 10) (indices, token ids, small counts), uint8 in
[0, 256), bools fair coin flips. Same seed, same data.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

import numpy as np

from profiler.errors import InputError
from profiler.models.inspect import ModelInfo
from profiler.models.shapes import format_shape, resolve_shapes

Sample = dict[str, np.ndarray]


def random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """One seeded tensor in a sensible range for its dtype (see the module docstring)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dt)
    if dt == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if dt.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dt)
    raise InputError(f"cannot make random data of dtype {dtype}; give input data with --inputs")


def random_samples(info: ModelInfo, shapes: dict[str, tuple[int, ...]], *, seed: int = 0,
                   count: int = 1) -> list[Sample]:
    """``count`` seeded random samples for the resolved ``shapes``."""
    rng = np.random.default_rng(seed)
    try:
        return [{t.name: random_tensor(rng, shapes[t.name], t.dtype) for t in info.inputs} for _ in range(count)]
    except MemoryError:  # under the declared-size limit, yet more than this machine has free now
        need = sum(int(np.prod(shapes[t.name], dtype=np.float64)) * np.dtype(t.dtype).itemsize for t in info.inputs)
        raise InputError(f"{count} random sample(s) of the inputs of {info.path.name} ({format_shape(shapes[info.inputs[0].name])} "
                         f"...) need {need * count / (1 << 30):.3g} GiB, more memory than this machine has free; give "
                         "smaller --shape values") from None


def _npz_files(source: Path) -> list[Path]:
    if source.is_dir():
        files = sorted(source.glob("*.npz"))
        if not files:
            raise InputError(f"data directory {str(source)!r} holds no .npz files")
        return files
    from profiler.files import check_input_file

    check_input_file(source, "data file", "an .npz file or a directory of them")
    return [source]


def _samples_from_file(path: Path, info: ModelInfo, shapes: dict[str, tuple[int, ...]]) -> list[Sample]:
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic.startswith(b"\x93NUMPY"):
        raise InputError(f"data file {str(path)!r} is a single .npy array; save the inputs with "
                         f"numpy.savez(path, **{{input_name: array}}) so each array is keyed by its input name")
    if not magic.startswith(b"PK"):
        raise InputError(f"data file {str(path)!r} is not an .npz archive (numpy.savez output)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except Exception as exc:
        raise InputError(f"data file {str(path)!r} is not a readable .npz file: {type(exc).__name__}: {exc}") from exc
    per_input: dict[str, list[np.ndarray]] = {}
    n_samples: int | None = None
    for t in info.inputs:
        if t.name not in arrays:
            raise InputError(f"data file {str(path)!r} has no array for input {t.name!r} "
                             f"(it has: {', '.join(repr(k) for k in arrays) or 'nothing'})")
        a = arrays[t.name]
        expected = tuple(shapes[t.name])
        if a.dtype != np.dtype(t.dtype):
            raise InputError(f"input {t.name!r} in {str(path)!r}: expected dtype {t.dtype}, found {a.dtype}")
        if tuple(a.shape) == expected:
            items = [a]
        elif a.ndim == len(expected) + 1 and tuple(a.shape[1:]) == expected:
            items = [a[i] for i in range(a.shape[0])]
        else:
            raise InputError(f"input {t.name!r} in {str(path)!r}: expected shape {format_shape(expected)} "
                             f"(or N x {format_shape(expected)}), found {format_shape(a.shape)}")
        if n_samples is not None and len(items) != n_samples:
            raise InputError(f"data file {str(path)!r} holds {n_samples} samples for one input but "
                             f"{len(items)} for input {t.name!r}")
        n_samples = len(items)
        per_input[t.name] = items
    return [{name: np.ascontiguousarray(per_input[name][i]) for name in per_input} for i in range(n_samples or 0)]


def load_samples(source: str | Path, info: ModelInfo, shapes: dict[str, tuple[int, ...]]) -> list[Sample]:
    """Every sample in an .npz file or a directory of them, checked against the resolved shapes."""
    samples: list[Sample] = []
    for f in _npz_files(Path(source)):
        samples.extend(_samples_from_file(f, info, shapes))
    if not samples:
        raise InputError(f"data source {str(source)!r} holds no samples")
    return samples


def make_inputs(info: ModelInfo, shapes: dict[str, tuple[int, ...]] | None, *, source: str | Path | None = None,
                seed: int = 0, count: int = 1) -> list[Sample]:
    """Input batches for ``info``: every sample of ``source``, else ``count`` seeded random ones.

    ``shapes`` may be partial (static inputs are filled in); a dynamic input without a shape raises
    UsageError. Wrong shape or dtype in ``source`` raises InputError naming the input.
    """
    resolved = resolve_shapes(info, shapes)
    if source is not None:
        return load_samples(source, info, resolved)
    return random_samples(info, resolved, seed=seed, count=count)


def split_holdout(samples: list[Sample], fraction: float = 0.2) -> tuple[list[Sample], list[Sample]]:
    """Split samples into (calibration, held-out) parts; the held-out part is the last ``fraction``.

    With fewer than two samples nothing can be held out: everything is calibration data.
    """
    if len(samples) < 2 or fraction <= 0:
        return list(samples), []
    n_hold = min(len(samples) - 1, max(1, int(round(len(samples) * fraction))))
    return list(samples[:-n_hold]), list(samples[-n_hold:])


def samples_hash(samples: Iterable[Sample]) -> str:
    """sha256 over the names, dtypes, shapes and bytes of samples (a calibration cache key part)."""
    h = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            a = np.ascontiguousarray(sample[name])
            h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
        h.update(b"\x00")
    return h.hexdigest()
