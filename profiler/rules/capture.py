"""Capture rules: diagnoses of an nsys capture's NVTX range series, GPU gaps and copies.

Each rule is a pure function of a :class:`profiler.rules.context.CaptureContext` and its thresholds and
returns findings whose ``evidence`` carries the numbers and ``threshold`` the limits they were compared
with. The defaults below are the module constants, severity bands included; every one can be overridden
per run (``AnalysisOptions.thresholds = {"jitter": {"max_cov_pct": 5}}``). The severity a rule gives is
provisional: :mod:`profiler.rules.impact` sets it from the finding's cost where that is known.

Rule ids (scope ``capture``) are public: ``launch_overhead``, ``gpu_idle``, ``jitter``, ``sync_api``,
``pageable_memcpy``, ``transfer_bound``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture import series as S
from profiler.capture import summary as SM
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.context import CaptureContext

# ---- launch_overhead
LAUNCH_MAX_BUSY_FRACTION = 0.5
"""Fire only when the GPU is busy for less than this share of the range's wall time."""
LAUNCH_MIN_LAUNCHES = 10
"""... with at least this many kernel / graph launches per instance (a graph replay is one) ..."""
LAUNCH_MAX_KERNEL_TO_CALL = 2.0
"""... kernels no longer than this multiple of their launch calls (median against median) ..."""
LAUNCH_MIN_SAVING_PCT = 10.0
"""... and a CUDA graph estimated to save at least this share of the wall time."""
GRAPH_NODE_OVERHEAD_US = 1.0
"""Assumed GPU-side cost per kernel node of a replayed CUDA graph, for the saving estimate."""
LAUNCH_HIGH_SAVING_PCT, LAUNCH_MEDIUM_SAVING_PCT = 50.0, 25.0
"""Severity bands: high from this estimated saving (share of the wall time) on, medium from that."""

# ---- gpu_idle
IDLE_MIN_GAP_US = 50.0
"""A gap shorter than this is launch latency, not idleness (nsys's own 500 ms is far too coarse)."""
IDLE_MIN_FRACTION = 0.10
"""Fire when gaps of at least ``min_gap_us`` add up to this share of the device's active window."""
IDLE_TOP_GAPS = 5
IDLE_HIGH_FRACTION, IDLE_MEDIUM_FRACTION = 0.5, 0.25
"""Severity bands over the idle share of the active window."""
IDLE_INIT_SHARE = 0.5
"""A gap at least this share of which the launching threads spend in start-up calls is warm-up."""
INIT_API_PREFIXES = ("cuInit", "cuCtxCreate", "cuDevicePrimaryCtxRetain", "cuLibraryLoad", "cuLibraryGet",
                     "cuModuleLoad", "cuModuleGet", "cuKernelGet", "cudaSetDevice", "cudaFree")
"""One-off start-up work (context creation, lazy module loading): a gap spent mostly in these calls is
warm-up, reported apart and not counted as idleness. ``cudaFree(0)`` is the customary context init."""

# ---- jitter
JITTER_MIN_COUNT = 10
JITTER_MIN_MEDIAN_US = 50.0
"""Shorter ranges (single tensor ops) are dominated by timer noise; not a latency the user serves."""
JITTER_MAX_COV_PCT = 10.0
JITTER_MAX_TAIL_RATIO = 1.5
"""p99 / median above this is an unstable tail."""
JITTER_MIN_TOP_LEVEL_SHARE = 0.5
"""A range with no GPU work that runs nested (top level less than this share of its time) is a host
helper, not a latency anyone serves."""
JITTER_HIGH_TAIL_RATIO, JITTER_HIGH_COV_PCT = 3.0, 50.0
JITTER_MEDIUM_TAIL_RATIO, JITTER_MEDIUM_COV_PCT = 2.0, 25.0
"""Severity bands: high when the tail ratio or the CoV reaches the high band, medium the medium one."""
JITTER_LISTED_OUTLIERS = 20
"""The costliest outlier instances a finding lists."""

# ---- sync_api
SYNC_MIN_FRACTION = 0.10
"""Fire when synchronisation calls block for at least this share of the range's wall time ..."""
SYNC_MAX_PER_INSTANCE = 1.0
"""... and there are more stream/event syncs per instance than this (one wait for the result is
normal) or any device-wide synchronisation."""

SYNC_MIN_GPU_IDLE_SHARE = 0.05
"""... and the GPU idles for at least this share of the range's wall time while the host blocks or right
after it returns (a wait on a busy GPU that is refed at once costs nothing: the GPU sets the pace)."""
SYNC_HIGH_FRACTION, SYNC_HIGH_SYNCS_PER_INSTANCE, SYNC_MEDIUM_FRACTION = 0.3, 2.0, 0.1
"""Severity bands: high from this blocked share with a device-wide sync or this many syncs per instance,
medium from that share."""

# ---- pageable_memcpy
PAGEABLE_MIN_TOTAL_US = 50.0
"""Ignore captures whose pageable copies add up to less GPU time than this."""
PAGEABLE_STAGED_MIN_BYTES = 64 * 1024
"""Copies at least this large are staged through the driver's pinned buffer (their host time is the cost)."""
PAGEABLE_HIGH_SHARE = 0.10
"""High severity when pageable copies take this share of the active GPU window ..."""
PAGEABLE_HIGH_PINNED_SPEEDUP = 2.0
"""... or pinned copies of the same size run this many times faster; ..."""
PAGEABLE_MEDIUM_SHARE = 0.01
"""... medium from this share."""

# ---- transfer_bound
TRANSFER_MIN_COPY_TO_COMPUTE = 1.0
"""Fire when a range's copy time is at least this multiple of its compute time ..."""
TRANSFER_MIN_COPY_FRACTION = 0.10
"""... and copies take at least this share of its wall time."""
TRANSFER_HIGH_COPY_TO_COMPUTE, TRANSFER_HIGH_COPY_FRACTION = 2.0, 0.5
TRANSFER_MEDIUM_COPY_TO_COMPUTE, TRANSFER_MEDIUM_COPY_FRACTION = 1.0, 0.25
"""Severity bands of a range: high when both its ratio and its share reach the high band, medium the medium."""
TRANSFER_MIN_UNIT_COMPUTE_SHARE = 0.5
"""Share of the steady state's compute the inference unit must have launched for the steady state's
copies to count per inference (TensorRT apps launch all of it inside the enqueue ranges, copies outside)."""

