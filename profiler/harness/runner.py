"""Timed runs with trtexec's semantics, so trtprof's numbers compare with trtexec's.

One run of a variant:
  1. warm-up by time (default 200 ms): queries run and are dropped, so none whose start falls inside the
     warm-up is kept;
  2. the timed phase: at least ``iterations`` queries per stream and at least ``duration_s`` of wall time;
  3. each query's host enqueue, H2D, compute and D2H come from the backend (``QueryTiming``);
     latency = H2D + compute + D2H;
  4. statistics with ``profiler.stats.summarize`` (trtexec's percentiles and CoV); throughput =
     queries / (last end - first start) over all streams.

Like trtexec (unless its --exposeDMA is given), each stream keeps two queries in flight: the next one is
enqueued before the previous one is waited for, so the GPU does not wait for the host between queries.
Latency stays each query's own GPU time (events); throughput becomes what the GPU sustains. Backends that
cannot do this (``ExecutionContext.overlaps`` false) and runs under an NVTX tool (each iteration's range
must hold its own GPU work) run one query at a time; ``Measurement.in_flight`` says which happened.

Several streams = one thread per execution context, all running at once (the backends release the GIL
while they compute). Every per-iteration record is kept (``Measurement.samples()``), not only summaries.
The loop does as little as possible per iteration: no NVTX calls at all unless a tool is attached.
"""

from __future__ import annotations

import gc
import threading
import time
from operator import attrgetter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from profiler.backends.base import ExecutionContext, QueryTiming
from profiler.cuda.timed_loop import repeat
from profiler.harness.hostload import HostLoad
from profiler.nvtx import Ranges, iteration_range_name, noop, ranges as default_ranges, step_range_name
from profiler.stats import summarize

Clock = Callable[[], int]  # monotonic nanoseconds


@dataclass
class HarnessConfig:
    """trtexec's --iterations, --duration (seconds) and --warmUp (milliseconds)."""

    iterations: int = 10
    duration_s: float = 3.0
    warmup_ms: float = 200.0
    #: trtexec's default (its --exposeDMA turns it off): a stream enqueues its next query before waiting
    #: for the previous one, where the backend can (ExecutionContext.overlaps) and no NVTX tool is attached
    overlap: bool = True

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be at least 1, not {self.iterations}")
        if self.duration_s < 0 or self.warmup_ms < 0:
            raise ValueError("duration and warm-up cannot be negative")


@dataclass
class Measurement:
    """The kept queries of one variant (all streams, ordered by start) and what was dropped."""

    key: str
    timings: list[QueryTiming]
    streams: int
    warmup_dropped: int
    warmup_ms: float
    per_stream_count: list[int] = field(default_factory=list)
    #: queries each stream kept in flight: 2 with overlap, else 1
    in_flight: int = 1
    #: share (0-1) of the host's CPU time other processes took while it ran; None where unmeasurable
    host_others_share: float | None = None

    def samples(self) -> list[dict[str, Any]]:
        """One row per kept query (the store's Sample columns); ``start_ms`` from the first start."""
        return timings_to_samples(self.timings)

    def summary(self) -> dict[str, Any]:
        return summarize_timings(self.timings)


def throughput_qps(timings: Sequence[QueryTiming]) -> float:
    """Queries per second from the first start to the last end, over every stream (trtexec's)."""
    if not timings:
        return float("nan")
    first = min(t.start_ns for t in timings)
    last = max(t.end_ns for t in timings)
    span_ns = last - first
    return float("inf") if span_ns <= 0 else len(timings) / (span_ns / 1e9)


def summarize_timings(timings: Sequence[QueryTiming]) -> dict[str, Any]:
    """latency/enqueue/compute/h2d/d2h summaries (ms) and throughput; h2d/d2h None when not measured."""
    out: dict[str, Any] = {
        "count": len(timings),
        "latency_ms": summarize([t.latency_ms for t in timings]),
        "enqueue_ms": summarize([t.enqueue_ms for t in timings]),
        "compute_ms": summarize([t.compute_ms for t in timings]),
        "throughput_qps": throughput_qps(timings),
    }
    for part in ("h2d_ms", "d2h_ms"):
        vals = [getattr(t, part) for t in timings if getattr(t, part) is not None]
        out[part] = summarize(vals) if vals else None
    if timings:
        out["span_ms"] = (max(t.end_ns for t in timings) - min(t.start_ns for t in timings)) / 1e6
    return out


def timings_to_samples(timings: Sequence[QueryTiming]) -> list[dict[str, Any]]:
    if not timings:
        return []
    origin = min(t.start_ns for t in timings)
    return [{"idx": i, "start_ms": (t.start_ns - origin) / 1e6, "latency_ms": t.latency_ms,
             "enqueue_ms": t.enqueue_ms, "h2d_ms": t.h2d_ms, "compute_ms": t.compute_ms,
             "d2h_ms": t.d2h_ms, "stream": t.stream} for i, t in enumerate(timings)]


