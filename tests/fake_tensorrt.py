"""Test doubles for the TensorRT backend: ``FakeTensorRT`` and ``FakeCuda``.

They implement the slice of the TensorRT 10/11 Python API and of ``profiler.cuda`` that
``profiler.backends.tensorrt`` calls, so the backend's own logic (parser-error reporting, config,
optimization profiles, plan caching, binding, timing, graph fallback, IProfiler iteration splitting)
is exercised without TensorRT. Inference inside ``FakeExecutionContext.execute_async_v3`` is done by
ONNX Runtime on the buffers the backend bound, so a wrong address or shape shows up as wrong numbers.
Nothing here says anything about how real TensorRT behaves.
"""

from __future__ import annotations

import enum
import itertools
import json
import types
from typing import Any

import numpy as np
import onnx


class _Enum(enum.Enum):
    def __int__(self) -> int:
        return int(self.value)


class NetworkDefinitionCreationFlag(_Enum):
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class MemoryPoolType(_Enum):
    WORKSPACE = 0


class ProfilingVerbosity(_Enum):
    LAYER_NAMES_ONLY = 0
    NONE = 1
    DETAILED = 2


class TensorIOMode(_Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class LayerInformationFormat(_Enum):
    ONELINE = 0
    JSON = 1


class DataType(_Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    INT64 = 7


class ErrorCode(_Enum):
    SUCCESS = 0
    INTERNAL_ERROR = 1
    INVALID_NODE = 4
    UNSUPPORTED_NODE = 8


_ONNX_TO_TRT = {onnx.TensorProto.FLOAT: DataType.FLOAT, onnx.TensorProto.FLOAT16: DataType.HALF,
                onnx.TensorProto.INT64: DataType.INT64, onnx.TensorProto.INT32: DataType.INT32}


class ILogger:
    stands_for = "ILogger"  # checked against the real API (test_tensorrt_api_contract)

    class Severity(_Enum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3

    def __init__(self) -> None:
        pass


class IProfiler:
    stands_for = "IProfiler"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self) -> None:
        pass


class _ParserError:
    stands_for = "ParserError"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, code: ErrorCode, desc: str, node: int, node_name: str, op: str):
        self._c, self._d, self._n, self._nn, self._op = code, desc, node, node_name, op

    def code(self): return self._c
    def desc(self): return self._d
    def node(self): return self._n
    def node_name(self): return self._nn
    def node_operator(self): return self._op
    def file(self): return "ModelImporter.cpp"
    def line(self): return 1


class _Tensor:
    stands_for = "ITensor"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, name: str, shape: tuple[int, ...], dtype: DataType):
        self.name, self.shape, self.dtype = name, shape, dtype


class FakeNetwork:
    stands_for = "INetworkDefinition"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, flags: int):
        self.flags = flags
        self.model: onnx.ModelProto | None = None
        self.model_path: str | None = None
        self._inputs: list[_Tensor] = []
        self._outputs: list[_Tensor] = []

    num_layers = property(lambda self: len(self.model.graph.node) if self.model else 0)
    num_inputs = property(lambda self: len(self._inputs))
    num_outputs = property(lambda self: len(self._outputs))

    def get_input(self, i: int) -> _Tensor:
        return self._inputs[i]


def _tensors(values, init_names) -> list[_Tensor]:
    out = []
    for v in values:
        if v.name in init_names:
            continue
        tt = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        out.append(_Tensor(v.name, dims, _ONNX_TO_TRT.get(tt.elem_type, DataType.FLOAT)))
    return out


class FakeOnnxParser:
    stands_for = "OnnxParser"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, network: FakeNetwork, logger, *, unsupported: set[str]):
        self.network, self.logger, self.unsupported = network, logger, unsupported
        self.errors: list[_ParserError] = []

    def parse_from_file(self, path: str) -> bool:
        try:
            model = onnx.load(path)
        except Exception as exc:
            self.errors.append(_ParserError(ErrorCode.INVALID_NODE, f"failed to load: {exc}", -1, "", ""))
            return False
        for i, node in enumerate(model.graph.node):
            if node.op_type in self.unsupported:
                self.errors.append(_ParserError(
                    ErrorCode.UNSUPPORTED_NODE,
                    f"No importer registered for op: {node.op_type}", i, node.name, node.op_type))
        if self.errors:
            return False
        self.logger.log(ILogger.Severity.WARNING, "fake parser: INT64 weights cast down (test double)")
        inits = {x.name for x in model.graph.initializer}
        self.network.model, self.network.model_path = model, path
        self.network._inputs = _tensors(model.graph.input, inits)
        self.network._outputs = _tensors(model.graph.output, inits)
        return True

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, i: int) -> _ParserError:
        return self.errors[i]


