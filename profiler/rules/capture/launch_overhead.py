"""launch_overhead: ranges paced by launching many short kernels rather than by GPU work, with the
saving a replayed CUDA graph would bring."""

from __future__ import annotations

import numpy as np

from profiler.capture import series as S
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import (
    MAX_FINDINGS_PER_RULE, band, median_of, member_values, outermost, pct, ranges_of,
)
from profiler.rules.context import CaptureContext

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

TRT_LAUNCH_ADVICE = (
    "TensorRT: replay the enqueue as a CUDA graph (trtexec --useCudaGraph, or capture enqueueV3 with "
    "cudaStreamBeginCapture and replay with cudaGraphLaunch); larger batches give each layer's kernels more work.")


@rule("launch_overhead", scope="capture", defaults={
    "max_busy_fraction": LAUNCH_MAX_BUSY_FRACTION, "min_launches_per_instance": LAUNCH_MIN_LAUNCHES,
    "max_kernel_to_launch_ratio": LAUNCH_MAX_KERNEL_TO_CALL, "min_saving_pct": LAUNCH_MIN_SAVING_PCT,
    "graph_node_overhead_us": GRAPH_NODE_OVERHEAD_US, "max_findings": MAX_FINDINGS_PER_RULE,
    "max_other_call_share": LAUNCH_MAX_OTHER_CALL_SHARE,
    "high_saving_pct": LAUNCH_HIGH_SAVING_PCT, "medium_saving_pct": LAUNCH_MEDIUM_SAVING_PCT})
def launch_overhead(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Ranges paced by launching many short kernels rather than by GPU work."""
    table = ctx.table
    cands = []
    for r in ranges_of(ctx):
        busy = r["gpu_busy_fraction"]
        if not (busy < t["max_busy_fraction"]) or r["launches_per_instance"] < t["min_launches_per_instance"]:
            continue
        inst = table.instances_of(r["series_id"])
        # kernels and top-level launch calls the instances hold, as often as they hold them (nested ranges
        # hold the same kernels many times), gathered in blocks: only their durations are kept
        act, api = table.activity, table.api
        kernel_ns, kernel_n = member_values(table, inst, "activity", lambda rows: act.kind[rows] == S.KERNEL,
                                            lambda rows: act.end_ns[rows] - act.start_ns[rows])
        n_kernels = len(kernel_ns)
        med_kernel_us = median_of(kernel_ns, kernel_n) / 1e3
        del kernel_ns, kernel_n
        call_ns, call_n = member_values(table, inst, "api", lambda rows: _is_launch_call(api, rows),
                                        lambda rows: api.end_ns[rows] - api.start_ns[rows])
        n_calls = len(call_ns)
        med_call_us = median_of(call_ns, call_n) / 1e3
        del call_ns, call_n
        if n_calls and n_kernels and med_kernel_us > t["max_kernel_to_launch_ratio"] * med_call_us:
            continue
        if not n_kernels:
            continue
        wall_med_ms = r["wall_ms"]["median"]
        busy_med_ms = r["gpu_busy_ms"]["median"]
        launches = r["launches_per_instance"]
        # CUDA calls that neither launch nor wait (allocation, frees, events) stay when the work is replayed
        kept_api_ms = _kept_api_ms(inst)
        if kept_api_ms >= t["max_other_call_share"] * wall_med_ms:
            continue  # paced by other CUDA calls (allocations in the loop): gpu_idle names them
        graphed_ms = max(busy_med_ms + launches * t["graph_node_overhead_us"] / 1e3,
                         (med_call_us / 1e3) if np.isfinite(med_call_us) else 0.0, kept_api_ms)
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
            "other_cuda_calls_ms_per_instance": kept_api_ms,
            "graph_saving_method": (
                "replayed as one CUDA graph, an instance would take about its GPU busy time plus "
                f"{t['graph_node_overhead_us']:g} us per kernel node (or one launch call, or its CUDA calls "
                "that neither launch, copy nor synchronise, such as allocations, if longer); "
                "saving = median wall - that estimate. At least the launch-call time per instance is removed "
                "from the host (launch_call_ms_per_instance)"),
        }))
    out = []
    for _, r, ev in outermost(ctx, cands, int(t["max_findings"])):
        sev = band(ev["graph_saving_pct"], t["high_saving_pct"], t["medium_saving_pct"])
        out.append(Finding(
            rule="launch_overhead", severity=sev, range=ctx.label(r["series_id"]),
            title=(f"Launch-bound: the GPU is busy {pct(ev['gpu_busy_fraction'])}% of the "
                   + (f"capture while the host issues {ev['launches_per_instance']:.0f} launches in it" if ctx.table.window
                      else f"range while the host issues {ev['launches_per_instance']:.0f} launches per instance")),
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


def _kept_api_ms(inst) -> float:
    """Median time per instance (ms) in top-level CUDA calls that neither launch, copy nor synchronise
    (allocations, frees, event and stream management): a replayed graph does not remove them."""
    other = (inst["api_ns"].to_numpy() - inst["launch_api_ns"].to_numpy() - inst["sync_ns"].to_numpy()
             - inst["memcpy_api_ns"].to_numpy())
    return float(np.median(np.maximum(other, 0))) / 1e6 if len(other) else 0.0


def _is_launch_call(api: S.HostCalls, rows: np.ndarray) -> np.ndarray:
    """Which of the API ``rows`` are top-level kernel or graph launches."""
    cat = api.category[rows]
    return api.top_level[rows] & ((cat == S.ApiCategory.launch) | (cat == S.ApiCategory.graph_launch))
