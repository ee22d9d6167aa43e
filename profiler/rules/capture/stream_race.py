"""stream_race: a kernel of an inference starting on one stream while a copy (or kernel) of the same inference
still runs on another, with no event wait, stream wait or synchronisation between them (:mod:`profiler.capture.races`).

The same for an output copy (a device-to-host or device-to-device copy starting before the kernel of the same
inference that writes its source has ended) and for a producer thread's kernels against a consumer thread's copies or
kernels with nothing ordering them (:func:`profiler.capture.races.find_thread_races`).

A correctness warning: the kernel may read a half-written input, the host a half-written output. Its severity follows how often it happens, not
the time it takes; it carries no cost."""

from __future__ import annotations

from profiler.capture.races import Races, find_races, find_thread_races
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import band, pct, unit_series_id
from profiler.capture.context import CaptureContext

RACE_MIN_INSTANCES = 3
"""Fire when at least this many inferences hold a racing pair (one could be a coincidence of timing) ..."""
RACE_MIN_SHARE = 0.1
"""... and they are at least this share of the inferences checked."""
RACE_HIGH_SHARE, RACE_MEDIUM_SHARE = 0.5, 0.2
"""Severity bands over the share of inferences that race."""

RACE_ADVICE = (
    "Nothing orders the producer's stream before the kernel's: the kernel may read a half-copied input, and the "
    "result depends on timing. Issue the copy on the stream that runs the inference, or record an event on the "
    "copy's stream after it (cudaEventRecord) and make the inference's stream wait for it (cudaStreamWaitEvent) "
    "before enqueueing; for the next inference's input, copy into a second buffer on the copy stream and join the "
    "same way.")
TRT_RACE_ADVICE = (" With TensorRT: pass the stream that did the input copy to enqueueV3 / execute_async_v3, or "
                   "make TensorRT's stream wait on an event recorded after the copy (setInputConsumedEvent covers "
                   "only the other direction).")

OUTPUT_RACE_ADVICE = (
    "Nothing orders the kernel's stream before the copy's: the copy may read a half-written output and the host "
    "gets a result that depends on timing. Copy on the stream that ran the kernels, or record an event on it after "
    "them (cudaEventRecord) and make the copy's stream wait for it (cudaStreamWaitEvent) before the copy.")
THREAD_RACE_ADVICE = (
    "Handing a device buffer to another thread through a host queue or lock does not order the GPU work: the "
    "consumer's launch may run before the producer's kernels finish. Record an event on the producer's stream after "
    "its kernels and hand it over with the buffer; the consumer makes its stream wait for it (cudaStreamWaitEvent) "
    "before using the buffer, or the producer synchronises its stream (cudaStreamSynchronize) before handing over.")


def races_of(ctx: CaptureContext) -> Races:
    """The racing pairs of the capture's inference unit (none without an NVTX unit)."""
    return find_races(ctx.table, unit_series_id(ctx))


def thread_races_of(ctx: CaptureContext) -> Races:
    """The unordered producer/consumer pairs across the capture's threads."""
    return find_thread_races(ctx.table)


def fires(races: Races, t: dict) -> bool:
    """Whether the races are frequent enough to report (also what the overlap statistics leave out)."""
    return races.racing_instances >= t["min_racing_instances"] and races.share >= t["min_racing_share"]


@rule("stream_race", scope="capture", defaults={
    "min_racing_instances": RACE_MIN_INSTANCES, "min_racing_share": RACE_MIN_SHARE,
    "high_racing_share": RACE_HIGH_SHARE, "medium_racing_share": RACE_MEDIUM_SHARE})
