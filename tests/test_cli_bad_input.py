"""Every input a user can get wrong, from the command line: the documented exit code (2 usage, 3 bad
input), one sentence on stderr that names what is wrong, no traceback, and nothing measured lost."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profiler.cli import main
from profiler.store import Store
from tests.conftest import NSYS_FIXTURES, TRTEXEC_FIXTURES, rapidocr_model_path

CAPTURE = NSYS_FIXTURES / "v2026.1.1_testcuda_rtx4060ti_report1.sqlite"  # a small real export with CUDA tables
RESNET_FP32 = TRTEXEC_FIXTURES / "pytorch" / "resnet" / "A100" / "fp32"
PREFIX = "resnet.onnx.engine"
FAST = ["--duration", "0", "--iterations", "3", "--warmup", "0", "--no-layers"]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """The real entry point in-process: exit code, stdout, stderr."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def assert_one_sentence(err: str, code: int, expected: int, *words: str) -> None:
    assert code == expected, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in last, (w, last)


@pytest.fixture
def capture(tmp_path) -> Path:
    if not CAPTURE.exists():
        pytest.skip(f"real nsys exports not found at {NSYS_FIXTURES}")
    path = tmp_path / "cap.sqlite"
    shutil.copy(CAPTURE, path)
    path.chmod(0o644)
    return path


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    """A two-node float model (Relu, then Sigmoid) small enough to sweep in well under a second."""
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="relu0"),
                           helper.make_node("Sigmoid", ["h"], ["y"], name="sig0")], "tiny", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "tiny.onnx"
    save(m, str(path))
    return path


# ----------------------------------------------------------------------------------- analyze

