"""`trtprof history`: change points judged by compare's noise model, environment changes, the site, --json,
--fail-on-regression, bad inputs and the live server, on synthetic stores with known steps and on real CPU
sweeps."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request

import numpy as np
import pytest

from profiler.cli import main as trtprof_main
from profiler.history.changes import MIN_SEGMENT_RUNS, change_points
from profiler.store import Store
from tests.history_builders import fill, noisy


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        trtprof_main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def step_levels(n: int, at: int, ratio: float) -> np.ndarray:
    """n runs at level 1.0, ``ratio`` from index ``at`` on."""
    return np.where(np.arange(n) >= at, ratio, 1.0)


def test_a_10_percent_step_in_3_percent_noise_is_found_where_it_happened():
    """Run 40 of 100 (index 39) is the first slow one. With 3% noise a run next to the step can look like
    either level, so over 30 noise draws the step must be found within one run every time it is found, at
    run 40 itself in most, and found at all in nearly all."""
    exact = near = 0
    for seed in range(30):
        found = change_points(noisy(step_levels(100, 39, 1.10), 0.03, seed))
        idx = [c["index"] for c in found if c["direction"] == "regression" and abs(c["index"] - 39) <= 2]
        exact += 39 in idx
        near += bool(idx)
        assert all(c["ratio"] == pytest.approx(1.10, abs=0.05) for c in found if c["index"] in idx)
    assert near >= 28 and exact >= 22, (near, exact)


def test_a_step_within_the_run_to_run_noise_is_not_marked():
    """2% up in 3% noise: below compare's 5% relevance threshold and inside the spread; and no step at all. Either
    is marked in at most 2 of 100 series of 100 runs (the newest-run rule, which one noisy night can pass)."""
    marked = sum(bool(change_points(noisy(step_levels(100, 39, 1.02), 0.03, seed))) for seed in range(100))
    assert marked <= 2, marked
    marked = sum(bool(change_points(noisy(np.full(100, 1.0), 0.03, seed + 500))) for seed in range(100))
    assert marked <= 2, marked


def test_two_steps_are_both_found_and_a_short_one_before_the_window_is_not():
    found = change_points(noisy(np.r_[np.full(30, 1.0), np.full(30, 1.25), np.full(30, 1.0)], 0.01, 1))
    assert [(c["index"], c["direction"]) for c in found] == [(30, "regression"), (60, "improvement")]
    assert change_points(noisy(np.r_[np.full(3, 2.0), np.full(40, 1.0)], 0.01, 1)) == []


def test_the_newest_runs_are_judged_by_compares_history_rule():
    """Fewer than MIN_SEGMENT_RUNS after the step: the history rule (outside the earlier runs' range and beyond
    their spread) marks it at the first slow run; one noisy newest run inside the spread is not marked."""
    for tail in range(1, MIN_SEGMENT_RUNS):
        found = change_points(noisy(np.r_[np.full(30, 1.0), np.full(tail, 1.3)], 0.01, tail))
        assert [c["index"] for c in found] == [30], tail
        assert found[0]["confidence"] > 0.8
    assert change_points(np.r_[noisy(np.full(30, 1.0), 0.03, 2), [1.04]]) == []


@pytest.fixture
def step_store(tmp_path):
    """100 nightly runs of one variant, 10% slower from run index 39 on (3% noise), the driver changed at
    index 60; and a second, flat variant of another model."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = Store.open(url)
    ids = fill(store, noisy(step_levels(100, 39, 1.10), 0.03, 7), driver_from={60: "580.2"})
    flat = fill(store, noisy(np.full(20, 2.0), 0.02, 3), key="fp32-ws1G-s1", model="/m/bert.onnx", start=200)
    store.close()
    return url, ids, flat


def test_json_names_the_step_the_runs_either_side_and_the_driver_change(step_store, tmp_path, capsys):
    url, ids, flat = step_store
    found = change_points(noisy(step_levels(100, 39, 1.10), 0.03, 7))
    assert [c["index"] for c in found] == [39]  # this draw: the step where it was made
    code, out, err = run_cli(["history", "--db", url, "--json", str(tmp_path / "h.json")], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "h.json").read_text())
    counts = sorted(s["run_count"] for s in doc["series"])
    assert counts == [20, 100]
    (cp,) = doc["change_points"]
    assert (cp["before_run"], cp["after_run"], cp["direction"]) == (ids[38], ids[39], "regression")
    assert cp["ratio"] == pytest.approx(found[0]["ratio"]) and 0.99 < cp["confidence"] <= 1
    series = next(s for s in doc["series"] if s["run_count"] == 100)
    assert cp["series"] == series["id"]
    assert series["env_changes"] == [{"run_id": ids[60], "fields": ["driver_version"]}]
    assert series["key"]["model"] == "/m/resnet.onnx" and series["key"]["gpu"] == "NVIDIA H200"
    code, _, _ = run_cli(["history", "--db", url, "--json", str(tmp_path / "h.json"), "--fail-on-regression"], capsys)
    assert code == 0  # the step is old news: the newest run is not a change point


