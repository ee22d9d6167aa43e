"""trtprof sweep: the plan, the rules, storing, failures, Ctrl-C and --resume, the CLI, a real model."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from profiler import stats  # noqa: E402
from profiler.backends.base import QueryTiming  # noqa: E402
from profiler.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from profiler.cli import main  # noqa: E402
from profiler.harness import summarize_timings  # noqa: E402
from profiler.rules.sweep import jitter_threshold_pct, sweep_findings  # noqa: E402
from profiler.store import Store  # noqa: E402
from profiler.sweep import SweepConfig, plan_variants, resume_sweep, run_sweep  # noqa: E402
from tests.onnx_models import FAST_SWEEP as FAST, conv_model  # noqa: E402

MS = 1_000_000


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))


# -- the plan ---------------------------------------------------------------------------------------
def test_plan_is_the_axes_product_with_reasons_for_skips():
    cfg = SweepConfig(precisions=["fp32", "fp16"], workspaces=[64 << 20, 1 << 30], streams=[1, 2],
                      cuda_graph=[False, True])
    plan = plan_variants(cfg, OnnxRuntimeBackend(device="cpu"))
    assert len(plan) == 16
    assert [p.spec.key for p in plan[:4]] == ["fp32-ws64M-s1", "fp32-ws64M-s1-graph", "fp32-ws64M-s2",
                                             "fp32-ws64M-s2-graph"]
    run = [p.spec.key for p in plan if p.skip_reason is None]
    assert run == ["fp32-ws64M-s1", "fp32-ws64M-s2", "fp16-ws64M-s1", "fp16-ws64M-s2"]
    graph = next(p for p in plan if p.spec.key == "fp16-ws64M-s2-graph")
    assert "CUDA execution provider" in graph.skip_reason
    ws = next(p for p in plan if p.spec.key == "fp16-ws1G-s2")
    assert "same engine as fp16-ws64M-s2" in ws.skip_reason


def test_config_rejects_nonsense():
    from profiler.errors import UsageError

    with pytest.raises(UsageError, match="fp8"):
        SweepConfig(precisions=["fp8"])
    with pytest.raises(UsageError):
        SweepConfig(streams=[0])
    assert SweepConfig.from_dict(SweepConfig(precisions=["fp16"], streams=[2]).to_dict()).streams == [2]


# -- the rules ---------------------------------------------------------------------------------------
def variant_from(timings: list[QueryTiming], key="fp16-wsdefault-s1", **extra) -> dict:
    s = summarize_timings(timings)
    prec, ws, st = key.split("-")[:3]
    return {"key": key, "precision": prec, "workspace_bytes": None if ws == "wsdefault" else int(ws[2:-1]) << 20,
            "streams": int(st[1:]), "cuda_graph": False, "status": "ok", "latency_ms": s["latency_ms"],
            "enqueue_ms": s["enqueue_ms"], "compute_ms": s["compute_ms"], "h2d_ms": s["h2d_ms"],
            "d2h_ms": s["d2h_ms"], "throughput_qps": s["throughput_qps"], "accuracy": {}, **extra}


def series(n: int, enqueue_ms: float, compute_ms: float, h2d=None, d2h=None, jitter=0.0) -> list[QueryTiming]:
    out, t = [], 0
    rng = np.random.default_rng(1)
    for _ in range(n):
        c = compute_ms * (1 + jitter * rng.standard_normal())
        dur = int((c + (h2d or 0) + (d2h or 0)) * MS)
        out.append(QueryTiming(t, t + dur, enqueue_ms, c, h2d, d2h))
        t += dur
    return out


GPU_ENV = {"name": "tensorrt", "version": "10.13.0"}


def rules_of(findings, rule):
    return [f for f in findings if f.rule == rule]


def test_enqueue_bound_fires_above_0_8_of_compute_and_not_below():
    bound = variant_from(series(50, enqueue_ms=0.9, compute_ms=1.0))
    fine = variant_from(series(50, enqueue_ms=0.5, compute_ms=1.0), key="fp32-wsdefault-s1")
    found = rules_of(sweep_findings([bound, fine], GPU_ENV), "launch_overhead")
    assert [f.variant for f in found] == ["fp16-wsdefault-s1"]
    assert found[0].evidence["enqueue_over_compute"] == pytest.approx(0.9)
    assert found[0].threshold["enqueue_over_compute"] == 0.8
    # a synchronous backend's enqueue is its compute: nothing to say about launches
    sync = variant_from(series(50, enqueue_ms=1.0, compute_ms=1.0), synchronous_enqueue=True)
    assert not rules_of(sweep_findings([sync], GPU_ENV), "launch_overhead")
    # the threshold is overridable
    found = sweep_findings([fine], GPU_ENV, {"launch_overhead": {"enqueue_over_compute": 0.4}})
    assert [(f.variant, f.scope) for f in rules_of(found, "launch_overhead")] == [("fp32-wsdefault-s1", "sweep")]
    # configurations stored before ids were bare keyed them "sweep.<rule>": a resumed run still reads them
    found = sweep_findings([fine], GPU_ENV, {"sweep.launch_overhead": {"enqueue_over_compute": 0.4}})
    assert [f.variant for f in rules_of(found, "launch_overhead")] == ["fp32-wsdefault-s1"]


def test_transfer_bound_when_a_copy_takes_as_long_as_compute():
    v = variant_from(series(20, 0.1, 1.0, h2d=1.0, d2h=0.2))
    w = variant_from(series(20, 0.1, 1.0, h2d=0.5, d2h=0.2), key="fp32-wsdefault-s1")
    found = rules_of(sweep_findings([v, w], GPU_ENV), "transfer_bound")
    assert [f.variant for f in found] == ["fp16-wsdefault-s1"]
    assert found[0].evidence["median_h2d_ms"] == pytest.approx(1.0)


def test_jitter_threshold_depends_on_the_tensorrt_version():
    assert jitter_threshold_pct({"name": "tensorrt", "version": "10.13.2"})[0] == 1.0
    assert jitter_threshold_pct({"name": "tensorrt", "version": "10.14.1"})[0] == 2.5
    assert jitter_threshold_pct({"name": "tensorrt", "version": "8.6.1"})[0] == 1.0
    assert jitter_threshold_pct({"name": "onnxruntime", "provider": "CPUExecutionProvider"})[0] == 5.0
    v = variant_from(series(400, 0.1, 1.0, jitter=0.018))
    cov = v["compute_ms"]["cov_pct"]
    assert 1.0 < cov < 2.5
    assert rules_of(sweep_findings([v], {"name": "tensorrt", "version": "10.13.0"}), "jitter")
    assert not rules_of(sweep_findings([v], {"name": "tensorrt", "version": "10.14.0"}), "jitter")


def test_fastest_workspace_and_stream_rules():
    def v(key, median_ms, qps, **extra):
        prec, ws, st = key.split("-")[:3]
        lat = {"median": median_ms, "count": 10, "cov_pct": 0.1}
        return {"key": key, "precision": prec, "workspace_bytes": int(ws[2:-1]) << 20, "streams": int(st[1:]),
                "cuda_graph": False, "status": "ok", "latency_ms": lat, "compute_ms": lat,
                "throughput_qps": qps, "accuracy": {}, **extra}

    variants = [
        v("fp32-ws64M-s1", 4.0, 250), v("fp32-ws1024M-s1", 3.0, 333), v("fp32-ws1024M-s2", 5.5, 340),
        v("fp16-ws64M-s1", 2.0, 500, accuracy={"y": {"passed": False}}),
        v("fp16-ws1024M-s1", 2.02, 495, accuracy={"y": {"passed": True}}),
        v("fp16-ws1024M-s2", 3.0, 900),
        {"key": "int8-ws64M-s1", "precision": "int8", "status": "failed", "error": "build failed"},
    ]
    found = sweep_findings(variants, GPU_ENV)
    fastest = rules_of(found, "fastest_variant")[0]
    assert fastest.variant == "fp16-ws64M-s1"
    assert fastest.evidence["speedup_vs_fp32"] == pytest.approx(2.0)
    assert fastest.evidence["highest_throughput_variant"] == "fp16-ws1024M-s2"
    assert fastest.evidence["fastest_within_accuracy_thresholds"] == "fp16-ws1024M-s1"
    ws = {(f.variant, f.severity) for f in rules_of(found, "workspace_limited")}
    assert ("fp32-ws64M-s1", "medium") in ws  # 33% slower with less workspace
    assert ("fp16-ws64M-s1", "info") in ws  # within 5%: more workspace did not help
    scaling = {f.variant: f for f in rules_of(found, "stream_scaling")}
    assert scaling["fp16-ws1024M-s2"].severity == "info"  # 495 -> 900 qps
    assert scaling["fp32-ws1024M-s2"].severity == "medium"  # 333 -> 340 qps: +2%, within noise
    assert scaling["fp32-ws1024M-s2"].evidence["no_gain_variants"] == ["fp32-ws1024M-s2"]
    multi = rules_of(found, "multistream_latency")[0]
    assert {r["variant"] for r in multi.evidence["variants"]} == {"fp32-ws1024M-s2", "fp16-ws1024M-s2"}


# -- the library -----------------------------------------------------------------------------------
def test_sweep_stores_samples_whose_statistics_match(tmp_path):
    model = conv_model(tmp_path / "conv.onnx")
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    summary = run_sweep(SweepConfig(model=model, precisions=["fp32", "fp16"], streams=[1, 2], backend="onnxruntime",
                                    **FAST), store=store)
    assert [v["key"] for v in summary["variants"]] == ["fp32-wsdefault-s1", "fp32-wsdefault-s2",
                                                      "fp16-wsdefault-s1", "fp16-wsdefault-s2"]
    run = store.run_dict(summary["run"]["id"], with_samples=True)
    assert run["status"] == "ok" and run["kind"] == "sweep" and run["backend"] == "onnxruntime"
    for stored, v in zip(run["variants"], summary["variants"]):
        lat = [s["latency_ms"] for s in stored["samples"]]
        assert stored["latency_ms"] == v["latency_ms"] == stats.summarize(lat)
        assert len(lat) >= 12 * v["streams"]
        starts = [s["start_ms"] for s in stored["samples"]]
        ends = [s["start_ms"] + s["latency_ms"] for s in stored["samples"]]
        assert v["throughput_qps"] == pytest.approx(len(lat) / ((max(ends) - min(starts)) / 1e3), rel=1e-3)
        assert {s["stream"] for s in stored["samples"]} == set(range(v["streams"]))
        assert stored["layers"], "per-node profile stored"
        assert {x["type"] for x in stored["layers"]} >= {"Conv", "Gemm"}
    fp16 = summary["variants"][2]
    assert fp16["accuracy"]["probs"]["passed"] is True
    assert fp16["accuracy"]["probs"]["cosine"] > 0.999
    assert fp16["checklist"]["executed"]["status"] == "ok"
    assert fp16["memory"]["engine_size_bytes"] > 0
    rows = run["variants"][2]["accuracy"]
    assert rows[0]["output"] == "probs" and rows[0]["passed"] is True
    assert {f["rule"] for f in run["findings"]} >= {"fastest_variant", "multistream_latency"}


def test_a_variant_that_fails_to_build_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """ONNX Runtime rejects the fp16 model (an opset it does not know): fp16 fails, fp32 and the rest run."""
    import profiler.variants as variants

    good = conv_model(tmp_path / "conv.onnx")
    rejected = conv_model(tmp_path / "future.onnx", opset=99)
    real_prepare = variants.prepare

    def prepare_with_a_rejected_fp16(model_path, precision, **kw):
        if precision == "fp16":
            return variants.PreparedModel(path=rejected, precision="fp16", info={"warnings": []})
        return real_prepare(model_path, precision, **kw)

    monkeypatch.setattr(variants, "prepare", prepare_with_a_rejected_fp16)
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    summary = run_sweep(SweepConfig(model=good, precisions=["fp16", "fp32"], streams=[1, 2], backend="onnxruntime",
                                    layers=False, **FAST), store=store)
    status = [(v["key"], v["status"]) for v in summary["variants"]]
    assert status == [("fp16-wsdefault-s1", "failed"), ("fp16-wsdefault-s2", "failed"),
                      ("fp32-wsdefault-s1", "ok"), ("fp32-wsdefault-s2", "ok")]
    failed = summary["variants"][0]
    assert "future.onnx" in failed["error"] and failed["latency_ms"] is None
    assert failed["checklist"]["optimized"]["status"] == "failed"
    assert failed["checklist"]["executed"]["status"] == "not reached"
    assert summary["variants"][2]["latency_ms"]["count"] >= 12
    run = store.run_dict(summary["run"]["id"])
    assert run["status"] == "ok"
    assert [(v["key"], v["status"]) for v in run["variants"]] == status


class InterruptingBackend(OnnxRuntimeBackend):
    """Test double: the real ONNX Runtime backend, except that building ``interrupt_key`` is a Ctrl-C."""

    def __init__(self, interrupt_key: str):
        super().__init__(device="cpu")
        self.interrupt_key = interrupt_key
        self.built: list[str] = []

    def build(self, model_path, spec, cache_dir=None):
        if spec.key == self.interrupt_key:
            raise KeyboardInterrupt
        self.built.append(spec.key)
        return super().build(model_path, spec, cache_dir)


def test_ctrl_c_stores_finished_variants_as_interrupted_and_resume_completes(tmp_path):
    model = conv_model(tmp_path / "conv.onnx")
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cfg = SweepConfig(model=model, precisions=["fp32", "fp16"], streams=[1, 2], backend="onnxruntime",
                      label="nightly", layers=False, **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, store=store, backend=InterruptingBackend("fp16-wsdefault-s1"))
    runs = store.list_runs(kind="sweep")
    assert len(runs) == 1
    run = store.run_dict(runs[0]["id"], with_samples=True)
    assert run["status"] == "interrupted"
    assert [v["key"] for v in run["variants"]] == ["fp32-wsdefault-s1", "fp32-wsdefault-s2"]
    assert all(len(v["samples"]) >= 12 for v in run["variants"])
    assert run["summary"]["run"]["status"] == "interrupted" and len(run["summary"]["variants"]) == 2
    kept = {v["key"]: v["latency_ms"] for v in run["variants"]}

    resumer = InterruptingBackend("never")
    summary = resume_sweep(store, "nightly", backend=resumer)
    assert resumer.built == ["fp32-wsdefault-s1", "fp16-wsdefault-s1", "fp16-wsdefault-s2"]  # reference + 2 left
    run = store.run_dict(runs[0]["id"])
    assert run["status"] == "ok"
    assert [v["key"] for v in run["variants"]] == ["fp32-wsdefault-s1", "fp32-wsdefault-s2",
                                                   "fp16-wsdefault-s1", "fp16-wsdefault-s2"]
    assert [v["key"] for v in summary["variants"]] == [v["key"] for v in run["variants"]]
    assert {k: v["latency_ms"] for k, v in zip(kept, summary["variants"])} == kept  # untouched
    assert summary["variants"][2]["accuracy"]["probs"]["passed"] is True
    assert run["findings"]
    from profiler.errors import UsageError

    with pytest.raises(UsageError, match="nothing to resume"):
        resume_sweep(store, runs[0]["id"])


# -- the CLI -----------------------------------------------------------------------------------------
def cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_cli_end_to_end_on_the_bundled_default(tmp_path, capsys):
    db, out = tmp_path / "runs.db", tmp_path / "out"
    code, stdout, stderr = cli(["--db", str(db), "sweep", "--out", str(out), "--duration", "0.05",
                                "--warmup", "20", "--iterations", "5", "--precision", "fp32,fp16",
                                "--streams", "1,2", "--workspace", "64M,256M", "--cuda-graph", "off,on"], capsys)
    assert code == 0, stderr
    assert "backend onnxruntime:" in stderr and "TensorRT" in stderr  # auto says what it picked and why
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"kind", "run", "variants", "findings"}
    assert summary["kind"] == "sweep"
    assert len(summary["variants"]) == 16
    for v in summary["variants"]:
        for k in ("key", "precision", "workspace_bytes", "streams", "cuda_graph", "backend", "status", "error",
                  "latency_ms", "enqueue_ms", "throughput_qps", "accuracy"):
            assert k in v, k
    ok = [v for v in summary["variants"] if v["status"] == "ok"]
    assert [v["key"] for v in ok] == ["fp32-ws64M-s1", "fp32-ws64M-s2", "fp16-ws64M-s1", "fp16-ws64M-s2"]
    assert all(v["error"] for v in summary["variants"] if v["status"] == "skipped")
    for v in ok:
        assert set(v["latency_ms"]) >= {"min", "mean", "median", "p90", "p95", "p99", "max", "cov_pct"}
        assert v["latency_ms"]["min"] <= v["latency_ms"]["median"] <= v["latency_ms"]["p99"] <= v["latency_ms"]["max"]
        assert v["throughput_qps"] > 0 and v["backend"] == "onnxruntime"
    assert ok[2]["accuracy"]["probs"]["passed"] is True
    assert summary["run"]["backend"] == "onnxruntime" and summary["run"]["status"] == "ok"
    assert (out / "report.html").exists()
    store = Store.open(str(db))
    run = store.run_dict(summary["run"]["id"])
    assert run["kind"] == "sweep" and run["status"] == "ok" and len(run["variants"]) == 16
    assert {a["kind"] for a in run["artifacts"]} >= {"summary"}
    assert "fp16-ws64M-s2" in stdout
    # what an output was taken to hold, in words ("output 'y': regression (...)" read as an accuracy regression)
    assert "output 'probs' taken as class probabilities (every row" in stdout + stderr


def test_cli_accuracy_gate_exits_1(tmp_path, capsys):
    code, stdout, stderr = cli(["--db", str(tmp_path / "r.db"), "sweep", "--out", str(tmp_path / "o"),
                                "--duration", "0", "--warmup", "0", "--iterations", "3", "--no-layers",
                                "--threshold", "fp16.max_abs_max=0"], capsys)
    assert code == 1
    assert "accuracy gate" in stderr and "fp16-wsdefault-s1" in stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert any(f["rule"] == "precision_regression" for f in summary["findings"])


def test_cli_dynamic_input_without_shape_is_a_usage_error_naming_it(tmp_path, capsys):
    model = conv_model(tmp_path / "dyn.onnx", dynamic=True)
    code, _, stderr = cli(["sweep", model, "--no-store", "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert "'x'" in stderr and "--shape x:" in stderr
    code, _, stderr = cli(["sweep", model, "--no-store", "--out", str(tmp_path / "o"), "--shape", "x:2x3x8x8",
                           "--duration", "0", "--warmup", "0", "--iterations", "2", "--precision", "fp32"], capsys)
    assert code == 0, stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["variants"][0]["shapes"] == {"x": [2, 3, 8, 8]}
    assert summary["run"]["id"] is None


def test_cli_bad_input_and_usage(tmp_path, capsys):
    code, _, stderr = cli(["sweep", str(tmp_path / "missing.onnx"), "--no-store"], capsys)
    assert code == 3 and "missing.onnx" in stderr
    code, _, stderr = cli(["sweep", "--no-store", "--streams", "0"], capsys)
    assert code == 2
    code, _, stderr = cli(["sweep", "--nsys", "--no-store"], capsys)
    assert code == 3 and "nsys" in stderr  # no Nsight Systems on this machine: one clear sentence
    code, _, stderr = cli(["sweep", "--resume", "3", "--no-store"], capsys)
    assert code == 2
    code, _, stderr = cli(["sweep", "--no-store", "--threshold", "jitter.nope=3"], capsys)
    assert code == 2 and "cov_pct" in stderr
    model = conv_model(tmp_path / "conv.onnx")
    np.savez(tmp_path / "calib.npz", x=np.zeros((4, 1, 3, 16, 16), np.float64))
    code, _, stderr = cli(["sweep", model, "--no-store", "--precision", "fp32,int8", "--calib",
                           str(tmp_path / "calib.npz")], capsys)
    assert code == 3 and "'x'" in stderr and "float64" in stderr


# -- a real pretrained model ------------------------------------------------------------------------
def test_real_pretrained_classifier_fp32_and_fp16_on_onnxruntime(cls_model, tmp_path):
    """rapidocr's PP-OCR text-direction classifier (dynamic batch and width): --shape, fp16 accuracy, layers."""
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    summary = run_sweep(SweepConfig(model=str(cls_model), precisions=["fp32", "fp16"], shapes={"x": [1, 3, 48, 192]},
                                    backend="onnxruntime", iterations=10, duration_s=0.0, warmup_ms=50,
                                    layer_iterations=3), store=store)
    fp32, fp16 = summary["variants"]
    assert fp32["status"] == fp16["status"] == "ok"
    out = "save_infer_model/scale_0.tmp_1"
    acc = fp16["accuracy"][out]
    assert acc["passed"] is True and acc["cosine"] > 0.999 and acc["rel_l2"] < 0.01
    assert acc["top1_agreement"] == 1.0
    assert fp16["prepare"]["converter"].startswith("onnxconverter-common")
    for v in (fp32, fp16):
        assert v["latency_ms"]["count"] >= 10 and v["latency_ms"]["median"] > 0
        assert v["layer_count"] > 20
    run = store.run_dict(summary["run"]["id"])
    assert {x["type"] for x in run["variants"][0]["layers"]} >= {"Conv"}
    assert not [f for f in summary["findings"] if f["rule"] == "precision_regression"]


