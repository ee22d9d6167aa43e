"""sync_api: synchronisation calls that block the host inside hot ranges while the GPU idles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.series import HostCalls
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import MAX_FINDINGS_PER_RULE, band, milder, outermost, pct, ranges_of
from profiler.capture.context import CaptureContext

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

TRT_SYNC_ADVICE = (
    "TensorRT: enqueue with enqueueV3 / execute_async_v3 on your own stream and synchronise once per batch on "
    "that stream (execute_v2 is synchronous by design: it waits for every inference); keep a second execution "
    "context on a second stream so one batch's copies and the host's work overlap the other's inference; replay "
    "the enqueue as a CUDA graph (trtexec --useCudaGraph) once shapes are fixed.")
SYNC_ADVICE = (
    "Synchronise once per iteration, on the stream (or an event) that produces the result, not the whole device; "
    "replace intermediate syncs with cudaStreamWaitEvent between streams, and avoid implicit ones (.item(), "
    ".cpu(), pageable copies, cudaMalloc/cudaFree in the loop).")


@rule("sync_api", scope="capture", defaults={
    "min_fraction": SYNC_MIN_FRACTION, "max_syncs_per_instance": SYNC_MAX_PER_INSTANCE,
    "min_gpu_idle_share": SYNC_MIN_GPU_IDLE_SHARE, "max_findings": MAX_FINDINGS_PER_RULE,
    "high_fraction": SYNC_HIGH_FRACTION, "high_syncs_per_instance": SYNC_HIGH_SYNCS_PER_INSTANCE,
    "medium_fraction": SYNC_MEDIUM_FRACTION})
def sync_api(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Synchronisation calls that block the host inside hot ranges."""
    cands = [c for c in (_candidate(ctx, r, t) for r in ranges_of(ctx)) if c is not None]
    return [_finding(ctx, r, ev, t) for _, r, ev in outermost(ctx, cands, int(t["max_findings"]))]


def _candidate(ctx: CaptureContext, r: dict[str, Any], t: Thresholds) -> tuple[float, dict, dict] | None:
    """(time blocked in syncs in ns, range, evidence) for a range whose host blocks in syncs long enough, more
    often than once per instance (or device-wide), while the GPU idles; else None."""
    tot = r["_totals"]
    wall, sync = float(tot["wall_ns"]), float(tot["sync_ns"])
    if wall <= 0 or not tot["sync_count"]:
        return None
    frac = sync / wall
    per = tot["sync_count"] / r["count"]
    dev = tot["device_sync_count"] / r["count"]
    if frac < t["min_fraction"] or (per <= t["max_syncs_per_instance"] and dev == 0):
        return None
    table = ctx.table
    inst = table.instances_of(r["series_id"])
    # (instance, call) pairs of the blocking syncs only: nested ranges repeat every API call per level
    q, rows = table.members_where(inst, "api", table.api.top_level & table.api.blocking_sync)
    idle_ns = _gpu_idle_from_sync(table, rows, q)
    if idle_ns < t["min_gpu_idle_share"] * wall:
        return None  # the host waits while the GPU works and refeeds it at once: the GPU sets the pace
    return sync, r, {
        "sync_fraction": frac, "sync_calls_per_instance": per, "device_syncs_per_instance": dev,
        "sync_ms_per_instance": sync / 1e6 / len(inst), "wall_ms_median": r["wall_ms"]["median"],
        "gpu_idle_during_sync_ms": idle_ns / 1e6,
        "gpu_idle_method": ("GPU idle time while each sync blocks plus the idle gap from its return to the "
                            "next GPU work (the relaunch it delays)"),
        # without the syncs an instance still takes the host's other time: removing them saves at most
        # the time blocked in them (on a host-bound loop the relaunch gaps are the host's own work)
        "sync_cost_ms": min(idle_ns, sync) / 1e6,
        "instances": r["count"], "calls": _calls_by_name(table.api, rows),
    }


