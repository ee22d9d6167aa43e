"""The CUDA layer's CPU-side logic: error mapping, graph-capture fallback reasons, lazy loading,
and the nsys helpers. A test double (``FakeCudaRuntime``) stands in for
``cuda.bindings.runtime`` where a GPU would be needed; where cuda-python is installed, the real
bindings are also exercised on this GPU-less machine (they answer with a driver error)."""

from __future__ import annotations

import enum
import importlib
import sys

import numpy as np
import pytest

from profiler.errors import EXIT_INPUT, InputError, MissingExtra

E = importlib.import_module("profiler.cuda.errors")
R = importlib.import_module("profiler.cuda.runtime")  # the module (the package re-exports a function named runtime)


class FakeError(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidValue = 1
    cudaErrorNotReady = 600
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901


class FakeCudaRuntime:
    """A test double for cuda.bindings.runtime: records calls, returns scripted error codes."""

    cudaError_t = FakeError

    class cudaStreamCaptureMode:
        cudaStreamCaptureModeThreadLocal = 1

    def __init__(self, end_capture_error: FakeError = FakeError.cudaSuccess,
                 instantiate_error: FakeError = FakeError.cudaSuccess):
        self.calls: list[str] = []
        self.end_capture_error = end_capture_error
        self.instantiate_error = instantiate_error
        self.last_error_cleared = 0

    def cudaGetErrorName(self, err):
        return (FakeError.cudaSuccess, FakeError(int(err)).name.encode())

    def cudaGetErrorString(self, err):
        return (FakeError.cudaSuccess, f"description of {FakeError(int(err)).name}".encode())

    def cudaStreamBeginCapture(self, stream, mode):
        self.calls.append("begin")
        return (FakeError.cudaSuccess,)

    def cudaStreamEndCapture(self, stream):
        self.calls.append("end")
        return (self.end_capture_error, "graph-handle")

    def cudaGetLastError(self):
        self.last_error_cleared += 1
        return (FakeError.cudaSuccess,)

    def cudaGraphGetNodes(self, graph, n):
        return (FakeError.cudaSuccess, [], 7)

    def cudaGraphInstantiate(self, graph, flags):
        self.calls.append("instantiate")
        return (self.instantiate_error, "exec-handle")

    def cudaGraphDestroy(self, graph):
        self.calls.append("destroy-graph")
        return (FakeError.cudaSuccess,)

    def cudaEventElapsedTime(self, a, b):
        self.calls.append(f"elapsed {a}-{b}")
        return (FakeError.cudaSuccess, float(b - a))


@pytest.fixture
def fake_rt(monkeypatch):
    fake = FakeCudaRuntime()
    monkeypatch.setattr(R, "_RT", fake)
    return fake


class FakeStream:
    handle = "stream-handle"


# -- error mapping ---------------------------------------------------------------------------------
def test_check_unpacks_values_and_raises_mapped_errors():
    rt = FakeCudaRuntime()
    assert E.check(rt, (FakeError.cudaSuccess,), "cudaFoo") is None
    assert E.check(rt, (FakeError.cudaSuccess, 5), "cudaFoo") == 5
    assert E.check(rt, (FakeError.cudaSuccess, 1, 2), "cudaFoo") == (1, 2)

    with pytest.raises(E.CudaUnavailable) as no_dev:
        E.check(rt, (FakeError.cudaErrorNoDevice, None), "cudaGetDeviceCount")
    assert isinstance(no_dev.value, InputError) and no_dev.value.exit_code == EXIT_INPUT
    assert str(no_dev.value).startswith("no usable CUDA GPU: cudaGetDeviceCount returned cudaErrorNoDevice")

    with pytest.raises(E.CudaOutOfMemory) as oom:
        E.check(rt, (FakeError.cudaErrorMemoryAllocation, None), "cudaMalloc")
    assert isinstance(oom.value, RuntimeError) and oom.value.name == "cudaErrorMemoryAllocation"
    assert oom.value.call == "cudaMalloc" and oom.value.code == 2
    assert "description of cudaErrorMemoryAllocation" in str(oom.value)

    with pytest.raises(E.GraphCaptureError) as cap:
        E.check(rt, (FakeError.cudaErrorStreamCaptureUnsupported,), "cudaStreamSynchronize")
    assert "cannot be captured" in str(cap.value) and "cudaErrorStreamCaptureUnsupported" in str(cap.value)

    with pytest.raises(E.CudaError) as other:
        E.check(rt, (FakeError.cudaErrorInvalidValue,), "cudaMemcpyAsync")
    assert type(other.value) is E.CudaError
    assert str(other.value) == ("CUDA call cudaMemcpyAsync failed with cudaErrorInvalidValue "
                                "(description of cudaErrorInvalidValue)")


def test_unknown_error_code_falls_back_to_a_name():
    class NoNames(FakeCudaRuntime):
        def cudaGetErrorName(self, err):
            raise ValueError("unknown code")

        def cudaGetErrorString(self, err):
            raise ValueError("unknown code")

    exc = E.make_error(NoNames(), FakeError.cudaErrorInvalidValue, "cudaX")
    assert isinstance(exc, E.CudaError) and exc.name == "cudaErrorInvalidValue"
    assert E.error_name(NoNames(), 12345) == "cudaError 12345"


# -- graph capture fallback ------------------------------------------------------------------------
def test_capture_graph_success(fake_rt):
    g = R.capture_graph(FakeStream(), lambda: None)
    assert g.exec_handle == "exec-handle" and g.nodes == 7
    assert fake_rt.calls == ["begin", "end", "instantiate"]


def test_capture_failure_in_enqueue_ends_capture_and_gives_reason(fake_rt):
    def enqueue():
        raise RuntimeError("operation not permitted when stream is capturing\nmore text")

    graph, reason = R.try_capture_graph(FakeStream(), enqueue)
    assert graph is None
    assert fake_rt.calls == ["begin", "end"]  # the capture was ended: the stream is usable again
    assert fake_rt.last_error_cleared == 1
    assert reason == ("CUDA call enqueue during stream capture failed with RuntimeError "
                      "(operation not permitted when stream is capturing): the enqueued work is not capturable")


def test_capture_invalidated_reason_names_the_cuda_error(monkeypatch):
    fake = FakeCudaRuntime(end_capture_error=FakeError.cudaErrorStreamCaptureInvalidated)
    monkeypatch.setattr(R, "_RT", fake)
    graph, reason = R.try_capture_graph(FakeStream(), lambda: None)
    assert graph is None
    assert reason.startswith("CUDA call cudaStreamEndCapture failed with cudaErrorStreamCaptureInvalidated")
    assert "invalidated the capture" in reason
    assert "instantiate" not in fake.calls


def test_instantiate_failure_destroys_the_graph(monkeypatch):
    fake = FakeCudaRuntime(instantiate_error=FakeError.cudaErrorInvalidValue)
    monkeypatch.setattr(R, "_RT", fake)
    graph, reason = R.try_capture_graph(FakeStream(), lambda: None)
    assert graph is None and "cudaGraphInstantiate" in reason
    assert fake.calls[-1] == "destroy-graph"


def test_keyboard_interrupt_during_capture_propagates(fake_rt):
    def enqueue():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        R.capture_graph(FakeStream(), enqueue)
    assert fake_rt.calls == ["begin", "end"]


def test_external_graph_is_not_destroyed(fake_rt):
    g = R.CudaGraph.from_exec(1234)
    g.destroy()
    assert g.exec_handle is None and "destroy-graph" not in fake_rt.calls


def test_memcpy_kind_rejects_unknown():
    with pytest.raises(ValueError, match="h2d"):
        R.memcpy_kind("sideways")


def test_version_text():
    assert R._version_text(13000) == "13.0" and R._version_text(12080) == "12.8"


# -- lazy loading ----------------------------------------------------------------------------------
def test_importing_the_layer_does_not_import_cuda_python():
    import subprocess

    code = ("import sys, profiler.cuda, profiler.backends.cuda_ref; "
            "print('cuda.bindings.runtime' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1])).stdout.split()
    assert out == ["False", "False"]


def test_missing_cuda_python_names_the_extra(monkeypatch):
    monkeypatch.setattr(R, "_RT", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # makes the import fail
    with pytest.raises(MissingExtra) as exc:
        R.runtime()
    assert "pip install 'trtprof[cuda]'" in str(exc.value)


def test_real_bindings_without_a_gpu_raise_cuda_unavailable(monkeypatch):
    pytest.importorskip("cuda.bindings.runtime", reason="cuda-python is not installed here")
    from profiler.backends.base import gpu_present

    if gpu_present():
        pytest.skip("a GPU is present: this checks the GPU-less path")
    monkeypatch.setattr(R, "_RT", None)
    with pytest.raises(E.CudaUnavailable) as exc:
        R.device_count()
    assert exc.value.name in E.UNAVAILABLE
    assert str(exc.value).startswith(f"no usable CUDA GPU: cudaGetDeviceCount returned {exc.value.name}")


# -- nsys helpers -----------------------------------------------------------------------------------
def test_require_nsys_without_nsys(monkeypatch, tmp_path):
    from profiler.capture import nsysrep
    from profiler.harness import nsys

    monkeypatch.delenv("TRTPROF_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsysrep, "NSYS_GLOBS", ())
    assert nsys.find_nsys() is None
    with pytest.raises(InputError, match="nsys command, which was not found"):
        nsys.require_nsys()


def test_profile_args_and_child_command(tmp_path):
    from profiler.harness import nsys

    args = nsys.profile_args(tmp_path / "cap", cuda_graph_trace="node")
    assert args[:3] == ["profile", "-t", "cuda,nvtx,osrt"]
    assert "--sample=none" in args and "--cuda-graph-trace=node" in args
    assert args[args.index("-o") + 1] == str(tmp_path / "cap")
    argv = ["model.onnx", "--nsys", "--precision", "fp16", "--out", "o", "--db=sqlite:///x.db", "--no-store"]
    assert nsys.strip_nsys_args(argv) == ["model.onnx", "--precision", "fp16"]
    assert nsys.strip_nsys_args(argv, keep=("--no-store",)) == ["model.onnx", "--precision", "fp16", "--no-store"]
    cmd = nsys.sweep_command(nsys.strip_nsys_args(argv), tmp_path / "child")
    assert cmd[1:5] == ["-m", "profiler", "sweep", "model.onnx"]
    assert cmd[-2:] == ["--out", str(tmp_path / "child")]


# -- buffers ------------------------------------------------------------------------------------------
class AllocatingRuntime(FakeCudaRuntime):
    """FakeCudaRuntime that hands out real host memory for every allocation call (test double)."""

    def __init__(self):
        super().__init__()
        self.blocks: dict[int, object] = {}

    def _alloc(self, name, n):
        import ctypes

        block = ctypes.create_string_buffer(n)
        self.blocks[ctypes.addressof(block)] = block
        self.calls.append((name, n))
        return (FakeError.cudaSuccess, ctypes.addressof(block))

    def cudaMalloc(self, n):
        return self._alloc("cudaMalloc", n)

    def cudaMallocHost(self, n):
        return self._alloc("cudaMallocHost", n)

    def cudaFree(self, ptr):
        self.calls.append(("cudaFree", self.blocks.pop(ptr) is not None))
        return (FakeError.cudaSuccess,)

    def cudaFreeHost(self, ptr):
        self.calls.append(("cudaFreeHost", self.blocks.pop(ptr) is not None))
        return (FakeError.cudaSuccess,)


def test_buffers_allocate_and_free_once_through_their_own_calls(monkeypatch):
    rt = AllocatingRuntime()
    monkeypatch.setattr(R, "_RT", rt)
    with R.DeviceBuffer(0) as d:  # zero bytes still allocates one, so the pointer is valid
        assert d.ptr in rt.blocks and d.nbytes == 0
    d.free()  # a second free does nothing
    p = R.PinnedBuffer(24)
    a = p.array("float32", (2, 3))
    a[:] = np.arange(6).reshape(2, 3)
    assert p.array("float32", (6,)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # one memory, two views
    with pytest.raises(ValueError, match="needs 32 bytes; the buffer has 24"):
        p.array("float64", (4,))
    p.free()
    assert rt.calls == [("cudaMalloc", 1), ("cudaFree", True), ("cudaMallocHost", 24), ("cudaFreeHost", True)]
    assert rt.blocks == {} and p.ptr == 0 and d.ptr == 0
