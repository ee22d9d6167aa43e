"""QuantizeLinear / DequantizeLinear in the reference executor against onnx's reference implementation.

Each case is a one- or two-node ONNX graph run by ``onnx.reference.ReferenceEvaluator`` and by the
executor (on the CPU, and on the GPU when one is there); integer outputs must be bit-exact, and so must
the dequantized floats (the same float32 arithmetic). Then a Q/DQ convolution whose weights fold at
build time, and the sweep's INT8 variant of the bundled model against ONNX Runtime. PyTorch is needed:
these run on the GPU machine (torch is not installed here nor in CI)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the cuda backend's kernels)")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from profiler.backends.base import BuildError  # noqa: E402
from profiler.backends.cuda_ref import compile_model  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
NP_CODE = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
           np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32, np.int16: TensorProto.INT16}


def _model(op: str, x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, opset: int, attrs: dict,
           out_code: int, scale_as_input: bool = False) -> onnx.ModelProto:
    inits = [] if scale_as_input else [numpy_helper.from_array(scale, "s")]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "z"))
    node = helper.make_node(op, ["x", "s"] + (["z"] if zp is not None else []), ["y"], name="n", **attrs)
    ins = [helper.make_tensor_value_info("x", NP_CODE[x.dtype.type], list(x.shape))]
    if scale_as_input:
        ins.append(helper.make_tensor_value_info("s", NP_CODE[scale.dtype.type], list(scale.shape)))
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", out_code, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _reference(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnx's reference output; it implements DequantizeLinear from opset 19 only, whose semantics for
    these integer types are opset 10's and 13's, so an older DQ model is evaluated as opset 19."""
    if any(n.op_type == "DequantizeLinear" for n in model.graph.node) and model.opset_import[0].version < 19:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.opset_import[0].version = 19
    return ReferenceEvaluator(model).run(None, feeds)[0]


def _run_both(model, feeds: dict[str, np.ndarray], device: str) -> tuple[np.ndarray, np.ndarray]:
    ref = _reference(model, feeds)
    shapes = {k: v.shape for k, v in feeds.items()}
    prog = compile_model(model, shapes, device)
    got = prog.run_numpy(feeds, device)["y"]
    return ref, got


def _x(shape, seed=0, spread=3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    return x


# (name, op, x, scale, zp, opset, attrs, output type)
CH = np.array([0.02, 0.05, 0.1, 0.5], np.float32)
Q_CASES = [
    ("per_tensor_int8_zp", _x((2, 4, 5, 5)), np.float32(0.02), np.int8(3), 13, {}, TensorProto.INT8),
    ("per_tensor_int8_symmetric", _x((2, 4, 5, 5)), np.float32(0.05), np.int8(0), 19, {}, TensorProto.INT8),
    ("uint8_default_no_zp", _x((3, 7)) + 4, np.float32(0.03), None, 13, {}, TensorProto.UINT8),
    ("uint8_zp_128", _x((3, 7)), np.float32(0.01), np.uint8(128), 13, {}, TensorProto.UINT8),
    ("opset10_per_tensor", _x((4, 6)), np.float32(0.04), np.uint8(10), 10, {}, TensorProto.UINT8),
    ("per_channel_axis1", _x((2, 4, 3, 3)), CH, np.array([0, 1, -2, 5], np.int8), 13, {}, TensorProto.INT8),
    ("per_channel_axis_neg1", _x((3, 4)), CH, np.array([0, 0, 0, 0], np.int8), 13, {"axis": -1},
     TensorProto.INT8),
    ("per_channel_uint8_axis0", _x((4, 3, 2)), CH, np.array([128, 100, 0, 255], np.uint8), 13, {"axis": 0},
     TensorProto.UINT8),
    ("opset21_output_dtype_int8", _x((5, 5)), np.float32(0.02), None, 21, {"output_dtype": TensorProto.INT8},
     TensorProto.INT8),
    ("int16", _x((5, 5), spread=300.0), np.float32(0.01), np.int16(7), 21, {}, TensorProto.INT16),
    ("float16_input", _x((3, 9)).astype(np.float16), np.float16(0.03), np.int8(1), 19, {}, TensorProto.INT8),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,x,scale,zp,opset,attrs,out", Q_CASES, ids=[c[0] for c in Q_CASES])
def test_quantize_linear_is_bit_exact(device, name, x, scale, zp, opset, attrs, out):
    model = _model("QuantizeLinear", x, np.asarray(scale), None if zp is None else np.asarray(zp), opset, attrs, out)
    ref, got = _run_both(model, {"x": x}, device)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
    assert len(np.unique(got)) > 3  # the case quantizes to many levels, not a constant


@pytest.mark.parametrize("device", DEVICES)
def test_round_half_to_even_and_saturation(device):
    s = np.float32(0.5)
    # x / s lands exactly on .5 (ties go to the even integer) and far outside the int8 range (saturates)
    x = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 1000.0, -1000.0, 63.25, 63.75, -64.25, 0.0], np.float32)
    for zp, code in ((np.int8(0), TensorProto.INT8), (np.int8(-5), TensorProto.INT8), (np.uint8(3), TensorProto.UINT8)):
        model = _model("QuantizeLinear", x, np.asarray(s), np.asarray(zp), 13, {}, code)
        ref, got = _run_both(model, {"x": x}, device)
        np.testing.assert_array_equal(got, ref)
    half = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32)
    model = _model("QuantizeLinear", half, np.asarray(np.float32(1.0)), np.asarray(np.int8(0)), 13, {},
                   TensorProto.INT8)
    _, got = _run_both(model, {"x": half}, device)
    assert got.tolist() == [0, 2, 2, 0, -2, -2]