class FakeOptimizationProfile:
    stands_for = "IOptimizationProfile"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self):
        self.shapes: dict[str, tuple] = {}

    def set_shape(self, name, mn, opt, mx):
        self.shapes[name] = (tuple(mn), tuple(opt), tuple(mx))


class FakeTimingCache:
    stands_for = "ITimingCache"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, blob: bytes):
        self.blob = blob or b"fake-timing-cache"

    def serialize(self) -> bytes:
        return self.blob


class FakeBuilderConfig:
    stands_for = "IBuilderConfig"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self):
        self.pool_limits: dict[Any, int] = {}
        self.profiles: list[FakeOptimizationProfile] = []
        self.profiling_verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY
        self.builder_optimization_level = 3
        self.max_aux_streams = -1
        self._cache = None

    def set_memory_pool_limit(self, pool, size):
        self.pool_limits[pool] = size

    def add_optimization_profile(self, p):
        self.profiles.append(p)
        return len(self.profiles) - 1

    def create_timing_cache(self, blob):
        return FakeTimingCache(bytes(blob))

    def set_timing_cache(self, cache, ignore_mismatch):
        self._cache = cache
        return True

    def get_timing_cache(self):
        return self._cache


class FakeBuilder:
    stands_for = "Builder"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, trt: "FakeTensorRT", logger):
        self._trt, self.logger = trt, logger

    def create_network(self, flags: int = 0) -> FakeNetwork:
        self._trt.created_network_flags.append(flags)
        return FakeNetwork(flags)

    def create_builder_config(self) -> FakeBuilderConfig:
        return FakeBuilderConfig()

    def create_optimization_profile(self) -> FakeOptimizationProfile:
        return FakeOptimizationProfile()

    def build_serialized_network(self, network: FakeNetwork, config: FakeBuilderConfig):
        self._trt.builds.append({"workspace": config.pool_limits.get(MemoryPoolType.WORKSPACE),
                                "profiles": [p.shapes for p in config.profiles],
                                "verbosity": config.profiling_verbosity,
                                "opt_level": config.builder_optimization_level})
        ws = config.pool_limits.get(MemoryPoolType.WORKSPACE)
        if ws is not None and ws < self._trt.min_workspace_bytes:
            self.logger.log(ILogger.Severity.ERROR,
                            f"Insufficient workspace memory: {ws} bytes given (test double)")
            return None
        shapes = {n: s[1] for p in config.profiles for n, s in p.shapes.items()}
        payload = {"model_path": network.model_path, "shapes": shapes,
                   "flags": network.flags, "nodes": [n.name or n.op_type for n in network.model.graph.node]}
        return b"FAKEPLAN" + json.dumps(payload).encode()


class FakeExecutionContext:
    stands_for = "IExecutionContext"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, engine: "FakeEngine"):
        self.engine = engine
        self.shapes: dict[str, tuple] = {}
        self.addresses: dict[str, int] = {}
        self.profiler = None
        self.enqueue_emits_profile = True
        self.enqueues = 0

    def set_input_shape(self, name, shape):
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        if name in self.shapes:
            return self.shapes[name]
        shape = self.engine.io[name][1]
        if any(d < 0 for d in shape):  # output: ask the model runner for the real shape
            return self.engine.output_shape(name, self.shapes)
        return shape

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = int(ptr)
        return True

    def execute_async_v3(self, stream_handle) -> bool:
        self.enqueues += 1
        cuda = self.engine._trt.cuda
        cuda.note_enqueue()
        cuda.now_ms += cuda.compute_ms
        feeds = {}
        for name, (mode, shape, dtype) in self.engine.io.items():
            if mode is TensorIOMode.INPUT:
                buf = cuda.memory[self.addresses[name]]
                feeds[name] = buf.view(np.float32 if dtype is DataType.FLOAT else np.float16) \
                    .reshape(self.get_tensor_shape(name))
        outs = self.engine.run(feeds)
        for name, arr in outs.items():
            cuda.memory[self.addresses[name]][: arr.nbytes] = arr.reshape(-1).view(np.uint8)
        if self.profiler is not None and self.enqueue_emits_profile:
            for i, node in enumerate(self.engine.layer_names):
                self.profiler.report_layer_time(node, 0.01 * (i + 1))
        return True


class FakeInspector:
    stands_for = "EngineInspector"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, engine: "FakeEngine"):
        self._engine = engine
        self.execution_context = None

    def get_engine_information(self, fmt):
        return json.dumps({"Layers": [{"Name": n, "LayerType": "Fake"} for n in self._engine.layer_names],
                           "Bindings": list(self._engine.io)})


