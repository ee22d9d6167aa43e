"""The ONNX Runtime backend: build, query timing, outputs, build failures, per-node profile, streams."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from profiler.backends.base import BuildError, UnsupportedOp, VariantSpec  # noqa: E402
from profiler.backends.onnxruntime import OnnxRuntimeBackend, parse_ort_profile, translate_load_error  # noqa: E402


def mlp_model(path, opset: int = 17, custom_op: bool = False) -> tuple[str, np.ndarray]:
    """x[2,4] @ W[4,3] -> Relu -> Softmax, written to ``path``."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul0"),
             helper.make_node("Relu", ["h"], ["r"], name="relu0"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax0", axis=-1)]
    opsets = [helper.make_opsetid("", opset)]
    if custom_op:
        nodes.insert(2, helper.make_node("FancyRelu", ["r"], ["r2"], name="fancy0", domain="com.example"))
        nodes[-1] = helper.make_node("Softmax", ["r2"], ["y"], name="softmax0", axis=-1)
        opsets.append(helper.make_opsetid("com.example", 1))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor("W", TensorProto.FLOAT, [4, 3], w.ravel())])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path), w


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = np.maximum(x @ w, 0)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def backend() -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend(device="cpu")


def test_build_query_and_outputs_match_numpy(tmp_path, backend):
    path, w = mlp_model(tmp_path / "mlp.onnx")
    engine = backend.build(path, VariantSpec("fp32"))
    assert [t.name for t in engine.inputs] == ["x"] and engine.inputs[0].dtype == "float32"
    assert engine.outputs[0].shape == (2, 3)
    ctx = engine.create_context(0)
    x = np.array([[1, 2, 3, 4], [-1, 0, 1, 2]], dtype=np.float32)
    ctx.set_inputs({"x": x})
    t = ctx.query()
    np.testing.assert_allclose(ctx.outputs()["y"], reference(x, w), rtol=1e-5)
    # CPU: no transfers, enqueue is the synchronous call itself, latency = compute
    assert t.h2d_ms is None and t.d2h_ms is None
    assert t.compute_ms == pytest.approx((t.end_ns - t.start_ns) / 1e6)
    assert t.enqueue_ms == t.compute_ms and t.latency_ms == t.compute_ms
    assert engine.info["synchronous_enqueue"] is True
    assert engine.info["engine_size_bytes"] == os.path.getsize(path)


def test_missing_input_is_an_error(tmp_path, backend):
    path, _ = mlp_model(tmp_path / "mlp.onnx")
    ctx = backend.build(path, VariantSpec("fp32")).create_context()
    with pytest.raises(BuildError, match="no data for input"):
        ctx.set_inputs({"not_x": np.zeros((2, 4), np.float32)})


