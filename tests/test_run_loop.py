"""The shared timed loop (``profiler.cuda.timed_loop``) driving the cuda backend's context, on a simulated GPU.

``SimulatedGpuRuntime`` is a test double for ``cuda.bindings.runtime``: one stream whose work (graph
launches, copies, eager forwards) runs on a virtual GPU clock when the host waits, and events that take
that clock's time when they complete. It checks what a real GPU would punish silently: an event read
before it completed, an event recorded again before its previous time was read, and how many queries
were in flight. The loop itself is the real one; the GPU path is proven on the H200 (``-m gpu`` tests,
``benchmarks/bench_gpu_overhead.py``)."""

from __future__ import annotations

import enum
import importlib
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest

from profiler.backends.base import ExecutionContext, QueryTiming
from profiler.backends.cuda_ref.runtime import CapturedGraph, CudaTorchContext
from profiler.cuda.timed_loop import EventSet, TimedStream
from profiler.nvtx import Ranges
from profiler.harness.runner import HarnessConfig, run_queries

R = importlib.import_module("profiler.cuda.runtime")
E = importlib.import_module("profiler.cuda.errors")

GRAPH_US, COPY_US, EAGER_US = 40.0, 5.0, 70.0


class SimError(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorNotReady = 600
    cudaErrorLaunchFailure = 719


class SimulatedGpuRuntime:
    """A test double for cuda.bindings.runtime with a virtual GPU (see the module docstring)."""

    cudaError_t = SimError

    def __init__(self) -> None:
        self.queue: list[tuple] = []  # not yet run: ("work", us, kind) | ("event", handle)
        self.now = 0.0  # the virtual GPU clock, microseconds
        self.stamp: dict[object, float] = {}  # completed events
        self.unread: set[object] = set()  # completed events whose time nobody read yet
        self.violations: list[tuple[str, object]] = []
        self.execs: dict[object, tuple[float, tuple | None]] = {}  # graph exec -> (us, in-graph (start, end))
        self.launched: list[object] = []
        self.max_in_flight = 0
        self.fail: dict[str, SimError] = {}  # call name -> the error it returns
        self.copies: list[tuple] = []  # (dst, src) of every copy

    # -- the virtual stream --
    def _record(self, e: object) -> None:
        if any(it[0] == "event" and it[1] == e for it in self.queue):
            self.violations.append(("recorded again while its previous record is pending", e))
        if e in self.unread:
            self.violations.append(("recorded again before its time was read", e))
        self.stamp.pop(e, None)
        self.unread.discard(e)
        self.queue.append(("event", e))

    def _run(self, upto: int) -> None:
        for it in self.queue[:upto]:
            if it[0] == "work":
                self.now += it[1]
            else:
                self.stamp[it[1]] = self.now
                self.unread.add(it[1])
        del self.queue[:upto]

    def enqueue_work(self, us: float, kind: str) -> None:
        self.queue.append(("work", us, kind))
        if kind == "compute":
            self.max_in_flight = max(self.max_in_flight, sum(it[0] == "work" and it[2] == "compute"
                                                             for it in self.queue))

    # -- the runtime's calls --
    def cudaGraphLaunch(self, ex, stream):
        us, nodes = self.execs[ex]
        self.launched.append(ex)
        if nodes:
            self._record(nodes[0])
        self.enqueue_work(us, "compute")
        if nodes:
            self._record(nodes[1])
        return (self.fail.get("cudaGraphLaunch", SimError.cudaSuccess),)

    def cudaEventRecord(self, e, stream):
        self._record(e)
        return (SimError.cudaSuccess,)

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):
        self.copies.append((dst, src))
        self.enqueue_work(COPY_US, "copy")
        return (SimError.cudaSuccess,)

    def cudaStreamSynchronize(self, stream):
        self._run(len(self.queue))
        return (self.fail.get("cudaStreamSynchronize", SimError.cudaSuccess),)

    def cudaEventSynchronize(self, e):
        at = [i for i, it in enumerate(self.queue) if it[0] == "event" and it[1] == e]
        if at:
            self._run(at[0] + 1)
        return (self.fail.get("cudaEventSynchronize", SimError.cudaSuccess),)

    def cudaEventElapsedTime(self, a, b):
        if a not in self.stamp or b not in self.stamp:
            self.violations.append(("read before it completed", (a, b)))
            return (SimError.cudaErrorNotReady, 0.0)
        self.unread.discard(a)
        self.unread.discard(b)
        return (SimError.cudaSuccess, (self.stamp[b] - self.stamp[a]) / 1000.0)

    def cudaGetErrorName(self, err):
        return (SimError.cudaSuccess, SimError(int(err)).name.encode())

    def cudaGetErrorString(self, err):
        return (SimError.cudaSuccess, f"description of {SimError(int(err)).name}".encode())


