"""On a precision breach: where the error starts (node by node against FP32) and what keeping those
nodes in FP32 buys. Localization explains a breach; a failure here never loses the measurement."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler.backends.base import VariantSpec
from profiler.findings import json_safe
from profiler.progress import phase
from profiler.sweep.config import SweepConfig

RANDOM_CALIBRATION_SKIP = ("skipped: the int8 calibration used random inputs, so where its error starts says "
                           "nothing about real data (pass --calib)")


def localize_breach(spec: VariantSpec, model_path: Path, variant_path: Path, feeds: list[dict[str, np.ndarray]],
             calibration: dict[str, Any], config: SweepConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """The per-node error curve, the nodes to keep in FP32 and (when there are some) a verification
    that keeping them helps; ``{"skipped": why}`` or ``{"error": ...}`` when it cannot say."""
    key = spec.key
    if calibration.get("meaningless"):
        say(f"  {key}: precision localization {RANDOM_CALIBRATION_SKIP}")
        return {"skipped": RANDOM_CALIBRATION_SKIP}
    say(f"  {key}: accuracy breached: localizing the error node by node against fp32")
    try:
        result = _localize(spec, model_path, variant_path, feeds, config, say)
        say(f"  {key}: {result['conclusion']}")
        return json_safe(result)
    except Exception as exc:  # localization explains a breach; it must not lose the measurement
        say(f"  {key}: precision localization failed: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def _localize(spec: VariantSpec, model_path: Path, variant_path: Path, feeds: list[dict[str, np.ndarray]],
              config: SweepConfig, say: Callable[[str], None]) -> dict[str, Any]:
    from profiler.compare.precision import keep_candidates, localize

    key = spec.key
    with phase(say, f"  {key}: localizing (running both models node by node)"):
        found = localize(model_path, variant_path, feeds[:2], progress=lambda m: say(f"  {key}: {m}"))
    keep = keep_candidates(found)
    result: dict[str, Any] = {k: found[k] for k in ("nodes_compared", "final_rel_l2", "first_jumps",
                                                    "largest_jumps", "jump_factor", "floor")}
    result["curve"] = [{k: c[k] for k in ("index", "node", "op", "rel_l2")} for c in found["curve"]]
    if keep:
        say(f"  {key}: verifying with {', '.join(keep)} kept in fp32")
        check = _verify(spec, model_path, variant_path, feeds, keep, config, say)
        result["verification"] = check
        result["conclusion"] = check["conclusion"]["text"]
        if check["conclusion"].get("localized"):  # the option that builds the variant so
            result["keep_fp32_option"] = f"--keep-fp32 {','.join(keep)}"
            result["conclusion"] += f"; build the variant so with trtprof sweep {result['keep_fp32_option']}"
    else:
        worst = max(found["curve"], key=lambda c: c["rel_l2"], default=None)
        result["conclusion"] = (
            f"no node's error jumps (>= {found['jump_factor']:g}x its inputs' and above "
            f"{found['floor']:g}): the error grows gradually to {found['final_rel_l2']:.3g}"
            + (f", largest at {worst['node']} ({worst['rel_l2']:.3g})" if worst else "")
            + "; tighten thresholds only if this error matters to the application")
    return result


def _verify(spec: VariantSpec, model_path: Path, variant_path: Path, feeds: list[dict[str, np.ndarray]],
            keep: list[str], config: SweepConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """The variant rebuilt with ``keep`` in FP32, compared (accuracy, latency) with the variant itself."""
    from profiler.compare.precision import verify

    calib = None
    if spec.precision == "int8":
        from profiler.models import inspect_model, make_inputs

        info = inspect_model(model_path)
        calib = make_inputs(info, spec.shape_dict, source=config.calib, seed=config.seed,
                            count=8) if config.calib else feeds
    # a private scratch folder: concurrent sweeps sharing the cache never share its files
    scratch = config.cache_root() / "localize"
    scratch.mkdir(parents=True, exist_ok=True)
    with phase(say, f"  {spec.key}: verifying"), \
            tempfile.TemporaryDirectory(prefix=f"{spec.key}-", dir=scratch) as work:
        return verify(model_path, spec.precision, keep, feeds[:2], variant_model=variant_path, work_dir=work,
                      calib_samples=calib, calib_method=config.calib_method)
