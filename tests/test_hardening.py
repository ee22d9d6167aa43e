"""Issue 13's hardening, unit by unit: the run lease, store limits on both backends, exit 4 for bugs,
terminal escaping, and the interval sweeps that replaced window x member expansions."""

from __future__ import annotations

import datetime as dt
import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.capture import intervals
from profiler.capture.series import expand
from profiler.cli import main
from profiler.cli.terminal import printable
from profiler.errors import EXIT_BUG, UsageError
from profiler.store import Store
from profiler.store import lease


# ------------------------------------------------------------------------------------------ lease

def test_a_run_has_one_owner_until_its_lease_expires(db_url):
    store = Store.open(db_url)
    run_id = store.create_run(kind="sweep", source="m.onnx")
    lease.claim(store, run_id, "hostA:1:a")
    with pytest.raises(UsageError, match=f"run {run_id} is still running .process 1 on hostA"):
        lease.claim(store, run_id, "hostB:2:b")
    assert lease.renew(store, run_id, "hostA:1:a") is True
    assert lease.renew(store, run_id, "hostB:2:b") is False
    # the owner dies: no heartbeat, the lease lapses, another process may take the run over
    store.update_run(run_id, lease_expires_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1))
    lease.claim(store, run_id, "hostB:2:b")
    assert lease.renew(store, run_id, "hostA:1:a") is False  # A lost it
    lease.release(store, run_id, "hostB:2:b")
    run = store.run_dict(run_id)
    assert run["lease_owner"] is None and run["status"] == "running"
    lease.claim(store, run_id, "hostC:3:c")  # released: free to claim at once
    store.close()


