"""trtprof's own H200 captures (sample_traces/): their known answers hold in the raw data, and a
capture of a real sweep on the cuda backend attaches to its summary with the right diagnosis."""

from __future__ import annotations

import json
import sqlite3

import pytest

from profiler.capture.trace import Trace

from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.skipif(not (SAMPLE_TRACES / "README.md").exists(), reason="sample_traces/ is absent")


def _ranges(path, name):
    con = sqlite3.connect(path)
    rows = con.execute("SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                       "WHERE COALESCE(n.text, s.value) = ? AND n.end IS NOT NULL ORDER BY n.start", (name,)).fetchall()
    con.close()
    return [(e - s) for s, e in rows]


def test_manifests_match_their_captures():
    for manifest in sorted(SAMPLE_TRACES.glob("*.json")):
        if manifest.name.endswith(".summary.json"):
            continue
        info = json.loads(manifest.read_text())
        capture = manifest.with_suffix(".sqlite")
        assert capture.exists(), capture
        for name, count in info["ranges"].items():
            assert len(_ranges(capture, name)) == count, (manifest.name, name)


def test_host_stall_indices_are_the_slow_queries():
    info = json.loads((SAMPLE_TRACES / "host_stall.json").read_text())
    walls = _ranges(SAMPLE_TRACES / "host_stall.sqlite", "host_stall.query")
    slow = [i for i, w in enumerate(walls) if w > 3_000_000]
    assert slow == info["stalled_indices"] == list(range(7, 100, 10))
    con = sqlite3.connect(SAMPLE_TRACES / "host_stall.sqlite")
    sleeps = con.execute("SELECT COUNT(*), MIN(o.end - o.start) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                         "WHERE s.value = 'clock_nanosleep' AND o.end - o.start > 4000000").fetchone()
    assert sleeps[0] == 10 and sleeps[1] >= info["stall_ms"] * 1e6


def test_harness_capture_diagnosis_attaches_per_variant():
    """A real ``cuda`` backend sweep of rapidocr's cls model, eager and CUDA graph, under nsys."""
    from profiler.harness.nsys import attach_capture

    summary = json.loads((SAMPLE_TRACES / "harness_cls.summary.json").read_text())
    for v in summary["variants"]:
        v.pop("nsys", None)
    summary.pop("artifacts", None)
    attach_capture(summary, SAMPLE_TRACES / "harness_cls.sqlite")
    eager, graph = (next(v for v in summary["variants"] if v["key"] == k)
                    for k in ("fp32-wsdefault-s1", "fp32-wsdefault-s1-graph"))
    assert eager["nsys"]["series"] == "trtprof:fp32-wsdefault-s1/iter" and eager["nsys"]["count"] == 40
    assert eager["nsys"]["rules"] == ["launch_overhead"]
    assert graph["nsys"]["rules"] == []
    # at least one launch per step (234 ONNX nodes survive folding; a few steps launch two kernels,
    # and the H2D/D2H copies count as launches too)
    assert 234 <= eager["nsys"]["launches_per_instance"] < 300
    assert graph["nsys"]["launches_per_instance"] == 1  # one cudaGraphLaunch
    assert eager["nsys"]["gpu_busy_fraction"] < 0.1 < 0.7 < graph["nsys"]["gpu_busy_fraction"]
    # the harness's event-timed compute against the GPU busy time nsys projects (graph: within 15%)
    ratio = graph["nsys"]["compute_vs_gpu_busy"]["ratio"]
    assert 1.0 <= ratio < 1.15
    # the measured speedup agrees with the capture's wall times within 10%
    med = lambda d: d["median"]  # noqa: E731
    harness_speedup = med(eager["latency_ms"]) / med(graph["latency_ms"])
    capture_speedup = med(eager["nsys"]["wall_ms"]) / med(graph["nsys"]["wall_ms"])
    assert harness_speedup > 5 and abs(harness_speedup / capture_speedup - 1) < 0.10
    assert summary["artifacts"][-1] == {"kind": "nsys_capture", "path": str(SAMPLE_TRACES / "harness_cls.sqlite")}
    # the timeline: each variant's median query, fastest (the graph) first, drawn from the capture
    tl = summary["timeline"]
    labels = [w["label"] for w in tl["windows"]]
    assert [lab.split(" (#")[0] for lab in labels] == ["median instance of fp32-wsdefault-s1-graph",
                                                         "median instance of fp32-wsdefault-s1"]
    graph_w, eager_w = tl["windows"]
    for w, v in ((graph_w, graph), (eager_w, eager)):
        span = w["window_end_ms"] - w["window_start_ms"]
        assert abs(span / med(v["nsys"]["wall_ms"]) - 1) < 0.25  # a median query, not the whole variant
        assert any(lane.startswith("thread ") for lane in w["lanes"]) and any("stream" in lane for lane in w["lanes"])
    cats = lambda w: set(w["events"]["category"])  # noqa: E731
    assert "graph" in cats(graph_w) and "kernel" not in cats(graph_w)  # one graph replay per query
    assert "kernel" in cats(eager_w) and eager_w["total"] > 200  # every step a kernel of its own
    from profiler.report.sweep import build_sweep_page

    page = build_sweep_page(summary)
    assert any(s["id"] == "timeline" for s in page["sections"])
    assert {"fig-timeline-0", "fig-timeline-1"} <= set(page["figures"])
    plain = {k: v for k, v in summary.items() if k != "timeline"}
    assert not any(s["id"] == "timeline" for s in build_sweep_page(plain)["sections"])  # no --nsys: no section


def test_harness_streams_capture_overlaps():
    """Two streams with CUDA graphs: the GPU activity of the two contexts overlaps in the capture."""
    con = sqlite3.connect(SAMPLE_TRACES / "harness_cls_streams.sqlite")
    its = con.execute("SELECT MIN(n.start), MAX(n.end) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                      "WHERE COALESCE(n.text, s.value) = 'fp32-wsdefault-s2-graph/iter'").fetchone()
    acts = sorted(con.execute("SELECT start, end, streamId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
                              "WHERE start >= ? AND end <= ?", its).fetchall())
    assert len({a[2] for a in acts}) == 2
    total = sum(e - s for s, e, _ in acts)
    union, cur_s, cur_e = 0, None, None
    for s, e, _ in acts:
        if cur_e is None or s > cur_e:
            union += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    union += cur_e - cur_s
    assert total / union > 1.4  # the two streams' graphs run side by side much of the time


# ----------------------------------------------------------------------------- TensorRT-shaped captures

@pytest.fixture(scope="module")
def trt_shaped() -> dict:
    """trt_eager / trt_graph / trt_trtexec_graph (sample_traces/trt_shaped.py on the H200), each analysed once."""
    from profiler.capture.analyze import analyze_path

    return {m: analyze_path(SAMPLE_TRACES / f"trt_{m}.sqlite").to_json() for m in ("eager", "graph", "trtexec_graph")}


def test_trt_eager_inference_layers_and_setup(trt_shaped):
    d = trt_shaped["eager"]
    inf = d["inference"]
    assert inf["source"] == "tensorrt" and inf["series"] == "TensorRT:ExecutionContext::enqueue"
    assert inf["count"] == 80 and 76 <= inf["steady_count"] <= 79  # first inferences load modules lazily
    # six layer ranges inside the enqueue, not beside it
    names = [r["name"].split(":", 1)[1] for r in d["layers"]]
    assert sorted(names) == sorted(json.loads((SAMPLE_TRACES / "trt_eager.json").read_text())["layers"])
    assert all(r["parent"] == inf["series"] for r in d["layers"])
    assert {r["name"]: r["depth"] for r in d["ranges"]}["conv1 + relu1"] == 1
    # the three fp16 convolutions are the costliest layers and run cuDNN's tensor-core (xmma) kernels
    assert {r["name"] for r in d["layers"][:3]} == {f"TensorRT:conv{i} + relu{i}" for i in (1, 2, 3)}
    tc = {r["name"].split(":", 1)[1]: r["tensor_cores"] for r in d["layers"]}
    assert tc["conv1 + relu1"] and tc["fc1 + gelu"] and tc["pool"] is False
    total = d["layer_total"]
    assert abs(total["difference_ms"]) < 0.02 * total["inference_gpu_ms"]  # an unranged 32 KB DtoD copy
    assert sum(r["share"] for r in d["layers"]) == pytest.approx(1.0, abs=0.02)
    # setup: the 512 MiB pageable weight upload inside deserializeCudaEngine, before the first inference
    what = d["phases"]["setup"]["what"]
    assert what["uploads"]["largest_bytes"] == 512 * 2**20
    assert "TensorRT:deserializeCudaEngine" in what["ranges"]
    assert d["phases"]["time_to_first_inference_ms"] > d["phases"]["setup"]["what"]["ranges"]["TensorRT:deserializeCudaEngine"]


def test_trt_eager_diagnosis_is_launch_bound_not_pageable(trt_shaped):
    """Eager: 21 launches per inference from Python take ~0.7 ms of host time for ~0.16 ms of GPU work."""
    d = trt_shaped["eager"]
    rules = {f["rule"]: f for f in d["findings"]}
    assert rules["launch_overhead"]["range"] == "TensorRT:ExecutionContext::enqueue"
    assert rules["launch_overhead"]["severity"] == "high"
    assert "useCudaGraph" in rules["launch_overhead"]["recommendation"]
    # the 512 MiB upload is setup and the per-request 8-byte pageable copies cost nothing
    assert "pageable_memcpy" not in rules
    assert d["inference"]["host_ms"]["median"] > 3 * d["inference"]["gpu_ms"]["median"]
    shares = [f["impact"]["share"] for f in d["findings"]]
    assert shares == sorted(shares, reverse=True) and all(0 < s <= 1 for s in shares)
    # the GPU is busy about a fifth of the steady state: the host bounds it, not the compute kernels
    assert d["phases"]["steady"]["gpu_busy_fraction"] < 0.5 and d["inference"]["bound_by"] == "host"


def test_trt_graph_replays_are_one_unit_and_healthy(trt_shaped):
    d = trt_shaped["graph"]
    inf = d["inference"]
    assert inf["series"] == "TensorRT:ExecutionContext::enqueueV3" and inf["count"] == 80
    assert inf["graph_launches"] >= 79
    assert d["layers"] == [] and "captured" in d["layer_total"]["note"]
    # the capture-time enqueue and its layer ranges are setup, not steady state
    assert [r["name"] for r in d["ranges"]] == ["ExecutionContext::enqueueV3"]
    # one graph launch per inference: the GPU time per inference matches eager's GPU time within 25%
    assert inf["gpu_ms"]["median"] == pytest.approx(trt_shaped["eager"]["inference"]["gpu_ms"]["median"], rel=0.25)
    assert not [f for f in d["findings"] if f["severity"] in ("high", "medium")]
    assert d["phases"]["steady"]["gpu_busy_fraction"] >= 0.5 and d["inference"]["bound_by"] == "compute"
    # two streams, two requests in flight: with graphs the host keeps up and the streams overlap
    assert d["gpu_concurrency"] > 1.1
    assert len([s for s in d["streams"] if s["busy_ms"] > 1]) == 2


def test_trtexec_cuda_graph_replays_without_tensorrt_ranges_are_the_inferences(trt_shaped):
    """trtexec --useCudaGraph's shape: TensorRT's enqueue range twice (before and under the capture), then 80
    bare cudaGraphLaunch calls. The enqueue range was the inference ('2 instances', one launching nothing) and
    the capture read HIGH gpu_idle ('busy 0.0%') and HIGH launch_overhead. Each replay is the inference."""
    from profiler.cli.analyze import inference_lines

    d = trt_shaped["trtexec_graph"]
    manifest = json.loads((SAMPLE_TRACES / "trt_trtexec_graph.json").read_text())
    inf = d["inference"]
    assert (inf["source"], inf["series"], inf["graph_replays"]) == ("tensorrt", "TensorRT:cudaGraphLaunch", True)
    assert inf["count"] == manifest["graph_replays"] == 80 and inf["graph_launches"] == 80
    assert "captured" in d["layer_total"]["note"] and d["layers"] == []
    assert inf["gpu_ms"]["median"] == pytest.approx(trt_shaped["eager"]["inference"]["gpu_ms"]["median"], rel=0.25)
    assert d["inference"]["bound_by"] == "compute" and d["findings"] == []
    assert inf["copies_outside_per_inference"]["count"] == pytest.approx(2.0, abs=0.05)  # input and output
    assert "CUDA graph replays of TensorRT's enqueue" in inference_lines(d)[0]
    # the trt_graph layout, an enqueue range around each replay, keeps the enqueue as the unit
    assert "graph_replays" not in trt_shaped["graph"]["inference"]


def _replay_trace(captured: bool, other_graph: bool, n: int = 5, nested: bool = False, capture_tid: int = 5,
                  execs: tuple[int, ...] = (7,)) -> Trace:
    """Three eager TensorRT enqueues, one more under a stream capture when ``captured``, then ``n`` launches of
    graph exec 7 (the first launched after the capture), each followed by a launch of graph exec 9 (a PyTorch
    graph, say) when ``other_graph``; with ``nested`` each cudaGraphLaunch holds a traced cuGraphLaunch. The
    capture calls are made by thread ``capture_tid``; with two ``execs``, two enqueues are captured one after
    the other and their graphs replayed in turn."""
    import pandas as pd
    from tests.capture_builders import T, api, ranges

    nv = [("ExecutionContext::enqueueV3", k * 100 * T, (k * 100 + 50) * T, 5, "TensorRT")
          for k in range(3 + len(execs))]
    calls = [("cudaGraphLaunch", (k * 100 + 10) * T, (k * 100 + 15) * T, 5, "graph_launch") for k in range(3)]
    if captured:
        for k in range(3, 3 + len(execs)):
            calls += [("cudaStreamBeginCapture", (k * 100 - 10) * T, (k * 100 - 5) * T, capture_tid, "other"),
                      ("cudaStreamEndCapture", (k * 100 + 60) * T, (k * 100 + 65) * T, capture_tid, "other")]
    graphs = []
    for k in range(n):
        first = execs[k % len(execs)]
        for g, at in ((first, (1000 + k * 100) * T), (9, (1050 + k * 100) * T))[: 2 if other_graph else 1]:
            calls.append(("cudaGraphLaunch", at, at + 5 * T, 5, "graph_launch"))
            if nested:
                calls.append(("cuGraphLaunch", at + T, at + 4 * T, 5, "graph_launch"))
            graphs.append({"start_ns": at + 10 * T, "end_ns": at + 30 * T, "api_tid": 5, "api_start_ns": at,
                           "api_end_ns": at + 5 * T, "correlation_id": at, "device_id": 0, "stream_id": 7,
                           "pid": 1, "graph_id": g, "graph_exec_id": g})
    return Trace(nvtx=ranges(*nv), api=api(*calls), graphs=pd.DataFrame(graphs))


def test_only_replays_of_the_graph_tensorrt_was_captured_into_make_replay_ranges():
    """A graph launch is a TensorRT inference only as a replay of the graph an enqueue was captured into:
    not without a capture around an enqueue (an eager engine beside a PyTorch graph), not a launch of another
    graph, not one inside an enqueue range (trt_graph's layout), not a driver call nested in the runtime's,
    and not when they are no more than the enqueues."""
    from profiler.capture.replays import graph_replays
    from profiler.capture.series import build_host_calls, extract_ranges

    def made(trace: Trace) -> list[int]:
        r = extract_ranges(trace)
        out = graph_replays(r, build_host_calls(trace, "api"), trace)
        return list(out.frame["start_ns"].iloc[len(r.frame):] // 1_000)

    replays = [1000, 1100, 1200, 1300, 1400]
    assert made(_replay_trace(captured=True, other_graph=True)) == replays  # exec 7 only, not exec 9
    assert made(_replay_trace(captured=True, other_graph=True, nested=True)) == replays
    assert made(_replay_trace(captured=False, other_graph=True)) == []  # no enqueue under a capture
    assert made(_replay_trace(captured=True, other_graph=False)) == replays
    assert made(_replay_trace(captured=True, other_graph=False, n=4)) == []  # 4 replays against 4 enqueues
    # the stream captured by a loader thread; two engines captured in turn and replayed alternately
    assert made(_replay_trace(captured=True, other_graph=True, capture_tid=4)) == replays
    assert made(_replay_trace(captured=True, other_graph=False, n=10, execs=(7, 8))) == list(range(1000, 2000, 100))
    # the first replay's graph record names no exec: the first that does names the graph
    trace = _replay_trace(captured=True, other_graph=False, n=6)
    trace.graphs["graph_exec_id"] = trace.graphs["graph_exec_id"].astype("Int64")
    trace.graphs.loc[0, "graph_exec_id"] = None
    assert made(trace) == [1100, 1200, 1300, 1400, 1500]


def test_trt_eager_report_lists_findings_by_impact(trt_shaped):
    from profiler.report.analysis import build_analysis_page

    d = trt_shaped["eager"]
    page = build_analysis_page(d)
    [sec] = [s for s in page["sections"] if s["id"] == "findings"]
    assert [i["rule"] for i in sec["blocks"][0]["items"]] == [f["rule"] for f in d["findings"]]
    assert d["findings"][0]["rule"] == "launch_overhead"  # 61% of the steady state before gpu_idle's 32%


def test_cuda_backend_latencies_are_said_to_be_the_reference_executors():
    """The H200 sweep on the cuda backend: report and terminal say its numbers are its interpreter's."""
    from profiler.sweep.outputs import format_table
    from profiler.report.render import render_html
    from profiler.report.sweep import build_sweep_page

    summary = json.loads((SAMPLE_TRACES / "harness_cls.summary.json").read_text())
    html = render_html(build_sweep_page(summary))
    assert html.count("never TensorRT&#39;s") + html.count("never TensorRT's") == 2  # variants table and latency
    assert "note: backend cuda is trtprof's reference executor" in format_table(summary)
    for v in summary["variants"]:
        v["backend"] = "onnxruntime"
    assert "reference executor" not in render_html(build_sweep_page(summary))
    assert "reference executor" not in format_table(summary)
