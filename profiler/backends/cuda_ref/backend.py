"""``--backend cuda``: the reference executor's backend and engine (build, describe, per-node profiling)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from profiler.backends.base import Backend, BuildError, Engine, VariantSpec
from profiler.backends.cuda_ref._torch import load_torch
from profiler.backends.cuda_ref.compiler import BACKEND_NAME, Program, compile_model, has_float16
from profiler.backends.cuda_ref.memory import (AllocatorStats, context_cost, memory_columns, pass_memory,
                                               read_allocator)
from profiler.backends.cuda_ref.runtime import CudaTorchContext


def _probe_pass(t: Any, program: Program, dev: Any) -> dict[str, int]:
    """One eager forward on zero inputs with the allocator's peak reset: activation and workspace bytes."""
    inputs = [t.zeros(i.shape, dtype=getattr(t, i.dtype), device=dev) for i in program.inputs]
    t.cuda.synchronize(dev)
    t.cuda.reset_peak_memory_stats(dev)
    before = read_allocator(t, dev)
    with t.inference_mode():
        outs = program.forward(inputs)
    t.cuda.synchronize(dev)
    del outs
    return pass_memory(before, read_allocator(t, dev))

#: How the executor computes a Q/DQ (INT8) model: the label its INT8 variants carry.
INT8_ROUTE = ("fake-quant: QuantizeLinear rounds and saturates to int8, DequantizeLinear returns float32, and "
              "Conv/MatMul/Gemm run in floating point on the dequantized values (TensorRT fuses the pairs into "
              "int8 kernels with int32 accumulation)")
INT8_LABEL = "int8 fake-quant (float compute)"

#: What the cuda backend's numbers are, said wherever they are shown (report, terminal, describe()).
EXECUTOR_NOTE = ("backend cuda is trtprof's reference executor (ONNX nodes on PyTorch kernels): its latencies are "
                 "its interpreter's, never TensorRT's; eager variants launch each node from Python, CUDA-graph "
                 "variants replay the same kernels without the host; its int8 variants emulate TensorRT's "
                 "integer kernels in floating point (fake-quant: Q then DQ, float Conv/MatMul), so their "
                 "latency is not an int8 engine's either")


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
        if spec.precision not in ("fp32", "fp16", "int8"):
            return f"precision {spec.precision} is not run by the cuda backend"
        return None

    def memory_snapshot(self, engine: Any = None) -> dict[str, Any] | None:
        """The driver's view, and with a live engine of this backend its allocator columns
        (:mod:`.memory`), one more context measured by making one."""
        snap = super().memory_snapshot()
        if isinstance(engine, CudaTorchEngine) and engine.program is not None:
            try:
                snap = {**(snap or {}), **engine.memory_columns()}
            except Exception as exc:  # memory is reported beside the timing; it never loses it
                snap = {**(snap or {}), "allocator_error": f"{type(exc).__name__}: {exc}"}
        return snap

    def build(self, model_path: str, spec: VariantSpec, cache_dir: str | None = None) -> "CudaTorchEngine":
        reason = self.unsupported(spec)
        if reason:
            raise BuildError(reason)
        t = load_torch()
        from profiler import cuda

        try:
            cuda.set_device(self.device_index)
            before = cuda.mem_info()
        except cuda.CudaUnavailable as exc:
            raise BuildError(str(exc)) from exc
        if not t.cuda.is_available():
            raise BuildError("PyTorch sees no CUDA GPU (a CPU-only torch build?), so the cuda backend cannot run")
        import onnx

        from profiler.backends.onnxruntime import rss_bytes

        rss_before = rss_bytes()
        t.cuda.init()  # the caching allocator's counters exist once PyTorch's CUDA state does
        t.cuda.reset_peak_memory_stats(self.device_index)
        alloc_before = read_allocator(t, self.device_index)
        torch_before = alloc_before.allocated_bytes

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
        built = read_allocator(t, dev)
        try:
            build_pass: dict[str, int] | None = _probe_pass(t, program, dev)
        except RuntimeError:
            build_pass = None
        weights = int(sum(v.numel() * v.element_size() for v in program.template if v is not None))
        int8 = spec.precision == "int8"
        info = {
            "build_time_s": time.perf_counter() - started,
            # cudaMemGetInfo sees the driver's view, which PyTorch's caching allocator hides once it holds
            # memory from an earlier engine; the allocator's own count says what this build keeps
            "device_memory": {"free_before_bytes": before.free_bytes, "free_after_bytes": after.free_bytes,
                              "total_bytes": after.total_bytes,
                              "used_by_build_bytes": before.free_bytes - after.free_bytes,
                              "torch_allocated_by_build_bytes": built.allocated_bytes - torch_before,
                              "torch_peak_during_build_bytes": built.peak_allocated_bytes - torch_before,
                              "build_pass": build_pass},
            "engine_size_bytes": weights, "weights_bytes": weights,
            "activation_bytes_per_context": (build_pass or {}).get("activation_bytes_per_context"),
            # the allocator's peak while compiling (build-time values of every node included) above before
            "build_memory_bytes": built.peak_allocated_bytes - torch_before,
            "rss_before_build_bytes": rss_before, "rss_after_build_bytes": rss_bytes(),
            "nodes": program.nodes_total, "nodes_folded": program.nodes_folded, "steps": len(program.steps),
            "op_counts": program.op_counts, "notes": list(program.notes),
            "fp16_route": ("cast by the backend" if half else "fp16 ONNX model") if spec.precision == "fp16" else None,
            "int8_route": INT8_ROUTE if int8 else None,
            "precision_label": INT8_LABEL if int8 else None,
            "torch": t.__version__,
        }
        return CudaTorchEngine(self, program, spec, dev, info)


