"""The cuda backend's ONNX executor, run here on CPU tensors, against ONNX Runtime.

Real pretrained models first (rapidocr's cls/rec/det and the bundled default), then small synthetic
graphs for op semantics that the real models do not reach (opset-11 Softmax coercion, negative Slice
steps, asymmetric padding, Resize modes, ...). The GPU-only parts (streams, events, CUDA graphs) are
exercised on the GPU machine by benchmarks/bench_gpu_path.py and skip here with the reason.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the cuda backend's kernels)")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from profiler.backends.base import BuildError, UnsupportedOp, VariantSpec, gpu_present  # noqa: E402
from profiler.backends.cuda_ref import CudaTorchBackend, compile_model, has_float16  # noqa: E402


def _rapidocr_dir() -> Path | None:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.origin:
        return None
    d = Path(spec.origin).parent / "models"
    return d if d.is_dir() else None


def _model(name: str) -> Path:
    if name == "default":
        from profiler.models import default_model_path

        return Path(default_model_path())
    d = _rapidocr_dir()
    if d is None or not (d / name).exists():
        pytest.skip("rapidocr-onnxruntime==1.4.4 (the real test models) is not installed")
    return d / name


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _ort(path_or_model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    data = path_or_model.SerializeToString() if hasattr(path_or_model, "SerializeToString") else str(path_or_model)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


REAL = [
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": (1, 3, 48, 192)}),
    ("ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 160)}),
    ("ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 96, 128)}),
    ("default", {}),
]


@pytest.fixture(scope="module")
def compiled() -> dict:
    return {}


def _compile_cached(cache: dict, name: str, shapes: dict):
    if name not in cache:
        cache[name] = compile_model(_model(name), shapes, "cpu")
    return cache[name]


@pytest.mark.parametrize("name,shapes", REAL, ids=[r[0].split("_infer")[0] if r[0] != "default" else "default"
                                                   for r in REAL])
def test_real_model_matches_onnxruntime(compiled, name, shapes):
    prog = _compile_cached(compiled, name, shapes)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in prog.inputs}
    if "det" in name:
        # noise gives a text detector all-zero probabilities (cosine meaningless): draw dark "glyphs"
        # on a light page, normalized as rapidocr does, so text regions light up
        img = np.ones(shapes["x"], np.float32)
        for row in range(4):
            for col in range(8, shapes["x"][3] - 8, 9):
                img[:, :, 10 + 20 * row:20 + 20 * row, col:col + 6] = -1.0
        feeds = {"x": img + 0.05 * rng.standard_normal(img.shape).astype(np.float32)}
    ours = prog.run_numpy(feeds)
    ref = _ort(_model(name), feeds)
    assert set(ours) == set(ref)
    for k in ref:
        assert ours[k].shape == ref[k].shape and ours[k].dtype == ref[k].dtype
        assert float(np.abs(ref[k]).max()) > 0.1  # a meaningful output, not all zeros
        assert _cosine(ours[k], ref[k]) > 0.9999, k
        scale = float(np.abs(ref[k]).max())
        assert float(np.abs(ours[k] - ref[k]).max()) <= 1e-3 * scale + 1e-5, k


def test_shapes_are_folded_at_build_time(compiled):
    """rec's Shape -> Cast -> Slice -> Concat -> Reshape chains become constants: no step does shape work."""
    prog = _compile_cached(compiled, "ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 160)})
    steps = [s.op for s in prog.steps]
    assert prog.op_counts["Shape"] == 4 and prog.op_counts["Constant"] == 420 and prog.op_counts["Cast"] == 23
    assert not set(steps) & {"Shape", "Constant", "Cast"}  # every Shape and Cast here works on shapes
    # of 10 Slices and 7 Concats, the ones on shape vectors are folded; the attention's q/k/v slices
    # and the one feature Concat stay
    assert (prog.op_counts["Slice"], steps.count("Slice")) == (10, 6)
    assert (prog.op_counts["Concat"], steps.count("Concat")) == (7, 1)
    assert prog.nodes_total == 860 and prog.nodes_folded == 860 - len(prog.steps) == 457
    # every intermediate dies after its last reader (activations are not all kept alive)
    assert sum(len(s.frees) for s in prog.steps) > 300


def test_fp16_model_from_the_sweep_preparation(tmp_path):
    from profiler.variants import prepare

    path = _model("ch_ppocr_mobile_v2.0_cls_infer.onnx")
    shapes = {"x": (1, 3, 48, 192)}
    prepared = prepare(path, "fp16", shapes=shapes, cache_dir=str(tmp_path))
    assert has_float16(onnx.load(str(prepared.path))) and not has_float16(onnx.load(str(path)))
    prog = compile_model(prepared.path, shapes, "cpu")
    assert prog.inputs[0].dtype == "float32" and prog.outputs[0].dtype == "float32"  # fp32 I/O kept
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 3, 48, 192)).astype(np.float32)}
    try:
        ours = prog.run_numpy(feeds)
    except RuntimeError as exc:  # an old CPU torch without float16 convolutions
        pytest.skip(f"this torch build has no float16 CPU kernels: {exc}")
    ref = _ort(path, feeds)
    k = next(iter(ref))
    assert _cosine(ours[k], ref[k]) > 0.999
    assert float(np.abs(ours[k] - ref[k]).max()) < 0.02


