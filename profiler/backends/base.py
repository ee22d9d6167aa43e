"""The backend interface: build an engine for a variant, bind I/O, run timed queries, profile layers.

Life cycle, as the harness drives it::

    backend = get_backend("onnxruntime")
    reason = backend.unsupported(spec)            # None, or why this variant is skipped
    engine = backend.build(model_path, spec, cache_dir)   # raises BuildError with a clear reason
    ctxs = [engine.create_context() for _ in range(spec.streams)]
    for c in ctxs: c.set_inputs(feeds)            # numpy arrays keyed by input name
    t = ctxs[0].query()                           # one timed query -> QueryTiming
    outs = ctxs[0].outputs()                      # numpy arrays of the last query
    layers = engine.profile_layers(feeds, iterations=20)   # separate pass, never the timed one
    engine.close()

A *query* is trtexec's unit: optional H2D, compute, optional D2H (``set_transfers(False)`` drops both). GPU backends time each part with
CUDA events and the host enqueue call with a monotonic clock; CPU backends time compute with
``time.perf_counter_ns`` and report zero-cost transfers as None.
"""

from __future__ import annotations

import abc
import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from profiler.cuda.timed_loop import QueryTiming
from profiler.models.inspect import TensorInfo

PRECISIONS = ("fp32", "fp16", "int8")


def format_bytes_short(n: int | None) -> str:
    """64M, 256M, 1G, 1536M: the workspace part of a variant key."""
    if n is None:
        return "default"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % size == 0 and n >= size:
            return f"{n // size}{unit}"
    return str(n)


def parse_bytes(text: str) -> int:
    """'64M' -> 67108864; accepts K/M/G/T with optional 'B'/'iB', or a plain byte count."""
    mt = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not mt:
        raise ValueError(f"not a size: {text!r} (use e.g. 64M, 256M, 1G)")
    num, unit = float(mt.group(1)), mt.group(2).upper()
    value = num * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    if not value <= MAX_BYTES:  # also refuses inf from a 400-digit number
        raise ValueError(f"{text.strip()!r} is more than {MAX_BYTES >> 40}T, larger than any GPU's memory")
    return int(value)


MAX_BYTES = 1 << 50  # 1 PiB: far above any GPU's memory, far below what int64 columns hold


@dataclass(frozen=True)
class VariantSpec:
    """One point of the sweep. ``shapes`` maps input name -> concrete shape."""

    precision: str = "fp32"
    workspace_bytes: int | None = None
    streams: int = 1
    cuda_graph: bool = False
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def key(self) -> str:
        """Stable key, e.g. ``fp16-ws1G-s2-graph`` (``-graph`` only when CUDA graphs are on)."""
        parts = [self.precision, f"ws{format_bytes_short(self.workspace_bytes)}", f"s{self.streams}"]
        if self.cuda_graph:
            parts.append("graph")
        return "-".join(parts)

    @property
    def shape_dict(self) -> dict[str, tuple[int, ...]]:
        return dict(self.shapes)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "precision": self.precision, "workspace_bytes": self.workspace_bytes,
                "streams": self.streams, "cuda_graph": self.cuda_graph,
                "shapes": {k: list(v) for k, v in self.shapes}}


class BuildError(Exception):
    """An engine could not be built for a variant; ``str()`` says why (parser errors, memory, op)."""


class UnsupportedOp(BuildError):
    def __init__(self, op: str, node: str | None = None, backend: str = ""):
        self.op, self.node = op, node
        where = f" (node {node!r})" if node else ""
        super().__init__(f"{backend or 'the backend'} does not support the ONNX op {op!r}{where}")


