"""The accuracy rules are registry rules: ``precision_regression`` and ``precision_model_arithmetic`` are found
through the one registry (scope ``sweep``), judge the accuracy checks by the limits the context carries
(``--threshold fp16.rel_l2_max=X``), and reach a sweep's findings and gate only through it."""

from __future__ import annotations

import numpy as np
import pytest

from profiler import rules as R
from profiler.accuracy import DEFAULT_THRESHOLDS, compare_batches
from profiler.rules.context import AccuracyCheck, SweepContext
from profiler.sweep import Sweep, SweepConfig, gate_failures, stored_accuracy_checks
from profiler.sweep.accuracy_check import accuracy_limits


def _off_by(rel_l2: float) -> dict[str, dict]:
    """Real metrics (compare_batches) of a candidate whose error has exactly relative L2 ``rel_l2``."""
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(8, 32))
    noise = rng.normal(size=ref.shape)
    cand = ref + noise * (rel_l2 * np.linalg.norm(ref) / np.linalg.norm(noise))
    return compare_batches([{"y": ref}], [{"y": cand}])


def _sweep(limits_args: tuple[str, ...], *checks: AccuracyCheck) -> Sweep:
    from profiler.sweep.options import parse_thresholds

    acc, rule_overrides = parse_thresholds(limits_args)
    sw = Sweep(SweepConfig(thresholds=acc, rule_thresholds=rule_overrides))
    sw.accuracy_checks = list(checks)
    return sw


def test_both_accuracy_rules_are_sweep_rules_of_the_one_registry():
    ids = {s.id for s in R.registry("sweep")}
    assert {"precision_regression", "precision_model_arithmetic"} <= ids
    ctx = SweepContext([], accuracy_checks=[AccuracyCheck("fp16-a", "fp16", _off_by(0.2)),
                                            AccuracyCheck("fp16-a", "fp16", _off_by(0.2), engine="model_arithmetic")])
    run = R.run_rules("sweep", ctx, only=["precision_regression", "precision_model_arithmetic"])
    assert sorted((f.rule, f.scope, f.severity) for f in run.findings) == [
        ("precision_model_arithmetic", "sweep", "low"), ("precision_regression", "sweep", "medium")]
    # the context is read, never written: the checks keep their metrics as measured
    assert "breaches" not in ctx.accuracy_checks[0].outputs["y"]


def test_a_custom_threshold_fires_just_above_it_and_not_just_under_it():
    """rel L2 0.049 and 0.051 both breach the fp16 default (0.01); with the limit raised to 0.05 only the
    one above it does, in the sweep's findings and its gate (cosine, ~0.9988 for both, is allowed 0.99)."""
    assert DEFAULT_THRESHOLDS["fp16"]["rel_l2_max"] < 0.049
    under = AccuracyCheck("fp16-under", "fp16", _off_by(0.049))
    over = AccuracyCheck("fp16-over", "fp16", _off_by(0.051))
    assert abs(under.outputs["y"]["rel_l2"] - 0.049) < 1e-9 and abs(over.outputs["y"]["rel_l2"] - 0.051) < 1e-9

    default = _sweep((), under, over).findings()
    assert sorted(f.variant for f in default if f.rule == "precision_regression") == ["fp16-over", "fp16-under"]

    custom = _sweep(("fp16.rel_l2_max=0.05", "fp16.cosine_min=0.99"), under, over).findings()
    [f] = [f for f in custom if f.rule == "precision_regression"]
    assert f.variant == "fp16-over" and f.threshold["rel_l2_max"] == 0.05 and f.evidence["breaches"] == ["rel_l2"]
    assert "rel_l2 0.051 > 0.05" in f.title
    assert [g["variant"] for g in gate_failures([x.to_dict() for x in custom])] == ["fp16-over"]


def test_a_custom_threshold_judges_the_model_arithmetic_too_but_never_gates():
    arith = AccuracyCheck("int8-a", "int8", _off_by(0.12), engine="model_arithmetic")
    assert DEFAULT_THRESHOLDS["int8"]["rel_l2_max"] > 0.12
    assert not [f for f in _sweep((), arith).findings() if f.rule.startswith("precision")]
    found = _sweep(("int8.rel_l2_max=0.1",), arith).findings()
    [f] = [f for f in found if f.rule.startswith("precision")]
    assert (f.rule, f.severity, f.threshold["rel_l2_max"]) == ("precision_model_arithmetic", "low", 0.1)
    assert f.title.startswith("model arithmetic (not the timed ONNX Runtime CPU session): int8 output 'y'")
    assert gate_failures([f.to_dict()]) == []


def test_resumed_variants_are_judged_again_by_the_run_limits():
    """--resume rebuilds the checks from stored metrics; the run's own --threshold judges them."""
    stored = [{"status": "ok", "precision": "fp16", "key": "fp16-a",
               "accuracy": {"y": {"rel_l2": 0.03, "cosine": 0.9996, "passed": False}}}]
    config = SweepConfig(thresholds={"fp16": {"rel_l2_max": 0.05}})
    checks = stored_accuracy_checks(stored, config)
    assert [(c.variant, c.engine, dict(c.outputs["y"])) for c in checks] == [
        ("fp16-a", "timed", {"rel_l2": 0.03, "cosine": 0.9996,
                             "error": "outside its threshold when measured (the failing value was not stored)"})]
    assert accuracy_limits(config)["fp16"]["rel_l2_max"] == 0.05
    ctx = SweepContext([], accuracy_checks=checks, accuracy_limits=accuracy_limits(config))
    [f] = R.get_rule("sweep", "precision_regression").run(ctx)
    assert f.severity == "high" and f.evidence["breaches"] == ["error"]


@pytest.mark.parametrize("rule_id", ["precision_regression", "precision_model_arithmetic"])
def test_the_sweep_reaches_the_accuracy_rules_only_through_the_registry(monkeypatch, rule_id):
    """With the rule taken out of the registry, a breach makes no finding: nothing else builds them."""
    R.registry()
    monkeypatch.setattr(R, "_REGISTRY", {k: v for k, v in R._REGISTRY.items() if k != ("sweep", rule_id)})
    engine = "timed" if rule_id == "precision_regression" else "model_arithmetic"
    found = _sweep((), AccuracyCheck("fp16-a", "fp16", _off_by(0.5), engine=engine)).findings()
    assert not [f for f in found if f.rule.startswith("precision")]
