"""A variant's outputs against FP32's on the same inputs: the gated metrics, the model's own arithmetic
beside them where the timed engine is not faithful to the precision, and stored verdicts rebuilt on resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from profiler.backends.base import VariantSpec
from profiler.findings import Finding
from profiler.rules.context import AccuracyCheck
from profiler.sweep.config import SweepConfig

Outputs = list[dict[str, np.ndarray]]

#: Where a backend is not faithful to the precision (``Backend.faithful_low_precision``, ONNX Runtime's
#: CPU provider), the gate judges the timed session, as everywhere; beside it, the model's own arithmetic
#: (every intermediate tensor materialised in its declared type, no kernel fusion) is shown, labelled,
#: because that provider (fp16) computes float16 nodes in float32 without the casts between them, and
#: (int8) runs fused integer kernels that saturate on CPUs without VNNI: neither is what a GPU engine of
#: the same model computes.
CPU_FAITHFUL_NOTES = {
    "fp16": "model arithmetic: every intermediate tensor stored in float16 (ONNX Runtime's CPU provider computes "
            "float16 models in float32, hiding float16 rounding and overflow a GPU engine would show)",
    "int8": "model arithmetic: the Q/DQ model's own arithmetic without fused integer CPU kernels (which saturate "
            "on CPUs without VNNI and are not what a GPU engine computes)",
}
#: the metrics shown for the model's own arithmetic
ARITHMETIC_METRICS = ("kind", "max_abs", "p99_abs", "rel_l2", "cosine", "top1_agreement", "exact_match",
                      "elementwise_fail_frac", "nan_count", "inf_count")


def check_accuracy(key: str, precision: str, ref: Outputs, out: Outputs, config: SweepConfig,
                   calibration: dict | None) -> tuple[dict[str, dict[str, Any]], AccuracyCheck]:
    """Per-output metrics against FP32 over every input sample, each marked passed or not against its
    precision's thresholds, and the check the ``precision_regression`` rule judges."""
    from profiler import accuracy as acc

    thresholds = acc.merge_thresholds(config.thresholds)
    tolerances = acc.tolerances_for(precision, thresholds, ref[0] if ref else {}, config.output_tolerances,
                                    config.thresholds)
    per_output = acc.compare_batches(ref, out, kinds=config.output_kinds, tolerances=tolerances)
    _, breaches = acc.evaluate(per_output, precision, thresholds)
    failed = {b["output"] for b in breaches}
    limits = dict(thresholds.get(precision, {}))
    for name, metrics in per_output.items():
        metrics["passed"] = name not in failed
        metrics["threshold"] = limits
    return per_output, _check(key, precision, per_output, "timed", calibration)


def _check(key: str, precision: str, per_output: dict[str, dict[str, Any]], engine: str,
           calibration: dict | None) -> AccuracyCheck:
    """The check of ``per_output`` as measured now (each output's metrics copied: later edits are not its)."""
    return AccuracyCheck(key, precision, {name: dict(m) for name, m in per_output.items()}, engine,
                         bool((calibration or {}).get("meaningless")))


def accuracy_limits(config: SweepConfig) -> dict[str, dict[str, float]]:
    """The accuracy limits of every precision the sweep judges by: the defaults with ``--threshold`` on top."""
    from profiler import accuracy as acc

    return acc.merge_thresholds(config.thresholds)


def model_arithmetic(spec: VariantSpec, variant_path: Path, feeds: Outputs, reference: Outputs,
                     config: SweepConfig, calibration: dict | None) -> tuple[dict[str, Any], AccuracyCheck | None]:
    """The model's own arithmetic (every intermediate stored in its declared type), shown beside the
    gated figure where the timed engine is not faithful to the precision. A breach here is a
    ``precision_model_arithmetic`` finding that does not fail the gate: the gate judges the engine that
    was timed. Returns (the figure, the check that rule judges); an error is the figure, never the verdict."""
    from profiler import accuracy as acc
    from profiler.compare.precision import faithful_outputs

    c = config
    thresholds = acc.merge_thresholds(c.thresholds)
    try:
        outs = faithful_outputs(variant_path, feeds)
        tolerances = acc.tolerances_for(spec.precision, thresholds, reference[0], c.output_tolerances,
                                        c.thresholds)
        per_output = acc.compare_batches(reference, outs, kinds=c.output_kinds, tolerances=tolerances)
    except Exception as exc:  # a figure beside the verdict; never the verdict
        return {"error": f"{type(exc).__name__}: {exc}"}, None
    breached = not acc.evaluate(per_output, spec.precision, thresholds)[0]
    figure = {"note": CPU_FAITHFUL_NOTES[spec.precision] + " (for information: the gate judges the timed session)",
              "breached": breached,
              "outputs": {name: {k: m.get(k) for k in ARITHMETIC_METRICS if k in m}
                          for name, m in per_output.items()}}
    return figure, _check(spec.key, spec.precision, per_output, "model_arithmetic", calibration)


def stored_accuracy_checks(previous: list[dict[str, Any]], config: SweepConfig) -> list[AccuracyCheck]:
    """The accuracy checks of stored variants, rebuilt from their stored metrics (``--resume``)."""
    from profiler import accuracy as acc

    out: list[AccuracyCheck] = []
    thresholds = acc.merge_thresholds(config.thresholds)
    for v in previous:
        if v.get("status") == "ok" and v.get("precision") != "fp32" and v.get("accuracy"):
            per_output = {}
            for name, m in v["accuracy"].items():
                metrics = {k: x for k, x in m.items() if k not in ("passed", "threshold")}
                # a breach whose evidence the store could not keep (a non-finite metric becomes NULL, an
                # 'error' has no column) still fails: the stored verdict is what was measured
                if m.get("passed") is False and acc.evaluate({name: metrics}, v["precision"], thresholds)[0]:
                    metrics["error"] = "outside its threshold when measured (the failing value was not stored)"
                per_output[name] = metrics
            out.append(_check(v["key"], v["precision"], per_output, "timed",
                              (v.get("prepare") or {}).get("calibration")))
    return out


def stored_accuracy_findings(previous: list[dict[str, Any]], config: SweepConfig) -> list[Finding]:
    """The ``precision_regression`` findings of stored variants, judged again from their stored metrics."""
    from profiler.rules import get_rule
    from profiler.rules.context import SweepContext

    ctx = SweepContext([], accuracy_checks=stored_accuracy_checks(previous, config),
                       accuracy_limits=accuracy_limits(config))
    return get_rule("sweep", "precision_regression").run(ctx)
