"""Precision variants on real pretrained models, run through ONNX Runtime on CPU.

fp16 and int8 models of rapidocr's OCR networks and the bundled default are checked against fp32
on rendered text inputs with profiler.accuracy; inputs are small and calibration sets tiny so the
file stays fast.
"""

from __future__ import annotations

import numpy as np
import pytest

from profiler.accuracy import compare_batches, evaluate
from profiler.errors import InputError, UsageError
from profiler.models import default_model_path, inspect_model, make_inputs
from profiler.variants import RANDOM_CALIBRATION_WARNING, prepare
from profiler.variants.int8 import INT8_MAX_ABS_RANGE, entropy_threshold
from tests.ocr_inputs import CLS, DET, REC, cls_batches, det_batches, ocr_model, rec_batches, save_npz


def run_all(path, batches):
    """Outputs of ``path`` with ONNX Runtime's basic optimisations: the model's own arithmetic.

    With all optimisations ONNX Runtime fuses Q/DQ into its int8 CPU kernels, whose u8s8 products
    saturate on CPUs without VNNI; that is ONNX Runtime's error, not the quantized model's.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return [dict(zip(names, sess.run(None, b))) for b in batches]


def accuracy(fp32_path, variant_path, batches):
    return compare_batches(run_all(fp32_path, batches), run_all(variant_path, batches))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("variant-cache")


# --- fp16 ---------------------------------------------------------------------------------------

def test_fp32_is_the_original_model():
    p = prepare(default_model_path(), "fp32", shapes=None)
    assert p.path == default_model_path() and p.info["converter"] is None
    assert p.model_hash == inspect_model(default_model_path()).model_hash


def test_fp16_cls_model_close_but_not_identical(cache):
    model = ocr_model(CLS)
    p = prepare(model, "fp16", shapes={"x": (1, 3, 48, 192)}, cache_dir=cache)
    assert p.info["converter"] == "onnxconverter-common float16" and p.info["converter_version"]
    assert p.info["ops_kept_fp32"] == {"Softmax": 1}
    out = inspect_model(p.path)
    assert out.inputs[0].dtype == "float32" and out.outputs[0].dtype == "float32"  # keep_io_types
    m = accuracy(model, p.path, cls_batches(6))["save_infer_model/scale_0.tmp_1"]
    assert 0.9999 < m["cosine"] < 1.0 or (m["cosine"] == 1.0 and m["max_abs"] > 0)
    assert 0 < m["rel_l2"] < 2e-3 and m["top1_agreement"] == 1.0
    assert evaluate({"y": m}, "fp16")[0]


def test_fp16_rec_model_output_stays_float32_and_top1_agrees(cache):
    # the recogniser ends in a blocked Softmax; onnxconverter-common leaves that output float16
    # despite keep_io_types, and prepare() must put it back to float32
    model = ocr_model(REC)
    p = prepare(model, "fp16", shapes={"x": (1, 3, 48, 160)}, cache_dir=cache)
    assert p.info["outputs_recast_fp32"] == ["softmax_11.tmp_0"]
    assert inspect_model(p.path).outputs[0].dtype == "float32"
    assert {"ReduceMean", "Pow", "Sqrt", "Softmax"} <= set(p.info["ops_kept_fp32"])
    m = accuracy(model, p.path, rec_batches(3))["softmax_11.tmp_0"]
    assert m["top1_rows"] == 3 * 20  # 20 time steps of 6625 classes per line
    assert m["top1_agreement"] >= 0.95 and m["cosine"] > 0.9999 and 0 < m["rel_l2"] < 1e-2


def test_fp16_det_model_keeps_out_of_range_batchnorm_in_fp32(cache):
    # PP-OCRv4's detector has a BatchNormalization running variance of ~1e8; clamped to float16
    # the detection map collapses to zero. The node and its constants must stay float32.
    model = ocr_model(DET)
    with pytest.raises(UsageError, match="input 'x' has dynamic dimensions"):
        prepare(model, "fp16", shapes=None, cache_dir=cache)
    p = prepare(model, "fp16", shapes={"x": (1, 3, 96, 96)}, cache_dir=cache)
    assert p.info["nodes_kept_fp32_out_of_range"] == ["p2o.BatchNormalization.1"]
    assert any("exceed float16's range" in w for w in p.warnings)
    m = accuracy(model, p.path, det_batches(2))["sigmoid_0.tmp_0"]
    assert m["top1_agreement"] is None  # a map, not class scores
    assert m["cosine"] > 0.9999 and m["rel_l2"] < 1e-2 and m["nan_count"] == 0


def test_fp16_cache_hit_returns_same_file(tmp_path):
    progress: list[str] = []
    a = prepare(default_model_path(), "fp16", shapes=None, cache_dir=tmp_path, progress=progress.append)
    b = prepare(default_model_path(), "fp16", shapes=None, cache_dir=tmp_path, progress=progress.append)
    assert a.info["cache_hit"] is False and b.info["cache_hit"] is True
    assert a.path == b.path and a.model_hash == b.model_hash
    assert "converting" in progress[0] and "reusing cached" in progress[1]
    c = prepare(default_model_path(), "fp16", shapes=None, cache_dir=tmp_path, keep_fp32=["conv0"])
    assert c.info["cache_hit"] is False and c.path != a.path and "conv0" in c.info["nodes_kept_fp32"]


def test_bad_precision_and_method_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="unknown precision"):
        prepare(default_model_path(), "bf16", shapes=None, cache_dir=tmp_path)
    with pytest.raises(UsageError, match="calibration method"):
        prepare(default_model_path(), "int8", shapes=None, cache_dir=tmp_path, calib_method="kl")


def test_corrupt_model_is_input_error(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(ocr_model(CLS).read_bytes()[:5000])
    with pytest.raises(InputError, match="model.onnx"):
        prepare(bad, "fp16", shapes={"x": (1, 3, 48, 96)}, cache_dir=tmp_path)


# --- int8 ---------------------------------------------------------------------------------------

def test_entropy_threshold_clips_a_long_tail():
    rng = np.random.default_rng(0)
    x = np.abs(np.concatenate([rng.normal(0, 1, 200_000), [40.0]]))  # one outlier stretches the range
    hist, edges = np.histogram(x, bins=2048)
    t = entropy_threshold(hist, edges)
    assert 3.0 < t < 15.0  # clips the outlier, keeps the bulk of the Gaussian
    flat_hist, flat_edges = np.histogram(rng.uniform(0, 1, 100_000), bins=2048)
    assert entropy_threshold(flat_hist, flat_edges) > 0.9  # nothing to clip in a uniform range


def test_int8_default_model_entropy_minmax_and_cache(tmp_path):
    info = inspect_model(default_model_path())
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=np.stack([b["input"] for b in make_inputs(info, {}, seed=11, count=8)]))
    evalb = make_inputs(info, {}, seed=12, count=8)
    progress: list[str] = []
    q = prepare(default_model_path(), "int8", shapes=None, calib=calib, cache_dir=tmp_path / "c",
                progress=progress.append)
    cal = q.info["calibration"]
    assert cal == {**cal, "source": str(calib), "samples": 8, "method": "entropy", "cache_hit": False,
                   "meaningless": False}
    assert q.info["entropy_bins"] == 2048 and q.info["q_nodes"] > 0 and q.info["per_channel"] is True
    assert any("sample 8/8" in m for m in progress)
    ops = inspect_model(q.path).op_types
    assert ops["QuantizeLinear"] >= 3 and ops["DequantizeLinear"] > ops["QuantizeLinear"]
    m = accuracy(default_model_path(), q.path, evalb)["probs"]
    f16 = prepare(default_model_path(), "fp16", shapes=None, cache_dir=tmp_path / "c")
    m16 = accuracy(default_model_path(), f16.path, evalb)["probs"]
    assert m["rel_l2"] > 3 * m16["rel_l2"]  # int8 measurably worse than fp16
    assert m["cosine"] > 0.999 and m["rel_l2"] < 0.05  # but a sound quantization of a small CNN
    # the second call is a cache hit: no calibration progress, same file
    progress.clear()
    again = prepare(default_model_path(), "int8", shapes=None, calib=calib, cache_dir=tmp_path / "c",
                    progress=progress.append)
    assert again.info["calibration"]["cache_hit"] is True and again.info["cache_hit"] is True
    assert again.path == q.path and not any("sample" in m for m in progress)
    mm = prepare(default_model_path(), "int8", shapes=None, calib=calib, cache_dir=tmp_path / "c",
                 calib_method="minmax")
    assert mm.path != q.path and mm.info["calibration"]["method"] == "minmax"


def test_int8_random_calibration_is_flagged_meaningless(tmp_path):
    q = prepare(default_model_path(), "int8", shapes=None, cache_dir=tmp_path, calib_method="minmax",
                random_calib_samples=4)
    assert q.info["calibration"]["source"] == "random" and q.info["calibration"]["meaningless"] is True
    assert q.calibration_meaningless and q.warnings[0] == RANDOM_CALIBRATION_WARNING
    again = prepare(default_model_path(), "int8", shapes=None, cache_dir=tmp_path, calib_method="minmax",
                    random_calib_samples=4)
    assert again.info["cache_hit"] and again.warnings[0] == RANDOM_CALIBRATION_WARNING


def test_int8_cls_model_real_calibration_beats_random(tmp_path):
    model = ocr_model(CLS)
    shapes = {"x": (1, 3, 48, 96)}
    calib = save_npz(cls_batches(4, seed=1, shape=(48, 96)), tmp_path / "cls.npz")
    evalb = cls_batches(6, seed=2, shape=(48, 96))
    real = prepare(model, "int8", shapes=shapes, calib=calib, calib_method="percentile", cache_dir=tmp_path)
    rand = prepare(model, "int8", shapes=shapes, calib_method="percentile", cache_dir=tmp_path,
                   random_calib_samples=4)
    f16 = prepare(model, "fp16", shapes=shapes, cache_dir=tmp_path)
    assert any("opset upgraded from 11 to 13" in w for w in real.warnings)
    out = "save_infer_model/scale_0.tmp_1"
    m_real = accuracy(model, real.path, evalb)[out]
    m_rand = accuracy(model, rand.path, evalb)[out]
    m16 = accuracy(model, f16.path, evalb)[out]
    assert m16["rel_l2"] < m_real["rel_l2"] < m_rand["rel_l2"]
    assert m_real["cosine"] > m_rand["cosine"]
    assert rand.calibration_meaningless and not real.calibration_meaningless


def test_int8_calib_with_wrong_shape_or_dtype_names_the_input(tmp_path):
    model = ocr_model(CLS)
    np.savez(tmp_path / "wrong.npz", x=np.zeros((2, 1, 3, 32, 96), np.float32))
    with pytest.raises(InputError) as err:
        prepare(model, "int8", shapes={"x": (1, 3, 48, 96)}, calib=tmp_path / "wrong.npz", cache_dir=tmp_path)
    assert "input 'x'" in str(err.value) and "1x3x48x96" in str(err.value) and "2x1x3x32x96" in str(err.value)
    np.savez(tmp_path / "f64.npz", x=np.zeros((1, 3, 48, 96), np.float64))
    with pytest.raises(InputError, match="input 'x'.*float64"):
        prepare(model, "int8", shapes={"x": (1, 3, 48, 96)}, calib=tmp_path / "f64.npz", cache_dir=tmp_path)
    assert not list(tmp_path.glob("int8-*.onnx"))  # nothing half-made was cached


def test_int8_holdout_is_not_calibrated_on(tmp_path):
    info = inspect_model(default_model_path())
    data = make_inputs(info, {}, seed=3, count=5)
    np.savez(tmp_path / "c.npz", input=np.stack([b["input"] for b in data]))
    q = prepare(default_model_path(), "int8", shapes=None, calib=tmp_path / "c.npz", cache_dir=tmp_path,
                calib_method="minmax", holdout_fraction=0.2)
    assert q.info["calibration"]["samples"] == 4 and q.info["calibration"]["held_out_samples"] == 1


def test_int8_keep_fp32_leaves_layers_unquantized(tmp_path):
    q = prepare(default_model_path(), "int8", shapes=None, cache_dir=tmp_path, calib_method="minmax",
                random_calib_samples=2, keep_fp32=["Gemm", "conv0"])
    assert "Gemm" not in q.info["op_types_quantized"] and q.info["excluded_nodes"] == ["conv0"]
    assert set(q.info["nodes_kept_fp32"]) == {"fc", "conv0"}  # the head and the first conv stay float
    import onnx

    graph = onnx.load(str(q.path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    node = {n.name: n for n in graph.node}
    assert producer.get(node["conv0"].input[0]) != "DequantizeLinear"  # reads the float input itself
    assert producer.get(node["fc"].input[0]) != "DequantizeLinear"
    assert producer[node["conv1"].input[0]] == "DequantizeLinear"  # the rest stays int8


def test_fp16_of_an_fp16_model_is_input_error(tmp_path):
    first = prepare(default_model_path(), "fp16", shapes=None, cache_dir=tmp_path)
    with pytest.raises(InputError, match="fp16 conversion of .* failed: ValueError: The model is already"):
        prepare(first.path, "fp16", shapes=None, cache_dir=tmp_path / "again")


def test_int8_det_model_dynamic_dims_survive_quantization(tmp_path):
    model = ocr_model(DET)
    calib = save_npz(det_batches(3, seed=1, shape=(64, 64)), tmp_path / "det.npz")
    q = prepare(model, "int8", shapes={"x": (1, 3, 64, 64)}, calib=calib, calib_method="minmax", cache_dir=tmp_path)
    f16 = prepare(model, "fp16", shapes={"x": (1, 3, 64, 64)}, cache_dir=tmp_path)
    info = inspect_model(q.path)
    assert isinstance(info.inputs[0].shape[2], str)  # still dynamic: other --shape values reuse it
    assert info.op_types["QuantizeLinear"] > 50
    evalb = det_batches(2, seed=2, shape=(96, 64))  # another shape than calibrated
    m8 = accuracy(model, q.path, evalb)["sigmoid_0.tmp_0"]
    m16 = accuracy(model, f16.path, evalb)["sigmoid_0.tmp_0"]
    assert m8["nan_count"] == 0 and m8["rel_l2"] > 10 * m16["rel_l2"]
    assert m8["top1_agreement"] is None and 0.0 < m8["cosine"] < 1.0


# --- int8: tensors whose calibrated range is not finite stay float ------------------------------
def _masked_attention_model(path, mask_value):
    """scores = x @ W; scores + mask_value where mask is 0; softmax; @ V: a BERT attention mask path.

    A finite ``mask_value`` is applied as ``(1 - mask) * mask_value`` (BERT exports), -inf by Where.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "V"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(mask_value, np.float32), "big_negative")]
    if np.isfinite(mask_value):
        to_additive = [helper.make_node("Sub", ["one", "mask"], ["inverted"], name="invert"),
                       helper.make_node("Mul", ["inverted", "big_negative"], ["additive"], name="to_additive")]
    else:
        inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
        to_additive = [helper.make_node("Cast", ["mask"], ["keep"], name="to_bool", to=TensorProto.BOOL),
                       helper.make_node("Where", ["keep", "zero", "big_negative"], ["additive"], name="to_additive")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["scores"], name="qk"), *to_additive,
             helper.make_node("Add", ["scores", "additive"], ["masked"], name="mask_add"),
             helper.make_node("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["probs", "V"], ["y"], name="pv")]
    graph = helper.make_graph(nodes, "masked_attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8]),
                               helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    rng = np.random.default_rng(4)
    mask = np.ones((16, 1, 1, 8), np.float32)
    mask[:, :, :, 5:] = 0.0  # the last three positions are padding
    np.savez(path.with_suffix(".npz"), x=rng.standard_normal((16, 1, 8, 8)).astype(np.float32), mask=mask)
    return path


def _qdq_scales(path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return {n.input[1]: inits[n.input[1]] for n in model.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear")}


@pytest.mark.parametrize("method,mask_value", [("entropy", float(np.finfo(np.float32).min)),
                                               ("minmax", float(np.finfo(np.float32).min)),
                                               ("minmax", float("-inf"))])
def test_int8_mask_add_with_huge_constant_stays_float(tmp_path, method, mask_value):
    model = _masked_attention_model(tmp_path / "attn.onnx", mask_value)
    said = []
    q = prepare(model, "int8", shapes={"x": (1, 8, 8), "mask": (1, 1, 8)}, calib=model.with_suffix(".npz"),
                calib_method=method, cache_dir=tmp_path / "c", holdout_fraction=0.0, progress=said.append)
    assert any(line.startswith("int8: kept in float32") and "mask_add" in line for line in said)
    for name, scale in _qdq_scales(q.path).items():
        assert np.all(np.isfinite(scale)) and np.all(scale > 0), (name, scale)
        assert np.all(scale * 127 <= INT8_MAX_ABS_RANGE), (name, scale)
    kept = {k["node"]: k for k in q.info["nodes_kept_fp32_bad_range"]}
    assert "mask_add" in kept and "qk" not in kept  # only the mask path is kept float
    assert any("mask_add" in w for w in q.warnings)
    import onnx

    graph = onnx.load(str(q.path)).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    qk = next(n for n in graph.node if n.name == "qk")
    assert producer[qk.input[0]] == "DequantizeLinear"  # the rest stays int8
    import onnxruntime as ort

    feeds = {"x": np.ones((1, 8, 8), np.float32), "mask": np.ones((1, 1, 8), np.float32)}
    out = ort.InferenceSession(str(q.path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.all(np.isfinite(out))