def test_cli_resume_continues_an_interrupted_run(tmp_path, capsys):
    model = conv_model(tmp_path / "conv.onnx")
    db = tmp_path / "db.sqlite"
    store = Store.open(str(db))
    cfg = SweepConfig(model=model, precisions=["fp32", "fp16"], backend="onnxruntime", layers=False, **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, store=store, backend=InterruptingBackend("fp16-wsdefault-s1"))
    run_id = store.list_runs(kind="sweep")[0]["id"]
    code, stdout, stderr = cli(["sweep", "--db", str(db), "--resume", str(run_id), "--out", str(tmp_path / "o")],
                               capsys)
    assert code == 0, stderr
    assert f"resuming run {run_id}: 1 variant(s) already stored" in stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert [v["key"] for v in summary["variants"]] == ["fp32-wsdefault-s1", "fp16-wsdefault-s1"]
    assert summary["run"]["id"] == run_id and summary["run"]["status"] == "ok"
    assert store.run_dict(run_id)["status"] == "ok"


class FailingRunBackend(OnnxRuntimeBackend):
    """Test double: real ONNX Runtime builds, but queries of multi-stream engines raise as a lost device would."""

    def build(self, model_path, spec, cache_dir=None):
        engine = super().build(model_path, spec, cache_dir)
        if spec.streams > 1:
            make = engine.create_context

            def create_context(i=0):
                ctx = make(i)

                def query():
                    raise RuntimeError("CUDA error 999: unspecified launch failure")

                ctx.query = query
                return ctx

            engine.create_context = create_context
        return engine


