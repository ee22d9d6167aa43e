"""Model inspection, shapes and input data, on rapidocr's real OCR models and the bundled default."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.errors import InputError, UsageError
from profiler.models import (
    default_model_path,
    inspect_model,
    load_samples,
    make_inputs,
    parse_shape_args,
    resolve_shapes,
    samples_hash,
    split_holdout,
)
from tests.ocr_inputs import CLS, DET, REC, ocr_model, save_npz


# --- inspection of real models -------------------------------------------------------------------

def test_inspect_det_model_dynamic_dims():
    info = inspect_model(ocr_model(DET))
    assert [t.name for t in info.inputs] == ["x"]
    x = info.inputs[0]
    assert x.dtype == "float32"
    assert x.shape == ("p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2")
    assert info.outputs[0].name == "sigmoid_0.tmp_0" and info.outputs[0].shape[1] == 1
    assert info.opset == 12
    assert info.node_count == 672
    assert info.op_types["Conv"] == 62 and info.op_types["Resize"] == 6
    assert [t.name for t in info.dynamic_inputs] == ["x"]
    assert len(info.model_hash) == 64 and info.size_bytes == ocr_model(DET).stat().st_size


def test_inspect_cls_model_negative_dim_is_dynamic():
    # Paddle's exporter writes the batch size as dim_value -1 and H/W as the symbol '?'
    info = inspect_model(ocr_model(CLS))
    assert info.inputs[0].shape == (None, 3, "?", "?")
    assert info.outputs[0].shape == (None, 2)
    assert info.opset == 11 and info.node_count == 566


def test_inspect_rec_model_outputs_class_scores():
    info = inspect_model(ocr_model(REC))
    assert info.outputs[0].shape[-1] == 6625
    assert info.op_types["Softmax"] == 3 and info.op_types["ReduceMean"] == 10


def test_model_hash_changes_with_content(tmp_path):
    a = tmp_path / "a.onnx"
    a.write_bytes(default_model_path().read_bytes())
    h1 = inspect_model(a).model_hash
    import onnx

    m = onnx.load(str(a))
    m.doc_string = "changed"
    onnx.save(m, str(a))
    assert inspect_model(a).model_hash != h1


@pytest.mark.parametrize("content, reason", [
    (b"this is not a protobuf \xff\xfe\x00garbage" * 10, "not a valid ONNX model"),
    (b"", "no graph nodes"),
])
def test_corrupt_model_is_input_error(tmp_path, content, reason):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(content)
    with pytest.raises(InputError) as err:
        inspect_model(bad)
    assert "broken.onnx" in str(err.value) and reason in str(err.value)


def test_truncated_real_model_is_input_error(tmp_path):
    data = ocr_model(CLS).read_bytes()
    bad = tmp_path / "cut.onnx"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError, match="cut.onnx"):
        inspect_model(bad)


def test_missing_model_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        inspect_model(tmp_path / "nope.onnx")


# --- the bundled default model -------------------------------------------------------------------

def test_default_model_is_small_static_and_reproducible(tmp_path):
    from profiler.models import make_default

    path = default_model_path()
    info = inspect_model(path)
    assert info.opset == 17 and info.size_bytes < 200_000
    assert info.inputs[0].shape == (1, 3, 64, 64) and info.outputs[0].shape == (1, 10)
    assert set(info.op_types) == {"Conv", "Relu", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm", "Softmax"}
    assert resolve_shapes(info, {}) == {"input": (1, 3, 64, 64)}
    regenerated = make_default.write(tmp_path / "again.onnx")
    assert regenerated.read_bytes() == path.read_bytes()


def test_default_model_runs_and_outputs_probabilities():
    import onnxruntime as ort

    info = inspect_model(default_model_path())
    sess = ort.InferenceSession(str(default_model_path()), providers=["CPUExecutionProvider"])
    (probs,) = sess.run(None, make_inputs(info, {}, seed=3)[0])
    assert probs.shape == (1, 10)
    assert abs(float(probs.sum()) - 1.0) < 1e-5
    assert 0.2 < float(probs.max()) < 0.9  # not a saturated softmax: precision errors stay visible


# --- shapes --------------------------------------------------------------------------------------

def test_parse_shape_args():
    assert parse_shape_args(["x:1x3x224x224", "input:0:2,8"]) == {"x": (1, 3, 224, 224), "input:0": (2, 8)}
    for bad in ["x", "x:", ":1x3", "x:1xax3", "x:0x3", "x:1x-3"]:
        with pytest.raises(UsageError):
            parse_shape_args([bad])
    with pytest.raises(UsageError, match="twice"):
        parse_shape_args(["x:1", "x:2"])


def test_parse_shape_args_accepts_polygraphy_s_spelling():
    """Polygraphy writes --input-shapes image:[1,3,60,160]; trtexec image:1x3x60x160: both mean the same."""
    assert parse_shape_args(["image:[1,3,60,160]"]) == parse_shape_args(["image:1x3x60x160"]) == {
        "image": (1, 3, 60, 160)}
    assert parse_shape_args(["input:0:[2, 8]"]) == {"input:0": (2, 8)}
    for bad in ["x:[1,3", "x:1,3]", "x:[]", "x:[0,3]", "x:[1;3]"]:
        with pytest.raises(UsageError):
            parse_shape_args([bad])


def test_dynamic_input_without_shape_names_input_and_dims():
    info = inspect_model(ocr_model(DET))
    with pytest.raises(UsageError) as err:
        resolve_shapes(info, {})
    msg = str(err.value)
    assert "input 'x'" in msg and "'p2o.DynamicDimension.1'" in msg and "--shape x:1x3x224x224" in msg


def test_resolve_shapes_checks_names_rank_and_static_dims():
    info = inspect_model(ocr_model(DET))
    assert resolve_shapes(info, {"x": (1, 3, 96, 128)}) == {"x": (1, 3, 96, 128)}
    with pytest.raises(UsageError, match="dimension 1 of input 'x' is fixed at 3"):
        resolve_shapes(info, {"x": (1, 4, 96, 96)})
    with pytest.raises(UsageError, match="rank 3"):
        resolve_shapes(info, {"x": (1, 96, 96)})
    with pytest.raises(UsageError, match="'y', which the model does not have"):
        resolve_shapes(info, {"x": (1, 3, 96, 96), "y": (1,)})
    default = inspect_model(default_model_path())
    with pytest.raises(UsageError, match="fixed at 64"):
        resolve_shapes(default, {"input": (1, 3, 32, 32)})


# --- input data ----------------------------------------------------------------------------------

def test_random_inputs_are_seeded_and_in_range():
    info = inspect_model(ocr_model(REC))
    a = make_inputs(info, {"x": (1, 3, 48, 64)}, seed=5, count=3)
    b = make_inputs(info, {"x": (1, 3, 48, 64)}, seed=5, count=3)
    c = make_inputs(info, {"x": (1, 3, 48, 64)}, seed=6, count=1)
    assert len(a) == 3 and a[0]["x"].shape == (1, 3, 48, 64) and a[0]["x"].dtype == np.float32
    assert all(np.array_equal(x["x"], y["x"]) for x, y in zip(a, b))
    assert not np.array_equal(a[0]["x"], c[0]["x"]) and not np.array_equal(a[0]["x"], a[1]["x"])
    assert -1.0 <= a[0]["x"].min() < -0.9 and 0.9 < a[0]["x"].max() < 1.0


def test_inputs_from_npz_file_and_directory(tmp_path):
    info = inspect_model(ocr_model(CLS))
    shapes = {"x": (1, 3, 48, 96)}
    rng = np.random.default_rng(0)
    stacked = rng.normal(size=(4, 1, 3, 48, 96)).astype(np.float32)
    np.savez(tmp_path / "stack.npz", x=stacked, label=np.arange(4))  # extra keys are ignored
    got = make_inputs(info, shapes, source=tmp_path / "stack.npz")
    assert len(got) == 4 and np.array_equal(got[2]["x"], stacked[2])
    d = tmp_path / "dir"
    d.mkdir()
    np.savez(d / "b.npz", x=stacked[1])
    np.savez(d / "a.npz", x=stacked[0])
    got = load_samples(d, info, shapes)
    assert [np.array_equal(g["x"], s) for g, s in zip(got, stacked[:2])] == [True, True]  # name order


def test_inputs_with_wrong_shape_or_dtype_name_the_input(tmp_path):
    info = inspect_model(ocr_model(CLS))
    np.savez(tmp_path / "shape.npz", x=np.zeros((1, 3, 48, 100), np.float32))
    with pytest.raises(InputError) as err:
        make_inputs(info, {"x": (1, 3, 48, 96)}, source=tmp_path / "shape.npz")
    assert "input 'x'" in str(err.value) and "1x3x48x96" in str(err.value) and "1x3x48x100" in str(err.value)
    np.savez(tmp_path / "dtype.npz", x=np.zeros((1, 3, 48, 96), np.float64))
    with pytest.raises(InputError, match="input 'x'.*expected dtype float32, found float64"):
        make_inputs(info, {"x": (1, 3, 48, 96)}, source=tmp_path / "dtype.npz")
    np.savez(tmp_path / "missing.npz", image=np.zeros((1, 3, 48, 96), np.float32))
    with pytest.raises(InputError, match="no array for input 'x'"):
        make_inputs(info, {"x": (1, 3, 48, 96)}, source=tmp_path / "missing.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no .npz files"):
        make_inputs(info, {"x": (1, 3, 48, 96)}, source=tmp_path / "empty")


def test_split_holdout_and_samples_hash(tmp_path):
    from tests.ocr_inputs import cls_batches

    samples = cls_batches(5)
    calib, held = split_holdout(samples, 0.2)
    assert len(calib) == 4 and len(held) == 1 and held[0] is samples[-1]
    assert split_holdout(samples[:1], 0.5) == (samples[:1], [])
    assert samples_hash(samples) == samples_hash([dict(s) for s in samples])
    assert samples_hash(samples) != samples_hash(samples[:4])
    path = save_npz(samples, tmp_path / "cls.npz")
    info = inspect_model(ocr_model(CLS))
    assert samples_hash(load_samples(path, info, {"x": (1, 3, 48, 192)})) == samples_hash(samples)