def _calls_by_name(api: HostCalls, rows: np.ndarray) -> dict[str, dict[str, float]]:
    """Per sync call name, how many of the calls ``rows`` have it, their total (ms) and median (us) time."""
    df = pd.DataFrame({"n": api.name_of(rows), "d": api.end_ns[rows] - api.start_ns[rows]})
    return {str(n): {"count": int(g.size), "total_ms": float(g.sum()) / 1e6, "median_us": float(g.median()) / 1e3}
            for n, g in df.groupby("n")["d"]}


def _severity(ev: dict[str, Any], t: Thresholds) -> str:
    """By the share of the range blocked in syncs; high only with many syncs per instance or a device-wide one."""
    sev = band(ev["sync_fraction"], t["high_fraction"], t["medium_fraction"])
    if ev["sync_calls_per_instance"] < t["high_syncs_per_instance"] and ev["device_syncs_per_instance"] == 0:
        return milder(sev, "medium")
    return sev


def _title(ev: dict[str, Any], window: bool) -> str:
    """The share blocked, the syncs per instance (in the window, without NVTX ranges) and their names,
    the costliest first."""
    frac, per, dev = ev["sync_fraction"], ev["sync_calls_per_instance"], ev["device_syncs_per_instance"]
    names = ", ".join(sorted(ev["calls"], key=lambda n: -ev["calls"][n]["total_ms"]))
    if window:
        return (f"The host blocks in synchronisation {pct(frac)}% of the capture's GPU work window ({per:.0f} "
                f"calls{f', {dev:.0f} device-wide' if dev else ''}: {names})")
    return (f"The host blocks in synchronisation {pct(frac)}% of the range ({per:.1f} calls per instance"
            f"{f', {dev:.1f} device-wide' if dev else ''}: {names})")


def _finding(ctx: CaptureContext, r: dict[str, Any], ev: dict[str, Any], t: Thresholds) -> Finding:
    """The finding of one range whose host blocks in syncs."""
    return Finding(
        rule="sync_api", severity=_severity(ev, t), range=ctx.label(r["series_id"]),
        title=_title(ev, ctx.table.window),
        evidence=ev,
        threshold=t.pick("min_fraction", "max_syncs_per_instance", "min_gpu_idle_share"),
        recommendation=TRT_SYNC_ADVICE if ctx.tensorrt else SYNC_ADVICE,
    )


def _gpu_idle_from_sync(table: Any, rows: np.ndarray, q: np.ndarray) -> float:
    """GPU idle time (ns) the sync calls ``rows`` (of instances ``q``) account for: idle while each blocks,
    plus the gap from its return to the next GPU work (capped at the next sync's start), except after an
    instance's last sync (the one wait for the result every iteration needs)."""
    act, api = table.activity, table.api
    s, e = api.start_ns[rows], api.end_ns[rows]
    us, ue = intervals.union(act.start_ns, act.end_ns)
    if not len(us):
        return float((e - s).sum())
    # one temporary the size of the calls at a time, each let go once used (a sync-heavy capture has
    # hundreds of thousands of calls); the sums are of integer ns, exact in any grouping
    # GPU busy time inside each call: (us, ue) is a union already, so the prefix sums apply directly
    busy_in = intervals.covered_before(us, ue, np.maximum(e, s))
    busy_in -= intervals.covered_before(us, ue, s)
    while_blocked = int(np.maximum(e - s - busy_in, 0).sum())
    del busy_in
    k = np.searchsorted(ue, e, side="right")  # first busy piece ending after the call returns
    nxt = us[np.minimum(k, len(us) - 1)]
    ended = k >= len(us)  # no GPU work after the call: no gap to the next
    del k
    after = np.where(nxt <= e, 0, nxt - e)  # the next busy piece started before the return: no gap either
    after[ended] = 0
    del nxt, ended
    order = np.argsort(s)
    cap = np.empty_like(s)  # the next sync's start caps the gap
    cap[order] = np.append(s[order][1:], np.iinfo(np.int64).max)
    del order
    np.minimum(after, np.maximum(cap - e, 0), out=after)
    del cap
    last = np.lexsort((s, q))
    is_last = np.ones(len(q), bool)
    is_last[last[:-1]] = q[last][:-1] != q[last][1:]
    after[is_last] = 0
    return float(while_blocked + int(after.sum()))
