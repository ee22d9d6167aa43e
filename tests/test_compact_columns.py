"""Constant id columns (one process, one GPU, one thread) of a restricted read (the analysis' own) are held
as zero-stride views: no memory per row, the same values, and the same analysis as full columns. A full
read gives writable columns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profiler.capture import ids, loader
from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze_path
from profiler.capture.frames import i64
from profiler.capture.ids import compact_constant
from profiler.capture.loader import load_trace
from profiler.capture.trace import FRAMES

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_a_constant_id_column_becomes_a_zero_stride_view_of_its_value():
    pid = np.full(1000, 4242, dtype=np.int32)
    out = compact_constant("pid", pid)
    assert out.strides == (0,) and out.dtype == np.int32 and out.shape == (1000,)
    assert (out == 4242).all()
    varying = pid.copy()
    varying[-1] = 7
    assert compact_constant("pid", varying) is varying  # one other value: kept as it is
    assert compact_constant("start_ns", np.zeros(1000, np.int64)).strides == (8,)  # not an id column


def test_i64_keeps_a_constant_int32_column_zero_stride():
    import pandas as pd

    df = pd.DataFrame(copy=False, data={"device_id": compact_constant("device_id", np.zeros(50, np.int32))})
    got = i64(df, "device_id")
    assert got.dtype == np.int64 and got.strides == (0,) and got.tolist() == [0] * 50


@pytest.mark.parametrize("name", ["launch_bound.sqlite", "multistream.sqlite"])
def test_compact_columns_give_the_same_trace_values_and_analysis(name, monkeypatch):
    path = SAMPLES / name
    compact = load_trace(path, tables=[f for f in FRAMES if f != "sync"], columns=ANALYSIS_COLUMNS)
    assert compact.kernels["pid"].to_numpy().strides == (0,)  # one process captured
    got = json.dumps(analyze_path(path, cache=False).to_json(), sort_keys=True, default=str)
    monkeypatch.setattr(loader, "compact_constant", lambda column, values: values)
    monkeypatch.setattr(ids, "compact_constant", lambda column, values: values)
    full = load_trace(path, tables=[f for f in FRAMES if f != "sync"], columns=ANALYSIS_COLUMNS)
    assert full.kernels["pid"].to_numpy().strides != (0,)
    for frame in ("kernels", "api", "osrt"):
        a, b = getattr(compact, frame), getattr(full, frame)
        for col in ids.CONSTANT_ID_COLUMNS & set(a.columns):
            assert a[col].tolist() == b[col].tolist(), (frame, col)
    assert json.dumps(analyze_path(path, cache=False).to_json(), sort_keys=True, default=str) == got


def test_global_thread_ids_decode_in_blocks_and_a_constant_one_stays_zero_stride(monkeypatch):
    from profiler.capture import trace

    monkeypatch.setattr(trace, "_DECODE_ROWS", 7)
    g = np.random.default_rng(3).integers(0, 2**48, 50)
    pid, tid = trace.decode_global_tid(g)
    assert pid.tolist() == ((g >> 24) & 0xFFFFFF).tolist() and tid.tolist() == (g & 0xFFFFFF).tolist()
    assert pid.dtype == tid.dtype == np.int32
    const = np.broadcast_to(np.int64((4242 << 24) | 17), (1000,))
    pid, tid = trace.decode_global_tid(const)
    assert pid.strides == tid.strides == (0,) and int(pid[999]) == 4242 and int(tid[0]) == 17


def test_a_full_read_gives_writable_columns_a_restricted_one_read_only_views():
    path = SAMPLES / "launch_bound.sqlite"
    full = load_trace(path)
    full.kernels.loc[0, "pid"] = 7  # a notebook may edit what it loaded
    assert full.kernels["pid"].iloc[0] == 7 and full.kernels["pid"].iloc[1] != 7
    part = load_trace(path, columns={"kernels": {"name"}})
    with pytest.raises(ValueError):
        part.kernels["pid"].to_numpy()[0] = 7


def test_a_cached_restricted_read_keeps_the_views_and_a_cached_full_read_does_not(tmp_path):
    from profiler.capture.cache import TraceCache, load_trace_cached

    path = SAMPLES / "launch_bound.sqlite"
    store = TraceCache(tmp_path)
    for _ in range(2):  # stored, then read back
        part = load_trace_cached(path, columns={"kernels": {"name"}}, cache=store)
        full = load_trace_cached(path, cache=store)
    assert part.meta["cache"] == full.meta["cache"] == "hit"
    assert part.kernels["pid"].to_numpy().strides == (0,)
    assert full.kernels["pid"].to_numpy().strides != (0,)
    assert part.kernels["pid"].tolist() == full.kernels["pid"].tolist()