def test_streams_get_their_own_sessions_and_share_the_cpu(tmp_path, backend):
    path, w = mlp_model(tmp_path / "mlp.onnx")
    spec = VariantSpec("fp32", None, 2)
    engine = backend.build(path, spec)
    c0, c1 = engine.create_context(0), engine.create_context(1)
    assert c0.session is not c1.session
    assert (c0.stream_index, c1.stream_index) == (0, 1)
    assert engine.info["intra_op_threads"] == max(1, (os.cpu_count() or 1) // 2)
    x = np.ones((2, 4), np.float32)
    for c in (c0, c1):
        c.set_inputs({"x": x})
        assert c.query().stream == c.stream_index
    np.testing.assert_allclose(c0.outputs()["y"], c1.outputs()["y"])


def test_unsupported_combinations_on_cpu(backend):
    assert "CUDA execution provider" in backend.unsupported(VariantSpec("fp16", None, 1, True))
    assert backend.unsupported(VariantSpec("int8", 1 << 30, 4, False)) is None
    assert backend.uses_workspace is False
    d = backend.describe()
    assert d["name"] == "onnxruntime" and d["provider"] == "CPUExecutionProvider" and d["version"]


def test_workspace_is_noted_as_not_applying(tmp_path, backend):
    path, _ = mlp_model(tmp_path / "mlp.onnx")
    engine = backend.build(path, VariantSpec("fp32", 64 << 20))
    assert any("workspace" in n for n in engine.info["notes"])


def test_opset_beyond_the_runtime_is_a_build_error(tmp_path, backend):
    path, _ = mlp_model(tmp_path / "future.onnx", opset=99)
    with pytest.raises(BuildError, match="future.onnx"):
        backend.build(path, VariantSpec("fp32"))


def test_unknown_op_is_named(tmp_path, backend):
    path, _ = mlp_model(tmp_path / "custom.onnx", custom_op=True)
    with pytest.raises(UnsupportedOp) as info:
        backend.build(path, VariantSpec("fp32"))
    assert "FancyRelu" in str(info.value)


def test_translate_load_error_names_op_and_node():
    err = translate_load_error(RuntimeError(
        "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for ConvInteger(10) "
        "node with name 'conv_q'"), "m.onnx")
    assert isinstance(err, UnsupportedOp) and err.op == "ConvInteger (opset 10)" and err.node == "conv_q"


def test_engine_cache_reuses_the_optimised_model(tmp_path, backend):
    path, w = mlp_model(tmp_path / "mlp.onnx")
    cache = tmp_path / "engines"
    e1 = backend.build(path, VariantSpec("fp32"), str(cache))
    e2 = backend.build(path, VariantSpec("fp32"), str(cache))
    assert e1.info["cache_hit"] is False and e2.info["cache_hit"] is True
    assert e1.info["fingerprint"] == e2.info["fingerprint"]
    assert e2.info["engine_path"].startswith(str(cache))
    x = np.full((2, 4), 0.5, np.float32)
    c = e2.create_context()
    c.set_inputs({"x": x})
    c.query()
    np.testing.assert_allclose(c.outputs()["y"], reference(x, w), rtol=1e-5)
    # another variant (streams) is another fingerprint
    assert backend.build(path, VariantSpec("fp32", None, 2), str(cache)).info["fingerprint"] != e1.info["fingerprint"]


def test_parse_ort_profile_aggregates_kernel_times_only():
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        {"cat": "Node", "name": "conv0_fence_before", "ts": 1, "dur": 7, "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "conv0_kernel_time", "ts": 2, "dur": 300,
         "args": {"op_name": "Conv", "provider": "CPUExecutionProvider", "node_index": "0"}},
        {"cat": "Node", "name": "conv0_kernel_time", "ts": 400, "dur": 500, "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "relu0_kernel_time", "ts": 900, "dur": 200, "args": {"op_name": "Relu"}},
    ]
    recs = parse_ort_profile(events)
    assert [r["name"] for r in recs] == ["conv0", "relu0"]
    conv = recs[0]
    assert conv["type"] == "Conv" and conv["count"] == 2
    assert conv["time_total_ms"] == pytest.approx(0.8) and conv["time_avg_ms"] == pytest.approx(0.4)
    assert conv["time_median_ms"] == pytest.approx(0.4)
    assert conv["share_pct"] == pytest.approx(80.0) and recs[1]["share_pct"] == pytest.approx(20.0)
    assert conv["tactic"] == "CPUExecutionProvider"  # the provider, in the shared per-layer schema


def test_profile_layers_on_a_real_pretrained_model(cls_model, backend):
    """rapidocr's text-direction classifier: per-node profile from ONNX Runtime's own profiler."""
    engine = backend.build(str(cls_model), VariantSpec("fp32"))
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)}
    layers = engine.profile_layers(feeds, iterations=4)
    assert len(layers) > 20
    assert all(r["count"] == 4 for r in layers)  # the first (allocating) run is dropped
    types = {r["type"] for r in layers}
    assert "Conv" in types
    assert sum(r["share_pct"] for r in layers) == pytest.approx(100.0)
    assert layers[0]["time_total_ms"] >= layers[-1]["time_total_ms"]
    ctx = engine.create_context()
    ctx.set_inputs(feeds)
    ctx.query()
    probs = ctx.outputs()["save_infer_model/scale_0.tmp_1"]
    assert probs.shape == (1, 2) and probs.sum() == pytest.approx(1.0, abs=1e-5)


