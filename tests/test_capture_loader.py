"""The nsys export loader: every real export in ../shared/fixtures/nsys checked against SQL on the
same file, synthetic exports for the edge cases real files lack, and bad input."""

from __future__ import annotations

import json

import os
import shutil
import sqlite3
import stat
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.capture import FRAMES, SCHEMAS, Trace, load_trace
from profiler.capture.loader import api_category, normalize_api_name
from profiler.capture.trace import empty_frame, enum_dtype
from profiler.errors import EXIT_INPUT, InputError
from tests.conftest import nsys_fixture_files

FIXTURES = [p.name for p in nsys_fixture_files()]
needs_fixtures = pytest.mark.skipif(not FIXTURES, reason="../shared/fixtures/nsys is absent")
GRAPH_FIXTURE = "v2025.5.2_flameox_CUDAGRAPH_graph_trace.sqlite"
DOMAIN_FIXTURE = "v2022.2.1_pipit_saxpy_mpi_cuda_nvtx_domains.sqlite"
A100X4_FIXTURE = "v2024.5.1_pipit_cloverleaf_4xA100.sqlite"
NCCL_FIXTURE = "v2026.2.1_nsysai_mfu_2gpu_after.sqlite"
H100_FIXTURE = "v2026.2.1_nsysai_h100_2gpu_1s_nvtx.sqlite"


@lru_cache(maxsize=None)
def loaded(name: str) -> Trace:
    return load_trace(nsys_fixture_files()[FIXTURES.index(name)])


def sql(name: str, query: str) -> list[tuple]:
    path = nsys_fixture_files()[FIXTURES.index(name)]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def has_table(name: str, table: str) -> bool:
    return bool(sql(name, f"SELECT 1 FROM sqlite_master WHERE name = '{table}'"))


def count(name: str, table: str, where: str = "") -> int:
    return sql(name, f"SELECT count(*) FROM {table} {where}")[0][0] if has_table(name, table) else 0


