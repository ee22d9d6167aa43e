"""`trtprof import` end to end on real trtexec exports: JSON, store, report, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.cli import cli


@pytest.fixture()
def a100(trtexec_fixtures):
    base = trtexec_fixtures / "pytorch/resnet/A100"
    return [str(base / "fp32"), str(base / "fp16")]


def test_import_two_variants_json_and_store(a100, tmp_path):
    out, db = tmp_path / "imp.json", tmp_path / "t.db"
    r = CliRunner().invoke(cli, ["import", *a100, "--json", str(out), "--db", str(db), "--label", "a100"])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data) == {"kind", "run", "variants", "layers", "alignment", "findings"}
    assert data["kind"] == "import"
    keys = [v["key"] for v in data["variants"]]
    assert keys == ["fp16/resnet", "fp32/resnet"]  # sorted by directory
    fp16 = data["variants"][0]
    assert fp16["gpu_compute_ms"]["median"] == pytest.approx(0.862183, abs=5e-7)
    assert fp16["latency_ms"]["p99"] == pytest.approx(0.871338, abs=5e-7)
    assert fp16["throughput_qps"] == pytest.approx(1155.36, rel=1e-5)
    assert fp16["layer_sum_ms"] > fp16["gpu_compute_ms"]["median"] and fp16["per_layer_overhead_ms"] > 0
    assert "exceeds the end-to-end latency" in fp16["note"]
    assert all(m["equal"] for k, m in fp16["trtexec_match"].items() if k.startswith("gpu_compute_ms"))
    assert len(data["layers"]) == 32 + 36 and {x["variant"] for x in data["layers"]} == set(keys)
    (al,) = data["alignment"]
    assert (al["a"], al["b"]) == ("fp32/resnet", "fp16/resnet") and al["summary"]["by_method"] == {"onnx-nodes": 23}
    rules = {(f["variant"], f["rule"]) for f in data["findings"]}
    assert ("fp32/resnet", "no_tensor_cores") in rules and ("fp16/resnet", "layer_hotspot") in rules

    from profiler.store import Store

    store = Store.open(str(db))
    try:
        run = store.run_dict("a100", with_samples=True)
    finally:
        store.close()
    assert run["kind"] == "import" and run["status"] == "ok" and run["id"] == data["run"]["id"]
    v16, v32 = run["variants"]
    assert len(v32["samples"]) == 1500 and len(v16["samples"]) == 3468
    assert len(v16["layers"]) == 36 and v16["precision"] == "fp16" and v16["cuda_graph"] is True
    s0 = v16["samples"][0]
    assert set(s0) >= {"idx", "start_ms", "latency_ms", "enqueue_ms", "h2d_ms", "compute_ms", "d2h_ms"}
    conv = next(x for x in v16["layers"] if x["name"] == "Conv_0 + Relu_1")
    assert conv["extra"]["fused_nodes"] == ["Conv_0", "Relu_1"] and conv["tactic"].startswith("trt_turing")
    assert {f["rule"] for f in run["findings"]} == {r for _, r in rules}


def test_import_report_and_no_store(a100, tmp_path):
    pytest.importorskip("profiler.report")
    rep = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["import", a100[1], "--report", str(rep), "--no-store", "--variant", "fp16"])
    assert r.exit_code == 0, r.output
    assert rep.stat().st_size > 10_000 and "Conv_0 + Relu_1" in rep.read_text()
    assert "fp16: 36 layers" in r.output
    assert not (tmp_path / "trtprof.db").exists()


def test_bad_input_exit_codes(a100, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    src = next(p for p in Path(a100[1]).glob("*.profile.json"))
    text = src.read_text()
    (d / src.name).write_text(text[: len(text) // 3])
    r = subprocess.run([sys.executable, "-m", "profiler", "import", str(d), "--no-store"],
                       capture_output=True, text=True)
    assert r.returncode == 3 and src.name in r.stderr and "truncated" in r.stderr
    r = subprocess.run([sys.executable, "-m", "profiler", "import", *a100, "--no-store", "--variant", "only-one"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--variant given 1 time(s) but 2 export set(s)" in r.stderr


def test_partial_import_warns(a100, tmp_path):
    for f in Path(a100[1]).iterdir():
        if f.name.endswith((".profile.json", ".timing.json")):
            shutil.copy(f, tmp_path / f.name)
    out = tmp_path / "o.json"
    r = CliRunner().invoke(cli, ["import", str(tmp_path), "--no-store", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert any("without its layer info" in w for w in data["run"]["warnings"])
    assert data["variants"][0]["gpu_compute_ms"]["median"] == pytest.approx(0.862183, abs=5e-7)
    assert data["alignment"] == []


def test_imports_of_different_networks_are_refused_unless_forced(trtexec_fixtures, tmp_path):
    """A PyTorch ResNet on an A100 against a TensorFlow ResNet-50 on an RTX 3090 (input.1 / 191 against
    input_1 / predictions) was gated as a 6.1x regression, exit 1, without --force; one model's FP32 and FP16
    imports still compare."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    runner = CliRunner()
    for label, path in (("pt32", "pytorch/resnet/A100/fp32"), ("pt16", "pytorch/resnet/A100/fp16"),
                        ("ptqat", "pytorch/resnet/A100/qat"), ("tf32", "tensorflow/resnet/RTX-3090/fp32")):
        r = runner.invoke(cli, ["import", str(trtexec_fixtures / path), "--db", db, "--label", label])
        assert r.exit_code == 0, r.output
    r = subprocess.run([sys.executable, "-m", "profiler", "compare", "pt32", "tf32", "--db", db],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "different models" in r.stderr and "input.1" in r.stderr and "input_1" in r.stderr
    forced = runner.invoke(cli, ["compare", "pt32", "tf32", "--db", db, "--force"])
    assert "FORCED COMPARISON" in forced.output
    same = runner.invoke(cli, ["compare", "pt32", "pt16", "--db", db])
    assert same.exit_code == 0 and "verdict: improvement" in same.output
    # FP16 faster than FP32 on speed alone: the output says nobody checked its accuracy
    assert "accuracy: measured in neither run" in same.output
    # the QAT export of the same network (its output numbered 422, not 191) is no other model; its variant is
    # named apart, so nothing matches, and the hint says how to match them
    qat = runner.invoke(cli, ["compare", "pt16", "ptqat", "--db", db])
    assert qat.exit_code == 0 and "different models" not in qat.output and "--variant NAME" in qat.output
