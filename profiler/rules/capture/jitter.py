"""jitter: unstable latency of a served range (CoV, p99 over the median), with its outlier instances
and their causes."""

from __future__ import annotations

from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import MAX_FINDINGS_PER_RULE, band, outermost, ranges_of, worse
from profiler.rules.context import CaptureContext

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
    for r in ranges_of(ctx, int(t["min_count"])):
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
    for _, r, ev in outermost(ctx, cands, int(t["max_findings"])):
        tail, cov = ev["p99_over_median"], ev["cov_pct"]
        sev = worse(band(tail, t["high_tail_ratio"], t["medium_tail_ratio"]),
                     band(cov, t["high_cov_pct"], t["medium_cov_pct"]))
        main = max(ev["outlier_causes"].items(), key=lambda kv: kv[1])[0] if ev["outlier_causes"] else None
        busiest = _busiest_device(ctx) if main == "cuda_api" else 0.0
        if main == "cuda_api" and _launch_queue_full(ev["outliers"], busiest):
            main = "launch_queue"
            ev["gpu_busy_fraction_max"] = busiest
        idx = [o["index"] for o in ev["outliers"]]
        shown = ", ".join(map(str, idx[:10])) + (" ..." if len(idx) > 10 else "")
        title = f"Unstable latency: CoV {cov:.1f}%, p99 {tail:.2f}x the median"
        if idx:
            words = "launch calls waiting on a full launch queue" if main == "launch_queue" else str(main).replace("_", " ")
            title += f"; outlier instances {shown}" + (f" (mostly {words})" if main else "")
        out.append(Finding(
            rule="jitter", severity=sev, range=ctx.label(r["series_id"]), title=title, evidence=ev,
            threshold=t.pick("min_count", "min_median_us", "max_cov_pct", "max_tail_ratio"),
            recommendation=_jitter_advice(main),
        ))
    return out


LAUNCH_QUEUE_BUSY = 0.8
"""A launch call that blocks while a GPU is busy at least this share of the steady state waits for room in
the launch queue (the host ran ahead of a backlogged GPU), unless it is a kernel's first use (lazy loading)."""


def _busiest_device(ctx: CaptureContext) -> float:
    return max((d.busy_ns / d.active_ns for d in ctx.devices if d.active_ns > 0), default=0.0)


def _launch_queue_full(outliers: list[dict], busiest: float) -> bool:
    """Most listed outliers block in a launch call, not only the first instances (a first use loads the
    module), while a GPU is busy (``busiest``: the busiest device's share) most of the time."""
    launches = [o for o in outliers if str(o.get("call", "")).startswith(("cudaLaunch", "cuLaunch"))]
    later = [o for o in launches if o["index"] >= 2]
    return 2 * len(launches) > len(outliers) and len(later) > 0 and busiest >= LAUNCH_QUEUE_BUSY


def _jitter_advice(cause: str | None) -> str:
    return {
        "launch_queue": ("Outliers block in launch calls while the GPU is busy almost all the time: the launch "
                         "queue is full because the host runs far ahead of a backlogged GPU, so the latency is "
                         "the GPU's backlog, not the launch. Shorten the GPU work queued in front (the copy or "
                         "compute findings say which), or bound how far the host runs ahead (wait on an event "
                         "every few iterations) so each request's latency reflects its own work."),
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
