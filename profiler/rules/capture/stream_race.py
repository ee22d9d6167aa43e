"""stream_race: a kernel of an inference starting on one stream while a copy (or kernel) of the same inference
still runs on another, with no event wait, stream wait or synchronisation between them (:mod:`profiler.capture.races`).

A correctness warning: the kernel may read a half-written input. Its severity follows how often it happens, not
the time it takes; it carries no cost."""

from __future__ import annotations

from profiler.capture.races import Races, find_races
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


def races_of(ctx: CaptureContext) -> Races:
    """The racing pairs of the capture's inference unit (none without an NVTX unit)."""
    return find_races(ctx.table, unit_series_id(ctx))


def fires(races: Races, t: dict) -> bool:
    """Whether the races are frequent enough to report (also what the overlap statistics leave out)."""
    return races.racing_instances >= t["min_racing_instances"] and races.share >= t["min_racing_share"]


@rule("stream_race", scope="capture", defaults={
    "min_racing_instances": RACE_MIN_INSTANCES, "min_racing_share": RACE_MIN_SHARE,
    "high_racing_share": RACE_HIGH_SHARE, "medium_racing_share": RACE_MEDIUM_SHARE})
def stream_race(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """GPU work of one inference on two streams overlapping with nothing ordering them."""
    races = races_of(ctx)
    if not fires(races, t):
        return []
    what = "a copy" if races.copy_producers == races.pairs else \
        "a kernel" if races.copy_producers == 0 else "a copy or kernel"
    pairs = sorted(races.streams.items(), key=lambda kv: -kv[1])
    where = ", ".join(f"stream {a} -> {b}" + (f" (GPU {d})" if len({k[0] for k, _ in pairs}) > 1 else "")
                      for (d, a, b), _ in pairs[:3])
    return [Finding(
        rule="stream_race", severity=band(races.share, t["high_racing_share"], t["medium_racing_share"]),
        range=ctx.unit.label if ctx.unit is not None else None,
        title=(f"Unsynchronised streams in {races.racing_instances} of {races.instances} inferences "
               f"({pct(races.share)}%): a kernel starts while {what} of the same inference still runs on another "
               f"stream ({where}), with no event wait or synchronisation between their launches"),
        evidence={
            "instances": races.instances, "racing_instances": races.racing_instances,
            "racing_share": races.share, "racing_pairs": races.pairs, "copy_producers": races.copy_producers,
            "racing_overlap_ms": races.overlap_ns / 1e6,
            "streams": [{"device": d, "producer_stream": a, "kernel_stream": b, "pairs": n} for (d, a, b), n in pairs],
            "examples": races.examples, "correctness": True,
        },
        threshold=t.pick("min_racing_instances", "min_racing_share"),
        recommendation=RACE_ADVICE + (TRT_RACE_ADVICE if ctx.tensorrt else ""),
    )]
