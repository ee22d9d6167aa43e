"""Setup inside the steady state: module loading, context and stream creation, allocation and weight-sized
uploads that happen again between one inference and the next (an engine built or deserialised per request),
counted per interval between consecutive inferences of the unit.

Interval ``k`` runs from the end of inference ``k - 1`` to the end of inference ``k`` (the calls just before an
inference, and those inside it), for every inference but the first one judged: what comes before that one is
setup as the phases see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture.blockwise import blocks
from profiler.capture.frames import MEMCPY, CopyKind
from profiler.capture.nsys_names import base_api_name

SETUP_CALLS: dict[str, tuple[str, ...]] = {
    "module": ("cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload",
               "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cudaLibraryLoadData",
               "cudaLibraryLoadFromFile", "cudaLibraryUnload"),
    "context": ("cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
                "cuDevicePrimaryCtxReset", "cudaDeviceReset"),
    "stream": ("cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cuStreamCreate",
               "cuStreamCreateWithPriority", "cudaStreamDestroy", "cuStreamDestroy"),
    "allocation": ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cudaMallocHost", "cudaFreeHost",
                   "cudaHostAlloc", "cuMemHostAlloc", "cuMemFreeHost", "cudaMallocManaged", "cudaMallocPitch",
                   "cuMemAllocPitch", "cudaMalloc3D", "cuMemAllocManaged"),
}
"""CUDA API calls (base names, driver versions ``_v2`` included) that set work up rather than do it, by kind. Pool
allocations (cudaMallocAsync, cudaFreeAsync) are meant for the loop and are not here."""

UPLOAD = "upload"
"""The kind of a weight-sized host-to-device copy."""
REBUILD_KINDS = ("module", "context")
"""Setup kinds that rebuild an engine: a large upload beside them is its weights."""


def setup_kind(name: str) -> str | None:
    """The kind of setup (a key of SETUP_CALLS) the CUDA API call ``name`` does; None for any other call."""
    base = base_api_name(name)
    if base.endswith("_v2"):
        base = base[:-3]
    return next((k for k, names in SETUP_CALLS.items() if base in names), None)


@dataclass
class Setup:
    """Setup work between consecutive inferences: the intervals checked and, per kind, in how many intervals it
    happened, how many calls (copies for ``upload``) and how long they took (ns)."""

    intervals: int = 0
    with_setup: int = 0  # intervals holding any setup work
    intervals_by_kind: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # call name (or 'HtoD upload') -> count
    ns_by_kind: dict[str, int] = field(default_factory=dict)
    upload_bytes: int = 0
    cost_ns: int = 0  # union of the setup calls' and uploads' time inside the intervals

    @property
    def share(self) -> float:
        return self.with_setup / self.intervals if self.intervals else 0.0


def recurring_setup(table: Any, series_id: int | None, upload_min_bytes: int) -> Setup:
    """The setup work inside the intervals between the unit's inferences (none without an NVTX unit: a window is
    no inference); host-to-device copies of at least ``upload_min_bytes`` count as weight uploads."""
    out = Setup()
    if series_id is None or table.window:
        return out
    inst = table.instances_of(series_id)
    ends = np.sort(inst["end_ns"].to_numpy().astype(np.int64))
    if len(ends) < 2:
        return out
    out.intervals = len(ends) - 1
    tids = np.unique(inst["tid"].to_numpy())
    api = table.api
    kinds = np.array([setup_kind(str(n)) or "" for n in api.names], dtype=object)
    s_parts, e_parts, k_parts, labels = [], [], [], []
    if len(api) and (kinds != "").any():
        rows = _rows_where(api, kinds != "", tids)
        s_parts.append(api.start_ns[rows])
        e_parts.append(api.end_ns[rows])
        k_parts.append(kinds[api.name_code[rows]])
        labels.append(api.names[api.name_code[rows]])
    act = table.activity
    up = np.concatenate([sl.start + np.flatnonzero((act.kind[sl] == MEMCPY) & (act.copy_kind[sl] == CopyKind.HtoD) &
                                                   np.isin(act.api_tid[sl], tids))
                         for sl in blocks(len(act))] or [np.zeros(0, np.int64)])
    nbytes = act.bytes[up] if len(up) else np.zeros(0, np.int64)
    up, nbytes = up[nbytes >= upload_min_bytes], nbytes[nbytes >= upload_min_bytes]
    up_launch = act.api_start_ns[up]
    if not s_parts and not len(up):
        return out
    start = np.concatenate(s_parts + [act.start_ns[up]])
    end = np.concatenate(e_parts + [act.end_ns[up]])
    kind = np.concatenate(k_parts + [np.full(len(up), UPLOAD, dtype=object)])
    label = np.concatenate(labels + [np.full(len(up), "HtoD upload", dtype=object)])
    size = np.concatenate([np.zeros(len(s), np.int64) for s in s_parts] + [np.asarray(nbytes, np.int64)])
    at = np.concatenate(s_parts + [up_launch])  # when the host issued it
    k = np.searchsorted(ends, at, "left")  # interval k: (ends[k - 1], ends[k]]
    inside = (k >= 1) & (k < len(ends))
    # an upload alone is an inference's input, however large (so is one beside an allocation): it is the weights
    # only where the engine is rebuilt, beside module loads or a context creation
    rebuild = inside & np.isin(kind, list(REBUILD_KINDS))
    keep = inside & ((kind != UPLOAD) | np.isin(k, k[rebuild]))
    _fill(out, k[keep], kind[keep], label[keep], start[keep], end[keep], ends)
    out.upload_bytes = int(size[keep].sum())
    return out


def _rows_where(calls: Any, named: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """Rows of the top-level calls of the threads ``tids`` whose name code ``named`` marks, a block at a time (a
    launch-bound capture holds millions of calls)."""
    parts = [sl.start + np.flatnonzero(named[calls.name_code[sl]] & calls.top_level[sl] & np.isin(calls.tid[sl], tids))
             for sl in blocks(len(calls))]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _fill(out: Setup, k: np.ndarray, kind: np.ndarray, label: np.ndarray, start: np.ndarray, end: np.ndarray,
          ends: np.ndarray) -> None:
    """Counts per kind and call name, and the time the work covers inside its interval."""
    if not len(k):
        return
    out.with_setup = len(np.unique(k))
    for name in np.unique(kind).tolist():
        m = kind == name
        out.intervals_by_kind[name] = len(np.unique(k[m]))
        out.ns_by_kind[name] = int((end[m] - start[m]).sum())
    for name in np.unique(label).tolist():
        out.calls[str(name)] = int((label == name).sum())
    lo, hi = ends[k - 1], ends[k]
    s, e = np.clip(start, lo, hi), np.clip(end, lo, hi)
    out.cost_ns = int(intervals.union_length(s, e))
