"""``--backend cuda``: the reference executor's backend and engine (build, describe, per-node profiling)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from profiler.backends.base import Backend, BuildError, Engine, VariantSpec
from profiler.backends.cuda_ref._torch import load_torch
from profiler.backends.cuda_ref.compiler import BACKEND_NAME, Program, compile_model, has_float16
from profiler.backends.cuda_ref.runtime import CudaTorchContext

INT8_REASON = ("the cuda backend runs ONNX models through PyTorch's CUDA kernels, which have no INT8 path "
               "for ONNX quantize/dequantize graphs; use the tensorrt backend for INT8")


#: What the cuda backend's numbers are, said wherever they are shown (report, terminal, describe()).
EXECUTOR_NOTE = ("backend cuda is trtprof's reference executor (ONNX nodes on PyTorch kernels): its latencies are "
                 "its interpreter's, never TensorRT's; eager variants launch each node from Python, CUDA-graph "
                 "variants replay the same kernels without the host")


class CudaTorchBackend(Backend):
    """``--backend cuda``: trtprof's reference executor (see :mod:`profiler.backends.cuda_ref`)."""

    name = BACKEND_NAME
    uses_workspace = False
    latency_note = EXECUTOR_NOTE

    def __init__(self, device_index: int = 0, node_ranges: str = "auto", graph_events: bool = False):
        if node_ranges not in ("auto", "on", "off"):
            raise ValueError("node_ranges must be auto, on or off")
        self.device_index = device_index
        self.node_ranges = node_ranges
        self.graph_events = graph_events

    def describe(self) -> dict[str, Any]:
        from profiler import __version__

        d: dict[str, Any] = {"name": self.name, "version": f"trtprof {__version__}", "executor": EXECUTOR_NOTE}
        try:
            t = load_torch()
            d["torch"] = t.__version__
            d["version"] = f"trtprof {__version__} / torch {t.__version__}"
        except Exception as exc:
            d["torch"] = None
            d["unavailable"] = str(exc)
        try:
            from profiler import cuda

            info = cuda.device_info(self.device_index)
            d.update(device=info.name, compute_capability=info.compute_capability,
                     driver_cuda_version=info.driver_version, cuda_runtime_version=info.runtime_version,
                     cuda_bindings=info.bindings_version, total_memory_bytes=info.total_memory_bytes)
        except Exception as exc:
            d["device"] = None
            d.setdefault("unavailable", str(exc))
        return d

    def unsupported(self, spec: VariantSpec) -> str | None:
        if spec.precision == "int8":
            return INT8_REASON
        return None

    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> "CudaTorchEngine":
        reason = self.unsupported(spec)
        if reason:
            raise BuildError(reason)
        t = load_torch()
        from profiler import cuda

        try:
            cuda.set_device(self.device_index)
            before = cuda.mem_info()
            torch_before = int(t.cuda.memory_allocated(self.device_index)) if t.cuda.is_available() else 0
        except cuda.CudaUnavailable as exc:
            raise BuildError(str(exc)) from exc
        if not t.cuda.is_available():
            raise BuildError("PyTorch sees no CUDA GPU (a CPU-only torch build?), so the cuda backend cannot run")
        import onnx

        started = time.perf_counter()
        try:
            model = onnx.load(model_path)
        except Exception as exc:
            raise BuildError(f"cannot read the ONNX model {model_path}: {exc}") from exc
        half = spec.precision == "fp16" and not has_float16(model)
        dev = t.device("cuda", self.device_index)
        try:
            program = compile_model(model, spec.shape_dict, dev, half=half)
            t.cuda.synchronize(dev)
        except (BuildError, cuda.CudaError) as exc:
            raise BuildError(str(exc)) from exc
        except RuntimeError as exc:  # torch's CUDA errors (out of memory, ...)
            raise BuildError(f"building on the GPU failed: {exc}".splitlines()[0]) from exc
        after = cuda.mem_info()
        info = {
            "build_time_s": time.perf_counter() - started,
            # cudaMemGetInfo sees the driver's view, which PyTorch's caching allocator hides once it holds
            # memory from an earlier engine; the allocator's own count says what this build keeps
            "device_memory": {"free_before_bytes": before.free_bytes, "free_after_bytes": after.free_bytes,
                              "total_bytes": after.total_bytes,
                              "used_by_build_bytes": before.free_bytes - after.free_bytes,
                              "torch_allocated_by_build_bytes": int(t.cuda.memory_allocated(dev)) - torch_before},
            "engine_size_bytes": int(sum(v.numel() * v.element_size() for v in program.template if v is not None)),
            "nodes": program.nodes_total, "nodes_folded": program.nodes_folded, "steps": len(program.steps),
            "op_counts": program.op_counts, "notes": list(program.notes),
            "fp16_route": ("cast by the backend" if half else "fp16 ONNX model") if spec.precision == "fp16" else None,
            "torch": t.__version__,
        }
        return CudaTorchEngine(self, program, spec, dev, info)


class CudaTorchEngine(Engine):
    def __init__(self, backend: CudaTorchBackend, program: Program, spec: VariantSpec, device: Any,
                 info: dict[str, Any]):
        self.backend, self.program, self.spec, self.device = backend, program, spec, device
        self.inputs, self.outputs, self.info = program.inputs, program.outputs, info
        self._contexts: list[CudaTorchContext] = []

    def _ranges(self) -> Any:
        mode = self.backend.node_ranges
        if mode == "off":
            return None
        from profiler.harness.nvtx import ranges

        r = ranges()
        return r if r.enabled else None

    def create_context(self, stream_index: int = 0) -> "CudaTorchContext":
        ctx = CudaTorchContext(self, stream_index)
        self._contexts.append(ctx)
        return ctx

    def profile_layers(self, feeds: dict[str, np.ndarray], iterations: int = 10) -> list[dict[str, Any]]:
        """Per ONNX node: CUDA events around each step on one stream, in a separate eager pass."""
        from profiler import cuda

        ctx = CudaTorchContext(self, 0, graph_ok=False)
        steps = self.program.steps
        events = [cuda.Event() for _ in range(len(steps) + 1)]
        try:
            ctx.set_inputs(feeds)
            ctx.query()
            totals = [0.0] * len(steps)
            t = load_torch()
            for _ in range(iterations):
                ctx._copy_inputs_async()
                with t.cuda.stream(ctx.ext):
                    events[0].record(ctx.stream)
                    self.program.forward_each(ctx.dev_inputs, lambda k: events[k + 1].record(ctx.stream))
                ctx.stream.synchronize()
                for k in range(len(steps)):
                    totals[k] += cuda.elapsed_ms(events[k], events[k + 1])
            total_all = sum(totals) or 1.0
            return [{"name": s.name, "type": s.op, "time_total_ms": tot, "time_avg_ms": tot / iterations,
                     "count": iterations, "percent": 100.0 * tot / total_all, "index": k}
                    for k, (s, tot) in enumerate(zip(steps, totals))]
        finally:
            for e in events:
                e.destroy()
            ctx.close()

    def close(self) -> None:
        for c in list(self._contexts):
            c.close()
        self._contexts.clear()
        self.program = None  # type: ignore[assignment]