def test_heartbeat_moves_the_expiry_forward(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    run_id = store.create_run(kind="sweep", source="m.onnx")
    lease.claim(store, run_id, "h:1:x", ttl_s=5)
    first = store.run_dict(run_id)["lease_expires_at"]
    import time

    with lease.Heartbeat(store, run_id, "h:1:x", every_s=0.05, ttl_s=60) as hb:
        time.sleep(0.4)
    assert not hb.lost
    assert store.run_dict(run_id)["lease_expires_at"] > first
    store.close()


def test_resume_of_a_run_still_running_is_refused_and_nothing_is_stored_twice(tmp_path):
    pytest.importorskip("onnxruntime")
    from profiler.backends.onnxruntime import OnnxRuntimeBackend
    from profiler.sweep import SweepConfig, open_resume, run_sweep
    from tests.onnx_models import FAST_SWEEP as FAST, conv_model

    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    refused: list[str] = []

    class ResumingBackend(OnnxRuntimeBackend):
        """While the first sweep builds its second variant, a second process tries --resume."""

        def build(self, model_path, spec, cache_dir=None):
            if spec.key == "fp16-wsdefault-s1" and not refused:
                run_id = store.list_runs(kind="sweep")[0]["id"]
                with pytest.raises(UsageError) as exc:
                    open_resume(store, run_id, backend=OnnxRuntimeBackend()).run()
                refused.append(str(exc.value))
            return super().build(model_path, spec, cache_dir)

    model = conv_model(tmp_path / "conv.onnx")
    cfg = SweepConfig(model=model, precisions=["fp32", "fp16"], backend="onnxruntime", layers=False, **FAST)
    run_sweep(cfg, store=store, backend=ResumingBackend())
    assert refused and "still running" in refused[0]
    run = store.run_dict(store.list_runs(kind="sweep")[0]["id"])
    assert [v["key"] for v in run["variants"]] == ["fp32-wsdefault-s1", "fp16-wsdefault-s1"]
    assert run["status"] == "ok" and run["lease_owner"] is None
    store.close()


def test_the_model_path_is_stored_absolute(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from profiler.sweep import SweepConfig, run_sweep
    from tests.onnx_models import FAST_SWEEP as FAST, conv_model

    conv_model(tmp_path / "conv.onnx")
    monkeypatch.chdir(tmp_path)
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    run_sweep(SweepConfig(model="conv.onnx", precisions=["fp32"], backend="onnxruntime", layers=False, **FAST),
              store=store)
    run = store.run_dict(store.list_runs(kind="sweep")[0]["id"])
    assert run["config"]["model"] == str(tmp_path / "conv.onnx")
    store.close()


# ------------------------------------------------------------------------------------ store limits

def test_text_beyond_the_schema_limits_is_stored_alike_on_both_backends(db_url):
    store = Store.open(db_url)
    label, gpu = "L" * 300, "G\x00PU" * 80
    run_id = store.create_run(kind="analyze", source="cap\x00.sqlite", label=label, gpu=gpu)
    store.add_variant(run_id, {"kind": "range", "key": "n" * 500 + "\x00", "domain": "d" * 250})
    run = store.run_dict(run_id)
    assert len(run["label"]) == 200 and run["label"].endswith("... [300 chars]")
    assert run["label"].startswith("L" * 180)
    assert len(run["gpu"]) == 200 and "\x00" not in run["gpu"] and run["gpu"].startswith("G\\x00PU")
    assert run["source"] == "cap\\x00.sqlite"
    v = run["variants"][0]
    assert len(v["key"]) == 400 and v["key"].endswith("... [504 chars]")  # NUL shown as \\x00 first
    assert len(v["domain"]) == 200
    store.close()


# ------------------------------------------------------------------------------ exit codes, terminal

def test_an_unexpected_exception_is_a_bug_with_its_own_exit_code(monkeypatch, capsys, tmp_path):
    import profiler.cli.runs as runs_cmd

    def boom(*a, **k):
        raise RuntimeError("unexpected\nsecond line")

    monkeypatch.setattr(runs_cmd, "open_store", boom)
    with pytest.raises(SystemExit) as exc:
        main(["--db", str(tmp_path / "s.db"), "runs"])
    err = capsys.readouterr().err
    assert exc.value.code == EXIT_BUG == 4
    assert err.count("\n") == 1 and "internal error" in err and "RuntimeError: unexpected" in err
    assert "--debug" in err and "report" in err and "second line" not in err


@pytest.mark.parametrize("raw, shown", [
    ("step\x1b]0;pwned\x07", "step\\x1b]0;pwned\\x07"),
    ("clear\x1b[2J\x1b[H", "clear\\x1b[2J\\x1b[H"),
    ("c1 \x9b31m", "c1 \\x9b31m"),
    ("bidi \u202eevil", "bidi \\u202eevil"),
    ("tab\tnew\nline", "tab\tnew\nline"),
    ("ünïcode ok", "ünïcode ok"),
])
def test_printable_escapes_control_characters(raw, shown):
    assert printable(raw) == shown


@given(st.text())
def test_printable_leaves_no_terminal_control(text):
    out = printable(text)
    assert not any(ord(c) < 32 and c not in "\t\n\r" or 0x7f <= ord(c) <= 0x9f for c in out)
    if not any(ord(c) < 32 and c not in "\t\n\r" or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e
               or 0x2066 <= ord(c) <= 0x2069 for c in text):
        assert out == text


# ----------------------------------------------------------------------------------- interval sweeps

windows = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=30)


@given(windows, st.integers(0, 40))
def test_cover_counts_equal_the_multiplicities_of_the_expanded_pairs(wins, n):
    lo = np.array([a for a, _ in wins], dtype=np.int64)
    hi = np.array([b for _, b in wins], dtype=np.int64)
    lo, hi = np.minimum(lo, n), np.minimum(hi, n)
    _, pos = expand(lo, hi)
    assert intervals.cover_counts(lo, hi, n).tolist() == np.bincount(pos, minlength=n)[:n].tolist()


@given(st.lists(st.tuples(st.integers(-1000, 1000), st.integers(0, 5)), min_size=0, max_size=40))
def test_weighted_median_equals_the_median_of_the_repeated_values(pairs):
    values = np.array([v for v, _ in pairs], dtype=np.int64)
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    expanded = np.repeat(values, weights)
    got = intervals.weighted_median(values, weights)
    if len(expanded) == 0:
        assert np.isnan(got)
    else:
        assert got == float(np.median(expanded))


@settings(deadline=None, max_examples=1)
@given(st.just(20_000))
def test_twenty_thousand_nested_windows_in_bounded_memory(n_windows):
    """20,000 windows each holding the same 10,000 rows: 2e8 (window, row) pairs, answered without them."""
    n_rows = 10_000
    lo = np.zeros(n_windows, np.int64) + np.arange(n_windows) % 3
    hi = np.full(n_windows, n_rows, np.int64) - np.arange(n_windows) % 5
    values = np.random.default_rng(0).integers(1_000, 50_000, n_rows)
    tracemalloc.start()
    try:
        counts = intervals.cover_counts(lo, hi, n_rows)
        med = intervals.weighted_median(values, counts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counts[0] == np.sum(lo == 0) and counts[n_rows // 2] == n_windows
    assert peak < 5 * 2**20, peak  # the pairs alone would be 2e8 x 16 bytes = 3.2 GB
    # the same median as the (here affordable, smaller) explicit expansion of every 100th window
    sub = slice(None, None, 100)
    _, pos = expand(lo[sub], hi[sub])
    assert intervals.weighted_median(values, intervals.cover_counts(lo[sub], hi[sub], n_rows)) == \
        float(np.median(values[pos]))
    assert np.isfinite(med)


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(-5, 60)), max_size=40),
       st.lists(st.tuples(st.integers(0, 45), st.integers(0, 45)), max_size=25))
