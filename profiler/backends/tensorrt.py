"""TensorRT backend, written against the TensorRT 10 and 11 Python API.

Build: Builder -> strongly typed network (the ``STRONGLY_TYPED`` creation flag on 10.x; always on in
11.x) -> ONNX parser (every parser error reported; unsupported ops named) -> builder config (workspace
pool limit, detailed profiling verbosity, one optimization profile from the sweep's shapes, builder
optimization level, timing cache) -> serialized plan, cached on disk by a fingerprint of model, variant,
TensorRT version and GPU. Run: one execution context per stream, cuda-python streams/events/pinned
buffers (``profiler.cuda``), ``execute_async_v3``, timed by the shared loop (``profiler.cuda.timed_loop``:
two queries in flight per stream, as in trtexec); CUDA graphs captured after one warm enqueue, with
a fallback and its reason; per-layer times from an ``IProfiler`` in a separate profiling pass;
layer information from the engine inspector (the same JSON as ``trtexec --exportLayerInfo``).

Precision is a property of the ONNX model (TensorRT 11 removed the precision builder flags): the sweep
hands this backend an FP16-converted or Q/DQ-quantized model and the network is built strongly typed.

The module imports ``tensorrt`` lazily; tests run the build/run logic against a test double that
implements the same API surface (``tests/fake_tensorrt.py``), never against TensorRT itself.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from profiler.backends.base import (
    Backend,
    BuildError,
    Engine,
    GpuExecutionContext,
    TensorInfo,
    UnsupportedOp,
    VariantSpec,
)
from profiler.cuda.timed_loop import EventSet, TimedStream
from profiler.errors import MissingExtra

#: Builder optimization level used unless overridden (TensorRT's own default is 3).
DEFAULT_OPT_LEVEL = 3

_DTYPE_NAMES = {  # TensorRT DataType name -> numpy dtype name
    "FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
    "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8", "INT4": "int4", "FP4": "fp4",
}


def _import_trt():
    try:
        import tensorrt as trt  # type: ignore
    except ImportError as exc:
        raise MissingExtra("tensorrt", "tensorrt", "the TensorRT backend") from exc
    return trt


def trt_major(trt) -> int:
    try:
        return int(str(trt.__version__).split(".")[0])
    except (AttributeError, ValueError):
        return 0


def dtype_name(trt_dtype) -> str:
    name = getattr(trt_dtype, "name", str(trt_dtype)).split(".")[-1].upper()
    return _DTYPE_NAMES.get(name, name.lower())


def format_parser_errors(parser) -> list[dict[str, Any]]:
    """Every error the ONNX parser recorded, as dicts (code, description, node, op, file:line)."""
    errors = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        rec: dict[str, Any] = {"code": str(_call(err, "code")), "description": _call(err, "desc")}
        node_index = _call(err, "node")
        rec["node_index"] = node_index if isinstance(node_index, int) and node_index >= 0 else None
        rec["node_name"] = _call(err, "node_name") or None
        rec["op"] = _call(err, "node_operator") or None
        src = _call(err, "file")
        if src:
            rec["source"] = f"{src}:{_call(err, 'line')}"
        errors.append(rec)
    return errors


def _call(obj, name):
    fn = getattr(obj, name, None)
    try:
        return fn() if callable(fn) else fn
    except Exception:  # older bindings lack some accessors
        return None


def parser_build_error(errors: list[dict[str, Any]], model_path: str) -> BuildError:
    """One BuildError naming every parser error; an UnsupportedOp when an op is unsupported."""
    for e in errors:
        if "UNSUPPORTED_NODE" in str(e.get("code")) and e.get("op"):
            exc = UnsupportedOp(e["op"], e.get("node_name"), backend="TensorRT's ONNX parser")
            exc.args = (f"{exc.args[0]}: {e.get('description')}",)
            exc.parser_errors = errors  # type: ignore[attr-defined]
            return exc
    lines = "; ".join(
        f"{e.get('op') or 'node'} {e.get('node_name') or e.get('node_index')}: {e.get('description')}"
        for e in errors
    ) or "the parser reported failure without an error message"
    exc = BuildError(f"TensorRT could not parse {model_path}: {lines}")
    exc.parser_errors = errors  # type: ignore[attr-defined]
    return exc


def make_logger(trt):
    """A TensorRT ILogger that keeps every message (parser warnings go into the build checklist)."""

    class _KeepingLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[tuple[str, str]] = []

        def log(self, severity, msg):  # noqa: D401 - TensorRT callback
            self.messages.append((getattr(severity, "name", str(severity)), str(msg)))

        def of(self, *severities: str) -> list[str]:
            return [m for s, m in self.messages if any(x in s for x in severities)]

    return _KeepingLogger()


def create_network(trt, builder):
    """Strongly typed network: the creation flag on TensorRT 10, unconditional on 11."""
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if trt_major(trt) >= 11 or flag is None:
        return builder.create_network(0)
    return builder.create_network(1 << int(flag))


def device_memory_bytes(engine) -> int | None:
    """Activation memory one execution context needs (API renamed across 10.x / 11.x)."""
    for name in ("get_device_memory_size_for_profile_v2", "get_device_memory_size_for_profile"):
        fn = getattr(engine, name, None)
        if callable(fn):
            try:
                return int(fn(0))
            except Exception:
                pass
    for name in ("device_memory_size_v2", "device_memory_size"):
        value = getattr(engine, name, None)
        if value is not None:
            return int(value)
    return None


class TensorRTBackend(Backend):
    """Build and run TensorRT engines. ``trt`` and ``cuda`` may be injected (test doubles)."""

    name = "tensorrt"

    def __init__(self, *, trt=None, cuda=None, opt_level: int = DEFAULT_OPT_LEVEL,
                 max_aux_streams: int | None = None, timing_cache: str | None = None):
        self.trt = trt or _import_trt()
        self._cuda = cuda
        self.opt_level = opt_level
        self.max_aux_streams = max_aux_streams
        self.timing_cache = timing_cache

    @property
    def cuda(self):
        if self._cuda is None:
            from profiler import cuda as _cuda

            self._cuda = _cuda
        return self._cuda

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "version": str(self.trt.__version__)}
        try:
            info = self.cuda.device_info()
            d.update({"device": info.name, "driver_version": info.driver_version,
                      "cuda_version": info.runtime_version, "compute_capability": info.compute_capability})
        except Exception as exc:  # no GPU: still describable
            d["device"] = None
            d["device_error"] = str(exc)
        return d

    def tensorrt_version(self) -> str | None:
        return str(self.trt.__version__)

    def unsupported(self, spec: VariantSpec) -> str | None:
        if spec.precision not in ("fp32", "fp16", "int8"):
            return f"precision {spec.precision} is not built by this backend"
        return None

    # -- build ---------------------------------------------------------------------------------
    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> Engine:
        trt = self.trt
        from profiler.models.inspect import inspect_model

        info = inspect_model(model_path)
        fingerprint = self.fingerprint(info.model_hash, spec)
        plan_path = Path(cache_dir) / f"{fingerprint}.plan" if cache_dir else None
        checklist: dict[str, Any] = {"fingerprint": fingerprint}
        logger = make_logger(trt)

        if plan_path is not None and plan_path.exists():
            plan = plan_path.read_bytes()
            meta_path = plan_path.with_suffix(".json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            checklist.update(meta.get("checklist", {}))
            checklist["plan_cache_hit"] = True
        else:
            plan, build_meta = self._build_plan(model_path, spec, logger)
            checklist.update(build_meta)
            checklist["plan_cache_hit"] = False
            if plan_path is not None:
                plan_path.parent.mkdir(parents=True, exist_ok=True)
                # unique temporary names, renamed into place: concurrent sweeps never read a half-written plan
                tag = f".{os.getpid()}.{id(plan)}.tmp"
                meta_tmp = plan_path.with_suffix(".json" + tag)
                meta_tmp.write_text(json.dumps({"checklist": build_meta}, default=str))
                tmp = plan_path.with_suffix(".plan" + tag)
                tmp.write_bytes(plan)
                os.replace(meta_tmp, plan_path.with_suffix(".json"))
                os.replace(tmp, plan_path)
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(plan)
        if engine is None:
            errs = "; ".join(logger.of("ERROR", "INTERNAL_ERROR")) or "no message"
            raise BuildError(f"TensorRT could not deserialize the plan for {spec.key}: {errs}")
        checklist.update({"plan_bytes": len(plan), "tensorrt_version": str(trt.__version__),
                          "plan_path": str(plan_path) if plan_path else None})
        return TensorRTEngine(self, runtime, engine, spec, checklist, plan)

    def _build_plan(self, model_path: str, spec: VariantSpec, logger) -> tuple[bytes, dict[str, Any]]:
        trt = self.trt
        meta: dict[str, Any] = {}
        builder = trt.Builder(logger)
        network = create_network(trt, builder)
        parser = trt.OnnxParser(network, logger)
        ok = parser.parse_from_file(str(model_path))
        meta["parser_warnings"] = logger.of("WARNING")
        if not ok:
            raise parser_build_error(format_parser_errors(parser), str(model_path))
        meta["parsed"] = {"layers": network.num_layers, "inputs": network.num_inputs,
                          "outputs": network.num_outputs}

        config = builder.create_builder_config()
        if spec.workspace_bytes is not None:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(spec.workspace_bytes))
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        config.builder_optimization_level = self.opt_level
        if self.max_aux_streams is not None:
            config.max_aux_streams = self.max_aux_streams

        shapes = spec.shape_dict
        dynamic = {}
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            dims = tuple(tensor.shape)
            if any(d < 0 for d in dims):
                if tensor.name not in shapes:
                    raise BuildError(f"input {tensor.name!r} has dynamic dimensions {list(dims)}; "
                                     f"give --shape {tensor.name}:" + "x".join("N" for _ in dims))
                dynamic[tensor.name] = tuple(int(x) for x in shapes[tensor.name])
        if dynamic:
            profile = builder.create_optimization_profile()
            for name, shape in dynamic.items():
                profile.set_shape(name, shape, shape, shape)  # min = opt = max: one engine per shape
            config.add_optimization_profile(profile)
        meta["shapes"] = {k: list(v) for k, v in dynamic.items()}

        cache_blob = b""
        if self.timing_cache and Path(self.timing_cache).exists():
            cache_blob = Path(self.timing_cache).read_bytes()
        cache = config.create_timing_cache(cache_blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
        meta["timing_cache_reused"] = bool(cache_blob)

        before = self._mem_info()
        t0 = time.perf_counter()
        plan = builder.build_serialized_network(network, config)
        meta["build_time_s"] = time.perf_counter() - t0
        after = self._mem_info()
        meta["device_memory"] = {"before_build": before, "after_build": after}
        if plan is None:
            errs = logger.of("ERROR", "INTERNAL_ERROR")
            hint = ""
            if spec.workspace_bytes is not None and any("memory" in e.lower() or "workspace" in e.lower()
                                                        for e in errs):
                hint = f" (the workspace limit {spec.workspace_bytes} bytes may be too small)"
            raise BuildError(f"TensorRT failed to build {spec.key}{hint}: "
                             + ("; ".join(errs[-3:]) or "no error message"))
        if self.timing_cache:
            Path(self.timing_cache).write_bytes(bytes(config.get_timing_cache().serialize()))
        meta["optimized"] = {"workspace_bytes": spec.workspace_bytes, "opt_level": self.opt_level,
                             "build_time_s": meta["build_time_s"]}
        return bytes(plan), meta

    def _mem_info(self) -> dict[str, int] | None:
        try:
            mem = self.cuda.mem_info()
            return {"free_bytes": int(mem.free_bytes), "total_bytes": int(mem.total_bytes)}
        except Exception:
            return None


class TensorRTEngine(Engine):
    def __init__(self, backend: TensorRTBackend, runtime, engine, spec: VariantSpec,
                 checklist: dict[str, Any], plan: bytes):
        self.backend, self.trt, self.runtime, self.engine, self.spec = backend, backend.trt, runtime, engine, spec
        trt = self.trt
        self.inputs, self.outputs = [], []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            ti = TensorInfo(name, tuple(engine.get_tensor_shape(name)), dtype_name(engine.get_tensor_dtype(name)))
            (self.inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else self.outputs).append(ti)
        self.info = {
            "engine_size_bytes": len(plan),
            "activation_bytes_per_context": device_memory_bytes(engine),
            "num_layers": getattr(engine, "num_layers", None),
            "checklist": checklist,
            "fingerprint": checklist.get("fingerprint"),
        }
        self._contexts: list[TensorRTContext] = []

    def create_context(self, stream_index: int = 0) -> "TensorRTContext":
        ctx = TensorRTContext(self, stream_index)
        self._contexts.append(ctx)
        return ctx

    def layer_info(self) -> dict[str, Any] | None:
        inspector = self.engine.create_engine_inspector()
        if self._contexts:
            inspector.execution_context = self._contexts[0].context
        text = inspector.get_engine_information(self.trt.LayerInformationFormat.JSON)
        return json.loads(text)

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int = 10) -> list[dict[str, Any]]:
        """A separate profiling pass: an IProfiler on its own context (it adds synchronisation), joined
        with the inspector's layer information (types, precisions, tactics, fused ONNX nodes)."""
        import tempfile

        from profiler.layers.trtexec import parse_layer_info

        recorder = make_profiler(self.trt)
        ctx = TensorRTContext(self, stream_index=-1)
        try:
            ctx.context.profiler = recorder
            ctx.set_inputs(feeds)
            for _ in range(iterations):
                ctx.query()
        finally:
            ctx.close()
        try:
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "layers.json"
                path.write_text(json.dumps(self.layer_info()))
                info, _messages, _detailed = parse_layer_info(path)
        except Exception:  # per-layer times are still true without the layer information
            info = None
        frame = recorder.times.frame(self.spec.key, info)
        return frame.to_dict("records")

    def close(self) -> None:
        for c in self._contexts:
            c.close()
        self._contexts.clear()


