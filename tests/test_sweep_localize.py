"""The sweep finds where an fp16 variant loses precision and verifies the fix, on ONNX Runtime's CPU
provider. The gate judges the timed session (which computes float16 models in float32); the model's own
arithmetic (float16 storage between nodes) stands beside it as a non-gating finding."""

from __future__ import annotations

import pytest

from profiler.sweep import SweepConfig, run_sweep
from tests.onnx_models import overflow_model

FAST = {"iterations": 5, "duration_s": 0.0, "warmup_ms": 0.0, "layers": False}


def test_the_fp16_range_check_keeps_the_overflowing_nodes_in_fp32(tmp_path):
    """By default the fp16 model is made with the nodes whose sample activations near float16's range kept
    in fp32: square (1e6 on the samples) and root, which reads it; the model's own arithmetic is then clean."""
    model = overflow_model(tmp_path / "overflow.onnx")
    summary = run_sweep(SweepConfig(model=str(model), precisions=["fp32", "fp16"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), **FAST))
    fp16 = summary["variants"][1]
    assert sorted(fp16["prepare"]["activation_range_kept"]) == ["root", "square"]
    assert not (fp16.get("model_arithmetic_accuracy") or {}).get("breached")
    assert fp16["accuracy"]["y"]["passed"] is True and fp16.get("localization") is None
    assert not [f for f in summary["findings"] if f["rule"].startswith("precision_")]


def test_fp16_overflow_is_caught_localized_and_verified(tmp_path):
    """Without the range check (the converter's plain fp16 model) the overflow is found and localized."""
    model = overflow_model(tmp_path / "overflow.onnx")
    summary = run_sweep(SweepConfig(model=str(model), precisions=["fp32", "fp16"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), fp16_range_check=False, **FAST))
    fp16 = summary["variants"][1]
    y = fp16["accuracy"]["y"]
    # the timed CPU session computes this float16 model in float32: no overflow there, and the gate passes
    assert y["inf_count"] == 0 and y["passed"] is True
    # the model's own arithmetic, as a GPU engine storing float16 would compute it, overflows
    arith = fp16["model_arithmetic_accuracy"]
    assert arith["breached"] and arith["outputs"]["y"]["inf_count"] > 0 and "stored in float16" in arith["note"]
    rules = {f["rule"]: f for f in summary["findings"]}
    assert "precision_regression" not in rules and rules["precision_model_arithmetic"]["severity"] == "low"
    from profiler.sweep import gate_failures

    assert gate_failures(summary["findings"]) == []
    loc = fp16["localization"]
    assert loc["first_jumps"][0]["node"] == "square"
    check = loc["verification"]
    # square overflows float16; its consumer root must stay fp32 too, scale_down gets values in range
    assert check["kept_fp32"] == ["square", "root"]
    assert check["conclusion"]["localized"] is True and check["conclusion"]["error_removed"] == pytest.approx(1.0)
    kept = check["variants"]["fp16+kept"]["accuracy"]["y"]
    assert kept["inf_count"] == 0 and kept["rel_l2"] < 1e-2


def test_localization_can_be_switched_off(tmp_path):
    model = overflow_model(tmp_path / "overflow.onnx")
    summary = run_sweep(SweepConfig(model=str(model), precisions=["fp32", "fp16"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), localize=False, fp16_range_check=False,
                                    **FAST))
    assert summary["variants"][1]["model_arithmetic_accuracy"]["breached"]
    assert summary["variants"][1].get("localization") is None


def test_int8_gate_judges_the_timed_session_with_the_model_arithmetic_beside_it(tmp_path):
    """ONNX Runtime's fused int8 CPU kernels add their own error on CPUs without VNNI (rel L2 ~0.2 on the
    default model); the Q/DQ model's own arithmetic is ~0.016. The gate judges what was timed; the model
    arithmetic stands beside it, labelled."""
    summary = run_sweep(SweepConfig(precisions=["fp32", "int8"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), localize=False, **FAST))
    int8 = summary["variants"][1]
    timed, arith = int8["accuracy"]["probs"], int8["model_arithmetic_accuracy"]["outputs"]["probs"]
    assert arith["rel_l2"] < 0.05 and arith["cosine"] > 0.999
    assert timed["rel_l2"] >= arith["rel_l2"] * 0.5  # the timed figure is its own, never replaced by the other
    assert "Q/DQ model's own arithmetic" in int8["model_arithmetic_accuracy"]["note"]


def test_a_stored_breach_survives_resume_even_when_its_value_was_not_finite():
    """A breach whose failing metric the store cannot keep (inf/NaN -> NULL) must still fail on --resume."""
    from profiler.sweep import stored_accuracy_findings

    previous = [{"status": "ok", "precision": "fp16", "key": "fp16-a",
                 "accuracy": {"y": {"rel_l2": None, "cosine": 0.99999, "passed": False}}},
                {"status": "ok", "precision": "fp16", "key": "fp16-b",
                 "accuracy": {"y": {"rel_l2": 1e-5, "cosine": 0.99999, "passed": True}}}]
    found = stored_accuracy_findings(previous, SweepConfig())
    assert [(f.variant, f.severity) for f in found] == [("fp16-a", "high")]
