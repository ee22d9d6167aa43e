"""The H200 captures made to show a race, a per-image engine rebuild and a sleeping host, each beside its healthy
twin (sample_traces/README.md, patterns.py): the diagnosis of each, every number against SQL over the same export."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profiler.capture import intervals
from profiler.capture.streams import streams_json
from tests.capture_builders import capture_or_skip, result_of
from tests.conftest import SAMPLE_TRACES


def _capture(name: str) -> Path:
    return capture_or_skip(SAMPLE_TRACES / f"{name}.sqlite")


def _rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


def _fired(name: str, rule: str) -> list:
    return [f for f in result_of(_capture(name)).findings if f.rule == rule]


def _race(name: str, pairs_sql: str) -> tuple:
    """(path, the SQL's racing pairs, the analysis, its one stream_race finding, the 'infer' ranges)."""
    path = _capture(name)
    [f] = _fired(name, "stream_race")
    infers = _rows(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text = 'infer'")[0][0]
    return path, _rows(path, pairs_sql), result_of(path), f, infers


# -- stream_race: race.sqlite against race_fixed.sqlite and pipelined.sqlite --------------------------------------
RACING_PAIRS_SQL = """
WITH inf AS (
  SELECT start, end, globalTid AS tid, LAG(end) OVER (PARTITION BY globalTid ORDER BY start) AS prev_end
  FROM NVTX_EVENTS WHERE text = 'infer'),
cp AS (
  SELECT m.start, m.end, m.streamId, r.start AS launch, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_MEMCPY m
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId WHERE m.copyKind = 1),
k AS (
  SELECT k.start, k.end, k.streamId, r.start AS launch, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_KERNEL k
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId),
joins AS (
  SELECT r.start, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
  WHERE s.value LIKE 'cudaStreamWaitEvent%' OR s.value LIKE '%Synchronize%' OR s.value LIKE '%Query%')
SELECT inf.start, k.start, MIN(cp.end, k.end) FROM inf
JOIN cp ON cp.tid = inf.tid AND cp.launch > COALESCE(inf.prev_end, -1) AND cp.launch <= inf.end
JOIN k ON k.tid = inf.tid AND k.launch > cp.launch AND k.launch <= inf.end AND k.streamId != cp.streamId
      AND k.start >= cp.start AND k.start < cp.end
WHERE NOT EXISTS (SELECT 1 FROM joins j WHERE j.tid = inf.tid AND j.start >= cp.launch AND j.start < k.launch)
"""
"""Each (instance, kernel) pair where a kernel launched in an 'infer' instance (from the thread's previous
instance's end to its own) starts on another stream while that instance's HtoD copy runs, no wait, sync or query
between the two launches: the overlap is [kernel start, min(copy end, kernel end))."""


def test_the_race_capture_is_a_correctness_warning_with_the_sql_counts():
    path, pairs, res, f, infers = _race("race", RACING_PAIRS_SQL)
    ev = f.evidence
    assert ev["instances"] == infers == 50
    assert ev["racing_instances"] == len({p[0] for p in pairs}) and ev["racing_instances"] >= 45
    assert ev["racing_pairs"] == len(pairs) and ev["copy_producers"] == len(pairs)
    s, e = np.array([p[1] for p in pairs]), np.array([p[2] for p in pairs])
    racing_ms = intervals.union_length(s, e) / 1e6
    assert ev["racing_overlap_ms"] == pytest.approx(racing_ms)
    copy_stream, kernel_stream = _rows(path, """
        SELECT DISTINCT m.streamId, k.streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY m, CUPTI_ACTIVITY_KIND_KERNEL k
        WHERE m.copyKind = 1 AND m.bytes = 25165824 AND k.start >= m.start AND k.start < m.end""")[0]
    assert [(x["producer_stream"], x["kernel_stream"]) for x in ev["streams"]] == [(copy_stream, kernel_stream)]
    assert f.severity == "high" and f.impact["ms_total"] is None and "cudaStreamWaitEvent" in f.recommendation
    # the overlap statistics no longer call the race a saving
    plain = streams_json(res.context.table.activity)
    assert res.extra["racing_overlap_ms"] == pytest.approx(min(racing_ms, plain["overlap_saved_ms"]))
    assert res.extra["overlap_saved_ms"] == pytest.approx(max(plain["overlap_saved_ms"] - racing_ms, 0.0), abs=1e-9)
    ov, plain_ov = res.extra["copy_compute_overlap"], plain["copy_compute_overlap"]
    assert ov["overlap_ms"] == pytest.approx(plain_ov["overlap_ms"] - ov["racing_ms"], abs=1e-9)
    assert ov["racing_ms"] == pytest.approx(min(racing_ms, plain_ov["overlap_ms"]))
    from profiler.cli.analyze import inference_lines
    from profiler.report.inference import _streams

    [line] = [x for x in inference_lines(res.to_json()) if x.startswith("streams:")]
    assert line.endswith(f"; {racing_ms:.1f} ms more overlap races (stream_race), no saving")
    assert f"Another {racing_ms:.3g} ms of overlap is streams racing" in _streams(res.to_json())[-1]["text"]


@pytest.mark.parametrize("name", ["race_fixed", "pipelined"])
def test_the_event_joined_and_pipelined_twins_are_silent(name):
    path = _capture(name)
    assert _fired(name, "stream_race") == [] and _rows(path, RACING_PAIRS_SQL) == []
    res = result_of(path)
    assert "racing_overlap_ms" not in res.extra
    if name == "pipelined":  # the next input's copy hides behind this inference's compute: a saving, kept
        assert res.extra["copy_compute_overlap"]["share_of_copy"] > 0.9


# -- output copies: race_output.sqlite against race_output_fixed.sqlite and output_pipelined.sqlite ------------------
OUTPUT_PAIRS_SQL = """
WITH inf AS (
  SELECT start, end, globalTid AS tid, LAG(end) OVER (PARTITION BY globalTid ORDER BY start) AS prev_end
  FROM NVTX_EVENTS WHERE text = 'infer'),
cp AS (
  SELECT m.start, m.end, m.streamId, r.start AS launch, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_MEMCPY m
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId WHERE m.copyKind IN (2, 8)),
k AS (
  SELECT k.start, k.end, k.streamId, r.start AS launch, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_KERNEL k
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId),
joins AS (
  SELECT r.start, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
  WHERE s.value LIKE 'cudaStreamWaitEvent%' OR s.value LIKE '%Synchronize%' OR s.value LIKE '%Query%')
SELECT inf.start, k.start, k.end, cp.start, cp.end FROM inf
JOIN cp ON cp.tid = inf.tid AND cp.launch > COALESCE(inf.prev_end, -1) AND cp.launch <= inf.end
JOIN k ON k.tid = inf.tid AND k.launch > COALESCE(inf.prev_end, -1) AND k.launch < cp.launch
      AND k.streamId != cp.streamId AND cp.start < k.end
WHERE NOT EXISTS (SELECT 1 FROM joins j WHERE j.tid = inf.tid AND j.start >= k.launch AND j.start < cp.launch)
"""
"""Each (instance, kernel, copy) where a D2H or D2D copy launched in an 'infer' instance (from the thread's previous
instance's end to its own) starts on another stream before a kernel the same thread launched earlier in that instance
ends, no wait, sync or query between the two launches: (instance, kernel start, end, copy start, end)."""


def _overlap_ms(pairs: list[tuple]) -> float:
    s = np.array([max(p[1], p[3]) for p in pairs])
    e = np.maximum(s, np.array([min(p[2], p[4]) for p in pairs]))
    return intervals.union_length(s, e) / 1e6


def test_the_output_copy_race_is_a_correctness_warning_with_the_sql_counts():
    path, pairs, res, f, infers = _race("race_output", OUTPUT_PAIRS_SQL)
    ev = f.evidence
    assert ev["instances"] == infers == 40
    assert ev["racing_instances"] == len({p[0] for p in pairs}) == 40
    assert ev["racing_pairs"] == ev["output_copy_pairs"] == len(pairs) and ev["copy_producers"] == 0
    assert ev["racing_overlap_ms"] == pytest.approx(_overlap_ms(pairs))
    [(kernel_stream, copy_stream)] = _rows(path, """
        SELECT DISTINCT k.streamId, m.streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY m, CUPTI_ACTIVITY_KIND_KERNEL k
        WHERE m.copyKind = 2 AND k.start < m.end AND m.start < k.end""")
    assert [(x["producer_stream"], x["copy_stream"]) for x in ev["output_streams"]] == [(kernel_stream, copy_stream)]
    assert ev["streams"] == [] and "device-to-host" in f.title and "40 of 40 inferences" in f.title
    assert f.severity == "high" and f.impact["ms_total"] is None and "half-written output" in f.recommendation
    # the copy overlapping its producer kernels is no saving
    plain = streams_json(res.context.table.activity)["copy_compute_overlap"]
    assert res.extra["copy_compute_overlap"]["racing_ms"] == pytest.approx(min(_overlap_ms(pairs), plain["overlap_ms"]))


@pytest.mark.parametrize("name", ["race_output_fixed", "output_pipelined"])
def test_the_event_joined_and_pipelined_output_twins_are_silent(name):
    path = _capture(name)
    assert _fired(name, "stream_race") == [] and _rows(path, OUTPUT_PAIRS_SQL) == []
    assert "racing_overlap_ms" not in result_of(path).extra
    if name == "output_pipelined":  # the previous output's copy overlaps this inference's kernels: ordered by events
        [(n,)] = _rows(path, """
            SELECT COUNT(DISTINCT m.correlationId) FROM CUPTI_ACTIVITY_KIND_MEMCPY m, CUPTI_ACTIVITY_KIND_KERNEL k
            WHERE m.copyKind = 2 AND k.start < m.end AND m.start < k.end AND k.streamId != m.streamId""")
        assert n == 39


# -- across threads: race_threads.sqlite against race_threads_fixed.sqlite -------------------------------------------
THREAD_PAIRS_SQL = """
WITH items AS (
  SELECT start, end, globalTid AS tid, text, ROW_NUMBER() OVER (PARTITION BY text ORDER BY start) AS n
  FROM NVTX_EVENTS WHERE text IN ('produce', 'consume')),
k AS (
  SELECT k.start, k.end, k.streamId, r.start AS launch, r.globalTid AS tid, i.n FROM CUPTI_ACTIVITY_KIND_KERNEL k
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
  JOIN items i ON i.text = 'produce' AND i.tid = r.globalTid AND r.start BETWEEN i.start AND i.end),
cp AS (
  SELECT m.start, m.end, m.streamId, r.start AS launch, r.globalTid AS tid, i.n FROM CUPTI_ACTIVITY_KIND_MEMCPY m
  JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
  JOIN items i ON i.text = 'consume' AND i.tid = r.globalTid AND r.start BETWEEN i.start AND i.end
  WHERE m.copyKind IN (2, 8)),
joins AS (
  SELECT r.start, r.end, r.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
  WHERE s.value LIKE 'cudaStreamWaitEvent%' OR s.value LIKE '%Synchronize%' OR s.value LIKE '%Query%')
SELECT cp.n, k.start, k.end, cp.start, cp.end FROM cp
JOIN k ON k.n = cp.n AND k.launch < cp.launch AND k.streamId != cp.streamId AND cp.start < k.end
WHERE NOT EXISTS (SELECT 1 FROM joins j WHERE j.tid = cp.tid AND j.start >= k.launch AND j.start < cp.launch)
  AND NOT EXISTS (SELECT 1 FROM joins j WHERE j.tid = k.tid AND j.start >= k.launch AND j.end <= cp.launch)
"""
"""Each (item, kernel, copy) where the consumer thread's D2H copy launched in its n-th 'consume' range starts before
a kernel the producer thread launched earlier in its n-th 'produce' range ends, with no joining call of the consumer
from the kernel's launch to the copy's and none of the producer started after the kernel and returned before the
copy's launch: (item, kernel start, end, copy start, end)."""


def test_the_two_thread_capture_races_in_some_hand_offs_and_its_twin_in_none():
    from profiler.rules.capture.stream_race import RACE_MEDIUM_SHARE, thread_races_of

    path = _capture("race_threads")
    pairs = _rows(path, THREAD_PAIRS_SQL)
    races = thread_races_of(result_of(path).context)
    items = len({p[0] for p in pairs})
    assert 3 <= items < 40  # the consumer's copy beat the producer's kernels in some hand-offs, not all
    assert races.racing_instances == items and races.pairs == len(pairs)
    assert races.instances == 40 and races.overlap_ns / 1e6 == pytest.approx(_overlap_ms(pairs))
    [f] = _fired("race_threads", "stream_race")
    ev = f.evidence
    assert ev["across_threads"] and ev["racing_instances"] == items and ev["racing_pairs"] == len(pairs)
    assert f.severity == ("low" if items / 40 < RACE_MEDIUM_SHARE else "medium")  # by how often, not by time
    assert [(r["producer_thread"], r["consumer_thread"]) for r in ev["threads"]] == _rows(path, """
        SELECT p.globalTid % 16777216, c.globalTid % 16777216 FROM
          (SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE text = 'produce') p,
          (SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE text = 'consume') c""")
    fixed = _capture("race_threads_fixed")
    assert _rows(fixed, THREAD_PAIRS_SQL) == [] and thread_races_of(result_of(fixed).context).pairs == 0
    assert _fired("race_threads_fixed", "stream_race") == []


# -- repeated_setup: rebuild.sqlite against rebuild_fixed.sqlite --------------------------------------------------
SETUP_SQL = """
WITH inf AS (SELECT end, LAG(end) OVER (ORDER BY start) AS prev_end FROM NVTX_EVENTS WHERE text = 'infer')
SELECT s.value, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
JOIN inf ON r.start > inf.prev_end AND r.start <= inf.end
WHERE s.value IN ('cuModuleLoadData', 'cuModuleUnload', 'cudaMalloc_v3020', 'cudaFree_v3020',
                  'cudaStreamCreate_v3020', 'cudaStreamDestroy_v5050')
"""
"""The setup calls between consecutive 'infer' ranges (after one's end, up to the next one's end)."""
UPLOAD_SQL = """
WITH inf AS (SELECT end, LAG(end) OVER (ORDER BY start) AS prev_end FROM NVTX_EVENTS WHERE text = 'infer')
SELECT m.start, m.end, m.bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY m
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
JOIN inf ON r.start > inf.prev_end AND r.start <= inf.end WHERE m.copyKind = 1 AND m.bytes >= 16777216
"""


def test_an_engine_rebuilt_for_every_image_is_setup_in_the_steady_state():
    path = _capture("rebuild")
    calls = _rows(path, SETUP_SQL)
    uploads = _rows(path, UPLOAD_SQL)
    n = _rows(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text = 'infer'")[0][0] - 1
    [f] = _fired("rebuild", "repeated_setup")
    ev = f.evidence
    assert (ev["intervals"], ev["intervals_with_setup"]) == (n, n) and n == 11
    by_name: dict[str, int] = {}
    for name, _, _ in calls:  # the analysis names calls without nsys's version suffix
        base = re.sub(r"_v\d+$", "", name)
        by_name[base] = by_name.get(base, 0) + 1
    assert {k: v for k, v in ev["calls"].items() if k != "HtoD upload"} == by_name
    assert by_name["cuModuleLoadData"] == by_name["cuModuleUnload"] == 40 * n  # the manifest's 40 modules per build
    assert ev["calls"]["HtoD upload"] == len(uploads) == n
    assert ev["upload_bytes_per_interval"] == sum(u[2] for u in uploads) / n == 48 << 20
    s = np.array([c[1] for c in calls] + [u[0] for u in uploads])
    e = np.array([c[2] for c in calls] + [u[1] for u in uploads])
    assert ev["setup_ms_total"] == pytest.approx(intervals.union_length(s, e) / 1e6)
    assert ev["setup_ms_per_interval"] == pytest.approx(intervals.union_length(s, e) / 1e6 / n)
    assert f.range == "infer" and "Build or deserialise it once" in f.recommendation
    for g in result_of(path).findings:
        assert "warm up" not in g.recommendation and "eagerly" not in g.recommendation, g.rule


def test_the_engine_built_once_is_silent():
    path = _capture("rebuild_fixed")
    assert _fired("rebuild_fixed", "repeated_setup") == []
    assert _rows(path, SETUP_SQL) == []  # nothing between its inferences
    assert len(_rows(path, SETUP_SQL.replace("JOIN inf ON r.start > inf.prev_end AND r.start <= inf.end", ""))) > 0


# -- host_sleeps: sleeps.sqlite against gpu_wait.sqlite -------------------------------------------------------------
SELECT_SQL = """
SELECT o.start, o.end FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
WHERE s.value = 'select' AND o.start < (SELECT MAX(end) FROM NVTX_EVENTS WHERE text = 'infer') ORDER BY o.start
"""
"""The select() calls the program makes between its inferences (the one after the last is past the steady state)."""
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def test_select_returning_after_its_timeout_is_the_program_sleeping():
    path = _capture("sleeps")
    sel = np.array(_rows(path, SELECT_SQL))
    d = sel[:, 1] - sel[:, 0]
    [f] = _fired("sleeps", "host_sleeps")
    [g] = f.evidence["groups"]
    assert (g["name"], g["calls"], g["of_calls"]) == ("select", len(sel), len(sel)) and len(sel) == 19
    assert g["duration_ms"] == pytest.approx(float(np.median(d)) / 1e6)
    assert g["spread_us"] == pytest.approx(float(d.max() - d.min()) / 1e3)
    assert 50.0 <= g["duration_ms"] <= 50.3  # the manifest's 50 ms timeout, and the kernel's timer slack
    have = {t for (t,) in _rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    gpu = np.array(_rows(path, " UNION ALL ".join(f"SELECT start, end FROM {t}" for t in GPU_TABLES if t in have)))
    us, ue = intervals.union(gpu[:, 0], gpu[:, 1])
    gs, ge = ue[:-1], us[1:]  # the GPU's idle gaps inside its active window
    ss, se = intervals.union(sel[:, 0], sel[:, 1])
    idle_ns = sum(int(np.clip(np.minimum(ge, e) - np.maximum(gs, s), 0, None).sum()) for s, e in zip(ss, se))
    assert f.evidence["gpu_idle_during_sleeps_ms"] == pytest.approx(idle_ns / 1e6)
    assert f.impact["ms_total"] == pytest.approx(idle_ns / 1e6)
    [idle] = _fired("sleeps", "gpu_idle")
    assert idle.evidence["host_sleeps"] and idle.impact["included_in"] == "host_sleeps"
    for h in (f, idle):
        assert "waits for its next input" not in h.recommendation and "producer is slower" not in h.recommendation


def test_the_host_waiting_on_the_gpu_is_silent():
    assert _fired("gpu_wait", "host_sleeps") == []
