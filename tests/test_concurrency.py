"""Contexts, threads and throughput (profiler.capture.concurrency) and the rules time_slicing and
serialised_threads: the two-thread, two-context RealCUGAN TensorRT capture, checked against SQL over the
export, synthetic edge cases, and healthy captures that must stay silent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.capture_builders import capture_or_skip, result_of, sql_rows, two_threads
from tests.conftest import SAMPLE_TRACES, SHARED

REAL = SHARED / "fixtures" / "nsys-real"
REALCUGAN = REAL / "realcugan_trt_2threads_2080ti.sqlite"
RULES = ("time_slicing", "serialised_threads")


@pytest.fixture(scope="module")
def realcugan():
    return result_of(capture_or_skip(REALCUGAN))  # setup included: every event, as SQL sees it


def test_two_contexts_never_overlap_and_time_slice(realcugan):
    data = realcugan.to_json()
    # SQL: kernels of context 1 and context 2 overlapping in time (none), and each context's launching thread
    pairs = sql_rows(REALCUGAN, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL a JOIN CUPTI_ACTIVITY_KIND_KERNEL b "
                            "ON a.contextId = 1 AND b.contextId = 2 AND a.start < b.end AND b.start < a.end")
    assert pairs == [(0,)]
    launchers: dict[int, set[int]] = {}
    for c, tid in sql_rows(REALCUGAN, "SELECT k.contextId, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                  "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                                  "GROUP BY k.contextId, r.globalTid HAVING COUNT(*) >= 10"):
        launchers.setdefault(c, set()).add(tid)
    conc = data["concurrency"]
    # each context has its own worker thread; the main thread launched the engines' set-up kernels in both
    assert {c["context"]: set(c["threads"]) for c in conc["contexts"]} == launchers
    assert len(launchers[1] & launchers[2]) == 1
    assert conc["context_overlap_ms"] == {"0": 0.0}
    [f] = [f for f in realcugan.findings if f.rule == "time_slicing"]
    assert [c["context"] for c in f.evidence["contexts"]] == [1, 2] and f.evidence["overlap_ms"] == 0.0
    assert "2080 Ti" in f.title and "MPS" in f.recommendation and "primary context" in f.recommendation
    # each context's kernel time (the union of its kernels: one stream each does nearly all of it)
    busy = dict(sql_rows(REALCUGAN, "SELECT contextId, SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    for c in f.evidence["contexts"]:
        assert c["busy_ms"] == pytest.approx(busy[c["context"]] / 1e6, rel=0.02)


def test_the_threads_hand_a_semaphore_back_and_forth(realcugan):
    from profiler.capture.concurrency import LOCK_WAIT_CALLS

    calls = ", ".join(f"'{c}'" for c in LOCK_WAIT_CALLS)
    waits = dict(sql_rows(REALCUGAN, "SELECT o.globalTid, SUM(o.end - o.start) FROM OSRT_API o JOIN StringIds s "
                                 f"ON s.id = o.nameId WHERE s.value IN ({calls}) GROUP BY 1 HAVING COUNT(*) > 50"))
    both = sql_rows(REALCUGAN, "WITH w AS (SELECT o.start s, o.end e, o.globalTid t FROM OSRT_API o JOIN StringIds n "
                           "ON n.id = o.nameId WHERE n.value = 'sem_wait') SELECT COUNT(*) FROM w a JOIN w b "
                           "ON a.t < b.t AND a.s < b.e AND b.s < a.e")
    assert len(waits) == 2 and both == [(0,)]
    [f] = [f for f in realcugan.findings if f.rule == "serialised_threads"]
    got = {r["tid"]: r for r in f.evidence["threads"]}
    assert set(got) == set(waits)
    for tid, ns in waits.items():
        assert got[tid]["lock_wait_ms"] == pytest.approx(ns / 1e6, rel=1e-9)
        # about 81 ms of every iteration waiting for the other thread's turn
        assert 75 < got[tid]["lock_wait_ms_per_inference"] < 90
    assert f.evidence["lock_wait_overlap_ms"] == 0.0 and f.evidence["gpu_overlap_ms"] == 0.0
    assert f.severity == "medium" and f.impact["exposure_share"] == pytest.approx(
        sum(waits.values()) / 2 / 1e6 / f.impact["steady_ms"], rel=1e-9)


def test_throughput_overall_per_thread_and_per_stream(realcugan):
    """The project's README claims 9.8 frames/s for the two threads together."""
    data = realcugan.to_json()
    tp = data["inference"]["throughput"]
    steady = data["phases"]["steady"]
    start_ns = data["capture"]["capture_start_ns"] + round(steady["start_ms"] * 1e6)
    # SQL: TensorRT enqueue ranges that start in the steady state, per thread
    per_tid = dict(sql_rows(REALCUGAN, "SELECT n.globalTid, COUNT(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                                   f"WHERE s.value = 'ExecutionContext::enqueue' AND n.start >= {start_ns - 1000} "
                                   "GROUP BY 1"))
    assert {r["tid"]: r["count"] for r in tp["per_thread"]} == per_tid
    assert tp["inferences"] == sum(per_tid.values()) == data["inference"]["steady_count"]
    assert tp["per_s"] == pytest.approx(tp["inferences"] / (steady["duration_ms"] / 1e3))
    assert tp["per_s"] == pytest.approx(9.8, abs=0.1)
    # one stream per context carries each inference's work
    assert sorted(r["stream"] for r in tp["per_stream"]) == [13, 28]
    assert sum(r["count"] for r in tp["per_stream"]) == tp["inferences"]
    from profiler.cli.analyze import inference_lines

    line = inference_lines(data)[0]
    assert f"{tp['per_s']:.3g} inferences/s (2 threads: " in line and "2 streams: " in line


