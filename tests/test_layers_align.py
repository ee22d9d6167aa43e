"""Layer alignment between engines of one model, on the real A100 and RTX 3090 exports."""

from __future__ import annotations

import pytest

from profiler.layers import align as al
from profiler.layers import frame as lf
from profiler.layers import trtexec as tx


@pytest.fixture(scope="module")
def ex(trtexec_fixtures):
    def load(rel):
        (s,) = tx.find_export_sets([trtexec_fixtures / rel])
        return tx.load_export(s)
    return {k: load(v) for k, v in {
        "a100-fp32": "pytorch/resnet/A100/fp32", "a100-fp16": "pytorch/resnet/A100/fp16",
        "a100-qat": "pytorch/resnet/A100/qat", "3090-fp32": "tensorflow/resnet/RTX-3090/fp32",
        "3090-fp16": "tensorflow/resnet/RTX-3090/fp16", "3090-qat": "tensorflow/resnet/RTX-3090/qat"}.items()}


def _every_layer_once(g, a, b):
    la = [n for xs in g["layers_a"] for n in xs]
    lb = [n for xs in g["layers_b"] for n in xs]
    assert sorted(la) == sorted(a.layers["name"]) and sorted(lb) == sorted(b.layers["name"])


@pytest.mark.parametrize("pa,pb", [("a100-fp32", "a100-fp16"), ("3090-fp32", "3090-fp16")])
def test_fp32_fp16_align_by_onnx_nodes(ex, pa, pb):
    a, b = ex[pa], ex[pb]
    g = al.align(a.layers, b.layers)
    _every_layer_once(g, a, b)
    assert set(g["method"]) == {"onnx-nodes"}
    s = al.summary(g)
    ta, tb = lf.layer_totals(a.layers)["layer_sum_ms"], lf.layer_totals(b.layers)["layer_sum_ms"]
    assert s["delta_ms"] == pytest.approx(tb - ta)
    # deltas sum to the end-to-end difference within the per-layer profiling overhead of both engines
    ma, mb = a.summary["gpu_compute_ms"]["median"], b.summary["gpu_compute_ms"]["median"]
    overhead = (ta - ma) + (tb - mb)
    assert abs(s["delta_ms"] - (mb - ma)) <= overhead
    convs = g[g["kind"] == "conv"]
    assert (convs["precision_a"] == "fp32").all() and (convs["precision_b"] == "fp16").all()
    assert (convs["delta_ms"] < 0).mean() > 0.9  # fp16 is faster nearly everywhere


def test_a100_first_conv_group(ex):
    g = al.align(ex["a100-fp32"].layers, ex["a100-fp16"].layers)
    assert len(g) == 23
    first = g.iloc[0]
    assert first["layers_a"] == ["Conv_0 + Relu_1"]
    assert first["layers_b"] == ["Reformatting CopyNode for Input Tensor 0 to Conv_0 + Relu_1", "Conv_0 + Relu_1"]
    assert first["time_a_ms"] == pytest.approx(0.52224) and first["time_b_ms"] == pytest.approx(0.080896 + 0.111616)
    assert first["reformat_b_ms"] == pytest.approx(0.080896)
    assert first["nodes"] == ["Conv_0", "Relu_1"]


def test_fp16_vs_qat_different_onnx_numbering_uses_sequence(ex):
    a, b = ex["a100-fp16"], ex["a100-qat"]
    g = al.align(a.layers, b.layers)
    _every_layer_once(g, a, b)
    assert set(g["method"]) == {"sequence"}  # node numbers differ between resnet.onnx and resnet-qat.onnx
    assert len(g) == 23
    assert g.iloc[1]["layers_a"] == ["MaxPool_2"] and g.iloc[1]["layers_b"][-1] == "MaxPool_12"
    assert (g["precision_b"] == "int8").sum() >= 20
    s = al.summary(g)
    assert s["reformat_delta_ms"] == pytest.approx(0.190464, abs=1e-6)  # time the QAT reformats added


def test_tensorflow_qat_names_normalized(ex):
    g = al.align(ex["3090-fp16"].layers, ex["3090-qat"].layers)
    _every_layer_once(g, ex["3090-fp16"], ex["3090-qat"])
    assert (g["method"] == "onnx-nodes").sum() >= 45
    assert al.normalize_node("resnet50/quant_conv2_block1_1_conv/Conv2D") == "resnet50/conv2_block1_1_conv/Conv2D"


def test_fusion_difference_makes_one_group():
    a = lf.make_frame([
        {"name": "Conv_1", "type": "CaskConvolution", "precision_in": "fp32", "fused_nodes": ["Conv_1"], "time_avg_ms": 1.0, "time_total_ms": 1.0},
        {"name": "Relu_2", "type": "PointWise", "precision_in": "fp32", "fused_nodes": ["Relu_2"], "time_avg_ms": 0.5, "time_total_ms": 0.5},
        {"name": "Conv_3", "type": "CaskConvolution", "precision_in": "fp32", "fused_nodes": ["Conv_3"], "time_avg_ms": 1.0, "time_total_ms": 1.0}])
    b = lf.make_frame([
        {"name": "Conv_1 + Relu_2", "type": "CaskConvolution", "precision_in": "fp16", "fused_nodes": ["Conv_1", "Relu_2"], "time_avg_ms": 0.6, "time_total_ms": 0.6},
        {"name": "Conv_3", "type": "CaskConvolution", "precision_in": "fp16", "fused_nodes": ["Conv_3"], "time_avg_ms": 0.4, "time_total_ms": 0.4}])
    g = al.align(a, b)
    assert len(g) == 2
    assert g.iloc[0]["layers_a"] == ["Conv_1", "Relu_2"] and g.iloc[0]["layers_b"] == ["Conv_1 + Relu_2"]
    assert g.iloc[0]["delta_ms"] == pytest.approx(-0.9) and g.iloc[0]["precision_b"] == "fp16"
