"""The CUDA layer every GPU backend shares, on cuda-python's runtime bindings (``cuda.bindings.runtime``).

What a backend needs and nothing more: device and driver info, free/total device memory, device
buffers, pinned host buffers, streams, events and their elapsed time, asynchronous copies, graph
capture -> instantiate -> launch (with a fallback reason instead of a crash), and synchronisation.
Every call is checked; failures raise the typed errors of :mod:`profiler.cuda.errors`.

cuda-python is imported on first use (``require("cuda.bindings", "cuda")``), so importing this module
is free. Handles are cuda-python objects; ``int(obj.handle)`` gives the raw pointer other libraries
take (``torch.cuda.ExternalStream(stream.ptr)``).
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from profiler.cuda.errors import GraphCaptureError, check as _check_with, make_error

_RT: Any = None


def runtime() -> Any:
    """``cuda.bindings.runtime``, imported once; a missing cuda-python names the ``cuda`` extra."""
    global _RT
    if _RT is None:
        from profiler.errors import require

        require("cuda.bindings", "cuda", "the CUDA layer")
        from cuda.bindings import runtime as rt

        _RT = rt
    return _RT


def check(result: Any, call: str) -> Any:
    """Unpack a cuda-python result, raising the mapped CUDA error (see :func:`profiler.cuda.errors.check`)."""
    return _check_with(runtime(), result, call)


def bindings_version() -> str | None:
    try:
        import cuda.bindings

        return str(cuda.bindings.__version__)
    except Exception:
        return None


def _version_text(v: int) -> str:
    """CUDA's integer versions: 13000 -> '13.0', 12080 -> '12.8'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


# -- device ------------------------------------------------------------------------------------------
@dataclass
class DeviceInfo:
    index: int
    name: str
    compute_capability: str
    total_memory_bytes: int
    multiprocessors: int
    driver_version: str  # CUDA version the driver supports, e.g. "13.0"
    runtime_version: str
    bindings_version: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def device_count() -> int:
    """Number of visible CUDA devices (raises CudaUnavailable when there is no driver)."""
    return int(check(runtime().cudaGetDeviceCount(), "cudaGetDeviceCount"))


def set_device(index: int = 0) -> None:
    check(runtime().cudaSetDevice(index), "cudaSetDevice")


def device_info(index: int = 0) -> DeviceInfo:
    rt = runtime()
    prop = check(rt.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
    name = prop.name
    name = name.decode(errors="replace") if isinstance(name, (bytes, bytearray)) else str(name)
    return DeviceInfo(
        index=index, name=name.rstrip("\x00"), compute_capability=f"{prop.major}.{prop.minor}",
        total_memory_bytes=int(prop.totalGlobalMem), multiprocessors=int(prop.multiProcessorCount),
        driver_version=_version_text(int(check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))),
        runtime_version=_version_text(int(check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))),
        bindings_version=bindings_version())


@dataclass
class MemInfo:
    free_bytes: int
    total_bytes: int

    @property
    def used_bytes(self) -> int:
        return self.total_bytes - self.free_bytes


def mem_info() -> MemInfo:
    """cudaMemGetInfo on the current device."""
    free_b, total_b = check(runtime().cudaMemGetInfo(), "cudaMemGetInfo")
    return MemInfo(int(free_b), int(total_b))


def device_synchronize() -> None:
    check(runtime().cudaDeviceSynchronize(), "cudaDeviceSynchronize")


# -- memory ------------------------------------------------------------------------------------------
class _Buffer:
    """``nbytes`` from the runtime's ``_alloc`` call, given back by ``_release``; ``ptr`` is the address."""

    _alloc = _release = ""

    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = int(check(getattr(runtime(), self._alloc)(max(self.nbytes, 1)), self._alloc))

    def free(self) -> None:
        if self.ptr:
            check(getattr(runtime(), self._release)(self.ptr), self._release)
            self.ptr = 0

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()


class DeviceBuffer(_Buffer):
    """``nbytes`` of device memory (cudaMalloc); ``ptr`` is the raw address."""

    _alloc, _release = "cudaMalloc", "cudaFree"


