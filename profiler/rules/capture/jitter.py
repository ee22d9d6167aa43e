"""jitter: unstable latency of a served range (CoV, p99 over the median), with its outlier instances
and their causes.

Two kinds of variation are no instability and are not priced as one: waits for the GPU backlog (the host
runs ahead and synchronises now and then: those instances' wall time is the queue draining) and latency
that follows the work each instance brings (requests of a few input sizes: within one size it is steady).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiler import stats
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import MAX_FINDINGS_PER_RULE, band, outermost, ranges_of, worse
from profiler.fmt import plural
from profiler.rules.capture._idle_cause import osrt_traced, os_call_kind
from profiler.capture.context import CaptureContext

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
WORK_KEYS = ("kernels", "activities", "copy_bytes")
"""What tells one instance's GPU work from another's: its kernel and activity counts and copied bytes."""
WORK_MIN_SHARE, WORK_MIN_INSTANCES = 0.05, 3
"""A work size counts when this share of the instances (and at least this many) brings it ..."""
WORK_MIN_COVER = 0.9
"""... and the sizes that count cover this share of the instances."""
WORK_MAX_HOST_SPREAD = 0.5
"""The sizes' median wall times differ by their GPU work: the spread of their medians of wall minus GPU busy
time is at most this share of the spread of their median wall times."""
WORK_MAX_UNEXPLAINED = 0.5
"""Variation follows the work when the time above each size's median is at most this share of the time above
the range's median (both summed over the instances)."""


@rule("jitter", scope="capture", defaults={
    "min_count": JITTER_MIN_COUNT, "min_median_us": JITTER_MIN_MEDIAN_US, "max_cov_pct": JITTER_MAX_COV_PCT,
    "max_tail_ratio": JITTER_MAX_TAIL_RATIO, "max_findings": MAX_FINDINGS_PER_RULE,
    "min_top_level_share": JITTER_MIN_TOP_LEVEL_SHARE, "high_tail_ratio": JITTER_HIGH_TAIL_RATIO,
    "high_cov_pct": JITTER_HIGH_COV_PCT, "medium_tail_ratio": JITTER_MEDIUM_TAIL_RATIO,
    "medium_cov_pct": JITTER_MEDIUM_COV_PCT})