def _make_capture_case(case: str, capture: Path, tmp_path: Path) -> list[str]:
    if case == "missing":
        return [str(tmp_path / "nothere.sqlite")]
    if case == "directory":
        d = tmp_path / "exports.sqlite"
        d.mkdir()
        return [str(d)]
    if case == "truncated":
        os.truncate(capture, capture.stat().st_size // 2)
        return [str(capture)]
    if case == "random":
        p = tmp_path / "noise.sqlite"
        p.write_bytes(np.random.default_rng(0).bytes(64 * 1024))
        return [str(p)]
    if case == "not_nsys":
        p = tmp_path / "inventory.sqlite"
        with sqlite3.connect(p) as c:
            c.execute("CREATE TABLE parts (id INTEGER, name TEXT)")
        return [str(p)]
    if case == "nsys_rep":
        p = tmp_path / "cap.nsys-rep"
        p.write_bytes(b"not really a report")
        return [str(p)]
    if case == "json_unwritable":
        (tmp_path / "afile").write_text("x")
        return [str(capture), "--json", str(tmp_path / "afile" / "a.json")]
    if case == "report_unwritable":
        (tmp_path / "afile").write_text("x")
        return [str(capture), "--report", str(tmp_path / "afile" / "a.html")]
    if case == "db_is_capture":
        return [str(capture), "--db", str(capture)]
    raise AssertionError(case)


@pytest.mark.parametrize("case, expected, words", [
    ("missing", 3, ["not found", "nothere.sqlite"]),
    ("directory", 3, ["exports.sqlite", "is a directory"]),
    ("truncated", 3, ["cap.sqlite", "truncated"]),
    ("random", 3, ["noise.sqlite", "not an SQLite database"]),
    ("not_nsys", 3, ["inventory.sqlite", "not an Nsight Systems export"]),
    ("nsys_rep", 3, ["cap.nsys-rep", "'nsys' is not on PATH"]),
    ("json_unwritable", 3, ["--json", "a.json"]),
    ("report_unwritable", 3, ["--report", "a.html"]),
    ("db_is_capture", 2, ["--db", "cap.sqlite"]),
])
def test_analyze_bad_input(case, expected, words, capture, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no nsys on PATH
    args = _make_capture_case(case, capture, tmp_path)
    extra = [] if case == "db_is_capture" else ["--no-store"]
    code, out, err = run_cli(["analyze", *args, *extra], capsys)
    assert_one_sentence(err, code, expected, *words)
    if case == "db_is_capture":  # the capture was not turned into a run store
        with sqlite3.connect(capture) as c:
            assert "runs" not in {r[0] for r in c.execute("SELECT name FROM sqlite_master")}


def test_analyze_bad_db_fails_before_anything_is_written(capture, tmp_path, capsys):
    json_path = tmp_path / "a.json"
    code, _, err = run_cli(["analyze", str(capture), "--json", str(json_path),
                            "--db", str(tmp_path / "no" / "such" / "dir" / "x.db")], capsys)
    assert_one_sentence(err, code, 3, "cannot open the run store", "does not exist")
    assert not json_path.exists()


def test_analyze_negative_min_gap_is_a_usage_error(capture, capsys):
    code, _, err = run_cli(["analyze", str(capture), "--no-store", "--min-gap-us", "-5"], capsys)
    assert code == 2 and "--min-gap-us" in err and "Traceback" not in err


def test_analyze_without_cuda_tables_is_degraded_and_says_so(capture, capsys):
    with sqlite3.connect(capture) as c:
        for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'CUPTI%'").fetchall():
            c.execute(f'DROP TABLE "{t}"')
    code, out, err = run_cli(["analyze", str(capture), "--no-store", "--json", "-"], capsys)
    assert code == 0, err
    data = json.loads(out)  # stdout is nothing but the JSON
    missing = " ".join(data["capture"]["missing"])
    assert "no CUDA GPU activity" in missing and "no CUDA API calls" in missing
    assert data["capture"]["counts"]["kernels"] == 0
    assert all(not r["gpu_busy_fraction"] for r in data["ranges"])  # no GPU time is made up


def test_analyze_json_to_stdout_is_only_json(capture, tmp_path, capsys):
    code, out, err = run_cli(["analyze", str(capture), "--json", "-", "--db", str(tmp_path / "s.db")], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["capture"]["counts"]["kernels"] == 4
    assert "stored run" not in out


def test_analyze_corrupt_rows_are_named_not_miscounted(capture, capsys):
    with sqlite3.connect(capture) as c:
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = end + 1000 WHERE rowid = "
                  "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    code, out, err = run_cli(["analyze", str(capture), "--no-store", "--json", "-"], capsys)
    assert code == 0, err
    data = json.loads(out)
    # the loader leaves the reversed row out and says so (issue 13: validated at the boundary)
    assert any(w.startswith("1 of ") and "kernels were ignored: 1 with an end before the start" in w
               for w in data["capture"]["warnings"]), data["capture"]["warnings"]
    assert all(k["min_ms"] >= 0 and k["total_ms"] >= 0 for k in data["top_kernels"])


# ----------------------------------------------------------------------------------- import

def _import_case(case: str, tmp_path: Path) -> Path:
    d = tmp_path / case
    d.mkdir()
    profile = RESNET_FP32 / f"{PREFIX}.profile.json"
    graph = RESNET_FP32 / f"{PREFIX}.graph.json"
    if case == "profile_only":
        shutil.copy(profile, d)
        shutil.copy(RESNET_FP32 / f"{PREFIX}.timing.json", d)
    elif case == "default_verbosity":
        shutil.copy(profile, d)
        g = json.loads(graph.read_text())
        g["Layers"] = [x["Name"] if isinstance(x, dict) else x for x in g["Layers"]]
        (d / graph.name).write_text(json.dumps(g))
    elif case == "mismatched":
        shutil.copy(graph, d)
        p = json.loads(profile.read_text())
        for r in p[1:]:
            r["name"] = "other_" + r["name"]
        (d / profile.name).write_text(json.dumps(p))
    elif case == "truncated_profile":
        shutil.copy(graph, d)
        (d / profile.name).write_text(profile.read_text()[:3000])
    elif case == "truncated_only":
        (d / profile.name).write_text(profile.read_text()[:3000])
    elif case == "unrelated":
        (d / "notes.txt").write_text("hello\n")
        (d / "config.json").write_text('{"a": 1}')
    return d


@pytest.mark.parametrize("case, expected, words", [
    ("profile_only", 0, ["without its layer info", "--exportLayerInfo"]),
    ("default_verbosity", 0, ["default profiling verbosity", "--profilingVerbosity=detailed"]),
    ("mismatched", 0, ["layer names differ", "other_Conv_0 + Relu_1"]),
    ("truncated_profile", 0, ["profile.json is not valid JSON", "truncated", "skipped"]),
    ("truncated_only", 3, ["profile.json is not valid JSON", "truncated"]),
    ("empty", 3, ["no trtexec exports found"]),
    ("unrelated", 3, ["no trtexec exports found"]),
])
def test_import_bad_input(case, expected, words, tmp_path, capsys):
    if not RESNET_FP32.is_dir():
        pytest.skip(f"real trtexec exports not found at {TRTEXEC_FIXTURES}")
    d = _import_case(case, tmp_path)
    code, out, err = run_cli(["import", str(d), "--no-store", "--json", str(tmp_path / "out.json")], capsys)
    assert code == expected, err
    assert "Traceback" not in err and "internal error" not in err
    if expected == 0:
        assert all(any(w in line for line in err.splitlines() if line.startswith("warning:")) for w in words), err
        data = json.loads((tmp_path / "out.json").read_text())
        (v,) = data["variants"]
        assert v["layer_count"] == 32
        assert "nan" not in out  # no 'nan%' where times are missing
    else:
        assert_one_sentence(err, code, expected, *words)


def test_import_truncated_profile_keeps_the_layer_info_and_says_no_times(tmp_path, capsys):
    if not RESNET_FP32.is_dir():
        pytest.skip(f"real trtexec exports not found at {TRTEXEC_FIXTURES}")
    d = _import_case("truncated_profile", tmp_path)
    code, out, err = run_cli(["import", str(d), "--no-store"], capsys)
    assert code == 0
    assert "layer sum n/a" in out and "(no layer times" in out


# ----------------------------------------------------------------------------------- sweep

def _custom_op_model(tmp_path: Path) -> Path:
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="relu0"),
                           helper.make_node("FancyGelu", ["h"], ["y"], name="fancy0", domain="com.example.custom")],
                          "custom", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.custom", 1)])
    m.ir_version = 8
    path = tmp_path / "custom.onnx"
    save(m, str(path))
    return path


def _sweep_case(case: str, tmp_path: Path, tiny_model: Path) -> list[str]:
    m = str(tiny_model)
    if case == "missing_model":
        return [str(tmp_path / "nothere.onnx")]
    if case == "not_onnx":
        p = tmp_path / "notes.onnx"
        p.write_text("these are notes, not a model\n" * 20)
        return [str(p)]
    if case == "truncated_onnx":
        p = tmp_path / "cut.onnx"
        data = tiny_model.read_bytes()
        p.write_bytes(data[: len(data) // 2])
        return [str(p)]
    if case == "dynamic_no_shape":
        det = rapidocr_model_path("det")
        if det is None:
            pytest.skip("rapidocr-onnxruntime (real pretrained ONNX models) is not installed")
        return [str(det)]
    if case == "shape_wrong_input":
        return [m, "--shape", "images:1x8"]
    if case == "shape_syntax":
        return [m, "--shape", "x:1xeight"]
    if case == "shape_rank":
        return [m, "--shape", "x:1x8x1"]
    if case == "fp8":
        return [m, "--precision", "fp8"]
    if case == "workspace":
        return [m, "--workspace", "abc"]
    if case == "streams0":
        return [m, "--streams", "0"]
    calib = tmp_path / "calib.npz"
    if case == "calib_shape":
        np.savez(calib, x=np.zeros((4, 1, 3), np.float32))
    elif case == "calib_dtype":
        np.savez(calib, x=np.zeros((4, 1, 8), np.float64))
    elif case == "calib_key":
        np.savez(calib, images=np.zeros((4, 1, 8), np.float32))
    elif case == "calib_missing":
        calib = tmp_path / "nothere.npz"
    elif case == "calib_corrupt":
        calib.write_bytes(np.random.default_rng(1).bytes(300))
    elif case == "calib_npy":
        calib = tmp_path / "calib.npy"
        np.save(calib, np.zeros((1, 8), np.float32))
    elif case == "out_unwritable":
        (tmp_path / "afile").write_text("x")
        return [m, "--precision", "fp32", "--out", str(tmp_path / "afile" / "sub")]
    else:
        raise AssertionError(case)
    return [m, "--precision", "int8", "--calib", str(calib)]


@pytest.mark.parametrize("case, expected, words", [
    ("missing_model", 3, ["nothere.onnx", "does not exist"]),
    ("not_onnx", 3, ["notes.onnx", "not a valid ONNX model"]),
    ("truncated_onnx", 3, ["cut.onnx", "not a valid ONNX model"]),
    ("dynamic_no_shape", 2, ["input 'x'", "dynamic dimensions", "--shape"]),
    ("shape_wrong_input", 2, ["'images'", "its inputs: 'x'"]),
    ("shape_syntax", 2, ["x:1xeight", "NAME:DIMS"]),
    ("shape_rank", 2, ["rank 3", "input 'x'"]),
    ("fp8", 2, ["'fp8'", "fp32, fp16, int8"]),
    ("workspace", 2, ["--workspace", "'abc'"]),
    ("streams0", 2, ["--streams", "'0'"]),
    ("calib_shape", 3, ["input 'x'", "expected shape 1x8", "4x1x3"]),
    ("calib_dtype", 3, ["input 'x'", "float32", "float64"]),
    ("calib_key", 3, ["input 'x'", "'images'"]),
    ("calib_missing", 3, ["nothere.npz", "does not exist"]),
    ("calib_corrupt", 3, ["calib.npz", "not an .npz archive"]),
    ("calib_npy", 3, ["calib.npy", "single .npy array", "numpy.savez"]),
    ("out_unwritable", 3, ["--out", "sub"]),
])
def test_sweep_bad_input(case, expected, words, tmp_path, tiny_model, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))
    args = _sweep_case(case, tmp_path, tiny_model)
    db = tmp_path / "s.db"
    code, out, err = run_cli(["sweep", *args, *FAST, "--db", str(db), "--cache-dir", str(tmp_path / "cache"),
                              *(["--out", str(tmp_path / "out")] if "--out" not in args else [])], capsys)
    assert_one_sentence(err, code, expected, *words)
    if db.exists():  # nothing was half-stored: bad input is caught before a run is created
        with sqlite3.connect(db) as c:
            assert c.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_sweep_unsupported_op_is_recorded_failed_naming_the_op(tmp_path, capsys):
    model = _custom_op_model(tmp_path)
    db = tmp_path / "s.db"
    code, out, err = run_cli(["sweep", str(model), "--precision", "fp32,fp16", *FAST, "--db", str(db),
                              "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")], capsys)
    assert_one_sentence(err, code, 3, "every variant failed", "com.example.custom:FancyGelu")
    # both variants were tried (the sweep went on after the first failure), each names the op in full
    assert "fp32-wsdefault-s1 failed:" in out and "fp16-wsdefault-s1 failed:" in out
    assert out.count("'com.example.custom:FancyGelu'") >= 2
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [v["status"] for v in summary["variants"]] == ["failed", "failed"]
    assert all("FancyGelu" in v["error"] for v in summary["variants"])
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM runs").fetchall() == [("failed",)]
        assert c.execute("SELECT count(*) FROM variants WHERE error LIKE '%FancyGelu%'").fetchone()[0] == 2


@pytest.mark.parametrize("args, expected, words", [
    (["--resume", "999"], 3, ["no run with id or label '999'"]),
    (["--resume", "nightly"], 3, ["'nightly'"]),
    (["--resume", "1", "--no-store"], 2, ["--resume", "--no-store"]),
])
def test_sweep_resume_misuse(args, expected, words, tmp_path, capsys):
    code, _, err = run_cli(["sweep", *args, *FAST, "--db", str(tmp_path / "s.db"), "--out", str(tmp_path / "o")],
                           capsys)
    assert_one_sentence(err, code, expected, *words)


# ----------------------------------------------------------------------------------- the store

@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["report", "1"], ["compare", "1", "2"]])
@pytest.mark.parametrize("db, words", [
    ("postgresql://nobody@127.0.0.1:1/x", ["cannot open the run store", "127.0.0.1"]),
    ("{tmp}/no/such/dir/x.db", ["cannot open the run store", "does not exist"]),
])
def test_store_commands_with_a_bad_db(command, db, words, tmp_path, capsys):
    code, out, err = run_cli([*command, "--db", db.format(tmp=tmp_path)], capsys)
    assert_one_sentence(err, code, 3, *words)
    assert out == "" and not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", [["show", "7"], ["report", "7"], ["compare", "7", "8"]])
