"""profiler.store.rows: the one place documents become store rows, checked through a real store."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from profiler.store import Store
from profiler.store.rows import export_rows, import_run, sweep_rows, sweep_run


def test_a_sweep_variant_stores_its_accuracy_as_one_row_per_output(tmp_path):
    rec = {"key": "fp16-wsdefault-s1", "precision": "fp16", "status": "ok", "latency_ms": {"median": 1.5},
           "enqueue_ms": {"median": 0.2},
           "accuracy": {"logits": {"rel_l2": 0.01, "passed": True}, "boxes": {"rel_l2": 0.3, "passed": False}}}
    rows = sweep_rows(rec, [{"idx": 0, "latency_ms": 1.4}, {"idx": 1, "latency_ms": 1.6}], None)
    assert "accuracy" not in rows.variant and rows.variant["key"] == rec["key"]
    assert [a["output"] for a in rows.accuracy] == ["logits", "boxes"]
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    rid = store.create_run(kind="sweep", source="m.onnx")
    store.add_rows(rid, rows)
    (v,) = store.run_dict(rid, with_samples=True)["variants"]
    store.close()
    assert v["metrics"]["enqueue_ms"] == {"median": 0.2}  # an unknown field lands in metrics
    assert {a["output"]: a["passed"] for a in v["accuracy"]} == {"logits": True, "boxes": False}
    assert [s["latency_ms"] for s in v["samples"]] == [1.4, 1.6]


def test_an_export_keeps_its_layer_details_in_extra_and_its_timings_in_metrics(tmp_path):
    layers = pd.DataFrame({"variant": ["a", "a"], "name": ["conv1", "relu1"], "type": ["Conv", "Act"],
                           "time_avg_ms": [0.5, 0.1], "fused_nodes": [["Conv_0", "Add_1"], None],
                           "weights_bytes": [1024, None]})
    v = {"key": "a", "kind": "export", "status": "ok", "gpu_compute_ms": {"median": 0.7}, "time_by_type": {"x": 1}}
    rows = export_rows(v, SimpleNamespace(layers=layers, samples=None))
    assert "time_by_type" not in rows.variant
    assert rows.variant["metrics"]["gpu_compute_ms"] == {"median": 0.7} and rows.variant["metrics"]["walltime_s"] is None
    assert rows.layers[0]["extra"] == {"fused_nodes": ["Conv_0", "Add_1"], "weights_bytes": 1024}
    assert "variant" not in rows.layers[0] and "extra" in rows.layers[1]
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    run = import_run({"run": {"source": "a/b c/d", "label": "x"}})
    assert run["config"] == {"paths": ["a/b", "c/d"]} and run["kind"] == "import"
    rid = store.create_run(**run)
    store.add_rows(rid, rows)
    (sv,) = store.run_dict(rid)["variants"]
    store.close()
    assert [x["name"] for x in sv["layers"]] == ["conv1", "relu1"]
    assert sv["layers"][0]["extra"]["fused_nodes"] == ["Conv_0", "Add_1"]


def test_a_sweep_run_row_names_the_gpu_only_for_a_gpu_backend(tmp_path):
    env = {"host": "h1", "device": "NVIDIA H200", "driver_version": "570.1", "cuda_version": "12.8"}
    trt = SimpleNamespace(name="tensorrt", is_gpu=True, tensorrt_version=lambda: "10.14.1")
    cpu = SimpleNamespace(name="onnxruntime", is_gpu=False, tensorrt_version=lambda: None)
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}")
    rid = store.create_run(**sweep_run({"precisions": ["fp16"]}, tmp_path / "m.onnx", "ab" * 32, trt, env, "nightly"))
    run = store.run_dict(rid)
    cpu_run = sweep_run({}, "models/m.onnx", "cd" * 32, cpu, {**env, "device": "Intel Xeon"}, None)
    store.close()
    assert (run["kind"], run["model"], run["label"], run["backend"]) == ("sweep", "m.onnx", "nightly", "tensorrt")
    assert (run["gpu"], run["tensorrt_version"], run["host"], run["cuda_version"]) == ("NVIDIA H200", "10.14.1", "h1",
                                                                                       "12.8")
    assert run["config"] == {"precisions": ["fp16"]} and run["source_hash"] == "ab" * 32
    assert cpu_run["gpu"] is None and cpu_run["tensorrt_version"] is None and cpu_run["model"] == "m.onnx"
