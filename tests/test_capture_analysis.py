"""Capture analysis: NVTX series, GPU busy projection, outliers, JSON; real exports and synthetic edges.

Real data first: every nsys export in ../shared/fixtures/nsys and every sample trace is analysed and
cross-checked against independent SQL over the same SQLite file. Synthetic ``Trace`` frames cover
what real captures lack (nested and recursive ranges, other threads, never-closed ranges, negative
timestamps, empty captures).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import stats
from profiler.capture import series as S
from profiler.capture.analyze import analyze
from profiler.capture.trace import Trace
from tests.capture_builders import T, api, kernels, ranges, result_of
from tests.conftest import SAMPLE_TRACES, nsys_fixture_files

SAMPLES = sorted(SAMPLE_TRACES.glob("*.sqlite"))
ALL_CAPTURES = nsys_fixture_files() + SAMPLES
def only_range(res, name: str) -> dict:
    [r] = [r for r in res.to_json()["ranges"] if r["name"] == name]
    return r


# ----------------------------------------------------------------------------- synthetic: busy time

def test_busy_is_union_of_intervals_not_first_to_last_span():
    # Launch-bound shape: three 1 us kernels spread over a 100 us range.
    k = kernels((10 * T, 11 * T, 5, 9 * T), (50 * T, 51 * T, 5, 49 * T), (90 * T, 91 * T, 5, 89 * T))
    res = analyze(Trace(kernels=k, nvtx=ranges(("it", 0, 100 * T, 5))))
    r = only_range(res, "it")
    assert r["instances"]["gpu_busy_ms"] == [pytest.approx(0.003)]  # 3 us, not the 81 us span
    assert r["instances"]["wall_ms"] == [pytest.approx(0.1)]
    assert r["gpu_busy_fraction"] == pytest.approx(0.03)
    assert r["launches_per_instance"] == 3


def test_busy_unions_overlapping_streams_copies_memsets_and_graphs():
    k = kernels((10 * T, 30 * T, 5, 1 * T), (20 * T, 40 * T, 5, 2 * T, 2))  # overlap: union 30 us
    mc = pd.DataFrame([{"start_ns": 35 * T, "end_ns": 50 * T, "api_tid": 5, "api_start_ns": 3 * T, "bytes": 4096,
                        "copy_kind": "HtoD", "src_kind": "pinned", "dst_kind": "device", "correlation_id": 3,
                        "device_id": 0, "stream_id": 8, "pid": 1}])
    ms = pd.DataFrame([{"start_ns": 60 * T, "end_ns": 62 * T, "api_tid": 5, "api_start_ns": 4 * T, "bytes": 64,
                        "correlation_id": 4, "device_id": 0, "stream_id": 7, "pid": 1}])
    gr = pd.DataFrame([{"start_ns": 70 * T, "end_ns": 80 * T, "api_tid": 5, "api_start_ns": 5 * T,
                        "correlation_id": 5, "device_id": 0, "stream_id": 7, "pid": 1, "graph_id": 1}])
    res = analyze(Trace(kernels=k, memcpy=mc, memset=ms, graphs=gr, nvtx=ranges(("it", 0, 10 * T, 5))))
    inst = res.context.table.instances.iloc[0]
    assert inst["gpu_busy_ns"] == (50 - 10) * T + 2 * T + 10 * T  # [10,50) U [60,62) U [70,80)
    assert inst["copy_ns"] == 15 * T
    assert inst["compute_ns"] == 30 * T + 2 * T + 10 * T
    assert inst["launches"] == 3  # two kernels and one graph launch; copies and memsets are not launches
    # GPU work launched in the range but running after it still counts; the fraction is over the longer of
    # the wall time and the span of that work (10 to 80 us), never over the 10 us wall (which gave 520%)
    assert only_range(res, "it")["gpu_busy_fraction"] == pytest.approx(52 / 70)


def test_attribution_needs_same_thread_and_launch_inside_the_range():
    k = kernels((20 * T, 30 * T, 5, 15 * T),      # thread 5, launched inside: counted
                (40 * T, 50 * T, 6, 45 * T),      # thread 6, which opens ranges of its own: not counted
                (60 * T, 70 * T, 5, 5 * T),       # launched before the range although it runs inside it
                (120 * T, 130 * T, 5, 99 * T))    # launched inside, runs after the range: counted
    res = analyze(Trace(kernels=k, nvtx=ranges(("it", 10 * T, 100 * T, 5), ("other", 200 * T, 210 * T, 6))))
    inst = res.context.table.instances.iloc[0]
    assert res.context.table.series["name"].iat[int(inst["series_id"])] == "it"
    assert inst["gpu_busy_ns"] == 20 * T
    assert inst["kernels"] == 2


def test_nested_and_recursive_ranges_each_get_their_work_and_depth():
    k = kernels((20 * T, 22 * T, 5, 15 * T), (40 * T, 44 * T, 5, 35 * T), (80 * T, 81 * T, 5, 75 * T))
    nv = ranges(("outer", 0, 100 * T, 5), ("inner", 10 * T, 50 * T, 5), ("inner", 30 * T, 40 * T, 5),
                ("other_thread", 0, 100 * T, 6))
    res = analyze(Trace(kernels=k, nvtx=nv))
    table = res.context.table
    assert only_range(res, "outer")["instances"]["gpu_busy_ms"] == [pytest.approx(0.007)]
    inner = only_range(res, "inner")
    assert inner["count"] == 2
    assert inner["instances"]["gpu_busy_ms"] == [pytest.approx(0.006), pytest.approx(0.004)]  # start order
    assert only_range(res, "other_thread")["instances"]["gpu_busy_ms"] == [0.0]
    inst = table.instances
    sid = {n: i for i, n in enumerate(table.series["name"])}
    outer_row = int(np.flatnonzero(inst["series_id"].to_numpy() == sid["outer"])[0])
    depth = {(table.series["name"][s], i): (d, p) for s, i, d, p in
             zip(inst["series_id"], inst["idx"], inst["depth"], inst["parent"])}
    assert depth[("outer", 0)] == (0, -1)
    assert depth[("inner", 0)] == (1, outer_row)
    assert depth[("inner", 1)][0] == 2  # the recursive inner range sits inside the first inner
    assert depth[("other_thread", 0)] == (0, -1)
    assert table.ancestor_share(sid["inner"]) == {sid["outer"]: 1.0}


def test_never_closed_negative_and_cross_thread_ranges_are_reported():
    nv = ranges(("ok", 0, 10 * T, 5), ("open", 5 * T, None, 5), ("bad", 50 * T, 40 * T, 5),
                ("se", 0, 20 * T, 5, "", "start_end", 9), ("mark", 3 * T, None, 5, "", "mark"))
    res = analyze(Trace(kernels=kernels((1 * T, 2 * T, 5, 500)), nvtx=nv))
    data = res.to_json()
    names = sorted(r["name"] for r in data["ranges"])
    assert names == ["ok", "se"]
    warnings = " ".join(data["capture"]["warnings"])
    assert "1 NVTX range(s) were never closed" in warnings
    assert "1 NVTX range(s) end before they start" in warnings
    assert "1 NVTX start/end range(s) end on another thread" in warnings


def test_no_nvtx_is_one_window_over_all_threads():
    k = kernels((10 * T, 20 * T, 5, 8 * T), (30 * T, 40 * T, 6, 29 * T), (50 * T, 55 * T, -1, -1))
    res = analyze(Trace(kernels=k))
    data = res.to_json()
    [r] = data["ranges"]
    assert r["name"] == S.WINDOW_NAME and r["count"] == 1
    assert r["instances"]["wall_ms"] == [pytest.approx(0.047)]  # first launch (8 us) to last end (55 us)
    assert r["instances"]["gpu_busy_ms"] == [pytest.approx(0.025)]  # every thread's work, known or not
    assert any("one window" in m for m in data["capture"]["missing"])


def test_empty_capture_and_negative_timestamps():
    data = analyze(Trace()).to_json()
    assert data["ranges"] == [] and data["findings"] == []
    assert any("no GPU activity" in m for m in data["capture"]["missing"])
    json.dumps(data, allow_nan=False)
    # the same capture shifted to negative times gives the same numbers
    k = kernels((10 * T, 11 * T, 5, 9 * T), (50 * T, 52 * T, 5, 49 * T))
    nv = ranges(("it", 0, 100 * T, 5), ("it", 100 * T, 200 * T, 5))
    base = analyze(Trace(kernels=k, nvtx=nv)).to_json()["ranges"][0]
    shift = -(10**12)
    k2 = k.assign(start_ns=k.start_ns + shift, end_ns=k.end_ns + shift, api_start_ns=k.api_start_ns + shift,
                  api_end_ns=k.api_end_ns + shift)
    nv2 = nv.assign(start_ns=nv.start_ns + shift, end_ns=nv.end_ns + shift)
    neg = analyze(Trace(kernels=k2, nvtx=nv2, meta={"capture_start_ns": shift})).to_json()["ranges"][0]
    assert neg["instances"]["gpu_busy_ms"] == base["instances"]["gpu_busy_ms"] == [pytest.approx(0.003), 0.0]
    assert neg["wall_ms"] == base["wall_ms"]


def test_huge_time_span_falls_back_to_rank_keys():
    # 2**61 ns apart with many threads: thread x time keys would overflow int64, ranks keep them exact
    far = 2**61
    k = kernels((10 * T, 11 * T, 5, 9 * T), (far + 10 * T, far + 12 * T, 7, far + 9 * T))
    nv = ranges(("it", 0, 100 * T, 5), ("it", far, far + 100 * T, 7), *[(f"t{i}", 0, T, 100 + i) for i in range(40)])
    res = analyze(Trace(kernels=k, nvtx=nv))
    assert only_range(res, "it")["instances"]["gpu_busy_ms"] == [pytest.approx(0.001), pytest.approx(0.002)]
    tids = np.array([5, 7] + [100 + i for i in range(40)], dtype=np.int64)
    keys = S.ThreadKeys([tids], [np.array([0, far + 100 * T], dtype=np.int64)])
    assert keys._ranks is not None  # the span does not fit beside 42 thread codes: times become ranks
    assert res.context.table.act_sorted.key is None  # keys serve the build only, then are let go


def test_end_keys_follow_from_start_keys_in_both_key_modes():
    tid = np.array([3, 3, 9, 9, 3], dtype=np.int64)
    start = np.array([0, 5, 2, 7, 9], dtype=np.int64)
    end = start + np.array([4, 1, 0, 3, 2], dtype=np.int64)
    normal = S.ThreadKeys([tid], [start, end])
    ranked = S.ThreadKeys([tid], [start, end, np.array([0, 2**61], dtype=np.int64)])  # 2**61 ns: times as ranks
    assert normal._ranks is None and ranked._ranks is not None
    for keys in (normal, ranked):
        assert keys.shifted(keys.key(tid, start), start, end).tolist() == keys.key(tid, end).tolist()
        assert keys.shifted(keys.key(tid, start), start, end).tolist() != keys.key(tid, start).tolist()


def test_pytorch_unique_tokens_are_stripped_before_grouping():
    assert S.normalize_range_name("aten::add, seq = 12, op_id = 314359") == "aten::add"
    assert S.normalize_range_name("aten::mm, op_id = 7, sizes = [[2, 3], [3, 4]], input_op_ids = [(1, 0)]") == \
        "aten::mm, sizes = [[2, 3], [3, 4]]"
    assert S.normalize_range_name("MulBackward0, stashed seq = 5") == "MulBackward0"
    assert S.normalize_range_name("plain = name") == "plain = name"
    nv = ranges(("aten::add, op_id = 1", 0, T, 5), ("aten::add, op_id = 2", 2 * T, 3 * T, 5),
                ("aten::add, seq = 3, op_id = 9", 4 * T, 6 * T, 5))
    res = analyze(Trace(kernels=kernels((0, 1, 5, 0)), nvtx=nv))
    [r] = res.to_json()["ranges"]
    assert (r["name"], r["count"], r["distinct_raw_names"]) == ("aten::add", 3, 3)


def test_domains_make_separate_series():
    nv = ranges(("step", 0, T, 5, "A"), ("step", 2 * T, 3 * T, 5, "B"), ("step", 4 * T, 5 * T, 5, "A"))
    res = analyze(Trace(kernels=kernels((0, 1, 5, 0)), nvtx=nv))
    got = sorted((r["domain"], r["count"]) for r in res.to_json()["ranges"])
    assert got == [("A", 2), ("B", 1)]


def test_wall_statistics_are_trtexec_summaries_and_outliers_are_indexed_in_start_order():
    walls_us = [100, 101, 99, 100, 500, 100, 102, 98, 100, 700]
    rows, t = [], 0
    for w in walls_us:
        rows.append(("q", t, t + w * T, 5))
        t += 1000 * T
    nv = ranges(*rows[::-1])  # given out of order: indices must follow start order
    res = analyze(Trace(kernels=kernels((0, 1, 5, 0)), nvtx=nv))
    r = only_range(res, "q")
    expected = stats.summarize(np.array(walls_us) / 1e3)
    assert r["wall_ms"] == {k: pytest.approx(v) for k, v in expected.items()}
    assert [o["index"] for o in r["outliers"]] == [4, 9]
    assert r["outlier_count"] == 2
    assert r["instances"]["wall_ms"] == pytest.approx([w / 1e3 for w in walls_us])


def test_outlier_causes_from_synthetic_components():
    """Four slow instances, each with a different component grown: the cause names it."""
    nv_rows, krows, arows = [], [], []
    osrt = []
    corr = 1
    for i in range(20):
        t0 = i * 10_000 * T
        wall = 100 * T
        kdur = 50 * T
        if i == 3:      # host stall: a 400 us clock_nanosleep
            wall += 400 * T
            osrt.append({"name": "clock_nanosleep", "start_ns": t0 + 10 * T, "end_ns": t0 + 410 * T,
                         "global_tid": 5, "pid": 1, "tid": 5})
        if i == 8:      # slower GPU phase: kernel 450 us, the stream sync waits for it
            kdur += 400 * T
            wall += 400 * T
        if i == 12:     # synchronisation that waits on something else
            wall += 400 * T
        krows.append((t0 + 5 * T + (400 * T if i == 3 else 0), t0 + 5 * T + kdur + (400 * T if i == 3 else 0), 5,
                      t0 + 2 * T + (400 * T if i == 3 else 0), corr))
        corr += 1
        sync_start = t0 + 4 * T + (400 * T if i == 3 else 0)
        sync_end = t0 + wall - 1 * T
        arows.append(("cudaStreamSynchronize", sync_start, sync_end, 5, "sync"))
        nv_rows.append(("q", t0, t0 + wall, 5))
    res = analyze(Trace(kernels=kernels(*krows), api=api(*arows), nvtx=ranges(*nv_rows), osrt=pd.DataFrame(osrt)))
    r = only_range(res, "q")
    causes = {o["index"]: o for o in r["outliers"]}
    assert sorted(causes) == [3, 8, 12]
    assert causes[3]["cause"] == "host_stall" and causes[3]["detail"]["call"] == "clock_nanosleep"
    assert causes[3]["detail"]["call_ms"] == pytest.approx(0.4)
    assert causes[8]["cause"] == "slow_gpu"
    assert causes[8]["detail"]["gpu_compute_ms"] == pytest.approx(0.45)
    assert causes[12]["cause"] == "synchronization"
    assert causes[12]["detail"]["call"] == "cudaStreamSynchronize"


def test_nested_api_calls_are_not_counted_twice():
    a = api(("cudaLaunchKernel", 10 * T, 20 * T, 5, "launch"), ("cuLaunchKernel", 12 * T, 18 * T, 5, "launch"),
            ("cudaStreamSynchronize", 30 * T, 60 * T, 5, "sync"), ("cudaStreamWaitEvent", 61 * T, 62 * T, 5, "sync"))
    res = analyze(Trace(kernels=kernels((21 * T, 22 * T, 5, 10 * T)), api=a, nvtx=ranges(("it", 0, 100 * T, 5))))
    inst = res.context.table.instances.iloc[0]
    assert inst["api_ns"] == 10 * T + 30 * T + 1 * T
    assert inst["launch_calls"] == 1
    assert inst["sync_count"] == 1  # cudaStreamWaitEvent does not block the host
    assert inst["sync_ns"] == 30 * T


def test_graph_node_kernels_sharing_a_launch_count_once():
    k = kernels(*[(10 * T + i * T, 10 * T + i * T + 500, 5, 5 * T, 77) for i in range(10)], graph_node_id=3)
    res = analyze(Trace(kernels=k, nvtx=ranges(("it", 0, 100 * T, 5))))
    inst = res.context.table.instances.iloc[0]
    assert (inst["kernels"], inst["launches"]) == (10, 1)


def test_json_is_strict_and_nan_becomes_null():
    nv = ranges(("zero", 10 * T, 10 * T, 5))  # zero wall time: busy fraction undefined
    data = analyze(Trace(kernels=kernels((0, 1, 5, 0)), nvtx=nv)).to_json()
    text = json.dumps(data, allow_nan=False)
    r = json.loads(text)["ranges"][0]
    assert r["gpu_busy_fraction"] is None
    assert set(r) >= {"name", "domain", "count", "wall_ms", "gpu_busy_ms", "gpu_busy_fraction", "outliers"}
    assert set(data) >= {"capture", "ranges", "findings", "top_kernels", "gap_histogram", "thresholds"}


def test_vectorised_sweep_scales(benchmark_size: int = 200_000):
    """200k kernels x 20k ranges on 4 threads: the series table must come out right (speed is in benchmarks/)."""
    rng = np.random.default_rng(0)
    n_ranges, per = 20_000, benchmark_size // 20_000
    tids = np.repeat(np.arange(4), n_ranges // 4)
    rs = np.tile(np.arange(n_ranges // 4) * 100 * T, 4)
    nv = pd.DataFrame({"name": "it", "start_ns": rs, "end_ns": pd.array(rs + 90 * T, dtype="Int64"),
                       "global_tid": tids, "end_global_tid": tids, "domain": "", "event_type": "push_pop"})
    ks = np.repeat(rs, per) + np.tile(np.arange(per) * 8 * T, n_ranges) + 1
    dur = rng.integers(1 * T, 5 * T, len(ks))
    k = pd.DataFrame({"start_ns": ks, "end_ns": ks + dur, "api_tid": np.repeat(tids, per), "api_start_ns": ks - 1,
                      "api_end_ns": ks, "correlation_id": np.arange(len(ks)), "device_id": 0, "stream_id": 7,
                      "pid": 1, "name": "k"})
    table = S.build_series(Trace(kernels=k, nvtx=nv))
    assert len(table.instances) == n_ranges
    assert (table.instances["kernels"] == per).all()
    # kernels of one instance never overlap here, so busy = summed durations per instance
    assert table.instances["gpu_busy_ns"].sum() == dur.sum()


# ----------------------------------------------------------------------------- real exports

def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _has(path: Path, table: str) -> bool:
    return bool(_sql(path, f"SELECT name FROM sqlite_master WHERE type='table' AND name='{table}'"))


_TOKENS = re.compile(r", (?:stashed )?seq = -?\d+|, op_id = \d+|, input_op_ids = \[.*\]$")


def _numbered_as_sql(want: Counter, ranges: list[dict]) -> Counter:
    """SQL's counts per name with the names of each numbered series (``Inference #``) summed under it."""
    out = Counter(want)
    for r in ranges:
        if "numbered" in r:
            pattern = re.compile(re.escape(r["name"]).replace("\\#", "#").replace("#", "(?:#|[0-9]+)"))
            names = [n for n in out if pattern.fullmatch(n)]
            assert len(names) == r["numbered"]["numbers"], r["name"]
            out[r["name"]] += sum(out.pop(n) for n in names)
    return out


