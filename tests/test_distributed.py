"""Scale-out (profiler.distributed): many captures in local processes or on Dask, sweep variants over
devices or Dask workers, a worker killed mid-variant. Dask tests use a LocalCluster of processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import main
from profiler.pipeline import pools
from profiler.distributed.captures import index_fields, task_names, top_series, unit_series
from profiler.distributed.index import build_index
from tests.conftest import ROOT, SAMPLE_TRACES, nsys_fixture_files
from tests.distributed_helpers import double_or_die, probe_device

SWEEP_FAST = dict(duration_s=0.2, warmup_ms=20, iterations=10, layers=False)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


# -- pools, names, index (no Dask) --------------------------------------------------------------------
def test_task_names_unique_and_readable():
    paths = [Path("/a/host1/report.sqlite"), Path("/a/host2/report.sqlite"), Path("/b/x y.sqlite"),
             Path("/c/host1/report.sqlite")]
    assert task_names(paths) == ["host1_report", "host2_report", "x_y", "host1_report-2"]


def test_local_map_loses_only_the_item_that_kills_its_process():
    got = dict((it, o) for it, o in pools.local_map(double_or_die, [1, 2, "die", 3, 4], jobs=2))
    assert {k: o.value for k, o in got.items() if k != "die"} == {1: 2, 2: 4, 3: 6, 4: 8}
    assert got["die"].value is None and "died" in got["die"].lost


def test_device_map_runs_one_item_per_device_at_a_time():
    items = [1, 2, "die", 3, 4, 5]
    got = list(pools.device_map(probe_device, items, devices=["0", "1"]))
    lost = [(it, o) for it, o in got if o.lost]
    assert [it for it, _ in lost] == ["die"] and "died" in lost[0][1].lost
    ran = [o.value for _, o in got if not o.lost]
    assert sorted(r[0] for r in ran) == [1, 2, 3, 4, 5]
    for device in ("0", "1"):
        spans = sorted((r[3], r[4]) for r in ran if r[1] == device)
        assert spans, f"device {device} ran nothing"
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), "two items at once on one device"
    # the devices worked at the same time: some span on 0 overlaps some span on 1
    s0 = [(r[3], r[4]) for r in ran if r[1] == "0"]
    s1 = [(r[3], r[4]) for r in ran if r[1] == "1"]
    assert any(a < d and c < b for a, b in s0 for c, d in s1)
    # the device whose process died got a fresh process for its next item
    die_device = next(o.where for it, o in got if it == "die")
    assert len({r[2] for r in ran if r[1] == die_device}) >= 2


def test_top_series_is_the_biggest_repeated_series():
    wrapper = {"name": "sweep/fp32", "count": 1, "wall_ms": {"median": 1482.7}}
    loop = {"name": "fp32/iter", "count": 40, "wall_ms": {"median": 9.9}}
    layer = {"name": "Conv@0", "count": 57, "wall_ms": {"median": 0.1}}
    assert top_series([wrapper, loop, layer]) is loop  # ranges come biggest total wall first
    assert top_series([wrapper]) is wrapper and top_series([]) == {}


def test_unit_is_the_analysis_inference_unit_else_the_top_series():
    loop = {"name": "iter", "domain": "app", "count": 40, "wall_ms": {"median": 9.9}}
    outer = {"name": "serve", "count": 4, "wall_ms": {"median": 120.0}}
    data = {"inference": {"series": "app:iter", "source": "nvtx"}, "ranges": [outer, loop]}
    assert unit_series(data) == (loop, "nvtx")
    assert unit_series({"inference": {"series": None, "source": "window"}, "ranges": [outer, loop]}) == (outer, "top series")


def test_index_compares_each_capture_with_its_peers_on_gpu_latency():
    def row(name, series, latency, wall=0.02):
        return {"capture": f"/c/{name}.sqlite", "name": name, "status": "ok", "unit": series,
                "unit_gpu_latency_ms": latency, "unit_wall_ms": wall, "top_findings": []}
    windows = [{**row(n, "(capture)", m), "unit_source": "window"} for n, m in (("w1", 10.0), ("w2", 20.0), ("w3", 90.0))]
    # the host wall times run the other way: an enqueue time says nothing of how long the inference takes
    rows = [row("a", "infer", 1.0, 0.9), row("b", "infer", 1.2, 0.5), row("c", "infer", 3.0, 0.1),
            row("d", "other", 5.0), {"capture": "/c/e.sqlite", "name": "e", "status": "failed", "error": "bad"},
            *windows, *[row(n, "loop", None, w) for n, w in (("t1", 1.0), ("t2", 2.0), ("t3", 9.0))]]
    index = build_index(rows, wall_s=1.0, mode="test")
    vs = {r["name"]: r["vs_peers"] for r in index["captures"]}
    assert vs["c"] == pytest.approx(3.0 / 1.2) and vs["a"] == pytest.approx(1.0 / 1.2)
    assert vs["d"] is None and vs["e"] is None  # one capture of its series; a failed capture
    assert vs["w3"] is None  # whole-capture windows measure capture length, not an inference
    assert vs["t3"] is None  # no inference unit, so no GPU latency: host wall times are not compared
    assert index["counts"] == {"total": 11, "ok": 10, "failed": 1}
    assert index["failed"] == [{"capture": "/c/e.sqlite", "error": "bad"}]


def _trt_analysis(layers: list[str], latency_ms: float, busy: float = 0.8, dims=None) -> dict:
    """An analysis document of a TensorRT capture: the enqueue unit, its layer ranges, its latency."""
    doc_layers = [{"name": f"TensorRT:{n}", "gpu_ms": {"median": 0.1}} for n in layers]
    if dims is not None:
        doc_layers[0]["engine"] = {"dims_in": dims}
    return {"capture": {}, "findings": [],
            "ranges": [{"name": "ExecutionContext::enqueue", "domain": "TensorRT", "count": 100,
                        "wall_ms": {"median": 0.02}, "gpu_busy_fraction": 1.0}],
            "inference": {"series": "TensorRT:ExecutionContext::enqueue", "source": "tensorrt",
                          "gpu_latency_ms": {"median": latency_ms, "p99": latency_ms}},
            "phases": {"steady": {"gpu_busy_fraction": busy}}, "layers": doc_layers, "top_kernels": []}


def test_index_peers_are_captures_of_the_same_network():
    """Every TensorRT capture's unit is ExecutionContext::enqueue: an unrelated engine (other layers, or the
    same layers at other input shapes) is no peer, and its ratio is not shown."""
    resnet = ["conv1 + relu", "layer1.0.conv1", "fc"]
    rows = [{"capture": f"/c/{n}.sqlite", "name": n, "status": "ok", **index_fields(_trt_analysis(resnet, ms))}
            for n, ms in (("r1", 1.0), ("r2", 1.1), ("r3", 1.3))]
    rows.append({"capture": "/c/bert.sqlite", "name": "bert", "status": "ok",
                 **index_fields(_trt_analysis(["embeddings", "attention.self", "pooler"], 9.89))})
    big = _trt_analysis(resnet, 4.0, dims=[[8, 3, 224, 224]])
    rows.append({"capture": "/c/r8.sqlite", "name": "r8", "status": "ok", **index_fields(big)})
    index = build_index(rows, wall_s=1.0, mode="test")
    vs = {r["name"]: r["vs_peers"] for r in index["captures"]}
    assert vs["r3"] == pytest.approx(1.3 / 1.1) and vs["r1"] == pytest.approx(1.0 / 1.1)
    assert vs["bert"] is None and vs["r8"] is None  # no capture of its own network to compare with
    fp = {r["name"]: (r["network"], r["network_from"]) for r in index["captures"]}
    assert fp["r1"] == fp["r2"] == fp["r3"] and fp["r1"][1] == "layers"
    assert fp["bert"][0] != fp["r1"][0] and fp["r8"] == (fp["r8"][0], "layers+shapes") and fp["r8"][0] != fp["r1"][0]


def test_index_fingerprint_without_layers_is_the_heaviest_kernels():
    from profiler.distributed.captures import network_fingerprint

    def doc(kernels):
        return {"top_kernels": [{"name": n, "short_name": n, "total_ms": ms} for n, ms in kernels]}
    a = doc([("gemm_a", 80.0), ("relu", 15.0), ("copy_tiny", 5.0)])
    b = doc([("relu", 14.0), ("gemm_a", 81.0), ("copy_other", 5.0), ("CUDA graph 3 (replays)", 500.0)])
    assert network_fingerprint(a) == network_fingerprint(b)  # the kernels making 90% of the time agree
    assert network_fingerprint(a)[1] == "kernels"
    assert network_fingerprint(doc([("conv_x", 90.0), ("relu", 10.0)]))[0] != network_fingerprint(a)[0]
    assert network_fingerprint({}) == (None, None)
    # one engine at two batch sizes: the bytes each inference copies tell them apart (to 2 significant digits)
    one = {**a, "inference": {"io_bytes_per_inference": {"HtoD": 602_112.0, "DtoH": 4_000.0}}}
    again = {**a, "inference": {"io_bytes_per_inference": {"HtoD": 602_500.0, "DtoH": 4_000.0}}}
    eight = {**a, "inference": {"io_bytes_per_inference": {"HtoD": 8 * 602_112.0, "DtoH": 32_000.0}}}
    assert network_fingerprint(one) == network_fingerprint(again) != network_fingerprint(eight)
    assert network_fingerprint(one)[1] == "kernels+io"


def test_index_gpu_busy_is_the_steady_state_s_as_the_capture_report_gives_it():
    """trtexec's graph replays fill their own span (the unit's busy share is 100%) while the GPU idles 15%
    of the steady state between them: the index shows the report's figure."""
    from profiler.capture.analyze import analyze_path
    from profiler.distributed.index import page_rows

    data = analyze_path(SAMPLE_TRACES / "trt_trtexec_graph.sqlite").to_json()
    row = index_fields(data)
    steady = data["phases"]["steady"]["gpu_busy_fraction"]
    assert row["gpu_busy_fraction"] == steady and steady < 0.95 and row["unit_gpu_busy_fraction"] > 0.99
    cells = page_rows(build_index([{"capture": "/c/t.sqlite", "name": "t", "status": "ok", **row}], wall_s=1.0,
                                  mode="test"), Path("/c"))[0]["cells"]
    assert cells["busy"][0] == f"{steady * 100:,.1f}"