TRT_SYNC_ADVICE = (
    "TensorRT: enqueue with enqueueV3 / execute_async_v3 on your own stream and synchronise once per batch on "
    "that stream (execute_v2 is synchronous by design: it waits for every inference); keep a second execution "
    "context on a second stream so one batch's copies and the host's work overlap the other's inference; replay "
    "the enqueue as a CUDA graph (trtexec --useCudaGraph) once shapes are fixed.")
TRT_TRANSFER_ADVICE = (
    "TensorRT: use pinned host buffers (cudaHostAlloc / cudaMallocHost) and cudaMemcpyAsync on the inference's "
    "stream; overlap the next batch's input copy with this batch's enqueue (two execution contexts on two "
    "streams, double-buffered I/O); shrink I/O (FP16 or INT8 I/O formats, trtexec --inputIOFormats, keep "
    "pre/post-processing on the GPU). trtexec --noDataTransfers shows the compute-only bound.")
TRT_LAUNCH_ADVICE = (
    "TensorRT: replay the enqueue as a CUDA graph (trtexec --useCudaGraph, or capture enqueueV3 with "
    "cudaStreamBeginCapture and replay with cudaGraphLaunch); larger batches give each layer's kernels more work.")

TRT_IDLE_ADVICE = (
    " With TensorRT: keep the next inference queued before waiting on this one (enqueueV3 on a second execution "
    "context with its own stream), and replay the enqueue as a CUDA graph (--useCudaGraph) so the host feeds the "
    "GPU in one call.")

MAX_FINDINGS_PER_RULE = 5
"""Per-range rules report at most this many ranges (the costliest), so nested series do not flood."""


_SEVERITY_ORDER = ("high", "medium", "low")


def _band(value: float, high: float, medium: float) -> str:
    """'high' from ``high`` on, 'medium' from ``medium`` on, else 'low' (a rule's severity bands)."""
    return "high" if value >= high else "medium" if value >= medium else "low"


def _worse(a: str, b: str) -> str:
    return min(a, b, key=_SEVERITY_ORDER.index)


def _milder(a: str, b: str) -> str:
    return max(a, b, key=_SEVERITY_ORDER.index)


def _pct(x: float) -> float:
    return round(100.0 * x, 1)


def _median(a: np.ndarray) -> float:
    return float(np.median(a)) if len(a) else float("nan")


def _ranges(ctx: CaptureContext, min_count: int = 1) -> list[dict[str, Any]]:
    return [r for r in ctx.ranges if r["count"] >= min_count]


NESTED_SHARE = 0.5
"""A candidate range is dropped when at least this share of its instances sit inside another candidate
of the same rule: the outer range already carries the finding (PyTorch op ranges nest deeply)."""


def _outermost(ctx: CaptureContext, cands: list[tuple], limit: int) -> list[tuple]:
    """Candidates (cost, range dict, evidence) without those nested in another candidate; costliest first."""
    ids = {c[1]["series_id"] for c in cands}
    kept = []
    for c in sorted(cands, key=lambda c: -c[0]):
        anc = ctx.table.ancestor_share(c[1]["series_id"]) if len(ids) > 1 else {}
        if any(share >= NESTED_SHARE for a, share in anc.items() if a in ids):
            continue
        kept.append(c)
    return kept[:limit]


# ----------------------------------------------------------------------------- launch_overhead

@rule("launch_overhead", scope="capture", defaults={
    "max_busy_fraction": LAUNCH_MAX_BUSY_FRACTION, "min_launches_per_instance": LAUNCH_MIN_LAUNCHES,
    "max_kernel_to_launch_ratio": LAUNCH_MAX_KERNEL_TO_CALL, "min_saving_pct": LAUNCH_MIN_SAVING_PCT,
    "graph_node_overhead_us": GRAPH_NODE_OVERHEAD_US, "max_findings": MAX_FINDINGS_PER_RULE,
    "high_saving_pct": LAUNCH_HIGH_SAVING_PCT, "medium_saving_pct": LAUNCH_MEDIUM_SAVING_PCT})
