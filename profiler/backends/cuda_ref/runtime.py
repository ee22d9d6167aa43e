"""One stream of the reference executor: buffers, the eager or CUDA-graph enqueue, and nothing else.

The context is timed by the shared loop (:mod:`profiler.cuda.timed_loop`), as the TensorRT backend's
is: it supplies its stream (handed to PyTorch as an ``ExternalStream``), pinned host buffers, device
inputs, two lanes of timing events, and :meth:`CudaTorchContext.enqueue_impl`: the compiled steps
(eager), or one ``cudaGraphLaunch`` of the captured graph.

Timing events. By default the compute events are recorded from the host around one captured graph;
the backend's ``graph_events=True`` captures two graphs instead, one per lane, each recording its lane's
compute events from inside (event-record nodes), and the lanes alternate. Measured on the H200
(``benchmarks/bench_gpu_overhead.py``), the two ways cost the same on small graphs, and alternating
between two graphs cost a 400-step model 11-12 us per query, so host records are the default.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.backends.base import BuildError, GpuExecutionContext
from profiler.backends.cuda_ref._torch import load_torch
from profiler.cuda.timed_loop import Copy, EventSet, TimedStream


@dataclass(frozen=True)
class CapturedGraph:
    """One captured forward pass: its executable graph and the D2H copies of the outputs it writes."""

    exec_handle: Any
    copies_out: list[Copy]
    torch_graph: Any = None  # keeps the torch.cuda.CUDAGraph (and its memory pool) alive


class CudaTorchContext(GpuExecutionContext):
    """One stream: its cuda-python stream, pinned I/O, device inputs, two event lanes, optional graphs."""

    def __init__(self, engine: Any, stream_index: int = 0, graph_ok: bool = True, node_ranges: bool = True):
        from profiler import cuda

        t = load_torch()
        self.engine, self.stream_index, self.program = engine, stream_index, engine.program
        self._cuda = cuda
        self.stream = cuda.Stream(non_blocking=True)
        self.ext = t.cuda.ExternalStream(self.stream.ptr, device=engine.device)
        self._events: list[Any] = []
        self.dev_inputs = [t.empty(i.shape, dtype=getattr(t, i.dtype), device=engine.device)
                           for i in self.program.inputs]
        self.pinned_in = [cuda.PinnedBuffer(x.numel() * x.element_size()) for x in self.dev_inputs]
        self.host_in = [b.array(i.dtype, tuple(i.shape)) for b, i in zip(self.pinned_in, self.program.inputs)]
        self.pinned_out = [cuda.PinnedBuffer(int(np.prod(o.shape, dtype=np.int64)) * np.dtype(o.dtype).itemsize)
                           for o in self.program.outputs]
        self.host_out = [b.array(o.dtype, tuple(o.shape)) for b, o in zip(self.pinned_out, self.program.outputs)]
        self.dev_outputs: list[Any] = []
        #: the CUDA graph queries launch (the first lane's), None while enqueueing eagerly
        self.graph: Any = None
        self._graphs: tuple[CapturedGraph, CapturedGraph] | None = None
        self._graph_ok = graph_ok
        self._plan = self.program.plan(engine._ranges() if node_ranges else None)
        rt = cuda.runtime()
        copies_in = [(x.data_ptr(), b.ptr, b.nbytes) for x, b in zip(self.dev_inputs, self.pinned_in)]
        self.timed = TimedStream(rt, cuda.check, self.stream.handle, (self._event_set(0), self._event_set(1)),
                                 copies_in, cuda.memcpy_kind("h2d"), cuda.memcpy_kind("d2h"), self.enqueue_impl,
                                 stream_index=stream_index, scope=self._eager_scope)

    def _event_set(self, lane: int) -> EventSet:
        events = [self._cuda.Event() for _ in range(4)]
        self._events += events
        return EventSet(lane, *(e.handle for e in events))

    def _eager_scope(self) -> Any:
        """PyTorch's current stream is this context's while the loop enqueues eagerly."""
        return load_torch().cuda.stream(self.ext)

    # -- what the timed loop calls --
    def enqueue_impl(self, lane: EventSet) -> list[Copy]:
        """The lane's graph launch, or the compiled steps enqueued eagerly; the outputs' D2H copies."""
        graphs = self._graphs
        if graphs is not None:
            graph = graphs[lane.lane]
            timed = self.timed
            err = timed.rt.cudaGraphLaunch(graph.exec_handle, timed.stream)[0]
            if err:
                self._cuda.check((err,), "cudaGraphLaunch (enqueueing a query)")
            return graph.copies_out
        self.dev_outputs = self.program.forward(self.dev_inputs, self._plan)
        return self._eager_copies_out()

    def _eager_copies_out(self) -> list[Copy]:
        return [(h.ptr, o.data_ptr(), h.nbytes) for h, o in zip(self.pinned_out, self.dev_outputs)]

    def copy_inputs_impl(self) -> None:
        self._copy_inputs_async()
        self.stream.synchronize()

    def _copy_inputs_async(self) -> None:
        rt, timed = self.timed.rt, self.timed
        for dst, src, nbytes in timed.h2d:
            self._cuda.check(rt.cudaMemcpyAsync(dst, src, nbytes, timed.h2d_kind, timed.stream), "cudaMemcpyAsync")

    # -- the ExecutionContext interface --
    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        for info, host in zip(self.program.inputs, self.host_in):
            if info.name not in feeds:
                raise BuildError(f"no data for input {info.name!r}")
            arr = np.asarray(feeds[info.name])
            if tuple(arr.shape) != tuple(host.shape):
                raise BuildError(f"input {info.name!r} has shape {tuple(arr.shape)}; the engine was built for "
                                 f"{tuple(host.shape)}")
            np.copyto(host, arr, casting="same_kind" if arr.dtype.kind == host.dtype.kind else "unsafe")
        if not self.transfers:
            self.copy_inputs_impl()  # the one copy the following queries compute on

    def outputs(self) -> dict[str, np.ndarray]:
        if not self.transfers:  # the last query's outputs are still on the device: copy them now
            timed = self.timed
            for dst, src, nbytes in self._latest_copies_out():
                self._cuda.check(timed.rt.cudaMemcpyAsync(dst, src, nbytes, timed.d2h_kind, timed.stream),
                                 "cudaMemcpyAsync")
            self.stream.synchronize()
        return {o.name: h.copy() for o, h in zip(self.program.outputs, self.host_out)}

    def _latest_copies_out(self) -> list[Copy]:
        """The outputs of the last query: the graph its lane launched (with event nodes the two graphs
        have their own buffers), or the last eager forward's."""
        last = self.timed.last_lane
        if self._graphs is not None and last is not None:
            return self._graphs[last.lane].copies_out
        return self._eager_copies_out()

    def enable_cuda_graph(self) -> str | None:
        """Capture the compute (the steps) with torch.cuda.graph on this context's stream and launch it
        with cudaGraphLaunch per query. Returns None, or why it fell back to plain enqueue.

        One graph is captured, and the lanes' compute events are recorded around its launch. With the
        backend's ``graph_events``, one graph per lane is captured instead, each recording its lane's
        compute events from inside (event-record nodes)."""
        if not self._graph_ok:
            return "CUDA graphs are off for this pass"
        nodes = self._event_nodes_ok()
        try:
            captured = self._capture(self.timed.lanes if nodes else self.timed.lanes[:1], nodes)
        except Exception as exc:  # capture failed: say why and keep running eagerly
            try:
                self.timed.rt.cudaGetLastError()
                self.stream.synchronize()
            except Exception:
                pass
            return f"graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if isinstance(captured, str):
            return captured
        first, second = captured if nodes else (captured[0], captured[0])
        self._graphs = (first, second)
        self.graph = self._cuda.CudaGraph.from_exec(first.exec_handle)
        self.timed.events_in_enqueue = nodes
        self.timed.scope = nullcontext  # a graph launch needs no current PyTorch stream
        self.timed.last_lane = None  # until a graph query runs, the latest outputs are the eager ones
        return None

    def _capture(self, lanes: tuple[EventSet, ...], nodes: bool) -> list[CapturedGraph] | str:
        """One graph per lane given, after a warm-up on the capture stream (lazy library init stays out)."""
        t = load_torch()
        with t.cuda.stream(self.ext):
            for _ in range(3):
                self._copy_inputs_async()
                self.dev_outputs = self.program.forward(self.dev_inputs, self._plan)
        self.stream.synchronize()
        out = []
        for lane in lanes:
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g, stream=self.ext):
                if nodes:
                    self._record_inside(lane.compute_start)
                outs = self.program.forward(self.dev_inputs, self._plan)
                if nodes:
                    self._record_inside(lane.compute_end)
            self.stream.synchronize()
            try:
                handle = g.raw_cuda_graph_exec()
            except Exception as exc:
                return f"the captured graph has no launchable handle: {type(exc).__name__}: {exc}"
            out.append(CapturedGraph(handle, [(h.ptr, o.data_ptr(), h.nbytes) for h, o in zip(self.pinned_out, outs)],
                                     g))
        return out

    def _event_nodes_ok(self) -> bool:
        """Event-record nodes (cudaEventRecordExternal) time the compute from inside the graph, so a
        query launches one graph with no event records of its own around it."""
        rt = self.timed.rt
        return getattr(rt, "cudaEventRecordExternal", None) is not None and self.engine.backend.graph_events

    def _record_inside(self, event: Any) -> None:
        rt = self.timed.rt
        self._cuda.check(rt.cudaEventRecordWithFlags(event, self.stream.handle, rt.cudaEventRecordExternal),
                         "cudaEventRecordWithFlags (inside graph capture)")

    def close(self) -> None:
        if self.timed is None:
            return
        self.timed = None
        try:
            self.stream.synchronize()  # nothing of this stream's still runs when its graphs and buffers go
        except Exception:
            pass
        self.graph, self._graphs = None, None
        for resource in (*self.pinned_in, *self.pinned_out, *self._events):
            try:
                resource.free() if hasattr(resource, "free") else resource.destroy()
            except Exception:
                pass
        self.pinned_in, self.pinned_out, self.host_in, self.host_out, self._events = [], [], [], [], []
        self.dev_inputs, self.dev_outputs = [], []
        try:
            self.stream.destroy()
        except Exception:
            pass