# -- trtprof analyze with several captures -----------------------------------------------------------
def test_cli_analyze_many_jobs_stores_each_and_names_the_failure(tmp_path, capsys):
    from profiler.capture.analyze import analyze_path
    from profiler.store import Store

    caps = [str(SAMPLE_TRACES / n) for n in ("launch_bound.sqlite", "host_stall.sqlite", "no_nvtx.sqlite")]
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"not a database at all")
    db = tmp_path / "t.db"
    code, out, err = _cli(["analyze", *caps, str(bad), "--jobs", "2", "--out", str(tmp_path / "o"),
                           "--db", str(db), "--cdn"], capsys)
    assert code == 3
    assert "1 of 4 capture(s) could not be analysed (broken.sqlite)" in err
    index = json.loads((tmp_path / "o" / "index.json").read_text())
    assert [r["name"] for r in index["captures"]] == ["launch_bound", "host_stall", "no_nvtx", "broken"]
    assert [r["status"] for r in index["captures"]] == ["ok", "ok", "ok", "failed"]
    store = Store.open(str(db))
    runs = store.list_runs(kind="analyze")
    assert sorted(r["id"] for r in runs) == sorted(r["run_id"] for r in index["captures"][:3])
    serial = analyze_path(caps[0]).to_json()
    batch = json.loads((tmp_path / "o" / "launch_bound" / "analysis.json").read_text())
    assert {k: v for k, v in batch.items() if k != "timeline"} == serial
    row = index["captures"][0]
    unit, source = unit_series(serial)
    assert row["unit_wall_ms"] == unit["wall_ms"]["median"] and row["unit_source"] == source
    assert row["unit_gpu_latency_ms"] == serial["inference"]["gpu_latency_ms"]["median"]
    assert [f["rule"] for f in row["top_findings"]] == [f["rule"] for f in serial["findings"][:3]]
    html = (tmp_path / "o" / "index.html").read_text()
    assert 'href="launch_bound/report.html"' in html and (tmp_path / "o" / "launch_bound" / "report.html").is_file()
    assert "broken.sqlite" in out and "FAILED" in out