def test_half_cast_route_for_an_fp32_model():
    path = _model("default")
    prog = compile_model(path, {}, "cpu", half=True)
    assert prog.notes and "float16" in prog.notes[0]
    assert any(v is not None and v.dtype == torch.float16 for v in prog.template)
    feeds = {prog.inputs[0].name: np.random.default_rng(4).standard_normal(prog.inputs[0].shape).astype(np.float32)}
    ours = prog.run_numpy(feeds)
    ref = _ort(path, feeds)
    k = next(iter(ref))
    assert ours[k].dtype == np.float32
    assert _cosine(ours[k], ref[k]) > 0.999


# -- synthetic graphs: op semantics against ONNX Runtime -------------------------------------------
def _graph(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "t", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


def _f32(name, arr):
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


rng0 = np.random.default_rng(7)
SYNTH = {
    "softmax_opset11_axis1": (
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [_vi("x", [2, 3, 4])], [], 11, {"x": (2, 3, 4)}),
    "slice_negative_step": (
        [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], [_vi("x", [4, 10])],
        [_i64("s", [-1, 8]), _i64("e", [-100, 1]), _i64("a", [1, 0]), _i64("st", [-2, -3])], 13, {"x": (4, 10)}),
    "gather_vector_and_scalar": (
        [helper.make_node("Gather", ["x", "i"], ["g"], axis=1), helper.make_node("Gather", ["g", "j"], ["y"], axis=0)],
        [_vi("x", [3, 5, 2])], [_i64("i", [[4, -1], [0, 2]]), numpy_helper.from_array(np.array(1, np.int64), "j")],
        13, {"x": (3, 5, 2)}),
    "resize_nearest_asymmetric_floor": (
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                          coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
        [_vi("x", [1, 2, 3, 5])], [_f32("sc", [1, 1, 2, 2])], 13, {"x": (1, 2, 3, 5)}),
    "resize_linear_half_pixel_sizes": (
        [helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="linear",
                          coordinate_transformation_mode="half_pixel")],
        [_vi("x", [1, 2, 4, 6])], [_i64("sz", [1, 2, 7, 9])], 13, {"x": (1, 2, 4, 6)}),
    "reshape_zero_minus_one_transpose": (
        [helper.make_node("Reshape", ["x", "sh"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[2, 0, 1])],
        [_vi("x", [2, 3, 4])], [_i64("sh", [0, -1, 2])], 13, {"x": (2, 3, 4)}),
    "squeeze_unsqueeze_axes_inputs": (
        [helper.make_node("Unsqueeze", ["x", "a"], ["u"]), helper.make_node("Squeeze", ["u", "b"], ["y"])],
        [_vi("x", [3, 4])], [_i64("a", [0, 3]), _i64("b", [0])], 13, {"x": (3, 4)}),
    "reducemean_axes_attr_no_keepdims": (
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1, 1], keepdims=0)], [_vi("x", [2, 3, 4])], [], 13,
        {"x": (2, 3, 4)}),
    "gemm_transb_alpha_beta": (
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)], [_vi("x", [3, 4])],
        [_f32("w", rng0.standard_normal((5, 4))), _f32("c", rng0.standard_normal((5,)))], 13, {"x": (3, 4)}),
    "conv_transpose_asymmetric_pads": (
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[0, 1, 1, 0])],
        [_vi("x", [1, 2, 3, 3])], [_f32("w", rng0.standard_normal((2, 3, 3, 3)))], 13, {"x": (1, 2, 3, 3)}),
    "conv_same_upper_maxpool_asym": (
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2]),
         helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1])],
        [_vi("x", [1, 3, 7, 8])], [_f32("w", rng0.standard_normal((4, 3, 3, 3))), _f32("b", rng0.standard_normal(4))],
        13, {"x": (1, 3, 7, 8)}),
    "hardsigmoid_clip_pow_div_where": (
        [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5),
         helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Pow", ["c", "two"], ["p"]),
         helper.make_node("Div", ["p", "h"], ["d"]), helper.make_node("Greater", ["x", "zero"], ["m"]),
         helper.make_node("Where", ["m", "d", "h"], ["y"])],
        [_vi("x", [2, 6])], [_f32("lo", -1.0), _f32("hi", 2.0), _f32("two", 2.0), _f32("zero", 0.0)], 13,
        {"x": (2, 6)}),
    "pad_split_concat": (
        [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
         helper.make_node("Split", ["p", "sp"], ["a", "b"], axis=1),
         helper.make_node("Concat", ["b", "a"], ["y"], axis=1)],
        [_vi("x", [1, 4, 3])], [_i64("pads", [0, 1, 2, 0, 1, 0]), _i64("sp", [2, 4])], 13, {"x": (1, 4, 3)}),
    "avgpool_count_include_pad_batchnorm": (
        [helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
         helper.make_node("BatchNormalization", ["a", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)],
        [_vi("x", [1, 2, 5, 5])], [_f32("s", [1.5, 0.5]), _f32("bb", [0.1, -0.2]), _f32("m", [0.3, -0.1]),
                                   _f32("v", [2.0, 0.5])], 13, {"x": (1, 2, 5, 5)}),
}