def jitter(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Unstable latency: CoV and tail ratios, with the outlier instances and their causes."""
    cands = [c for r in ranges_of(ctx, int(t["min_count"])) if (c := _candidate(ctx, r, t)) is not None]
    return [_finding(ctx, r, ev, t) for _, r, ev in outermost(ctx, cands, int(t["max_findings"]))]


def _candidate(ctx: CaptureContext, r: dict, t: Thresholds) -> tuple[float, dict, dict] | None:
    """(cost ms, range, evidence) of a served range whose latency spreads past the thresholds, else None."""
    w = r["wall_ms"]
    med = w["median"]
    if not med or med * 1e3 < t["min_median_us"]:
        return None
    if r["top_level_share"] < t["min_top_level_share"] and r["launches_per_instance"] == 0 and r["total_gpu_busy_ms"] == 0:
        return None  # a nested host-only helper, not a latency anyone serves
    if r.get("parent_id", -1) >= 0:
        return None  # a child range (a layer): its variability belongs to the parent's layer table
    tail = w["p99"] / med
    cov = w["cov_pct"]
    if cov < t["max_cov_pct"] and tail < t["max_tail_ratio"]:
        return None
    outl = ctx.outliers
    o = outl[outl["series_id"].to_numpy() == r["series_id"]] if len(outl) else outl
    excess = float(o["excess_ms"].sum()) if len(o) else 0.0
    listed = o.nlargest(JITTER_LISTED_OUTLIERS, "excess_ms").sort_values("idx") if len(o) else o
    ev = {
        "count": r["count"], "excess_ms_total": max(excess, (w["mean"] - med) * r["count"]), "median_ms": med,
        "p90_ms": w["p90"], "p99_ms": w["p99"], "max_ms": w["max"],
        "cov_pct": cov, "p99_over_median": tail, "max_over_median": w["max"] / med,
        "outlier_count": int(len(o)), "outlier_excess_ms": excess,
        "outlier_causes": o["cause"].value_counts().to_dict() if len(o) else {},
        "outliers": [{"index": int(x.idx), "wall_ms": float(x.wall_ms), "excess_ms": float(x.excess_ms),
                      "cause": x.cause, **{k: v for k, v in x.detail.items() if k != "description"}}
                     for x in listed.itertuples(index=False)],
    }
    _set_explained_apart(ctx, r, o, ev)
    return ev["excess_ms_total"], r, ev


def _set_explained_apart(ctx: CaptureContext, r: dict, o: pd.DataFrame, ev: dict) -> None:
    """Take out of the cost what is not instability: waits for the GPU work queued by earlier instances (met in a
    sync or in a launch call; no fix of the range saves them), or the spread between work sizes."""
    cost_ms = ev["excess_ms_total"]
    backlog_ms = float(o["excess_ms"].to_numpy()[o["cause"].to_numpy() == "gpu_backlog"].sum()) if len(o) else 0.0
    if backlog_ms > 0:
        ev.update(excess_ms_total=max(cost_ms - backlog_ms, 0.0), backlog_wait_ms=backlog_ms)
    elif (queue_ms := _launch_queue_wait_ms(ctx, o, ev)) > 0:
        ev.update(excess_ms_total=max(cost_ms - queue_ms, 0.0), launch_queue_wait_ms=queue_ms)
    elif (by_work := _by_work(ctx.table.instances_of(r["series_id"]))) is not None:
        if by_work.pop("host_paths"):  # the sizes differ on the host: a slower path, a cost a fix saves
            ev.update(host_paths=by_work.pop("sizes"))
        else:
            ev.update(excess_ms_total=by_work.pop("unexplained_ms"), work_sizes=by_work.pop("sizes"), by_work=by_work)


def _finding(ctx: CaptureContext, r: dict, ev: dict, t: Thresholds) -> Finding:
    """The finding of a candidate range: severity from the spread (within one work size where sizes explain
    it), and the title and advice of its main cause."""
    tail, cov = ev["p99_over_median"], ev["cov_pct"]
    if "by_work" in ev:  # judged within one work size
        tail, cov = ev["by_work"]["p99_over_median_max"], ev["by_work"]["cov_pct_max"]
    sev = worse(band(tail, t["high_tail_ratio"], t["medium_tail_ratio"]),
                band(cov, t["high_cov_pct"], t["medium_cov_pct"]))
    main = max(ev["outlier_causes"].items(), key=lambda kv: kv[1])[0] if ev["outlier_causes"] else None
    busiest = _busiest_device(ctx) if main in ("cuda_api", "gpu_backlog") else 0.0
    if main == "cuda_api" and _launch_queue_full(ev["outliers"], busiest):
        main = "launch_queue"
        ev["gpu_busy_fraction_max"] = busiest
    if main == "host_stall" and _waits_on_handover(ev["outliers"], _timed_out_names(ctx)):
        main = "handover"
    if main == "gpu_backlog":
        ev["gpu_busy_fraction_max"] = busiest
        sev = "low"  # the rest of the excess is priced by the impact
        title = _backlog_title(ev, busiest)
    elif main == "launch_queue":
        sev = "low"
        title = _launch_queue_title(ev, busiest)
    elif "host_paths" in ev and not ev["outliers"]:
        title = _paths_title(ev)
        main = "host_paths"
    elif "by_work" in ev:
        title = _work_title(ev["work_sizes"], ev["by_work"])
        if ev["outliers"]:
            title += "; " + _title(ev, main).split("; ", 1)[1]
        main = "work" if main is None else f"work+{main}"
    else:
        title = _title(ev, main)
    return Finding(
        rule="jitter", severity=sev, range=ctx.label(r["series_id"]), title=title, evidence=ev,
        threshold=t.pick("min_count", "min_median_us", "max_cov_pct", "max_tail_ratio"),
        recommendation=" ".join(_jitter_advice(m) for m in str(main).split("+")) if main else _jitter_advice(
            "osrt_traced" if osrt_traced(ctx) else None),
    )


def _shown(idx: list[int]) -> str:
    return ", ".join(map(str, idx[:10])) + (" ..." if len(idx) > 10 else "")


def _title(ev: dict, main: str | None) -> str:
    title = f"Unstable latency: CoV {ev['cov_pct']:.1f}%, p99 {ev['p99_over_median']:.2f}x the median"
    idx = [o["index"] for o in ev["outliers"]]
    if idx:
        words = {"launch_queue": "launch calls waiting on a full launch queue",
                 "handover": "waiting on another thread or process"}.get(str(main), str(main).replace("_", " "))
        title += f"; outlier instances {_shown(idx)}" + (f" (mostly {words})" if main else "")
    return title


def _backlog_title(ev: dict, busiest: float) -> str:
    """What the wall time of a range whose syncs drain the GPU backlog is: enqueue time and those waits."""
    waits = [o for o in ev["outliers"] if o["cause"] == "gpu_backlog"]
    wait_ms = float(np.median([o["call_ms"] for o in waits]))
    queued = int(np.median([o["instances_queued"] for o in waits]))
    n = ev["outlier_causes"].get("gpu_backlog", len(waits))
    return (f"Enqueue time plus GPU backlog waits, not unstable latency: the host runs ahead (GPU busy "
            f"{100 * busiest:.1f}%); {n} syncs wait {wait_ms:.3g} ms (median) for the work queued by the {queued} "
            f"instances before them and their own; the others take {ev['median_ms']:.3g} ms (median; instances "
            f"{_shown([o['index'] for o in waits])})")


def _paths_title(ev: dict) -> str:
    """The title of a range whose instances take a few paths, told apart by the work they launch, that
    differ in host time: each path's work and median wall time."""
    paths = "; ".join(f"{p['instances']} with {p['activities']} GPU {plural(p['activities'], 'activity', 'activities')}"
                      + (f" ({p['kernels']} kernels)" if p["kernels"] else "") + f": {p['wall_ms_median']:.3g} ms"
                      for p in ev["host_paths"])
    return (f"Unstable latency: CoV {ev['cov_pct']:.1f}%, p99 {ev['p99_over_median']:.2f}x the median, from "
            f"{len(ev['host_paths'])} paths that differ on the host, not on the GPU ({paths}; medians)")


def _work_title(sizes: list[dict], w: dict) -> str:
    gpu = " / ".join(f"{s['gpu_busy_ms_median']:.3g}" for s in sizes)
    wall = " / ".join(f"{s['wall_ms_median']:.3g}" for s in sizes)
    return (f"Latency follows the GPU work of each instance, not instability: {len(sizes)} work sizes, GPU {gpu} ms, "
            f"wall {wall} ms (medians); within one size CoV at most {w['cov_pct_max']:.1f}%, p99 at most "
            f"{w['p99_over_median_max']:.2f}x its median")


def _by_work(inst: pd.DataFrame) -> dict | None:
    """The range's wall time per work size (instances with the same ``WORK_KEYS``), when the sizes explain
    its variation: a few common sizes whose median wall times differ by their GPU work, each steady enough
    that the time above each size's median is at most ``WORK_MAX_UNEXPLAINED`` of the time above the
    range's median (instances of rare sizes count against the range's median): ``explained_ms`` of the
    ``above_median_ms``. ``unexplained_ms`` prices what is left as the range's cost is priced (the mean
    over the median, per size). None otherwise."""
    n = len(inst)
    if n == 0 or all(inst[k].nunique() < 2 for k in WORK_KEYS):
        return None
    size = inst.groupby(list(WORK_KEYS), sort=False).ngroup().to_numpy()
    counts = np.bincount(size)
    common = np.flatnonzero(counts >= max(WORK_MIN_INSTANCES, WORK_MIN_SHARE * n))
    if len(common) < 2 or counts[common].sum() < WORK_MIN_COVER * n:
        return None
    wall_ms = inst["wall_ns"].to_numpy(np.float64) / 1e6
    gpu_ms = inst["gpu_busy_ns"].to_numpy(np.float64) / 1e6
    sizes, unexplained, above_size = [], 0.0, 0.0
    for g in common:
        m = size == g
        ws = stats.summarize(wall_ms[m])
        above_size += float(np.clip(wall_ms[m] - ws["median"], 0, None).sum())
        first = int(np.flatnonzero(m)[0])
        sizes.append({"instances": int(counts[g]), **{k: int(inst[k].iat[first]) for k in WORK_KEYS},
                      "gpu_busy_ms_median": float(np.median(gpu_ms[m])), "wall_ms_median": ws["median"],
                      "wall_ms_p99": ws["p99"], "cov_pct": ws["cov_pct"],
                      "p99_over_median": ws["p99"] / ws["median"] if ws["median"] else 0.0})
        unexplained += max(ws["mean"] - ws["median"], 0.0) * ws["count"]
    rare = ~np.isin(size, common)
    rare_ms = float(np.clip(wall_ms[rare] - np.median(wall_ms), 0, None).sum())
    unexplained += rare_ms
    above = float(np.clip(wall_ms - np.median(wall_ms), 0, None).sum())
    walls = np.array([s["wall_ms_median"] for s in sizes])
    host = walls - np.array([s["gpu_busy_ms_median"] for s in sizes])
    if above_size + rare_ms > WORK_MAX_UNEXPLAINED * above:
        return None
    host_paths = bool(np.ptp(host) > WORK_MAX_HOST_SPREAD * np.ptp(walls))
    sizes.sort(key=lambda s: s["wall_ms_median" if host_paths else "gpu_busy_ms_median"])
    return {"sizes": sizes, "host_paths": host_paths, "instances_of_rare_sizes": int(rare.sum()), "unexplained_ms": unexplained,
            "above_median_ms": above, "explained_ms": above - above_size - rare_ms,
            "cov_pct_max": max(s["cov_pct"] for s in sizes),
            "p99_over_median_max": max(s["p99_over_median"] for s in sizes)}


LAUNCH_QUEUE_BUSY = 0.8
"""A launch call that blocks while a GPU is busy at least this share of the steady state waits for room in
the launch queue (the host ran ahead of a backlogged GPU), unless it is a kernel's first use (lazy loading)."""


def _busiest_device(ctx: CaptureContext) -> float:
    return max((d.busy_ns / d.active_ns for d in ctx.devices if d.active_ns > 0), default=0.0)


LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch")


def _launch_queue_wait_ms(ctx: CaptureContext, o: pd.DataFrame, ev: dict) -> float:
    """The excess (ms) of a range's outliers that block in a launch call while the launch queue is full (their
    cause is CUDA API time, the launches are not a kernel's first use, a GPU is busy ``LAUNCH_QUEUE_BUSY`` of the
    time): the GPU's backlog met in the launch call, which no fix of the range saves. 0 when that is not the
    range's main cause."""
    causes = ev["outlier_causes"]
    if not causes or max(causes.items(), key=lambda kv: kv[1])[0] != "cuda_api":
        return 0.0
    if not _launch_queue_full(ev["outliers"], _busiest_device(ctx)):
        return 0.0
    blocked = [float(x.excess_ms) for x in o.itertuples(index=False) if x.cause == "cuda_api" and x.idx >= 2
               and str(x.detail.get("call", "")).startswith(LAUNCH_PREFIXES)]
    return float(sum(blocked))


def _launch_queue_title(ev: dict, busiest: float) -> str:
    """What the wall time of a range whose launches wait for room in a full launch queue is."""
    waits = [o for o in ev["outliers"] if str(o.get("call", "")).startswith(LAUNCH_PREFIXES) and o["index"] >= 2]
    wait_ms = float(np.median([o["wall_ms"] for o in waits]))
    return (f"Enqueue time plus waits for room in the launch queue, not unstable latency: the host runs ahead "
            f"(GPU busy {100 * busiest:.1f}%) and {ev['outlier_causes'].get('cuda_api', len(waits))} instances "
            f"block in launch calls until the GPU drains the queue ({wait_ms:.3g} ms median wall time); the others "
            f"take {ev['median_ms']:.3g} ms (median; instances {_shown([o['index'] for o in waits])})")


def _timed_out_names(ctx: CaptureContext) -> set[str]:
    """The OS call names whose calls time out over and over (host_sleeps): sleeps, not hand-overs."""
    from profiler.rules.capture import host_sleeps as HS

    return HS.sleeps_of(ctx, HS.DEFAULTS).names


def _waits_on_handover(outliers: list[dict], timed_out: set[str] = frozenset()) -> bool:
    """Most of the host-stall outliers' longest OS runtime call waits for another thread or process to hand
    over (sem_wait, pthread_cond_wait, a queue's get): the range's thread is idle, the time is the other's. A call
    that returns after its timeout again and again (``timed_out``) is a sleep, no hand-over."""
    stalls = [o for o in outliers if o["cause"] == "host_stall"]
    waits = [o for o in stalls if os_call_kind(str(o.get("call", ""))) == "input" and o.get("call") not in timed_out]
    return 2 * len(waits) > len(stalls)


def _launch_queue_full(outliers: list[dict], busiest: float) -> bool:
    """Most listed outliers block in a launch call, not only the first instances (a first use loads the
    module), while a GPU is busy (``busiest``: the busiest device's share) most of the time."""
    launches = [o for o in outliers if str(o.get("call", "")).startswith(LAUNCH_PREFIXES)]
    later = [o for o in launches if o["index"] >= 2]
    return 2 * len(launches) > len(outliers) and len(later) > 0 and busiest >= LAUNCH_QUEUE_BUSY


def _jitter_advice(cause: str | None) -> str:
    return {
        "gpu_backlog": ("The host runs ahead of the GPU and synchronises now and then: this range's wall time is the "
                        "host's enqueue time, and where it synchronises, the wait for the GPU work the earlier "
                        "instances queued. Those waits are the backlog draining, not unstable latency, and removing "
                        "them would not make the GPU finish sooner. Judge each inference by its GPU latency (the "
                        "inference line); to go faster, shorten the GPU work (the compute and copy findings say "
                        "which). To measure a request's latency on the host, record CUDA events on its stream."),
        "work": ("Latency follows the work each request brings (its kernels and copies differ: input sizes or "
                 "shapes), and within one work size it varies far less: the spread is the workload, not "
                 "instability. Report "
                 "and judge latency per input size (bucket requests by batch size or shape, one target per "
                 "bucket); to narrow the spread, batch or pad requests to a few fixed sizes (one TensorRT "
                 "optimisation profile or CUDA graph per size)."),
        "launch_queue": ("Outliers block in launch calls while the GPU is busy almost all the time: the launch "
                         "queue is full because the host runs far ahead of a backlogged GPU, so the latency is "
                         "the GPU's backlog, not the launch. Shorten the GPU work queued in front (the copy or "
                         "compute findings say which), or bound how far the host runs ahead (wait on an event "
                         "every few iterations) so each request's latency reflects its own work."),
        "host_stall": ("Outliers coincide with OS runtime calls (sleep, locks, I/O) inside the range: keep them off "
                       "the serving thread, avoid contended locks, pin the thread to a core."),
        "handover": ("Outliers wait longer in a hand-over (sem_wait, pthread_cond_wait, a queue's get): the range's "
                     "thread is idle while another thread or process does the work, so the spread is that one's. "
                     "Look at the thread this one waits on (a worker that launches the range's GPU work, the "
                     "producer of its input) in the outlier instances: its CUDA calls, GPU work and OS calls."),
        "slow_gpu": ("Outliers are slower GPU phases: lock GPU clocks for measurement (nvidia-smi -lgc), check for "
                     "other work sharing the GPU, thermal or power throttling, and input-dependent kernels."),
        "memory_copy": ("Outliers are slower copies: use pinned host buffers, avoid pageable memory and "
                        "allocation inside the loop, keep copies off contended PCIe links."),
        "synchronization": ("Outliers block longer in synchronisation than their GPU work explains: look for "
                            "other streams or processes the sync waits for; sync on an event of this stream."),
        "cuda_api": ("Outliers spend longer in CUDA API calls such as lazy module loading (first use of a kernel) "
                     "or allocation: warm up every code path before measuring (or set CUDA_MODULE_LOADING=EAGER) "
                     "and preallocate buffers outside the loop."),
        "host_paths": ("The instances take different paths, told apart by the GPU work they launch, and the "
                       "slower ones spend the extra time on the host: launching more kernels one by one (an eager "
                       "path beside a CUDA graph), or other host work on that path. Send every request down the "
                       "fast path (capture the slow one as a graph too), or serve the paths apart."),
        "host_code": ("Outliers spend longer in host code outside CUDA calls (Python, garbage collection, "
                      "pre/post-processing): profile the host side (py-spy), disable GC in the loop, preallocate."),
        "osrt_traced": ("Latency varies between instances without outliers that stand out: warm up longer, lock "
                        "GPU clocks (nvidia-smi -lgc), isolate the process and pin it to cores."),
    }.get(cause or "", "Latency varies between instances: warm up longer, lock clocks, isolate the process, and "
                       "trace the OS runtime (nsys -t osrt) so the capture shows host-side causes.")