class ExecutionContext(abc.ABC):
    """One stream's worth of execution state (TensorRT: one IExecutionContext per stream)."""

    stream_index: int = 0

    @abc.abstractmethod
    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        """Copy/bind the inputs used by every following query."""

    @abc.abstractmethod
    def query(self) -> QueryTiming:
        """Run one query (H2D, compute, D2H) and return its timing once it has completed."""

    @abc.abstractmethod
    def outputs(self) -> dict[str, np.ndarray]:
        """Host copies of the outputs of the last query."""

    #: True when ``run_loop`` can keep two queries in flight (``overlap``); the default loop cannot
    overlaps: bool = False

    def run_loop(self, iterations: int, deadline_ns: int, stop: Any,
                 clock: Callable[[], int] = time.perf_counter_ns, overlap: bool = False) -> list[QueryTiming]:
        """Queries back to back until at least ``iterations`` have run and ``clock()`` has reached
        ``deadline_ns``, or until ``stop.set`` is true. Returns their timings in order.

        This is the harness's timed phase. ``overlap`` asks for trtexec's default, two queries in flight,
        which GPU contexts (:class:`GpuExecutionContext`) do; this default calls ``query()`` each time,
        one query in flight, whatever ``overlap`` says. The stop conditions are the timed loop's
        (:func:`profiler.cuda.timed_loop.repeat`)."""
        from profiler.cuda.timed_loop import repeat

        kept: list[QueryTiming] = []
        append, query = kept.append, self.query
        repeat(lambda: append(query()), iterations, deadline_ns, stop, clock)
        return kept

    #: False: no H2D/D2H per query (trtexec's --noDataTransfers); see set_transfers
    transfers: bool = True

    def set_transfers(self, on: bool) -> None:
        """Per-query host<->device copies on (the default) or off.

        Off, a query does no H2D/D2H and reports ``h2d_ms``/``d2h_ms`` as None (latency = compute):
        the inputs are copied to the device once, when ``set_inputs`` is called (or now, if they
        already were), and ``outputs()`` copies the last query's outputs device->host on demand.
        Backends without transfers (CPU) need not override this."""
        self.transfers = bool(on)

    def enable_cuda_graph(self) -> str | None:
        """Capture the compute into a CUDA graph. Returns None on success, else the reason it fell back."""
        return "this backend has no CUDA graphs"

    def close(self) -> None:
        pass


class GpuExecutionContext(ExecutionContext):
    """An execution context on one CUDA stream, timed by the one timed loop (:mod:`profiler.cuda.timed_loop`).

    A GPU backend builds its buffers and ``self.timed`` (a ``TimedStream`` whose ``enqueue`` is its
    :meth:`enqueue_impl`) and implements :meth:`enqueue_impl` and :meth:`copy_inputs_impl`, plus
    ``set_inputs``/``outputs``; ``query``, ``run_loop`` and ``set_transfers`` check and delegate here,
    so every GPU backend's latencies come from the same code."""

    overlaps = True
    #: the context's TimedStream (``profiler.cuda.timed_loop``); None once closed
    timed: Any = None

    @property
    def transfers(self) -> bool:  # type: ignore[override]
        return bool(self.timed.transfers) if self.timed is not None else True

    def query(self) -> QueryTiming:
        """One query (H2D, compute, D2H unless transfers are off), waited for and read."""
        return self._open().query()

    def run_loop(self, iterations: int, deadline_ns: int, stop: Any,
                 clock: Callable[[], int] = time.perf_counter_ns, overlap: bool = False) -> list[QueryTiming]:
        """The timed phase (see ExecutionContext.run_loop): two queries in flight with ``overlap``."""
        if iterations < 1:
            raise ValueError(f"iterations must be at least 1, not {iterations}")
        return self._open().run(iterations, deadline_ns, stop, clock, in_flight=2 if overlap else 1)

    def set_transfers(self, on: bool) -> None:
        """Off: queries enqueue only the compute between two events (see ExecutionContext.set_transfers)."""
        self._open().transfers = bool(on)
        if not on:
            self.copy_inputs_impl()

    def _open(self) -> Any:
        if self.timed is None:
            raise RuntimeError("this execution context is closed")
        return self.timed

    @abc.abstractmethod
    def enqueue_impl(self, lane: Any) -> Sequence[tuple[int, int, int]]:
        """Enqueue one query's compute on the stream for ``lane`` (an ``EventSet``); return the D2H copies
        (host pointer, device pointer, bytes) of the outputs it writes. Raise if the enqueue failed."""

    @abc.abstractmethod
    def copy_inputs_impl(self) -> None:
        """Copy the bound host inputs to the device once and wait (transfers off: queries do not copy)."""