@pytest.mark.parametrize("case", sorted(SYNTH))
def test_synthetic_op_semantics_match_onnxruntime(case):
    nodes, inputs, inits, opset, shapes = SYNTH[case]
    model = _graph(nodes, inputs, [_vi("y", None)], inits, opset)
    feeds = {k: np.random.default_rng(11).standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    ref = _ort(model, feeds)["y"]
    ours = compile_model(model, shapes, "cpu").run_numpy(feeds)["y"]
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


# -- build errors --------------------------------------------------------------------------------------
def test_unsupported_op_is_named():
    model = _graph([helper.make_node("NonZero", ["x"], ["y"], name="find_them")], [_vi("x", [3])],
                   [_vi("y", None, TensorProto.INT64)])
    with pytest.raises(UnsupportedOp) as exc:
        compile_model(model, {}, "cpu")
    assert exc.value.op == "NonZero" and exc.value.node == "find_them"
    assert str(exc.value) == "cuda does not support the ONNX op 'NonZero' (node 'find_them')"


def test_custom_domain_op_is_unsupported():
    node = helper.make_node("FusedThing", ["x"], ["y"], domain="com.vendor")
    g = helper.make_graph([node], "t", [_vi("x", [3])], [_vi("y", None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.vendor", 1)])
    with pytest.raises(UnsupportedOp, match="com.vendor.FusedThing"):
        compile_model(m, {}, "cpu")


def test_dynamic_input_needs_a_shape():
    model = _graph([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["batch", 3])], [_vi("y", None)])
    with pytest.raises(BuildError, match=r"input 'x' has dynamic dimensions \['batch', 3\]: give its shape"):
        compile_model(model, {}, "cpu")
    assert compile_model(model, {"x": (2, 3)}, "cpu").outputs[0].shape == (2, 3)


def test_shape_computed_from_data_is_refused():
    model = _graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
                   [_vi("x", [2, 3]), _vi("shape", [2], TensorProto.INT64)], [_vi("y", None)])
    with pytest.raises(BuildError, match="input 'shape' is computed at run time"):
        compile_model(model, {}, "cpu")


# -- the backend object --------------------------------------------------------------------------------
def test_backend_registration_and_variant_support():
    from profiler.backends import get_backend

    be = get_backend("cuda")
    assert isinstance(be, CudaTorchBackend) and be.name == "cuda" and be.uses_workspace is False
    assert be.unsupported(VariantSpec("int8")) is None  # Q/DQ models run as fake quantization
    assert be.unsupported(VariantSpec("fp16", streams=2, cuda_graph=True)) is None
    with pytest.raises(ValueError):
        CudaTorchBackend(node_ranges="sometimes")


def test_build_without_a_gpu_says_why(tmp_path):
    if gpu_present():
        pytest.skip("a GPU is present: this checks the GPU-less message")
    from profiler.errors import MissingExtra

    be = CudaTorchBackend()
    d = be.describe()
    assert d["name"] == "cuda" and d["device"] is None and d.get("unavailable")
    assert "never TensorRT's" in d["executor"]  # the sweep records what its numbers are
    with pytest.raises((BuildError, MissingExtra)) as exc:
        be.build(str(_model("default")), VariantSpec("fp32"))
    text = str(exc.value)
    assert ("no usable CUDA GPU" in text or "PyTorch sees no CUDA GPU" in text or "trtprof[cuda]" in text)
    with pytest.raises((BuildError, MissingExtra)):
        be.build(str(_model("default")), VariantSpec("int8"))


@pytest.mark.gpu
def test_gpu_build_graph_capture_and_outputs():
    if not gpu_present() or not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA PyTorch and cuda-python (runs on the GPU machine: "
                    "benchmarks/bench_gpu_path.py models)")
    path = _model("default")
    eng = CudaTorchBackend().build(str(path), VariantSpec("fp32"))
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32) for i in eng.inputs}
    ctx = eng.create_context(0)
    ctx.set_inputs(feeds)
    t = ctx.query()
    eager = ctx.outputs()
    assert t.compute_ms > 0 and t.h2d_ms is not None
    assert ctx.enable_cuda_graph() is None
    ctx.query()
    graph = ctx.outputs()
    ref = _ort(path, feeds)
    for k in ref:
        assert _cosine(eager[k], ref[k]) > 0.9999 and _cosine(graph[k], eager[k]) > 0.999999
    ctx.close()
    eng.close()


