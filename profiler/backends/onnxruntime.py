"""ONNX Runtime backend: runs everywhere (CPU here; the CUDA provider where it is installed).

Mapping onto the backend interface:
- *build* = create an ``InferenceSession`` (graph optimisation happens here; load failures become
  ``BuildError``/``UnsupportedOp`` naming the op). With a cache directory the optimised model is saved,
  keyed by the engine fingerprint, and reloaded without re-optimising.
- *streams* = concurrent sessions, one per execution context, each driven by its own harness thread.
  With N streams each session gets ``cores // N`` intra-op threads so the streams share the CPU instead
  of oversubscribing it.
- *query* on CPU: one synchronous ``run``; compute = host time of the call, no transfers (None), and the
  enqueue time equals the compute time (the call does not return before the work is done), which the
  ``launch_overhead`` rule knows (``synchronous_enqueue``). With the CUDA provider: inputs and outputs are
  bound to device buffers, so H2D (input copy), compute (``run_with_iobinding``) and D2H (output copy)
  are timed separately on the host clock around synchronous calls.
- *workspace* has no meaning for ONNX Runtime (``uses_workspace = False``): the sweep runs one workspace
  value and lists the others as skipped, saying why.
- *CUDA graphs* only with the CUDA provider (``enable_cuda_graph``); otherwise the variant is skipped.
- *per-layer profile*: ONNX Runtime's own profiler (``enable_profiling``) in a separate session and pass;
  its Chrome-trace JSON has one ``Node`` event per kernel run (``<node>_kernel_time``, ``dur`` in us).
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from profiler.hashing import file_sha256
from profiler.backends.base import (Backend, BuildError, Engine, ExecutionContext, QueryTiming, TensorInfo,
                                    UnsupportedOp, VariantSpec, provider_is_gpu)
from profiler.backends.ort_guard import ORT_LOG_SEVERITY, WATCHDOG, guarded, run_error, run_options, time_limit_s
from profiler.findings import json_safe

CPU_EP = "CPUExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"

_ORT_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(bool)": "bool", "tensor(bfloat16)": "bfloat16",
}


def rss_bytes() -> int | None:
    """Resident set size of this process now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def translate_load_error(exc: BaseException, model_path: str) -> BuildError:
    """Turn an ONNX Runtime load error into a BuildError that names the op when one is at fault."""
    msg = str(exc).strip()
    mt = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", msg)
    if mt:
        err: BuildError = UnsupportedOp(f"{mt.group(1)} (opset {mt.group(2)})", mt.group(3) or None,
                                        backend="onnxruntime")
        return err
    mt = re.search(r"([\w.]+:)?(\w+)\((-?\d+)\) is not a registered function/op", msg)
    if mt:
        return UnsupportedOp(((mt.group(1) or "") + mt.group(2)), None, backend="onnxruntime")
    first = msg.splitlines()[0] if msg else type(exc).__name__
    return BuildError(f"onnxruntime could not load {Path(model_path).name}: {first}")