def test_window_union_lengths_equal_the_union_of_each_window(ivs, wins):
    s = np.array([a for a, _ in ivs], dtype=np.int64)
    e = s + np.array([d for _, d in ivs], dtype=np.int64)
    n = len(s)
    lo = np.array([min(a, n) for a, _ in wins], dtype=np.int64)
    hi = np.array([min(a + b, n) for a, b in wins], dtype=np.int64)
    got = intervals.window_union_lengths(s, e, lo, hi)
    assert got.tolist() == [intervals.union_length(s[a:b], e[a:b]) for a, b in zip(lo, hi)]


def test_a_full_database_is_one_sentence_not_a_bug(tmp_path, capsys, monkeypatch):
    """SQLite's "database or disk is full" (here raised where the run is stored, as the driver raises it)
    is the machine's state, not a bug: exit 3 and one sentence, no SQLAlchemy link."""
    import sqlite3

    from sqlalchemy import exc as sa_exc

    from profiler.store.api import Store as StoreClass
    from tests.fuzz.hostile import BASE

    def full(self, **kwargs):
        raise sa_exc.OperationalError("INSERT INTO runs ...", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(StoreClass, "create_run", full)
    with pytest.raises(SystemExit) as exc:
        main(["--db", str(tmp_path / "s.db"), "analyze", str(BASE)])
    err = capsys.readouterr().err
    assert exc.value.code == 3, err
    assert "disk is full" in err and "internal error" not in err and "sqlalche.me" not in err
    assert err.count("trtprof: error") == 1


def test_no_space_left_is_one_sentence(tmp_path, capsys, monkeypatch):
    import errno

    import profiler.cli.outputs as outputs

    def enospc(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))

    monkeypatch.setattr(outputs.os, "fsync", enospc)
    from tests.fuzz.hostile import BASE

    (tmp_path / "out.json").write_text('{"previous": true}')
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(BASE), "--no-store", "--json", str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 3 and "No space left" in err and err.count("trtprof: error") == 1
    # the earlier file is intact, and no temporary file is left behind
    assert (tmp_path / "out.json").read_text() == '{"previous": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_the_guard_keeps_progress_redraws_but_escapes_a_carriage_return_inside_a_line():
    import io

    from profiler.cli.terminal import _Guard

    buf = io.StringIO()
    guard = _Guard(buf)
    for text in ("\rprogress 50%", "name\rX\n", "crlf\r\n", "\x1b[2Jx\n"):
        guard.write(text)
    assert buf.getvalue() == "\rprogress 50%name\\rX\ncrlf\r\n\\x1b[2Jx\n"


