"""The pattern captures in sample_traces/ (patterns.py) show what their README rows say, read with SQL alone.

These pin the facts the analysis of issues 29 and 32 is judged against: if a capture were re-made and lost its
pattern (a race that no longer overlaps, contexts that overlap), these fail before any rule test does.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter

import pytest

from tests.conftest import SAMPLE_TRACES


def _need(name: str) -> sqlite3.Connection:
    path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return sqlite3.connect(path)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _ranges(con, pattern: str = "%") -> list[tuple[int, int, str, int]]:
    return con.execute(
        "SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 AND n.end IS NOT NULL "
        "AND COALESCE(n.text, s.value) LIKE ? ORDER BY n.start", (pattern,)).fetchall()


def _diagnostics(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT text FROM DIAGNOSTIC_EVENT")]


def _overlap_ns(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Summed intersection of two sorted lists of disjoint-per-list intervals."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


# ----------------------------------------------------------------------------- issue 29
@pytest.mark.parametrize("name", ["numbered_eager", "numbered_eager_again", "numbered_graph"])
def test_numbered_ranges_are_warmups_then_inferences(name):
    con = _need(name)
    names = [r[2] for r in _ranges(con)]
    assert names == [f"Warmup {i}" for i in range(5)] + [f"Inference {i}" for i in range(60)]


def test_numbered_graph_replays_one_graph_per_inference_and_eager_launches_48_kernels():
    for name, launch, per in (("numbered_eager", "cudaLaunchKernel%", 48), ("numbered_graph", "cudaGraphLaunch%", 1)):
        con = _need(name)
        api = con.execute("SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                          "WHERE s.value LIKE ?", (launch,)).fetchall()
        for s, e, _, _ in _ranges(con, "Inference %"):
            assert sum(1 for (t,) in api if s <= t < e) == per, name


def test_stages_repeat_six_siblings_in_order_without_an_enclosing_range():
    con = _need("stages")
    stages = ["read_input", "preprocess", "backbone", "neck", "head", "postprocess"]
    rows = [r for r in _ranges(con) if r[2] in stages]
    assert [r[2] for r in rows] == stages * 100
    for a, b in zip(rows, rows[1:]):
        assert a[1] <= b[0]  # siblings: each ends before the next begins
    others = Counter(r[2] for r in _ranges(con) if r[2] not in stages)
    assert others == {"cub::DeviceScan::InclusiveSumByKey": 206}  # CUB's own ranges, inside postprocess


def test_chained_enqueues_hold_four_tensorrt_enqueues_per_inference():
    con = _need("chained_enqueues")
    enq = _ranges(con, "ExecutionContext::enqueueV3")
    infers = _ranges(con, "infer %")
    assert [r[2] for r in infers] == [f"infer {i}" for i in range(50)]
    for s, e, _, _ in infers:
        assert sum(1 for r in enq if s <= r[0] and r[1] <= e) == 4


def test_killed_capture_lost_its_cuda_data_and_nsys_says_so():
    con = _need("killed")
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in _tables(con)
    diag = _diagnostics(con)
    for what in ("NVTX", "CUDA", "OS runtime libraries"):
        assert f"Not all {what} events might have been collected." in diag
    collected = [int(re.search(r"(\d+)", d.split(":")[1]).group(1)) for d in diag
                 if d.startswith("Number of CUDA events collected")]
    assert collected == [3]
    assert con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] == 3
    inferences = _ranges(con, "Inference %")
    assert [r[2] for r in inferences] == [f"Inference {i}" for i in range(117)]


def test_truncated_capture_says_cupti_events_might_be_missing():
    con = _need("truncated")
    diag = _diagnostics(con)
    assert any("Some CUPTI events might be missing" in d for d in diag)
    assert "Not all CUDA events might have been collected." in diag
    ends = [con.execute(f"SELECT MAX(end) FROM {t}").fetchone()[0]
            for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")]
    assert max(ends) - min(ends) < 1_000_000  # all cut at the same moment: nothing inside says data is missing


@pytest.mark.parametrize("name, ranges", [("launcher", 60), ("mp_fork", 1)])
def test_launcher_captures_hold_ranges_but_no_cuda(name, ranges):
    con = _need(name)
    assert not any(t.startswith("CUPTI_ACTIVITY_KIND") for t in _tables(con))
    assert len(_ranges(con)) == ranges
    assert "No CUDA events collected. Does the process use CUDA?" in _diagnostics(con)


# ----------------------------------------------------------------------------- issue 32
def _race_counts(name: str) -> tuple[int, int]:
    """(inferences whose big H2D copy overlaps a kernel of another stream issued in the same range,
    cudaStreamWaitEvent calls)."""
    con = _need(name)
    api = con.execute("SELECT r.start, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                      "JOIN StringIds s ON s.id = r.nameId").fetchall()
    copies = {c: (s, e, st) for s, e, c, st in con.execute(
        "SELECT start, end, correlationId, streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE bytes > 1000000")}
    kernels = {c: (s, e, st) for s, e, c, st in con.execute(
        "SELECT start, end, correlationId, streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    racing = 0
    for s, e, _, _ in _ranges(con, "infer"):
        corr = {c for t, c, _ in api if s <= t < e}
        hit = False
        for c in corr & copies.keys():
            cs, ce, cst = copies[c]
            hit |= any(ks < ce and ke > cs and kst != cst for ks, ke, kst in (kernels[k] for k in corr & kernels.keys()))
        racing += hit
    waits = sum(1 for _, _, n in api if n.startswith("cudaStreamWaitEvent"))
    return racing, waits


def test_race_overlaps_without_event_and_fixed_twin_does_not():
    assert _race_counts("race") == (49, 0)
    assert _race_counts("race_fixed") == (0, 50)
    assert _race_counts("pipelined") == (49, 98)  # overlap, but every copy ordered by events


def test_rebuild_repeats_module_loads_between_inferences_and_fixed_twin_does_not():
    for name, per_gap in (("rebuild", 40), ("rebuild_fixed", 0)):
        con = _need(name)
        loads = [t for (t,) in con.execute("SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                                           "ON s.id = r.nameId WHERE s.value = 'cuModuleLoadData'")]
        rs = _ranges(con, "infer")
        assert len(rs) == 12
        gaps = [sum(1 for t in loads if a[1] <= t < b[0]) for a, b in zip(rs, rs[1:])]
        assert gaps == [per_gap] * 11, name


@pytest.mark.parametrize("name, by, overlapping", [("two_contexts", "contextId", False),
                                                   ("one_context_two_streams", "streamId", True),
                                                   ("two_processes", "globalPid", False)])
def test_contexts_and_processes_time_slice_streams_overlap(name, by, overlapping):
    con = _need(name)
    groups: dict[int, list] = {}
    for key, s, e in con.execute(f"SELECT {by}, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"):
        groups.setdefault(key, []).append((s, e))
    a, b = sorted(groups.values(), key=len)[-2:]
    assert len(a) >= 400 and len(b) >= 400
    overlap = _overlap_ns(a, b)
    assert (overlap > 10_000_000) if overlapping else (overlap == 0)


@pytest.mark.parametrize("name, before_ms, after_ms", [("generate_drift", 0.388, 5.36),
                                                       ("generate_drift_mild", 0.388, 0.555)])
def test_decode_replays_drift_from_step_59(name, before_ms, after_ms):
    con = _need(name)
    d = [(e - s) / 1e6 for s, e in con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start")]
    assert len(d) == 100
    assert _median(d[:59]) == pytest.approx(before_ms, abs=0.005)
    assert _median(d[59:]) == pytest.approx(after_ms, rel=0.02)
    steady = _need("generate_graph")
    g = [(e - s) / 1e6 for s, e in steady.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")]
    assert len(g) == 200 and max(g) < 0.45


def test_fp32_convs_run_ffma_xmma_kernels_and_fp16_tensor_core_ones():
    def shares(name):
        con = _need(name)
        rows = con.execute("SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                           "JOIN StringIds s ON s.id = k.shortName GROUP BY 1").fetchall()
        total = sum(t for _, t in rows)
        return {n: t / total for n, t in rows}
    fp32 = shares("fp32_conv")
    assert sum(v for n, v in fp32.items() if "xmma" in n and "f32f32" in n and "ffma" in n) > 0.75
    fp16 = shares("fp16_conv")
    assert sum(v for n, v in fp16.items() if n.startswith("sm90_xmma") and "f16f16" in n) > 0.5


def test_sleeps_are_select_timeouts_and_gpu_wait_is_a_sync():
    con = _need("sleeps")
    sel = [(e - s) / 1e6 for s, e in con.execute("SELECT o.start, o.end FROM OSRT_API o JOIN StringIds s "
                                                 "ON s.id = o.nameId WHERE s.value = 'select'")]
    assert len(sel) == 20 and all(50.0 <= x < 50.3 for x in sel)
    con = _need("gpu_wait")
    syncs = [(e - s) / 1e6 for s, e in con.execute(
        "SELECT r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaStreamSynchronize%' AND r.end - r.start > 10000000")]
    assert len(syncs) == 20 and all(49.0 < x < 51.0 for x in syncs)