def parse_ort_profile(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-node records in the shared per-layer schema (``profiler.layers.ort``) from ONNX Runtime's
    profiler JSON, largest total time first; [] when the trace holds no node executions."""
    from profiler.layers.ort import parse_ort_profile as layer_frame

    if not any(e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time") for e in events):
        return []
    records = json_safe(layer_frame(events).to_dict("records"))
    records.sort(key=lambda r: (-(r["time_total_ms"] or 0.0), r["name"]))
    return records


class OrtContext(ExecutionContext):
    """One session driven by one harness thread."""

    def __init__(self, session: Any, stream_index: int, device: str, model: str = "the model"):
        import onnxruntime as ort

        self.session = session
        self.stream_index = stream_index
        self.device = device
        self._model = model
        self._ro = run_options(ort)  # every run watched (profiler.backends.ort_guard)
        self._limit_s = time_limit_s()
        self._output_names = [o.name for o in session.get_outputs()]
        self._feeds: dict[str, np.ndarray] = {}
        self._last: list[Any] = []
        self._binding: Any = None
        self._in_values: dict[str, Any] = {}
        self._out_values: list[Any] = []

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        names = {i.name for i in self.session.get_inputs()}
        missing = names - set(feeds)
        if missing:
            raise BuildError(f"no data for input(s) {', '.join(sorted(missing))}")
        self._feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items() if k in names}
        if self.device == "cuda":
            self._bind_device_buffers()

    def _bind_device_buffers(self) -> None:
        """Device input/output buffers at fixed addresses (what CUDA-graph replay needs)."""
        import onnxruntime as ort

        b = self.session.io_binding()
        self._in_values = {}
        for name, arr in self._feeds.items():
            val = ort.OrtValue.ortvalue_from_numpy(arr, "cuda", 0)
            self._in_values[name] = val
            b.bind_ortvalue_input(name, val)
        # one run with outputs on the device tells us their shapes, then fixed buffers are bound
        for name in self._output_names:
            b.bind_output(name, "cuda")
        guarded(lambda: self.session.run_with_iobinding(b, self._ro), self._ro, self._model, self._limit_s)
        shapes = [(v.shape(), v.numpy().dtype) for v in b.get_outputs()]
        b = self.session.io_binding()
        for name, val in self._in_values.items():
            b.bind_ortvalue_input(name, val)
        self._out_values = []
        for name, (shape, dtype) in zip(self._output_names, shapes):
            val = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
            self._out_values.append(val)
            b.bind_ortvalue_output(name, val)
        self._binding = b

    def query(self) -> QueryTiming:
        if self._binding is None:
            run = WATCHDOG.watch(self._ro, self._limit_s)
            t0 = time.perf_counter_ns()
            try:
                self._last = self.session.run(self._output_names, self._feeds, self._ro)
            except Exception:
                WATCHDOG.done(run)
                self._failed(run)
            t1 = time.perf_counter_ns()
            WATCHDOG.done(run)
            ms = (t1 - t0) / 1e6
            return QueryTiming(t0, t1, ms, ms, None, None, self.stream_index)
        if not self.transfers:  # inputs were bound on the device by set_inputs; outputs stay there
            t1 = time.perf_counter_ns()
            self._run_bound()
            t2 = time.perf_counter_ns()
            self._last = []
            compute = (t2 - t1) / 1e6
            return QueryTiming(t1, t2, compute, compute, None, None, self.stream_index)
        t0 = time.perf_counter_ns()
        for name, val in self._in_values.items():
            val.update_inplace(self._feeds[name])
        t1 = time.perf_counter_ns()
        self._run_bound()
        t2 = time.perf_counter_ns()
        self._last = [v.numpy() for v in self._out_values]
        t3 = time.perf_counter_ns()
        compute = (t2 - t1) / 1e6
        return QueryTiming(t0, t3, compute, compute, (t1 - t0) / 1e6, (t3 - t2) / 1e6, self.stream_index)

    def _run_bound(self) -> None:
        guarded(lambda: self.session.run_with_iobinding(self._binding, self._ro), self._ro, self._model,
                self._limit_s)

    def _failed(self, run: Any) -> None:
        """Raise what a failed run means: KeyboardInterrupt when a signal stopped it, else the sentence."""
        import sys

        exc = sys.exc_info()[1]
        assert exc is not None
        reason = run.reason  # the watchdog has let go of the run (and reset the options)
        if reason == "signal":
            raise KeyboardInterrupt from None
        raise run_error(exc, self._model, self._limit_s if reason == "time limit" else None) from None

    def outputs(self) -> dict[str, np.ndarray]:
        if self._binding is not None and not self._last:  # transfers off: copy the device outputs now
            self._last = [v.numpy() for v in self._out_values]
        return {n: np.asarray(v) for n, v in zip(self._output_names, self._last)}

    def set_transfers(self, on: bool) -> None:
        """The CPU provider has no transfers (nothing changes); on the CUDA provider, off skips the
        per-query input update and output copy (set_inputs already put the inputs on the device)."""
        self.transfers = bool(on)

    def enable_cuda_graph(self) -> str | None:
        if self.device != "cuda":
            return "CUDA graphs need ONNX Runtime's CUDA execution provider"
        return None  # the session was created with enable_cuda_graph; the first run captured it


class OrtEngine(Engine):
    def __init__(self, backend: "OnnxRuntimeBackend", model_path: str, spec: VariantSpec, session: Any,
                 load_path: str, optimized: bool, info: dict[str, Any]):
        self.backend = backend
        self.model_path = model_path
        self.spec = spec
        self._first_session = session
        self._load_path = load_path
        self._optimized = optimized
        self.info = info
        self.inputs = [TensorInfo(i.name, tuple(i.shape), _ORT_DTYPES.get(i.type, i.type))
                       for i in session.get_inputs()]
        self.outputs = [TensorInfo(o.name, tuple(o.shape), _ORT_DTYPES.get(o.type, o.type))
                        for o in session.get_outputs()]

    def create_context(self, stream_index: int = 0) -> ExecutionContext:
        if stream_index == 0 and self._first_session is not None:
            sess, self._first_session = self._first_session, None
        else:
            sess = self.backend._session(self._load_path, self.spec, already_optimized=self._optimized)
        return OrtContext(sess, stream_index, self.backend.device, Path(self.model_path).name)

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int = 10) -> list[dict[str, Any]]:
        """Per-node times from ONNX Runtime's profiler, in a session of its own (never the timed one)."""
        with tempfile.TemporaryDirectory(prefix="trtprof-ortprof-") as tmp:
            sess = self.backend._session(self._load_path, self.spec, already_optimized=self._optimized,
                                         profile_prefix=str(Path(tmp) / "ort"))
            names = {i.name for i in sess.get_inputs()}
            use = {k: v for k, v in feeds.items() if k in names}
            ro = run_options(self.backend._ort)
            for _ in range(max(1, iterations) + 1):
                guarded(lambda: sess.run(None, use, ro), ro, Path(self.model_path).name)
            path = sess.end_profiling()
            with open(path) as fh:
                events = json.load(fh)
        # the first run allocates and selects kernels: drop it, keep the steady state
        records = parse_ort_profile(_drop_first_run(events))
        return records


def _drop_first_run(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep only Node events after the end of the first ``model_run`` of a trace."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e.get("ts", 0))
    if len(runs) < 2:
        return events
    cut = runs[0]["ts"] + runs[0].get("dur", 0)
    return [e for e in events if e.get("cat") != "Node" or e.get("ts", 0) >= cut]


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime with the CUDA provider when it is available (``device="auto"``), else the CPU."""

    name = "onnxruntime"
    uses_workspace = False
    synchronous_enqueue = True  # run() returns once the outputs are computed, on either provider

    @property
    def is_gpu(self) -> bool:  # type: ignore[override]
        return self.device == "cuda"

    @property
    def faithful_low_precision(self) -> bool:  # type: ignore[override]
        """The CPU provider computes float16 nodes in float32 and runs fused integer kernels."""
        return self.device == "cuda"

    @classmethod
    def measured_on_gpu(cls, environment: dict[str, Any]) -> bool:
        return provider_is_gpu(environment)

    def process_options(self) -> dict[str, Any]:
        return {"device": self.device, "intra_op_threads": self.intra_op_threads}

    def __init__(self, device: str = "auto", intra_op_threads: int | None = None):
        import onnxruntime as ort

        self._ort = ort
        ort.set_default_logger_severity(ORT_LOG_SEVERITY)
        available = ort.get_available_providers()
        if device == "auto":
            device = "cuda" if CUDA_EP in available else "cpu"
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
        if device == "cuda" and CUDA_EP not in available:
            raise BuildError("ONNX Runtime's CUDA execution provider is not installed (pip install onnxruntime-gpu)")
        self.device = device
        self.intra_op_threads = intra_op_threads
        self._describe: dict[str, Any] | None = None

    # -- description ---------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        if self._describe is None:
            d: dict[str, Any] = {"name": self.name, "version": self._ort.__version__,
                                 "provider": CUDA_EP if self.device == "cuda" else CPU_EP,
                                 "available_providers": self._ort.get_available_providers(),
                                 "cpu": cpu_name(), "cpu_count": os.cpu_count()}
            if self.device == "cuda":
                d["device"] = _gpu_name() or "CUDA GPU"
            else:
                d["device"] = d["cpu"]
            self._describe = d
        return self._describe

    def unsupported(self, spec: VariantSpec) -> str | None:
        if spec.cuda_graph and self.device != "cuda":
            return "CUDA graphs need ONNX Runtime's CUDA execution provider, which is not available here"
        return None

    # -- sessions ------------------------------------------------------------------------------
    def _threads(self, spec: VariantSpec) -> int:
        if self.intra_op_threads:
            return self.intra_op_threads
        return max(1, (os.cpu_count() or 1) // max(1, spec.streams))

    def _session(self, path: str, spec: VariantSpec, *, already_optimized: bool = False,
                 save_optimized: str | None = None, profile_prefix: str | None = None) -> Any:
        ort = self._ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = self._threads(spec)
        so.inter_op_num_threads = 1
        so.log_severity_level = ORT_LOG_SEVERITY  # its errors come as exceptions (profiler.backends.ort_guard)
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL if already_optimized
                                       else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        if save_optimized:
            so.optimized_model_filepath = save_optimized
        if profile_prefix:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        if self.device == "cuda":
            opts: dict[str, Any] = {"device_id": 0}
            if spec.cuda_graph:
                opts["enable_cuda_graph"] = "1"
            providers: list[Any] = [(CUDA_EP, opts), CPU_EP]
        else:
            providers = [CPU_EP]
        return off_main_thread(lambda: ort.InferenceSession(path, so, providers=providers))

    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> Engine:
        if not os.path.exists(model_path):
            raise BuildError(f"model file not found: {model_path}")
        rss0 = rss_bytes()
        t0 = time.perf_counter()
        model_hash = file_sha256(model_path)
        fp = self.fingerprint(model_hash, spec)
        load_path, optimized, cache_hit, save_to = model_path, False, False, None
        if cache_dir:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            cached = Path(cache_dir) / f"ort-{fp}.onnx"
            if cached.exists():
                load_path, optimized, cache_hit = str(cached), True, True
            else:  # written under a name of its own, renamed into place once complete (concurrent sweeps)
                save_to = str(Path(cache_dir) / f".ort-{fp}.{os.getpid()}.{threading.get_ident()}.onnx.tmp")
        try:
            try:
                sess = self._session(load_path, spec, already_optimized=optimized, save_optimized=save_to)
            except Exception:
                if not cache_hit:
                    raise
                # an unreadable cache entry: rebuild from the model itself
                load_path, optimized, cache_hit = model_path, False, False
                sess = self._session(load_path, spec)
        except Exception as exc:
            if save_to and os.path.exists(save_to):
                os.unlink(save_to)
            raise translate_load_error(exc, model_path) from exc
        if save_to and os.path.exists(save_to):
            os.replace(save_to, cached)
        build_s = time.perf_counter() - t0
        rss1 = rss_bytes()
        info = {
            "backend": self.name, "fingerprint": fp, "model_hash": model_hash, "build_time_s": build_s,
            "engine_size_bytes": os.path.getsize(load_path), "engine_path": load_path, "cache_hit": cache_hit,
            "providers": sess.get_providers(), "intra_op_threads": self._threads(spec),
            "synchronous_enqueue": self.synchronous_enqueue, "device": self.describe().get("device"),
            "backend_version": self._ort.__version__,
            "rss_before_build_bytes": rss0, "rss_after_build_bytes": rss1,
            "build_memory_bytes": (rss1 - rss0) if rss0 is not None and rss1 is not None else None,
            "notes": [],
        }
        if spec.workspace_bytes is not None:
            info["notes"].append("onnxruntime has no workspace limit; the workspace setting does not apply")
        return OrtEngine(self, model_path, spec, sess, load_path, optimized, info)


#: How often (seconds) the main thread looks up from waiting for a session being created.
SESSION_WAIT_POLL_S = 0.02


def off_main_thread(call: Any) -> Any:
    """``call()`` on a thread of its own, waited for in short joins: creating a session of a large model takes
    minutes inside ONNX Runtime (179 s for the float16 version of a 30,000-node chain here), during which
    the main thread could not run Python's Ctrl-C and SIGTERM handlers; waited for so, they stop the sweep
    at once (the creation is left to end on its daemon thread, its session unused)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # raised again in the caller's thread
            box["error"] = exc

    th = threading.Thread(target=work, name="trtprof-ort-session", daemon=True)
    th.start()
    while th.is_alive():
        th.join(SESSION_WAIT_POLL_S)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _gpu_name() -> str | None:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:
        return None