def test_a_sweep_that_fails_unexpectedly_is_stored_failed_not_running(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from profiler.sweep import Sweep, SweepConfig, run_sweep
    from tests.onnx_models import FAST_SWEEP as FAST, conv_model

    real = Sweep._store_variant

    def store_then_break(self, rec, samples, layers):
        if rec["precision"] == "fp16":  # storing the second variant fails (an OverflowError, as in the issue)
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return real(self, rec, samples, layers)

    monkeypatch.setattr(Sweep, "_store_variant", store_then_break)
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    cfg = SweepConfig(model=conv_model(tmp_path / "conv.onnx"), precisions=["fp32", "fp16"],
                      backend="onnxruntime", layers=False, **FAST)
    with pytest.raises(OverflowError):
        run_sweep(cfg, store=store)
    run = store.run_dict(store.list_runs(kind="sweep")[0]["id"])
    assert run["status"] == "failed" and run["lease_owner"] is None
    assert [v["key"] for v in run["variants"]] == ["fp32-wsdefault-s1"]  # what was measured stays
    store.close()


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["show", "1", "--json"], ["runs", "--json"]])
def test_runs_and_show_never_print_a_raw_escape(tmp_path, capsys, command):
    db = str(tmp_path / "s.db")
    store = Store.open(db)
    store.create_run(kind="analyze", source="cap\x1b]0;pwned\x07.sqlite", label="nightly\x1b[2J",
                     gpu="H200\x9b31m", model="m\x1b[H")
    store.close()
    with pytest.raises(SystemExit) as exc:
        main(["--db", db, *command])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in out), repr(out)
    assert "nightly" in out


# ------------------------------------------------------------------- outputs (issue 33)

def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    import errno
    import os

    from profiler.errors import InputError
    from profiler.files import atomic_write_bytes

    out = tmp_path / "summary.json"
    out.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(InputError, match="cannot write --json .*summary.json: No space left on device"):
        atomic_write_bytes(out, b"new document", "--json")
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_fifo_is_written_in_place_and_stays_a_fifo(tmp_path):
    import os
    import stat
    import threading

    from profiler.files import atomic_write_bytes

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_write_bytes(fifo, b"x" * 200_000, "--json")  # more than a pipe's buffer: written in full
    reader.join(10)
    assert got == [b"x" * 200_000]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_stays_a_link_and_its_target_gets_the_document(tmp_path):
    from profiler.files import atomic_write_bytes

    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    atomic_write_bytes(link, b"new", "--json")
    assert link.is_symlink() and target.read_text() == "new"
    dangling = tmp_path / "d.json"
    dangling.symlink_to(tmp_path / "later.json")
    atomic_write_bytes(dangling, b"made", "--json")
    assert dangling.is_symlink() and (tmp_path / "later.json").read_text() == "made"


def test_dash_writes_to_standard_output(capfdbinary):
    from pathlib import Path

    from profiler.files import atomic_write_bytes

    atomic_write_bytes(Path("-"), b"{}\n", "--report")
    assert capfdbinary.readouterr().out == b"{}\n"
    assert not Path("-").exists()


def test_outputs_checked_against_inputs_the_store_and_each_other(tmp_path):
    import os

    from profiler.cli.outputs import check_outputs

    cap, db = tmp_path / "cap.sqlite", tmp_path / "s.db"
    cap.write_bytes(b"capture")
    db.write_bytes(b"")
    os.link(cap, tmp_path / "other-name")
    cases = [
        ([("--json", str(tmp_path / "other-name"))], "is the capture"),
        ([("--report", str(tmp_path / "x" / ".." / "s.db"))], "is the run store"),
        ([("--json", str(tmp_path / "o")), ("--trace", str(tmp_path / "o"))], "--json and --trace both name"),
    ]
    (tmp_path / "x").mkdir()
    for outputs, words in cases:
        with pytest.raises(UsageError, match=words):
            check_outputs(outputs, [("the capture", str(cap))], store=str(db))
    # devices written in place may be named twice; '-' and unset outputs are not files
    check_outputs([("--json", "/dev/null"), ("--report", "/dev/null"), ("--trace", "-"), ("-o", None)],
                  [("the capture", str(cap))], store=str(db))