class CudaTorchEngine(Engine):
    def __init__(self, backend: CudaTorchBackend, program: Program, spec: VariantSpec, device: Any,
                 info: dict[str, Any]):
        self.backend, self.program, self.spec, self.device = backend, program, spec, device
        self.inputs, self.outputs, self.info = program.inputs, program.outputs, info
        self._contexts: list[CudaTorchContext] = []
        CudaTorchEngine._open_engines += 1

    #: engines built and not closed, in this process: cached workspaces are freed only when none is
    _open_engines = 0

    def _ranges(self) -> Any:
        mode = self.backend.node_ranges
        if mode == "off":
            return None
        from profiler.nvtx import ranges

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

    def memory_columns(self) -> dict[str, Any]:
        """The variant's device-memory columns now (:func:`.memory.memory_columns`): the allocator's
        counters with the contexts alive, then one more context made, queried and closed."""
        t = load_torch()
        now = read_allocator(t, self.device)
        extra, why = None, None
        try:
            extra = self._extra_context_cost(t, now)
        except Exception as exc:
            why = f"one more context could not be made: {type(exc).__name__}: {exc}".splitlines()[0]
        return memory_columns(self.info.get("weights_bytes") or 0, self.info["device_memory"].get("build_pass"),
                              now, extra, why)

    def _extra_context_cost(self, t: Any, before: AllocatorStats) -> dict[str, int]:
        """Make one more context (no NVTX node ranges), query it once (and capture its graph when the
        variant uses one), read the allocator, close it and hand its cached blocks back."""
        ctx = CudaTorchContext(self, len(self._contexts), graph_ok=bool(self.spec.cuda_graph), node_ranges=False)
        try:
            ctx.set_inputs({i.name: np.zeros(i.shape, dtype=i.dtype) for i in self.inputs})
            ctx.query()
            if self.spec.cuda_graph and ctx.enable_cuda_graph() is None:
                ctx.query()
            io = sum(x.numel() * x.element_size() for x in (*ctx.dev_inputs, *ctx.dev_outputs))
            cost = context_cost(before, read_allocator(t, self.device), io)
        finally:
            ctx.close()
            del ctx
            t.cuda.empty_cache()
        return cost

    def close(self) -> None:
        for c in list(self._contexts):
            c.close()
        self._contexts.clear()
        if self.program is None:
            return
        self.program = None  # type: ignore[assignment]
        CudaTorchEngine._open_engines -= 1
        if CudaTorchEngine._open_engines == 0:  # no captured graph of any engine still uses a workspace
            _release_cached(load_torch())


def _release_cached(t: Any) -> None:
    """Once no context (and so no captured graph) of an engine is alive: PyTorch keeps a cuBLAS
    workspace per stream it has seen, streams gone or not (measured on the H200: about 32 MiB for each
    context, the profiling and memory passes' included, so 100 MB a variant stayed allocated through a
    sweep); free them and the allocator's unused cache."""
    clear = getattr(t._C, "_cuda_clearCublasWorkspaces", None)
    try:
        if clear is not None:
            clear()
        t.cuda.empty_cache()
    except RuntimeError:
        pass
