"""Backends turn a (precision-transformed) ONNX model into something the harness can time.

``get_backend(name)`` imports lazily: ``onnxruntime`` (everywhere), ``tensorrt`` (TensorRT 10/11 on a
GPU), ``cuda`` (trtprof's reference executor over PyTorch kernels, for GPUs without TensorRT:
its numbers are its interpreter's, never TensorRT's).
``auto`` picks TensorRT when it imports and a GPU is present, else onnxruntime.
"""

from __future__ import annotations

import importlib

from profiler.backends.base import Backend
from profiler.errors import UsageError

BACKENDS = {
    "onnxruntime": "profiler.backends.onnxruntime:OnnxRuntimeBackend",
    "tensorrt": "profiler.backends.tensorrt:TensorRTBackend",
    "cuda": "profiler.backends.cuda_ref:CudaTorchBackend",
}


def get_backend(name: str, **options) -> Backend:
    if name == "auto":
        name, _reason = choose_auto()
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; choose one of: auto, {', '.join(BACKENDS)}")
    module_name, cls_name = BACKENDS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(**options)


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