FOOTER_STAMP = re.compile(rb"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def test_batch_writes_what_a_single_analyze_writes_timeline_included(tmp_path, capsys):
    """Each capture of ``analyze A B --jobs 2`` runs the analyse task ``analyze CAPTURE --json --report`` runs:
    the same JSON byte for byte (its timeline included) and the same report, whose timeline is drawn."""
    caps = [str(SAMPLE_TRACES / n) for n in ("graph.sqlite", "launch_bound.sqlite")]
    code, _out, _err = _cli(["analyze", *caps, "--jobs", "2", "--out", str(tmp_path / "o"), "--no-store"], capsys)
    assert code == 0
    for cap in caps:
        name = Path(cap).stem
        code, _out, _err = _cli(["analyze", cap, "--json", str(tmp_path / f"{name}.json"),
                                 "--report", str(tmp_path / f"{name}.html"), "--no-store"], capsys)
        assert code == 0
        single = (tmp_path / f"{name}.json").read_bytes()
        assert (tmp_path / "o" / name / "analysis.json").read_bytes() == single
        assert json.loads(single)["timeline"]["windows"]
        html = (tmp_path / "o" / name / "report.html").read_bytes()
        assert FOOTER_STAMP.sub(b"", html) == FOOTER_STAMP.sub(b"", (tmp_path / f"{name}.html").read_bytes())
        assert b"The timeline needs the capture itself" not in html and b"fig-timeline-0" in html


def test_batch_in_this_process_writes_what_local_processes_write(tmp_path):
    """The runner decides where the analyse task runs, not what it writes: an inline batch and a --jobs 2
    batch of the same captures write the same analysis.json and index rows (less pids and timings)."""
    from profiler.distributed.captures import analyze_many
    from profiler.pipeline.runners import InlineRunner

    caps = [SAMPLE_TRACES / n for n in ("graph.sqlite", "no_nvtx.sqlite")]
    inline = analyze_many(caps, tmp_path / "a", runner=InlineRunner())
    jobs = analyze_many(caps, tmp_path / "b", jobs=2)
    assert inline["mode"] == "this process" and jobs["mode"] == "2 local process(es)"
    timed = ("pid", "analysis_s", "peak_rss_bytes", "json", "report")
    for a, b in zip(inline["captures"], jobs["captures"]):
        assert a["pid"] != b["pid"] and a["status"] == b["status"] == "ok"
        assert {k: v for k, v in a.items() if k not in timed} == {k: v for k, v in b.items() if k not in timed}
        assert Path(a["json"]).read_bytes() == Path(b["json"]).read_bytes()


def test_index_latency_is_the_inference_gpu_latency_not_the_enqueue_time():
    """trt_graph enqueues a CUDA graph: its enqueueV3 range lasts 0.02 ms on the host while each inference runs
    0.18 ms on the GPU. The index shows the latency the capture's own analysis reports."""
    from profiler.capture.analyze import analyze_path

    data = analyze_path(SAMPLE_TRACES / "trt_graph.sqlite").to_json()
    row = index_fields(data)
    latency = data["inference"]["gpu_latency_ms"]
    assert (row["unit_gpu_latency_ms"], row["unit_gpu_latency_p99_ms"]) == (latency["median"], latency["p99"])
    assert row["unit_gpu_latency_ms"] > 5 * row["unit_wall_ms"]  # the host wall time is the enqueue alone


@pytest.mark.parametrize("capture", ["no_nvtx", "nvfuser"])
def test_index_has_no_latency_without_an_inference_unit(capture, request):
    """No NVTX (a whole-capture window) or no repeated outermost range that launches a fair share of the GPU
    work (nvFuser's 652 ranges): the analysis' GPU latency then spans the whole capture, which is no inference's
    latency. (harness_cls was the second case until its per-layer pass was read as frames: its eager loop is
    now the unit.)"""
    from profiler.capture.analyze import analyze_path

    path = SAMPLE_TRACES / "no_nvtx.sqlite" if capture == "no_nvtx" else \
        request.getfixturevalue("nsys_fixtures") / "v2024.6.2_nvfuser_h200_nvtx652.sqlite"
    data = analyze_path(path).to_json()
    assert data["inference"]["source"] == "window"
    row = index_fields(data)
    assert row["unit_gpu_latency_ms"] is None and row["unit_wall_ms"] > 0


def test_index_table_names_its_columns_and_shows_the_latency():
    from profiler.cli.batch import index_lines

    row = {"capture": "/c/g.sqlite", "name": "g", "status": "ok", "unit": "iter", "unit_gpu_latency_ms": 0.18,
           "unit_wall_ms": 0.02, "finding_counts": {"high": 1}, "top_findings": []}
    lines = index_lines(build_index([row], wall_s=1.0, mode="test"))
    assert lines[0].split()[2:7] == ["GPU", "latency", "ms", "host", "wall"]
    assert lines[1].split()[:4] == ["g", "ok", "0.180", "0.020"]
    assert any("as 'trtprof analyze'" in line for line in lines[2:])


@pytest.mark.parametrize("store, said", [(["--no-store"], "the others are analysed and in the index"),
                                         ([], "the others are analysed, stored and in the index")])
def test_cli_analyze_many_failure_says_stored_only_when_stored(tmp_path, capsys, store, said):
    db = [] if store else ["--db", str(tmp_path / "t.db")]
    code, _, err = _cli(["analyze", str(SAMPLE_TRACES / "graph.sqlite"), str(tmp_path / "none.sqlite"), *store, *db,
                         "--out", str(tmp_path / "o")], capsys)
    assert code == 3 and said in err


def test_capture_over_its_memory_limit_fails_alone_with_the_reason(tmp_path):
    from profiler.distributed.captures import analyze_many

    # without the caches: a cached analysis (an earlier test's) would need no memory to speak of
    index = analyze_many([SAMPLE_TRACES / "graph.sqlite"], tmp_path, jobs=1, memory_limit_bytes=200 << 20,
                         trace_cache=False)
    assert index["counts"]["failed"] == 1
    # MemoryError inside the analysis, or the process killed by the allocator: either way it says why
    assert "over its memory limit of 200 MiB" in index["failed"][0]["error"]


@pytest.mark.parametrize("args, message", [
    (["--jobs", "2", "--scheduler", "tcp://127.0.0.1:1"], "give one of them"),
    (["--json", "x.json"], "drop --json/--report"),
    (["--memory-limit", "1M", "--jobs", "2"], "below 512M"),
])
def test_cli_analyze_many_usage_errors(tmp_path, capsys, args, message):
    caps = [str(SAMPLE_TRACES / "launch_bound.sqlite"), str(SAMPLE_TRACES / "no_nvtx.sqlite")]
    code, _, err = _cli(["analyze", *caps, *args, "--no-store", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and message in err


def test_single_capture_imports_no_dask_and_starts_no_process(tmp_path):
    code = ("import sys, multiprocessing\n"
            "from profiler.cli import main\n"
            "try:\n"
            f"    main(['analyze', {str(SAMPLE_TRACES / 'no_nvtx.sqlite')!r}, '--no-store'])\n"
            "except SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print('DASK', any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules),"
            " 'CHILDREN', len(multiprocessing.active_children()), 'FUTURES', 'concurrent.futures.process' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "DASK False CHILDREN 0 FUTURES False" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--devices", "0,0"], "names GPU 0 twice"),
    (["--devices", "gpu0"], "CUDA device indices or GPU UUIDs"),
    (["--devices", "0", "--scheduler", "tcp://127.0.0.1:1"], "give one of them"),
    (["--devices", "0,1", "--nsys"], "cannot be combined with --devices"),
])
def test_cli_sweep_parallel_usage_errors(tmp_path, capsys, args, message):
    code, _, err = _cli(["sweep", "--no-store", "--out", str(tmp_path / "o"), *args], capsys)
    assert code == 2 and message in err


