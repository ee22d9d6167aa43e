"""The inference unit the way real applications name it: numbered ranges (``Inference 12``), stage ranges that
repeat as a whole with no range around them (frames), and inferences made of several TensorRT enqueues. Each
shape beside its near-misses: numbers that are not an index, sequences that do not repeat as a whole."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.capture import numbered as N
from profiler.capture.analyze import AnalysisOptions, analyze
from profiler.capture.trace import Trace
from profiler.cli.analyze import inference_lines
from tests.capture_builders import T, api, kernels, ranges


def numbered_loop(fmt: str, n: int = 30, warm: str | None = None, n_warm: int = 5, tid: int = 5,
                  t0: int = 0, sync: bool = True):
    """``n_warm`` ranges named ``warm.format(i)`` then ``n`` named ``fmt.format(i)`` on thread ``tid``, 200 us
    apart, each launching one 100 us kernel (a warm-up one 400 us) and waiting for it: (ranges, kernels, calls)."""
    nv, kr, calls, t = [], [], [], t0
    for name, count, busy in ((warm, n_warm, 400), (fmt, n, 100)):
        if not name:
            continue
        for i in range(count):
            step = max(busy + 50, 200)
            nv.append((name.format(i), t, t + (step - 20) * T, tid))
            kr.append((t + 10 * T, t + (10 + busy) * T, tid, t + 5 * T))
            if sync:
                calls.append(("cudaStreamSynchronize", t + 12 * T, t + (12 + busy) * T, tid, "sync"))
            t += step * T
    return nv, kr, calls


def trace_of(nv, kr, calls=()) -> Trace:
    return Trace(kernels=kernels(*kr), nvtx=ranges(*nv), api=api(*calls) if calls else None)


@pytest.mark.parametrize("fmt,placeholder", [
    ("Inference {}", "Inference #"), ("Run_{}", "Run_#"), ("step[{}]", "step[#]"), ("iter-{}", "iter-#"),
    ("Forward {}", "Forward #"), ("batch[{}]", "batch[#]"), ("step_{}", "step_#"), ("{} infer", "# infer")])
def test_ranges_that_differ_only_by_a_number_are_one_series_and_the_unit(fmt, placeholder):
    data = analyze(trace_of(*numbered_loop(fmt)), AnalysisOptions(include_setup=True)).to_json()
    inf = data["inference"]
    assert (inf["series"], inf["count"], inf["source"]) == (placeholder, 30, "nvtx")
    [r] = [r for r in data["ranges"] if r["name"] == placeholder]
    assert r["numbered"] == {"numbers": 30, "first": 0, "last": 29}
    assert r["instances"]["number"] == list(range(30))  # each instance keeps its number, in start order
    assert "differ only by a number (30 numbers, 0 to 29)" in inf["chosen"]
    assert any(x.startswith("  unit chosen: ranges whose names differ only by a number") for x in inference_lines(data))


@pytest.mark.parametrize("fmt", ["conv{}", "layer4.{}", "fp{}", "resnet{}", "v1.{}", "sm{}_kernel", "h.{}"])
def test_numbers_that_are_part_of_a_name_are_not_merged(fmt):
    """conv1, layer4.2, fp16, resnet50: the number is glued to a letter or a dot, so it names a kind, not an
    instance; every name stays its own series."""
    data = analyze(trace_of(*numbered_loop(fmt, n=12))).to_json()
    names = {r["name"] for r in data["ranges"]}
    assert names == {fmt.format(i) for i in range(12)}
    assert not any("numbered" in r for r in data["ranges"])


def test_layers_numbered_alike_in_every_inference_stay_layers():
    """``layer_0`` ... ``layer_5`` inside each of 20 ``infer`` ranges: each number names 20 instances (a kind of
    work that repeats), so they stay six layers of the inference."""
    nv, kr, calls, t = [], [], [], 0
    for i in range(20):
        nv.append(("infer", t, t + 190 * T, 5))
        for j in range(6):
            s = t + (5 + 30 * j) * T
            nv.append((f"layer_{j}", s, s + 25 * T, 5))
            kr.append((s + 2 * T, s + 20 * T, 5, s + T))
        calls.append(("cudaStreamSynchronize", t + 185 * T, t + 189 * T, 5, "sync"))
        t += 200 * T
    data = analyze(trace_of(nv, kr, calls)).to_json()
    assert data["inference"]["series"] == "infer"
    assert sorted(x["name"] for x in data["layers"]) == [f"layer_{j}" for j in range(6)]


def test_two_numbers_overlapping_instances_or_tensorrt_layers_are_no_numbered_series():
    # two distinct numbers are too few
    assert {r["name"] for r in analyze(trace_of(*numbered_loop("Run_{}", n=2))).to_json()["ranges"]} == \
        {"Run_0", "Run_1"}
    # numbered ranges nested in one another (a recursion) are no iterations
    nv = [(f"level {i}", i * T, (100 - i) * T, 5) for i in range(10)]
    kr = [(50 * T, 60 * T, 5, 49 * T)]
    assert len(analyze(trace_of(nv, kr)).to_json()["ranges"]) == 10
    # TensorRT names its layer ranges after the ONNX nodes (Conv_12, Relu_13): never merged
    nv = [(f"Conv_{i}", i * 100 * T, i * 100 * T + 50 * T, 5, "TensorRT") for i in range(10)]
    kr = [(i * 100 * T + 5 * T, i * 100 * T + 40 * T, 5, i * 100 * T + T) for i in range(10)]
    assert len(analyze(trace_of(nv, kr)).to_json()["ranges"]) == 10


def test_node_numbers_of_an_exporter_are_no_index_but_every_tenth_step_is():
    """ONNX exporters number nodes across kinds (Conv_0, Conv_3, Conv_7, ...: Relu and Add between them): once
    each in a one-pass capture they are still layers. A loop ranged every tenth step (step_0, step_10, ...)
    is numbered at a stride of 10."""
    nums = [0, 3, 7, 12, 18, 25]
    nv = [(f"Conv_{k}", i * 100 * T, i * 100 * T + 50 * T, 5) for i, k in enumerate(nums)]
    kr = [(i * 100 * T + 5 * T, i * 100 * T + 40 * T, 5, i * 100 * T + T) for i in range(len(nums))]
    assert len(analyze(trace_of(nv, kr)).to_json()["ranges"]) == len(nums)
    nv, kr, calls = numbered_loop("step_{}", n=20)
    nv = [(f"step_{10 * i}", *rest) for i, (_, *rest) in enumerate(nv)]
    [r] = analyze(trace_of(nv, kr, calls), AnalysisOptions(include_setup=True)).to_json()["ranges"]
    assert r["name"] == "step_#" and r["numbered"] == {"numbers": 20, "first": 0, "last": 190}


def test_numbered_phases_around_loops_stay_one_off_ranges():
    """``bs=1``, ``bs=2``, ``bs=4``, ``bs=8``, each around its own timed loop of 25 ``iter`` ranges: the numbers
    name configurations, not iterations; each stays a one-off range and the iterations are the unit."""
    nv, kr, calls, t = [], [], [], 0
    for bs in (1, 2, 4, 8):
        it, k, c = numbered_loop("iter", n=25, t0=t + 10 * T)
        end = max(e for _, _, e, _ in it) + 10 * T
        nv += [(name, s0, e0, tid) for name, s0, e0, tid in it] + [(f"bs={bs}", t, end, 5)]
        kr, calls, t = kr + k, calls + c, end + 100 * T
    data = analyze(trace_of(nv, kr, calls), AnalysisOptions(include_setup=True)).to_json()
    assert {r["name"] for r in data["ranges"]} == {"bs=1", "bs=2", "bs=4", "bs=8", "iter"}
    assert (data["inference"]["series"], data["inference"]["count"]) == ("iter", 100)
    # the same names around 6 ranged steps each: iterations with their steps
    nv, kr, calls, t = [], [], [], 0
    for i in range(10):
        it, k, c = numbered_loop("step", n=6, t0=t + 10 * T)
        end = max(e for _, _, e, _ in it) + 10 * T
        nv += it + [(f"Inference {i}", t, end, 5)]
        kr, calls, t = kr + k, calls + c, end + 100 * T
    data = analyze(trace_of(nv, kr, calls)).to_json()
    assert (data["inference"]["series"], data["inference"]["count"]) == ("Inference #", 10)


def test_numbered_inferences_inside_numbered_runs_are_the_unit():
    """``Run 0`` ... ``Run 4``, each around ``Inference 0`` ... ``Inference 29``: the inferences' numbers repeat
    once per run (one per number inside each run's range), so they are one series, the unit; the runs, each
    around a loop of 30 inferences, stay one-off ranges."""
    nv, kr, calls, t = [], [], [], 0
    for run in range(5):
        it, k, c = numbered_loop("Inference {}", n=30, t0=t + 10 * T)
        end = max(e for _, _, e, _ in it) + 10 * T
        nv += it + [(f"Run {run}", t, end, 5)]
        kr, calls, t = kr + k, calls + c, end + 100 * T
    data = analyze(trace_of(nv, kr, calls), AnalysisOptions(include_setup=True)).to_json()
    assert (data["inference"]["series"], data["inference"]["count"]) == ("Inference #", 150)
    assert {r["name"] for r in data["ranges"]} == {"Inference #"} | {f"Run {i}" for i in range(5)}
    [r] = [r for r in data["ranges"] if r["name"] == "Inference #"]
    assert r["instances"]["number"] == list(range(30)) * 5


def test_the_rule_keeps_its_parameters_declared():
    assert N.NUMBERED_MIN_NUMBERS == 3 and N.NUMBERED_MIN_SINGLE_SHARE == 0.5 and N.PLACEHOLDER == "#"
    assert N.NUMBERED_MIN_DENSITY == 0.5
    assert N.templates("epoch 2 step 14") == ["epoch 2 step #", "epoch # step 14"]
    assert N.number_places("conv1 fp16 layer4.2 [7]") == [(21, 22)]


def test_numbered_warm_up_before_the_loop_is_setup():
    """``Warmup 0..4`` then ``Inference 0..29``: one series each; the warm-up is setup (a setup range, the
    steady state from the first inference on), not a second loop kept in the steady state."""
    nv, kr, calls = numbered_loop("Inference {}", warm="Warmup {}")
    data = analyze(trace_of(nv, kr, calls)).to_json()
    first_inference_ms = min(s for (name, s, *_) in nv if name.startswith("Inference")) / 1e6
    assert data["inference"]["series"] == "Inference #" and data["inference"]["count"] == 30
    ph = data["phases"]
    assert ph["steady"]["start_ms"] == pytest.approx(first_inference_ms)
    warm_wall_ms = sum(e - s for (name, s, e, *_) in nv if name.startswith("Warmup")) / 1e6
    assert ph["setup"]["what"]["ranges"] == {"Warmup #": pytest.approx(warm_wall_ms)}
    # a loop of another name before the unit is still kept: two loops compared in one capture
    nv, kr, calls = numbered_loop("Inference {}", warm="Baseline {}")
    other = analyze(trace_of(nv, kr, calls)).to_json()["phases"]
    assert other["steady"]["start_ms"] == pytest.approx(0.0)


def test_unit_accepts_the_placeholder_and_a_member_name():
    tr = trace_of(*numbered_loop("Inference {}", warm="Warmup {}"))
    for name in ("Inference #", "Inference 12"):
        inf = analyze(tr, AnalysisOptions(unit=name)).to_json()["inference"]
        assert inf["series"] == "Inference #" and inf["chosen"].endswith("; named by --unit")
    assert analyze(tr, AnalysisOptions(unit="Warmup 3")).to_json()["inference"]["series"] == "Warmup #"


STAGES = ("read_input", "preprocess", "backbone", "head", "nms", "postprocess")


def staged(n: int = 30, stages=STAGES, swap: int | None = None, wrapper: str | None = None):
    """``n`` frames of sibling stage ranges (no range around a frame), each stage 40 us with a kernel (the
    backbone's 100 us), 10 us apart; frame ``swap`` runs its first two stages the other way round; ``wrapper``: a
    one-off range around all."""
    nv, kr, calls, t = [], [], [], 1_000 * T
    for i in range(n):
        order = list(stages)
        if swap == i:
            order[0], order[1] = order[1], order[0]
        for st in order:
            busy = 100 if st == "backbone" else 10
            nv.append((st, t, t + (busy + 20) * T, 5))
            kr.append((t + 5 * T, t + (5 + busy) * T, 5, t + 2 * T))
            calls.append(("cudaStreamSynchronize", t + 6 * T, t + (6 + busy) * T, 5, "sync"))
            t += (busy + 30) * T
    if wrapper:
        nv.append((wrapper, 1_000 * T - 5 * T, t + 5 * T, 5))
    return nv, kr, calls


def test_stage_ranges_repeated_as_a_whole_are_frames_with_the_stages_as_layers():
    nv, kr, calls = staged()
    data = analyze(trace_of(nv, kr, calls), AnalysisOptions(include_setup=True)).to_json()
    inf = data["inference"]
    assert (inf["series"], inf["count"]) == ("(frame)", 30)
    # a frame runs from its first stage's start to its last stage's end: 5 stages of 30+10 us gaps + backbone
    frame_wall_us = sum((100 if s == "backbone" else 10) + 30 for s in STAGES) - 10
    assert inf["host_ms"]["median"] == pytest.approx(frame_wall_us / 1e3)
    assert sorted(x["name"] for x in data["layers"]) == sorted(STAGES)
    backbone = next(x for x in data["layers"] if x["name"] == "backbone")
    assert backbone["share"] == pytest.approx(100 / 150)  # 100 of the frame's 150 us of kernels
    from profiler.report.inference import inference_section

    intro = inference_section(data).intro  # the report's inference section says it too
    assert intro.startswith("One inference is a frame: one repetition of the stage ranges") and "Why this unit: " in intro
    [fr] = [r for r in data["ranges"] if r["name"] == "(frame)"]
    assert fr["made_from"].startswith("one range per repetition of the stage ranges read_input > preprocess")
    assert "stages the layers" in inf["chosen"]
    # inside a one-off range (main around the loop) too
    inside = analyze(trace_of(*staged(wrapper="main"))).to_json()["inference"]
    assert (inside["series"], inside["count"]) == ("(frame)", 30)


def test_sequences_that_do_not_repeat_as_a_whole_make_no_frame():
    # one frame runs its stages in another order: the stages stay as they are, the busiest one the unit
    data = analyze(trace_of(*staged(swap=7))).to_json()
    assert data["inference"]["series"] == "backbone" and not any(r["name"] == "(frame)" for r in data["ranges"])
    # two alternating ranges (a request and its sync point) are no pipeline of stages
    data = analyze(trace_of(*staged(stages=("request", "backbone")))).to_json()
    assert data["inference"]["series"] == "backbone"
    # two repetitions are too few
    assert not any(r["name"] == "(frame)" for r in analyze(trace_of(*staged(n=2))).to_json()["ranges"])


def chained(n: int = 20, engines: int = 4, outer: str | None = "Inference {}"):
    """``n`` inferences, each ``engines`` TensorRT enqueues one after another (each one 60 us kernel), inside an
    application range named ``outer.format(i)`` (none when ``outer`` is None) that waits for the results."""
    nv, kr, calls, t = [], [], [], 0
    for i in range(n):
        s0 = t
        for e in range(engines):
            nv.append(("ExecutionContext::enqueueV3", t + 5 * T, t + 25 * T, 5, "TensorRT"))
            kr.append((t + 30 * T, t + 90 * T, 5, t + 10 * T))
            calls.append(("cudaLaunchKernel", t + 10 * T, t + 12 * T, 5, "launch"))
            t += 100 * T
        calls.append(("cudaStreamSynchronize", t, t + 5 * T, 5, "sync"))
        if outer:
            nv.append((outer.format(i), s0, t + 10 * T, 5))
        t += 50 * T
    return nv, kr, calls


def test_an_inference_of_several_chained_enqueues_is_the_range_around_them():
    data = analyze(trace_of(*chained())).to_json()
    inf = data["inference"]
    assert (inf["series"], inf["source"], inf["count"]) == ("Inference #", "nvtx", 20)
    assert "holds 4 TensorRT enqueues per instance" in inf["chosen"]
    assert inf["gpu_ms"]["median"] == pytest.approx(4 * 0.060)
    [layer] = data["layers"]
    assert layer["name"] == "TensorRT:ExecutionContext::enqueueV3" and layer["share"] == pytest.approx(1.0)
    # 20 warm-up ranges of their own before 40 inferences: the inferences, warm-up's enqueues counted as held
    nv, kr, calls = chained(n=20, outer="Warmup {}")
    shift = 20 * 450 * T
    more = chained(n=40)
    nv += [(name, s + shift, e + shift, *rest) for name, s, e, *rest in more[0]]
    kr += [(s + shift, e + shift, tid, a + shift) for s, e, tid, a in more[1]]
    calls += [(name, s + shift, e + shift, *rest) for name, s, e, *rest in more[2]]
    inf = analyze(trace_of(nv, kr, calls)).to_json()["inference"]
    assert (inf["series"], inf["count"]) == ("Inference #", 40)
    # one enqueue per application range: the enqueue stays the unit
    one = analyze(trace_of(*chained(engines=1))).to_json()["inference"]
    assert (one["series"], one["source"]) == ("TensorRT:ExecutionContext::enqueueV3", "tensorrt")
    assert one["chosen"] == "TensorRT's range around each enqueue of an execution context"


def test_name_index_is_minus_one_for_ordinary_ranges():
    from profiler.capture.series import build_series

    nv, kr, calls = numbered_loop("Inference {}", n=5)
    nv.append(("other", 0, T, 5))
    table = build_series(trace_of(nv, kr, calls))
    idx = table.instances["name_index"].to_numpy()
    assert sorted(idx.tolist()) == [-1, 0, 1, 2, 3, 4]
    assert np.issubdtype(idx.dtype, np.integer)


# ----------------------------------------------------------------------------- H200 captures (sample_traces)

def _sql(path, query: str) -> list[tuple]:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _ranges_like(path, pattern: str, domain_id: int | None = 0) -> list[tuple[int, int]]:
    """(start, end) of the closed NVTX push/pop and start/end ranges whose text matches the SQL LIKE ``pattern``
    (in the domain ``domain_id``; 0 is the default one), in start order."""
    where = "" if domain_id is None else f" AND COALESCE(n.domainId, 0) = {domain_id}"
    return _sql(path, "SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                      f"WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL AND COALESCE(n.text, s.value) LIKE "
                      f"'{pattern}'{where} ORDER BY n.start")


def _median_ms(spans: list[tuple[int, int]]) -> float:
    return float(np.median([e - s for s, e in spans])) / 1e6


@pytest.fixture(scope="module")
def samples():
    from tests.capture_builders import capture_or_skip, result_of
    from tests.conftest import SAMPLE_TRACES

    def get(name: str, steady: bool = False):
        path = capture_or_skip(SAMPLE_TRACES / f"{name}.sqlite")
        if steady:
            from profiler.capture.analyze import analyze_path

            return path, analyze_path(path, cache=False).to_json()
        return path, result_of(path).to_json()

    return get


@pytest.mark.parametrize("name", ["numbered_eager", "numbered_graph"])
def test_numbered_h200_captures_have_their_inferences_and_warm_up_as_setup(samples, name):
    """``Warmup 0..4`` then ``Inference 0..59`` (no enclosing range): the unit is ``Inference #`` with the 60
    inferences SQL counts, each keeping its number; the warm-up is setup, the steady state begins with the first
    steady inference, and the host time is SQL's median over the steady inferences."""
    path, whole = samples(name)
    inf_spans, warm_spans = _ranges_like(path, "Inference %"), _ranges_like(path, "Warmup %")
    assert (len(inf_spans), len(warm_spans)) == (60, 5)
    inf = whole["inference"]
    assert (inf["series"], inf["count"], inf["source"]) == ("Inference #", len(inf_spans), "nvtx")
    [r] = [r for r in whole["ranges"] if r["name"] == "Inference #"]
    assert r["numbered"] == {"numbers": 60, "first": 0, "last": 59} and r["instances"]["number"] == list(range(60))
    _, data = samples(name, steady=True)
    st = data["inference"]
    assert st["host_ms"]["median"] == pytest.approx(_median_ms(inf_spans[st["warmup_count"]:]), abs=1e-6)
    first_steady_ms = (inf_spans[st["warmup_count"]][0] - data["capture"]["capture_start_ns"]) / 1e6
    assert data["phases"]["steady"]["start_ms"] == pytest.approx(first_steady_ms, abs=1e-6)
    warm_ms = sum(e - s for s, e in warm_spans) / 1e6
    assert data["phases"]["setup"]["what"]["ranges"]["Warmup #"] == pytest.approx(warm_ms, abs=1e-6)
    assert not any(r["name"] == "Warmup #" for r in data["ranges"])  # setup, not a loop of the steady state
    assert "differ only by a number (60 numbers, 0 to 59)" in st["chosen"]


def test_stages_h200_capture_is_one_frame_per_repetition_of_its_six_stages(samples):
    """Six sibling stage ranges per frame, 100 frames, no enclosing range: the unit is the frame; its host time
    is SQL's median of ``postprocess`` end minus ``read_input`` start per frame; the stages are its layers."""
    path, whole = samples("stages")
    stages = ("read_input", "preprocess", "backbone", "neck", "head", "postprocess")
    spans = {st: _ranges_like(path, st) for st in stages}
    assert {len(v) for v in spans.values()} == {100}
    inf = whole["inference"]
    assert (inf["series"], inf["count"]) == ("(frame)", 100)
    frames = [(a[0], b[1]) for a, b in zip(spans["read_input"], spans["postprocess"])]
    _, data = samples("stages", steady=True)
    st = data["inference"]
    assert st["host_ms"]["median"] == pytest.approx(_median_ms(frames[st["warmup_count"]:]), abs=1e-6)
    assert sorted(x["name"] for x in data["layers"]) == sorted(stages)
    assert all(x["count"] == st["steady_count"] for x in data["layers"])  # each stage once per frame
    assert "read_input > preprocess > backbone > neck > head > postprocess" in st["chosen"]


def test_chained_enqueues_h200_capture_is_the_range_around_the_four_enqueues(samples):
    """``infer 0..49``, each four TensorRT-shaped engines enqueued in a chain: the unit is ``infer #`` with the
    enqueues (200, SQL's count) as its layer, not one enqueue."""
    path, whole = samples("chained_enqueues")
    infer = _ranges_like(path, "infer %")
    enqueues = _ranges_like(path, "ExecutionContext::enqueue%", domain_id=None)
    assert (len(infer), len(enqueues)) == (50, 200)
    inf = whole["inference"]
    assert (inf["series"], inf["count"], inf["source"]) == ("infer #", 50, "nvtx")
    assert "holds 4 TensorRT enqueues per instance" in inf["chosen"]
    [layer] = [x for x in whole["layers"] if "enqueue" in x["name"]]
    assert layer["count"] == 4 * inf["steady_count"]
    assert inf["host_ms"]["median"] == pytest.approx(_median_ms(infer[inf["warmup_count"]:]), abs=1e-6)
