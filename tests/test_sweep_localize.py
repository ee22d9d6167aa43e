"""The sweep finds where an fp16 variant loses precision and verifies the fix, on ONNX Runtime's CPU
provider. The gate judges the timed session (which computes float16 models in float32); the model's own
arithmetic (float16 storage between nodes) stands beside it as a non-gating finding."""

from __future__ import annotations

import pytest

from profiler.sweep import SweepConfig, run_sweep
from profiler.sweep.options import config_from_options
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
    # the advice names the option that does it, and that option does it: the variant built with it
    assert loc["keep_fp32_option"] == "--keep-fp32 square,root" and "--keep-fp32 square,root" in loc["conclusion"]
    fixed = run_sweep(config_from_options(model=str(model), precision="fp32,fp16", backend="onnxruntime",
                                          cache_dir=str(tmp_path / "cache"), fp16_range_check=False,
                                          keep_fp32=(loc["keep_fp32_option"].split()[1],), iterations=5,
                                          duration=0.0, warmup=0.0, no_layers=True, out_dir=str(tmp_path / "o")))
    fp16 = fixed["variants"][1]
    assert set(fp16["prepare"]["nodes_kept_fp32"]) >= {"square", "root"}
    assert not fp16["model_arithmetic_accuracy"]["breached"] and fp16.get("localization") is None


def _elem_types(path) -> dict[str, int]:
    """Each tensor's element type in the model at ``path`` (shape inference over its graph)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    g = model.graph
    return {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.input, *g.output]}


def test_keep_fp32_keeps_the_named_nodes_in_fp32_in_the_built_fp16_and_int8_variants(tmp_path):
    """--keep-fp32 reaches the fp16 converter and the int8 quantizer: in the fp16 model the named nodes read
    and write float32 while the others compute float16; in the int8 model they read no dequantized tensor."""
    import onnx

    from profiler.models import default_model_path
    from profiler.sweep.steps import precision_model

    model = overflow_model(tmp_path / "overflow.onnx")
    c = config_from_options(model=str(model), keep_fp32=("square", "root"), fp16_range_check=False,
                            cache_dir=str(tmp_path / "cache"))
    assert c.keep_fp32 == ["root", "square"]
    built = precision_model(c, model, "fp16", {"x": (4, 64)})
    types = _elem_types(built.path)
    node = {n.name: n for n in onnx.load(str(built.path)).graph.node}
    f32, f16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    for name in ("square", "root"):
        assert all(types[t] == f32 for t in (*node[name].input, *node[name].output)), name
    assert types[node["scale_up"].output[0]] == f16  # the rest is float16
    plain = precision_model(config_from_options(model=str(model), fp16_range_check=False,
                                                cache_dir=str(tmp_path / "cache")), model, "fp16", {"x": (4, 64)})
    node = {n.name: n for n in onnx.load(str(plain.path)).graph.node}
    assert _elem_types(plain.path)[node["square"].output[0]] == f16  # without the option it was float16

    c8 = config_from_options(keep_fp32=("conv0",), cache_dir=str(tmp_path / "cache"))
    q = precision_model(c8, default_model_path(), "int8", {})
    graph = onnx.load(str(q.path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    node = {n.name: n for n in graph.node}
    assert producer.get(node["conv0"].input[0]) != "DequantizeLinear"  # reads the float input itself
    assert producer[node["conv1"].input[0]] == "DequantizeLinear"  # the rest stays int8


def test_keep_fp32_names_are_parsed_and_checked_against_the_model(tmp_path):
    from profiler.errors import UsageError
    from profiler.sweep import Sweep
    from profiler.sweep.options import parse_keep_fp32

    assert parse_keep_fp32(["square, root", "Softmax", "root"]) == ["Softmax", "root", "square"]
    with pytest.raises(UsageError, match="empty node name"):
        parse_keep_fp32(["square,,root"])
    model = overflow_model(tmp_path / "overflow.onnx")
    config = config_from_options(model=str(model), precision="fp32,fp16", backend="onnxruntime",
                                 keep_fp32=("sqaure", "Mul"), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(UsageError, match="'sqaure', neither a node name nor an op type of overflow.onnx"):
        Sweep(config).prepare(create_run=False)


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