@pytest.mark.gpu
def test_gpu_transfers_off_eager_and_graph():
    if not gpu_present() or not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA PyTorch and cuda-python (runs on the GPU machine)")
    path = _model("default")
    eng = CudaTorchBackend().build(str(path), VariantSpec("fp32"))
    rng = np.random.default_rng(1)
    f1, f2 = ({i.name: rng.standard_normal(i.shape).astype(np.float32) for i in eng.inputs} for _ in range(2))
    r1, r2 = _ort(path, f1), _ort(path, f2)
    for graph in (False, True):
        ctx = eng.create_context(0)
        ctx.set_inputs(f1)
        ctx.set_transfers(False)  # inputs set before: copied to the device now
        if graph:
            assert ctx.enable_cuda_graph() is None
        ts = [ctx.query() for _ in range(5)]
        assert all(t.h2d_ms is None and t.d2h_ms is None and t.compute_ms > 0 for t in ts)
        assert all(t.latency_ms == t.compute_ms for t in ts)
        out = ctx.outputs()
        ctx.set_inputs(f2)  # copied once, at set_inputs
        ctx.query()
        out2 = ctx.outputs()
        for k in r1:
            assert _cosine(out[k], r1[k]) > 0.9999 and _cosine(out2[k], r2[k]) > 0.9999
        ctx.set_transfers(True)
        t = ctx.query()
        assert t.h2d_ms is not None and _cosine(ctx.outputs()[k], r2[k]) > 0.9999
        ctx.close()
    eng.close()