class Engine(abc.ABC):
    """A built engine for one variant (shared by all its contexts)."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    #: engine_size_bytes, build_time_s, fingerprint, device memory before/after build, parser warnings ...
    info: dict[str, Any]

    @abc.abstractmethod
    def create_context(self, stream_index: int = 0) -> ExecutionContext:
        ...

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int = 10) -> list[dict[str, Any]]:
        """Per-layer records (name, type, time_total_ms, time_avg_ms, count, ...) from a separate pass."""
        return []

    def layer_info(self) -> dict[str, Any] | None:
        """Engine layer information (TensorRT's inspector JSON), when the backend has it."""
        return None

    def close(self) -> None:
        pass


def provider_is_gpu(environment: dict[str, Any]) -> bool:
    """Whether an ONNX Runtime-style execution provider named in ``environment`` runs on a GPU."""
    provider = str(environment.get("provider") or "")
    return "CUDA" in provider or "Tensorrt" in provider


class Backend(abc.ABC):
    """A way to build and run engines. The sweep, the rules and the store ask a backend what it can do
    through the capabilities below, never by its name; each has a default here that a backend overrides
    where it differs (a class attribute, or a property where the instance decides, e.g. by device)."""

    name: str = "base"
    #: runs on a CUDA GPU: the sweep records device memory and the GPU's identity with the run
    is_gpu: bool = True
    #: builds under a workspace limit; False: the sweep measures one workspace value and lists the others
    #: as skipped (the same engine)
    uses_workspace: bool = True
    #: the enqueue call returns only once the work is done (enqueue == compute), so the enqueue time says
    #: nothing about launch cost (the ``launch_overhead`` rule skips such variants)
    synchronous_enqueue: bool = False
    #: computes fp16/int8 models as a GPU engine does; False (ONNX Runtime's CPU provider upcasts float16
    #: and fuses integer kernels): the sweep shows the model's own arithmetic beside the gated figure
    faithful_low_precision: bool = True
    #: what this backend's latencies are, said wherever they are shown, when they are not an inference
    #: engine's own (the reference executor); None: nothing to say
    latency_note: str | None = None

    def memory_snapshot(self, engine: Any = None) -> dict[str, Any] | None:
        """Free/used/total device memory now (the driver's view), taken while a variant's contexts are
        alive; None for a CPU backend or where the driver does not answer. ``engine``: the variant's,
        for a backend that can say more about what it holds (the cuda backend's allocator columns)."""
        if not self.is_gpu:
            return None
        try:
            from profiler.cuda import mem_info

            mi = mem_info()
            return {"free_bytes": mi.free_bytes, "used_bytes": mi.used_bytes, "total_bytes": mi.total_bytes}
        except Exception:
            return None

    def process_options(self) -> dict[str, Any]:
        """Keyword arguments that make the same backend in another process: ``get_backend(name, **options)``
        (``--repeat`` times each variant again in fresh processes)."""
        return {}

    def tensorrt_version(self) -> str | None:
        """The TensorRT release that builds this backend's engines (stored with the run); None when the
        engines are not TensorRT's."""
        return None

    @classmethod
    def measured_on_gpu(cls, environment: dict[str, Any]) -> bool:
        """Whether a run this backend measured ran on a GPU, from its stored ``describe()`` alone (the
        rules judge stored runs, where no backend instance exists)."""
        return bool(cls.is_gpu)

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """name, version, device (GPU name or CPU), driver / CUDA / TensorRT versions where known."""

    def unsupported(self, spec: VariantSpec) -> str | None:
        """Why this backend cannot run ``spec`` (listed as skipped), or None."""
        return None

    @abc.abstractmethod
    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> Engine:
        ...

    def fingerprint(self, model_hash: str, spec: VariantSpec) -> str:
        """Cache key of an engine: model, variant, backend version and device."""
        d = self.describe()
        text = "|".join([model_hash, spec.key, repr(spec.shapes), self.name, str(d.get("version")),
                         str(d.get("device"))])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def gpu_present() -> bool:
    """True when a CUDA device is visible (checked through cuda-python, else torch, else nvidia-smi)."""
    try:
        from cuda.bindings import runtime as cudart  # type: ignore

        err, count = cudart.cudaGetDeviceCount()
        return int(err) == 0 and count > 0
    except Exception:
        pass
    try:
        import torch  # type: ignore

        return bool(torch.cuda.is_available())
    except Exception:
        return False