@pytest.mark.parametrize("device", DEVICES)
def test_scale_computed_at_run_time(device):
    x = _x((4, 6))
    model = _model("QuantizeLinear", x, np.asarray(np.float32(0.05)), np.asarray(np.int8(2)), 13, {},
                   TensorProto.INT8, scale_as_input=True)
    feeds = {"x": x, "s": np.asarray(np.float32(0.05))}
    ref, got = _run_both(model, feeds, device)
    np.testing.assert_array_equal(got, ref)


def _ints(shape, lo, hi, dtype, seed=1):
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


DQ_CASES = [
    ("int8_zp", _ints((2, 4, 3, 3), -128, 127, np.int8), np.float32(0.02), np.int8(-3), 13, {}),
    ("uint8_zp", _ints((3, 7), 0, 255, np.uint8), np.float32(0.1), np.uint8(128), 10, {}),
    ("uint8_no_zp", _ints((3, 7), 0, 255, np.uint8), np.float32(0.1), None, 13, {}),
    ("per_channel_axis1", _ints((2, 4, 3), -128, 127, np.int8), CH, np.array([0, 3, -3, 1], np.int8), 13, {}),
    ("per_channel_axis0_weights", _ints((4, 3, 3, 3), -127, 127, np.int8), CH, np.zeros(4, np.int8), 13,
     {"axis": 0}),
    ("int32_bias", _ints((16,), -(2 ** 20), 2 ** 20, np.int32), np.float32(1e-4), None, 13, {}),
    ("float16_scale", _ints((3, 5), -128, 127, np.int8), np.float16(0.01), np.int8(4), 19, {}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,x,scale,zp,opset,attrs", DQ_CASES, ids=[c[0] for c in DQ_CASES])
def test_dequantize_linear_matches_bit_for_bit(device, name, x, scale, zp, opset, attrs):
    scale = np.asarray(scale)
    out = NP_CODE[scale.dtype.type]
    model = _model("DequantizeLinear", x, scale, None if zp is None else np.asarray(zp), opset, attrs, out)
    ref, got = _run_both(model, {"x": x}, device)
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_q_then_dq_chain_and_per_channel_refusal_below_opset_13(device):
    x = _x((2, 4, 3, 3))
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q")
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")
    inits = [numpy_helper.from_array(CH, "s"), numpy_helper.from_array(np.array([1, 0, -1, 2], np.int8), "z")]
    g = helper.make_graph([q, dq], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    ref, got = _run_both(model, {"x": x}, device)
    np.testing.assert_array_equal(got, ref)
    old = helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)], ir_version=9)
    with pytest.raises(BuildError, match="per-axis needs opset 13"):
        compile_model(old, {"x": x.shape}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_an_infinite_scale_is_refused(device):
    """The quantizer writes scale inf where a calibrated range overflows (a transformer's attention mask)."""
    x = _x((2, 3))
    model = _model("QuantizeLinear", x, np.asarray(np.float32(np.inf)), np.asarray(np.int8(0)), 13, {},
                   TensorProto.INT8)
    with pytest.raises(BuildError, match="scale is inf"):
        compile_model(model, {"x": x.shape}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_block_quantization_is_refused(device):
    x = _x((4, 8))
    scale = np.full((4, 2), 0.05, np.float32)
    model = _model("QuantizeLinear", x, scale, np.zeros((4, 2), np.int8), 21, {"axis": 1, "block_size": 4},
                   TensorProto.INT8)
    with pytest.raises(BuildError, match="block quantization"):
        compile_model(model, {"x": x.shape}, device)


@pytest.mark.parametrize("device", DEVICES)
def test_qdq_conv_with_weights_folded_at_build(device):
    """Activation Q/DQ -> Conv <- DQ(int8 per-channel weights), the quantizer's pattern: the weights'
    DQ folds into a float32 constant, the activation's pair runs as steps."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    wq = rng.integers(-127, 128, size=(4, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dqw", axis=0),
             helper.make_node("Conv", ["xd", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(np.array(0.03, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.int8), "xz"),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(CH * 0.1, "ws"),
             numpy_helper.from_array(np.zeros(4, np.int8), "wz")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    prog = compile_model(model, {"x": x.shape}, device)
    assert [s.op for s in prog.steps] == ["QuantizeLinear", "DequantizeLinear", "Conv"]  # the weights' DQ folded
    got = prog.run_numpy({"x": x}, device)["y"]
    ref = _reference(model, {"x": x})
    # float accumulation of the same dequantized products (TF32 on a GPU's cuDNN by default)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3 * float(np.abs(ref).max()))


def test_sweep_int8_variant_of_the_bundled_model_runs(tmp_path):
    """The sweep's own INT8 preparation (ONNX Runtime's static Q/DQ quantizer) compiles and matches the Q/DQ
    model's arithmetic as ONNX Runtime computes it without fused kernels."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime.quantization")
    from profiler.models import default_model_path, inspect_model, random_samples, resolve_shapes
    from profiler.variants import prepare

    src = default_model_path()
    info = inspect_model(src)
    shapes = resolve_shapes(info, None)
    prepared = prepare(src, "int8", shapes=shapes, cache_dir=str(tmp_path), calib=None)
    model = onnx.load(str(prepared.path))
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    feeds = random_samples(info, shapes, seed=5, count=1)[0]
    device = DEVICES[-1]
    got = compile_model(model, shapes, device).run_numpy(feeds, device)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # Q/DQ nodes one by one
    sess = ort.InferenceSession(str(prepared.path), so, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for k, r in ref.items():
        a, b = got[k].astype(np.float64).ravel(), r.astype(np.float64).ravel()
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
        assert cos > 0.999, (k, cos)