# ---------------------------------------------------------------------------------------------
# Every real export


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_row_counts_equal_sql_counts(nsys_fixtures, name):
    tr = loaded(name)
    expected = {
        "kernels": count(name, "CUPTI_ACTIVITY_KIND_KERNEL"),
        "memcpy": count(name, "CUPTI_ACTIVITY_KIND_MEMCPY"),
        "memset": count(name, "CUPTI_ACTIVITY_KIND_MEMSET"),
        "graphs": count(name, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
        # runtime (0) and driver (1) calls; 2022.x also stores CUDA backtrace duplicates (class 67)
        "api": count(name, "CUPTI_ACTIVITY_KIND_RUNTIME", "WHERE eventClass IN (0, 1)"),
        "sync": count(name, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
        "nvtx": count(name, "NVTX_EVENTS", "WHERE eventType IN (34, 59, 60)"),
        "osrt": count(name, "OSRT_API"),
    }
    assert {f: len(getattr(tr, f)) for f in expected} == expected
    assert tr.meta["nsys_version"].startswith(name[1:].split("_")[0])
    assert tr.meta["schema_version"].count(".") == 2


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_frames_follow_the_contract(nsys_fixtures, name):
    tr = loaded(name)
    for frame in FRAMES:
        df = getattr(tr, frame)
        for col, spec in SCHEMAS[frame].items():
            assert col in df.columns, (frame, col)
            dt = df[col].dtype
            if spec == "enum":
                assert dt == enum_dtype(col), (frame, col, dt)
            elif spec == "category":
                assert isinstance(dt, pd.CategoricalDtype), (frame, col, dt)
            else:
                assert str(dt) == spec, (frame, col, dt)
        if len(df) and frame != "nvtx":
            assert (df["end_ns"] >= df["start_ns"]).all(), frame


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_times_and_ids_equal_sql(nsys_fixtures, name):
    tr = loaded(name)
    for frame, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                         ("osrt", "OSRT_API"), ("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")):
        if not count(name, table):
            continue
        s, e = sql(name, f"SELECT sum(start), sum(end) FROM {table}")[0]
        assert int(getattr(tr, frame)["start_ns"].sum()) == s
        assert int(getattr(tr, frame)["end_ns"].sum()) == e
    if count(name, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        want = sql(name, "SELECT (globalTid >> 24) & 16777215, globalTid & 16777215, count(*) "
                         "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass IN (0, 1) GROUP BY 1, 2")
        got = tr.api.groupby(["pid", "tid"]).size()
        assert {(p, t): n for p, t, n in want} == {k: int(v) for k, v in got.items()}
        # the process names in meta come from PROCESSES for the pids seen
        names = dict(sql(name, "SELECT pid, name FROM PROCESSES"))
        for proc in tr.meta["processes"]:
            assert proc["name"] == names.get(proc["pid"])
        assert set(tr.api["pid"].unique()) <= {p["pid"] for p in tr.meta["processes"]}


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_names_are_resolved(nsys_fixtures, name):
    tr = loaded(name)
    if len(tr.kernels):
        want = sql(name, "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                         "JOIN StringIds s ON s.id = coalesce(k.demangledName, k.shortName) GROUP BY 1")
        got = tr.kernels["name"].value_counts()
        assert {k: int(v) for k, v in got.items() if v} == dict(want)
        short = dict(sql(name, "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.shortName GROUP BY 1"))
        assert {k: int(v) for k, v in tr.kernels["short_name"].value_counts().items() if v} == short
    if len(tr.api):
        raw = sql(name, "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                        "ON s.id = r.nameId WHERE eventClass IN (0, 1) GROUP BY 1")
        want: dict[str, int] = {}
        for value, n in raw:
            want[normalize_api_name(value)] = want.get(normalize_api_name(value), 0) + n
        assert {k: int(v) for k, v in tr.api["name"].value_counts().items() if v} == want
        assert not any(c.endswith(("_v3020", "_v7000", "_v10000")) for c in tr.api["name"].cat.categories)
    if len(tr.osrt):
        want = dict(sql(name, "SELECT s.value, count(*) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                              "GROUP BY 1"))
        assert {k: int(v) for k, v in tr.osrt["name"].value_counts().items() if v} == want
    if len(tr.nvtx):
        want = dict(sql(name, "SELECT coalesce(s.value, n.text, ''), count(*) FROM NVTX_EVENTS n "
                              "LEFT JOIN StringIds s ON s.id = n.textId WHERE eventType IN (34, 59, 60) "
                              "GROUP BY 1"))
        assert {k: int(v) for k, v in tr.nvtx["name"].value_counts().items() if v} == want
    for frame in ("kernels", "api", "osrt", "nvtx"):
        names = getattr(tr, frame)["name"].astype(str)
        assert not names.str.fullmatch(r"\d+").any(), frame
        assert not names.str.startswith("<string ").any(), frame


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_correlation_join_equals_sql_join(nsys_fixtures, name):
    tr = loaded(name)
    for frame, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                         ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"), ("sync", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
                         ("graphs", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")):
        if not count(name, table):
            continue
        rows = sql(name, f"SELECT a.start, a.end, a.correlationId, coalesce(r.globalTid, -1), "
                         f"coalesce(r.start, -1), coalesce(r.end, -1) FROM {table} a "
                         f"LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = a.correlationId "
                         f"AND (r.globalTid & -16777216) = a.globalPid AND r.eventClass IN (0, 1)")
        want = pd.DataFrame(rows, columns=["start_ns", "end_ns", "correlation_id", "api_tid", "api_start_ns",
                                           "api_end_ns"])
        got = getattr(tr, frame)[list(want.columns)]
        key = list(want.columns)
        want = want.sort_values(key).reset_index(drop=True)
        got = got.sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        rate = float((want["api_tid"] >= 0).mean())
        assert tr.meta["correlation"][frame] == pytest.approx(rate)


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_capture_window_and_gpus(nsys_fixtures, name):
    tr = loaded(name)
    duration = sql(name, "SELECT duration FROM ANALYSIS_DETAILS")[0][0]
    assert tr.meta["capture_start_ns"] == min(0, tr.meta["events_start_ns"])
    assert tr.meta["capture_end_ns"] == max(duration, tr.meta["events_end_ns"])
    assert tr.meta["events_start_ns"] <= tr.meta["events_end_ns"] <= duration
    devices = set(tr.kernels["device_id"]) | set(tr.memcpy["device_id"])
    assert devices <= {g["device_id"] for g in tr.meta["gpus"]}
    if has_table(name, "TARGET_INFO_GPU"):
        assert [g["name"] for g in tr.meta["gpus"]] == [r[0] for r in sql(
            name, "SELECT name FROM TARGET_INFO_GPU ORDER BY id")]
    else:
        assert any("TARGET_INFO_GPU" in m for m in tr.meta["missing"])


@needs_fixtures
def test_graph_trace_fixture_has_graph_launches(nsys_fixtures):
    tr = loaded(GRAPH_FIXTURE)
    assert len(tr.graphs) == 2
    assert tr.graphs["graph_id"].tolist() == [1, 1]
    assert tr.graphs["graph_exec_id"].tolist() == [2, 2]
    launches = tr.api.set_index("correlation_id").loc[tr.graphs["correlation_id"]]
    assert launches["name"].astype(str).tolist() == ["cudaGraphLaunch", "cudaGraphLaunch"]
    assert launches["category"].astype(str).tolist() == ["graph_launch", "graph_launch"]
    assert (tr.graphs["api_start_ns"].to_numpy() == launches["start_ns"].to_numpy()).all()
    act = tr.gpu_activity()
    assert act["kind"].astype(str).value_counts().to_dict() == {"kernel": 3, "graph": 2, "memcpy": 1}
    assert act["start_ns"].is_monotonic_increasing
    # the graph's GPU time (1728 + 1376 ns) is part of the activity the busy time unions
    graph_ns = int((tr.graphs["end_ns"] - tr.graphs["start_ns"]).sum())
    assert graph_ns == (339412132 - 339410404) + (339417988 - 339416612)
    assert tr.sync["sync_type"].astype(str).tolist() == ["stream", "stream"]  # raw syncType says 2


@needs_fixtures
def test_nvtx_domains_resolved_per_process(nsys_fixtures):
    tr = loaded(DOMAIN_FIXTURE)
    by_domain = tr.nvtx.groupby("domain", observed=True)["name"].agg(lambda s: sorted(set(map(str, s))))
    assert by_domain["MPI"] == ["MPI_Finalize", "MPI_Init", "MPI_Recv", "MPI_Send"]
    sizes = tr.nvtx.groupby(["domain", "name"], observed=True).size().to_dict()
    assert sizes == {("MPI", "MPI_Init"): 1, ("MPI", "MPI_Send"): 10, ("MPI", "MPI_Recv"): 5,
                     ("MPI", "MPI_Finalize"): 1, ("", "saxpy"): 5}
    assert by_domain[""] == ["saxpy"]
    assert int((tr.nvtx["domain"] == "MPI").sum()) == count(DOMAIN_FIXTURE, "NVTX_EVENTS",
                                                            "WHERE eventType = 59 AND domainId = 1")
    assert set(tr.nvtx["event_type"].astype(str)) == {"push_pop"}
    # pid/tid decoded from globalTid 302119224788637
    assert set(tr.nvtx["pid"]) == {(302119224788637 >> 24) & 0xFFFFFF} == {1230493}
    assert set(tr.nvtx["tid"]) == {302119224788637 & 0xFFFFFF}
    # the CUDA backtrace rows (eventClass 67) are not API calls: correlation ids stay unique
    assert not tr.api.duplicated(["pid", "correlation_id"]).any()
    # the pageable host buffer shows as pageable HtoD copies
    hd = tr.memcpy[tr.memcpy["copy_kind"] == "HtoD"]
    assert len(hd) == 10 and set(hd["src_kind"].astype(str)) == {"pageable"}
    assert set(hd["api_name"].astype(str)) == {"cudaMemcpy"}


@needs_fixtures
def test_unnamed_nvtx_domain_and_registered_strings(nsys_fixtures):
    tr = loaded(NCCL_FIXTURE)
    nccl = tr.nvtx[tr.nvtx["domain"] == "domain 1"]
    assert len(nccl) == count(NCCL_FIXTURE, "NVTX_EVENTS", "WHERE domainId = 1")
    assert {"ncclSend", "ncclRecv", "ncclGroupStart"} <= set(nccl["name"].astype(str))
    assert any("domain" in w for w in tr.meta["warnings"])
    assert (tr.nvtx.loc[tr.nvtx["domain"] == "", "name"].astype(str).str.contains("op_id")).any()


@needs_fixtures
def test_sync_kind_comes_from_the_api_call_across_versions(nsys_fixtures):
    cl = loaded(A100X4_FIXTURE)  # 2024.5 stores cudaDeviceSynchronize with syncType 1 (event)
    assert cl.sync["sync_type"].astype(str).value_counts().to_dict() == {"context": 1312}
    assert set(cl.sync["api_name"].astype(str)) == {"cudaDeviceSynchronize"}
    assert len(cl.meta["gpus"]) == 4 and all(g["sm_count"] == 108 for g in cl.meta["gpus"])
    h = loaded(H100_FIXTURE)
    counts = h.sync["sync_type"].astype(str).value_counts().to_dict()
    assert counts == {"stream_wait": 236, "stream": 8}
    cats = h.api.groupby("category", observed=True).size().to_dict()
    launches = sql(H100_FIXTURE, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                                 "ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' "
                                 "OR s.value LIKE 'cuLaunchKernel%'")[0][0]
    assert cats["launch"] == launches > 3000


@needs_fixtures
def test_tables_argument_reads_only_those_frames(nsys_fixtures):
    name = H100_FIXTURE
    tr = load_trace(nsys_fixture_files()[FIXTURES.index(name)], tables=["kernels"])
    assert len(tr.kernels) == 3442 and len(tr.api) == 0 and len(tr.nvtx) == 0
    full = loaded(name)
    assert tr.kernels["api_start_ns"].tolist() == full.kernels["api_start_ns"].tolist()
    with pytest.raises(ValueError):
        load_trace(nsys_fixture_files()[0], tables=["kernel"])


@needs_fixtures
@pytest.mark.parametrize("name", [DOMAIN_FIXTURE, GRAPH_FIXTURE, NCCL_FIXTURE])
def test_sqlite3_fallback_reader_gives_the_same_trace(nsys_fixtures, name, monkeypatch):
    monkeypatch.setenv("TRTPROF_SQLITE_READER", "sqlite3")
    slow = load_trace(nsys_fixture_files()[FIXTURES.index(name)])
    fast = loaded(name)
    assert slow.meta["reader"] == "sqlite3"
    for frame in FRAMES:
        a, b = getattr(slow, frame), getattr(fast, frame)
        pd.testing.assert_frame_equal(a.astype({c: str for c in a.columns if isinstance(a[c].dtype, pd.CategoricalDtype)}),
                                      b.astype({c: str for c in b.columns if isinstance(b[c].dtype, pd.CategoricalDtype)}),
                                      check_dtype=False)


def test_api_names_and_categories():
    assert normalize_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert normalize_api_name("cuLaunchKernelEx") == "cuLaunchKernelEx"
    cases = {
        "cudaLaunchKernel_v7000": "launch", "cuLaunchKernel": "launch", "cuLaunchKernelEx": "launch",
        "cudaLaunchKernelExC_v11060": "launch", "cudaLaunchCooperativeKernel_v9000": "launch",
        "cudaLaunchKernel_ptsz_v7000": "launch", "cudaLaunchHostFunc_v10000": "other",
        "cudaGraphLaunch_v10000": "graph_launch", "cuGraphLaunch": "graph_launch",
        "cudaStreamSynchronize_v3020": "sync", "cudaDeviceSynchronize_v3020": "sync",
        "cuCtxSynchronize": "sync", "cudaStreamWaitEvent_v3020": "sync", "cudaEventSynchronize_v3020": "sync",
        "cuStreamSynchronize": "sync", "cudaEventQuery_v3020": "other", "cudaMemcpyAsync_v3020": "memcpy",
        "cuMemcpyHtoDAsync_v2": "memcpy", "cudaMemsetAsync_v3020": "memset", "cuMemsetD8Async": "memset",
        "cudaMalloc_v3020": "other", "cudaGraphInstantiate_v12000": "other",
    }
    assert {n: api_category(n) for n in cases} == cases


# ---------------------------------------------------------------------------------------------
# Synthetic exports (nsys table and column names; only what a case needs)

KERNEL_COLS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
               "demangledName", "shortName", "mangledName", "gridX", "gridY", "gridZ", "blockX", "blockY",
               "blockZ", "registersPerThread", "graphNodeId")
RUNTIME_COLS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId")
NVTX_COLS = ("start", "end", "eventType", "text", "globalTid", "endGlobalTid", "textId", "domainId")


def make_export(path: Path, *, strings: dict[int, str] | None = None, kernels=(), runtime=(), nvtx=(),
                version: str = "2025.3.2.474", kernel_cols=KERNEL_COLS, runtime_cols=RUNTIME_COLS,
                nvtx_cols=NVTX_COLS) -> Path:
    """Write a minimal nsys-shaped export: rows are dicts keyed by nsys column names."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                    [("EXPORT_PRODUCT_VERSION", version), ("EXPORT_SCHEMA_VERSION", "3.20.3")])
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted((strings or {}).items()))
    for table, cols, rows in (("CUPTI_ACTIVITY_KIND_KERNEL", kernel_cols, kernels),
                              ("CUPTI_ACTIVITY_KIND_RUNTIME", runtime_cols, runtime),
                              ("NVTX_EVENTS", nvtx_cols, nvtx)):
        if not rows:
            continue  # nsys 2022.4+ creates only non-empty tables
        con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' if c != 'text' else c + ' TEXT' for c in cols)})")
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols))})",
                        [tuple(r.get(c) for c in cols) for r in rows])
    con.commit()
    con.close()
    return path


def gtid(pid: int, tid: int, high: int = 1 << 48) -> int:
    return high | (pid << 24) | tid


def kernel_row(start, end, corr, pid, name_id, **kw):
    row = dict(start=start, end=end, deviceId=0, contextId=1, streamId=7, correlationId=corr,
               globalPid=gtid(pid, 0), demangledName=name_id, shortName=name_id, gridX=1, gridY=1, gridZ=1,
               blockX=128, blockY=1, blockZ=1, registersPerThread=32)
    row.update(kw)
    return row


def test_no_cuda_data_loads_with_a_missing_note(tmp_path):
    path = make_export(tmp_path / "cpu_only.sqlite", strings={1: "step"},
                       nvtx=[dict(start=0, end=100, eventType=59, textId=1, globalTid=gtid(5, 5))])
    tr = load_trace(path)
    assert not tr.has_cuda and len(tr.nvtx) == 1 and tr.nvtx["name"].tolist() == ["step"]
    assert any("no CUDA GPU activity" in m for m in tr.meta["missing"])
    assert any("no CUDA API calls" in m for m in tr.meta["missing"])
    assert tr.gpu_activity().empty and list(tr.gpu_activity().columns)[0] == "kind"
    assert tr.meta["nsys_version"] == "2025.3.2.474"


def test_unclosed_nvtx_ranges_and_marks_are_kept_without_end(tmp_path):
    g = gtid(7, 8)
    path = make_export(tmp_path / "open.sqlite", nvtx=[
        dict(start=10, end=50, eventType=59, text="closed", globalTid=g),
        dict(start=20, end=None, eventType=59, text="never closed", globalTid=g),
        dict(start=30, end=None, eventType=60, text="async open", globalTid=g),
        dict(start=40, end=None, eventType=34, text="a mark", globalTid=g),
        dict(start=0, end=None, eventType=39, text="thread name", globalTid=g),
    ])
    tr = load_trace(path)
    assert tr.nvtx["name"].astype(str).tolist() == ["closed", "never closed", "async open", "a mark"]
    assert str(tr.nvtx["end_ns"].dtype) == "Int64"
    assert tr.nvtx["end_ns"].isna().tolist() == [False, True, True, True]
    assert tr.nvtx["event_type"].astype(str).tolist() == ["push_pop", "push_pop", "start_end", "mark"]
    assert tr.meta["nvtx_unclosed"] == 2
    assert any("never closed" in w for w in tr.meta["warnings"])
    assert tr.meta["capture_end_ns"] == 50


def test_negative_timestamps_are_kept(tmp_path):
    path = make_export(tmp_path / "neg.sqlite", strings={1: "k"}, kernels=[
        kernel_row(-5_000, -1_000, 11, 42, 1), kernel_row(-500, 700, 12, 42, 1)],
        runtime=[dict(start=-6_000, end=-5_500, eventClass=0, globalTid=gtid(42, 43), correlationId=11, nameId=1)])
    tr = load_trace(path)
    assert tr.kernels["start_ns"].tolist() == [-5_000, -500]
    assert tr.kernels["api_start_ns"].tolist() == [-6_000, -1]
    assert tr.kernels["api_tid"].tolist() == [gtid(42, 43), -1]
    assert tr.meta["capture_start_ns"] == -6_000 and tr.meta["capture_end_ns"] == 700


def test_ten_kilobyte_kernel_names(tmp_path):
    long_name = "void tpl<" + "float, " * 1462 + "int>(float*)"
    assert len(long_name) > 10_000
    n = 5_000
    path = make_export(tmp_path / "long.sqlite", strings={1: long_name, 2: "short"},
                       kernels=[kernel_row(i * 10, i * 10 + 5, i, 1, 1 + (i % 2)) for i in range(n)])
    tr = load_trace(path)
    assert tr.kernels["name"].cat.categories.tolist() == [long_name, "short"]
    assert int((tr.kernels["name"] == long_name).sum()) == n // 2
    # categorical codes: the name is stored once, not once per row
    assert tr.kernels["name"].memory_usage(deep=True) < 100_000


def test_kernel_name_falls_back_to_short_then_mangled(tmp_path):
    cols = tuple(c for c in KERNEL_COLS if c not in ("graphNodeId",))
    path = make_export(tmp_path / "fallback.sqlite", strings={1: "demangled(int)", 2: "short", 3: "_Z6mangledi"},
                       kernel_cols=cols, kernels=[
                           kernel_row(0, 1, 1, 1, None, demangledName=1, shortName=2),
                           kernel_row(2, 3, 2, 1, None, demangledName=None, shortName=2),
                           kernel_row(4, 5, 3, 1, None, demangledName=None, shortName=None, mangledName=3)])
    tr = load_trace(path)
    assert tr.kernels["name"].astype(str).tolist() == ["demangled(int)", "short", "_Z6mangledi"]
    assert tr.kernels["graph_node_id"].isna().all()
    assert "graphNodeId" in tr.meta["absent_columns"]["CUPTI_ACTIVITY_KIND_KERNEL"]


def test_export_with_only_the_oldest_columns(tmp_path):
    path = make_export(
        tmp_path / "old.sqlite", strings={1: "k_short", 2: "cudaLaunch"},
        kernel_cols=("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName"),
        runtime_cols=("start", "end", "globalTid", "correlationId", "nameId"),
        nvtx_cols=("start", "end", "eventType", "text", "globalTid"),
        kernels=[kernel_row(10, 20, 5, 3, 1)],
        runtime=[dict(start=1, end=4, globalTid=gtid(3, 9), correlationId=5, nameId=2)],
        nvtx=[dict(start=0, end=30, eventType=59, text="step", globalTid=gtid(3, 9))])
    tr = load_trace(path)
    assert tr.kernels["name"].tolist() == ["k_short"] and tr.kernels["short_name"].tolist() == ["k_short"]
    assert tr.kernels["grid_x"].tolist() == [-1] and tr.kernels["context_id"].tolist() == [-1]
    assert tr.kernels["api_tid"].tolist() == [gtid(3, 9)]
    assert tr.api["api"].tolist() == ["runtime"] and tr.api["category"].tolist() == ["launch"]
    assert tr.nvtx["domain"].tolist() == [""] and tr.nvtx["end_global_tid"].tolist() == [-1]
    absent = tr.meta["absent_columns"]
    assert {"gridX", "contextId", "graphNodeId"} <= set(absent["CUPTI_ACTIVITY_KIND_KERNEL"])
    assert {"textId", "domainId", "endGlobalTid"} <= set(absent["NVTX_EVENTS"])


def test_correlation_ids_repeat_across_processes(tmp_path):
    # two processes both use correlation id 1: each kernel must get its own process's launch
    path = make_export(tmp_path / "two_procs.sqlite", strings={1: "k", 2: "cudaLaunchKernel_v7000"},
                       kernels=[kernel_row(100, 200, 1, 10, 1), kernel_row(150, 260, 1, 20, 1)],
                       runtime=[dict(start=90, end=95, eventClass=0, globalTid=gtid(20, 21), correlationId=1, nameId=2),
                                dict(start=80, end=85, eventClass=0, globalTid=gtid(10, 11), correlationId=1, nameId=2)])
    tr = load_trace(path)
    assert tr.kernels["pid"].tolist() == [10, 20]
    assert tr.kernels["api_tid"].tolist() == [gtid(10, 11), gtid(20, 21)]
    assert tr.kernels["api_start_ns"].tolist() == [80, 90]
    assert tr.api["category"].astype(str).tolist() == ["launch", "launch"]
    assert tr.api["tid"].tolist() == [21, 11]


# hypothesis: random rows written with nsys column names round-trip through the loader
row_strategy = st.fixed_dictionaries({
    "start": st.integers(-10**12, 10**12), "dur": st.integers(0, 10**6), "pid": st.integers(1, 3),
    "tid": st.integers(1, 4), "corr": st.integers(0, 50), "name": st.integers(0, 4),
    "has_api": st.booleans(),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row_strategy, max_size=30, unique_by=lambda r: (r["pid"], r["corr"])),
       st.lists(st.tuples(st.integers(0, 10**9), st.one_of(st.none(), st.integers(1, 10**6)),
                          st.sampled_from([34, 59, 60]), st.integers(0, 4), st.booleans(),
                          st.sampled_from([0, 1, 2])), max_size=20))
def test_synthetic_exports_round_trip(rows, nvtx_rows):
    strings = {i: f"name_{i}_" + "x" * i for i in range(5)}
    strings.update({10: "cudaLaunchKernel_v7000", 11: "cuLaunchKernelEx", 20: "Dom A", 21: "Dom B"})
    kernels = [kernel_row(r["start"], r["start"] + r["dur"], r["corr"], r["pid"], r["name"]) for r in rows]
    runtime = [dict(start=r["start"] - 100, end=r["start"] - 50, eventClass=r["tid"] % 2,
                    globalTid=gtid(r["pid"], r["tid"]), correlationId=r["corr"],
                    nameId=10 + r["tid"] % 2) for r in rows if r["has_api"]]
    nvtx = [dict(start=0, end=None, eventType=75, text="Dom A", globalTid=gtid(1, 1), domainId=1),
            dict(start=0, end=None, eventType=75, textId=21, globalTid=gtid(1, 1), domainId=2)]
    for s, d, et, name, registered, dom in nvtx_rows:
        end = None if (d is None or et == 34) else s + d
        nvtx.append(dict(start=s, end=end, eventType=et, globalTid=gtid(1, 2), domainId=dom,
                         **({"textId": name} if registered else {"text": strings[name]})))
    with tempfile.TemporaryDirectory() as tmp:
        tr = load_trace(make_export(Path(tmp) / "x.sqlite", strings=strings, kernels=kernels,
                                    runtime=runtime, nvtx=nvtx))
    assert tr.kernels["start_ns"].tolist() == [r["start"] for r in rows]
    assert tr.kernels["end_ns"].tolist() == [r["start"] + r["dur"] for r in rows]
    assert tr.kernels["name"].astype(str).tolist() == [strings[r["name"]] for r in rows]
    assert tr.kernels["pid"].tolist() == [r["pid"] for r in rows]
    assert tr.kernels["api_tid"].tolist() == [gtid(r["pid"], r["tid"]) if r["has_api"] else -1 for r in rows]
    assert tr.kernels["api_start_ns"].tolist() == [r["start"] - 100 if r["has_api"] else -1 for r in rows]
    assert tr.api["name"].astype(str).tolist() == [
        "cudaLaunchKernel" if r["tid"] % 2 == 0 else "cuLaunchKernelEx" for r in rows if r["has_api"]]
    assert tr.api["api"].astype(str).tolist() == [
        "runtime" if r["tid"] % 2 == 0 else "driver" for r in rows if r["has_api"]]
    assert (tr.api["category"] == "launch").all()
    assert tr.nvtx["name"].astype(str).tolist() == [strings[n] for _, _, _, n, _, _ in nvtx_rows]
    assert tr.nvtx["domain"].astype(str).tolist() == [["", "Dom A", "Dom B"][d] for *_, d in nvtx_rows]
    want_end = [None if (d is None or et == 34) else s + d for s, d, et, *_ in nvtx_rows]
    assert [None if pd.isna(v) else int(v) for v in tr.nvtx["end_ns"]] == want_end
    assert tr.meta["nvtx_unclosed"] == sum(1 for s, d, et, *_ in nvtx_rows if d is None and et != 34)


# ---------------------------------------------------------------------------------------------
# Bad input: one sentence, exit code 3


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found") as err:
        load_trace(tmp_path / "nope.sqlite")
    assert err.value.exit_code == EXIT_INPUT
    with pytest.raises(InputError, match="is a directory, not a capture.*parquetdir"):  # not an export folder
        load_trace(tmp_path)


def test_garbage_bytes_and_empty_file(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(os.urandom(8192))
    with pytest.raises(InputError, match="not an SQLite database"):
        load_trace(junk)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="not an SQLite database"):
        load_trace(empty)


@needs_fixtures
def test_truncated_copy_of_a_real_export(nsys_fixtures, tmp_path):
    src = nsys_fixture_files()[FIXTURES.index(H100_FIXTURE)]
    cut = tmp_path / "cut.sqlite"
    data = src.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated") as err:
        load_trace(cut)
    assert "\n" not in str(err.value)


@needs_fixtures
def test_corrupt_pages_in_a_real_export(nsys_fixtures, tmp_path):
    src = nsys_fixture_files()[FIXTURES.index(H100_FIXTURE)]
    bad = tmp_path / "bad.sqlite"
    data = bytearray(src.read_bytes())
    rng = np.random.default_rng(1)
    data[4096:] = rng.integers(0, 256, len(data) - 4096, dtype=np.uint8).tobytes()
    bad.write_bytes(bytes(data))
    bad.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(InputError, match="corrupt|not an Nsight|not a readable") as err:
        load_trace(bad)
    assert "\n" not in str(err.value)


def test_sqlite_file_that_is_not_an_nsys_export(tmp_path):
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (id INTEGER, total REAL)")
    con.execute("INSERT INTO orders VALUES (1, 2.5)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        load_trace(path)


def test_nsys_rep_without_nsys(tmp_path, monkeypatch):
    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("TRTPROF_NSYS", raising=False)
    with pytest.raises(InputError, match="'nsys' is not on PATH"):
        load_trace(rep)
    with pytest.raises(InputError, match="not found"):
        load_trace(tmp_path / "absent.nsys-rep")


@needs_fixtures
def test_nsys_rep_exported_with_fake_nsys(nsys_fixtures, tmp_path, monkeypatch):
    """FakeNsys: a script standing in for nsys that records its arguments and writes a real export."""
    src = nsys_fixture_files()[FIXTURES.index(GRAPH_FIXTURE)]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "fake_nsys_args.txt"
    fake = bin_dir / "nsys"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {log}
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ] || [ "$1" = "--output" ]; then out="$2"; fi
  shift
done
cp {src} "$out"
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"report")
    tr = load_trace(rep)
    assert len(tr.graphs) == 2 and tr.meta["source_path"] == str(rep)
    args = log.read_text().split()
    assert args[:5] == ["export", "--type", "sqlite", "--force-overwrite", "true"]
    assert args[-1] == str(rep) and (tmp_path / "capture.sqlite").is_file()
    # a fresh export beside the report is reused without running nsys again
    load_trace(rep)
    assert len(log.read_text().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# Building traces by hand


def test_trace_from_frames_fills_the_contract():
    k = pd.DataFrame({"start_ns": [5, 1], "end_ns": [9, 3], "name": ["b", "a"]})
    tr = Trace.from_frames(kernels=k)
    assert list(tr.kernels.columns)[:3] == ["start_ns", "end_ns", "name"]
    assert set(SCHEMAS["kernels"]) <= set(tr.kernels.columns)
    assert tr.kernels["api_tid"].tolist() == [-1, -1]
    assert tr.kernels["graph_node_id"].isna().all()
    assert len(tr.nvtx) == 0 and list(tr.nvtx.columns) == list(SCHEMAS["nvtx"])
    assert tr.meta["capture_start_ns"] == 1 and tr.meta["capture_end_ns"] == 9 and tr.meta["missing"] == []
    act = tr.gpu_activity()
    assert act["start_ns"].tolist() == [1, 5] and act["name"].astype(str).tolist() == ["a", "b"]
    with pytest.raises(TypeError):
        Trace.from_frames(kernel=k)
    m = Trace(memcpy=pd.DataFrame({"start_ns": [0], "end_ns": [4], "copy_kind": ["DtoH"], "bytes": [64]}))
    assert m.memcpy["copy_kind"].dtype == enum_dtype("copy_kind")
    assert m.gpu_activity()["name"].astype(str).tolist() == ["[memcpy DtoH]"]
    assert empty_frame("api").dtypes.to_dict() == Trace().api.dtypes.to_dict()


@needs_fixtures
@pytest.mark.parametrize("name", [NCCL_FIXTURE, DOMAIN_FIXTURE])
def test_partitioned_parallel_read_equals_one_scan(nsys_fixtures, name, monkeypatch):
    from profiler.capture import export as loader

    monkeypatch.setattr(loader, "PARTITION_MIN_ROWS", 7)
    monkeypatch.setenv("TRTPROF_READ_THREADS", "3")
    parallel = load_trace(nsys_fixture_files()[FIXTURES.index(name)])
    whole = loaded(name)
    for frame in FRAMES:
        a, b = getattr(parallel, frame), getattr(whole, frame)
        pd.testing.assert_frame_equal(
            a.astype({c: str for c in a.columns if isinstance(a[c].dtype, pd.CategoricalDtype)}),
            b.astype({c: str for c in b.columns if isinstance(b[c].dtype, pd.CategoricalDtype)}))
    with loader.Export(nsys_fixture_files()[FIXTURES.index(name)]) as export:
        n = export.count("CUPTI_ACTIVITY_KIND_RUNTIME")
        parts = export._partitions("CUPTI_ACTIVITY_KIND_RUNTIME", n)
    assert len(parts) == 3 and parts[0][0] == 1 and parts[-1][1] == n  # rowids 1..n, three ranges
    assert all(b + 1 == c for (_, b), (c, _) in zip(parts[:-1], parts[1:]))


@needs_fixtures
@pytest.mark.parametrize("name", [NCCL_FIXTURE, DOMAIN_FIXTURE])
@pytest.mark.parametrize("threads", ["2", "8"])
def test_tables_read_at_once_equal_one_after_another(nsys_fixtures, name, threads, monkeypatch):
    from profiler.capture import export as reader

    path = nsys_fixture_files()[FIXTURES.index(name)]
    started, original = [], reader.Export.prefetch

    def counting(self, reads, n):
        started.append((len(reads), original(self, reads, n)))
        return started[-1][1]

    monkeypatch.setattr(reader.Export, "prefetch", counting)
    monkeypatch.setattr(reader, "PARTITION_MIN_ROWS", 7)  # large tables split in ranges too, inside each read
    monkeypatch.setenv("TRTPROF_READ_THREADS", "3")
    monkeypatch.setenv("TRTPROF_TABLE_THREADS", threads)
    together = load_trace(path)
    monkeypatch.setenv("TRTPROF_TABLE_THREADS", "1")
    apart = load_trace(path)
    assert started[0][0] >= 3 and started[0][1] == started[0][0]  # every table read went through the pool
    assert started[1][1] == 0  # one thread: no pool
    for frame in FRAMES:
        a, b = getattr(together, frame), getattr(apart, frame)
        pd.testing.assert_frame_equal(
            a.astype({c: str for c in a.columns if isinstance(a[c].dtype, pd.CategoricalDtype)}),
            b.astype({c: str for c in b.columns if isinstance(b[c].dtype, pd.CategoricalDtype)}))
    assert json.dumps(together.meta, default=str) == json.dumps(apart.meta, default=str)  # notes in the same order


def test_table_threads_default_and_override(monkeypatch):
    from profiler.capture import export as reader

    monkeypatch.delenv("TRTPROF_TABLE_THREADS", raising=False)
    assert reader.table_threads(4) == reader.TABLE_THREADS_DEFAULT == 1  # measured no faster at once
    monkeypatch.setenv("TRTPROF_TABLE_THREADS", "auto")
    monkeypatch.setattr(reader.os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    assert reader.table_threads(4) == 4
    monkeypatch.setattr(reader.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert reader.table_threads(4) == 2
    monkeypatch.setenv("TRTPROF_TABLE_THREADS", "3")
    assert reader.table_threads(4) == 3
    monkeypatch.setenv("TRTPROF_TABLE_THREADS", "x")
    assert reader.table_threads(3) == 1


# ---------------------------------------------------------------------------------------------
# Our own H200 captures (sample_traces/, nsys 2025.3): facts known by construction

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
needs_samples = pytest.mark.skipif(not (SAMPLES / "launch_bound.sqlite").is_file(),
                                   reason="sample_traces/ has no captures")


@lru_cache(maxsize=None)
def sample(name: str) -> Trace:
    return load_trace(SAMPLES / f"{name}.sqlite")


@needs_samples
def test_sample_launch_bound_ranges_and_launches():
    tr = sample("launch_bound")
    iters = tr.nvtx[tr.nvtx["name"] == "launch_bound.iter"]
    assert len(iters) == 100 and set(iters["domain"]) == {""} and iters["end_ns"].notna().all()
    assert tr.meta["nsys_version"].startswith("2025.3")
    # every kernel has its launch call, on the thread that opened the ranges, starting before it
    assert tr.meta["correlation"]["kernels"] == 1.0
    k = tr.kernels
    assert (k["api_start_ns"] <= k["start_ns"]).all()
    loop_tid = int(iters["global_tid"].iloc[0])
    inside = k[(k["api_tid"] == loop_tid) & (k["api_start_ns"] >= iters["start_ns"].min())
               & (k["api_start_ns"] <= iters["end_ns"].max())]
    assert len(inside) == 100 * 100  # 100 iterations x 100 kernels
    launches = tr.api[tr.api["category"] == "launch"]
    assert len(launches) == len(k)


@needs_samples
def test_sample_graph_has_graph_launches_not_kernels():
    tr = sample("graph")
    assert len(tr.graphs) == 105  # README: 105 graph launches, the graph's kernels absent
    assert len(tr.kernels) == 303
    assert (tr.api["category"] == "graph_launch").sum() == 105
    assert tr.meta["correlation"]["graphs"] == 1.0
    assert tr.gpu_activity()["kind"].astype(str).value_counts()["graph"] == 105
    node = sample("graph_node")
    assert len(node.graphs) == 0 and node.kernels["graph_node_id"].notna().sum() >= 100 * 100


@needs_samples
def test_sample_host_stall_shows_clock_nanosleep_on_the_query_thread():
    tr = sample("host_stall")
    q = tr.nvtx[tr.nvtx["name"] == "host_stall.query"].sort_values("start_ns").reset_index(drop=True)
    assert len(q) == 100
    sleeps = tr.osrt[(tr.osrt["name"] == "clock_nanosleep")
                     & (tr.osrt["end_ns"] - tr.osrt["start_ns"] >= 4_900_000)]
    owner = np.searchsorted(q["start_ns"].to_numpy(), sleeps["start_ns"].to_numpy(), side="right") - 1
    safe = np.maximum(owner, 0)
    inside = ((owner >= 0) & (sleeps["end_ns"].to_numpy() <= q["end_ns"].to_numpy(dtype=np.int64)[safe])
              & (sleeps["global_tid"].to_numpy() == q["global_tid"].to_numpy()[safe]))
    stalled = sorted(set(owner[inside].tolist()))
    assert stalled == [7, 17, 27, 37, 47, 57, 67, 77, 87, 97]
    assert set(tr.sync["sync_type"].astype(str)) == {"stream"}


@needs_samples
def test_sample_pageable_and_pinned_copies():
    tr = sample("pageable_vs_pinned")
    m = tr.memcpy
    h2d = m[m["copy_kind"] == "HtoD"]
    d2h = m[m["copy_kind"] == "DtoH"]
    assert (h2d["bytes"] == 16 * 2**20).sum() >= 80 and (d2h["bytes"] == 16 * 2**20).sum() >= 80
    assert (h2d["src_kind"] == "pageable").sum() == 43 and (h2d["src_kind"] == "pinned").sum() == 43
    assert (d2h["dst_kind"] == "pageable").sum() == 43 and (d2h["dst_kind"] == "pinned").sum() == 43
    assert set(m["api_name"].astype(str)) <= {"cudaMemcpyAsync", "cudaMemcpy"}


@needs_samples
def test_sample_without_nvtx_is_one_window():
    tr = sample("no_nvtx")
    assert len(tr.nvtx) == 0 and any("no NVTX" in m for m in tr.meta["missing"])
    assert len(tr.kernels) == 6501
    sync = sample("sync_heavy")
    assert int((sync.api["name"] == "cudaDeviceSynchronize").sum()) >= 480
    assert set(sync.api.loc[sync.api["name"] == "cudaDeviceSynchronize", "category"]) == {"sync"}


@needs_fixtures
def test_paths_with_spaces_and_uri_characters(nsys_fixtures, tmp_path):
    odd = tmp_path / "my captures #1 ?%" / "run 1.sqlite"
    odd.parent.mkdir()
    shutil.copyfile(nsys_fixture_files()[FIXTURES.index(GRAPH_FIXTURE)], odd)
    tr = load_trace(odd)
    assert len(tr.graphs) == 2 and tr.meta["reader"] in ("adbc", "sqlite3")


def _nsys_csv(name: str) -> list[dict[str, str]] | None:
    """Rows of an `nsys stats` CSV in sample_traces/reference (None when absent; [] when empty)."""
    import csv

    path = SAMPLES / "reference" / name
    if not path.is_file():
        return None
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.sqlite")) if SAMPLES.is_dir() else []


@needs_samples
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sample_kernel_api_and_nvtx_sums_equal_nsys_stats(name):
    """Our frames reproduce `nsys stats` (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum) on the same export."""
    tr = sample(name)
    kern, api, nvtx = (_nsys_csv(f"{name}_stats_{r}.csv") for r in ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum"))
    if kern is None or api is None:
        pytest.skip(f"no nsys stats reference for {name}")
    k = tr.kernels.assign(d=tr.kernels["end_ns"] - tr.kernels["start_ns"])
    ours = k.groupby("name", observed=True)["d"].agg(["count", "sum"])
    theirs = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in kern}
    assert {n: (int(c), int(s)) for n, (c, s) in ours.iterrows()} == theirs
    a = tr.api.assign(d=tr.api["end_ns"] - tr.api["start_ns"])
    ours_api = a.groupby("name", observed=True)["d"].agg(["count", "sum"])
    theirs_api: dict[str, tuple[int, int]] = {}
    for r in api:
        # nsys strips 4-digit version suffixes (_v7000) but keeps 5-digit ones (_v10000); we strip all
        key = normalize_api_name(r["Name"])
        c0, s0 = theirs_api.get(key, (0, 0))
        theirs_api[key] = (c0 + int(r["Num Calls"]), s0 + int(r["Total Time (ns)"]))
    assert {n: (int(c), int(s)) for n, (c, s) in ours_api.iterrows()} == theirs_api
    assert len(theirs_api) > 3
    if nvtx is not None:
        ranges = tr.nvtx[tr.nvtx["event_type"] != "mark"]
        n = ranges.assign(d=ranges["end_ns"] - ranges["start_ns"], key=ranges["domain"].astype(str) + ":" +
                          ranges["name"].astype(str))
        ours_nvtx = n.groupby("key")["d"].agg(["count", "sum"])
        theirs_nvtx = {r["Range"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in nvtx}
        assert {key: (int(c), int(s)) for key, (c, s) in ours_nvtx.iterrows()} == theirs_nvtx


@needs_fixtures
def test_cli_exits_3_with_one_sentence_on_bad_captures(nsys_fixtures, tmp_path):
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("profiler.cli.analyze") is None:
        pytest.skip("trtprof analyze is not in this checkout")
    cut = tmp_path / "cut.sqlite"
    data = nsys_fixture_files()[FIXTURES.index(H100_FIXTURE)].read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    rep = tmp_path / "capture.nsys-rep"
    rep.write_bytes(b"x")
    env = {**os.environ, "PATH": str(tmp_path / "no-bin")}
    # (the other bad inputs raise the same InputError in-process; three subprocesses keep this quick)
    for bad, words in ((cut, "truncated"), (other, "not an Nsight Systems export"), (rep, "'nsys' is not on PATH")):
        proc = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(bad), "--no-store"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == EXIT_INPUT, (bad, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, (bad, proc.stderr)


# -- reading only some columns (what the analysis does) -------------------------------------------
def test_restricted_columns_read_those_and_leave_placeholders(tmp_path):
    """``columns=`` on a real capture (one of our own H200 sample traces): the asked-for columns, the
    times, ids and API link equal a full read; every other column of that frame is its placeholder."""
    path = Path(__file__).resolve().parents[1] / "sample_traces" / "launch_bound.sqlite"
    full = load_trace(path)
    part = load_trace(path, columns={"kernels": {"name"}, "api": {"name"}})
    # read besides what was asked for: times, ids, the device and the API link but the call's end
    # (kernels); times, ids and category (api)
    always = {"kernels": {"start_ns", "end_ns", "device_id", "correlation_id", "pid", "graph_node_id", "graph_id",
                          "api_tid", "api_start_ns"},
              "api": {"start_ns", "end_ns", "pid", "global_tid", "category"}}
    for frame in ("kernels", "api"):
        f, p = getattr(full, frame), getattr(part, frame)
        assert list(p.columns) == list(f.columns) and len(p) == len(f) > 1000
        for col in f.columns:
            if col == "name" or col in always[frame]:
                assert p[col].equals(f[col]), (frame, col)
                continue
            assert not p[col].equals(f[col]), (frame, col)  # the capture has real values there
            assert p[col].dtype.name == f[col].dtype.name, (frame, col)
            assert p[col].nunique(dropna=False) == 1, (frame, col)  # one placeholder value on every row
    assert part.nvtx.equals(full.nvtx) and part.memcpy.equals(full.memcpy)  # other frames read whole
    with pytest.raises(ValueError, match="contract columns"):
        load_trace(path, columns={"kernels": {"no_such_column"}})
    with pytest.raises(ValueError, match="contract columns"):
        load_trace(path, columns={"nvtx": {"text"}})


def test_absent_columns_name_only_tables_the_export_has():
    """A table the export lacks is reported missing, not as a table whose columns are absent."""
    traces = sorted((Path(__file__).resolve().parents[1] / "sample_traces").glob("*.sqlite"))
    assert len(traces) >= 10
    seen_without_memcpy = 0
    for path in traces:
        with sqlite3.connect(path) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        absent = load_trace(path).meta.get("absent_columns") or {}
        assert set(absent) <= tables, (path.name, sorted(set(absent) - tables))
        seen_without_memcpy += "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables
    assert seen_without_memcpy >= 1  # the case that matters is among them


@pytest.mark.parametrize("reader", ["adbc", "sqlite3"])
@pytest.mark.parametrize("bad_row", [None, 3, 70_000])  # none, inside the first batch, after it
def test_unguarded_scan_is_kept_only_when_every_value_is_an_integer(tmp_path, monkeypatch, reader, bad_row):
    """The loader first reads integer columns without SQL's typeof guards; a text or real value anywhere
    (first batch or later, ADBC or sqlite3) falls back to the guarded query, so the values equal it."""
    from profiler.capture import export as L
    from profiler.capture.validate import int_sql

    if reader == "adbc" and L._adbc_dbapi() is None:
        pytest.skip("adbc-driver-sqlite is not installed")
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE T (start INTEGER, end INTEGER)")
    rows = [(i, i + 5) for i in range(80_000)]
    if bad_row is not None:
        rows[bad_row] = ("abc", 1.5)
    con.executemany("INSERT INTO T VALUES (?, ?)", rows)
    con.commit()
    con.close()
    if reader == "sqlite3":
        monkeypatch.setattr(L, "_adbc_dbapi", lambda: None)
    export = L.Export(path)
    scans = []
    real_scan = export._scan
    monkeypatch.setattr(export, "_scan", lambda *a, **k: scans.append(k.get("integers_only", False))
                        or real_scan(*a, **k))
    got = export.fetch(f"SELECT {int_sql('start')} AS s, coalesce({int_sql('end')}, -1) AS e", "T")
    want_s = np.arange(80_000, dtype=np.int64)
    want_e = want_s + 5
    if bad_row is not None:
        want_s[bad_row], want_e[bad_row] = L.NULL_INT, -1
    np.testing.assert_array_equal(got["s"], want_s)
    np.testing.assert_array_equal(got["e"], want_e)
    assert scans == ([True] if bad_row is None else [True, False])
