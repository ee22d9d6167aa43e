"""stream_race: a kernel of an inference starting on one stream while that inference's input copy still runs on
another, nothing ordering them, against its healthy twins (the streams joined by an event wait, the next
inference's copy overlapping this one's compute); and the streams' overlap statistics leave racing overlap out."""

from __future__ import annotations

import pytest

from profiler.capture.analyze import AnalysisOptions, analyze
from profiler.capture.trace import Trace
from tests.capture_builders import (COPY_STREAM, CONSUMER_TID, PRODUCER_TID, TRT_STREAM, output_race_app,
                                    thread_race_app)
from tests.capture_builders import RACE_N as N, race_app as _app


def _race_findings(trace: Trace):
    res = analyze(trace, AnalysisOptions(include_setup=True))
    return res, [f for f in res.findings if f.rule == "stream_race"]


def test_a_copy_racing_the_inference_kernels_is_a_correctness_warning():
    res, [f] = _race_findings(_app("race"))
    ev = f.evidence
    # every inference: kernels start at +15 and +40 us while the copy runs until +55 us: two pairs, and the
    # copy overlaps them over [15, 35) and [40, 55) us: 35 us
    assert (ev["instances"], ev["racing_instances"], ev["racing_pairs"]) == (N, N, 2 * N)
    assert ev["copy_producers"] == 2 * N and ev["racing_overlap_ms"] == pytest.approx(N * 35e-3)
    assert ev["streams"] == [{"device": 0, "producer_stream": COPY_STREAM, "kernel_stream": TRT_STREAM, "pairs": 2 * N}]
    assert f.severity == "high" and f.range == "infer" and "20 of 20 inferences" in f.title
    assert "cudaStreamWaitEvent" in f.recommendation and f.impact["ms_total"] is None
    # the overlap statistics do not count the race as a saving: the copy and kernels overlap only racing
    assert res.extra["racing_overlap_ms"] == pytest.approx(N * 35e-3)
    assert res.extra["overlap_saved_ms"] == pytest.approx(0.0)
    ov = res.extra["copy_compute_overlap"]
    assert ov["overlap_ms"] == pytest.approx(0.0) and ov["racing_ms"] == pytest.approx(N * 35e-3)


def test_severity_follows_how_often_and_a_rare_race_is_not_reported():
    _, [f] = _race_findings(_app("race", racing=6))  # 6 of 20: 30% -> medium
    assert f.severity == "medium" and f.evidence["racing_instances"] == 6
    _, found = _race_findings(_app("race", racing=2))  # under min_racing_instances
    assert found == []
    res = analyze(_app("race", racing=2), AnalysisOptions(include_setup=True))
    assert "racing_overlap_ms" not in res.extra  # what the rule does not report stays a saving


@pytest.mark.parametrize("mode", ["joined", "pipelined", "prefetch"])
def test_streams_joined_by_events_and_the_next_inference_copy_are_silent(mode):
    res, found = _race_findings(_app(mode))
    assert found == []
    assert "racing_overlap_ms" not in res.extra
    if mode == "pipelined":  # the next input's copy hides behind this inference's kernels: a real saving
        assert res.extra["copy_compute_overlap"]["overlap_ms"] == pytest.approx((N - 1) * 40e-3)  # [45, 65) and [70, 90) us
        assert "racing_ms" not in res.extra["copy_compute_overlap"]
    if mode == "prefetch":  # copy [16, 66) us against kernels [15, 35), [40, 60), [65, 85): 19 + 20 + 1 us saved
        assert res.extra["copy_compute_overlap"]["overlap_ms"] == pytest.approx((N - 1) * 40e-3)


# -- output copies: a D2H copy on another stream starting before the kernel of its inference ends ------------------
def test_an_output_copy_racing_its_kernels_is_a_correctness_warning():
    res, [f] = _race_findings(output_race_app("race"))
    ev = f.evidence
    # every inference: the copy [22, 32) us starts during the first kernel [20, 40) and before the other two start:
    # three pairs, of which only the first overlaps ([22, 32): 10 us)
    assert (ev["instances"], ev["racing_instances"], ev["racing_pairs"]) == (N, N, 3 * N)
    assert ev["output_copy_pairs"] == 3 * N and ev["copy_producers"] == 0
    assert ev["racing_overlap_ms"] == pytest.approx(N * 10e-3)
    assert ev["output_streams"] == [{"device": 0, "producer_stream": TRT_STREAM, "copy_stream": COPY_STREAM,
                                     "pairs": 3 * N}]
    assert ev["streams"] == []
    assert f.severity == "high" and "20 of 20 inferences" in f.title and "device-to-host" in f.title
    assert "half-written output" in f.recommendation and f.impact["ms_total"] is None
    assert ev["examples"][0]["consumer"] == "copy" and ev["examples"][0]["overlap_us"] == pytest.approx(10.0)
    assert res.extra["racing_overlap_ms"] == pytest.approx(N * 10e-3)


def test_output_races_severity_follows_how_often():
    _, [f] = _race_findings(output_race_app("race", racing=5))  # 5 of 20: 25% -> medium
    assert f.severity == "medium" and f.evidence["racing_instances"] == 5
    assert _race_findings(output_race_app("race", racing=2))[1] == []


@pytest.mark.parametrize("mode", ["joined", "waited"])
def test_an_output_copy_ordered_by_an_event_is_silent(mode):
    res, found = _race_findings(output_race_app(mode))
    assert found == [] and "racing_overlap_ms" not in res.extra


# -- across threads: a producer thread's kernels against a consumer thread's copy of the same item -------------------
def test_a_consumer_thread_copying_before_the_producer_kernels_end_is_a_race():
    res, [f] = _race_findings(thread_race_app("race"))
    ev = f.evidence
    # every item: the consumer's copy [14, 24) us starts during the first kernel [10, 30) and before the others
    assert ev["across_threads"] is True and f.range is None
    assert (ev["instances"], ev["racing_instances"], ev["racing_pairs"]) == (N, N, 3 * N)
    assert ev["threads"] == [{"producer_thread": PRODUCER_TID, "consumer_thread": CONSUMER_TID, "pairs": 3 * N}]
    assert ev["racing_overlap_ms"] == pytest.approx(N * 10e-3)
    assert f.severity == "high" and "20 of 20 hand-offs" in f.title and "thread 5 -> 6" in f.title
    assert "cudaStreamWaitEvent" in f.recommendation and f.impact["ms_total"] is None
    _, [f] = _race_findings(thread_race_app("race", racing=3))  # 3 of 20: 15% -> low
    assert f.severity == "low"


@pytest.mark.parametrize("mode", ["event", "synced", "lag", "feeding"])
def test_ordered_lagging_and_independent_threads_are_silent(mode):
    res, found = _race_findings(thread_race_app(mode))
    assert found == [] and "racing_overlap_ms" not in res.extra
