"""Precision variants as ONNX models: fp32 (the original), fp16 (converted), int8 (Q/DQ calibrated).

TensorRT 11 builds strongly typed networks, so an engine's precision is whatever the ONNX model says;
every backend builds the same transformed file, which is why accuracy can be checked anywhere::

    prepared = prepare("model.onnx", "int8", shapes={"x": (1, 3, 224, 224)}, calib="calib/",
                       calib_method="entropy", cache_dir=".trtprof-cache", progress=print)
    prepared.path          # the ONNX file to build
    prepared.info          # converter and version, nodes kept in fp32, calibration, cache hit, warnings

Transformed models are cached (see :mod:`profiler.variants.cache`); a second ``prepare`` with the same
model, data and options returns the stored file without recalibrating.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from profiler.backends.base import PRECISIONS
from profiler.errors import UsageError
from profiler.variants.cache import VariantCache, cache_key, default_cache_dir

Progress = Callable[[str], None]

CALIB_METHODS = ("entropy", "minmax", "percentile")

#: shown in the terminal and the report whenever int8 was calibrated without --calib
RANDOM_CALIBRATION_WARNING = (
    "INT8 CALIBRATION USED RANDOM INPUTS (no --calib given): the int8 variant's accuracy numbers "
    "mean nothing; its timings are still valid. Pass --calib DATA with a few hundred representative inputs."
)


@dataclass
class PreparedModel:
    """The ONNX file to build for one precision, and how it was made."""

    path: Path
    precision: str
    info: dict[str, Any] = field(default_factory=dict)
    model_hash: str = ""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        return list(self.info.get("warnings", []))

    @property
    def calibration_meaningless(self) -> bool:
        return bool((self.info.get("calibration") or {}).get("meaningless"))


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def prepare(model_path: str | Path, precision: str, *, shapes: dict[str, tuple[int, ...]] | None,
            calib: str | Path | None = None, calib_method: str = "entropy",
            cache_dir: str | Path | None = None, progress: Progress | None = None,
            keep_fp32: Iterable[str] = (), seed: int = 0, random_calib_samples: int = 8,
            holdout_fraction: float = 0.0, fp16_range_check: bool = True) -> PreparedModel:
    """Make (or fetch from the cache) the ONNX model of ``precision`` for ``model_path``.

    ``shapes``: concrete shapes (partial is fine for static inputs); a dynamic input without one
    raises UsageError. ``calib``: .npz or directory for int8; without it int8 calibrates on
    ``random_calib_samples`` seeded random inputs and is flagged meaningless. ``keep_fp32``: node
    names or op types to leave in float32 (fp16 block list, int8 exclusions). ``holdout_fraction``:
    the last part of ``calib`` not used for calibration (see ``profiler.models.split_holdout``), so
    the sweep can check accuracy on data the calibration did not see. ``fp16_range_check``: keep in
    float32 the nodes whose activations near float16's range on sample inputs (``calib``, else seeded
    random ones; :func:`profiler.variants.fp16.activation_overflow_nodes`).
    """
    from profiler.models import file_sha256, inspect_model, resolve_shapes

    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    if calib_method not in CALIB_METHODS:
        raise UsageError(f"unknown calibration method {calib_method!r}; choose from {', '.join(CALIB_METHODS)}")
    started = time.perf_counter()
    src = Path(model_path)
    info_src = inspect_model(src)
    resolved = resolve_shapes(info_src, shapes)
    keep = sorted(set(keep_fp32))
    base: dict[str, Any] = {"precision": precision, "source_model": str(src),
                            "source_model_hash": info_src.model_hash, "warnings": []}
    if precision == "fp32":
        base.update({"converter": None, "converter_version": None, "nodes_kept_fp32": [],
                     "calibration": None, "cache_hit": False, "prepare_s": 0.0})
        return PreparedModel(src, precision, base, info_src.model_hash, resolved)

    cache = VariantCache(cache_dir if cache_dir is not None else default_cache_dir())
    if precision == "fp16":
        from profiler.variants import fp16

        # sample inputs for the activation range check: the calibration data when given, else seeded random
        from profiler.models import make_inputs, samples_hash

        feeds = make_inputs(info_src, resolved, source=calib, seed=seed, count=4)[:8] if fp16_range_check else []
        key = cache_key({"model": info_src.model_hash, "precision": "fp16", "keep_fp32": keep,
                         "converter": fp16.converter_version(), "block_list": fp16.fp32_op_block_list(),
                         "recipe": fp16.RECIPE_VERSION, "range_feeds": samples_hash(feeds) if feeds else None})
        hit = cache.lookup(key, "fp16")
        if hit is not None:
            _say(progress, f"fp16: reusing cached conversion {hit[0].name}")
            path, stored = hit
            info = {**base, **stored, "cache_hit": True, "cache_key": key}
        else:
            _say(progress, f"fp16: converting {src.name} with onnxconverter-common")
            tmp = cache.new_temp_path("fp16")
            try:
                made = fp16.convert_fp16(src, tmp, keep_fp32_nodes=keep, range_feeds=feeds or None)
                path = cache.store(key, "fp16", tmp, made)
            finally:
                tmp.unlink(missing_ok=True)
            for note in made.get("warnings") or []:
                if "activations reach" in note or "range check could not run" in note:
                    _say(progress, note)  # a decision about the model that is timed: said, not only stored
            info = {**base, **made, "calibration": None, "cache_hit": False, "cache_key": key}
        info.setdefault("calibration", None)
        info["prepare_s"] = round(time.perf_counter() - started, 3)
        return PreparedModel(path, precision, info, file_sha256(path), resolved)

    from profiler.variants import int8

    return int8.prepare_int8(src, info_src, resolved, base=base, cache=cache, calib=calib,
                             calib_method=calib_method, progress=progress, keep_fp32=keep, seed=seed,
                             random_calib_samples=random_calib_samples, holdout_fraction=holdout_fraction,
                             started=started)


__all__ = ["CALIB_METHODS", "PreparedModel", "RANDOM_CALIBRATION_WARNING", "VariantCache", "cache_key",
           "default_cache_dir", "prepare"]
