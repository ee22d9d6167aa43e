"""The sweep finds where an fp16 variant loses precision and verifies the fix, on ONNX Runtime's CPU
provider, whose fp16 accuracy is measured with float16 storage between nodes."""

from __future__ import annotations

import pytest

from profiler.sweep import SweepConfig, run_sweep
from tests.test_precision_localize import _overflow_model

FAST = {"iterations": 5, "duration_s": 0.0, "warmup_ms": 0.0, "layers": False}


def test_fp16_overflow_is_caught_localised_and_verified(tmp_path):
    model = _overflow_model(tmp_path / "overflow.onnx")
    summary = run_sweep(SweepConfig(model=str(model), precisions=["fp32", "fp16"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), **FAST))
    fp16 = summary["variants"][1]
    y = fp16["accuracy"]["y"]
    # the CPU provider alone would compute this model in float32 and report no error at all
    assert y["inf_count"] > 0 and y["passed"] is False
    assert any("stored in float16" in n for n in fp16["notes"])
    assert [f["rule"] for f in summary["findings"] if f["rule"] == "precision_regression"]
    loc = fp16["localisation"]
    assert loc["first_jumps"][0]["node"] == "square"
    check = loc["verification"]
    # square overflows float16; its consumer root must stay fp32 too, scale_down gets values in range
    assert check["kept_fp32"] == ["square", "root"]
    assert check["conclusion"]["localised"] is True and check["conclusion"]["error_removed"] == pytest.approx(1.0)
    kept = check["variants"]["fp16+kept"]["accuracy"]["y"]
    assert kept["inf_count"] == 0 and kept["rel_l2"] < 1e-2


def test_localisation_can_be_switched_off(tmp_path):
    model = _overflow_model(tmp_path / "overflow.onnx")
    summary = run_sweep(SweepConfig(model=str(model), precisions=["fp32", "fp16"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), localize=False, **FAST))
    assert summary["variants"][1]["accuracy"]["y"]["passed"] is False
    assert summary["variants"][1].get("localisation") is None


def test_int8_accuracy_on_cpu_is_the_models_own_arithmetic(tmp_path):
    """ONNX Runtime's fused int8 CPU kernels would report ~0.2 rel L2 on the default model (saturation on
    CPUs without VNNI); the sweep measures the Q/DQ model itself (~0.016), as a GPU engine computes it."""
    summary = run_sweep(SweepConfig(precisions=["fp32", "int8"], backend="onnxruntime",
                                    cache_dir=str(tmp_path / "cache"), localize=False, **FAST))
    int8 = summary["variants"][1]
    probs = int8["accuracy"]["probs"]
    assert probs["rel_l2"] < 0.05 and probs["cosine"] > 0.999
    assert any("Q/DQ model's own arithmetic" in n for n in int8["notes"])


def test_a_stored_breach_survives_resume_even_when_its_value_was_not_finite():
    """A breach whose failing metric the store cannot keep (inf/NaN -> NULL) must still fail on --resume."""
    from profiler.sweep import _stored_accuracy_findings

    previous = [{"status": "ok", "precision": "fp16", "key": "fp16-a",
                 "accuracy": {"y": {"rel_l2": None, "cosine": 0.99999, "passed": False}}},
                {"status": "ok", "precision": "fp16", "key": "fp16-b",
                 "accuracy": {"y": {"rel_l2": 1e-5, "cosine": 0.99999, "passed": True}}}]
    found = _stored_accuracy_findings(previous, SweepConfig())
    assert [(f.variant, f.severity) for f in found] == [("fp16-a", "high")]