@pytest.mark.parametrize("path", ALL_CAPTURES, ids=lambda p: p.name)
def test_every_real_capture_analyses_and_matches_sql(path: Path):
    res = result_of(path)
    data = res.to_json()
    json.dumps(data, allow_nan=False)
    # range instances per name: SQL GROUP BY over closed push/pop and start/end ranges
    if _has(path, "NVTX_EVENTS"):
        rows = _sql(path, "SELECT COALESCE(n.text, s.value) AS t, COUNT(*) FROM NVTX_EVENTS n "
                          "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60) "
                          "AND n.end IS NOT NULL AND n.end >= n.start GROUP BY t")
        want = Counter()
        for text, n in rows:
            want[_TOKENS.sub("", text or "")] += n
        got = Counter()
        for r in data["ranges"]:
            if "made_from" not in r:  # a TensorRT graph replay's range is a launch call's, not an NVTX range
                got[r["name"]] += r["count"]
        assert got == _numbered_as_sql(want, data["ranges"])
        made = [r for r in data["ranges"] if "made_from" in r and r["name"] == "cudaGraphLaunch"]
        for r in data["ranges"]:  # a frame of stage ranges: no more frames than instances of its stages
            if "made_from" in r and r["name"].startswith("(frame"):
                stages = r["made_from"].split("stage ranges ", 1)[1].split(" (", 1)[0].split(" > ")
                assert 3 <= r["count"] <= min(want[st.split(":", 1)[-1]] for st in stages)
        if made:  # one per graph launch call outside TensorRT's enqueue ranges (their capture-time ones: setup)
            [(n,)] = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                                "WHERE s.value LIKE 'cudaGraphLaunch%'")
            assert data["inference"]["count"] == n  # the steady state's: all but warm-up, which may be setup
            assert len(made) == 1 and n - data["inference"]["warmup_count"] <= made[0]["count"] <= n
    elif data["generation"]:  # no NVTX: a range per decode step and per request's prefill (capture/generation.py)
        gen = data["generation"]
        by = {r["name"]: r for r in data["ranges"]}
        assert sorted(by) == ["decode step", "prefill"] and all(r["domain"] == "generation" for r in by.values())
        assert by["prefill"]["count"] == gen["requests"]
        assert by["decode step"]["count"] == gen["decode_steps"] - data["phases"]["prefill"]["steps_inside"]
    else:
        assert [r["name"] for r in data["ranges"]] in ([S.WINDOW_NAME], [])
    # kernel time per name: SUM(end - start) and COUNT(*)
    if _has(path, "CUPTI_ACTIVITY_KIND_KERNEL"):
        rows = _sql(path, "SELECT s.value, COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value")
        want = {name: (n, total) for name, n, total in rows}
        # CUDA graph replays are rows of their own ("CUDA graph N (replays)"), checked against the SQL too
        graphs = {k["name"]: k for k in data["top_kernels"] if k["name"].startswith("CUDA graph ")}
        want_graphs = {}
        if _has(path, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
            want_graphs = {f"CUDA graph {gid} (replays)": (n, total) for gid, n, total in _sql(
                path, "SELECT graphId, COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE GROUP BY graphId")}
        for name, g in graphs.items():
            assert (g["count"], round(g["total_ms"] * 1e6)) == want_graphs[name]
        top = [k for k in data["top_kernels"] if k["name"] not in graphs]
        assert len(top) + len(graphs) == min(len(want) + len(want_graphs), 50)
        for k in top:
            n, total = want[k["name"]]
            assert k["count"] == n
            assert k["total_ms"] == pytest.approx(total / 1e6, abs=1e-9)
        assert sum(k["total_ms"] for k in top) <= sum(t for _, t in want.values()) / 1e6 + 1e-9
    # range wall times add up to SUM(end - start) of the ranges
    if _has(path, "NVTX_EVENTS"):
        [(wall_ns,)] = _sql(path, "SELECT COALESCE(SUM(end - start), 0) FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                                  "AND end IS NOT NULL AND end >= start")
        nvtx_ms = sum(r["total_wall_ms"] for r in data["ranges"] if "made_from" not in r)
        assert nvtx_ms == pytest.approx(wall_ns / 1e6, rel=1e-9)
    # every device's busy + idle tiles its active window
    for h in data["gap_histogram"]:
        assert h["busy_ms"] + h["idle_ms"] == pytest.approx(h["active_ms"], rel=1e-9, abs=1e-9)
        assert sum(h["counts"]) == h["gap_count"]


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    """Plain-Python union length (independent of the numpy sweep)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _brute_force_busy(path: Path) -> dict[str, list[int]]:
    """GPU busy per NVTX instance straight from SQLite: activities whose runtime call (same process,
    same correlation id) started on the range's thread inside the range; union in plain Python."""
    acts = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if _has(path, table):
            acts += _sql(path, f"SELECT a.start, a.end, r.globalTid, r.start FROM {table} a JOIN "
                               "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = a.correlationId AND "
                               "(r.globalTid & 0xFFFFFFFFFF000000) = a.globalPid")
    by_tid = defaultdict(list)
    for s, e, tid, api_start in acts:
        by_tid[tid].append((api_start, s, e))
    out = defaultdict(list)
    for text, start, end, tid in sorted(_sql(path, "SELECT text, start, end, globalTid FROM NVTX_EVENTS "
                                                  "WHERE eventType = 59 AND end IS NOT NULL"), key=lambda r: r[1]):
        out[text].append(_union_ns([(s, e) for a, s, e in by_tid[tid] if start <= a <= end]))
    return out


@pytest.mark.parametrize("name", ["launch_bound", "host_stall", "graph", "transfer_bound", "multistream_saturated"])
def test_sample_busy_time_matches_brute_force_sql(name: str):
    path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present")
    want = _brute_force_busy(path)
    data = result_of(path).to_json()
    for series, busy in want.items():
        r = next(r for r in data["ranges"] if r["name"] == series)
        assert r["instances"]["gpu_busy_ms"] == pytest.approx([b / 1e6 for b in busy], abs=1e-6)


REFERENCE = SAMPLE_TRACES / "reference"


def _csv(path: Path) -> pd.DataFrame:
    if not path.exists() or path.stat().st_size == 0:
        pytest.skip(f"{path.name} is empty or absent")
    return pd.read_csv(path)


@pytest.mark.parametrize("name", ["launch_bound", "host_stall", "sync_heavy", "transfer_bound",
                                  "multistream_saturated", "pageable_vs_pinned", "graph_node"])
def test_nvtx_projection_agrees_with_nsys_stats_where_it_should(name: str):
    """Range counts, total range time and GPU op counts equal nsys's nvtx_gpu_proj_sum; our busy time is
    the union, never more than nsys's projected first-to-last span."""
    ref = _csv(REFERENCE / f"{name}_stats_nvtx_gpu_proj_sum.csv")
    data = result_of(SAMPLE_TRACES / f"{name}.sqlite").to_json()
    table = result_of(SAMPLE_TRACES / f"{name}.sqlite").context.table
    for row in ref.itertuples(index=False):
        series = row.Range.split(":", 1)[1]
        r = next(r for r in data["ranges"] if r["name"] == series)
        assert r["count"] == row[4]  # Range Instances
        assert r["total_wall_ms"] == pytest.approx(row[3] / 1e6, rel=1e-12)  # Total Range Time
        inst = table.instances_of(next(x["series_id"] for x in result_of(SAMPLE_TRACES / f"{name}.sqlite").context.ranges
                                       if x["name"] == series))
        ops = inst["launches"].sum() if name == "graph_node" else inst["activities"].sum()
        assert ops == row[-4]  # Total GPU Ops
        assert r["total_gpu_busy_ms"] <= row[2] / 1e6 + 1e-9  # Total Proj Time (a span) bounds the union


def test_launch_bound_busy_is_a_tenth_of_what_the_span_projection_says():
    ref = _csv(REFERENCE / "launch_bound_stats_nvtx_gpu_proj_sum.csv")
    r = only_range(result_of(SAMPLE_TRACES / "launch_bound.sqlite"), "launch_bound.iter")
    assert r["total_gpu_busy_ms"] < 0.1 * ref.iloc[0, 2] / 1e6
    assert 0.05 < r["gpu_busy_fraction"] < 0.15
    assert r["wall_ms"]["median"] == pytest.approx(1.023, abs=0.02)


@pytest.mark.parametrize("name", ["launch_bound", "host_stall", "sync_heavy", "transfer_bound", "graph_node",
                                  "multistream_saturated"])
def test_kernel_summary_equals_nsys_cuda_gpu_kern_sum(name: str):
    ref = _csv(REFERENCE / f"{name}_stats_cuda_gpu_kern_sum.csv")
    top = {k["name"]: k for k in result_of(SAMPLE_TRACES / f"{name}.sqlite").to_json()["top_kernels"]}
    for row in ref.itertuples(index=False):
        k = top[row.Name]
        assert k["count"] == row.Instances
        assert k["total_ms"] == pytest.approx(row[1] / 1e6, rel=1e-12)
        assert k["median_ms"] == pytest.approx(row[4] / 1e6, rel=1e-9)