# -- sweeps over local device processes -----------------------------------------------------------------
def test_sweep_devices_merges_one_run_with_each_variant_device(tmp_path, capsys):
    from profiler.store import Store

    db = tmp_path / "t.db"
    code, out, err = _cli(["sweep", "--precision", "fp32,fp16", "--duration", "0.2", "--warmup", "20",
                           "--no-layers", "--devices", "0,1", "--db", str(db), "--out", str(tmp_path / "o"),
                           "--cache-dir", str(tmp_path / "cache"), "--cdn"], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    keys = [v["key"] for v in summary["variants"]]
    assert keys == ["fp32-wsdefault-s1", "fp16-wsdefault-s1"]
    assert all(v["status"] == "ok" and v["count"] >= 10 for v in summary["variants"])
    seen = {v["key"]: v["device"]["cuda_visible_devices"] for v in summary["variants"]}
    assert set(seen.values()) <= {"0", "1"}
    table = summary["run"]["environment"]["devices"]
    assert sorted(k for r in table for k in r["variants"]) == sorted(keys)
    assert any(f["rule"] == "sweep.devices" for f in summary["findings"])
    if len(table) == 2:
        assert any("sharing one host's CPU" in w for w in summary["run"]["warnings"])
    fp16 = summary["variants"][1]["accuracy"]
    assert fp16 and all(m["passed"] for m in fp16.values())  # the fp32 reference reached the worker
    run = Store.open(str(db)).run_dict(summary["run"]["id"], with_samples=True)
    assert run["status"] == "ok"
    assert sorted(v["key"] for v in run["variants"]) == sorted(keys)  # stored once, by the workers
    assert all(len(v["samples"]) == next(x["count"] for x in summary["variants"] if x["key"] == v["key"])
               for v in run["variants"])


# -- Dask -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'trtprof[dask]')")
    import dask
    from distributed import LocalCluster

    # allowed-failures 0: a task whose worker dies fails at once (KilledWorker) instead of being retried
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                         dashboard_address=":0", memory_limit="3GiB")
    _wait_for_workers(c)
    yield c
    c.close()