def test_profile_json_is_removed_after_parsing(tmp_path, backend, monkeypatch):
    path, _ = mlp_model(tmp_path / "mlp.onnx")
    monkeypatch.chdir(tmp_path)
    engine = backend.build(path, VariantSpec("fp32"))
    layers = engine.profile_layers({"x": np.ones((2, 4), np.float32)}, iterations=3)
    assert {(r["name"], r["type"], r["count"]) for r in layers} == {
        ("matmul0", "MatMul", 3), ("relu0", "Relu", 3), ("softmax0", "Softmax", 3)}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".json")]
    json.dumps(layers)  # records are plain JSON


class FakeOrtValue:
    """Test double for onnxruntime.OrtValue on a 'cuda' device: a host array standing in for device memory."""

    uploads = 0

    def __init__(self, arr: np.ndarray):
        self.arr = np.array(arr)

    @classmethod
    def ortvalue_from_numpy(cls, arr, device, device_id):
        assert device == "cuda"
        return cls(arr)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape, dtype, device, device_id):
        assert device == "cuda"
        return cls(np.zeros(shape, dtype))

    def update_inplace(self, arr):
        FakeOrtValue.uploads += 1
        self.arr[...] = arr

    def shape(self):
        return list(self.arr.shape)

    def numpy(self):
        return self.arr.copy()


class FakeIoBinding:
    def __init__(self):
        self.inputs, self.outputs, self.by_device = {}, {}, []

    def bind_ortvalue_input(self, name, val):
        self.inputs[name] = val

    def bind_output(self, name, device):
        self.by_device.append(name)

    def bind_ortvalue_output(self, name, val):
        self.outputs[name] = val

    def get_outputs(self):
        return [self.outputs[n] for n in self.order]


class FakeCudaSession:
    """Test double for an InferenceSession on the CUDA provider computing y = 2x with I/O binding."""

    class _Arg:
        def __init__(self, name):
            self.name = name

    def __init__(self):
        self.runs = 0

    def get_inputs(self):
        return [self._Arg("x")]

    def get_outputs(self):
        return [self._Arg("y")]

    def io_binding(self):
        return FakeIoBinding()

    def run_with_iobinding(self, b, run_options=None):
        self.runs += 1
        y = b.inputs["x"].arr * 2
        if "y" in b.by_device:
            b.outputs["y"] = FakeOrtValue(y)
        else:
            b.outputs["y"].arr[...] = y
        b.order = ["y"]


def test_cuda_provider_path_times_copies_and_compute_separately(monkeypatch):
    import onnxruntime

    from profiler.backends.onnxruntime import OrtContext

    monkeypatch.setattr(onnxruntime, "OrtValue", FakeOrtValue)
    sess = FakeCudaSession()
    ctx = OrtContext(sess, 1, "cuda")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ctx.set_inputs({"x": x})
    assert sess.runs == 1  # one run to learn the output shapes, then fixed device buffers
    out_buffer = ctx._out_values[0]
    t1, t2 = ctx.query(), ctx.query()
    assert ctx._out_values[0] is out_buffer  # the same device addresses every query (CUDA-graph replay)
    np.testing.assert_array_equal(ctx.outputs()["y"], 2 * x)
    for t in (t1, t2):
        assert t.h2d_ms is not None and t.d2h_ms is not None and t.stream == 1
        assert t.latency_ms == pytest.approx(t.h2d_ms + t.compute_ms + t.d2h_ms)
        assert t.h2d_ms + t.compute_ms + t.d2h_ms <= (t.end_ns - t.start_ns) / 1e6 + 1e-9
    assert FakeOrtValue.uploads >= 2 and sess.runs == 3
    assert ctx.enable_cuda_graph() is None