class FakeEngine:
    stands_for = "ICudaEngine"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, trt: "FakeTensorRT", payload: dict):
        import onnxruntime as ort

        self._trt = trt
        self.sess = ort.InferenceSession(payload["model_path"], providers=["CPUExecutionProvider"])
        self.layer_names = payload["nodes"]
        self.io: dict[str, tuple[TensorIOMode, tuple, DataType]] = {}
        for t in self.sess.get_inputs():
            self.io[t.name] = (TensorIOMode.INPUT, tuple(d if isinstance(d, int) else -1 for d in t.shape),
                               DataType.HALF if "float16" in t.type else DataType.FLOAT)
        for t in self.sess.get_outputs():
            self.io[t.name] = (TensorIOMode.OUTPUT, tuple(d if isinstance(d, int) else -1 for d in t.shape),
                               DataType.HALF if "float16" in t.type else DataType.FLOAT)
        self._shape_cache: dict[tuple, dict] = {}

    num_io_tensors = property(lambda self: len(self.io))
    num_layers = property(lambda self: len(self.layer_names))
    device_memory_size_v2 = 4096

    def get_tensor_name(self, i):
        return list(self.io)[i]

    def get_tensor_mode(self, name):
        return self.io[name][0]

    def get_tensor_dtype(self, name):
        return self.io[name][2]

    def get_tensor_shape(self, name):
        return self.io[name][1]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.sess.get_outputs()]
        return dict(zip(names, self.sess.run(names, feeds)))

    def output_shape(self, name, input_shapes):
        key = tuple(sorted(input_shapes.items()))
        if key not in self._shape_cache:
            feeds = {n: np.zeros(s, np.float32) for n, s in input_shapes.items()}
            self._shape_cache[key] = {k: v.shape for k, v in self.run(feeds).items()}
        return self._shape_cache[key][name]

    def create_execution_context(self):
        return FakeExecutionContext(self)

    def create_engine_inspector(self):
        return FakeInspector(self)


class FakeRuntime:
    stands_for = "Runtime"  # checked against the real API (test_tensorrt_api_contract)

    def __init__(self, trt, logger):
        self._trt = trt

    def deserialize_cuda_engine(self, plan: bytes):
        if not plan.startswith(b"FAKEPLAN"):
            return None
        self._trt.deserialized += 1
        return FakeEngine(self._trt, json.loads(plan[len(b"FAKEPLAN"):]))


class FakeTensorRT(types.SimpleNamespace):
    """A stand-in for the ``tensorrt`` module (test double; not TensorRT)."""

    def __init__(self, version: str = "10.14.1", *, unsupported: set[str] | None = None,
                 min_workspace_bytes: int = 0, cuda: "FakeCuda | None" = None):
        super().__init__()
        self.__version__ = version
        self.cuda = cuda or FakeCuda()
        self.unsupported = unsupported or set()
        self.min_workspace_bytes = min_workspace_bytes
        self.builds: list[dict] = []
        self.created_network_flags: list[int] = []
        self.deserialized = 0
        major = int(version.split(".")[0])
        self.NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag if major < 11 else \
            types.SimpleNamespace()
        for cls in (MemoryPoolType, ProfilingVerbosity, TensorIOMode, LayerInformationFormat, DataType,
                    ErrorCode, ILogger, IProfiler):
            setattr(self, cls.__name__, cls)
        trt = self
        self.Logger = lambda *a: ILogger()
        self.Builder = lambda logger: FakeBuilder(trt, logger)
        self.OnnxParser = lambda network, logger: FakeOnnxParser(network, logger, unsupported=trt.unsupported)
        self.Runtime = lambda logger: FakeRuntime(trt, logger)


# -- profiler.cuda test double ---------------------------------------------------------------------
class FakeStream:
    _ids = itertools.count(1)

    def __init__(self, non_blocking: bool = True, priority: int = 0):
        self.handle = next(self._ids)
        self.destroyed = False

    def synchronize(self):
        cuda = getattr(self, "cuda", None)
        if cuda is not None:  # everything enqueued so far has completed
            cuda.done = cuda.enqueued

    def destroy(self):
        self.destroyed = True


class FakeEvent:
    """Takes the fake GPU clock when recorded; remembers how many enqueues it follows, so waiting on it
    marks them complete, and says (``FakeCuda.violations``) when it is recorded again before its time
    was read or read before it was waited for."""

    def __init__(self, cuda: "FakeCuda"):
        self.cuda = cuda
        self.handle = self  # what the timed loop passes to the runtime's calls
        self.t_ms = None
        self.read = True
        self.covers = 0

    def record(self, stream):
        if not self.read:
            self.cuda.violations.append("an event was recorded again before its time was read")
        self.t_ms = self.cuda.now_ms
        self.read = False
        self.covers = self.cuda.enqueued

    def synchronize(self):
        self.cuda.done = max(self.cuda.done, self.covers)

    def destroy(self):
        pass


