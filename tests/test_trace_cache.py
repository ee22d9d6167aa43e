"""The columnar cache of loaded captures: same frames and same analysis as the export, and never
another file's data."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pandas as pd
import pytest

from profiler.capture import cache as C
from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze, analyze_path
from profiler.capture.loader import load_trace
from profiler.capture.trace import FRAMES
from tests.conftest import NSYS_FIXTURES, SAMPLE_TRACES, SHARED

TABLES = [f for f in FRAMES if f != "sync"]
# one of each shape: CUDA-graph trace, nested NVTX, two GPUs, TensorRT layer ranges, no NVTX, OS runtime
CAPTURES = [
    NSYS_FIXTURES / "v2025.5.2_flameox_CUDAGRAPH_graph_trace.sqlite",
    NSYS_FIXTURES / "v2024.6.2_nvfuser_h200_nvtx652.sqlite",
    NSYS_FIXTURES / "v2026.2.1_nsysai_mfu_2gpu_before.sqlite",
    SHARED / "fixtures" / "nsys-tensorrt" / "multistream_HtoD-bound.sqlite",
    SAMPLE_TRACES / "no_nvtx.sqlite",
    SAMPLE_TRACES / "host_stall.sqlite",
]


def _doc(trace) -> str:
    return json.dumps(analyze(trace).to_json(), sort_keys=True, allow_nan=False)


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_a_cache_hit_gives_the_frames_and_the_analysis_of_the_export(path, tmp_path):
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    store = C.TraceCache(tmp_path)
    cold = C.load_trace_cached(path, tables=TABLES, columns=ANALYSIS_COLUMNS, cache=store)
    hit = C.load_trace_cached(path, tables=TABLES, columns=ANALYSIS_COLUMNS, cache=store)
    assert (cold.meta.pop("cache"), hit.meta.pop("cache")) == ("stored", "hit")
    plain = load_trace(path, tables=TABLES, columns=ANALYSIS_COLUMNS)
    for name in FRAMES:  # dtypes, categories and values, exactly
        pd.testing.assert_frame_equal(getattr(hit, name), getattr(plain, name), check_exact=True)
    assert hit.meta == plain.meta
    assert _doc(hit) == _doc(plain)


@pytest.fixture
def capture(tmp_path):
    src = SAMPLE_TRACES / "multistream.sqlite"
    if not src.is_file():
        pytest.skip("sample_traces/multistream.sqlite is absent")
    dst = tmp_path / "cap.sqlite"
    shutil.copyfile(src, dst)
    return dst


def test_another_capture_at_the_same_path_with_the_same_size_and_mtime_is_not_served(capture, tmp_path):
    store = C.TraceCache(tmp_path / "cache")
    first = C.load_trace_cached(capture, cache=store)
    other = SAMPLE_TRACES / "sync_heavy.sqlite"
    st = capture.stat()
    data = bytearray(other.read_bytes())
    data = (data + bytes(max(0, st.st_size - len(data))))[: max(st.st_size, len(data))]
    capture.write_bytes(bytes(data))
    os.utime(capture, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = C.load_trace_cached(capture, cache=store)
    assert second.meta["cache"] == "stored"  # a miss: read from the file
    assert len(second.kernels) == len(load_trace(capture).kernels) != len(first.kernels)


def test_a_new_loader_version_or_another_request_is_a_miss(capture, tmp_path, monkeypatch):
    store = C.TraceCache(tmp_path / "cache")
    assert C.load_trace_cached(capture, cache=store).meta["cache"] == "stored"
    assert C.load_trace_cached(capture, tables=["kernels"], cache=store).meta["cache"] == "stored"
    monkeypatch.setattr(C, "_loader_version", "another-loader")
    assert C.load_trace_cached(capture, cache=store).meta["cache"] == "stored"
    assert len([p for p in store.root.iterdir()]) == 3


def test_a_damaged_entry_is_a_miss_and_is_replaced(capture, tmp_path):
    store = C.TraceCache(tmp_path / "cache")
    C.load_trace_cached(capture, cache=store)
    (entry,) = store.root.iterdir()
    (entry / "kernels.parquet").write_bytes(b"PAR1 not really")
    again = C.load_trace_cached(capture, cache=store)
    assert again.meta["cache"] == "stored"
    assert C.load_trace_cached(capture, cache=store).meta["cache"] == "hit"
    pd.testing.assert_frame_equal(C.load_trace_cached(capture, cache=store).kernels, load_trace(capture).kernels)


def test_concurrent_writers_of_one_key_leave_one_whole_entry(capture, tmp_path):
    store = C.TraceCache(tmp_path / "cache")
    trace = load_trace(capture)
    key = C.cache_key(C.file_sha256(capture), None, None)
    results = []
    threads = [threading.Thread(target=lambda: results.append(store.put(key, trace))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4
    assert [p.name for p in store.root.iterdir()] == [key]  # no temporary folder left
    pd.testing.assert_frame_equal(store.get(key, capture).kernels, trace.kernels)


def test_an_unwritable_cache_never_stops_the_analysis(capture, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    trace = C.load_trace_cached(capture, cache=C.TraceCache(blocker / "cache"))
    assert trace.meta["cache"] == "off" and len(trace.kernels) == len(load_trace(capture).kernels)


def test_the_cache_can_be_turned_off(capture, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TRTPROF_TRACE_CACHE", "0")
    analyze_path(capture)
    assert not (tmp_path / "c").exists()
    monkeypatch.delenv("TRTPROF_TRACE_CACHE")
    analyze_path(capture, cache=False)
    assert not (tmp_path / "c").exists()
    analyze_path(capture)
    assert len(list((tmp_path / "c" / "traces").iterdir())) == 1


def test_cli_output_is_byte_identical_cold_and_cached(capture, tmp_path, monkeypatch):
    from profiler.cli import main

    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "c"))
    outs = []
    for i, extra in enumerate((["--no-cache"], [], [])):
        out = tmp_path / f"{i}.json"
        with pytest.raises(SystemExit) as exc:
            main(["analyze", str(capture), "--no-store", "--json", str(out), *extra])
        assert exc.value.code == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    # the repeat was answered by the analysis cache: frames are kept from a second, different analysis on
    assert not (tmp_path / "c" / "traces").exists()
    assert len([p for p in (tmp_path / "c" / "analyses").iterdir() if p.name != "seen"]) == 1