class _Stop:
    """A flag the main thread raises to end every stream's loop early (Ctrl-C, a failing stream)."""

    __slots__ = ("set",)

    def __init__(self) -> None:
        self.set = False


def _stream_loop(ctx: ExecutionContext, warm_end_ns: int, iterations: int, duration_ns: int,
                 clock: Clock, nv: Ranges, range_name: str, stop: _Stop,
                 overlap: bool = False, warm_name: str | None = None) -> tuple[list[QueryTiming], int]:
    """Warm up until ``warm_end_ns`` (in one range ``warm_name``, if given), then time queries until both
    minimums are met (each in a range ``range_name``)."""
    query = ctx.query
    dropped = 0
    ranged = warm_name is not None and clock() < warm_end_ns
    warm_push, warm_pop = nv.pusher(warm_name) if ranged else (noop, noop)
    warm_push()
    while clock() < warm_end_ns and not stop.set:
        query()
        dropped += 1
    warm_pop()
    deadline = clock() + duration_ns
    if not nv.enabled:
        return ctx.run_loop(iterations, deadline, stop, clock, overlap), dropped
    kept: list[QueryTiming] = []
    append = kept.append
    push, pop = nv.pusher(range_name)

    def one_in_its_range() -> None:
        push()
        t = query()
        pop()
        append(t)

    repeat(one_in_its_range, iterations, deadline, stop, clock)
    return kept, dropped


def _run_streams(contexts: Sequence[ExecutionContext], config: HarnessConfig, warm_end_ns: int, duration_ns: int,
                 clock: Clock, nv: Ranges, name: str, stop: _Stop, overlap: bool,
                 results: list[Any], errors: list[BaseException], warm_name: str) -> None:
    """Each stream's loop into ``results``: inline for one stream, else one thread per stream, a
    stream's failure stopping the others and raised here. Only the inline loop ranges its warm-up: there
    it sits in the step's range, while on each stream's thread it would be a repeated top-level range
    that ``trtprof analyze`` could take for the inference."""
    if len(contexts) == 1:
        results[0] = _stream_loop(contexts[0], warm_end_ns, config.iterations, duration_ns, clock, nv, name, stop,
                                  overlap, warm_name)
        return

    def worker(i: int) -> None:
        try:
            results[i] = _stream_loop(contexts[i], warm_end_ns, config.iterations, duration_ns, clock,
                                      nv, name, stop, overlap)
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)
            stop.set = True

    threads = [threading.Thread(target=worker, args=(i,), name=f"trtprof-stream-{i}", daemon=True)
               for i in range(len(contexts))]
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.05)
    except BaseException:
        stop.set = True
        for th in threads:
            th.join()
        raise
    if errors:
        raise errors[0]


def run_queries(contexts: Sequence[ExecutionContext], config: HarnessConfig, *, key: str = "",
                clock: Clock = time.perf_counter_ns, nv: Ranges | None = None) -> Measurement:
    """Time ``contexts`` (one per stream, running concurrently) with trtexec's semantics.

    The inputs must already be bound (``ctx.set_inputs``). Ctrl-C stops every stream and propagates.
    """
    if not contexts:
        raise ValueError("run_queries needs at least one execution context")
    nv = nv if nv is not None else default_ranges()
    name = iteration_range_name(key) if key else "iter"
    warm_name = step_range_name(key, "warmup") if key else "warmup"
    duration_ns = int(config.duration_s * 1e9)
    warm_end_ns = clock() + int(config.warmup_ms * 1e6)
    stop = _Stop()
    # under an NVTX tool each query runs alone inside its iteration range, so the range holds its GPU work
    overlap = config.overlap and not nv.enabled and all(getattr(c, "overlaps", False) for c in contexts)
    results: list[tuple[list[QueryTiming], int] | None] = [None] * len(contexts)
    errors: list[BaseException] = []

    gc_was_on = gc.isenabled()
    gc.disable()  # a collection inside the timed loop would land on one query; the caller's setting comes back
    try:
        with HostLoad() as load:
            _run_streams(contexts, config, warm_end_ns, duration_ns, clock, nv, name, stop, overlap, results, errors,
                         warm_name)
    finally:
        if gc_was_on:
            gc.enable()

    merged: list[QueryTiming] = []
    dropped = 0
    per_stream = []
    for i, res in enumerate(results):
        kept, d = res  # type: ignore[misc]
        if any(t.stream != i for t in kept):  # backends normally stamp their stream already
            for t in kept:
                t.stream = i
        merged.extend(kept)
        dropped += d
        per_stream.append(len(kept))
    if len(results) > 1:  # one stream's queries are already in start order
        merged.sort(key=attrgetter("start_ns"))
    return Measurement(key=key, timings=merged, streams=len(contexts), warmup_dropped=dropped,
                       warmup_ms=config.warmup_ms, per_stream_count=per_stream, in_flight=2 if overlap else 1,
                       host_others_share=load.others_share)
