"""The one timed loop: every latency trtprof reports on a GPU is measured here.

A *query* is trtexec's unit: H2D copies, the compute, D2H copies on one stream, each part between two
CUDA events, and the host time of the enqueue call on a monotonic clock. The loop runs queries until
both minimums are met (``iterations`` and ``deadline_ns``, checked by :func:`repeat`, which the CPU
backends' loop uses too) or a stop flag is raised, with one or two queries in flight:

* **two** (trtexec's default): a query is enqueued before the previous one is waited for, so the GPU
  never waits for the host between queries; the previous query is then waited for and read.
* **one** (trtexec's ``--exposeDMA``): the previous query's times are read while this one runs, then
  this one is waited for.

Two :class:`EventSet` lanes alternate, so an event is recorded again only after its time was read, and
a query's times are read only after its last event completed. Between a wait returning and the next
CUDA call the host only reads the clock and checks the stop conditions.

A backend hands the loop a :class:`TimedStream`: the runtime (``cuda.bindings.runtime`` or a test double
with the same calls), the stream, the two lanes, its H2D copies, and ``enqueue(lane)``, which puts the
compute on the stream and returns the D2H copies of its outputs. The loop records the events, makes the
copies and measures; the backend only enqueues. A backend whose enqueue records the compute events
itself (CUDA graphs holding event-record nodes) sets ``events_in_enqueue``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Sequence


@dataclass
class QueryTiming:
    """One query. Times in ms; ``start_ns``/``end_ns`` on the host monotonic clock (perf_counter_ns)."""

    start_ns: int
    end_ns: int
    enqueue_ms: float
    compute_ms: float
    h2d_ms: float | None = None
    d2h_ms: float | None = None
    stream: int = 0

    @property
    def latency_ms(self) -> float:
        return self.compute_ms + (self.h2d_ms or 0.0) + (self.d2h_ms or 0.0)


Clock = Callable[[], int]  # monotonic nanoseconds
Copy = tuple[int, int, int]  # (destination pointer, source pointer, bytes)
#: the backend's part of a query: enqueue the compute for this lane, return the D2H copies of its outputs
Enqueue = Callable[["EventSet"], Sequence[Copy]]


@dataclass(frozen=True, eq=False)
class EventSet:
    """The four timing events of one query (raw ``cudaEvent_t`` handles), named by what they mark.

    ``lane`` says which of the two alternating sets this is (0 or 1): a backend that keeps one CUDA
    graph per lane (event-record nodes inside) launches ``graphs[lane]``."""

    lane: int
    copy_in_start: Any  # before the H2D copies
    compute_start: Any  # after them, before the compute
    compute_end: Any  # after the compute
    copy_out_end: Any  # after the D2H copies


class _NeverStop:
    set = False


NEVER_STOP = _NeverStop()

_new = object.__new__


def _timing(start_ns: int, end_ns: int, enqueue_ns: int, h2d_ms: float | None, compute_ms: float,
            d2h_ms: float | None, stream: int) -> QueryTiming:
    """A QueryTiming filled directly: the dataclass __init__ costs about a microsecond per query."""
    t = _new(QueryTiming)
    t.__dict__.update(start_ns=start_ns, end_ns=end_ns, enqueue_ms=enqueue_ns / 1e6, h2d_ms=h2d_ms,
                      compute_ms=compute_ms, d2h_ms=d2h_ms, stream=stream)
    return t


def repeat(step: Callable[[], Any], iterations: int, deadline_ns: int, stop: Any, clock: Clock) -> int:
    """Call ``step`` until it ran ``iterations`` times and ``clock()`` reached ``deadline_ns``, or until
    ``stop.set`` is true; returns how many times it ran. The clock is read only once the count is met."""
    n = 0
    while not stop.set:
        step()
        n += 1
        if n >= iterations and clock() >= deadline_ns:
            break
    return n


class TimedStream:
    """One stream's queries as the loop runs them (see the module docstring).

    ``check(result, call)`` turns a failed runtime result into the CUDA error naming ``call``
    (``profiler.cuda.check``); ``scope()`` is entered around every run (the eager path makes its stream
    PyTorch's current one there; default: nothing)."""

    def __init__(self, rt: Any, check: Callable[[Any, str], Any], stream: Any, lanes: tuple[EventSet, EventSet],
                 h2d: Sequence[Copy], h2d_kind: Any, d2h_kind: Any, enqueue: Enqueue, stream_index: int = 0,
                 scope: Callable[[], ContextManager[Any]] = nullcontext):
        self.rt, self.check, self.stream, self.lanes = rt, check, stream, lanes
        self.h2d, self.h2d_kind, self.d2h_kind = list(h2d), h2d_kind, d2h_kind
        self.enqueue, self.stream_index, self.scope = enqueue, stream_index, scope
        #: False: no copies and no copy events per query (h2d_ms/d2h_ms None)
        self.transfers = True
        #: True: ``enqueue`` records the lane's compute_start/compute_end itself (event nodes in a graph)
        self.events_in_enqueue = False
        self.next_lane = lanes[0]
        #: the lane of the last query enqueued (None before the first): whose outputs are the latest
        self.last_lane: EventSet | None = None
        self._following = {lanes[0]: lanes[1], lanes[1]: lanes[0]}
        self._held: tuple | None = None  # the query in flight (two) or waited for but not read (one)
        self._kept: list[QueryTiming] = []

    # -- the loop --
    def run(self, iterations: int, deadline_ns: int, stop: Any = NEVER_STOP, clock: Clock = time.perf_counter_ns,
            in_flight: int = 2) -> list[QueryTiming]:
        """Queries until both minimums are met or ``stop.set``; their timings in order (none is lost:
        the queries still in flight when the loop ends are waited for and read)."""
        if in_flight not in (1, 2):
            raise ValueError(f"in_flight must be 1 or 2, not {in_flight}")
        self._held, self._kept = None, []
        step = self._step_two_in_flight if in_flight == 2 else self._step_one_in_flight
        with self.scope():
            repeat(step, iterations, deadline_ns, stop, clock)
            held, self._held = self._held, None
            if held is not None:
                self._kept.append(self._read(self._wait(held) if in_flight == 2 else held))
        kept, self._kept = self._kept, []
        return kept

    def query(self) -> QueryTiming:
        """One query, waited for and read."""
        return self.run(1, 0, NEVER_STOP, in_flight=1)[0]

    def _step_two_in_flight(self) -> None:
        query = self._enqueue_query()
        held = self._held
        if held is not None:  # the previous query, waited for while this one is queued behind it
            self._kept.append(self._read(self._wait(held)))
        self._held = query

    def _step_one_in_flight(self) -> None:
        query = self._enqueue_query()
        held = self._held
        if held is not None:  # the previous query, complete: read while this one runs
            self._kept.append(self._read(held))
        self._held = self._wait(query)

    # -- one query's parts --
    def _enqueue_query(self) -> tuple:
        """Events, copies and the backend's enqueue for the next lane; (start, enqueue ns, lane)."""
        lane = self.next_lane
        rec, s, pc = self.rt.cudaEventRecord, self.stream, time.perf_counter_ns
        start = pc()
        bad = 0
        if self.transfers:
            bad = rec(lane.copy_in_start, s)[0]
            memcpy, kind = self.rt.cudaMemcpyAsync, self.h2d_kind
            for dst, src, nbytes in self.h2d:
                bad = memcpy(dst, src, nbytes, kind, s)[0] or bad
        timed_here = not self.events_in_enqueue
        if timed_here:
            bad = rec(lane.compute_start, s)[0] or bad
        e0 = pc()
        copies = self.enqueue(lane)
        e1 = pc()
        if timed_here:
            bad = rec(lane.compute_end, s)[0] or bad
        if self.transfers:
            memcpy, kind = self.rt.cudaMemcpyAsync, self.d2h_kind
            for dst, src, nbytes in copies:
                bad = memcpy(dst, src, nbytes, kind, s)[0] or bad
            bad = rec(lane.copy_out_end, s)[0] or bad
        self.last_lane, self.next_lane = lane, self._following[lane]
        if bad:
            self.check((bad,), "enqueueing a query")
        return start, e1 - e0, lane

    def _wait(self, query: tuple) -> tuple:
        """Wait for the query's last event; (start, enqueue ns, lane, end)."""
        lane = query[2]
        bad = self.rt.cudaEventSynchronize(lane.copy_out_end if self.transfers else lane.compute_end)[0]
        end = time.perf_counter_ns()
        if bad:
            self.check((bad,), "cudaEventSynchronize (the query failed on the GPU)")
        return (*query, end)

    def _read(self, query: tuple) -> QueryTiming:
        """The waited-for query's event times."""
        start, enqueue_ns, lane, end = query
        elapsed = self.rt.cudaEventElapsedTime
        bad, compute_ms = elapsed(lane.compute_start, lane.compute_end)
        h2d_ms = d2h_ms = None
        if self.transfers:
            bad_in, h2d_ms = elapsed(lane.copy_in_start, lane.compute_start)
            bad_out, d2h_ms = elapsed(lane.compute_end, lane.copy_out_end)
            bad = bad or bad_in or bad_out
        if bad:
            self.check((bad,), "cudaEventElapsedTime")
        return _timing(start, end, enqueue_ns, h2d_ms, compute_ms, d2h_ms, self.stream_index)
