"""Ctrl-C in the middle of a real `trtprof sweep` process, then `--resume`: nothing finished is lost,
nothing is measured twice."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

CLI = [sys.executable, "-c", "from profiler.cli import main; main()"]
KEYS = ["fp32-wsdefault-s1", "fp32-wsdefault-s2", "fp16-wsdefault-s1", "fp16-wsdefault-s2"]


def _stored(db: Path) -> list[tuple[str, int]]:
    """(variant key, sample count) of every stored variant, in insertion order."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return c.execute("SELECT v.key, (SELECT count(*) FROM samples s WHERE s.variant_id = v.id) "
                             "FROM variants v ORDER BY v.id").fetchall()
    except sqlite3.OperationalError:  # the schema is being created
        return []


def _default_signals() -> None:
    """In the sweep's process before it starts: SIGINT and SIGTERM at their default disposition. A test run
    started in the background by a non-interactive shell (`.ci/run &`, `nohup`) has SIGINT ignored, which its
    children inherit; Python then keeps ignoring it, as does the sweep, and a Ctrl-C sent to the sweep did
    nothing: it ran to the end and exited 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_in_second_variant(proc: subprocess.Popen, sig: int, while_stopped=None) -> str:
    """Read the sweep's progress until the second variant starts (the first is stored by then), stop the
    process (SIGSTOP), run ``while_stopped``, send ``sig`` and let it go on: the signal lands in the second
    variant's timed phase however late this test gets the CPU on a loaded machine. Returns what was read."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("[2/4] "):
            break
    assert proc.poll() is None, "the sweep ended before its second variant: " + "".join(seen)
    proc.send_signal(signal.SIGSTOP)
    if while_stopped is not None:
        while_stopped()
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    return "".join(seen)


def _start_sweep(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen]:
    """(its store, its --out, the process) of a four-variant sweep started in ``tmp_path``."""
    db, out = tmp_path / "trtprof.db", tmp_path / "out"
    args = ["sweep", "--precision", "fp32,fp16", "--streams", "1,2", "--duration", "2", "--warmup", "0",
            "--no-layers", "--db", str(db), "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=_default_signals)
    return db, out, proc


def _check_partial_summary(out: Path, stored: list[tuple[str, int]]) -> None:
    """The interrupted sweep's summary.json: marked interrupted, holding exactly the stored variants."""
    partial = json.loads((out / "summary.json").read_text())
    assert partial["run"]["status"] == "interrupted"
    assert [v["key"] for v in partial["variants"]] == [k for k, _ in stored]


def _check_resume_completes(db: Path, out: Path, stored: list[tuple[str, int]], cwd: Path) -> None:
    """``--resume 1`` after an interruption that left ``stored``: exit 0, every variant once (nothing measured
    twice), the stored measurements untouched, the run and its summary complete."""
    done = subprocess.run(CLI + ["sweep", "--resume", "1", "--db", str(db), "--out", str(out)],
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{len(stored)} variant(s) already stored" in done.stderr
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM runs").fetchall() == [("ok",)]
    final = _stored(db)
    assert sorted(k for k, _ in final) == sorted(KEYS)  # every variant once: nothing measured twice
    assert final[: len(stored)] == stored  # the interrupted run's measurements are untouched
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["status"] == "ok" and [v["key"] for v in summary["variants"]] == KEYS
    assert all(v["status"] == "ok" for v in summary["variants"])


def test_ctrl_c_keeps_finished_variants_and_resume_completes_the_run(tmp_path):
    db, out, proc = _start_sweep(tmp_path)
    first: list[tuple[str, int]] = []
    seen = _signal_in_second_variant(proc, signal.SIGINT, lambda: first.extend(_stored(db)))
    time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # an impatient second Ctrl-C must not cut the saving short
    stdout, rest = proc.communicate(timeout=60)
    stderr = seen + rest
    assert first, "the first variant was not stored when the second one started"

    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "trtprof: interrupted"
    assert "trtprof sweep --resume 1" in stderr

    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    stored = _stored(db)
    assert 1 <= len(stored) < len(KEYS) and stored[: len(first)] == first
    assert [k for k, _ in stored] == KEYS[: len(stored)] and all(n >= 10 for _, n in stored)
    _check_partial_summary(out, stored)
    _check_resume_completes(db, out, stored, tmp_path)


def test_sigterm_is_handled_like_ctrl_c_so_resume_works_at_once(tmp_path):
    """What `timeout`, `docker stop`, Slurm and Kubernetes send: the run is marked interrupted, its lease
    released (no 120 s wait before --resume), the partial summary written, exit 143."""
    db, out, proc = _start_sweep(tmp_path)
    seen = _signal_in_second_variant(proc, signal.SIGTERM)
    stdout, rest = proc.communicate(timeout=60)
    stderr = seen + rest

    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "trtprof: terminated (SIGTERM)"
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status, lease_owner FROM runs").fetchall() == [("interrupted", None)]
    stored = _stored(db)
    _check_partial_summary(out, stored)
    _check_resume_completes(db, out, stored, tmp_path)
