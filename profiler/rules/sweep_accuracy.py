"""Sweep rules over the accuracy checks: a variant's outputs against FP32's, judged by the accuracy limits.

Each rule (scope ``sweep``) reads the :class:`~profiler.rules.context.AccuracyCheck` records of a
:class:`~profiler.rules.context.SweepContext` and judges them by the context's ``accuracy_limits``, per
precision (:data:`profiler.accuracy.DEFAULT_THRESHOLDS` merged with ``--threshold fp16.cosine_min=X``; the
elementwise ``atol``/``rtol`` shape the metrics before any rule runs, which is why the limits come with
the context rather than as rule thresholds). One finding per output outside its limits:

- ``precision_regression``: the engine that was timed; fails the gate (:func:`profiler.sweep.gate_failures`).
  Severity high for NaN/Inf, a missing output or lost top-1 agreement, medium otherwise, info when the int8
  calibration ran on random inputs (the numbers then mean nothing).
- ``precision_model_arithmetic``: the model's own arithmetic, shown beside the timed figure where the timed
  engine does not compute the precision as a GPU engine would (ONNX Runtime's CPU provider); low (info
  with random calibration), never the gate.
"""

from __future__ import annotations

from typing import Any

from profiler.accuracy import evaluate, limits_for
from profiler.findings import Finding
from profiler.rules import Thresholds, get_rule, rule
from profiler.rules.context import AccuracyCheck, SweepContext

_RECOMMEND = {
    "fp16": ("Keep the layers that lose precision in float32: give the op types or node names feeding "
             "this output to trtprof sweep --keep-fp32 NODE[,NODE...] (the fp16 converter's block list), "
             "starting with normalizations, reductions and the last layers; check for activations or constants "
             "beyond float16's range (65504)."),
    "int8": ("Calibrate on more representative data (--calib with a few hundred real inputs), try another "
             "calibration method (--calib-method entropy|minmax|percentile: entropy clips outliers that "
             "MobileNet-style and attention layers need, minmax keeps them), and keep the sensitive layers "
             "(first and last convolutions, the classifier head, depthwise and squeeze-excitation blocks) "
             "in float32 with --keep-fp32 NODE[,NODE...]."),
}
_HARD = ("nan_count", "inf_count", "error", "top1_agreement")


def _describe(b: dict[str, Any]) -> str:
    if b["metric"] == "error":
        return str(b["value"])
    if b["metric"] in ("nan_count", "inf_count"):
        return f"{b['value']} {'NaN' if b['metric'] == 'nan_count' else 'Inf'} values"
    op = "<" if b.get("kind") == "min" else ">"
    return f"{b['metric']} {b['value']:.6g} {op} {b['limit']:g}"


def breach_findings(rule_id: str, check: AccuracyCheck, limits: dict[str, float]) -> list[Finding]:
    """One finding per output of ``check`` outside ``limits`` (the timed engine's severities and advice)."""
    _, breaches = evaluate(dict(check.outputs), check.precision, limits)
    meaningless = check.calibration_meaningless
    findings: list[Finding] = []
    for output in dict.fromkeys(b["output"] for b in breaches):
        mine = [b for b in breaches if b["output"] == output]
        hard = any(b["metric"] in _HARD for b in mine)
        recommendation = _RECOMMEND.get(check.precision,
                                        "Compare this variant's layers with fp32 to find where it diverges.")
        if meaningless:
            recommendation = ("The int8 calibration used random inputs, so this accuracy result means nothing; "
                              "pass --calib DATA with representative inputs and run again. " + recommendation)
        findings.append(Finding(
            rule=rule_id, severity="info" if meaningless else ("high" if hard else "medium"), variant=check.variant,
            title=f"{check.precision} output {output!r} differs from fp32: " + "; ".join(_describe(b) for b in mine),
            evidence={"output": output, **check.outputs.get(output, {}), "breaches": [b["metric"] for b in mine],
                      "calibration_meaningless": meaningless},
            threshold=dict(limits), recommendation=recommendation))
    return findings


@rule("precision_regression", scope="sweep")
def precision_regression(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """A reduced-precision variant's timed outputs differ from FP32's beyond the accuracy limits (the gate)."""
    out: list[Finding] = []
    for check in ctx.accuracy_checks:
        if check.engine == "timed":
            out.extend(breach_findings("precision_regression", check, ctx.limits_of(check.precision)))
    return out


@rule("precision_model_arithmetic", scope="sweep")
def precision_model_arithmetic(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """The model's own arithmetic in the variant's precision breaches the accuracy limits where the timed
    engine (ONNX Runtime's CPU provider) does not compute that precision as a GPU engine would."""
    out: list[Finding] = []
    for check in ctx.accuracy_checks:
        if check.engine != "model_arithmetic":
            continue
        for f in breach_findings("precision_model_arithmetic", check, ctx.limits_of(check.precision)):
            f.severity = "info" if f.severity == "info" else "low"
            f.title = f"model arithmetic (not the timed ONNX Runtime CPU session): {f.title}"
            f.recommendation = ("A GPU engine storing intermediates in this precision would show this error; the "
                                "timed CPU session does not, so the gate passes it. " + f.recommendation)
            out.append(f)
    return out


def accuracy_findings(variant_key: str, precision: str, per_output: dict[str, dict],
                      thresholds: dict | None = None, *, calibration: dict | None = None) -> list[Finding]:
    """One ``precision_regression`` finding per output whose metrics breach the limits: the registered sweep
    rule of this module over this one variant's check.

    ``thresholds`` as for :func:`profiler.accuracy.evaluate`. Severity: high for NaN/Inf, missing outputs or lost top-1
    agreement; medium otherwise; info when the int8 calibration ran on random inputs.
    """
    check = AccuracyCheck(variant_key, precision, per_output,
                          calibration_meaningless=bool((calibration or {}).get("meaningless")))
    ctx = SweepContext([], accuracy_checks=[check], accuracy_limits={precision: limits_for(precision, thresholds)})
    return get_rule("sweep", "precision_regression").run(ctx)
