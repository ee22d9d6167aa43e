"""The TensorRT backend's logic, run against test doubles (FakeTensorRT, FakeCuda), never TensorRT.

What these tests can prove: the backend drives the TensorRT 10/11 API in the documented order with the
documented settings, reports parser and build failures clearly, caches plans, binds buffers correctly
(outputs equal ONNX Runtime's on the same model), pairs its timing events correctly, falls back from a
failed CUDA-graph capture with the reason, and splits IProfiler reports into iterations. What they
cannot prove: anything about real TensorRT's behaviour or speed.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from profiler.backends.base import BuildError, UnsupportedOp, VariantSpec
from profiler.backends.tensorrt import TensorRTBackend, device_memory_bytes, make_profiler
from tests.fake_tensorrt import FakeCuda, FakeTensorRT


def _mlp(path, *, dynamic_batch=True, extra_op=None):
    """x[N,4] -> MatMul(W) + b -> Relu -> y[N,3]; optionally one more node of another op type."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["y" if not extra_op else "r"], name="act")]
    if extra_op:
        nodes.append(helper.make_node(extra_op, ["r"], ["y"], name="odd_one"))
    batch = "N" if dynamic_batch else 2
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnx's newest IR version is beyond older ONNX Runtimes (the H200's reads up to 13)
    onnx.save(model, path)
    return str(path)


@pytest.fixture
def model(tmp_path):
    return _mlp(tmp_path / "mlp.onnx")


def _backend(**kw):
    fake = FakeTensorRT(**kw)
    return fake, TensorRTBackend(trt=fake, cuda=fake.cuda)


SPEC = VariantSpec("fp32", 256 << 20, 1, False, (("x", (2, 4)),))


@pytest.mark.parametrize("version,flags", [("10.14.1", 1 << 1), ("11.1.0", 0)])
def test_network_is_strongly_typed_on_10_and_11(model, version, flags):
    fake, be = _backend(version=version)
    be.build(model, SPEC).close()
    assert fake.created_network_flags == [flags]


def test_build_config_workspace_profile_verbosity(model):
    fake, be = _backend()
    eng = be.build(model, SPEC)
    (b,) = fake.builds
    assert b["workspace"] == 256 << 20
    assert b["profiles"] == [{"x": ((2, 4), (2, 4), (2, 4))}]  # min = opt = max = --shape
    assert b["verbosity"].name == "DETAILED"
    assert eng.info["checklist"]["parser_warnings"]  # parser warnings reach the checklist
    assert eng.info["activation_bytes_per_context"] == 4096
    assert [t.name for t in eng.inputs] == ["x"] and [t.name for t in eng.outputs] == ["y"]


def test_dynamic_input_without_shape_names_the_input(model):
    _, be = _backend()
    with pytest.raises(BuildError, match=r"input 'x' has dynamic dimensions \[-1, 4\]"):
        be.build(model, VariantSpec("fp32"))


def test_unsupported_op_is_named(tmp_path):
    path = _mlp(tmp_path / "odd.onnx", extra_op="Softsign")
    _, be = _backend(unsupported={"Softsign"})
    with pytest.raises(UnsupportedOp) as info:
        be.build(path, SPEC)
    assert info.value.op == "Softsign" and info.value.node == "odd_one"
    assert "Softsign" in str(info.value) and "No importer" in str(info.value)


def test_small_workspace_failure_says_workspace(model):
    fake, be = _backend(min_workspace_bytes=128 << 20)
    with pytest.raises(BuildError, match="workspace limit 67108864 bytes may be too small"):
        be.build(model, VariantSpec("fp32", 64 << 20, 1, False, (("x", (2, 4)),)))
    be.build(model, SPEC).close()  # 256M builds
    assert len(fake.builds) == 2


def test_plan_cache_skips_the_second_build(model, tmp_path):
    fake, be = _backend()
    e1 = be.build(model, SPEC, cache_dir=str(tmp_path / "plans"))
    e2 = be.build(model, SPEC, cache_dir=str(tmp_path / "plans"))
    assert len(fake.builds) == 1 and fake.deserialized == 2
    assert e1.info["checklist"]["plan_cache_hit"] is False
    assert e2.info["checklist"]["plan_cache_hit"] is True
    assert e1.info["fingerprint"] == e2.info["fingerprint"]
    other = be.build(model, VariantSpec("fp32", 1 << 30, 1, False, (("x", (2, 4)),)), cache_dir=str(tmp_path / "plans"))
    assert other.info["fingerprint"] != e1.info["fingerprint"] and len(fake.builds) == 2


def test_query_binds_buffers_and_pairs_events(model):
    fake, be = _backend()
    eng = be.build(model, SPEC)
    ctx = eng.create_context()
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    ctx.set_inputs({"x": x})
    t = ctx.query()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ctx.outputs()["y"], ref, rtol=1e-6)
    # one input copy, the compute, one output copy on the fake GPU clock
    assert t.h2d_ms == pytest.approx(0.125) and t.compute_ms == pytest.approx(1.5)
    assert t.d2h_ms == pytest.approx(0.125) and t.latency_ms == pytest.approx(1.75)
    assert t.end_ns >= t.start_ns and t.enqueue_ms >= 0


def test_cuda_graph_capture_and_fallback(model):
    fake, be = _backend()
    ctx = be.build(model, SPEC).create_context()
    ctx.set_inputs({"x": np.ones((2, 4), np.float32)})
    assert ctx.enable_cuda_graph() is None
    before = ctx.context.enqueues
    ctx.query()
    assert ctx.graph.launches == 1 and ctx.context.enqueues == before + 1

    fake2 = FakeTensorRT(cuda=FakeCuda(capture_error="operation not permitted when stream is capturing"))
    be2 = TensorRTBackend(trt=fake2, cuda=fake2.cuda)
    ctx2 = be2.build(model, SPEC).create_context()
    ctx2.set_inputs({"x": np.ones((2, 4), np.float32)})
    reason = ctx2.enable_cuda_graph()
    assert "not permitted when stream is capturing" in reason and ctx2.graph is None
    assert ctx2.query().compute_ms == pytest.approx(1.5)  # plain enqueue still works


