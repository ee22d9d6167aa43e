"""launch_overhead: ranges paced by launching many short kernels rather than by GPU work, with the
saving a replayed CUDA graph would bring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import series as S
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import (
    MAX_FINDINGS_PER_RULE, band, median_of, member_values, outermost, pct, ranges_of,
)
from profiler.capture.context import CaptureContext

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
LAUNCH_MAX_OTHER_CALL_SHARE = 0.5
"""... and less than this share of the wall time in CUDA calls that neither launch, copy nor synchronise."""
LAUNCH_HIGH_SAVING_PCT, LAUNCH_MEDIUM_SAVING_PCT = 50.0, 25.0
"""Severity bands: high from this estimated saving (share of the wall time) on, medium from that."""

BLOCKING_SAMPLE_INSTANCES, BLOCKING_SAMPLE_ROWS = 32, 4096
"""Blocking launches are a process-wide setting: the first instances of a range, and of those at most the
first rows of GPU work and of CUDA calls, tell (a capture's one window holds every row)."""
BLOCKING_MIN_SHARE = 0.9
"""At least this share of the kernels ending before their launch call returns: launches block."""
BLOCKING_ADVICE = (
    "Each launch waits for its kernel: CUDA_LAUNCH_BLOCKING=1 (a debugging setting) is set, or the work runs on "
    "a blocking path. Unset it first: launches then return at once and the host queues work ahead of the GPU. "
    "If the range is still launch-bound after that, capture its work as a CUDA graph and replay it.")
TRT_LAUNCH_ADVICE = (
    "TensorRT: replay the enqueue as a CUDA graph (trtexec --useCudaGraph, or capture enqueueV3 with "
    "cudaStreamBeginCapture and replay with cudaGraphLaunch); larger batches give each layer's kernels more work.")
LAUNCH_ADVICE = (
    "Capture the range's work once as a CUDA graph and replay it (torch.cuda.CUDAGraph / "
    "torch.compile mode='reduce-overhead', cudaStreamBeginCapture + cudaGraphLaunch, TensorRT "
    "with --useCudaGraph); or fuse the short kernels (larger batch, fused ops) so each launch "
    "carries more work.")


@rule("launch_overhead", scope="capture", defaults={
    "max_busy_fraction": LAUNCH_MAX_BUSY_FRACTION, "min_launches_per_instance": LAUNCH_MIN_LAUNCHES,
    "max_kernel_to_launch_ratio": LAUNCH_MAX_KERNEL_TO_CALL, "min_saving_pct": LAUNCH_MIN_SAVING_PCT,
    "graph_node_overhead_us": GRAPH_NODE_OVERHEAD_US, "max_findings": MAX_FINDINGS_PER_RULE,
    "max_other_call_share": LAUNCH_MAX_OTHER_CALL_SHARE,
    "high_saving_pct": LAUNCH_HIGH_SAVING_PCT, "medium_saving_pct": LAUNCH_MEDIUM_SAVING_PCT})
def launch_overhead(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Ranges paced by launching many short kernels rather than by GPU work."""
    cands = [c for c in (_candidate(ctx, r, t) for r in ranges_of(ctx)) if c is not None]
    return [_finding(ctx, r, ev, t) for _, r, ev in outermost(ctx, cands, int(t["max_findings"]))]


def _candidate(ctx: CaptureContext, r: dict[str, Any], t: Thresholds) -> tuple[float, dict, dict] | None:
    """(total saving in ms, range, evidence) for a launch-bound range where a CUDA graph would save enough,
    else None: the GPU busy for a small share of it, many launches, kernels not much longer than their
    launch calls, and no other CUDA calls (allocations in the loop) pacing it."""
    if not (r["gpu_busy_fraction"] < t["max_busy_fraction"]) \
            or r["launches_per_instance"] < t["min_launches_per_instance"]:
        return None
    inst = ctx.table.instances_of(r["series_id"])
    n_kernels, med_kernel_us = _median_duration_us(ctx.table, inst, "activity", _is_kernel)
    n_calls, med_call_us = _median_duration_us(ctx.table, inst, "api", _is_launch_call)
    if n_calls and n_kernels and med_kernel_us > t["max_kernel_to_launch_ratio"] * med_call_us:
        return None
    if not n_kernels:
        return None
    # CUDA calls that neither launch nor wait (allocation, frees, events) stay when the work is replayed
    kept_api_ms = _kept_api_ms(inst)
    if kept_api_ms >= t["max_other_call_share"] * r["wall_ms"]["median"]:
        return None  # paced by other CUDA calls (allocations in the loop): gpu_idle names them
    graphed_ms = _graph_wall_ms(r["gpu_busy_ms"]["median"], r["launches_per_instance"], med_call_us, kept_api_ms,
                                t["graph_node_overhead_us"])
    ev = _evidence(r, inst, med_kernel_us, med_call_us, kept_api_ms, graphed_ms, t["graph_node_overhead_us"])
    if ev["graph_saving_pct"] < t["min_saving_pct"]:
        return None
    ev["blocking_launch_share"] = blocking_launch_share(ctx.table, inst.iloc[:BLOCKING_SAMPLE_INSTANCES])
    return ev["graph_saving_ms_total"], r, ev


def _median_duration_us(table: S.SeriesTable, inst: pd.DataFrame, which: str,
                        keep: Callable[[Any, np.ndarray], np.ndarray]) -> tuple[int, float]:
    """How many member rows of ``which`` ("activity" or "api") of the instances ``inst`` ``keep`` selects,
    and their median duration (us; NaN when none). The rows count as often as the instances hold them
    (nested ranges hold the same kernels many times); gathered in blocks, only their durations kept."""
    calls = getattr(table, which)
    dur_ns, counts = member_values(table, inst, which, lambda rows: keep(calls, rows),
                                   lambda rows: calls.end_ns[rows] - calls.start_ns[rows])
    return len(dur_ns), median_of(dur_ns, counts) / 1e3


def _graph_wall_ms(busy_ms: float, launches: float, med_call_us: float, kept_api_ms: float,
                   node_overhead_us: float) -> float:
    """An instance's wall time (ms) replayed as one CUDA graph: its GPU busy time plus ``node_overhead_us``
    per launch, or one launch call (``med_call_us``; NaN when none), or the CUDA calls a graph keeps
    (``kept_api_ms``), whichever is longest."""
    return max(busy_ms + launches * node_overhead_us / 1e3,
               (med_call_us / 1e3) if np.isfinite(med_call_us) else 0.0, kept_api_ms)


def _evidence(r: dict[str, Any], inst: pd.DataFrame, med_kernel_us: float, med_call_us: float,
              kept_api_ms: float, graphed_ms: float, node_overhead_us: float) -> dict[str, Any]:
    """The numbers behind a launch-bound range, the CUDA graph's estimated saving among them."""
    wall_med_ms = r["wall_ms"]["median"]
    saving_ms = max(wall_med_ms - graphed_ms, 0.0)
    return {
        "gpu_busy_fraction": r["gpu_busy_fraction"],
        "launches_per_instance": r["launches_per_instance"],
        "kernels_per_instance": r["kernels_per_instance"],
        "median_kernel_us": med_kernel_us,
        "median_launch_call_us": med_call_us,
        "launch_call_ms_per_instance": float(inst["launch_api_ns"].sum()) / 1e6 / len(inst),
        "wall_ms_median": wall_med_ms,
        "gpu_busy_ms_median": r["gpu_busy_ms"]["median"],
        "instances": r["count"],
        "graph_wall_ms_estimate": graphed_ms,
        "graph_saving_ms_per_instance": saving_ms,
        "graph_saving_pct": 100.0 * saving_ms / wall_med_ms if wall_med_ms > 0 else 0.0,
        "graph_saving_ms_total": saving_ms * r["count"],
        "other_cuda_calls_ms_per_instance": kept_api_ms,
        "graph_saving_method": (
            "replayed as one CUDA graph, an instance would take about its GPU busy time plus "
            f"{node_overhead_us:g} us per kernel node (or one launch call, or its CUDA calls "
            "that neither launch, copy nor synchronise, such as allocations, if longer); "
            "saving = median wall - that estimate. At least the launch-call time per instance is removed "
            "from the host (launch_call_ms_per_instance)"),
    }


def _finding(ctx: CaptureContext, r: dict[str, Any], ev: dict[str, Any], t: Thresholds) -> Finding:
    """The finding of one launch-bound range: severity by the estimated saving."""
    launches = f"{ev['launches_per_instance']:.0f} launches"
    where = f"capture while the host issues {launches} in it" if ctx.table.window \
        else f"range while the host issues {launches} per instance"
    blocking = (ev["blocking_launch_share"] or 0.0) >= BLOCKING_MIN_SHARE
    return Finding(
        rule="launch_overhead", severity=band(ev["graph_saving_pct"], t["high_saving_pct"], t["medium_saving_pct"]),
        range=ctx.label(r["series_id"]),
        title=("Launch-bound, each launch waiting for its kernel" if blocking else "Launch-bound")
        + f": the GPU is busy {pct(ev['gpu_busy_fraction'])}% of the {where}"
        + (f"; {pct(ev['blocking_launch_share'])}% of the kernels end before their launch call returns"
           if blocking else ""),
        evidence=ev,
        threshold=t.pick("max_busy_fraction", "min_launches_per_instance", "max_kernel_to_launch_ratio",
                         "min_saving_pct", "graph_node_overhead_us"),
        recommendation=BLOCKING_ADVICE if blocking else TRT_LAUNCH_ADVICE if ctx.tensorrt else LAUNCH_ADVICE,
    )


def blocking_launch_share(table: S.SeriesTable, inst: pd.DataFrame) -> float | None:
    """Share of the kernels of ``inst`` that end before their launch call returns (None: no kernel matched
    to its call). Asynchronous launches return in microseconds, before the kernel even starts (0.1-0.3% of
    them ended first on three H200 captures); with CUDA_LAUNCH_BLOCKING=1 every one waits for its kernel (100%)."""
    act, api = table.activity, table.api
    krows = next(table.member_blocks(inst, "activity", BLOCKING_SAMPLE_ROWS), (np.zeros(0, np.int64),))[0]
    krows = krows[(act.kind[krows] == S.KERNEL) & (act.api_tid[krows] >= 0)]
    crows = next(table.member_blocks(inst, "api", BLOCKING_SAMPLE_ROWS), (np.zeros(0, np.int64),))[0]
    crows = crows[_is_launch_call(api, crows)]
    calls = pd.DataFrame({"tid": api.tid[crows], "t": api.start_ns[crows], "call_end": api.end_ns[crows]})
    kern = pd.DataFrame({"tid": act.api_tid[krows], "t": act.api_start_ns[krows], "end": act.end_ns[krows]})
    both = kern.merge(calls.drop_duplicates(["tid", "t"]), on=["tid", "t"])
    return float((both["end"] <= both["call_end"]).mean()) if len(both) else None


def _kept_api_ms(inst) -> float:
    """Median time per instance (ms) in top-level CUDA calls that neither launch, copy nor synchronise
    (allocations, frees, event and stream management): a replayed graph does not remove them."""
    other = (inst["api_ns"].to_numpy() - inst["launch_api_ns"].to_numpy() - inst["sync_ns"].to_numpy()
             - inst["memcpy_api_ns"].to_numpy())
    return float(np.median(np.maximum(other, 0))) / 1e6 if len(other) else 0.0


def _is_kernel(act: S.Activity, rows: np.ndarray) -> np.ndarray:
    """Which of the activity ``rows`` are kernels."""
    return act.kind[rows] == S.KERNEL


def _is_launch_call(api: S.HostCalls, rows: np.ndarray) -> np.ndarray:
    """Which of the API ``rows`` are top-level kernel or graph launches."""
    cat = api.category[rows]
    return api.top_level[rows] & ((cat == S.ApiCategory.launch) | (cat == S.ApiCategory.graph_launch))