def launch_overhead(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Ranges paced by launching many short kernels rather than by GPU work."""
    table = ctx.table
    cands = []
    for r in _ranges(ctx):
        busy = r["gpu_busy_fraction"]
        if not (busy < t["max_busy_fraction"]) or r["launches_per_instance"] < t["min_launches_per_instance"]:
            continue
        inst = table.instances_of(r["series_id"])
        # rows with how many instances hold them (nested ranges hold the same kernels many times)
        rows, times = table.member_counts(inst, "activity")
        kern = table.activity.kind[rows] == S.KERNEL
        kernel_ns, kernel_n = (table.activity.end_ns - table.activity.start_ns)[rows][kern], times[kern]
        arows, atimes = table.member_counts(inst, "api")
        launch = table.api.top_level[arows] & np.isin(table.api.category[arows], (S.ApiCategory.launch, S.ApiCategory.graph_launch))
        call_ns, call_n = (table.api.end_ns - table.api.start_ns)[arows][launch], atimes[launch]
        med_kernel_us = intervals.weighted_median(kernel_ns, kernel_n) / 1e3
        med_call_us = intervals.weighted_median(call_ns, call_n) / 1e3
        if len(call_ns) and len(kernel_ns) and med_kernel_us > t["max_kernel_to_launch_ratio"] * med_call_us:
            continue
        if not len(kernel_ns):
            continue
        wall_med_ms = r["wall_ms"]["median"]
        busy_med_ms = r["gpu_busy_ms"]["median"]
        launches = r["launches_per_instance"]
        graphed_ms = max(busy_med_ms + launches * t["graph_node_overhead_us"] / 1e3,
                         (med_call_us / 1e3) if np.isfinite(med_call_us) else 0.0)
        saving_ms = max(wall_med_ms - graphed_ms, 0.0)
        saving_pct = 100.0 * saving_ms / wall_med_ms if wall_med_ms > 0 else 0.0
        if saving_pct < t["min_saving_pct"]:
            continue
        launch_api_ms = float(inst["launch_api_ns"].sum()) / 1e6 / len(inst)
        cands.append((saving_ms * r["count"], r, {
            "gpu_busy_fraction": busy,
            "launches_per_instance": launches,
            "kernels_per_instance": r["kernels_per_instance"],
            "median_kernel_us": med_kernel_us,
            "median_launch_call_us": med_call_us,
            "launch_call_ms_per_instance": launch_api_ms,
            "wall_ms_median": wall_med_ms,
            "gpu_busy_ms_median": busy_med_ms,
            "instances": r["count"],
            "graph_wall_ms_estimate": graphed_ms,
            "graph_saving_ms_per_instance": saving_ms,
            "graph_saving_pct": saving_pct,
            "graph_saving_ms_total": saving_ms * r["count"],
            "graph_saving_method": (
                "replayed as one CUDA graph, an instance would take about its GPU busy time plus "
                f"{t['graph_node_overhead_us']:g} us per kernel node (or one launch call, if longer); "
                "saving = median wall - that estimate. At least the launch-call time per instance is removed "
                "from the host (launch_call_ms_per_instance)"),
        }))
    out = []
    for _, r, ev in _outermost(ctx, cands, int(t["max_findings"])):
        sev = _band(ev["graph_saving_pct"], t["high_saving_pct"], t["medium_saving_pct"])
        out.append(Finding(
            rule="launch_overhead", severity=sev, range=ctx.label(r["series_id"]),
            title=(f"Launch-bound: the GPU is busy {_pct(ev['gpu_busy_fraction'])}% of the range while the host "
                   f"issues {ev['launches_per_instance']:.0f} launches per instance"),
            evidence=ev,
            threshold=t.pick("max_busy_fraction", "min_launches_per_instance", "max_kernel_to_launch_ratio",
                             "min_saving_pct", "graph_node_overhead_us"),
            recommendation=TRT_LAUNCH_ADVICE if ctx.tensorrt else (
                "Capture the range's work once as a CUDA graph and replay it (torch.cuda.CUDAGraph / "
                "torch.compile mode='reduce-overhead', cudaStreamBeginCapture + cudaGraphLaunch, TensorRT "
                "with --useCudaGraph); or fuse the short kernels (larger batch, fused ops) so each launch "
                "carries more work."),
        ))
    return out


# ----------------------------------------------------------------------------- gpu_idle

_CALL_BLOCK = 1 << 20
"""Calls searched against the gaps per block in ``_host_during`` (bounds its temporary arrays)."""


def _host_during(ctx: CaptureContext, d: SM.DeviceGaps, gs: np.ndarray, ge: np.ndarray, detail: np.ndarray | None = None,
                 ) -> tuple[dict, list[dict]]:
    """Where the launching threads were during the gaps: API, OS runtime and NVTX time overlapping them.

    ``per_gap`` (call name -> ms inside that gap) is filled only for the gaps in ``detail`` (all when
    None): the finding lists a few top gaps, and a per-row loop over every gap's calls would cost
    seconds on millions of calls.
    """
    table = ctx.table
    want = np.ones(len(gs), dtype=bool) if detail is None else np.isin(np.arange(len(gs)), detail)
    total = float((ge - gs).sum())
    agg: dict[str, Any] = {}
    per_gap: list[dict[str, dict[str, float]]] = [{} for _ in range(len(gs))]
    covered_s, covered_e = [], []
    for label, calls in (("cuda_api", table.api), ("os_runtime", table.osrt)):
        m = calls.top_level & np.isin(calls.tid, d.launch_tids)
        idx = np.flatnonzero(m)
        del m
        # calls in blocks, so the search arrays stay small: per block, the overlap time is added to
        # its call name (exact int64 sums per name code), the pieces inside the gaps are kept for the
        # union, and the rows of the detailed gaps go through the per-gap loop, in row order
        sums = np.zeros(len(calls.names), np.int64)
        for b in range(0, len(idx), _CALL_BLOCK):
            blk = idx[b:b + _CALL_BLOCK]
            g, q, ov = SM.overlap_by_name(gs, ge, calls.start_ns[blk], calls.end_ns[blk])
            rows = blk[q]
            del q
            np.add.at(sums, calls.name_code[rows], ov)
            _add_per_gap(per_gap, label, calls, g, rows, ov, want)
            covered_s.append(np.maximum(calls.start_ns[rows], gs[g]))
            covered_e.append(np.minimum(calls.end_ns[rows], ge[g]))
        del idx
        present = np.flatnonzero(sums > 0)  # every overlap is positive: the names that overlap a gap
        if len(present):
            # then by name as before (codes can share a name)
            s = pd.Series(sums[present], index=calls.names[present]).groupby(level=0).sum().sort_values(ascending=False)
            agg[label] = {str(k): v / 1e6 for k, v in s.head(8).items()}
        else:
            agg[label] = {}
    inst = table.instances
    if not table.window and len(inst):
        m = np.isin(inst["tid"].to_numpy(), d.launch_tids)
        sub = inst[m]
        g, q, ov = SM.overlap_by_name(gs, ge, sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy())
        if len(q):
            by_series = np.array([ctx.label(i) for i in range(len(ctx.ranges))], dtype=object)
            labels = by_series[sub["series_id"].to_numpy()[q]]
            s = pd.Series(ov, index=labels).groupby(level=0).sum().sort_values(ascending=False)
            agg["nvtx"] = {str(k): v / 1e6 for k, v in s.head(8).items()}

    in_calls = 0
    if covered_s:
        cs = np.concatenate(covered_s)
        del covered_s[:]
        ce = np.concatenate(covered_e)
        del covered_e[:]
        in_calls = _covered_ns(cs, ce)
    agg["outside_cuda_and_os_calls_ms"] = max(total - in_calls, 0.0) / 1e6
    return agg, per_gap


def _add_per_gap(per_gap: list[dict], label: str, calls: Any, g: np.ndarray, rows: np.ndarray, ov: np.ndarray,
                 want: np.ndarray) -> None:
    """Add each wanted gap's overlap (ms) per call name into ``per_gap[gap][label]``: exact sums per
    (gap, name code) first, so a gap overlapping many calls costs no per-call Python; names appear in the
    order of their first call."""
    sel = np.flatnonzero(want[g])
    if not len(sel):
        return
    n_codes = max(len(calls.names), 1)
    key = g[sel].astype(np.int64) * n_codes + calls.name_code[rows[sel]]
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=ov[sel], minlength=len(uniq))
    for k in np.argsort(first, kind="stable").tolist():
        gi, code = divmod(int(uniq[k]), n_codes)
        name = calls.names[code]
        where = per_gap[gi].setdefault(label, {})
        where[name] = where.get(name, 0.0) + float(sums[k]) / 1e6


def _covered_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of non-empty intervals (ns), with few temporaries: sorted by start, each
    interval adds what reaches beyond both its start and every earlier end. Takes over the arrays."""
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    del order, starts, ends
    np.maximum.accumulate(e, out=e)  # reach: the furthest end so far
    s[1:] = np.maximum(s[1:], e[:-1])
    np.subtract(e, s, out=e)
    np.maximum(e, 0, out=e)
    return int(e.sum())


@rule("gpu_idle", scope="capture", defaults={
    "min_gap_us": IDLE_MIN_GAP_US, "min_idle_fraction": IDLE_MIN_FRACTION, "top_gaps": IDLE_TOP_GAPS,
    "init_gap_share": IDLE_INIT_SHARE, "high_idle_fraction": IDLE_HIGH_FRACTION,
    "medium_idle_fraction": IDLE_MEDIUM_FRACTION})
def gpu_idle(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Idle gaps on a device inside its active window, and where the host was meanwhile."""
    min_gap_ns = float(t["min_gap_us"]) * 1e3
    names = ctx.gpu_names()
    out = []
    api = ctx.table.api
    is_init = np.array([str(n).startswith(INIT_API_PREFIXES) for n in api.names], dtype=bool)
    init_calls = np.flatnonzero(is_init[api.name_code]) if len(api) else np.zeros(0, np.int64)
    for d in ctx.devices:
        if d.active_ns <= 0:
            continue
        big = d.gap_ns >= min_gap_ns
        # gaps spent mostly in start-up calls on the launching threads are warm-up, not idleness
        rows = init_calls[np.isin(api.tid[init_calls], d.launch_tids)]
        g, _, ov = SM.overlap_by_name(d.gap_start_ns, d.gap_end_ns, api.start_ns[rows], api.end_ns[rows])
        init_ns = np.bincount(g, weights=ov, minlength=len(d.gap_ns)) if len(g) else np.zeros(len(d.gap_ns))
        init_gap = big & (init_ns >= t["init_gap_share"] * d.gap_ns)
        big &= ~init_gap
        active_ns = d.active_ns - float(d.gap_ns[init_gap].sum())
        idle_ns = float(d.gap_ns[big].sum())
        frac = idle_ns / active_ns if active_ns > 0 else 0.0
        if frac < t["min_idle_fraction"] or not big.any():
            continue
        gs, ge = d.gap_start_ns[big], d.gap_end_ns[big]
        top = np.argsort(-(ge - gs), kind="stable")[: int(t["top_gaps"])]
        host, per_gap = _host_during(ctx, d, gs, ge, detail=top)
        top_gaps = []
        for i in top:
            where = per_gap[i]
            top_gaps.append({
                "start_ms": (gs[i] - ctx.capture_start_ns) / 1e6, "duration_ms": (ge[i] - gs[i]) / 1e6,
                "host": {k: dict(sorted(v.items(), key=lambda kv: -kv[1])[:3]) for k, v in where.items()},
            })
        dominant = _dominant_host(host, idle_ns / 1e6)
        sev = _band(frac, t["high_idle_fraction"], t["medium_idle_fraction"])
        dev_label = f"GPU {d.device_id}" + (f" ({names[d.device_id]})" if names.get(d.device_id) else "")
        out.append(Finding(
            rule="gpu_idle", severity=sev, range=None,
            title=(f"{dev_label} idle {_pct(frac)}% of its active window in {int(big.sum())} gaps of "
                   f"{t['min_gap_us']:g} us or more; meanwhile the host was mostly {dominant[1]}"),
            evidence={
                "device_id": d.device_id, "active_window_ms": active_ns / 1e6, "busy_ms": d.busy_ns / 1e6,
                "initialization_gaps": int(init_gap.sum()),
                "initialization_gaps_ms": float(d.gap_ns[init_gap].sum()) / 1e6,
                "idle_ms": idle_ns / 1e6, "idle_fraction": frac, "gaps": int(big.sum()),
                "largest_gap_ms": float((ge - gs).max()) / 1e6, "median_gap_us": float(np.median(ge - gs)) / 1e3,
                "host_during_gaps_ms": host, "top_gaps": top_gaps,
            },
            threshold=t.pick("min_gap_us", "min_idle_fraction"),
            recommendation=_idle_advice(dominant[0]) + (TRT_IDLE_ADVICE if ctx.tensorrt else ""),
        ))
    return out


def _dominant_host(host: dict, idle_ms: float) -> tuple[str, str]:
    """(kind, phrase) of what the launching threads did most while the GPU waited."""
    best = ("code", "running code outside CUDA and OS runtime calls", host.get("outside_cuda_and_os_calls_ms", 0.0))
    for kind in ("os_runtime", "cuda_api"):
        for name, v in (host.get(kind) or {}).items():
            if v > best[2]:
                best = (kind if kind == "os_runtime" else ("sync" if "ynchron" in name else "api"),
                        f"in {name}", v)
            break
    return best[0], f"{best[1]} ({best[2]:.3g} of {idle_ms:.3g} ms)"


def _idle_advice(kind: str) -> str:
    if kind == "os_runtime":
        return ("The launching thread sleeps, waits on a lock or does I/O while the GPU has nothing queued: move "
                "that work off the thread that feeds the GPU, or queue the next batch's work before it.")
    if kind == "sync":
        return ("The host waits for the GPU and only then issues more work: queue the next iteration before "
                "synchronising (double buffering, a second stream), or replace the host-side wait with "
                "cudaStreamWaitEvent.")
    if kind == "api":
        return ("CUDA API calls other than launches fill the gaps (allocation, copies): preallocate buffers, use "
                "pinned memory with async copies, keep them out of the loop.")
    return ("The host runs its own code (Python, pre/post-processing) between GPU work: overlap it with GPU work "
            "(a producer thread, a second stream), batch requests, or capture the GPU part as a CUDA graph.")


# ----------------------------------------------------------------------------- jitter

@rule("jitter", scope="capture", defaults={
    "min_count": JITTER_MIN_COUNT, "min_median_us": JITTER_MIN_MEDIAN_US, "max_cov_pct": JITTER_MAX_COV_PCT,
    "max_tail_ratio": JITTER_MAX_TAIL_RATIO, "max_findings": MAX_FINDINGS_PER_RULE,
    "min_top_level_share": JITTER_MIN_TOP_LEVEL_SHARE, "high_tail_ratio": JITTER_HIGH_TAIL_RATIO,
    "high_cov_pct": JITTER_HIGH_COV_PCT, "medium_tail_ratio": JITTER_MEDIUM_TAIL_RATIO,
    "medium_cov_pct": JITTER_MEDIUM_COV_PCT})
def jitter(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Unstable latency: CoV and tail ratios, with the outlier instances and their causes."""
    outl = ctx.outliers
    cands = []
    for r in _ranges(ctx, int(t["min_count"])):
        w = r["wall_ms"]
        med = w["median"]
        if not med or med * 1e3 < t["min_median_us"]:
            continue
        if r["top_level_share"] < t["min_top_level_share"] and r["launches_per_instance"] == 0 and r["total_gpu_busy_ms"] == 0:
            continue  # a nested host-only helper, not a latency anyone serves
        if r.get("parent_id", -1) >= 0:
            continue  # a child range (a layer): its variability belongs to the parent's layer table
        tail = w["p99"] / med
        cov = w["cov_pct"]
        if cov < t["max_cov_pct"] and tail < t["max_tail_ratio"]:
            continue
        o = outl[outl["series_id"].to_numpy() == r["series_id"]] if len(outl) else outl
        causes = o["cause"].value_counts().to_dict() if len(o) else {}
        excess = float(o["excess_ms"].sum()) if len(o) else 0.0
        listed = o.nlargest(JITTER_LISTED_OUTLIERS, "excess_ms").sort_values("idx") if len(o) else o
        cost_ms = max(excess, (w["mean"] - med) * r["count"])
        cands.append((cost_ms, r, {
            "count": r["count"], "excess_ms_total": cost_ms, "median_ms": med, "p90_ms": w["p90"], "p99_ms": w["p99"], "max_ms": w["max"],
            "cov_pct": cov, "p99_over_median": tail, "max_over_median": w["max"] / med,
            "outlier_count": int(len(o)), "outlier_excess_ms": excess, "outlier_causes": causes,
            "outliers": [{"index": int(x.idx), "wall_ms": float(x.wall_ms), "excess_ms": float(x.excess_ms),
                          "cause": x.cause, **{k: v for k, v in x.detail.items() if k != "description"}}
                         for x in listed.itertuples(index=False)],
        }))
    out = []
    for _, r, ev in _outermost(ctx, cands, int(t["max_findings"])):
        tail, cov = ev["p99_over_median"], ev["cov_pct"]
        sev = _worse(_band(tail, t["high_tail_ratio"], t["medium_tail_ratio"]),
                     _band(cov, t["high_cov_pct"], t["medium_cov_pct"]))
        main = max(ev["outlier_causes"].items(), key=lambda kv: kv[1])[0] if ev["outlier_causes"] else None
        idx = [o["index"] for o in ev["outliers"]]
        shown = ", ".join(map(str, idx[:10])) + (" ..." if len(idx) > 10 else "")
        title = f"Unstable latency: CoV {cov:.1f}%, p99 {tail:.2f}x the median"
        if idx:
            title += f"; outlier instances {shown}" + (f" (mostly {main.replace('_', ' ')})" if main else "")
        out.append(Finding(
            rule="jitter", severity=sev, range=ctx.label(r["series_id"]), title=title, evidence=ev,
            threshold=t.pick("min_count", "min_median_us", "max_cov_pct", "max_tail_ratio"),
            recommendation=_jitter_advice(main),
        ))
    return out


def _jitter_advice(cause: str | None) -> str:
    return {
        "host_stall": ("Outliers coincide with OS runtime calls (sleep, locks, I/O) inside the range: keep them off "
                       "the serving thread, avoid contended locks, pin the thread to a core."),
        "slow_gpu": ("Outliers are slower GPU phases: lock GPU clocks for measurement (nvidia-smi -lgc), check for "
                     "other work sharing the GPU, thermal or power throttling, and input-dependent kernels."),
        "memory_copy": ("Outliers are slower copies: use pinned host buffers, avoid pageable memory and "
                        "allocation inside the loop, keep copies off contended PCIe links."),
        "synchronization": ("Outliers block longer in synchronisation than their GPU work explains: look for "
                            "other streams or processes the sync waits for; sync on an event of this stream."),
        "cuda_api": ("Outliers spend longer in CUDA API calls such as lazy module loading (first use of a kernel) "
                     "or allocation: warm up every code path before measuring (or set CUDA_MODULE_LOADING=EAGER) "
                     "and preallocate buffers outside the loop."),
        "host_code": ("Outliers spend longer in host code outside CUDA calls (Python, garbage collection, "
                      "pre/post-processing): profile the host side (py-spy), disable GC in the loop, preallocate."),
    }.get(cause or "", "Latency varies between instances: warm up longer, lock clocks, isolate the process, and "
                       "trace the OS runtime (nsys -t osrt) so the capture shows host-side causes.")


# ----------------------------------------------------------------------------- sync_api

@rule("sync_api", scope="capture", defaults={
    "min_fraction": SYNC_MIN_FRACTION, "max_syncs_per_instance": SYNC_MAX_PER_INSTANCE,
    "min_gpu_idle_share": SYNC_MIN_GPU_IDLE_SHARE, "max_findings": MAX_FINDINGS_PER_RULE,
    "high_fraction": SYNC_HIGH_FRACTION, "high_syncs_per_instance": SYNC_HIGH_SYNCS_PER_INSTANCE,
    "medium_fraction": SYNC_MEDIUM_FRACTION})
def sync_api(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Synchronisation calls that block the host inside hot ranges."""
    table = ctx.table
    cands = []
    for r in _ranges(ctx):
        tot = r["_totals"]
        wall, sync = float(tot["wall_ns"]), float(tot["sync_ns"])
        if wall <= 0 or not tot["sync_count"]:
            continue
        frac = sync / wall
        per = tot["sync_count"] / r["count"]
        dev = tot["device_sync_count"] / r["count"]
        if frac < t["min_fraction"] or (per <= t["max_syncs_per_instance"] and dev == 0):
            continue
        inst = table.instances_of(r["series_id"])
        # (instance, call) pairs of the blocking syncs only: nested ranges repeat every API call per level
        q, rows = table.members_where(inst, "api", table.api.top_level & table.api.blocking_sync)
        idle_ns = _gpu_idle_from_sync(table, rows, q)
        if idle_ns < t["min_gpu_idle_share"] * wall:
            continue  # the host waits while the GPU works and refeeds it at once: the GPU sets the pace
        df = pd.DataFrame({"n": table.api.name_of(rows), "d": (table.api.end_ns - table.api.start_ns)[rows]})
        calls = {str(n): {"count": int(g.size), "total_ms": float(g.sum()) / 1e6, "median_us": float(g.median()) / 1e3}
                 for n, g in df.groupby("n")["d"]}
        cands.append((sync, r, {
            "sync_fraction": frac, "sync_calls_per_instance": per, "device_syncs_per_instance": dev,
            "sync_ms_per_instance": sync / 1e6 / len(inst), "wall_ms_median": r["wall_ms"]["median"],
            "gpu_idle_during_sync_ms": idle_ns / 1e6,
            "gpu_idle_method": ("GPU idle time while each sync blocks plus the idle gap from its return to the "
                                "next GPU work (the relaunch it delays)"),
            "instances": r["count"], "calls": calls,
        }))
    out = []
    for _, r, ev in _outermost(ctx, cands, int(t["max_findings"])):
        frac, per, dev = ev["sync_fraction"], ev["sync_calls_per_instance"], ev["device_syncs_per_instance"]
        sev = _band(frac, t["high_fraction"], t["medium_fraction"])
        if per < t["high_syncs_per_instance"] and dev == 0:
            sev = _milder(sev, "medium")  # high only with many syncs or a device-wide one
        names = ", ".join(sorted(ev["calls"], key=lambda n: -ev["calls"][n]["total_ms"]))
        out.append(Finding(
            rule="sync_api", severity=sev, range=ctx.label(r["series_id"]),
            title=(f"The host blocks in synchronisation {_pct(frac)}% of the range ({per:.1f} calls per instance"
                   f"{f', {dev:.1f} device-wide' if dev else ''}: {names})"),
            evidence=ev,
            threshold=t.pick("min_fraction", "max_syncs_per_instance", "min_gpu_idle_share"),
            recommendation=TRT_SYNC_ADVICE if ctx.tensorrt else (
                "Synchronise once per iteration, on the stream (or an event) that produces the result, not the "
                "whole device; replace intermediate syncs with cudaStreamWaitEvent between streams, and avoid "
                "implicit ones (.item(), .cpu(), pageable copies, cudaMalloc/cudaFree in the loop)."),
        ))
    return out


def _gpu_idle_from_sync(table: Any, rows: np.ndarray, q: np.ndarray) -> float:
    """GPU idle time (ns) the sync calls ``rows`` (of instances ``q``) account for: idle while each blocks,
    plus the gap from its return to the next GPU work (capped at the next sync's start), except after an
    instance's last sync (the one wait for the result every iteration needs)."""
    act, api = table.activity, table.api
    s, e = api.start_ns[rows], api.end_ns[rows]
    us, ue = intervals.union(act.start_ns, act.end_ns)
    if not len(us):
        return float((e - s).sum())
    busy_in = intervals.clipped_union_length(us, ue, s, e)
    k = np.searchsorted(ue, e, side="right")  # first busy piece ending after the call returns
    inside = (k < len(us)) & (us[np.minimum(k, len(us) - 1)] <= e)
    nxt = np.where(k < len(us), us[np.minimum(k, len(us) - 1)], e)
    after = np.where(inside, 0, np.maximum(nxt - e, 0))
    order = np.argsort(s)
    cap = np.empty_like(s)
    cap[order] = np.append(s[order][1:], np.iinfo(np.int64).max)
    after = np.minimum(after, np.maximum(cap - e, 0))
    last = np.lexsort((s, q))
    is_last = np.ones(len(q), bool)
    is_last[last[:-1]] = q[last][:-1] != q[last][1:]
    after[is_last] = 0
    return float(np.maximum(e - s - busy_in, 0).sum() + after.sum())


# ----------------------------------------------------------------------------- pageable_memcpy

@rule("pageable_memcpy", scope="capture", defaults={
    "min_total_us": PAGEABLE_MIN_TOTAL_US, "high_share": PAGEABLE_HIGH_SHARE,
    "high_pinned_speedup": PAGEABLE_HIGH_PINNED_SPEEDUP, "medium_share": PAGEABLE_MEDIUM_SHARE,
    "staged_min_bytes": PAGEABLE_STAGED_MIN_BYTES})
def pageable_memcpy(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Copies from or to pageable host memory, against pinned copies of the same size."""
    act = ctx.table.activity
    copy = act.kind == S.MEMCPY
    pg = copy & act.pageable
    dur = act.end_ns - act.start_ns
    total_ns = float(dur[pg].sum())
    if not pg.any() or total_ns < t["min_total_us"] * 1e3:
        return []
    memcpy = getattr(ctx.trace, "memcpy", None)
    pinned_side = np.zeros(len(act), dtype=bool)
    if memcpy is not None and len(memcpy):
        rows = act.row[copy]
        pin = S.is_value(memcpy, "src_kind", "pinned") | S.is_value(memcpy, "dst_kind", "pinned")
        pinned_side[np.flatnonzero(copy)] = pin[rows]
    pinned = copy & pinned_side & ~act.pageable
    df = pd.DataFrame({"dir": np.asarray(S.COPY_KINDS, dtype=object)[act.copy_kind], "bytes": act.bytes,
                       "ns": dur, "pg": pg, "pin": pinned})
    by_dir = {}
    compare = []
    saving_ns = 0.0
    for direction, g in df[df["pg"]].groupby("dir"):
        by_dir[direction] = {"count": int(len(g)), "bytes": int(g["bytes"].sum()), "gpu_ms": float(g["ns"].sum()) / 1e6,
                             "gbps": float(g["bytes"].sum() / max(g["ns"].sum(), 1))}
        pin = df[df["pin"] & (df["dir"] == direction)]
        for size, gs in g.groupby("bytes"):
            same = pin[pin["bytes"] == size]
            if not len(same) or size <= 0:
                continue
            pg_bw = size / max(float(gs["ns"].median()), 1.0)
            pin_bw = size / max(float(same["ns"].median()), 1.0)
            extra = float(gs["ns"].sum()) - len(gs) * float(same["ns"].median())
            saving_ns += max(extra, 0.0)
            compare.append({"direction": direction, "bytes": int(size), "pageable_count": int(len(gs)),
                            "pinned_count": int(len(same)), "pageable_gbps": pg_bw, "pinned_gbps": pin_bw,
                            "pinned_speedup": pin_bw / pg_bw if pg_bw > 0 else float("nan"),
                            "pageable_median_us": float(gs["ns"].median()) / 1e3,
                            "pinned_median_us": float(same["ns"].median()) / 1e3})
    compare.sort(key=lambda c: -c["pageable_count"] * c["bytes"])
    active = sum(d.active_ns for d in ctx.devices) or 1
    share = total_ns / active
    # API time of the pageable copies (async copies from pageable memory block the host).
    api_ms = None
    big_api_ms = 0.0
    n_async = None
    if memcpy is not None and len(memcpy) and "api_start_ns" in memcpy.columns:
        rows = act.row[pg]
        a0 = S.i64(memcpy, "api_start_ns", -1)[rows]
        a1 = S.i64(memcpy, "api_end_ns", -1)[rows]
        ok = (a0 >= 0) & (a1 >= a0) & (S.i64(memcpy, "api_tid", -1)[rows] >= 0)
        api_ms = float((a1 - a0)[ok].sum()) / 1e6 if ok.any() else None
        big = ok & (act.bytes[pg] >= t["staged_min_bytes"])
        big_api_ms = float((a1 - a0)[big].sum()) / 1e6
        if "api_name" in memcpy.columns:
            codes, names = S.factor(memcpy, "api_name")
            is_async = np.array(["Async" in str(n) for n in names], dtype=bool)
            n_async = int(is_async[codes[rows]].sum())
    # Which ranges hold them.
    inst = ctx.table.instances
    per_range = {}
    if not ctx.table.window and len(inst):
        s = inst.groupby("series_id")["pageable_copies"].sum()
        for sid, n in s[s > 0].sort_values(ascending=False).head(5).items():
            per_range[ctx.label(int(sid))] = int(n)
    top_range = None
    if per_range:
        first = next(iter(per_range))
        if per_range[first] * 2 >= int(pg.sum()):
            top_range = first
    slow = max((c["pinned_speedup"] for c in compare), default=float("nan"))
    sev = _band(share, t["high_share"], t["medium_share"])
    if slow >= t["high_pinned_speedup"] and np.isfinite(slow):  # NaN: no pinned copy of the same size
        sev = "high"
    evidence = {
        "copies": int(pg.sum()), "bytes": int(act.bytes[pg].sum()), "gpu_ms": total_ns / 1e6,
        "share_of_active_gpu_time": share, "by_direction": by_dir, "api_ms": api_ms,
        "async_calls_made_synchronous": n_async, "ranges": per_range,
        "pinned_comparison": compare[:10],
        "estimated_saving_ms": saving_ns / 1e6 if compare else None,
        # without a pinned twin the saving is unknown; it cannot exceed the copies plus the host time they block
        # (small copies cost their API call whatever the memory: only large ones' host time counts)
        "cost_upper_bound_ms": total_ns / 1e6 + big_api_ms,
    }
    if compare:
        c = compare[0]
        cmp = (f"; {c['bytes']:,} B {c['direction']} copies run at {c['pageable_gbps']:.1f} GB/s from pageable "
               f"memory against {c['pinned_gbps']:.1f} GB/s pinned")
    else:
        cmp = "; no pinned copy of the same size in the capture to compare with"
    return [Finding(
        rule="pageable_memcpy", severity=sev, range=top_range,
        title=f"{int(pg.sum())} copies touch pageable host memory ({total_ns / 1e6:.3g} ms of GPU copy time){cmp}",
        evidence=evidence,
        threshold=t.pick("min_total_us", "high_share"),
        recommendation=("Allocate host buffers as pinned memory (cudaHostAlloc / cudaMallocHost, "
                        "tensor.pin_memory(), cudaHostRegister for existing buffers) and copy with "
                        "cudaMemcpyAsync on a stream: pageable copies are staged through a driver buffer, "
                        "run slower and block the host even when asynchronous."),
    )]


# ----------------------------------------------------------------------------- transfer_bound

@rule("transfer_bound", scope="capture", defaults={
    "min_copy_to_compute": TRANSFER_MIN_COPY_TO_COMPUTE, "min_copy_fraction": TRANSFER_MIN_COPY_FRACTION,
    "max_findings": MAX_FINDINGS_PER_RULE, "min_unit_compute_share": TRANSFER_MIN_UNIT_COMPUTE_SHARE,
    "high_copy_to_compute": TRANSFER_HIGH_COPY_TO_COMPUTE, "high_copy_fraction": TRANSFER_HIGH_COPY_FRACTION,
    "medium_copy_to_compute": TRANSFER_MEDIUM_COPY_TO_COMPUTE, "medium_copy_fraction": TRANSFER_MEDIUM_COPY_FRACTION})
def transfer_bound(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Ranges whose copies take as long as their compute."""
    table = ctx.table
    cands = []
    for r in _ranges(ctx):
        tot = r["_totals"]
        copy, compute, wall = float(tot["copy_ns"]), float(tot["compute_ns"]), float(tot["wall_ns"])
        if copy <= 0 or wall <= 0 or compute <= 0:
            continue  # a copy-only range (a staging step) has no compute to be bound against
        ratio = copy / compute
        frac = copy / wall
        if ratio < t["min_copy_to_compute"] or frac < t["min_copy_fraction"]:
            continue
        inst = table.instances_of(r["series_id"])
        rows, times = table.member_counts(inst, "activity")
        m = table.activity.kind[rows] == S.MEMCPY
        rows, times = rows[m], times[m]
        act = table.activity
        dirs = {}
        for code in np.unique(act.copy_kind[rows]):
            sel = act.copy_kind[rows] == code
            rr, w = rows[sel], times[sel]
            ns = float(((act.end_ns - act.start_ns)[rr] * w).sum())
            b = float((act.bytes[rr] * w).sum())
            dirs[S.COPY_KINDS[code]] = {"copies_per_instance": int(w.sum()) / len(inst), "bytes_per_instance": b / len(inst),
                                        "gpu_ms_per_instance": ns / 1e6 / len(inst), "gbps": b / ns if ns > 0 else None}
        busy = float(tot["gpu_busy_ns"])
        cands.append((copy, r, {
            "copy_ms_per_instance": copy / 1e6 / len(inst), "compute_ms_per_instance": compute / 1e6 / len(inst),
            "copy_to_compute": ratio, "copy_fraction_of_wall": frac,
            "overlap_ms_per_instance": max(copy + compute - busy, 0.0) / 1e6 / len(inst),
            "bytes_per_instance": tot["copy_bytes"] / len(inst),
            "pageable_copies": int(tot["pageable_copies"]), "by_direction": dirs,
            "wall_ms_median": r["wall_ms"]["median"], "instances": r["count"],
        }))
    out = _inference_transfer_bound(ctx, t)
    if out:
        cands = [c for c in cands if ctx.label(c[1]["series_id"]) != out[0].range]
    for _, r, ev in _outermost(ctx, cands, int(t["max_findings"])):
        ev["exposed_copy_ms_total"] = max(ev["copy_ms_per_instance"] - ev["overlap_ms_per_instance"], 0.0) * r["count"]
        ratio, frac = ev["copy_to_compute"], ev["copy_fraction_of_wall"]
        sev = _milder(_band(ratio, t["high_copy_to_compute"], t["medium_copy_to_compute"]),
                      _band(frac, t["high_copy_fraction"], t["medium_copy_fraction"]))
        out.append(Finding(
            rule="transfer_bound", severity=sev, range=ctx.label(r["series_id"]),
            title=(f"Transfer-bound: copies take {ev['copy_ms_per_instance']:.3g} ms per instance, {ratio:.2f}x its "
                   f"{ev['compute_ms_per_instance']:.3g} ms of compute (median wall {ev['wall_ms_median']:.3g} ms)"),
            evidence=ev,
            threshold=t.pick("min_copy_to_compute", "min_copy_fraction"),
            recommendation=TRT_TRANSFER_ADVICE if ctx.tensorrt else (
                "Move less data: keep tensors on the GPU between steps, send compact inputs (uint8 images, "
                "FP16) and decode/normalise on the GPU; overlap copies with compute (pinned buffers, "
                "cudaMemcpyAsync on a second stream, double buffering); batch to amortise per-copy cost."),
        ))
    return out


def _copies_text(d: dict[str, Any] | None) -> str:
    """'0.58 copies per inference of 128 MiB at 10.8 GB/s' for one copy direction."""
    if not d or not d["copies_per_instance"]:
        return "no copy of this direction"
    size = d["bytes_per_instance"] / d["copies_per_instance"]
    rate = f" at {d['gbps']:.3g} GB/s" if d.get("gbps") else ""
    n = d["copies_per_instance"]
    return f"{n:.2g} {'copy' if n == 1 else 'copies'} per inference of {size / 2**20:.3g} MiB{rate}"


def _inference_transfer_bound(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """The steady state as a whole: copies of one direction take longer than the compute (copies made
    outside the inference ranges, as TensorRT applications make them, count)."""
    from profiler.capture.phases import steady_breakdown

    unit, ph = ctx.unit, ctx.phases
    if unit is None or ph is None or ctx.steady_ns <= 0:
        return []
    act = ctx.table.activity
    lo = ctx.judged_start_ns
    by_kind = steady_breakdown(act, lo, ph.steady_end_ns)
    compute = by_kind.pop("compute")
    direction = max(by_kind, key=by_kind.get)
    steady_ms = ctx.steady_ns / 1e6
    # the steady state's copies are charged to the inferences only when the inferences are its work: they
    # launched most of its compute (a training capture whose "unit" is one of many op ranges is not)
    unit_range = next((r for r in ctx.ranges if r["series_id"] == unit.series_id), None)
    if unit.series_id is not None and not ctx.table.window:
        unit_compute_ms = float(unit_range["_totals"]["compute_ns"]) / 1e6 if unit_range else 0.0
        if unit_compute_ms < t["min_unit_compute_share"] * compute:
            return []
    m = (act.start_ns >= lo) & (act.start_ns <= ph.steady_end_ns)
    c, k = m & (act.kind == S.MEMCPY), m & (act.kind != S.MEMCPY)
    copy_ms = intervals.union_length(act.start_ns[c], act.end_ns[c]) / 1e6
    if by_kind[direction] <= 0 or compute <= 0 or by_kind[direction] < t["min_copy_to_compute"] * compute \
            or copy_ms < t["min_copy_fraction"] * steady_ms:
        return []
    overlap_ms = intervals.overlap_length(act.start_ns[c], act.end_ns[c], act.start_ns[k], act.end_ns[k]) / 1e6
    n = ctx.steady_instances
    dirs = {}
    for kind in (S.CopyKind.HtoD, S.CopyKind.DtoH, S.CopyKind.DtoD):
        name = kind.name
        sel = c & (act.copy_kind == kind)
        ns, b = float((act.end_ns - act.start_ns)[sel].sum()), float(act.bytes[sel].sum())
        if sel.any():
            dirs[name] = {"copies_per_instance": int(sel.sum()) / n, "bytes_per_instance": b / n,
                          "gpu_ms_per_instance": ns / 1e6 / n, "gbps": b / ns if ns > 0 else None}
    ev = {"bound_by": direction, "gpu_ms_by_kind": {"compute": compute, **by_kind},
          "copy_ms_per_instance": copy_ms / n, "compute_ms_per_instance": compute / n,
          "copy_to_compute": by_kind[direction] / compute, "copy_fraction_of_steady_state": copy_ms / steady_ms,
          "overlap_ms_per_instance": overlap_ms / n, "exposed_copy_ms_total": max(copy_ms - overlap_ms, 0.0),
          "by_direction": dirs, "instances": n, "pageable_copies": int((c & act.pageable).sum()),
          "wall_ms_median": float(np.median(unit.host_ns[unit.steady])) / 1e6 if unit.count > unit.warmup else None}
    return [Finding(
        rule="transfer_bound", severity="high", range=unit.label,
        title=(f"{direction}-bound: {direction} copies take {by_kind[direction] / n:.3g} ms of GPU time per inference "
               f"on average ({_copies_text(dirs.get(direction))}) against {compute / n:.3g} ms of compute "
               f"({by_kind[direction] / compute:.2f}x); {100 * overlap_ms / copy_ms:.0f}% of copy time overlaps "
               "compute"),
        evidence=ev,
        threshold=t.pick("min_copy_to_compute", "min_copy_fraction"),
        recommendation=TRT_TRANSFER_ADVICE if ctx.tensorrt else (
            "Move less data per inference (compact input types, pre/post-processing on the GPU), use pinned "
            "buffers and overlap copies with compute on a second stream (double buffering)."),
    )]