def make_profiler(trt):
    """An IProfiler that forwards every layer time to a ``LayerTimes`` (iterations split as trtexec does)."""
    from profiler.layers.trt_profiler import LayerTimes

    class _RecordingProfiler(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.times = LayerTimes()

        def report_layer_time(self, layer_name, ms):  # noqa: D401 - TensorRT callback
            self.times.add(str(layer_name), float(ms))

    return _RecordingProfiler()


class TensorRTContext(GpuExecutionContext):
    """One IExecutionContext with its stream, device/pinned buffers and two lanes of timing events.

    Timed by the shared loop (:mod:`profiler.cuda.timed_loop`); this class supplies only the buffers
    and :meth:`enqueue_impl` (``execute_async_v3``, or the captured graph's launch)."""

    def __init__(self, engine: TensorRTEngine, stream_index: int):
        self.engine, self.stream_index = engine, stream_index
        cu = engine.backend.cuda
        self.cu = cu
        self.context = engine.engine.create_execution_context()
        if self.context is None:
            raise BuildError("TensorRT could not create an execution context (out of device memory?)")
        self.stream = cu.Stream()
        self._events: list[Any] = []
        self.graph = None
        self._host: dict[str, np.ndarray] = {}
        self._pinned: dict[str, Any] = {}
        self._dev: dict[str, Any] = {}
        shapes = engine.spec.shape_dict
        for t in engine.inputs:
            if any((not isinstance(d, int)) or d < 0 for d in t.shape):
                self.context.set_input_shape(t.name, tuple(shapes[t.name]))
        for t in engine.inputs + engine.outputs:
            shape = tuple(self.context.get_tensor_shape(t.name))
            dtype = np.dtype(t.dtype) if t.dtype in np.sctypeDict else np.dtype(np.uint8)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            self._pinned[t.name] = cu.PinnedBuffer(nbytes)
            self._host[t.name] = self._pinned[t.name].array(dtype, shape)
            self._dev[t.name] = cu.DeviceBuffer(nbytes)
            self.context.set_tensor_address(t.name, int(self._dev[t.name].ptr))
        self._copies_in = [(self._dev[t.name].ptr, self._pinned[t.name].ptr, self._host[t.name].nbytes)
                           for t in engine.inputs]
        self._copies_out = [(self._pinned[t.name].ptr, self._dev[t.name].ptr, self._host[t.name].nbytes)
                            for t in engine.outputs]
        self.timed = TimedStream(cu.runtime(), cu.check, self.stream.handle, (self._event_set(0), self._event_set(1)),
                                 self._copies_in, cu.memcpy_kind("h2d"), cu.memcpy_kind("d2h"), self.enqueue_impl,
                                 stream_index=max(stream_index, 0))

    def _event_set(self, lane: int) -> EventSet:
        events = [self.cu.Event() for _ in range(4)]
        self._events += events
        return EventSet(lane, *(e.handle for e in events))

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        for t in self.engine.inputs:
            if t.name not in feeds:
                raise BuildError(f"no data for input {t.name!r}")
            np.copyto(self._host[t.name], np.asarray(feeds[t.name]).reshape(self._host[t.name].shape),
                      casting="same_kind")
        if not self.transfers:
            self.copy_inputs_impl()

    def copy_inputs_impl(self) -> None:
        """The inputs, host -> device, once (transfers off), then waited for."""
        for dst, src, nbytes in self._copies_in:
            self.cu.memcpy_async(dst, src, nbytes, "h2d", self.stream)
        self.stream.synchronize()

    def enqueue_impl(self, lane: EventSet) -> list[tuple[int, int, int]]:
        """The graph launch, or ``execute_async_v3``; one graph serves both lanes (events are host-recorded)."""
        if self.graph is not None:
            self.graph.launch(self.stream)
        elif not self.context.execute_async_v3(self.stream.handle):
            raise RuntimeError("execute_async_v3 reported failure")
        return self._copies_out

    def outputs(self) -> dict[str, np.ndarray]:
        if not self.transfers:  # the last query's outputs are still on the device: copy them now
            for dst, src, nbytes in self._copies_out:
                self.cu.memcpy_async(dst, src, nbytes, "d2h", self.stream)
            self.stream.synchronize()
        return {t.name: self._host[t.name].copy() for t in self.engine.outputs}

    def enable_cuda_graph(self) -> str | None:
        """Capture execute_async_v3 into a CUDA graph after one warm enqueue; the reason on failure."""
        if not self.context.execute_async_v3(self.stream.handle):  # first-run initialisation
            return "the warm-up enqueue before capture failed"
        self.stream.synchronize()

        def enqueue() -> None:
            if not self.context.execute_async_v3(self.stream.handle):
                raise RuntimeError("execute_async_v3 reported failure during capture")

        self.graph, reason = self.cu.try_capture_graph(self.stream, enqueue)
        if self.graph is None:
            return f"CUDA graph capture failed, running plain enqueues: {reason}"
        return None

    def close(self) -> None:
        if self.timed is None:
            return
        self.timed = None
        for buf in (*self._dev.values(), *self._pinned.values()):
            buf.free()
        self._dev.clear()
        self._pinned.clear()
        self._host.clear()
        if self.graph is not None:
            self.graph.destroy()
            self.graph = None
        for e in self._events:
            e.destroy()
        self._events = []
        self.stream.destroy()