class SimulatedProgram:
    """Stands in for the compiled Program: an eager forward is one piece of work on the stream."""

    def __init__(self, rt: SimulatedGpuRuntime) -> None:
        self.rt, self.calls = rt, 0

    def forward(self, inputs, plan):
        self.calls += 1
        self.rt.enqueue_work(EAGER_US, "compute")
        return [SimpleNamespace(data_ptr=lambda c=self.calls: 9000 + c)]


@pytest.fixture
def rt(monkeypatch):
    sim = SimulatedGpuRuntime()
    monkeypatch.setattr(R, "_RT", sim)  # profiler.cuda.check maps errors through it
    return sim


def make_context(rt: SimulatedGpuRuntime, *, graph: bool, nodes: bool, transfers: bool, inputs: int = 2,
                 stream_index: int = 0) -> CudaTorchContext:
    """A CudaTorchContext whose CUDA objects are the simulation's (its constructor needs a real GPU). The
    eager path's stream scope (PyTorch's current stream) is injected as a no-op, so no PyTorch is needed."""
    ctx = object.__new__(CudaTorchContext)
    lanes = (EventSet(0, "e0", "e1", "e2", "e3"), EventSet(1, "f0", "f1", "f2", "f3"))
    if graph and nodes:  # one graph per lane, each recording its lane's compute events, with its own outputs
        rt.execs = {"g0": (GRAPH_US, ("e1", "e2")), "g4": (GRAPH_US, ("f1", "f2"))}
        graphs = (CapturedGraph("g0", [(500, 600, 40)]), CapturedGraph("g4", [(500, 700, 40)]))
    elif graph:
        rt.execs = {"g": (GRAPH_US, None)}
        graphs = (CapturedGraph("g", [(500, 600, 40)]),) * 2
    else:
        graphs = None
    program = SimulatedProgram(rt)
    program.outputs = [SimpleNamespace(name="y")]
    ctx.__dict__.update(
        _cuda=importlib.import_module("profiler.cuda"), graph=object() if graph else None, _graphs=graphs,
        stream_index=stream_index, pinned_out=[SimpleNamespace(ptr=500, nbytes=40)],
        host_out=[np.zeros(10, np.float32)], program=program, dev_inputs=[], _plan=None, dev_outputs=[],
        stream=SimpleNamespace(handle="s", synchronize=lambda: rt.cudaStreamSynchronize("s")))
    ctx.timed = TimedStream(rt, ctx._cuda.check, "s", lanes, [(100 + i, 200 + i, 64) for i in range(inputs)],
                            "h2d", "d2h", ctx.enqueue_impl, stream_index=stream_index, scope=nullcontext)
    ctx.timed.transfers = transfers
    ctx.timed.events_in_enqueue = graph and nodes
    return ctx


MODES = [(g, n, t) for g, n in ((True, True), (True, False), (False, False)) for t in (True, False)]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "one-in-flight"])
@pytest.mark.parametrize("graph,nodes,transfers", MODES,
                         ids=[f"{'graph-nodes' if n else 'graph-records' if g else 'eager'}-{'io' if t else 'noio'}"
                              for g, n, t in MODES])