def test_the_site_has_one_small_page_per_series_and_the_compare_of_the_pair(step_store, tmp_path, capsys):
    url, ids, flat = step_store
    out = tmp_path / "site"
    code, stdout, err = run_cli(["history", "--db", url, "--out", str(out)], capsys)
    assert code == 0, err
    pages = sorted((out / "series").glob("*.html"))
    assert len(pages) == 2
    plotly = (out / "assets" / "plotly.min.js").stat().st_size
    index = (out / "index.html").read_text()
    assert "plotly" not in index.lower() and index.count('href="series/') == 2
    big = max(pages, key=lambda p: p.stat().st_size)
    text = big.read_text()
    assert big.stat().st_size < plotly / 10  # plotly once, beside the pages; each page its own data only
    assert f"trtprof compare {ids[38]} {ids[39]} --db {url}" in text
    assert "driver_version: 580.1 -&gt; 580.2" in text
    data = json.loads(text.split('id="series-data">', 1)[1].split("</script>", 1)[0])
    assert data["points"]["run_id"] == ids and len(data["changes"]) == 1 and len(data["env"]) == 1
    small = min(pages, key=lambda p: p.stat().st_size)
    assert ids[39] not in json.loads(small.read_text().split('id="series-data">', 1)[1].split("</script>", 1)[0])["points"]["run_id"]
    code, _, err = run_cli(["history", "--db", url, "--model", "bert", "--out", str(out)], capsys)
    assert code == 0, err
    assert [p.name for p in (out / "series").glob("*.html")] == [small.name]  # the other series' page is gone


