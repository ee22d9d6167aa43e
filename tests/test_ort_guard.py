"""ONNX Runtime runs under a watchdog (profiler.backends.ort_guard): the per-inference time limit and Ctrl-C
stop a model that never ends, the runtime's errors are one sentence about the model, and its own log never
reaches the terminal raw."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.backends import ort_guard
from profiler.backends.ort_guard import ModelRunError, Watchdog, run_error, time_limit_s
from profiler.errors import UsageError
from tests.fuzz.onnx_family import _fails_at_run, _never_ends

ROOT = Path(__file__).resolve().parents[1]
GENEROUS_S = 120  # far above what any of these takes on a loaded machine; only a hang reaches it


class Options:
    terminate = False


def test_watchdog_stops_a_run_at_its_deadline_and_not_before():
    dog = Watchdog()
    dog._thread = object()  # type: ignore[assignment]  # no thread: the test drives check() with its own clock
    opts = Options()
    run = dog.watch(opts, 2.0)
    dog.check(run.deadline_ns - 1, signalled=False)
    assert opts.terminate is False and run.reason is None
    dog.check(run.deadline_ns, signalled=False)
    assert opts.terminate is True and dog.done(run) == "time limit"


def test_watchdog_stops_every_run_on_a_stop_signal():
    dog = Watchdog()
    dog._thread = object()  # type: ignore[assignment]
    a, b = Options(), Options()
    ra, rb = dog.watch(a, 100.0), dog.watch(b, 100.0)
    dog.check(ra.deadline_ns - 10**9, signalled=True)
    assert a.terminate and b.terminate and dog.done(ra) == dog.done(rb) == "signal"
    late = Options()
    rl = dog.watch(late, 100.0)  # watched after the signal: untouched
    dog.check(rl.deadline_ns - 10**9, signalled=False)
    assert late.terminate is False and dog.done(rl) is None


def test_time_limit_comes_from_the_environment_and_must_be_a_positive_number(monkeypatch):
    monkeypatch.delenv("TRTPROF_INFERENCE_TIME_LIMIT_S", raising=False)
    assert time_limit_s() == ort_guard.INFERENCE_TIME_LIMIT_S
    monkeypatch.setenv("TRTPROF_INFERENCE_TIME_LIMIT_S", "2.5")
    assert time_limit_s() == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv("TRTPROF_INFERENCE_TIME_LIMIT_S", bad)
        with pytest.raises(UsageError):
            time_limit_s()


def test_runtime_errors_become_one_sentence_naming_the_node():
    raw = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running ConstantOfShape node. "
           "Name:'grow' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:360 void* "
           "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*) Failed to allocate "
           "memory for requested buffer of size 40000000000\n")
    msg = str(run_error(RuntimeError(raw), "m.onnx"))
    assert msg == ("onnxruntime could not run m.onnx at its ConstantOfShape node 'grow': it asks for 37.3 GiB "
                   "(40000000000 bytes) at once, more than could be allocated")
    assert "stopped m.onnx after 0.5 s" in str(run_error(RuntimeError("x"), "m.onnx", 0.5))


def _ort_context(model: Path):
    from profiler.backends.base import VariantSpec
    from profiler.backends.onnxruntime import OnnxRuntimeBackend

    engine = OnnxRuntimeBackend("cpu").build(str(model), VariantSpec())
    ctx = engine.create_context(0)
    import numpy as np

    ctx.set_inputs({"x": np.ones((1, 8), dtype=np.float32)})
    return ctx


def test_a_loop_that_never_ends_is_stopped_by_the_time_limit(tmp_path, monkeypatch):
    model = Path(_never_ends("Relu", True)(tmp_path)[1])
    monkeypatch.setenv("TRTPROF_INFERENCE_TIME_LIMIT_S", "0.2")
    ctx = _ort_context(model)
    started = time.monotonic()
    with pytest.raises(ModelRunError, match="longer than the 0.2 s limit"):
        ctx.query()
    assert time.monotonic() - started < GENEROUS_S
    assert ctx._ro.terminate is False  # the context's RunOptions are usable again


def test_a_node_that_fails_at_run_time_is_a_sentence_with_its_name(tmp_path):
    model = Path(_fails_at_run("Reshape", "\x1b]0;t\x07")(tmp_path)[1])
    with pytest.raises(ModelRunError) as exc:
        _ort_context(model).query()
    assert str(exc.value) == ("onnxruntime could not run model.onnx at its Reshape node '\\x1b]0;t\\x07reshape': The "
                              "input tensor cannot be reshaped to the requested shape. Input shape:{1,8}, requested "
                              "shape:{3,5}")


def _sweep(args: list[str], **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT,
                                                                                            signal.SIGTERM)], **kw)


def test_the_runtimes_own_log_never_prints_a_node_name_raw(tmp_path):
    args = _fails_at_run("Reshape", "\x1b]0;pwned\x07")(tmp_path)
    p = _sweep([*args, "--out", str(tmp_path / "o")])
    out, err = p.communicate(timeout=GENEROUS_S)
    assert p.returncode == 3, err
    assert "\x1b" not in err and "\x07" not in err and "\x1b" not in out
    assert err.count("trtprof: error:") == 1 and "Reshape node '\\x1b]0;pwned\\x07reshape'" in err


def test_ctrl_c_stops_a_loop_that_never_ends_and_the_run_is_kept(tmp_path):
    args = _never_ends("Identity", False)(tmp_path)
    db = tmp_path / "s.db"
    args = [a for a in args if a != "--no-store"]
    p = _sweep(["--db", str(db), *args, "--precision", "fp32", "--out", str(tmp_path / "o")])
    seen = []
    for line in p.stderr:  # the never-ending query starts with the timed phase
        seen.append(line)
        if ": timing (" in line:
            break
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=GENEROUS_S)
    assert p.returncode == 130, "".join(seen) + err
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]


def test_a_long_chain_says_what_it_reads(tmp_path, capsys):
    from onnx import TensorProto, helper, save

    from profiler.cli import main

    n = 3000
    nodes = [helper.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}" if i < n - 1 else "y"], name=f"n{i}")
             for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, str(tmp_path / "chain.onnx"))
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(tmp_path / "chain.onnx"), "--no-store", "--precision", "fp32", "--duration", "0",
              "--iterations", "2", "--warmup", "0", "--no-layers", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exc.value.code in (0, None), err
    assert f"  {n} node(s), opset 17" in err


def test_a_run_that_ended_before_the_watchdog_looked_is_not_terminated_after():
    dog = Watchdog()
    dog._thread = object()  # type: ignore[assignment]
    opts = Options()
    run = dog.watch(opts, 1.0)
    assert dog.done(run) is None
    dog.check(run.deadline_ns + 1, signalled=True)  # too late: the run is gone
    assert opts.terminate is False
    again = dog.watch(opts, 1.0)
    dog.check(again.deadline_ns, signalled=False)
    assert opts.terminate is True
    assert dog.done(again) == "time limit" and opts.terminate is False  # reset for the context's next run


def test_ctrl_c_while_a_session_is_created_is_not_held_until_it_exists():
    import _thread
    import threading

    from profiler.backends.onnxruntime import off_main_thread

    release = threading.Event()

    def create() -> int:  # a creation that lasts until the test lets it go; Ctrl-C arrives meanwhile
        _thread.interrupt_main()
        release.wait(GENEROUS_S)
        return 1

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        off_main_thread(create)
    assert time.monotonic() - started < GENEROUS_S / 2  # not held for the creation's GENEROUS_S
    release.set()
    assert off_main_thread(lambda: threading.current_thread() is threading.main_thread()) is False
    with pytest.raises(ValueError, match="bad model"):
        off_main_thread(lambda: (_ for _ in ()).throw(ValueError("bad model")))


def test_inputs_too_large_for_the_memory_left_are_one_sentence(tmp_path, monkeypatch):
    from profiler.errors import InputError
    from profiler.models import inputs, inspect_model

    model = Path(_fails_at_run("Reshape", "")(tmp_path)[1])
    info = inspect_model(model)

    def no_memory(rng, shape, dtype):
        raise MemoryError

    monkeypatch.setattr(inputs, "random_tensor", no_memory)
    with pytest.raises(InputError, match=r"4 random sample\(s\) of the inputs of model.onnx \(1x8 \.\.\.\) need 1.19e-07 GiB"):
        inputs.random_samples(info, {"x": (1, 8)}, count=4)
