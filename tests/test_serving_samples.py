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