def _wait_for_workers(cluster, n: int = 2) -> None:
    """Both workers connected: a loaded machine starts worker processes late, and a worker killed by an
    earlier test of this module comes back only when its nanny has restarted it."""
    from distributed import Client

    with Client(cluster.scheduler_address) as client:
        client.wait_for_workers(n, timeout=120)


@pytest.mark.slow
def test_dask_analysis_of_every_fixture_matches_the_serial_run(cluster, tmp_path):
    from profiler.capture.analyze import analyze_path
    from profiler.distributed.captures import analyze_many
    from profiler.store import Store

    caps = nsys_fixture_files() + sorted(SAMPLE_TRACES.glob("*.sqlite"))
    url = f"sqlite:///{tmp_path / 't.db'}"
    Store.open(url).close()
    index = analyze_many(caps, tmp_path / "o", scheduler=cluster.scheduler_address, store_url=url, cdn=True)
    assert index["counts"] == {"total": len(caps), "ok": len(caps), "failed": 0}
    for row, cap in zip(index["captures"], caps):
        assert Path(row["capture"]).resolve() == cap.resolve()  # the fixtures may sit behind a symbolic link
        parallel = json.loads(Path(row["json"]).read_text())
        parallel.pop("timeline")  # the report's drawing, as --json writes it
        assert parallel == analyze_path(cap).to_json(), cap.name  # same ranges, statistics and findings
    runs = Store.open(url).list_runs(kind="analyze", limit=1000)
    assert sorted(str(Path(r["source"]).resolve()) for r in runs) == sorted(str(c.resolve()) for c in caps)  # each stored once
    assert len({r["pid"] for r in index["captures"]}) == 2  # both workers took captures