# ---- synthetic edge cases ----

def _rules(trace) -> dict[str, object]:
    from profiler.capture.analyze import AnalysisOptions, analyze

    res = analyze(trace, AnalysisOptions(include_setup=True))
    return {f.rule: f for f in res.findings if f.rule in RULES}, res.to_json()


def test_two_contexts_taking_turns_are_time_slicing():
    found, data = _rules(two_threads(same_context=False, overlap=False, waits=None))
    assert set(found) == {"time_slicing"}
    f = found["time_slicing"]
    assert f.evidence["overlap_ms"] == 0.0
    assert [c["kernels"] for c in f.evidence["contexts"]] == [20, 20]
    assert [c["busy_ms"] for c in f.evidence["contexts"]] == pytest.approx([20 * 0.4, 20 * 0.4])
    tp = data["inference"]["throughput"]
    assert tp["inferences"] == 40 and len(tp["per_thread"]) == 2 and len(tp["per_stream"]) == 2


def test_contexts_whose_kernels_overlap_and_one_context_are_silent():
    assert _rules(two_threads(same_context=False, overlap=True, waits=None))[0] == {}  # MPS: they overlap
    assert _rules(two_threads(same_context=True, overlap=False, waits=None))[0] == {}  # one context


def test_threads_alternating_on_a_semaphore_serialise():
    found, data = _rules(two_threads(same_context=True, overlap=False, waits="alternate"))
    assert set(found) == {"serialised_threads"}
    f = found["serialised_threads"]
    assert [r["lock_wait_ms"] for r in f.evidence["threads"]] == pytest.approx([20 * 0.45, 20 * 0.45])
    assert f.evidence["lock_wait_overlap_ms"] == 0.0
    # waiting at the same moment is not taking turns
    assert _rules(two_threads(same_context=True, overlap=False, waits="together"))[0] == {}


# ---- healthy captures stay silent ----

