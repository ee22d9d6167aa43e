"""trtprof's CUDA layer (cuda-python): devices, memory, streams, events, graphs, typed CUDA errors,
and the one timed loop every GPU backend is measured by (``profiler.cuda.timed_loop``).

Shared by the GPU backends (``tensorrt``, ``cuda``). Importing it is free; cuda-python loads on the
first call that needs it and a missing install raises ``MissingExtra`` naming the ``cuda`` extra.
"""

from profiler.cuda.errors import (
    CudaError,
    CudaOutOfMemory,
    CudaUnavailable,
    GraphCaptureError,
)
from profiler.cuda.runtime import (
    CudaGraph,
    DeviceBuffer,
    DeviceInfo,
    Event,
    MemInfo,
    PinnedBuffer,
    Stream,
    bindings_version,
    capture_graph,
    check,
    device_count,
    device_info,
    device_synchronize,
    elapsed_ms,
    mem_info,
    memcpy_async,
    memcpy_kind,
    runtime,
    set_device,
    try_capture_graph,
)

__all__ = [
    "CudaError", "CudaGraph", "CudaOutOfMemory", "CudaUnavailable", "DeviceBuffer", "DeviceInfo", "Event",
    "GraphCaptureError", "MemInfo", "PinnedBuffer", "Stream", "bindings_version", "capture_graph", "check",
    "device_count", "device_info", "device_synchronize", "elapsed_ms", "mem_info", "memcpy_async", "memcpy_kind",
    "runtime",
    "set_device", "try_capture_graph",
]