def test_resume_refuses_a_model_that_changed_naming_both_hashes(tmp_path):
    pytest.importorskip("onnxruntime")
    from profiler.hashing import file_sha256
    from profiler.sweep import SweepConfig, open_resume, run_sweep
    from tests.onnx_models import FAST_SWEEP as FAST, conv_model

    model = conv_model(tmp_path / "conv.onnx")
    before = file_sha256(model)
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    run_sweep(SweepConfig(model=model, precisions=["fp32"], backend="onnxruntime", layers=False, **FAST),
              store=store)
    run_id = store.list_runs(kind="sweep")[0]["id"]
    store.update_run(run_id, status="interrupted")
    conv_model(model, opset=18)  # another model with the same input and output names
    after = file_sha256(model)
    assert after != before
    with pytest.raises(UsageError) as exc:
        open_resume(store, run_id).run()
    assert before[:16] in str(exc.value) and after[:16] in str(exc.value)
    assert [v["key"] for v in store.run_dict(run_id)["variants"]] == ["fp32-wsdefault-s1"]
    store.close()


# --------------------------------------------------------------- trtexec files of the wrong shape

TRTEXEC_LOG = ("[06/01/2022-10:00:05] [I] === Performance summary ===\n"
               "[06/01/2022-10:00:05] [I] GPU Compute Time: min = {lo} ms, max = {hi} ms, mean = 1.9 ms, "
               "median = 1.9 ms, percentile(99%) = 2.4 ms\n")


@pytest.mark.parametrize("lo, hi, words", [
    ("2.5", "1.5", "min = 2.5 ms is above max = 1.5 ms"), ("-5.0", "2.5", "is -5.0, not a number from 0"),
    ("-", "2.5", "is '-', not a number"), ("e", "2.5", "is 'e', not a number"), (".", "2.5", "is '.', not a number"),
    ("1.95", "2.5", "mean = 1.9 ms is outside min..max (1.95..2.5 ms)"),
])
def test_a_trtexec_log_with_impossible_statistics_is_refused(lo, hi, words, tmp_path):
    from profiler.errors import InputError
    from profiler.layers.trtexec.timing import parse_log

    log = tmp_path / "engine.log"
    log.write_text(TRTEXEC_LOG.format(lo=lo, hi=hi))
    with pytest.raises(InputError, match=re.escape(words)):
        parse_log(log)
    log.write_text(TRTEXEC_LOG.format(lo="1.5", hi="2.5"))
    assert parse_log(log)["gpu_compute_ms"] == {"min": 1.5, "max": 2.5, "mean": 1.9, "median": 1.9, "p99": 2.4}


@pytest.mark.parametrize("field, value, words", [
    ("performance_summary", [1, 2], "performance_summary is list, not an object"),
    ("inference_options", ["a"], "inference_options is list, not an object"),
    ("performance_summary", {"Throughput": "fast"}, 'Throughput is "fast", not a number'),
    ("performance_summary", {"Latency": [3, 1, 2, 2, 2]}, "min = 3 ms is above max = 1 ms"),
])
def test_trtexec_run_metadata_of_the_wrong_shape_is_one_sentence(field, value, words, tmp_path):
    import json

    from profiler.errors import InputError
    from profiler.layers.trtexec.timing import parse_run_metadata

    p = tmp_path / "e.profile.metadata.json"
    p.write_text(json.dumps({field: value}))
    with pytest.raises(InputError, match=words):
        parse_run_metadata(p)
    p.write_text('{"performance_summary": {"Throughput": ' + "9" * 5000 + "}}")
    from profiler.layers.trtexec.common import read_json

    with pytest.raises(InputError, match="holds a number no trtexec export has"):
        read_json(p)
