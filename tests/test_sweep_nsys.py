"""`trtprof sweep --nsys` plumbing, run on a CPU machine with FakeNsys: a stand-in `nsys` script (a test
double, not Nsight Systems) that runs the profiled command and, for `nsys export`, copies a REAL capture
of trtprof's own harness made on an H200 (sample_traces/harness_cls.sqlite: the cls model, variant
fp32-wsdefault-s1, eager). What is checked: the child sweep stores into the same database, the capture
is analysed per variant series and attached to summary.json, the stored run and its findings, and the
report is rewritten. What is not: anything about real nsys (see sample_traces/README.md for that)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import SAMPLE_TRACES, rapidocr_model_path

FAKE_NSYS = r'''#!/usr/bin/env python3
"""FakeNsys: a test double standing in for the nsys CLI."""
import os, shutil, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 0000.0.0 (FakeNsys test double)")
    sys.exit(0)
if args[:1] == ["profile"]:
    i, out = 1, None
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-o", "-t", "--force-overwrite"):
            if args[i] == "-o":
                out = args[i + 1]
            i += 2
        else:
            i += 1
    rc = subprocess.call(args[i:], env=os.environ.copy())
    open(out + ".nsys-rep", "w").write("fake report")
    sys.exit(rc)
if args[:1] == ["export"]:
    flag = "-o" if "-o" in args else "--output"
    out = args[args.index(flag) + 1]
    shutil.copy(os.environ["FAKE_NSYS_CAPTURE"], out)
    sys.exit(0)
sys.exit(2)
'''


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    capture = SAMPLE_TRACES / "harness_cls.sqlite"
    if not capture.exists():
        pytest.skip("sample_traces/harness_cls.sqlite is missing")
    script = tmp_path / "nsys"
    script.write_text(FAKE_NSYS)
    script.chmod(0o755)
    return {**os.environ, "TRTPROF_NSYS": str(script), "FAKE_NSYS_CAPTURE": str(capture)}


def test_sweep_under_nsys_attaches_the_capture_per_variant(fake_nsys, tmp_path):
    model = rapidocr_model_path("cls")
    if model is None:
        pytest.skip("rapidocr-onnxruntime (real pretrained ONNX models) is not installed")
    db = tmp_path / "runs.db"
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", str(db), "sweep", str(model), "--precision",
                        "fp32", "--shape", "x:1x3x48x192", "--iterations", "5", "--duration", "0", "--warmup", "0",
                        "--no-layers", "--nsys", "--out", str(out)], capture_output=True, text=True, env=fake_nsys,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    (v,) = summary["variants"]
    n = v["nsys"]
    assert n["found"] and n["series"] == "trtprof:fp32-wsdefault-s1/iter"
    assert "launch_overhead" in n["rules"]  # the real eager H200 capture is launch-bound
    assert n["count"] == 40 and n["gpu_busy_fraction"] < 0.2
    assert summary["nsys"]["capture"].endswith("sweep.sqlite")
    # stored once, by the child, in the same database; the parent attached the capture
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from runs").fetchone()[0] == 1
    kinds = {k for (k,) in con.execute("select kind from artifacts")}
    assert {"capture", "summary", "report"} <= kinds
    rules = [row for row in con.execute("select rule, variant from findings where rule='launch_overhead'")]
    assert ("launch_overhead", "fp32-wsdefault-s1") in rules
    stored = json.loads(con.execute("select summary from runs").fetchone()[0])
    assert stored["variants"][0]["nsys"]["series"] == n["series"]
    html = (out / "report.html").read_text()
    assert "fp32-wsdefault-s1" in html
    assert "harness compute ms" in r.stdout and "stored run 1 (capture attached)" in r.stdout


def test_sweep_under_nsys_stores_into_the_default_database(fake_nsys, tmp_path):
    """No --db and no TRTPROF_DB: the run lands in ./trtprof.db like any sweep's."""
    env = {k: v for k, v in fake_nsys.items() if k != "TRTPROF_DB"}
    r = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--precision", "fp32", "--iterations", "3",
                        "--duration", "0", "--warmup", "0", "--no-layers", "--nsys", "--out", "out"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    con = sqlite3.connect(tmp_path / "trtprof.db")
    assert con.execute("select count(*) from runs").fetchone()[0] == 1
    assert ("capture",) in set(con.execute("select kind from artifacts"))
    assert "--no-store" not in r.stderr


def test_nsys_missing_is_one_sentence(tmp_path, monkeypatch):
    env = {**os.environ, "PATH": "/usr/bin:/bin", "TRTPROF_NSYS": str(tmp_path / "no-nsys")}
    r = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--nsys", "--no-store", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 3 and "nsys" in r.stderr and "Traceback" not in r.stderr
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1


def test_sweep_under_nsys_is_a_library_call(fake_nsys, tmp_path, monkeypatch):
    """What `sweep --nsys --no-store` does, called from Python as a notebook would: no click, no store."""
    from profiler.harness.nsys import sweep_under_nsys

    for k in ("TRTPROF_NSYS", "FAKE_NSYS_CAPTURE"):
        monkeypatch.setenv(k, fake_nsys[k])
    said: list[str] = []
    out = tmp_path / "out"
    out.mkdir()
    done = sweep_under_nsys(["--precision", "fp32", "--iterations", "3", "--duration", "0", "--warmup", "0",
                             "--no-layers", "--no-store", "--nsys", "--out", "elsewhere"], out, store_url=None,
                            say=said.append)
    assert done.run_id is None and done.report is None
    assert done.capture == out / "sweep.sqlite" and done.capture.is_file()
    assert json.loads((out / "summary.json").read_text()) == done.summary
    assert done.summary["kind"] == "sweep" and done.summary["nsys"]["capture"] == str(done.capture)
    assert all("nsys" in v for v in done.summary["variants"])
    assert said == [f"nsys: profiling the sweep (-t cuda,nvtx,osrt) into {out / 'sweep.nsys-rep'}",
                    f"nsys: analysing {done.capture}"]
    assert not (tmp_path / "elsewhere").exists()  # --out came from the call, not the arguments