def test_store_commands_with_an_unknown_run(command, tmp_path, capsys):
    Store.open(str(tmp_path / "s.db")).close()
    code, _, err = run_cli([*command, "--db", str(tmp_path / "s.db")], capsys)
    assert_one_sentence(err, code, 3, "no run with id or label '7'")


@pytest.mark.parametrize("command", [["show", "7"], ["report", "7"], ["compare", "7", "8"]])
def test_store_commands_on_a_store_that_is_not_there_create_none(command, tmp_path, capsys):
    """A mistyped --db made an empty store and then found no run in it."""
    code, _, err = run_cli([*command, "--db", str(tmp_path / "typo.db")], capsys)
    assert_one_sentence(err, code, 3, "no run store at", "typo.db")
    assert not (tmp_path / "typo.db").exists()


def test_report_of_a_missing_json_file_does_not_touch_the_store(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRTPROF_DB", raising=False)
    code, _, err = run_cli(["report", "summary.json"], capsys)
    assert_one_sentence(err, code, 3, "summary.json does not exist")
    assert not (tmp_path / "trtprof.db").exists()


def test_report_to_an_unwritable_path(tmp_path, capsys):
    src = tmp_path / "a.json"
    src.write_text(json.dumps({"kind": "analyze", "capture": {}, "ranges": [], "findings": []}))
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli(["report", str(src), "-o", str(tmp_path / "afile" / "r.html")], capsys)
    assert_one_sentence(err, code, 3, "r.html")


@pytest.mark.parametrize("option, words", [
    (["--alpha", "2"], ["--alpha", "between 0 and 1"]), (["--threshold-pct", "-50"], ["--threshold-pct", "from 0"]),
    (["--floor-us", "-1"], ["--floor-us", "from 0"]), (["--json", ""], ["--json needs a file name"]),
    (["--alpha", "nan"], ["--alpha", "'nan'"]), (["--alpha", "0"], ["--alpha", "between 0 and 1"]),
    (["--threshold-pct", "inf"], ["--threshold-pct", "'inf'"]), (["--floor-us", "nan"], ["--floor-us", "'nan'"]),
])
def test_compare_options_out_of_range_are_usage_errors(option, words, tmp_path, capsys):
    """--alpha 2, a negative threshold or floor were taken as given; --json '' wrote nothing, exit 0."""
    Store.open(str(tmp_path / "s.db")).close()
    code, _, err = run_cli(["compare", "1", "2", "--db", str(tmp_path / "s.db"), *option], capsys)
    assert_one_sentence(err, code, 2, *words)
