"""The sweep's variant pipeline (profiler.sweep.steps) and the backend capabilities it asks instead of names.

GPU paths run against the TensorRT test double (tests/fake_tensorrt.py), never TensorRT: they prove which
branches the capabilities select (workspaces measured, GPU identity and TensorRT version stored,
enqueue not synchronous), nothing about TensorRT itself.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

from profiler.backends import backend_class, ran_on_gpu  # noqa: E402
from profiler.backends.base import VariantSpec  # noqa: E402
from profiler.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from profiler.backends.tensorrt import TensorRTBackend  # noqa: E402
from profiler.errors import UsageError  # noqa: E402
from profiler.rules.sweep import jitter_threshold_pct  # noqa: E402
from profiler.store import Store  # noqa: E402
from profiler.sweep import Step, Sweep, SweepConfig, VariantState, plan_variants, run_sweep  # noqa: E402
from profiler.sweep.steps import STEPS, measure_variant, run_steps  # noqa: E402
from tests.fake_tensorrt import FakeTensorRT  # noqa: E402
from tests.onnx_models import FAST_SWEEP as FAST, conv_model  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))


def _fake_trt() -> TensorRTBackend:
    fake = FakeTensorRT(version="10.13.2")
    return TensorRTBackend(trt=fake, cuda=fake.cuda)


# -- capabilities ---------------------------------------------------------------------------------
def test_workspaces_are_measured_only_where_the_backend_has_a_workspace_limit():
    cfg = SweepConfig(precisions=["fp16"], workspaces=[64 << 20, 1 << 30])
    trt = plan_variants(cfg, _fake_trt())
    ort = plan_variants(cfg, OnnxRuntimeBackend(device="cpu"))
    assert [(p.spec.key, p.skip_reason) for p in trt] == [("fp16-ws64M-s1", None), ("fp16-ws1G-s1", None)]
    assert ort[0].skip_reason is None
    assert ort[1].skip_reason.startswith("onnxruntime has no workspace setting")


@pytest.mark.parametrize("env,gpu,pct", [
    ({"name": "onnxruntime", "provider": "CPUExecutionProvider"}, False, 5.0),
    ({"name": "onnxruntime", "provider": "CUDAExecutionProvider"}, True, 2.5),
    ({"name": "cuda", "device": "NVIDIA H200"}, True, 2.5),
    ({"name": "some-future-backend", "provider": "TensorrtExecutionProvider"}, True, 2.5),
    ({"name": "some-future-backend"}, False, 5.0),
    ({}, False, 5.0),
])
def test_stored_environments_are_judged_by_the_backend_that_measured_them(env, gpu, pct):
    assert ran_on_gpu(env) is gpu
    assert jitter_threshold_pct(env)[0] == pct


def test_capability_lookups_import_no_backend_library():
    code = ("import sys; from profiler.backends import backend_class; "
            "assert [backend_class(n).__name__ for n in ('onnxruntime', 'tensorrt', 'cuda')] == "
            "['OnnxRuntimeBackend', 'TensorRTBackend', 'CudaTorchBackend']; "
            "print(sorted(m for m in ('onnxruntime', 'tensorrt', 'torch', 'cuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert backend_class("nope") is None


def test_the_terminal_table_says_what_reference_executor_latencies_are():
    from profiler.sweep.outputs import format_table

    def table(backend: str) -> str:
        return format_table({"variants": [{"key": "fp32-wsdefault-s1", "status": "ok", "backend": backend,
                                           "latency_ms": {"median": 1.0, "p99": 2.0}, "throughput_qps": 9.0}]})

    assert "never TensorRT's" in table("cuda")
    assert "note:" not in table("onnxruntime") and "note:" not in table("tensorrt")


def test_a_gpu_backend_s_run_stores_its_gpu_and_tensorrt_version_and_measures_every_workspace(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cfg = SweepConfig(model=conv_model(tmp_path / "conv.onnx"), precisions=["fp32", "fp16"],
                      workspaces=[64 << 20, 1 << 30], layers=False, **FAST)
    summary = run_sweep(cfg, store=store, backend=_fake_trt())
    assert [(v["key"], v["status"]) for v in summary["variants"]] == [
        ("fp32-ws64M-s1", "ok"), ("fp32-ws1G-s1", "ok"), ("fp16-ws64M-s1", "ok"), ("fp16-ws1G-s1", "ok")]
    assert not any(v["synchronous_enqueue"] for v in summary["variants"])
    run = store.list_runs(kind="sweep")[0]
    assert (run["gpu"], run["tensorrt_version"]) == ("Fake GPU (test double)", "10.13.2")
    ort = run_sweep(SweepConfig(model=cfg.model, layers=False, **FAST), store=store,
                    backend=OnnxRuntimeBackend(device="cpu"))
    assert ort["variants"][0]["synchronous_enqueue"] is True
    row = next(r for r in store.list_runs(kind="sweep") if r["id"] == ort["run"]["id"])
    assert (row["gpu"], row["tensorrt_version"]) == (None, None)
    store.close()


# -- the pipeline ---------------------------------------------------------------------------------
def _state(tmp_path, spec: VariantSpec, backend=None) -> tuple[Sweep, VariantState]:
    cfg = SweepConfig(model=conv_model(tmp_path / "conv.onnx"), layers=False, **FAST)
    sweep = Sweep(cfg, backend=backend or OnnxRuntimeBackend(device="cpu"))
    p = sweep.prepare(create_run=False)
    return sweep, VariantState(spec, p.backend, p.model_path, p.shapes, p.feeds, None)


def test_every_step_that_does_not_apply_says_why(tmp_path):
    sweep, st = _state(tmp_path, VariantSpec("fp32", None, 1, False, (("x", (1, 3, 8, 8)),)))
    rec, samples, layers = measure_variant(sweep, st)
    assert rec["status"] == "ok" and len(samples) == rec["count"] >= 12 and layers == []
    assert st.skipped == {"cuda_graph": "not a CUDA graph variant", "accuracy": "fp32 is the reference",
                          "model_arithmetic": "no accuracy check", "localize": "no accuracy check",
                          "layers": "--no-layers"}
    assert [s.name for s in STEPS] == ["prepare", "build", "bind", "cuda_graph", "time", "memory", "accuracy",
                                       "model_arithmetic", "localize", "layers"]


def test_a_failing_step_fails_the_variant_once_and_later_steps_do_not_run(tmp_path):
    sweep, st = _state(tmp_path, VariantSpec("fp32", None, 1, False, (("x", (1, 3, 8, 8)),)))
    said: list[str] = []
    sweep.progress = said.append
    ran: list[str] = []

    def broken(sw, state):
        raise RuntimeError("lost device")

    steps = STEPS[:3] + (Step("broken", broken),) + (Step("after", lambda sw, state: ran.append("after")),)
    failure = run_steps(sweep, st, steps)
    assert (failure.at, failure.error) == ("executed", "running failed: RuntimeError: lost device")
    assert ran == [] and said.count("  fp32-wsdefault-s1: running failed: RuntimeError: lost device") == 1
    assert st.engine is not None and len(st.contexts) == 1  # built and bound before the failure
    st.close()


def test_a_usage_error_while_preparing_is_not_the_variant_s_failure(tmp_path, monkeypatch):
    import profiler.variants as variants

    sweep, st = _state(tmp_path, VariantSpec("int8", None, 1, False, (("x", (1, 3, 8, 8)),)))

    def refuse(*a, **kw):
        raise UsageError("--calib-method nonsense is not a calibration method")

    monkeypatch.setattr(variants, "prepare", refuse)
    with pytest.raises(UsageError, match="nonsense"):
        measure_variant(sweep, st)


def test_a_failed_variant_closes_what_it_opened(tmp_path):
    closed: list[str] = []

    class Closing(OnnxRuntimeBackend):
        def build(self, model_path, spec, cache_dir=None):
            engine = super().build(model_path, spec, cache_dir)
            make, close = engine.create_context, engine.close

            def create_context(i=0):
                ctx = make(i)
                ctx.close = lambda: closed.append(f"context {i}")
                ctx.query = lambda: (_ for _ in ()).throw(RuntimeError("CUDA error 700"))
                return ctx

            engine.create_context = create_context
            engine.close = lambda: (closed.append("engine"), close())
            return engine

    sweep, st = _state(tmp_path, VariantSpec("fp32", None, 2, False, (("x", (1, 3, 8, 8)),)), Closing(device="cpu"))
    rec, samples, layers = measure_variant(sweep, st)
    assert rec["status"] == "failed" and "CUDA error 700" in rec["error"] and (samples, layers) == ([], [])
    assert rec["checklist"]["executed"]["status"] == "failed" and rec["checklist"]["serialized"]["status"] == "ok"
    assert closed == ["context 0", "context 1", "engine"]


def test_a_sweep_before_prepare_has_every_attribute_it_reports():
    s = Sweep(SweepConfig(model="m.onnx"))
    run = s.summary()["run"]
    assert (run["model"], run["environment"], run["inputs_source"], run["model_hash"]) == ("m.onnx", {}, None, None)