@pytest.mark.gpu
@pytest.mark.parametrize("nodes", [True, False], ids=["event-nodes", "host-records"])
def test_gpu_run_loop_matches_query(nodes):
    """The harness's tight graph loop times and computes what ``query`` does, in all four modes."""
    if not gpu_present() or not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA PyTorch and cuda-python (runs on the GPU machine)")
    from profiler.harness.runner import HarnessConfig, run_queries

    path = _model("default")
    be = CudaTorchBackend(graph_events=nodes)
    eng = be.build(str(path), VariantSpec("fp32"))
    rng = np.random.default_rng(2)
    f1, f2 = ({i.name: rng.standard_normal(i.shape).astype(np.float32) for i in eng.inputs} for _ in range(2))
    r1, r2 = _ort(path, f1), _ort(path, f2)
    for transfers, overlap in ((True, True), (False, True), (False, False)):
        ctx = eng.create_context(0)
        ctx.set_transfers(transfers)
        ctx.set_inputs(f1)
        assert ctx.enable_cuda_graph() is None and ctx.timed.events_in_enqueue == nodes
        single = [ctx.query() for _ in range(30)]
        m = run_queries([ctx], HarnessConfig(iterations=31, duration_s=0.0, warmup_ms=0.0, overlap=overlap))
        ts = m.timings
        assert len(ts) == 31 and m.in_flight == (2 if overlap else 1)
        if overlap:  # the next query is enqueued before the previous one is waited for
            assert all(b.start_ns < a.end_ns for a, b in zip(ts, ts[1:]))
        else:
            assert all(a.end_ns <= b.start_ns for a, b in zip(ts, ts[1:]))
        assert all(t.start_ns < t.end_ns and t.compute_ms > 0 for t in ts)
        assert all((t.h2d_ms is not None and t.d2h_ms is not None) == transfers for t in ts)
        # the loop's event-timed compute is the per-query path's (same graph, same events)
        loop_c = float(np.median([t.compute_ms for t in ts]))
        one_c = float(np.median([t.compute_ms for t in single]))
        assert abs(loop_c - one_c) < 0.25 * one_c, (loop_c, one_c)
        # and its wall time per query is no longer than the per-query path's (plus a little noise)
        assert (ts[-1].end_ns - ts[0].start_ns) / 31 <= 1.10 * (single[-1].end_ns - single[0].start_ns) / 30
        for k in r1:
            assert _cosine(ctx.outputs()[k], r1[k]) > 0.9999
        ctx.set_inputs(f2)
        # one query: with event nodes only one of the two graphs has seen f2, and outputs() must read it
        run_queries([ctx], HarnessConfig(iterations=1, duration_s=0.0, warmup_ms=0.0, overlap=overlap))
        for k in r2:
            assert _cosine(ctx.outputs()[k], r2[k]) > 0.9999
        ctx.close()
    ctx = eng.create_context(0)  # eager, two in flight: each forward's own outputs are copied back
    ctx.set_inputs(f1)
    m = run_queries([ctx], HarnessConfig(iterations=12, duration_s=0.0, warmup_ms=0.0))
    assert m.in_flight == 2 and all(t.compute_ms > 0 and t.d2h_ms is not None for t in m.timings)
    for k in r1:
        assert _cosine(ctx.outputs()[k], r1[k]) > 0.9999
    ctx.close()
    eng.close()