def test_fail_on_regression_exits_1_when_the_newest_run_stepped_up(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store.open(url)
    ids = fill(store, np.r_[noisy(np.full(30, 1.0), 0.01, 4), [1.3, 1.31]])
    store.close()
    code, out, _ = run_cli(["history", "--db", url, "--json", str(tmp_path / "r.json"), "--fail-on-regression"], capsys)
    assert code == 1
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [(c["before_run"], c["after_run"]) for c in doc["change_points"]] == [(ids[29], ids[30])]
    assert doc["series"][0]["newest_regressed"] is True
    code, _, _ = run_cli(["history", "--db", url, "--json", str(tmp_path / "r.json")], capsys)
    assert code == 0  # without the flag, a report only


def test_bad_inputs_are_one_sentence(step_store, tmp_path, capsys):
    url, _, _ = step_store
    code, _, err = run_cli(["history", "--db", url, "--label", "no-such", "--out", str(tmp_path / "s")], capsys)
    assert code == 3 and "no stored runs with label 'no-such'" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli(["history", "--db", url, "--out", str(tmp_path / "afile" / "site")], capsys)
    assert code == 3 and "a file stands where a directory is needed" in err and "afile" in err
    code, _, err = run_cli(["history", "--db", url], capsys)
    assert code == 2 and "--out" in err
    code, _, err = run_cli(["history", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path / "s")], capsys)
    assert code == 3 and "no run store" in err
    (tmp_path / "empty.db").write_bytes(b"")
    code, _, err = run_cli(["history", "--db", str(tmp_path / "empty.db"), "--json", str(tmp_path / "e.json")], capsys)
    assert code == 3 and "holds no trtprof run store" in err
    code, _, err = run_cli(["history", "--db", str(tmp_path / "no" / "x.db"), "--json", str(tmp_path / "e.json")], capsys)
    assert code == 3 and "cannot read the run store" in err
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_cli(["history", "--db", url, "--serve", "--port", str(port)], capsys)
    assert code == 3 and f"cannot serve the history on 127.0.0.1:{port}" in err


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served(step_store):
    from profiler.history.serve import Site, make_server

    url, ids, flat = step_store
    store = Store.open(url, upgrade=False)
    server = make_server(Site(store, db=url, label=None, model=None, rule=None), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address, url, ids, flat
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        store.close()


def test_the_server_is_live_and_read_only(served):
    (host, port), url, ids, flat = served
    assert host == "127.0.0.1"
    status, doc = _get(port, "/history.json")
    flat_series = next(s for s in json.loads(doc)["series"] if s["run_count"] == 20)
    status, page = _get(port, "/index.html")
    assert status == 200 and page.count('href="series/') == 2
    store = Store.open(url, upgrade=False)
    fill(store, [2.0], key="fp32-ws1G-s1", model="/m/bert.onnx", start=500)  # a new run, no rebuild
    store.close()
    counts = {s["id"]: s["run_count"] for s in json.loads(_get(port, "/history.json")[1])["series"]}
    assert counts[flat_series["id"]] == 21
    status, page = _get(port, f"/series/{flat_series['id']}.html")
    assert status == 200 and '"run_id":[' in page.replace(" ", "")
    assert _get(port, "/series/000000000000.html")[0] == 404
    assert _get(port, "/../../etc/passwd")[0] == 404
    rebound = urllib.request.Request(f"http://127.0.0.1:{port}/index.html", headers={"Host": f"evil.example:{port}"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(rebound, timeout=20)
    assert exc.value.code == 403  # a page that pointed its own name at 127.0.0.1 reads nothing
    req = urllib.request.Request(f"http://127.0.0.1:{port}/index.html", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=20)
    assert exc.value.code == 501


def test_real_cpu_sweeps_make_a_series_with_accuracy_and_memory(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from profiler.sweep import SweepConfig, run_sweep
    from tests.onnx_models import FAST_SWEEP, conv_model

    model = conv_model(tmp_path / "conv.onnx")
    url = f"sqlite:///{tmp_path / 'real.db'}"
    store = Store.open(url)
    for i in range(3):
        run_sweep(SweepConfig(model=model, precisions=["fp32", "fp16"], backend="onnxruntime", label="nightly", layers=False,
                              cache_dir=str(tmp_path / "cache"), **FAST_SWEEP), store=store)
    stored = [store.run_dict(r["id"]) for r in store.list_runs()]
    store.close()
    code, out, err = run_cli(["history", "--db", url, "--json", str(tmp_path / "r.json"), "--out",
                              str(tmp_path / "site")], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    keys = {v["key"] for run in stored for v in run["variants"] if v["status"] == "ok"}
    assert {s["key"]["key"] for s in doc["series"]} == keys
    assert all(s["run_count"] == 3 and s["key"]["backend"] == "onnxruntime" for s in doc["series"])
    assert all(s["env_changes"] == [] for s in doc["series"])  # three sweeps on one machine, one environment
    for s in doc["series"]:
        page = (tmp_path / "site" / "series" / f"{s['id']}.html").read_text()
        data = json.loads(page.split('id="series-data">', 1)[1].split("</script>", 1)[0])["points"]
        rows = [v for run in stored for v in run["variants"] if v["key"] == s["key"]["key"]]
        assert sorted(data["median_ms"]) == pytest.approx(sorted(v["latency_ms"]["median"] for v in rows), rel=1e-5)
        rows.sort(key=lambda v: v["run_id"])
        cosines = [min(a["cosine"] for a in v["accuracy"]) if v["accuracy"] else None for v in rows]
        assert [c is None for c in data["cosine_min"]] == [c is None for c in cosines]  # fp32 is the reference
        assert [c for c in data["cosine_min"] if c is not None] == pytest.approx([c for c in cosines if c is not None],
                                                                                  rel=1e-5)
        assert data["memory_bytes"]["rss_after_run_bytes"] == [v["metrics"]["memory"]["rss_after_run_bytes"]
                                                               for v in rows]
    assert any(s["key"]["key"].startswith("fp16") for s in doc["series"])


def test_sqlite_and_postgresql_give_the_same_series(db_url, tmp_path, capsys):
    """The figures are extracted in SQL (JSON paths): both backends hand back the same medians, p99s, repeats,
    memory and accuracy."""
    from profiler.history.review import review_store

    store = Store.open(db_url)
    ids = fill(store, np.r_[noisy(np.full(30, 1.0), 0.01, 8), [1.4]])
    store.update_variant_metrics(ids[3], "fp16-ws1G-s1", {"repeats": {"medians_ms": [1.0, 1.01, 0.99]}})
    (s,) = review_store(store)
    stored = [store.run_dict(i)["variants"][0] for i in ids]
    store.close()
    assert [p["median_ms"] for p in s["points"]] == pytest.approx([v["latency_ms"]["median"] for v in stored])
    assert [p["p99_ms"] for p in s["points"]] == pytest.approx([v["latency_ms"]["p99"] for v in stored])
    assert [p["repeats_ms"] for p in s["points"]][3] == [1.0, 1.01, 0.99]
    assert all(p["memory"] == {"rss_after_run_bytes": 5e8} for p in s["points"])
    assert all(p["accuracy"] == {"cosine_min": 0.9999, "max_abs": 1e-3, "failed_outputs": 0} for p in s["points"])
    assert [(c["before_run"], c["after_run"]) for c in s["change_points"]] == [(ids[29], ids[30])]
    assert s["newest_regressed"]


def test_capture_ranges_are_series_by_label(tmp_path, capsys):
    """Analysed captures: each NVTX range a series of its label; the captured GPU's clock is in the environment."""
    from profiler.capture.analyze import analyze
    from profiler.capture.record import store_analysis
    from profiler.history.review import review_store
    from tests.test_capture_inference import trt_app

    url = f"sqlite:///{tmp_path / 'cap.db'}"
    store = Store.open(url)
    for label, layer_us in (("app", (30, 10)), ("app", (30, 10)), ("other", (60, 20))):
        store_analysis(store, analyze(trt_app(n=50, layer_us=layer_us)), source="app.sqlite", label=label)
    reviewed = review_store(store)
    runs = [store.run_dict(r["id"]) for r in store.list_runs()]
    store.close()
    ranges = {(v["domain"], v["key"], r["label"]) for r in runs for v in r["variants"]
              if v["kind"] == "range" and v["status"] == "ok"}
    assert len(ranges) >= 4  # the enqueue range and the layers, under two labels
    assert {(s["key"]["domain"], s["key"]["key"], s["key"]["label"]) for s in reviewed} == ranges
    assert all(len(s["points"]) == (2 if s["key"]["label"] == "app" else 1) for s in reviewed)


def test_a_captured_gpus_clock_change_is_an_environment_change():
    """environment.gpus as store.rows keeps it for a capture (the loader's clock_hz): a new clock or GPU shows."""
    from profiler.history.review import env_changes
    from profiler.history.series import environment_of

    def run(clock, driver="580.1"):
        return {"gpu": "NVIDIA H200", "driver_version": driver, "label": "x", "trtprof_version": "0.1",
                "environment": {"schema_version": 3, "gpus": [{"name": "NVIDIA H200", "clock_hz": clock,
                                                               "bus_location": "0000:01:00.0"}]}}
    points = [{"run_id": i + 1, "env": environment_of(r)}
              for i, r in enumerate([run(1.98e9), run(1.98e9), run(1.59e9), run(1.59e9, "580.2")])]
    assert env_changes(points) == [
        {"run_id": 3, "index": 2, "changes": {"gpu0.clock_hz": [str(1.98e9), str(1.59e9)]}},
        {"run_id": 4, "index": 3, "changes": {"driver_version": ["580.1", "580.2"]}}]


def test_the_serve_command_binds_loopback_and_answers(step_store):
    """`trtprof history --serve --port 0` as a user starts it: it says where it listens (127.0.0.1), answers
    there, and is stopped by the test (terminate, then kill if it lingers)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    url, ids, _ = step_store
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "history", "--db", url, "--serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("history: serving http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        port = int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])
        status, doc = _get(port, "/history.json")
        assert status == 200 and sorted(s["run_count"] for s in json.loads(doc)["series"]) == [20, 100]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def test_a_step_where_the_driver_changed_says_so(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'd.db'}"
    store = Store.open(url)
    ids = fill(store, noisy(step_levels(40, 20, 1.3), 0.01, 9), driver_from={20: "590.0"})
    store.close()
    code, _, err = run_cli(["history", "--db", url, "--json", str(tmp_path / "d.json"), "--out", str(tmp_path / "s")],
                           capsys)
    assert code == 0, err
    (cp,) = json.loads((tmp_path / "d.json").read_text())["change_points"]
    assert (cp["after_run"], cp["environment_changed"]) == (ids[20], ["driver_version"])
    page = next((tmp_path / "s" / "series").glob("*.html")).read_text()
    assert "the environment changed at this step: driver_version" in page
