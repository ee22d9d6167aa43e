"""`trtprof runs`, `trtprof show`, `trtprof db upgrade` against SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from profiler.cli import main
from profiler.findings import Finding
from profiler.store import Store
from profiler.store.migrate import head_revision


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run the CLI in-process through its real entry point (exit codes and error mapping included)."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.fixture
def filled(db_url):
    store = Store.open(db_url)
    a = store.create_run(kind="sweep", source="models/resnet50.onnx", label="base", model="resnet50",
                         gpu="NVIDIA H200", tensorrt_version="10.9.0")
    store.add_variant(a, {"key": "fp16-ws1G-s1", "latency_ms": {"count": 200, "median": 1.234, "p99": 1.9},
                          "throughput_qps": 810.4}, samples=[{"idx": i, "latency_ms": 1.2} for i in range(3)])
    store.add_variant(a, {"key": "int8-ws1G-s1", "status": "failed", "error": "no calibration data"})
    store.add_findings(a, [Finding("jitter", "medium", "Latency & tail <unstable>", range="infer")])
    store.finish_run(a)
    b = store.create_run(kind="analyze", source="captures/service.sqlite", label="cap", gpu="NVIDIA L4")
    store.finish_run(b, status="failed")
    store.close()
    return db_url, a, b


def test_runs_table_and_json(filled, capsys):
    url, a, b = filled
    code, out, err = run_cli(["runs", "--db", url], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["id", "created", "(UTC)", "kind", "label", "status", "source", "gpu", "variants"]
    assert lines[1].split()[0] == str(b) and lines[2].split()[0] == str(a)  # newest first
    assert lines[2].split()[-1] == "2" and "resnet50.onnx" in lines[2] and "H200" in lines[2]
    code, out, _ = run_cli(["runs", "--db", url, "--json", "--kind", "sweep"], capsys)
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [a] and rows[0]["variant_count"] == 2 and rows[0]["status"] == "ok"
    code, out, _ = run_cli(["runs", "--db", url, "--json", "--gpu", "L4"], capsys)
    assert [r["id"] for r in json.loads(out)] == [b]
    code, out, _ = run_cli(["runs", "--db", url, "--json", "--model", "resnet"], capsys)
    assert [r["id"] for r in json.loads(out)] == [a]
    code, out, _ = run_cli(["runs", "--db", url, "--json", "--limit", "1"], capsys)
    assert [r["id"] for r in json.loads(out)] == [b]
    code, out, _ = run_cli(["runs", "--db", url, "--label", "nothing"], capsys)
    assert code == 0 and out.strip() == "no runs"


def test_show_by_id_and_label(filled, capsys):
    url, a, _ = filled
    code, out, _ = run_cli(["show", "base", "--db", url], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith(f"run {a}  sweep  ok  label base")
    row = next(line for line in out.splitlines() if "fp16-ws1G-s1" in line)
    assert row.split()[1:] == ["ok", "200", "1.234", "1.900", "810.4"]
    assert "int8-ws1G-s1: no calibration data" in out
    assert "medium jitter [infer]: Latency & tail <unstable>" in out
    code, out, _ = run_cli(["show", str(a), "--json", "--db", url], capsys)
    d = json.loads(out)
    assert d["id"] == a and [v["key"] for v in d["variants"]] == ["fp16-ws1G-s1", "int8-ws1G-s1"]
    assert d["findings"][0]["title"] == "Latency & tail <unstable>"


def test_unknown_run_exits_3_with_one_sentence(filled, capsys):
    url, _, _ = filled
    code, out, err = run_cli(["show", "no-such-label", "--db", url], capsys)
    assert code == 3 and out == ""
    assert err.strip() == "trtprof: error: no run with id or label 'no-such-label' in the store"
    assert len(err.strip().splitlines()) == 1


def test_db_option_before_and_after_subcommand_and_env(tmp_path, capsys, monkeypatch):
    group, sub, env = (str(tmp_path / n) for n in ("group.db", "sub.db", "env.db"))
    for path, label in ((group, "g"), (sub, "s"), (env, "e")):
        s = Store.open(path)
        s.create_run(kind="sweep", source="x", label=label)
        s.close()
    monkeypatch.setenv("TRTPROF_DB", env)
    labels = lambda out: [r["label"] for r in json.loads(out)]  # noqa: E731
    assert labels(run_cli(["runs", "--json"], capsys)[1]) == ["e"]
    assert labels(run_cli(["--db", group, "runs", "--json"], capsys)[1]) == ["g"]
    assert labels(run_cli(["--db", group, "runs", "--json", "--db", sub], capsys)[1]) == ["s"]
    monkeypatch.delenv("TRTPROF_DB")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(["runs"], capsys)  # default ./trtprof.db, created on first use
    assert code == 0 and out.strip() == "no runs" and (tmp_path / "trtprof.db").exists()


def test_db_upgrade_prints_revision(db_url, capsys):
    code, out, _ = run_cli(["db", "upgrade", "--db", db_url], capsys)
    assert code == 0 and out.strip().endswith(f"upgraded from empty to revision {head_revision()}")
    code, out, _ = run_cli(["db", "upgrade", "--db", db_url], capsys)
    assert code == 0 and out.strip().endswith(f"already at revision {head_revision()}")
    assert "***" in out or db_url.startswith("sqlite")  # passwords are not printed
    code, out, _ = run_cli(["db", "current", "--db", db_url], capsys)
    assert out.split() == ["current:", head_revision(), "head:", head_revision()]


@pytest.mark.parametrize("url, fragment", [
    ("/no/such/dir/x.db", "unable to open database file"),
    ("nosuchdialect://x", "Can't load plugin"),
    ("postgresql://nobody@127.0.0.1:1/x", "Connection refused"),
])
def test_bad_db_url_exits_3(url, fragment, capsys):
    code, out, err = run_cli(["runs", "--db", url], capsys)
    assert code == 3 and out == ""
    assert err.startswith(f"trtprof: error: cannot open the run store '{url}'") and fragment in err
    assert len(err.strip().splitlines()) == 1


def test_not_a_database_exits_3(tmp_path, capsys):
    bad = tmp_path / "notes.db"
    bad.write_text("this is not SQLite\n" * 100)
    code, _, err = run_cli(["show", "1", "--db", str(bad)], capsys)
    assert code == 3 and "file is not a database" in err


def test_missing_psycopg_names_the_postgres_extra():
    code = ("import sys; sys.modules['psycopg'] = None; sys.modules['psycopg2'] = None\n"
            "from profiler.cli import main\nmain(['runs', '--db', 'postgresql://u@127.0.0.1/x'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("trtprof: error: 'psycopg' is needed for a PostgreSQL run store but is not "
                                "installed: pip install 'trtprof[postgres]'")


def test_runs_show_what_a_run_came_to_not_only_that_it_finished(filled, capsys):
    """A sweep stores 'ok' once it finishes: one whose variants failed is listed as partial (some) or
    failed (all), beside the stored status in --json."""
    url, a, b = filled
    store = Store.open(url)
    c = store.create_run(kind="sweep", source="models/x.onnx", label="allbad")
    store.add_variant(c, {"key": "fp16-s1", "status": "failed", "error": "GridSample"})
    store.add_variant(c, {"key": "int8-s1", "status": "failed", "error": "no calibration data"})
    store.finish_run(c)
    d = store.create_run(kind="sweep", source="models/y.onnx", label="good")
    store.add_variant(d, {"key": "fp32-s1", "latency_ms": {"count": 10, "median": 1.0}})
    store.add_variant(d, {"key": "int8-s1", "status": "skipped", "error": "no int8 on this backend"})
    store.finish_run(d)
    store.close()
    code, out, _ = run_cli(["runs", "--db", url], capsys)
    status = {line.split()[0]: line.split()[5] for line in out.splitlines()[1:]}
    assert status == {str(a): "partial", str(b): "failed", str(c): "failed", str(d): "ok"}
    code, out, _ = run_cli(["runs", "--db", url, "--json"], capsys)
    rows = {r["id"]: r for r in json.loads(out)}
    assert (rows[a]["status"], rows[a]["outcome"], rows[a]["failed_variant_count"]) == ("ok", "partial", 1)
    assert (rows[c]["status"], rows[c]["outcome"]) == ("ok", "failed")
    assert rows[d]["outcome"] == "ok"  # a skipped variant is no failure