def _sweep_pair(db: str, cluster, tmp_path):
    from profiler.distributed.sweep import DaskRunner, run_parallel
    from profiler.store import Store
    from profiler.sweep import Sweep, SweepConfig

    config = dict(precisions=["fp32", "fp16"], streams=[1, 2], cache_dir=str(tmp_path / "cache"), **SWEEP_FAST)
    _wait_for_workers(cluster)
    store = Store.open(db)
    serial = Sweep(SweepConfig(**config), store=store).run()
    parallel = run_parallel(Sweep(SweepConfig(**config), store=store), DaskRunner(cluster.scheduler_address),
                            store_url=db)
    return store, serial, parallel


def test_dask_sweep_over_two_workers_matches_the_serial_run(cluster, db_url, tmp_path):
    store, serial, parallel = _sweep_pair(db_url, cluster, tmp_path)
    assert [v["key"] for v in parallel["variants"]] == [v["key"] for v in serial["variants"]]
    assert parallel["run"]["status"] == "ok"
    for s, p in zip(serial["variants"], parallel["variants"]):
        assert p["status"] == s["status"] == "ok"
        assert p["count"] >= 10 and p["per_stream_count"] and len(p["per_stream_count"]) == s["streams"]
        for out, m in s["accuracy"].items():  # the same inputs through the same model: identical numbers
            assert p["accuracy"][out]["rel_l2"] == pytest.approx(m["rel_l2"], rel=1e-9, abs=1e-12)
        # Timing: no ratio is asserted here. The two workers time concurrently on a CI box of 2 shared
        # cores, where even the fastest query moved past 3x between runs; isolation is measured on GPUs
        # (benchmarks/bench_multi_gpu.py). What must hold: every statistic measured, ordered and finite.
        ps = p["latency_ms"]
        assert 0 < ps["min"] <= ps["median"] <= ps["max"] < float("inf") and ps["count"] == p["count"]
        assert p["device"]["worker"].startswith("tcp://")
    # every variant measured once, on a worker of this cluster; which worker took which is the scheduler's
    # choice (on a loaded machine one worker may still be preparing while the other takes every variant)
    assert sorted(v["key"] for v in parallel["variants"]) == sorted({v["key"] for v in parallel["variants"]})
    assert {v["device"]["worker"] for v in parallel["variants"]} <= set(cluster.scheduler_info["workers"])
    run = store.run_dict(parallel["run"]["id"], with_samples=True)
    assert sorted(v["key"] for v in run["variants"]) == sorted(v["key"] for v in serial["variants"])
    assert all(v["samples"] for v in run["variants"])


