"""The timeline picture (report/timeline.py) and the Chrome Trace Event export (report/chrome_trace.py).

A synthetic capture whose worst instance has a known GPU gap with a known host cause, then the real
captures: the gap's cause in host_stall, TensorRT's streams, and `trtprof analyze --trace` end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from profiler.capture.analyze import analyze, analyze_path
from profiler.capture.trace import Trace
from profiler.report.analysis import build_analysis_page
from profiler.report.chrome_trace import chrome_trace, validate, write_chrome_trace
from profiler.capture.timeline import Window, build_timeline, instance_windows, window_events
from tests.conftest import SAMPLE_TRACES, SHARED
from tests.capture_builders import T, api, capture_or_skip, kernels, ranges

NSYS_TRT = SHARED / "fixtures" / "nsys-tensorrt"


def synthetic() -> Trace:
    """Thread 5 runs three 'iter' instances; the last (300 µs) sleeps 135 µs while the GPU idles 150 µs."""
    nv = ranges(("iter", 0, 100 * T, 5), ("iter", 200 * T, 300 * T, 5), ("iter", 400 * T, 700 * T, 5))
    k = kernels((10 * T, 90 * T, 5, 5 * T), (210 * T, 290 * T, 5, 205 * T), (410 * T, 450 * T, 5, 405 * T),
                (600 * T, 650 * T, 5, 595 * T))
    a = api(("cudaLaunchKernel", 5 * T, 8 * T, 5, "launch"), ("cudaLaunchKernel", 205 * T, 208 * T, 5, "launch"),
            ("cudaLaunchKernel", 405 * T, 408 * T, 5, "launch"), ("cudaLaunchKernel", 595 * T, 598 * T, 5, "launch"))
    osrt = pd.DataFrame([{"name": "clock_nanosleep", "start_ns": 455 * T, "end_ns": 590 * T, "pid": 1, "tid": 5,
                          "global_tid": 5},
                         {"name": "poll", "start_ns": 0, "end_ns": 700 * T, "pid": 1, "tid": 9, "global_tid": 9}])
    return Trace(kernels=k, api=a, nvtx=nv, osrt=osrt, meta={"capture_start_ns": 0, "capture_end_ns": 700 * T})


@pytest.fixture(scope="module")
def synth():
    trace = synthetic()
    res = analyze(trace)
    return trace, res.to_json(), res.findings


def test_windows_are_the_median_and_the_worst_instance(synth):
    _, data, _ = synth
    med, worst = instance_windows(data)
    assert (med.start_ns, med.end_ns) == (200 * T, 300 * T) and "#1" in med.label
    assert (worst.start_ns, worst.end_ns) == (400 * T, 700 * T) and "worst" in worst.label


def test_worst_window_has_thread_and_stream_lanes_and_the_gap_with_its_cause(synth):
    trace, data, _ = synth
    tl = build_timeline(trace, data)
    worst = tl["windows"][1]
    # a helper thread's poll (thread 9) is noise, not a lane and not a cause
    assert worst["lanes"] == ["thread 5 · NVTX", "thread 5 · CUDA API", "thread 5 · OS runtime", "GPU 0 · stream 7"]
    [gap] = worst["gaps"]
    assert gap["dur_ms"] == pytest.approx(0.150) and gap["cause"] == "clock_nanosleep"
    assert gap["cause_overlap_fraction"] == pytest.approx(135 / 150, abs=1e-3)
    pad = 300 * T * 0.05
    assert gap["start_ms"] == pytest.approx((450 * T - (400 * T - pad)) / 1e6)
    assert worst["window_end_ms"] - worst["window_start_ms"] == pytest.approx(0.300)
    ev = worst["events"]
    kinds = sorted(set(ev["category"]))
    assert kinds == ["NVTX range", "OS runtime", "kernel", "launch"]
    assert sorted(d for d, c in zip(ev["dur_ms"], ev["category"]) if c == "kernel") == \
        [pytest.approx(0.04), pytest.approx(0.05)]


def test_events_are_capped_and_say_so(synth):
    trace, _, _ = synth
    w = window_events(trace, Window("all", 0, 700 * T), max_events=3)
    # 3 NVTX + 4 kernels + 4 launches + 1 sleep; thread 9 neither calls CUDA nor marks NVTX: left out
    assert w["shown"] == 3 and w["total"] == 12
    assert len(w["events"]["name"]) == 3 and set(w["events"]["category"]) <= {"NVTX range", "kernel"}


def test_the_report_draws_the_timeline_and_pins_the_findings(synth):
    trace, data, _ = synth
    page = build_analysis_page({**data, "timeline": build_timeline(trace, data)})
    sec = next(s for s in page["sections"] if s["id"] == "timeline")
    charts = [b["id"] for b in sec["blocks"] if b["type"] == "chart"]
    assert charts == ["fig-timeline-0", "fig-timeline-1"]
    fig = page["figures"]["fig-timeline-1"]
    assert fig["layout"]["yaxis"]["categoryarray"][-1] == "GPU 0 · idle"
    idle = next(t for t in fig["data"] if t["name"] == "GPU idle")
    assert "clock_nanosleep" in idle["hovertext"][0]
    without = build_analysis_page(data)  # a stored run or --json without the capture: says how to get it
    sec = next(s for s in without["sections"] if s["id"] == "timeline")
    assert sec["blocks"][0]["type"] == "missing" and "--report" in sec["blocks"][0]["text"]


def test_real_capture_the_worst_host_stall_instance_shows_the_sleep():
    path = capture_or_skip(SAMPLE_TRACES / "host_stall.sqlite")
    res = analyze_path(path)
    tl = build_timeline(res.context.trace, res.to_json())
    med, worst = tl["windows"]
    assert "#7" in worst["label"]  # the analysis's first outlier, 6.6 ms against a 1.4 ms median
    longest = max(worst["gaps"], key=lambda g: g["dur_ms"])
    assert longest["cause"] == "clock_nanosleep" and longest["dur_ms"] > 5.0
    assert max((g["dur_ms"] for g in med["gaps"]), default=0.0) < 0.1


def test_real_tensorrt_capture_has_its_streams():
    path = capture_or_skip(NSYS_TRT / "multistream_HtoD-bound.sqlite")
    res = analyze_path(path)
    tl = build_timeline(res.context.trace, res.to_json())
    lanes = [lane for w in tl["windows"] for lane in w["lanes"]]
    assert any(lane.startswith("GPU 0 · stream ") and lane != "GPU 0 · stream -1" for lane in lanes)
    assert any(lane.endswith("· NVTX 2") for lane in lanes)  # TensorRT's layer ranges nest in enqueue


def test_chrome_trace_is_well_formed_with_every_event_and_findings_as_instants(synth, tmp_path):
    trace, data, findings = synth
    doc = chrome_trace(trace, findings, result=data)
    assert validate(doc) == []
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == doc["otherData"]["events_total"] == 12
    sleep = next(e for e in complete if e["name"] == "clock_nanosleep")
    assert (sleep["ts"], sleep["dur"]) == (455.0, 135.0)  # µs from the capture's start
    kern = [e for e in complete if e["cat"] == "kernel"]
    assert {e["pid"] for e in kern} == {1_000_000} and {e["tid"] for e in kern} == {7}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert {"GPU 0", "stream 7", "process 1", "thread 5 · NVTX", "thread 5 · CUDA API"} <= names
    instants = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert [e["name"].split(" ", 1)[1] for e in instants] == [f.rule for f in findings]
    out = write_chrome_trace(doc, tmp_path / "t.json")
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))


def test_chrome_trace_of_a_large_capture_is_cut_at_a_time_and_says_where():
    path = capture_or_skip(SAMPLE_TRACES / "launch_bound.sqlite")
    res = analyze_path(path)
    doc = chrome_trace(res.context.trace, res.findings, max_events=1000, result=res.to_json())
    assert validate(doc) == []
    info = doc["otherData"]
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert info["events_kept"] == len(complete) == 1000 < info["events_total"]
    assert max(e["ts"] for e in complete) == info["truncated_at_us"]  # the earliest events, nothing later


def test_validate_rejects_what_perfetto_would():
    assert validate({"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "name": "k", "ts": 1.0, "dur": -1}]})
    assert validate({"traceEvents": [{"ph": "i", "pid": 1, "tid": 1, "name": "k", "ts": 1.0}]})
    assert validate({"traceEvents": [{"ph": "X", "pid": "1", "tid": 1, "name": "k", "ts": 1, "dur": 1}]})
    assert validate([]) and validate({"traceEvents": [{"ph": "Q"}]})


def test_analyze_trace_option_writes_a_valid_file_and_says_what_it_kept(tmp_path):
    path = capture_or_skip(SAMPLE_TRACES / "host_stall.sqlite")
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(path), "--no-store", "--trace", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert validate(doc) == [] and doc["otherData"]["truncated_at_us"] is None
    assert f"trace: {out} ({doc['otherData']['events_kept']:,} events;" in r.stderr
    instants = [e["name"].split(" ") for e in doc["traceEvents"] if e["ph"] == "i"]
    # its queries are FP32 matmuls with TF32 off on an H200 (workloads.py): fp32_math says so
    assert sorted(rule for _, rule in instants) == ["fp32_math", "gpu_idle", "jitter"]
    assert all(sev in ("HIGH", "MEDIUM", "LOW", "INFO") for sev, _ in instants)
