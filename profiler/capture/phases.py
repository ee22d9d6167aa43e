"""Setup against steady state, and the capture cut down to its steady state.

Setup is everything from the capture's first event to the first steady inference: engine build or deserialisation, context
creation, lazy module loading, allocations and weight uploads, and the warm-up inferences (see
:mod:`profiler.capture.unit`). The steady state runs from the first steady inference to the end of the
last inference's GPU work; teardown after it is left out too. Without NVTX ranges the steady state is the
window of the GPU work, from the first call that launched some to the end of the last, starting after the last
module load or context call when that comes before most of the GPU work: the allocations before the work (the
context is created inside the first one) and the frees after it are setup and teardown, not steady state.

Rules and statistics run on the steady state's table (``SeriesTable.subset``) by default, so start-up gaps, one-time
uploads and warm-up instances are never blamed on the steady state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.capture import blockwise
from profiler.capture import series as S
from profiler.capture.unit import Unit, unit_activity, wrapped_loops, warmup_count

MODULE_LOAD_PREFIXES = ("cuModuleLoad", "cuLibraryLoad", "cuModuleGetFunction", "cuLibraryGetKernel")
CONTEXT_PREFIXES = ("cuInit", "cuCtxCreate", "cuDevicePrimaryCtxRetain", "cudaSetDevice")
ALLOC_PREFIXES = ("cudaMalloc", "cuMemAlloc", "cudaHostAlloc", "cuMemHostAlloc", "cuMemCreate", "cudaMallocHost")
COPY_KIND_ORDER = ("compute", "HtoD", "DtoH", "DtoD", "other_copy")
RUNTIME_INIT_PREFIXES = ("cuInit", "cuModuleGetLoadingMode")
"""Calls the CUDA runtime makes once, while it initialises (the lazy-loading query comes first)."""
PROFILER_START_PREFIXES = ("cuProfilerStart", "cudaProfilerStart")
WORK_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy",
                 "cudaMemset", "cuMemset")
TEARDOWN_PREFIXES = {
    "module_unloading_ms": ("cuModuleUnload", "cuLibraryUnload"),
    "frees_ms": ("cudaFree", "cuMemFree", "cudaFreeHost", "cuMemFreeHost", "cudaFreeAsync", "cuMemRelease",
                 "cuMemUnmap", "cuMemAddressFree", "cudaFreeArray", "cuArrayDestroy", "cuMemHostUnregister",
                 "cudaHostUnregister"),
    "context_destruction_ms": ("cuCtxDestroy", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset",
                               "cudaDeviceReset", "cuStreamDestroy", "cudaStreamDestroy", "cuEventDestroy",
                               "cudaEventDestroy", "cudaGraphExecDestroy", "cudaGraphDestroy", "cuGraphExecDestroy",
                               "cuGraphDestroy"),
}
"""The CUDA calls a process makes as it tears down, by what they release (the teardown phase's contents)."""
TEARDOWN_MIN_SHARE = 0.5
"""After the steady state, the CUDA calls are a teardown phase when the release calls above take at least this
share of their time (a program that goes on computing after its loop has no teardown yet) ..."""
TEARDOWN_MIN_MS = 0.1
"""... and at least this long (a stream destroyed in a few microseconds is no phase)."""
STARTUP_FIRST_CALLS = 20
"""How many of the capture's first CUDA calls may show a start-up ..."""
STARTUP_CALL_MIN_MS = 20.0
"""... by an allocation or context call at least this long (the context is created inside the first one:
341 ms in cudaHostAlloc on an RTX 4060 Ti, 216 ms in cudaMallocManaged on a T4)."""


@dataclass
class Phases:
    """Where setup ends and steady state begins and ends (ns), and what the setup did."""

    capture_start_ns: int
    steady_start_ns: int
    steady_end_ns: int
    first_inference_end_ns: int | None
    first_event_ns: int = 0  # the capture's first event (a capture can begin long before it)
    what: dict[str, Any] = field(default_factory=dict)
    startup_calls: bool = False  # the capture's first CUDA calls are the runtime's start-up (startup_seen)
    teardown: dict[str, Any] | None = None  # the release calls after the steady state (:func:`teardown`)

    @property
    def has_setup(self) -> bool:
        return self.steady_start_ns > self.first_event_ns


def split(table: S.SeriesTable, unit: Unit, capture_start_ns: int) -> Phases:
    """The phases of a capture from its (full) series table and inference unit."""
    act = table.activity
    act_end = int(act.end_ns.max()) if len(act) else capture_start_ns
    if unit.source != "window" and unit.count > unit.warmup:
        # from the first steady inference (for user ranges, or the first instance of another repeated
        # top-level range: a capture comparing two loops keeps both) to the end of the GPU work launched
        # by the end of the last one
        others = _other_repeated(table, unit) if unit.source == "nvtx" and not unit.decode else []
        start = min([int(unit.start_ns[unit.warmup])] + [lo for lo, _ in others])
        if unit.decode:  # the prefill of the first steady request is steady state too
            start = min(start, _prefill_before(table, unit))
        last = int(max([(unit.start_ns + unit.host_ns)[unit.warmup:].max()] + [hi for _, hi in others]))
        end = max(int(unit.gpu_end_ns[unit.warmup:].max()), last,
                  _end_of_work_launched_by(act, max(last, _unit_loop_end(unit))))
        first_end = int(unit.gpu_end_ns[0])
    elif table.window and len(act):
        # no NVTX: the steady state is the GPU work's window (first launch to last GPU end), so the start-up
        # before it (allocations, the context made inside the first one) and the teardown after it are not
        # blamed on it
        window_start = int(table.instances["start_ns"].iat[0]) if len(table.instances) else capture_start_ns
        start = max(_window_steady_start(table, capture_start_ns), window_start)
        end = act_end
        first_end = None
    else:
        start = _window_steady_start(table, capture_start_ns)
        ends = [int(a.max()) for a in (table.api.end_ns, table.instances["end_ns"].to_numpy()) if len(a)]
        end = max([act_end, start] + ends)
        first_end = None
    firsts = [int(a.min()) for a in (act.start_ns, table.api.start_ns, table.osrt.start_ns,
                                     table.instances["start_ns"].to_numpy()) if len(a)]
    first_event = max(min(firsts), capture_start_ns) if firsts else capture_start_ns
    start = max(start, first_event)
    ph = Phases(capture_start_ns=capture_start_ns, steady_start_ns=start, steady_end_ns=max(end, start),
                first_inference_end_ns=first_end, first_event_ns=min(first_event, start))
    ph.what = setup_contents(table, unit, ph.first_event_ns, start)
    ph.startup_calls = startup_seen(table.api)
    ph.teardown = teardown(table.api, ph.steady_end_ns)
    return ph


def teardown(api: S.HostCalls, after_ns: int) -> dict[str, Any] | None:
    """The window of CUDA calls at the end of the capture, from the first release call after the program's last
    GPU work and wait (after the steady state), when release calls dominate it (module unloading, frees, context,
    stream and graph destruction): ``{start_ns, end_ns, release_ms, cuda_call_ms, calls, <kind>_ms}``, else None."""
    if not len(api):
        return None
    late = (api.start_ns >= after_ns) & api.top_level
    work = late & (api.named_prefix(WORK_PREFIXES) | (api.category == S.ApiCategory.sync))
    if work.any():  # the teardown begins after the program's last GPU work and wait
        late &= api.start_ns > api.start_ns[work].max()
    release = late & np.logical_or.reduce([api.named_prefix(p) for p in TEARDOWN_PREFIXES.values()])
    if not release.any():
        return None
    late &= api.start_ns >= api.start_ns[release].min()  # from its first release call
    rows = np.flatnonzero(late)
    dur_ns = np.maximum(api.end_ns[rows] - api.start_ns[rows], 0)
    kinds = {k: float(dur_ns[api.named_prefix(p)[rows]].sum()) / 1e6 for k, p in TEARDOWN_PREFIXES.items()}
    release_ms = sum(kinds.values())
    total_ms = float(dur_ns.sum()) / 1e6
    if release_ms < TEARDOWN_MIN_MS or release_ms < TEARDOWN_MIN_SHARE * total_ms:
        return None
    return {"start_ns": int(api.start_ns[rows].min()), "end_ns": int(api.end_ns[rows].max()),
            "release_ms": release_ms, "cuda_call_ms": total_ms, "calls": int(len(rows)), **kinds}


def startup_seen(api: S.HostCalls) -> bool:
    """Whether the capture's first CUDA calls are the process's CUDA start-up: the runtime's initialisation
    calls, or a long allocation, context or module call among the first ones (where the context is
    created lazily). A capture started late begins with ordinary launches and copies instead."""
    if not len(api):
        return False
    first = _earliest(api.start_ns, STARTUP_FIRST_CALLS)
    first = first[api.top_level[first]]
    if api.named_prefix(RUNTIME_INIT_PREFIXES)[first].any():
        return True
    if api.named_prefix(PROFILER_START_PREFIXES)[first[:1]].any():  # a cudaProfilerStart capture range
        return False
    # a start-up's one-off calls come before the first launch or copy; after one, a long module load is a
    # kernel's lazy loading at its first use, wherever the capture began
    work = np.flatnonzero(api.named_prefix(WORK_PREFIXES)[first])
    first = first[:work[0]] if len(work) else first
    once = api.named_prefix(ALLOC_PREFIXES + CONTEXT_PREFIXES + MODULE_LOAD_PREFIXES)[first]
    dur_ms = (api.end_ns[first] - api.start_ns[first]) / 1e6
    return bool((once & (dur_ms >= STARTUP_CALL_MIN_MS)).any())


def _earliest(start_ns: np.ndarray, k: int) -> np.ndarray:
    """``np.argsort(start_ns, kind="stable")[:k]`` (ties in row order) without sorting every call: each
    block's candidates are its rows no later than its k-th earliest start."""
    cand = []
    for sl in blockwise.blocks(len(start_ns)):
        block = start_ns[sl]
        kth = np.partition(block, k - 1)[k - 1] if len(block) > k else block.max()
        cand.append(sl.start + np.flatnonzero(block <= kth))
    rows = np.concatenate(cand)
    return rows[np.lexsort((rows, start_ns[rows]))][:k]


def _prefill_before(table: S.SeriesTable, unit: Unit) -> int:
    """The first launch of the prefill just before the unit's first steady decode step (no other step between
    them); that step's start when there is none."""
    from profiler.capture.generation import prefill_windows

    lo = int(unit.start_ns[unit.warmup])
    det = getattr(table, "generation", None)
    wins = [w for w in (prefill_windows(det) if det is not None else []) if w[1] <= lo]
    if not wins:
        return lo
    a, b = wins[-1]
    between = np.searchsorted(unit.start_ns, lo, "left") - np.searchsorted(unit.start_ns, b, "left")
    return a if between <= 0 else lo


def _unit_loop_end(unit: Unit) -> int:
    """The end of the unit's last steady inference plus its median pause between inferences: an inference's
    work issued just after its range (a TensorRT enqueue's output copy) belongs to it; what the program starts
    after a longer pause does not."""
    starts, ends = unit.start_ns[unit.warmup:], (unit.start_ns + unit.host_ns)[unit.warmup:]
    pause = int(max(np.median(starts[1:] - ends[:-1]), 0)) if len(starts) > 1 else 0
    return int(ends.max()) + pause


def _end_of_work_launched_by(act: Any, last_ns: int) -> int:
    """The end of the GPU work launched (or, its launch unknown, started) at or before ``last_ns`` (0 when
    none): what the inference loops queued runs to its end, and what the program launches after them
    (teardown, a per-layer pass, the next phase) is not their steady state."""
    end = 0
    unknown = np.iinfo(np.int64).min
    for sl in blockwise.blocks(len(act)):
        launched = act.api_start_ns[sl]
        by = np.where(launched == unknown, act.start_ns[sl], launched) <= last_ns
        if by.any():
            end = max(end, int(act.end_ns[sl][by].max()))
    return end


def _other_repeated(table: S.SeriesTable, unit: Unit) -> list[tuple[int, int]]:
    """(start of the first steady instance, end of the last instance) of each repeated top-level series
    other than the unit (not the loops in one-off ranges of their own: a sweep's variants are phases of the
    program, and the pauses between them are not the unit's): its leading instances that cost several
    times its typical one are its warm-up, as the unit's are (a second worker thread's first batch creates
    its cuBLAS handle), and belong to the setup too."""
    inst = table.instances
    if table.window or inst.empty:
        return []
    top = inst[(inst["depth"].to_numpy() == 0) & (inst["series_id"].to_numpy() != unit.series_id)]
    out = []
    first_ns = int(unit.start_ns[0]) if unit.count else 0
    for sid, series in top.groupby("series_id"):
        if len(series) < 2 or _warmup_before(table, int(sid), series, first_ns):
            continue
        series = series.sort_values("start_ns", kind="stable")
        wall = series["wall_ns"].to_numpy()
        warm = warmup_count(wall, np.zeros(len(wall), np.int64))
        out.append((int(series["start_ns"].iat[warm]), int(series["end_ns"].max())))
    return out


WARMUP_RANGE = re.compile(r"warm[-_ ]?up|^warm|burn[-_ ]?in", re.IGNORECASE)
"""Range names that say they are the warm-up (``Warmup #``, ``warm_up``, ``burn-in``): a repeated range so named
that ends before the unit's first instance is setup, not a second loop kept in the steady state."""


def _warmup_before(table: S.SeriesTable, sid: int, series: Any, first_ns: int) -> bool:
    """Whether the series ``sid`` (its top-level ``series`` rows) is a warm-up loop before the unit."""
    name = str(table.series["name"].iat[sid])
    return bool(WARMUP_RANGE.search(name)) and int(series["end_ns"].max()) <= first_ns


def _window_steady_start(table: S.SeriesTable, capture_start_ns: int) -> int:
    """End of the last module load / context call, if at least half the GPU work comes after it."""
    act, api = table.activity, table.api
    if not len(act) or not len(api):
        return capture_start_ns
    once = api.named_prefix(MODULE_LOAD_PREFIXES + CONTEXT_PREFIXES)
    ends = api.end_ns[once]
    ends = ends[ends < int(np.median(act.start_ns))] if len(ends) else ends
    return max(int(ends.max()), capture_start_ns) if len(ends) else capture_start_ns


def setup_contents(table: S.SeriesTable, unit: Unit, lo: int, hi: int) -> dict[str, Any]:
    """What happened before steady state: one-time API work, uploads, GPU work outside inferences."""
    api, act = table.api, table.activity
    out: dict[str, Any] = {"warmup_inferences": int(unit.warmup)}
    if hi <= lo:
        return out
    in_setup = (api.start_ns >= lo) & (api.start_ns < hi) & api.top_level if len(api) else np.zeros(0, bool)
    for key, prefixes in (("module_loading_ms", MODULE_LOAD_PREFIXES), ("context_creation_ms", CONTEXT_PREFIXES),
                          ("allocation_ms", ALLOC_PREFIXES)):
        rows = np.flatnonzero(in_setup & api.named_prefix(prefixes) if len(api) else in_setup)
        out[key] = float((api.end_ns[rows] - api.start_ns[rows]).sum()) / 1e6
    a = (act.start_ns >= lo) & (act.start_ns < hi)
    up = np.flatnonzero(a & (act.kind == S.MEMCPY) & (act.copy_kind == S.CopyKind.HtoD))
    out["uploads"] = {"count": len(up), "bytes": int(act.bytes[up].sum()),
                      "gpu_ms": float((act.end_ns[up] - act.start_ns[up]).sum()) / 1e6,
                      "largest_bytes": int(act.bytes[up].max()) if len(up) else 0}
    # GPU work of the setup outside any inference instance (engine build's tactic timing, weight init)
    if unit.source != "window" and unit.count:
        a &= ~unit_activity(table, unit)
    outside_ns = blockwise.union_length(act.start_ns, act.end_ns, lambda rows: a[rows], act.sorted_by_start)
    out["gpu_work_outside_inferences_ms"] = outside_ns / 1e6
    out["ranges"] = _setup_ranges(table, unit, lo, hi)
    return out


def _setup_ranges(table: S.SeriesTable, unit: Unit, lo: int, hi: int, limit: int = 8) -> dict[str, float]:
    """Top-level NVTX ranges of the setup other than the unit (deserialisation, build): label -> ms."""
    inst = table.instances
    if table.window or inst.empty:
        return {}
    m = (inst["depth"].to_numpy() == 0) & (inst["start_ns"].to_numpy() >= lo) & (inst["start_ns"].to_numpy() < hi)
    if unit.series_id is not None:  # neither the unit nor a one-off range around a loop (each is the whole loop)
        m &= ~np.isin(inst["series_id"].to_numpy(), [unit.series_id, *wrapped_loops(table)[1]])
    if not m.any():
        return {}
    sub = inst[m].groupby("series_id")["wall_ns"].sum().sort_values(ascending=False).head(limit)
    ser = table.series
    return {(f"{ser['domain'].iat[s]}:{ser['name'].iat[s]}" if ser["domain"].iat[s] else ser["name"].iat[s]):
            float(v) / 1e6 for s, v in sub.items()}


def steady_breakdown(act: S.Activity, lo: int, hi: int) -> dict[str, float]:
    """GPU time per kind of work in [lo, hi]: busy union of compute and of each copy direction (ms)."""
    def kind_of(rows: slice) -> np.ndarray:  # index in COPY_KIND_ORDER, -1 outside [lo, hi]
        out = np.full(rows.stop - rows.start, COPY_KIND_ORDER.index("other_copy"), dtype=np.int8)
        copy_kind = act.copy_kind[rows]
        for key in ("HtoD", "DtoH", "DtoD"):  # compared as codes: no per-row strings
            out[copy_kind == S.CopyKind[key]] = COPY_KIND_ORDER.index(key)
        out[act.kind[rows] != S.MEMCPY] = COPY_KIND_ORDER.index("compute")
        start = act.start_ns[rows]
        out[(start < lo) | (start > hi)] = -1
        return out

    busy = blockwise.union_lengths(act.start_ns, act.end_ns, kind_of, len(COPY_KIND_ORDER), act.sorted_by_start)
    return {key: int(busy[i]) / 1e6 for i, key in enumerate(COPY_KIND_ORDER)}


COMPARABLE_COPY_RATIO = 1.5
"""Copy directions within this factor of the busiest one bound the steady state together (HtoD + DtoH)."""


def bounding_copy_directions(by_kind: dict[str, float], ratio: float = COMPARABLE_COPY_RATIO) -> list[str]:
    """The copy directions that take the most GPU time, in ``COPY_KIND_ORDER``: the busiest one and any
    within ``ratio`` of it (a workload copying 32 MiB each way is bound by both, not by whichever was a
    microsecond slower in this capture); empty without copy time."""
    copies = {k: v for k, v in by_kind.items() if k != "compute" and v > 0}
    if not copies:
        return []
    top = max(copies.values())
    return [k for k in COPY_KIND_ORDER if k in copies and copies[k] * ratio >= top]


def phases_json(ph: Phases, act: S.Activity) -> dict[str, Any]:
    """The ``phases`` object of the analysis JSON (times relative to the capture start)."""
    rel = lambda t: (t - ph.capture_start_ns) / 1e6  # noqa: E731
    by_kind = steady_breakdown(act, ph.steady_start_ns, ph.steady_end_ns)
    lo, hi = ph.steady_start_ns, ph.steady_end_ns

    def steady(rows: slice) -> np.ndarray:
        return (act.start_ns[rows] >= lo) & (act.start_ns[rows] <= hi)

    busy = blockwise.union_length(act.start_ns, act.end_ns, steady, act.sorted_by_start) / 1e6
    dur = (ph.steady_end_ns - ph.steady_start_ns) / 1e6
    started = startup_in_capture(ph)
    devices = blockwise.distinct(act.device_id, steady)
    by_device = {}  # with several GPUs the union above is "any GPU busy": each one's own share too
    if len(devices) > 1 and dur > 0:
        def device_of(rows: slice) -> np.ndarray:  # index in devices, -1 outside the steady state
            return np.where(steady(rows), np.searchsorted(devices, act.device_id[rows]), -1)

        busy_by_device = blockwise.union_lengths(act.start_ns, act.end_ns, device_of, len(devices),
                                                 act.sorted_by_start)
        for i, dev in enumerate(devices.tolist()):
            by_device[str(dev)] = min(int(busy_by_device[i]) / 1e6 / dur, 1.0)
    return {
        "setup": {"start_ms": rel(ph.first_event_ns), "end_ms": rel(ph.steady_start_ns),
                  "duration_ms": (ph.steady_start_ns - ph.first_event_ns) / 1e6, "what": ph.what},
        "steady": {"start_ms": rel(ph.steady_start_ns), "end_ms": rel(ph.steady_end_ns), "duration_ms": dur,
                   "gpu_busy_ms": busy, "gpu_busy_fraction": min(busy / dur, 1.0) if dur > 0 else None,
                   "gpu_ms_by_kind": by_kind, **({"gpu_busy_fraction_by_device": by_device} if by_device else {})},
        # from the capture's first event (the process start when nsys launched it) to the end of the first
        # inference's GPU work; only when the capture holds the process's CUDA start-up
        "time_to_first_inference_ms": (ph.first_inference_end_ns - ph.first_event_ns) / 1e6
        if ph.first_inference_end_ns and started else None,
        "startup_in_capture": started,
        **({"teardown": _teardown_json(ph.teardown, rel)} if ph.teardown else {}),
    }


def _teardown_json(td: dict[str, Any], rel: Any) -> dict[str, Any]:
    """The ``phases.teardown`` object: its window (ms from the capture start) and what it released."""
    return {"start_ms": rel(td["start_ns"]), "end_ms": rel(td["end_ns"]),
            "duration_ms": (td["end_ns"] - td["start_ns"]) / 1e6, "calls": td["calls"],
            "cuda_call_ms": td["cuda_call_ms"], "release_ms": td["release_ms"],
            **{k: td[k] for k in TEARDOWN_PREFIXES}}


def startup_in_capture(ph: Phases) -> bool:
    """Whether the capture holds the process's CUDA start-up: context creation in its setup, or its first
    CUDA calls are the runtime's start-up (:func:`startup_seen`). Module loading alone is not: with lazy
    loading (CUDA's default since 11.7) a kernel's module loads at its first use, wherever the capture
    began.

    A capture started late (``nsys --delay``, a cudaProfilerStart capture range, an attach) begins in the
    middle of the run: its first event is no start, so a "time to first inference" from it would be
    the time to the first inference *in the capture* (2 ms on a capture that began 73 s into training).
    """
    w = ph.what or {}
    return ph.startup_calls or (w.get("context_creation_ms") or 0) > 0