class PinnedBuffer(_Buffer):
    """``nbytes`` of page-locked host memory (cudaMallocHost), viewable as a numpy array."""

    _alloc, _release = "cudaMallocHost", "cudaFreeHost"

    def array(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of the buffer (valid until :meth:`free`)."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dt.itemsize > self.nbytes:
            raise ValueError(f"a {dt} array of shape {shape} needs {count * dt.itemsize} bytes; "
                             f"the buffer has {self.nbytes}")
        raw = (ctypes.c_char * max(count * dt.itemsize, 1)).from_address(self.ptr)
        return np.frombuffer(raw, dtype=dt, count=count).reshape(shape)


_KINDS = {"h2d": "cudaMemcpyHostToDevice", "d2h": "cudaMemcpyDeviceToHost",
          "d2d": "cudaMemcpyDeviceToDevice", "default": "cudaMemcpyDefault"}


def memcpy_kind(kind: str) -> Any:
    if kind not in _KINDS:
        raise ValueError(f"copy kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    return getattr(runtime().cudaMemcpyKind, _KINDS[kind])


def memcpy_async(dst_ptr: int, src_ptr: int, nbytes: int, kind: str, stream: "Stream") -> None:
    """cudaMemcpyAsync on ``stream``; ``kind`` is 'h2d', 'd2h', 'd2d' or 'default'."""
    check(runtime().cudaMemcpyAsync(dst_ptr, src_ptr, nbytes, memcpy_kind(kind), stream.handle),
          "cudaMemcpyAsync")


# -- streams and events ------------------------------------------------------------------------------
class Stream:
    """A CUDA stream (non-blocking with respect to the legacy default stream unless asked)."""

    def __init__(self, non_blocking: bool = True, priority: int = 0):
        rt = runtime()
        flags = rt.cudaStreamNonBlocking if non_blocking else rt.cudaStreamDefault
        self.handle = check(rt.cudaStreamCreateWithPriority(flags, priority), "cudaStreamCreateWithPriority")
        self.ptr = int(self.handle)

    def synchronize(self) -> None:
        check(runtime().cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")

    def destroy(self) -> None:
        if self.handle is not None:
            check(runtime().cudaStreamDestroy(self.handle), "cudaStreamDestroy")
            self.handle = None

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy()


class Event:
    """A CUDA event; timing events give :func:`elapsed_ms`, ``blocking_sync`` makes waits yield the CPU."""

    def __init__(self, timing: bool = True, blocking_sync: bool = False):
        rt = runtime()
        flags = rt.cudaEventDefault if timing else rt.cudaEventDisableTiming
        if blocking_sync:
            flags |= rt.cudaEventBlockingSync
        self.handle = check(rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    def record(self, stream: Stream) -> None:
        check(runtime().cudaEventRecord(self.handle, stream.handle), "cudaEventRecord")

    def synchronize(self) -> None:
        check(runtime().cudaEventSynchronize(self.handle), "cudaEventSynchronize")

    def query(self) -> bool:
        """True once the work before the record has completed."""
        rt = runtime()
        err = rt.cudaEventQuery(self.handle)
        err = err[0] if isinstance(err, tuple) else err
        if int(err) == 0:
            return True
        if err == rt.cudaError_t.cudaErrorNotReady:
            return False
        raise make_error(rt, err, "cudaEventQuery")

    def destroy(self) -> None:
        if self.handle is not None:
            check(runtime().cudaEventDestroy(self.handle), "cudaEventDestroy")
            self.handle = None


def elapsed_ms(start: Event, end: Event) -> float:
    """Milliseconds between two completed timing events (resolution about 0.5 us)."""
    return float(check(runtime().cudaEventElapsedTime(start.handle, end.handle), "cudaEventElapsedTime"))


# -- CUDA graphs -------------------------------------------------------------------------------------
class CudaGraph:
    """An instantiated CUDA graph (cudaGraphExec_t) launched on any stream; owns graph and exec."""

    def __init__(self, graph: Any, exec_handle: Any, nodes: int | None = None, owned: bool = True):
        self.graph, self.exec_handle, self.nodes, self._owned = graph, exec_handle, nodes, owned

    @classmethod
    def from_exec(cls, exec_handle: int) -> "CudaGraph":
        """Wrap an executable graph another library owns (e.g. ``torch.cuda.CUDAGraph.raw_cuda_graph_exec()``)."""
        return cls(None, exec_handle, None, owned=False)

    def launch(self, stream: Stream) -> None:
        check(runtime().cudaGraphLaunch(self.exec_handle, stream.handle), "cudaGraphLaunch")

    def destroy(self) -> None:
        if not self._owned:
            self.exec_handle = None
            return
        rt = runtime()
        if self.exec_handle is not None:
            check(rt.cudaGraphExecDestroy(self.exec_handle), "cudaGraphExecDestroy")
            self.exec_handle = None
        if self.graph is not None:
            check(rt.cudaGraphDestroy(self.graph), "cudaGraphDestroy")
            self.graph = None


def capture_graph(stream: Stream, enqueue: Callable[[], None]) -> CudaGraph:
    """Capture what ``enqueue()`` puts on ``stream`` (thread-local capture mode), instantiate it.

    On failure the capture is always ended (so the stream is usable again), the sticky last error is
    cleared, and :class:`GraphCaptureError` says at which stage and why: that text is the fallback
    reason a backend reports.
    """
    rt = runtime()
    mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
    check(rt.cudaStreamBeginCapture(stream.handle, mode), "cudaStreamBeginCapture")
    enqueue_exc: BaseException | None = None
    try:
        enqueue()
    except BaseException as exc:  # remember, end the capture, then report
        enqueue_exc = exc
    res = rt.cudaStreamEndCapture(stream.handle)
    rt.cudaGetLastError()  # clear a sticky capture error so later calls on this thread succeed
    if enqueue_exc is not None:
        if isinstance(enqueue_exc, KeyboardInterrupt):
            raise enqueue_exc
        raise GraphCaptureError("enqueue during stream capture", type(enqueue_exc).__name__, -1,
                                str(enqueue_exc).splitlines()[0][:300] if str(enqueue_exc) else "",
                                "the enqueued work is not capturable") from enqueue_exc
    graph = _check_with(rt, res, "cudaStreamEndCapture")
    nodes = None
    try:
        counted = check(rt.cudaGraphGetNodes(graph, 0), "cudaGraphGetNodes")
        nodes = int(counted[1] if isinstance(counted, tuple) else counted)
    except Exception:
        nodes = None
    try:
        exec_handle = check(rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
    except Exception:
        rt.cudaGraphDestroy(graph)
        raise
    return CudaGraph(graph, exec_handle, nodes)


def try_capture_graph(stream: Stream, enqueue: Callable[[], None]) -> tuple[CudaGraph | None, str | None]:
    """(graph, None) when capture worked, else (None, the reason) -- never raises for capture failures."""
    try:
        return capture_graph(stream, enqueue), None
    except GraphCaptureError as exc:
        return None, str(exc)
    except Exception as exc:  # instantiate failures and the like are fallbacks too
        return None, f"{type(exc).__name__}: {exc}"