def stream_race(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """GPU work of one inference on two streams overlapping with nothing ordering them."""
    out = []
    races = races_of(ctx)
    if fires(races, t):
        out.append(_same_thread(ctx, races, t))
    threads = thread_races_of(ctx)
    if fires(threads, t):
        out.append(_across_threads(threads, t))
    return out


def _where(streams: dict, label: str = "stream") -> str:
    pairs = sorted(streams.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{label} {a} -> {b}" + (f" (GPU {d})" if len({k[0] for k, _ in pairs}) > 1 else "")
                     for (d, a, b), _ in pairs[:3])


def _stream_rows(streams: dict, consumer: str = "kernel_stream") -> list[dict]:
    return [{"device": d, "producer_stream": a, consumer: b, "pairs": n}
            for (d, a, b), n in sorted(streams.items(), key=lambda kv: -kv[1])]


def _same_thread(ctx: CaptureContext, races: Races, t: Thresholds) -> Finding:
    """The finding for races within one thread's inferences (input copies, output copies or both)."""
    inputs = races.pairs - races.output_pairs
    what = "a copy" if races.copy_producers == inputs else \
        "a kernel" if races.copy_producers == 0 else "a copy or kernel"
    parts = []
    if inputs:
        parts.append(f"a kernel starts while {what} of the same inference still runs on another stream "
                     f"({_where(races.streams)})")
    if races.output_pairs:
        parts.append("a device-to-host or device-to-device copy starts before a kernel of the same inference on "
                     f"another stream ends ({_where(races.output_streams)})")
    evidence = {
        "instances": races.instances, "racing_instances": races.racing_instances,
        "racing_share": races.share, "racing_pairs": races.pairs, "copy_producers": races.copy_producers,
        "racing_overlap_ms": races.overlap_ns / 1e6, "streams": _stream_rows(races.streams),
        "examples": races.examples, "correctness": True,
    }
    advice = RACE_ADVICE if inputs else ""
    if races.output_pairs:
        evidence["output_copy_pairs"] = races.output_pairs
        evidence["output_streams"] = _stream_rows(races.output_streams, "copy_stream")
        advice = (advice + " " if advice else "") + OUTPUT_RACE_ADVICE
    return Finding(
        rule="stream_race", severity=band(races.share, t["high_racing_share"], t["medium_racing_share"]),
        range=ctx.unit.label if ctx.unit is not None else None,
        title=(f"Unsynchronised streams in {races.racing_instances} of {races.instances} inferences "
               f"({pct(races.share)}%): " + "; ".join(parts)
               + ", with no event wait or synchronisation between their launches"),
        evidence=evidence,
        threshold=t.pick("min_racing_instances", "min_racing_share"),
        recommendation=advice + (TRT_RACE_ADVICE if ctx.tensorrt and inputs else ""),
    )


def _across_threads(races: Races, t: Thresholds) -> Finding:
    """The finding for a producer thread's kernels against a consumer thread's launches."""
    who = ", ".join(f"thread {a} -> {b}" for (a, b), _ in sorted(races.threads.items(), key=lambda kv: -kv[1])[:3])
    return Finding(
        rule="stream_race", severity=band(races.share, t["high_racing_share"], t["medium_racing_share"]),
        range=None,
        title=(f"Unsynchronised threads in {races.racing_instances} of {races.instances} hand-offs "
               f"({pct(races.share)}%): a consumer thread's copy or kernel starts before the producer thread's "
               f"kernel of the same item ends ({who}; {_where({**races.streams, **races.output_streams})}), with no "
               "event wait or synchronisation ordering them"),
        evidence={
            "instances": races.instances, "racing_instances": races.racing_instances, "racing_share": races.share,
            "racing_pairs": races.pairs, "output_copy_pairs": races.output_pairs,
            "racing_overlap_ms": races.overlap_ns / 1e6, "across_threads": True,
            "threads": [{"producer_thread": a, "consumer_thread": b, "pairs": n}
                        for (a, b), n in sorted(races.threads.items(), key=lambda kv: -kv[1])],
            "streams": _stream_rows({**races.streams, **races.output_streams}, "consumer_stream"),
            "examples": races.examples, "correctness": True,
        },
        threshold=t.pick("min_racing_instances", "min_racing_share"),
        recommendation=THREAD_RACE_ADVICE,
    )