def test_profiler_splits_iterations_when_the_first_layer_comes_round():
    p = make_profiler(FakeTensorRT())
    for _ in range(3):
        for name, ms in (("fc", 0.5), ("bias", 0.1), ("act", 0.2)):
            p.report_layer_time(name, ms)
    assert len(p.times.iterations) == 3
    assert [n for n, _ in p.times.iterations[1]] == ["fc", "bias", "act"]


def test_profile_layers_is_a_separate_pass_with_layer_times(model):
    fake, be = _backend()
    eng = be.build(model, SPEC)
    timed = eng.create_context()
    layers = eng.profile_layers({"x": np.ones((2, 4), np.float32)}, iterations=4)
    assert timed.context.profiler is None  # the timed context never carries the profiler
    by = {r["name"]: r for r in layers}
    assert list(by) == ["fc", "bias", "act"]
    # the fake reports 0.01 ms x (layer index + 1) per iteration
    assert by["act"]["count"] == 4 and by["act"]["time_avg_ms"] == pytest.approx(0.03)
    assert by["fc"]["time_total_ms"] == pytest.approx(0.04)
    assert sum(r["share_pct"] for r in layers) == pytest.approx(100.0)


def test_layer_info_is_inspector_json(model):
    _, be = _backend()
    eng = be.build(model, SPEC)
    eng.create_context()
    info = eng.layer_info()
    assert [layer["Name"] for layer in info["Layers"]] == ["fc", "bias", "act"]


def test_device_memory_probe_prefers_v2():
    class E:
        device_memory_size = 10
        device_memory_size_v2 = 20

    assert device_memory_bytes(E()) == 20


@pytest.mark.parametrize("graph", [False, True], ids=["enqueue", "graph"])
def test_transfers_off_times_compute_only_and_copies_on_demand(model, graph):
    fake, be = _backend()
    ctx = be.build(model, SPEC).create_context()
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    x1, x2 = (rng.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
    ctx.set_inputs({"x": x1})
    ctx.set_transfers(False)  # inputs set before: copied to the device now, once
    if graph:
        assert ctx.enable_cuda_graph() is None
    clock = fake.cuda.now_ms
    times = [ctx.query() for _ in range(3)]
    # the fake GPU clock moved by the compute alone: no copy was enqueued by a query
    assert fake.cuda.now_ms - clock == pytest.approx(3 * 1.5)
    for t in times:
        assert t.h2d_ms is None and t.d2h_ms is None
        assert t.compute_ms == pytest.approx(1.5) and t.latency_ms == pytest.approx(1.5)
    np.testing.assert_allclose(ctx.outputs()["y"], sess.run(None, {"x": x1})[0], rtol=1e-6)
    ctx.set_inputs({"x": x2})  # copied once, at set_inputs
    ctx.query()
    np.testing.assert_allclose(ctx.outputs()["y"], sess.run(None, {"x": x2})[0], rtol=1e-6)
    ctx.set_transfers(True)  # back to full queries
    t = ctx.query()
    assert t.h2d_ms == pytest.approx(0.125) and t.d2h_ms == pytest.approx(0.125)


@pytest.mark.parametrize("overlap", [True, False], ids=["two-in-flight", "one"])
@pytest.mark.parametrize("graph,transfers", [(False, True), (True, True), (True, False)],
                         ids=["enqueue-io", "graph-io", "graph-noio"])
def test_timed_loop_keeps_two_queries_in_flight_and_pairs_each_with_its_events(model, graph, transfers, overlap):
    from profiler.harness.runner import HarnessConfig, run_queries

    fake, be = _backend()
    ctx = be.build(model, SPEC).create_context()
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    ctx.set_transfers(transfers)
    ctx.set_inputs({"x": x})
    if graph:
        assert ctx.enable_cuda_graph() is None
    fake.cuda.max_in_flight, fake.cuda.done = 0, fake.cuda.enqueued  # what the set-up did is finished
    m = run_queries([ctx], HarnessConfig(iterations=9, duration_s=0.0, warmup_ms=0.0, overlap=overlap))
    assert len(m.timings) == 9 and m.in_flight == (2 if overlap else 1)
    assert fake.cuda.max_in_flight == (2 if overlap else 1)
    assert fake.cuda.violations == []  # no event reused before its time was read, none read before its wait
    for t in m.timings:
        assert t.compute_ms == pytest.approx(1.5)
        if transfers:
            assert t.h2d_ms == pytest.approx(0.125) and t.d2h_ms == pytest.approx(0.125)
        else:
            assert t.h2d_ms is None and t.d2h_ms is None
    if overlap:
        assert all(b.start_ns < a.end_ns for a, b in zip(m.timings, m.timings[1:]))
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ctx.outputs()["y"], ref, rtol=1e-6)
    ctx.close()


def test_the_fake_gpu_catches_an_event_set_reused_too_early(model):
    """The double's checks can fail: one event set for two queries in flight is caught."""
    from types import SimpleNamespace

    fake, be = _backend()
    ctx = be.build(model, SPEC).create_context()
    ctx.set_inputs({"x": np.ones((2, 4), np.float32)})
    first = ctx.timed.lanes[0]
    ctx.timed._following = {first: first}  # every query on the first lane's events
    ctx.run_loop(4, 0, SimpleNamespace(set=False), overlap=True)
    assert fake.cuda.violations
