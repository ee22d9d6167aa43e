"""The names nsys gives things in its SQLite export: its tables, the enumeration ids of copy kinds, memory
kinds, synchronisation types and NVTX events, and the CUDA API names sorted into categories."""

from __future__ import annotations

import re

T_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
T_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
T_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
T_GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
T_API = "CUPTI_ACTIVITY_KIND_RUNTIME"
T_SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
T_NVTX = "NVTX_EVENTS"
T_OSRT = "OSRT_API"
#: every table the loader reads (a Parquet or Arrow export is copied to SQLite for these only)
TABLES = (T_KERNEL, T_MEMCPY, T_MEMSET, T_GRAPH, T_API, T_SYNC, T_NVTX, T_OSRT, "StringIds", "ANALYSIS_DETAILS",
          "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "PROCESSES",
          "TARGET_INFO_SESSION_START_TIME", "DIAGNOSTIC_EVENT", "ENUM_DIAGNOSTIC_SEVERITY_LEVEL",
          "ENUM_DIAGNOSTIC_SOURCE_TYPE")

# nsys enum ids (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE, NVTX event types)
COPY_KIND_IDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEM_KIND_IDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device",
             6: "managed"}
SYNC_TYPE_IDS = {1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
NVTX_TYPE_IDS = {NVTX_PUSH_POP: "push_pop", NVTX_START_END: "start_end", NVTX_MARK: "mark"}
EVENT_CLASS_RUNTIME, EVENT_CLASS_DRIVER = 0, 1

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_LAUNCH = re.compile(r"^(cuda|cu)Launch(Kernel|KernelEx|KernelExC|CooperativeKernel|"
                     r"CooperativeKernelMultiDevice|Grid|GridAsync)?$")
SYNC_NAMES = {
    "cudaDeviceSynchronize": "context", "cudaThreadSynchronize": "context", "cuCtxSynchronize": "context",
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaEventQuery": "event", "cuEventQuery": "event",
    "cudaStreamWaitEvent": "stream_wait", "cuStreamWaitEvent": "stream_wait",
}
_BLOCKING_SYNC = {n for n in SYNC_NAMES if "Query" not in n}


def normalize_api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (driver names have no suffix)."""
    return _VERSION_SUFFIX.sub("", name)


def base_api_name(name: str) -> str:
    """The name without version and per-thread-stream suffixes (``_ptsz``, ``_ptds``)."""
    name = normalize_api_name(name)
    for suffix in ("_ptsz", "_ptds"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def api_category(name: str) -> str:
    """'launch', 'graph_launch', 'sync', 'memcpy', 'memset' or 'other' for a CUDA API name."""
    base = base_api_name(name)
    if _LAUNCH.match(base):
        return "launch"
    if base in ("cudaGraphLaunch", "cuGraphLaunch"):
        return "graph_launch"
    if base in _BLOCKING_SYNC:
        return "sync"
    if base.startswith(("cudaMemcpy", "cuMemcpy")):
        return "memcpy"
    if base.startswith(("cudaMemset", "cuMemset")):
        return "memset"
    return "other"
