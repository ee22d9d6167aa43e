"""Sample traces of serving loops (sample_traces/: pipeline, varbatch, queue_wait; H200, 2026-12-01): what
an inference engineer would say of each, and nsys's own statistics of their ranges beside ours."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from profiler.capture.analyze import analyze_path
from profiler.capture.options import AnalysisOptions
from tests.conftest import SAMPLE_TRACES

REFERENCE = SAMPLE_TRACES / "reference"
RANGES = {"pipeline": "pipeline.infer", "varbatch": "varbatch.request", "queue_wait": "queue_wait.request"}
_SEEN: dict[tuple[str, bool], object] = {}


def _analysis(name: str, include_setup: bool = False):
    path = SAMPLE_TRACES / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not present")
    if (name, include_setup) not in _SEEN:
        _SEEN[name, include_setup] = analyze_path(path, AnalysisOptions(include_setup=include_setup), cache=False)
    return _SEEN[name, include_setup]


def _calls(path, call: str) -> list[tuple[int, int]]:
    """(start, end) ns of the OS runtime calls named ``call``, in start order, straight from the export."""
    import sqlite3

    con = sqlite3.connect(path)
    rows = con.execute("SELECT o.start, o.end FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                       "WHERE s.value = ? ORDER BY o.start", (call,)).fetchall()
    con.close()
    return rows


def _fired(res, rule: str) -> list:
    return [f for f in res.findings if f.rule == rule]


@pytest.mark.parametrize("name", sorted(RANGES))
def test_range_statistics_agree_with_nsys_nvtx_sum(name: str):
    """Every instance of the range, as nsys stats -r nvtx_sum counts them: count, median, min and max."""
    path = REFERENCE / f"{name}_stats_nvtx_sum.csv"
    if not path.exists():
        pytest.skip("no nsys reference")
    ref = pd.read_csv(path).set_index("Range").loc[f":{RANGES[name]}"]
    [r] = [r for r in _analysis(name, include_setup=True).to_json()["ranges"] if r["name"] == RANGES[name]]
    assert r["count"] == ref["Instances"]
    assert r["wall_ms"]["median"] * 1e6 == pytest.approx(ref["Med (ns)"], abs=1)
    assert r["wall_ms"]["min"] * 1e6 == pytest.approx(ref["Min (ns)"], abs=1)
    assert r["wall_ms"]["max"] * 1e6 == pytest.approx(ref["Max (ns)"], abs=1)


def test_queue_wait_the_server_waits_for_requests_not_for_work_to_move():
    """The serving thread blocks in sem_wait (queue.get) between bursts of requests: the GPU idles because no
    request is there. The finding names the wait and says both readings (a slow producer, or spare capacity);
    it must not tell the user to move the wait off the thread, nor blame launches, copies or syncs."""
    res = _analysis("queue_wait")
    info = json.loads((SAMPLE_TRACES / "queue_wait.json").read_text())
    [g] = _fired(res, "gpu_idle")
    host = g.evidence["host_during_gaps_ms"]["os_runtime"]
    assert next(iter(host)) == "sem_wait"
    # the serving thread's waits, read off the export: ten between bursts and one for the producer thread's start
    # lie in the steady state (the last, after the last request, does not); the gaps hold all of their time
    data = res.to_json()
    steady, start_ns = data["phases"]["steady"], data["capture"]["capture_start_ns"]
    lo_ns, hi_ns = start_ns + steady["start_ms"] * 1e6, start_ns + steady["end_ms"] * 1e6
    waits = _calls(SAMPLE_TRACES / "queue_wait.sqlite", "sem_wait")
    inside_ms = sum(max(0.0, min(e, hi_ns) - max(s, lo_ns)) for s, e in waits) / 1e6
    assert len([1 for s, e in waits if e - s >= 0.5 * info["pause_ms"] * 1e6]) == info["bursts"] - 1
    assert host["sem_wait"] == pytest.approx(inside_ms, abs=1e-6)
    assert g.evidence["host_cause"] == "os_runtime" and "mostly in sem_wait" in g.title
    assert g.recommendation.startswith("The launching thread waits for its next input (sem_wait:")
    assert "move that work off" not in g.recommendation
    for rule in ("launch_overhead", "pageable_memcpy", "sync_api", "transfer_bound"):
        assert not _fired(res, rule), rule


def _jitter_as_the_rule_sees_it(res) -> list:
    """The jitter rule's own findings, before the impact drops those too cheap to report."""
    from profiler.rules import get_rule

    spec = get_rule("capture", "jitter")
    return spec.run(res.context, spec.defaults)


def test_pipeline_syncs_wait_for_the_gpu_backlog_not_jitter():
    """The host runs ahead of a GPU busy ~99% of the time and synchronises every 16th iteration: those
    instances wait for the GPU work queued by the 15 before them. No high or medium jitter; the rule names
    the backlog at exactly the synchronising instances and prices none of those waits."""
    res = _analysis("pipeline")
    info = json.loads((SAMPLE_TRACES / "pipeline.json").read_text())
    assert not [f for f in _fired(res, "jitter") if f.severity in ("high", "medium")]
    [f] = _jitter_as_the_rule_sees_it(res)
    ev = f.evidence
    waits = [o for o in ev["outliers"] if o["cause"] == "gpu_backlog"]
    assert [o["index"] for o in waits] == info["synchronised_indices"]
    assert all(o["instances_queued"] == 15 or o["index"] == 15 for o in waits)  # the first counts from instance 1
    assert all(o["call"] == "cudaDeviceSynchronize" and o["call_ms"] <= 1.2 * o["backlog_ms"] for o in waits)
    assert ev["gpu_busy_fraction_max"] > 0.95
    steady_ms = res.context.steady_ns / 1e6
    assert ev["backlog_wait_ms"] > 0.8 * steady_ms  # the waits were ~85% of the steady state ...
    assert ev["excess_ms_total"] < 0.01 * steady_ms  # ... and none of it is jitter to remove
    assert f.title.startswith("Enqueue time plus GPU backlog waits, not unstable latency")
    assert "other streams or processes" not in f.recommendation and "GPU latency" in f.recommendation


def test_varbatch_latency_follows_each_request_s_batch():
    """Requests of batch 1, 8 or 64: three work sizes, one per batch size, with as many instances as the
    manifest has requests of that size; wall times rise with their GPU work. No high or medium jitter, no
    advice to lock clocks or warm up."""
    res = _analysis("varbatch")
    info = json.loads((SAMPLE_TRACES / "varbatch.json").read_text())
    assert not [f for f in _fired(res, "jitter") if f.severity in ("high", "medium")]
    [f] = _jitter_as_the_rule_sees_it(res)
    sizes = f.evidence["work_sizes"]
    steady = info["batch_sizes"][-f.evidence["count"]:]  # the first request is warm-up
    assert [s["instances"] for s in sizes] == [steady.count(b) for b in (1, 8, 64)]
    assert [s["copy_bytes"] for s in sizes] == [b * 10 * 4 for b in (1, 8, 64)]  # ten fp32 logits per image
    gpu, wall = [s["gpu_busy_ms_median"] for s in sizes], [s["wall_ms_median"] for s in sizes]
    assert gpu == sorted(gpu) and wall == sorted(wall) and gpu[2] > 20 * gpu[0]
    assert f.evidence["by_work"]["explained_ms"] > 0.9 * f.evidence["by_work"]["above_median_ms"]
    assert f.title.startswith("Latency follows the GPU work of each instance, not instability: 3 work sizes")
    assert "lock" not in f.recommendation and "warm up" not in f.recommendation
