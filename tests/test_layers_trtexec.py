"""trtexec exports -> per-layer frames and timing statistics, checked against trtexec's own summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import InputError
from profiler.layers import frame as lf
from profiler.layers import trtexec as tx

SETS = {
    "a100-fp32": "pytorch/resnet/A100/fp32", "a100-fp16": "pytorch/resnet/A100/fp16",
    "a100-qat": "pytorch/resnet/A100/qat", "a100-qat-residual": "pytorch/resnet/A100/qat-residual",
    "a100-qat-residual-qgap": "pytorch/resnet/A100/qat-residual-qgap",
    "3090-fp32": "tensorflow/resnet/RTX-3090/fp32", "3090-fp16": "tensorflow/resnet/RTX-3090/fp16",
    "3090-qat": "tensorflow/resnet/RTX-3090/qat",
    "mobilenet-qat": "tests/inputs/mobilenet.qat", "mobilenet-v2-qat": "tests/inputs/mobilenet_v2_residuals.qat",
}


def _load(root: Path, rel: str) -> tx.EngineExport:
    p = root / rel
    if p.is_dir():
        (s,) = tx.find_export_sets([p])
    else:
        (s,) = [x for x in tx.find_export_sets([p.parent]) if x.prefix.startswith(p.name + ".onnx")]
    return tx.load_export(s)


@pytest.fixture(scope="module")
def exports(trtexec_fixtures) -> dict[str, tx.EngineExport]:
    return {k: _load(trtexec_fixtures, v) for k, v in SETS.items()}


@pytest.mark.parametrize("name", list(SETS))
def test_statistics_equal_trtexec_summary(exports, name):
    e = exports[name]
    cmp = tx.compare_with_trtexec(e.summary, e.trtexec)
    for part in ("latency_ms", "gpu_compute_ms"):
        stats = [k for k in cmp if k.startswith(part + ".")]
        assert {s.split(".")[1] for s in stats} >= {"min", "max", "mean", "median", "p99"}
        for k in stats:  # exact to trtexec's 6 printed digits, mean included
            assert cmp[k]["equal"], (k, cmp[k])
    for k in ("h2d_ms.median", "d2h_ms.median"):
        assert cmp[k]["equal"]
    assert cmp["total_gpu_compute_s"]["equal"], cmp["total_gpu_compute_s"]
    # walltime/throughput come from 6-digit timestamps: equal within that resolution
    res_ms = e.summary["timestamp_resolution_ms"]
    wall_tol_s = (res_ms + 0.005) / 1000 + 1e-9
    assert abs(e.summary["walltime_s"] - e.trtexec["walltime_s"]) <= wall_tol_s
    rel = wall_tol_s / e.trtexec["walltime_s"] + 5e-6
    assert abs(e.summary["throughput_qps"] / e.trtexec["throughput_qps"] - 1) <= rel
    # enqueue: only timestamps are exported, quantised to res_ms; medians agree within it
    assert abs(e.summary["enqueue_ms"]["median"] - e.trtexec["enqueue_ms"]["median"]) <= res_ms


def test_warmup_filtered_as_trtexec(exports, trtexec_fixtures):
    e = exports["a100-fp16"]
    raw = json.loads(next((trtexec_fixtures / SETS["a100-fp16"]).glob("*.timing.json")).read_text())
    assert len(raw) == 3698
    assert e.summary["warmup_queries"] == 230 and e.summary["queries"] == 3468
    assert e.samples["idx"].tolist()[:3] == [0, 1, 2]
    assert e.samples["start_ms"].iloc[0] >= 200.0 > raw[229]["startComputeMs"]
    # mobilenet's summary has p90/p95/p99 (TensorRT 8.4), resnet's p99 only
    assert set(exports["mobilenet-qat"].trtexec["gpu_compute_ms"]) >= {"p90", "p95", "p99"}
    assert exports["mobilenet-qat"].summary["gpu_compute_ms"]["p95"] == pytest.approx(0.352295, abs=5e-7)


def test_exact_duration_recovers_float32_difference():
    v = tx.exact_duration_ms(0.861328, 3200.92)
    assert v == pytest.approx(0.861328, abs=5e-7)
    assert (v / 2 ** -12) == round(v / 2 ** -12)  # multiple of the float32 spacing at 3200 ms
    assert tx.exact_duration_ms(0.0, 3200.0) == 0.0


def test_a100_fp16_layers(exports):
    f = exports["a100-fp16"].layers
    assert list(f.columns[: len(lf.COLUMNS)]) == list(lf.COLUMNS)
    assert len(f) == 36
    hot = f.sort_values("share_pct", ascending=False).iloc[0]
    assert hot["name"] == "Conv_0 + Relu_1" and hot["type"] == "CaskConvolution"
    assert hot["share_pct"] == pytest.approx(10.9768, abs=1e-3)  # trtexec's own percentage
    assert hot["time_avg_ms"] == pytest.approx(0.111616)
    assert hot["precision_in"] == "fp16" and hot["precision_out"] == "fp16"
    assert hot["tactic"].startswith("trt_turing_cutlass_image_network_first_layer_hmma")
    assert hot["weights_bytes"] == (9408 + 64) * 2
    assert hot["activation_bytes"] == (32 * 3 * 224 * 224 + 32 * 64 * 112 * 112) * 2
    assert hot["fused_nodes"] == ["Conv_0", "Relu_1"]
    assert f["share_pct"].sum() == pytest.approx(100.0)
    mix = lf.precision_mix(f)
    assert sum(mix.values()) == pytest.approx(100.0) and mix["fp16"] == pytest.approx(92.04, abs=0.01)


@pytest.mark.parametrize("name,reformats", [("a100-qat", 12), ("a100-qat-residual", 3),
                                            ("a100-qat-residual-qgap", 1), ("3090-qat", 2),
                                            ("mobilenet-qat", 18), ("mobilenet-v2-qat", 3)])
def test_reformat_layers_in_qat_engines(exports, name, reformats):
    f = exports[name].layers
    assert int((f["type"] == "Reformat").sum()) == reformats
    assert exports[name].precision == "int8"
    mix = lf.precision_mix(f)
    assert sum(mix.values()) == pytest.approx(100.0) and max(mix, key=mix.get) == "int8"


@pytest.mark.parametrize("name", list(SETS))
def test_layer_sum_exceeds_end_to_end(exports, name):
    e = exports[name]
    tot = lf.layer_totals(e.layers)
    assert tot["layer_sum_ms"] > e.summary["gpu_compute_ms"]["median"]
    assert e.messages == []


def test_fused_nodes_from_names():
    assert tx.fused_nodes_from_name("layer1.0.conv2.weight + QuantizeLinear_32 + Conv_34 + Add_36 + Relu_37") == \
        ["QuantizeLinear_32", "Conv_34", "Add_36", "Relu_37"]
    assert tx.fused_nodes_from_name("features.0.0.weight + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)") == \
        ["QuantizeLinear_8", "Conv_12", "Clip_16"]
    assert tx.fused_nodes_from_name("Reformatting CopyNode for Input Tensor 0 to Conv_5") == []
    assert tx.fused_nodes_from_metadata("[ONNX Layer: /conv1/Conv]\x1e[ONNX Layer: /relu/Relu]") == \
        ["/conv1/Conv", "/relu/Relu"]


# -- bad input, made from real fixtures --------------------------------------------------------------
def _copy_set(src: Path, dst: Path, roles: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for f in src.iterdir():
        c = tx.classify(f)
        if c and c[1] in roles:
            shutil.copy(f, dst / f.name)
            out[c[1]] = dst / f.name
    return out


def test_profile_without_layer_info(trtexec_fixtures, tmp_path):
    _copy_set(trtexec_fixtures / SETS["a100-fp16"], tmp_path, ("profile", "times", "run_meta"))
    (s,) = tx.find_export_sets([tmp_path])
    e = tx.load_export(s)
    assert len(e.layers) == 36 and e.layers["type"].isna().all()
    assert e.layers["time_avg_ms"].notna().all()
    assert any("without its layer info" in m and "--exportLayerInfo" in m for m in e.messages)
    assert e.summary["gpu_compute_ms"]["median"] == pytest.approx(0.862183, abs=5e-7)


def test_default_verbosity_layer_info(trtexec_fixtures, tmp_path):
    files = _copy_set(trtexec_fixtures / SETS["a100-qat"], tmp_path, ("profile", "layers"))
    g = json.loads(files["layers"].read_text())
    files["layers"].write_text(json.dumps({"Layers": [x["Name"] for x in g["Layers"]], "Bindings": g["Bindings"]}))
    (s,) = tx.find_export_sets([tmp_path])
    e = tx.load_export(s)
    assert not e.detailed and len(e.layers) == 37
    assert any("--profilingVerbosity=detailed" in m for m in e.messages)
    assert e.layers["precision_in"].isna().all() and e.layers["time_avg_ms"].notna().all()
    assert "Conv_9" in e.layers.set_index("name").loc["conv1.weight + QuantizeLinear_7 + Conv_9", "fused_nodes"]


def test_mismatched_names_keep_matches(trtexec_fixtures, tmp_path):
    files = _copy_set(trtexec_fixtures / SETS["a100-fp32"], tmp_path, ("profile", "layers"))
    g = json.loads(files["layers"].read_text())
    g["Layers"][0]["Name"] = "renamed A"
    g["Layers"][3]["Name"] = "renamed B"
    files["layers"].write_text(json.dumps(g))
    (s,) = tx.find_export_sets([tmp_path])
    e = tx.load_export(s)
    msg = " ".join(e.messages)
    assert "2 profiled layer(s) missing from the layer info" in msg and "2 layer-info layer(s) never profiled" in msg
    assert "kept the 30 that match" in msg
    assert len(e.layers) == 32 and int(e.layers["type"].notna().sum()) == 30


def test_multi_profile_engine(trtexec_fixtures, tmp_path):
    files = _copy_set(trtexec_fixtures / SETS["a100-fp16"], tmp_path, ("profile", "layers"))
    g = json.loads(files["layers"].read_text())
    g["Layers"] = g["Layers"] + [{**x, "Name": x["Name"] + " [profile 1]"} for x in g["Layers"]]
    files["layers"].write_text(json.dumps(g))
    (s,) = tx.find_export_sets([tmp_path])
    e = tx.load_export(s)
    assert any("2 optimization profiles" in m and "profile 0" in m for m in e.messages)
    assert len(e.layers) == 36 and e.layers["type"].notna().all()


def test_truncated_json_names_file_and_position(trtexec_fixtures, tmp_path):
    files = _copy_set(trtexec_fixtures / SETS["a100-fp16"], tmp_path, ("profile", "layers"))
    text = files["layers"].read_text()
    files["layers"].write_text(text[: len(text) // 2])
    (s,) = tx.find_export_sets([tmp_path])
    e = tx.load_export(s)  # the profile is intact: its layer times are kept, the broken file is named
    (msg,) = [m for m in e.messages if files["layers"].name in m]
    assert "truncated" in msg and "line" in msg and "character" in msg and "skipped" in msg
    assert len(e.layers) == 36 and e.layers["time_avg_ms"].notna().all()
    files["profile"].write_text(files["profile"].read_text()[:100])  # nothing readable left: an error
    with pytest.raises(InputError) as err:
        tx.load_export(s)
    assert "truncated" in str(err.value)


def test_tensorrt10_metadata_and_stream(trtexec_fixtures, tmp_path):
    files = _copy_set(trtexec_fixtures / SETS["a100-fp16"], tmp_path, ("profile", "layers"))
    g = json.loads(files["layers"].read_text())
    g["Layers"][1]["Metadata"] = "[ONNX Layer: /conv1/Conv]\x1e[ONNX Layer: /relu/Relu]"
    g["Layers"][1]["StreamId"] = 1
    files["layers"].write_text(json.dumps(g))
    info, _, detailed = tx.parse_layer_info(files["layers"])
    row = info.set_index("name").loc["Conv_0 + Relu_1"]
    assert detailed and row["fused_nodes"] == ["/conv1/Conv", "/relu/Relu"] and row["stream_id"] == 1
    assert row["nodes_from"] == "metadata"


def test_trtexec_log(tmp_path, exports):
    meta = exports["mobilenet-qat"].trtexec
    g = meta["gpu_compute_ms"]
    line = ", ".join([f"min = {g['min']} ms", f"max = {g['max']} ms", f"mean = {g['mean']} ms",
                      f"median = {g['median']} ms", f"percentile(90%) = {g['p90']} ms",
                      f"percentile(95%) = {g['p95']} ms", f"percentile(99%) = {g['p99']} ms"])
    log = tmp_path / "mobilenet.qat.onnx.engine.log"
    log.write_text("&&&& RUNNING TensorRT.trtexec [TensorRT v8401] # trtexec --onnx=m.onnx\n"
                   "[06/01/2022-10:00:00] [I] Precision: FP32+FP16+INT8\n"
                   "[06/01/2022-10:00:00] [I] Duration: 3s (+ 200ms warm up)\n"
                   "[06/01/2022-10:00:05] [I] Warmup completed 455 queries over 200 ms\n"
                   "[06/01/2022-10:00:05] [I] === Performance summary ===\n"
                   f"[06/01/2022-10:00:05] [I] Throughput: {meta['throughput_qps']} qps\n"
                   f"[06/01/2022-10:00:05] [I] GPU Compute Time: {line}\n"
                   f"[06/01/2022-10:00:05] [I] Total Host Walltime: {meta['walltime_s']} s\n")
    p = tx.parse_log(log)
    assert p["tensorrt_version"] == "8.4.1" and p["warmup_ms"] == 200 and p["warmup_queries"] == 455
    assert p["gpu_compute_ms"] == g and p["throughput_qps"] == meta["throughput_qps"]
    assert p["build_options"]["Precision"] == "FP32+FP16+INT8"


# -- other sources into the same frame ---------------------------------------------------------------
def test_iprofiler_records_match_trtexec_profile(exports):
    from profiler.layers.trt_profiler import LayerTimes

    f = exports["a100-fp32"].layers
    lt = LayerTimes()
    for _ in range(3):  # three iterations of identical per-layer times
        for name, ms in zip(f["name"], f["time_avg_ms"]):
            lt.add(name, ms)
    out = lt.frame("fp32")
    assert len(lt.iterations) == 3 and len(out) == 32
    assert out["count"].tolist() == [3] * 32
    assert np.allclose(out["time_avg_ms"], f["time_avg_ms"]) and np.allclose(out["share_pct"], f["share_pct"])


def test_ort_profile_frame(tmp_path):
    import importlib.util

    import onnxruntime as ort

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None:
        pytest.skip("rapidocr-onnxruntime (test dependency) is not installed")
    model = Path(spec.origin).parent / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "ort")
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)
    for _ in range(4):
        sess.run(None, {sess.get_inputs()[0].name: x})
    from profiler.layers.ort import parse_ort_profile

    f = parse_ort_profile(sess.end_profiling(), "ort-cpu")
    assert list(f.columns[: len(lf.COLUMNS)]) == list(lf.COLUMNS)
    assert len(f) > 20 and set(f["count"]) == {4} and "Conv" in set(f["type"])
    assert f["share_pct"].sum() == pytest.approx(100.0) and (f["variant"] == "ort-cpu").all()
    assert set(f["tactic"]) == {"CPUExecutionProvider"} and lf.precision_mix(f).get("fp32", 0) > 50


def test_layer_info_names_the_network_io_each_layer_touches(tmp_path):
    """``Bindings`` lists I/O tensors without a direction: one a layer writes is an output (even when
    another layer reads it too), any other an input; without ``Bindings`` nothing is guessed."""
    def t(name):
        return {"Name": name, "Dimensions": [1, 8], "Format/Datatype": "Row major linear FP32"}

    layers = [{"Name": "q", "LayerType": "Reformat", "Inputs": [t("x")], "Outputs": [t("a")]},
              {"Name": "mm", "LayerType": "CaskGemm", "Inputs": [t("a")], "Outputs": [t("y")]},
              {"Name": "tail", "LayerType": "Reformat", "Inputs": [t("y")], "Outputs": [t("z")]}]
    path = tmp_path / "e.graph.json"
    path.write_text(json.dumps({"Layers": layers, "Bindings": ["x", "y", "z"]}))
    info, _, _ = tx.parse_layer_info(path)
    io = info.set_index("name")[["network_inputs", "network_outputs"]].to_dict("index")
    assert io == {"q": {"network_inputs": ["x"], "network_outputs": []},
                  "mm": {"network_inputs": [], "network_outputs": ["y"]},
                  "tail": {"network_inputs": [], "network_outputs": ["z"]}}
    path.write_text(json.dumps({"Layers": layers}))
    info, _, _ = tx.parse_layer_info(path)
    assert not any(info["network_inputs"].map(len)) and not any(info["network_outputs"].map(len))