def test_every_query_is_timed_from_its_own_events(rt, graph, nodes, transfers, overlap):
    ctx = make_context(rt, graph=graph, nodes=nodes, transfers=transfers)
    m = run_queries([ctx], HarnessConfig(iterations=25, duration_s=0.0, warmup_ms=0.0, overlap=overlap))
    ts = m.timings
    assert len(ts) == 25 and m.in_flight == (2 if overlap else 1)
    assert rt.violations == []
    assert rt.max_in_flight == (2 if overlap else 1)
    compute_us = GRAPH_US if graph else EAGER_US
    for t in ts:
        assert t.compute_ms == pytest.approx(compute_us / 1000)
        if transfers:
            assert t.h2d_ms == pytest.approx(2 * COPY_US / 1000) and t.d2h_ms == pytest.approx(COPY_US / 1000)
            assert t.latency_ms == pytest.approx((compute_us + 3 * COPY_US) / 1000)
        else:
            assert t.h2d_ms is None and t.d2h_ms is None and t.latency_ms == t.compute_ms
        assert t.start_ns <= t.end_ns and t.enqueue_ms >= 0
    assert [t.start_ns for t in ts] == sorted(t.start_ns for t in ts)
    if overlap:  # a query is waited for only after the next one was enqueued
        assert all(b.start_ns < a.end_ns for a, b in zip(ts, ts[1:]))
    else:
        assert all(a.end_ns <= b.start_ns for a, b in zip(ts, ts[1:]))
    if graph:
        assert len(rt.launched) == 25
        if nodes:  # the two graphs, each recording its own event set, alternate
            assert rt.launched == ["g0", "g4"] * 12 + ["g0"]
    else:
        assert ctx.program.calls == 25 and ctx.dev_outputs[0].data_ptr() == 9025
    assert rt.queue == []  # nothing left running


def test_the_loop_continues_from_where_query_left_its_event_sets(rt):
    ctx = make_context(rt, graph=True, nodes=True, transfers=False)
    first = run_queries([ctx], HarnessConfig(iterations=3, duration_s=0.0, warmup_ms=0.0))
    again = run_queries([ctx], HarnessConfig(iterations=4, duration_s=0.0, warmup_ms=0.0, overlap=False))
    assert len(first.timings) == 3 and len(again.timings) == 4
    assert rt.launched == ["g0", "g4", "g0", "g4", "g0", "g4", "g0"]
    assert rt.violations == []


def test_a_query_before_the_loop_leaves_no_event_unread(rt):
    ctx = make_context(rt, graph=True, nodes=True, transfers=False)
    single = ctx.query()  # the warm-up's path: one query, waited for and read
    assert single.compute_ms == pytest.approx(GRAPH_US / 1000) and rt.unread == set()
    ts = ctx.run_loop(5, 0, SimpleNamespace(set=False), overlap=True)
    assert len(ts) == 5 and rt.violations == []
    assert rt.launched == ["g0", "g4", "g0", "g4", "g0", "g4"]  # the loop takes the next lane


@pytest.mark.parametrize("count", [3, 4])
def test_outputs_after_the_loop_come_from_the_graph_that_ran_last(rt, count):
    """Two event-node graphs have their own output buffers (700 and 600 here): with transfers off,
    outputs() must copy from the one the last query launched, whichever that was."""
    ctx = make_context(rt, graph=True, nodes=True, transfers=False)
    ctx.run_loop(count, 0, SimpleNamespace(set=False), overlap=True)
    ctx.outputs()
    last_src = rt.copies[-1][1]
    assert rt.launched[-1] == ("g0" if count % 2 else "g4")
    assert last_src == (600 if count % 2 else 700)


def test_iterations_and_duration_are_both_minimums(rt):
    ctx = make_context(rt, graph=True, nodes=False, transfers=False)
    ticks = iter(range(0, 10**6, 10))
    clock = lambda: next(ticks)  # noqa: E731 - ten nanoseconds a call
    ts = ctx.run_loop(3, 200, SimpleNamespace(set=False), clock, overlap=True)
    # the clock is first read after the third query (0) and once per query after it: 200 is the 21st read
    assert len(ts) == 3 + 20
    ts = ctx.run_loop(30, 0, SimpleNamespace(set=False), clock, overlap=True)
    assert len(ts) == 30
    assert rt.violations == []