HEALTHY = [
    REAL / "mamba_generate_cudagraph_a5000_r1.sqlite",
    SHARED / "fixtures" / "nsys-tensorrt" / "multistream_calculation-bound.sqlite",  # one context, four streams
    SHARED / "fixtures" / "nsys" / "v2024.5.1_pipit_cloverleaf_4xA100.sqlite",  # four processes, four GPUs
    SHARED / "fixtures" / "nsys" / "v2026.2.1_nsysai_mfu_2gpu_after.sqlite",  # two GPUs
    SAMPLE_TRACES / "harness_cls_streams.sqlite", SAMPLE_TRACES / "multistream.sqlite",
    SAMPLE_TRACES / "trt_eager.sqlite", SAMPLE_TRACES / "pipeline.sqlite",
]


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.name)
def test_healthy_captures_are_silent(path):
    res = result_of(capture_or_skip(path))
    assert [f.rule for f in res.findings if f.rule in RULES] == []


# ---- the project's H200 captures: two threads, each with its own context, and the same with one context ----

def _kernel_overlap_by(path: Path, column: str) -> tuple[int, list]:
    """SQL: ns during which kernels of two different ``column`` values (context, or launching thread) overlap,
    and the values."""
    join = ("FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"
            if column == "r.globalTid" else "FROM CUPTI_ACTIVITY_KIND_KERNEL k")
    rows = sql_rows(path, f"SELECT k.start, k.end, {column} {join} ORDER BY k.start")
    from profiler.capture import intervals

    groups = sorted({r[2] for r in rows})
    unions = {g: intervals.union([r[0] for r in rows if r[2] == g], [r[1] for r in rows if r[2] == g]) for g in groups}
    both = sum(intervals.overlap_length(*unions[a], *unions[b]) for i, a in enumerate(groups) for b in groups[i + 1:])
    return both, groups


def test_two_contexts_capture_time_slices():
    path = capture_or_skip(SAMPLE_TRACES / "two_contexts.sqlite")
    both, contexts = _kernel_overlap_by(path, "k.contextId")
    assert len(contexts) == 2 and both == 0
    res = result_of(path)
    [f] = [f for f in res.findings if f.rule == "time_slicing"]
    assert sorted(c["context"] for c in f.evidence["contexts"]) == contexts and f.evidence["overlap_ms"] == 0.0
    tp = res.to_json()["inference"]["throughput"]
    assert len(tp["per_thread"]) == 2 and len(tp["per_stream"]) == 2


def test_one_context_two_streams_capture_overlaps_and_is_silent():
    path = capture_or_skip(SAMPLE_TRACES / "one_context_two_streams.sqlite")
    both, threads = _kernel_overlap_by(path, "r.globalTid")
    assert len(sql_rows(path, "SELECT DISTINCT contextId FROM CUPTI_ACTIVITY_KIND_KERNEL")) == 1
    res = result_of(path)
    assert [f.rule for f in res.findings if f.rule in RULES] == []
    conc = res.to_json()["concurrency"]
    launchers = [t["tid"] for t in conc["threads"]]
    assert set(launchers) <= set(threads) and len(launchers) == 2
    assert conc["thread_gpu_overlap_ms"] == pytest.approx(both / 1e6, rel=1e-9) and both > 0


def test_two_processes_time_slice():
    """Two processes on one H200, each with its context (both numbered 1 in their process): 0.000 ms of kernel
    overlap by SQL."""
    path = capture_or_skip(SAMPLE_TRACES / "two_processes.sqlite")
    pids = sql_rows(path, "SELECT DISTINCT globalPid / 16777216 % 16777216, contextId FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(pids) == 2 and len({c for _, c in pids}) == 1
    both, _ = _kernel_overlap_by(path, "k.globalPid")
    assert both == 0
    [f] = [f for f in result_of(path).findings if f.rule == "time_slicing"]
    assert sorted(c["pid"] for c in f.evidence["contexts"]) == sorted(p for p, _ in pids)
    assert "of 2 processes" in f.title and f.evidence["overlap_ms"] == 0.0


def test_distinct_rows_equal_the_sorted_set_of_rows():
    import numpy as np

    from profiler.capture.concurrency import _distinct_rows

    rng = np.random.default_rng(3)
    for n in (0, 1, 500):
        cols = [rng.integers(-3, 4, n), np.broadcast_to(np.int64(7), (n,)), rng.integers(0, 2**40, n) % 5]
        assert _distinct_rows(*cols) == sorted(set(zip(*(c.tolist() for c in cols))))