def test_dask_worker_killed_mid_variant_loses_only_that_variant_and_resume_completes_it(cluster, tmp_path):
    from distributed import Client

    from profiler.distributed.sweep import DaskRunner, run_parallel
    from profiler.store import Store
    from profiler.sweep import Sweep, SweepConfig, resume_sweep
    from tests.distributed_helpers import kill_worker_on_variant

    url = f"sqlite:///{tmp_path / 't.db'}"
    store = Store.open(url)
    config = SweepConfig(precisions=["fp32", "fp16"], streams=[1, 2], cache_dir=str(tmp_path / "cache"),
                         **SWEEP_FAST)
    victim = "fp16-wsdefault-s1"
    _wait_for_workers(cluster)
    with Client(cluster.scheduler_address) as client:
        client.run(kill_worker_on_variant, victim)
        try:
            summary = run_parallel(Sweep(config, store=store), DaskRunner(cluster.scheduler_address), store_url=url)
        finally:
            client.run(kill_worker_on_variant, None)
    by_key = {v["key"]: v for v in summary["variants"]}
    assert sorted(by_key) == sorted(["fp32-wsdefault-s1", "fp32-wsdefault-s2", victim, "fp16-wsdefault-s2"])
    assert by_key[victim]["status"] == "failed" and by_key[victim]["lost"] is True
    assert "lost with its worker" in by_key[victim]["error"] and "KilledWorker" in by_key[victim]["error"]
    assert all(v["status"] == "ok" for k, v in by_key.items() if k != victim)
    run_id = summary["run"]["id"]
    assert summary["run"]["status"] == "interrupted" and store.run_dict(run_id)["status"] == "interrupted"

    resumed = resume_sweep(store, run_id)
    assert resumed["run"]["status"] == "ok"
    assert {v["key"]: v["status"] for v in resumed["variants"]} == {k: "ok" for k in by_key}
    rows = store.run_dict(run_id)["variants"]
    assert sorted(v["key"] for v in rows) == sorted(by_key)  # one row per variant: the lost one replaced
    assert next(v for v in rows if v["key"] == victim)["status"] == "ok"


def test_cli_scheduler_for_captures_and_for_a_sweep(cluster, tmp_path, capsys):
    from profiler.store import Store

    db = tmp_path / "t.db"
    caps = [str(SAMPLE_TRACES / "launch_bound.sqlite"), str(SAMPLE_TRACES / "host_stall.sqlite")]
    _wait_for_workers(cluster)
    code, out, err = _cli(["analyze", *caps, "--scheduler", cluster.scheduler_address, "--db", str(db),
                           "--out", str(tmp_path / "a"), "--cdn"], capsys)
    assert code == 0, err
    assert "launch_bound" in out and f"{len(caps)} capture(s) on the Dask cluster" in err
    code, out, err = _cli(["sweep", "--precision", "fp32", "--duration", "0.2", "--warmup", "20", "--no-layers",
                           "--scheduler", cluster.scheduler_address, "--db", str(db), "--out", str(tmp_path / "s"),
                           "--cache-dir", str(tmp_path / "cache"), "--cdn"], capsys)
    assert code == 0, err
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert [v["status"] for v in summary["variants"]] == ["ok"]
    assert summary["variants"][0]["device"]["worker"] in cluster.scheduler_info["workers"]
    runs = Store.open(str(db)).list_runs()
    assert sorted(r["kind"] for r in runs) == ["analyze", "analyze", "sweep"]