def test_a_raised_stop_flag_ends_the_loop_without_losing_queries_in_flight(rt):
    ctx = make_context(rt, graph=True, nodes=True, transfers=True)
    stop = SimpleNamespace(set=False)
    real_launch = rt.cudaGraphLaunch

    def launch_then_stop(ex, s):
        if len(rt.launched) == 6:
            stop.set = True
        return real_launch(ex, s)

    rt.cudaGraphLaunch = launch_then_stop
    ts = ctx.run_loop(100, 0, stop, overlap=True)
    assert len(ts) == 7 and rt.queue == [] and rt.violations == []
    assert ctx.run_loop(100, 0, SimpleNamespace(set=True), overlap=True) == []


@pytest.mark.parametrize("call,where", [("cudaGraphLaunch", "enqueueing a query"),
                                        ("cudaEventSynchronize", "the query failed on the GPU")])
def test_cuda_errors_in_the_loop_name_the_step(rt, call, where):
    ctx = make_context(rt, graph=True, nodes=True, transfers=False)
    rt.fail[call] = SimError.cudaErrorLaunchFailure
    with pytest.raises(E.CudaError) as exc:
        ctx.run_loop(10, 0, SimpleNamespace(set=False), overlap=True)
    assert where in str(exc.value) and "cudaErrorLaunchFailure" in str(exc.value)
    assert ctx.timed.next_lane in ctx.timed.lanes  # the lanes stay consistent for the next loop


def test_serial_wait_failure_names_the_wait(rt):
    ctx = make_context(rt, graph=False, nodes=False, transfers=True)
    rt.fail["cudaEventSynchronize"] = SimError.cudaErrorLaunchFailure
    with pytest.raises(E.CudaError, match="cudaEventSynchronize .the query failed on the GPU"):
        ctx.run_loop(10, 0, SimpleNamespace(set=False), overlap=False)


def test_under_an_nvtx_tool_queries_run_one_at_a_time(rt):
    class CountingDomain:
        def __init__(self):
            self.pushes = 0

        def get_event_attributes(self, message=None, color=None):
            return message

        def push_range(self, attrs):
            self.pushes += 1

        def pop_range(self):
            pass

    nv = Ranges("trtprof")
    nv._domain, nv.enabled = CountingDomain(), True
    ctx = make_context(rt, graph=True, nodes=True, transfers=False)
    m = run_queries([ctx], HarnessConfig(iterations=6, duration_s=0.0, warmup_ms=0.0), key="k", nv=nv)
    assert m.in_flight == 1 and len(m.timings) == 6 and nv._domain.pushes == 6
    assert rt.max_in_flight == 1 and rt.violations == []


class OneAtATimeContext(ExecutionContext):
    """A backend without an overlapping loop: the harness must report one query in flight."""

    def __init__(self):
        self.n = 0

    def set_inputs(self, feeds):
        pass

    def query(self):
        self.n += 1
        return QueryTiming(start_ns=self.n, end_ns=self.n + 1, enqueue_ms=0.0, compute_ms=1.0)

    def outputs(self):
        return {}


def test_overlap_is_reported_only_where_every_stream_can_overlap(rt):
    plain = OneAtATimeContext()
    m = run_queries([plain], HarnessConfig(iterations=4, duration_s=0.0, warmup_ms=0.0, overlap=True))
    assert m.in_flight == 1 and plain.n == 4
    mixed = run_queries([make_context(rt, graph=True, nodes=False, transfers=False), OneAtATimeContext()],
                        HarnessConfig(iterations=4, duration_s=0.0, warmup_ms=0.0, overlap=True))
    assert mixed.in_flight == 1 and rt.max_in_flight == 1