class FakeDeviceBuffer:
    def __init__(self, cuda: "FakeCuda", nbytes: int):
        self.cuda, self.nbytes = cuda, nbytes
        self.ptr = next(cuda._ptrs)
        cuda.memory[self.ptr] = np.zeros(nbytes, np.uint8)

    def free(self):
        self.cuda.memory.pop(self.ptr, None)


class FakePinnedBuffer(FakeDeviceBuffer):
    def array(self, dtype, shape):
        dt = np.dtype(dtype)
        return self.cuda.memory[self.ptr][: int(np.prod(shape, dtype=np.int64)) * dt.itemsize].view(dt).reshape(shape)


class FakeGraph:
    def __init__(self, fn):
        self.fn = fn
        self.launches = 0

    def launch(self, stream):
        self.launches += 1
        self.fn()

    def destroy(self):
        pass


class FakeRuntimeCalls:
    """The calls of ``cuda.bindings.runtime`` the timed loop makes, on FakeCuda's objects: results are
    tuples whose first item is the error code (0), as cuda-python returns them. Events are passed as
    their ``handle``, which for a FakeEvent is the event itself."""

    def __init__(self, cuda: "FakeCuda"):
        self.cuda = cuda

    def cudaEventRecord(self, event, stream):
        event.record(stream)
        return (0,)

    def cudaEventSynchronize(self, event):
        event.synchronize()
        return (0,)

    def cudaEventElapsedTime(self, start, end):
        return (0, self.cuda.elapsed_ms(start, end))

    def cudaMemcpyAsync(self, dst_ptr, src_ptr, nbytes, kind, stream):
        self.cuda.memcpy_async(dst_ptr, src_ptr, nbytes, kind, stream)
        return (0,)


class FakeCuda:
    """A stand-in for ``profiler.cuda`` whose events read a deterministic clock (test double).

    Host and device memory live in one dict keyed by fake addresses; copies move bytes and advance
    the fake GPU clock by ``copy_ms``, an enqueue advances it by ``compute_ms``."""

    def __init__(self, *, copy_ms: float = 0.125, compute_ms: float = 1.5, capture_error: str | None = None):
        self.memory: dict[int, np.ndarray] = {}
        self._ptrs = itertools.count(0x1000, 0x1000)
        self.now_ms = 0.0  # the fake GPU clock: copies and kernels advance it
        self.copy_ms, self.compute_ms = copy_ms, compute_ms
        self.capture_error = capture_error
        self.enqueued = 0  # enqueues so far
        self.done = 0  # of which a wait (event or stream) has seen complete
        self.max_in_flight = 0
        self.violations: list[str] = []

    def note_enqueue(self) -> None:
        self.enqueued += 1
        self.max_in_flight = max(self.max_in_flight, self.enqueued - self.done)

    def device_info(self):
        return types.SimpleNamespace(name="Fake GPU (test double)", driver_version="0", runtime_version="0",
                                     compute_capability="0.0")

    def mem_info(self):
        used = sum(b.nbytes for b in self.memory.values())
        return types.SimpleNamespace(free_bytes=(1 << 30) - used, total_bytes=1 << 30)

    def Stream(self, non_blocking: bool = True, priority: int = 0):
        stream = FakeStream(non_blocking, priority)
        stream.cuda = self
        return stream

    def Event(self):
        return FakeEvent(self)

    def PinnedBuffer(self, nbytes):
        return FakePinnedBuffer(self, nbytes)

    def DeviceBuffer(self, nbytes):
        return FakeDeviceBuffer(self, nbytes)

    def runtime(self) -> FakeRuntimeCalls:
        return FakeRuntimeCalls(self)

    @staticmethod
    def check(result, call):
        if result[0]:
            raise RuntimeError(f"{call} failed with {result[0]}")
        return result[1:]

    @staticmethod
    def memcpy_kind(kind: str) -> str:
        return kind

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        if max(start.covers, end.covers) > self.done:
            self.violations.append("an event's time was read before the work it follows was waited for")
        start.read = end.read = True
        return end.t_ms - start.t_ms

    def memcpy_async(self, dst_ptr, src_ptr, nbytes, kind, stream):
        assert kind in ("h2d", "d2h"), kind
        self.now_ms += self.copy_ms
        self.memory[dst_ptr][:nbytes] = self.memory[src_ptr][:nbytes]

    def try_capture_graph(self, stream, fn):
        if self.capture_error:
            return None, self.capture_error
        fn()  # the capture itself runs the work once, as stream capture records it
        return FakeGraph(fn), None