def test_dask_scheduler_without_gpu_workers_is_a_usage_error(tmp_path):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'trtprof[dask]')")
    from distributed import LocalCluster

    from profiler.distributed.sweep import DaskRunner
    from profiler.errors import UsageError

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c:
        with pytest.raises(UsageError, match='--resources "GPU=1"'):
            DaskRunner(c.scheduler_address)



@pytest.mark.browser
def test_index_page_sorts_by_a_clicked_column(tmp_path):
    from profiler.distributed.index import write_index
    from tests.browser import CHROMIUM_ARGS, chromium_path

    exe = chromium_path()
    if exe is None:
        pytest.skip("headless Chromium not found (apt-get install chromium, or set TRTPROF_CHROMIUM)")
    sync_playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").sync_playwright

    def row(name, median):
        return {"capture": f"/c/{name}.sqlite", "name": name, "status": "ok", "unit": "iter",
                "unit_gpu_latency_ms": median, "top_findings": [], "report": str(tmp_path / name / "report.html")}
    rows = [row("a", 2.0), row("b", 10.0), row("c", 0.5), {"capture": "/c/d.sqlite", "name": "d", "status": "failed",
                                                            "error": "<script>alert(1)</script>"}]
    _, html = write_index(build_index(rows, wall_s=1.0, mode="test"), tmp_path)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("dialog", lambda d: errors.append("dialog " + d.message))
            page.goto(html.as_uri())
            names = lambda: page.eval_on_selector_all(  # noqa: E731
                "#captures tbody tr", "rows => rows.map(r => r.cells[0].getAttribute('data-v'))")
            page.click("text=GPU latency ms")
            asc = names()
            page.click("text=GPU latency ms")
            desc = names()
            assert page.get_attribute('a[href="a/report.html"]', "href") == "a/report.html"
        finally:
            browser.close()
    assert asc == ["c", "a", "b", "d"]  # a capture without a value sorts last
    assert desc == ["b", "a", "c", "d"]
    assert errors == []


def test_convert_ahead_fills_the_cache_the_workers_read(tmp_path):
    """The coordinator converts each lower precision once, in a thread, into the variants cache; a worker's
    prepare step then reuses that entry instead of converting the model again."""
    from types import SimpleNamespace

    from profiler.distributed.sweep import convert_ahead
    from profiler.sweep import SweepConfig
    from profiler.sweep.steps import precision_model
    from tests.onnx_models import conv_model

    cfg = SweepConfig(model=conv_model(tmp_path / "conv.onnx"), precisions=["fp32", "fp16"],
                      cache_dir=str(tmp_path / "cache"))
    prep = SimpleNamespace(model_path=Path(cfg.model), shapes={})
    convert_ahead(cfg, prep, ["fp32", "fp16", "fp16"]).join(timeout=120)
    said: list[str] = []
    model = precision_model(cfg, prep.model_path, "fp16", {}, progress=said.append)
    assert any("reusing cached conversion" in m for m in said), said
    assert model.info["cache_hit"] is True
    assert not any("converting" in m for m in said)
    assert len(list((tmp_path / "cache" / "variants").rglob("*.onnx"))) == 1  # fp32 needs no file, fp16 one


def test_concurrency_note_names_what_concurrent_timing_can_and_cannot_disturb():
    from profiler.distributed.sweep import concurrency_note, devices_table

    def variant(key, host, index, gpu):
        return {"key": key, "device": {"host": host, "index": index, "uuid": f"GPU-{host}-{index}", "gpu": gpu}}

    two_gpus = devices_table([variant("a", "h1", "0", "NVIDIA H200"), variant("b", "h1", "1", "NVIDIA H200")])
    note = concurrency_note(two_gpus)
    assert "one per GPU" in note and "enqueue-bound" in note and "GPU-bound variant measures as it would alone" in note
    cpu = devices_table([{"key": "a", "device": {"host": "h1", "worker": "w1"}},
                         {"key": "b", "device": {"host": "h1", "worker": "w2"}}])
    assert "sharing one host's CPU, not alone" in concurrency_note(cpu)
    assert concurrency_note(devices_table([variant("a", "h1", "0", "H200"), variant("b", "h2", "0", "H200")])) is None
    assert concurrency_note(devices_table([variant("a", "h1", "0", "H200"), variant("b", "h1", "0", "H200")])) is None