def test_a_variant_that_fails_while_running_is_recorded_and_the_sweep_goes_on(tmp_path):
    model = conv_model(tmp_path / "conv.onnx")
    summary = run_sweep(SweepConfig(model=model, precisions=["fp32", "fp16"], streams=[2, 1], layers=False, **FAST),
                        backend=FailingRunBackend(device="cpu"))
    status = [(v["key"], v["status"]) for v in summary["variants"]]
    assert status == [("fp32-wsdefault-s2", "failed"), ("fp32-wsdefault-s1", "ok"),
                      ("fp16-wsdefault-s2", "failed"), ("fp16-wsdefault-s1", "ok")]
    assert "unspecified launch failure" in summary["variants"][0]["error"]
    assert summary["variants"][0]["checklist"]["executed"]["status"] == "failed"
    assert summary["variants"][3]["accuracy"]["probs"]["passed"] is True


def test_resume_writes_into_the_run_s_own_out_and_counts_what_is_left(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a wrong default --out would land here, as ./trtprof-sweep
    model = conv_model(tmp_path / "conv.onnx")
    db, orig = tmp_path / "db.sqlite", tmp_path / "first-out"
    store = Store.open(str(db))
    cfg = SweepConfig(model=model, precisions=["fp32", "fp16"], backend="onnxruntime", layers=False,
                      out_dir=str(orig), **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, store=store, backend=InterruptingBackend("fp16-wsdefault-s1"))
    run_id = store.list_runs(kind="sweep")[0]["id"]
    code, stdout, stderr = cli(["sweep", "--db", str(db), "--resume", str(run_id)], capsys)
    assert code == 0, stderr
    assert f"writing to the run's own --out {orig}" in stderr
    assert "2 variant(s): 1 to run, 0 skipped, 1 already done" in stderr
    assert json.loads((orig / "summary.json").read_text())["run"]["status"] == "ok"
    assert not (tmp_path / "trtprof-sweep").exists()
    assert stdout.splitlines()[0].startswith("PASS: All 2 measured variants")  # the verdict comes first


def test_resume_command_spells_out_the_store_and_the_folder(tmp_path, monkeypatch):
    from profiler.sweep.outputs import resume_command

    monkeypatch.chdir(tmp_path)
    cmd = resume_command(7, "runs.db", tmp_path / "my out")
    assert cmd == f"trtprof sweep --resume 7 --db {tmp_path / 'runs.db'} --out '{tmp_path / 'my out'}'"
    assert resume_command(7, "postgresql://u@h/db", tmp_path).split("--db ")[1].startswith(
        "postgresql+psycopg://u@h/db")
