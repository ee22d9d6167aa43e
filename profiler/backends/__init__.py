"""Backends turn a (precision-transformed) ONNX model into something the harness can time.

``get_backend(name)`` imports lazily: ``onnxruntime`` (everywhere), ``tensorrt`` (TensorRT 10/11 on a
GPU), ``cuda`` (trtprof's reference executor over PyTorch kernels, for GPUs without TensorRT:
its numbers are its interpreter's, never TensorRT's).
``auto`` picks TensorRT when it imports and a GPU is present, else onnxruntime.

A new backend is one module with a :class:`~profiler.backends.base.Backend` subclass (its capabilities
declared there: ``is_gpu``, ``uses_workspace``, ``synchronous_enqueue``, ...) and one line in
``BACKENDS``; the sweep, the rules and the CLI's ``--backend`` choices read it from there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Iterable

from profiler.errors import UsageError

if TYPE_CHECKING:
    from profiler.backends.base import Backend

BACKENDS = {
    "onnxruntime": "profiler.backends.onnxruntime:OnnxRuntimeBackend",
    "tensorrt": "profiler.backends.tensorrt:TensorRTBackend",
    "cuda": "profiler.backends.cuda_ref:CudaTorchBackend",
}


def get_backend(name: str, **options) -> Backend:
    if name == "auto":
        name, _reason = choose_auto()
    cls = backend_class(name)
    if cls is None:
        raise UsageError(f"unknown backend {name!r}; choose one of: auto, {', '.join(BACKENDS)}")
    return cls(**options)


def backend_class(name: str | None) -> type[Backend] | None:
    """The class registered as ``name``, imported but not instantiated (its module defers the backend's
    own heavy imports), for capability lookups on stored runs; None for a name not registered."""
    if name not in BACKENDS:
        return None
    module_name, cls_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def ran_on_gpu(environment: dict[str, Any]) -> bool:
    """Whether the run that ``environment`` (a backend's stored ``describe()``) describes ran on a GPU:
    asked of the backend that measured it; for a backend not registered here, whether its execution
    provider is a GPU one."""
    from profiler.backends.base import provider_is_gpu

    cls = backend_class(environment.get("name") or environment.get("backend"))
    return cls.measured_on_gpu(environment) if cls is not None else provider_is_gpu(environment)


def latency_notes(backend_names: Iterable[str | None]) -> list[str]:
    """What the latencies of these backends are, where a backend says (its ``latency_note``), once each."""
    classes = [backend_class(name) for name in dict.fromkeys(backend_names)]
    return list(dict.fromkeys(c.latency_note for c in classes if c is not None and c.latency_note))


def choose_auto() -> tuple[str, str]:
    """(backend name, why) for ``--backend auto``."""
    try:
        importlib.import_module("tensorrt")
    except Exception:
        return "onnxruntime", "TensorRT is not installed, so onnxruntime runs the sweep"
    from profiler.backends.base import gpu_present

    if not gpu_present():
        return "onnxruntime", "TensorRT imports but no CUDA GPU is visible, so onnxruntime runs the sweep"
    return "tensorrt", "TensorRT imports and a CUDA GPU is present"
