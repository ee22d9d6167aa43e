"""Impact and severity of capture findings: what each costs the steady state, and how much that matters.

Each finding gets ``impact = {ms_per_instance, share}``: the time the problem costs over the judged
period (the steady state by default) per inference and as a share of that period, from the evidence
its rule measured (the launch-overhead saving, idle time, the outliers' excess, the GPU idle time a
sync causes up to the time the host blocks in it, the pinned-copy saving, the copy time not hidden behind compute). Severity follows the
share, not the rule; negligible findings and weak ones on one-instance series are dropped. Time two findings
see is priced once: GPU idle time inside a launch-overhead range, or inside jitter's outlier instances, is
that finding's cost, and the gpu_idle finding says so (``impact.included_in``, ``shared_with``).
"""

from __future__ import annotations

import numpy as np

from profiler.findings import Finding
from profiler.report.fmt import fmt_num
from profiler.rules.context import CaptureContext

IMPACT_HIGH_SHARE = 0.25
"""A finding costing this share of the steady state (or more) is high severity ..."""
IMPACT_MEDIUM_SHARE = 0.05
"""... this share medium, less low ..."""
IMPACT_MIN_SHARE = 0.01
"""... and below this share it is negligible and not reported."""
ONE_INSTANCE_MIN_SHARE = 0.25
"""A finding on a series with one instance needs at least this impact (one event is no pattern)."""
MIN_JUDGED_MS = 1.0
"""Over a judged period (steady state) shorter than this every finding is low severity at most, whatever
its share: a capture a fraction of a millisecond long (a smoke test, one tiny graph launch) is too
short to say what a service spends its time on."""


def _cost_ms(f: Finding) -> float | None:
    """What a finding costs over the judged period (ms), from its evidence; None when unknown."""
    ev = f.evidence
    value = {
        "launch_overhead": ev.get("graph_saving_ms_total"),
        # a one-time pause (one gap holding most of the idle time) is not a cost of the steady state: the
        # other gaps are
        "gpu_idle": ev.get("idle_ms") - ev.get("largest_gap_ms", 0.0) if ev.get("one_time_pause") else ev.get("idle_ms"),
        "jitter": ev.get("excess_ms_total"),
        "sync_api": ev.get("sync_cost_ms", ev.get("gpu_idle_during_sync_ms")),
        "pageable_memcpy": ev.get("estimated_saving_ms"),
        "transfer_bound": ev.get("exposed_copy_ms_total"),
        "repeated_setup": ev.get("setup_ms_total"),
        "host_sleeps": ev.get("gpu_idle_during_sleeps_ms"),
    }.get(f.rule)
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


#: Rules whose cost is GPU time summed over devices: its share is of the steady state times the GPUs that
#: worked in it (two GPUs copying side by side for a whole second cost 2 s of GPU time in 1 s).
GPU_TIME_COSTS = frozenset({"transfer_bound", "pageable_memcpy"})


CORRECTNESS_RULES = frozenset({"stream_race"})
"""Rules whose findings are correctness warnings: no cost, and the severity the rule gave (by how often the
problem happens) stands."""


def _gpus_at_work(ctx: CaptureContext) -> int:
    act = getattr(getattr(ctx, "table", None), "activity", None)
    return max(1, int(len(np.unique(act.device_id)))) if act is not None and len(act.device_id) else 1


def _severity(share: float) -> str:
    return "high" if share >= IMPACT_HIGH_SHARE else "medium" if share >= IMPACT_MEDIUM_SHARE else "low"


EXPLAINED_JITTER = ("backlog_wait_ms", "launch_queue_wait_ms", "by_work")
"""Evidence of a jitter finding whose spread is explained (waits for the GPU's backlog, the work each instance
brings): when what is left costs under ``IMPACT_MIN_SHARE`` it stays as an ``info`` finding, so the range
table's CoV and outliers are not left unexplained."""


def _exposure_ms(f: Finding) -> float | None:
    """What a finding whose cost is unknown is known to take (ms): pageable copies without a pinned twin to
    compare with take their GPU copy time, of which pinned memory would save an unmeasured part."""
    value = {"pageable_memcpy": f.evidence.get("gpu_ms")}.get(f.rule)
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def _unpriced_severity(f: Finding, period_ms: float) -> str:
    """A finding with no measured cost is at most medium: medium when what it is known to take
    (:func:`_exposure_ms`) is at least ``IMPACT_HIGH_SHARE`` of the judged period and the rule itself said
    medium or high, else low."""
    if f.severity not in ("high", "medium"):
        return f.severity
    exposure = _exposure_ms(f)
    if exposure is None or period_ms <= 0:
        return "low"
    share = min(exposure / period_ms, 1.0)
    text = (f"{fmt_num(exposure, 4)} ms of GPU copy time, {fmt_num(100 * share, 3)}% of the steady state's GPU time; "
            "the saving is not measured")
    for d in (f.impact, f.evidence["impact"]):
        d.update(exposure_ms=exposure, exposure_share=share, text=text)
    return "medium" if share >= IMPACT_HIGH_SHARE else "low"


def calibrate(ctx: CaptureContext, findings: list[Finding]) -> list[Finding]:
    """Give every finding its impact ``{ms_per_instance, share}`` of the steady state; severity follows the
    impact; negligible findings and weak findings on one-instance series are dropped; costliest first."""
    steady_ms = ctx.steady_ns / 1e6
    n_inf = ctx.steady_instances
    counts = {ctx.label(r["series_id"]): r["count"] for r in ctx.ranges}
    gpus = _gpus_at_work(ctx)
    unit = getattr(ctx, "unit", None)
    unit_label = unit.label if unit is not None and getattr(unit, "source", "window") != "window" else None
    out = []
    for f in findings:
        cost = _cost_ms(f)
        period = steady_ms * (gpus if f.rule in GPU_TIME_COSTS else 1)
        share = min(max(cost / period, 0.0), 1.0) if cost is not None and period > 0 else None
        # per inference only where the finding is about the inference (or the whole capture): the cost of
        # another range's copies divided by the inference count would exceed the inference itself
        # (and never without an inference unit: a capture's one window is no inference)
        about_unit = unit_label is not None and (f.range is None or f.range == unit_label)
        f.impact = {"ms_per_instance": max(cost, 0.0) / n_inf if cost is not None and about_unit else None,
                    "ms_total": max(cost, 0.0) if cost is not None else None, "share": share,
                    "instances": n_inf, "steady_ms": steady_ms}
        if f.rule in GPU_TIME_COSTS:
            f.impact["gpu_time"] = True
            if gpus > 1:
                f.impact["gpus"] = gpus  # the share is of the steady state's GPU time on all of them
        f.evidence["impact"] = dict(f.impact)
        if f.rule in CORRECTNESS_RULES:
            out.append(f)
            continue
        if share is None:
            bound = f.evidence.get("cost_upper_bound_ms")  # the most it can cost, when the cost is unknown
            if isinstance(bound, (int, float)) and steady_ms > 0 and bound / steady_ms < IMPACT_MIN_SHARE:
                continue
            f.severity = _unpriced_severity(f, period)
        else:
            if share < IMPACT_MIN_SHARE:
                if f.rule == "jitter" and any(k in f.evidence for k in EXPLAINED_JITTER):
                    f.severity = "info"  # what explains the range table's spread stays, as information
                    out.append(f)
                continue
            if f.range is not None and counts.get(f.range, 2) < 2 and share < ONE_INSTANCE_MIN_SHARE:
                continue
            f.severity = _banded(f, share, steady_ms)
        out.append(f)
    out = _without_nested_repeats(ctx, out)
    _same_cause(out)
    _idle_in_outliers(ctx, out, steady_ms)
    rank = {"high": 0, "medium": 1, "low": 2, "info": 3}
    return sorted(out, key=lambda f: (-(f.impact["share"] if f.impact["share"] is not None else -1.0),
                                      rank[f.severity], f.rule, f.range or ""))


def _same_cause(findings: list[Finding]) -> None:
    """Idle GPU time caused by what a launch_overhead finding already prices (the gaps fall inside its range,
    or in launch calls), or by setup work a repeated_setup finding prices, or by sleeps a host_sleeps finding
    prices, is one problem seen twice: the gpu_idle finding says which finding holds its cost
    (``impact.included_in``) and is low severity, so the two shares are not read as separate costs."""
    launch = [f for f in findings if f.rule == "launch_overhead"]
    holders = {r for r in ("repeated_setup", "host_sleeps") if any(f.rule == r for f in findings)}
    for f in findings:
        held = [r for r, key in (("repeated_setup", "setup_repeats"), ("host_sleeps", "host_sleeps"))
                if r in holders and f.evidence.get(key)]
        if f.rule == "gpu_idle" and held and f.evidence.get("impact"):
            # idle gaps spent in setup that repeats between inferences, or in the host's sleeps: that rule
            # prices them
            f.impact["included_in"] = f.evidence["impact"]["included_in"] = held[0]
            f.severity = "low"
            continue
        if f.rule != "gpu_idle" or not launch:
            continue
        cause, where = f.evidence.get("host_cause"), f.evidence.get("host_cause_range")
        same = [g for g in launch if cause == "launch" or (cause == "range" and g.range == where)]
        if same:
            f.impact["included_in"] = f.evidence["impact"]["included_in"] = f"launch_overhead [{same[0].range}]"
            f.severity = "low"


def _idle_in_outliers(ctx: CaptureContext, findings: list[Finding], steady_ms: float) -> None:
    """GPU idle time inside jitter's outlier instances is one cost seen twice: a pause of the host (garbage
    collection, a stall) idles the GPU and stretches the instance it falls in. Jitter keeps that time (it
    names the instances and their cause); the gpu_idle finding is priced by the idle time beyond it and says
    which finding holds the rest (``impact.shared_with``, ``shared_ms``; ``included_in`` as well when nothing
    of its own is left, under ``IMPACT_MIN_SHARE``), so the shares add up once. Per
    outlier, the shared time is the idle time it holds in the gaps the gpu_idle finding counts beyond what
    the series' median instance holds, at most its excess over the median."""
    jitters = [f for f in findings if f.rule == "jitter" and f.range is not None]
    if not jitters:
        return
    ids = {ctx.label(i): i for i in range(len(ctx.ranges))}
    for f in findings:
        if f.rule != "gpu_idle" or f.impact.get("included_in") or f.impact.get("ms_total") is None:
            continue
        gaps = _counted_gaps(ctx, f)
        # never more than the jitter finding prices (it leaves out what a GPU backlog or the work explains)
        shared = {j.range: min(_shared_ms(ctx, ids[j.range], gaps), j.impact.get("ms_total") or 0.0)
                  for j in jitters if j.range in ids}
        shared = {name: ms for name, ms in shared.items() if ms > 0}
        if not shared:
            continue
        cost = f.impact["ms_total"]
        included = min(sum(shared.values()), cost)
        rest = cost - included
        n_inf = f.impact["instances"]
        share = min(max(rest / steady_ms, 0.0), 1.0) if steady_ms > 0 else None
        names = and_list([f"jitter [{name}]" for name in shared])
        f.impact.update({
            "ms_total": rest, "share": share,
            "ms_per_instance": rest / n_inf if f.impact["ms_per_instance"] is not None and n_inf else
            f.impact["ms_per_instance"],
            "shared_with": names, "shared_ms": included})
        if share is None or share < IMPACT_MIN_SHARE:  # nothing of its own left: all of it is that time
            f.impact["included_in"] = names
        f.evidence["impact"] = dict(f.impact)
        f.severity = _banded(f, share, steady_ms)


def _banded(f: Finding, share: float | None, steady_ms: float) -> str:
    """The severity of a priced finding: its share's band, low over a period too short to judge and for a
    one-time cost (kernels' first launches: priced, but no steady-state problem)."""
    if share is None or steady_ms < MIN_JUDGED_MS or f.evidence.get("one_time_cost"):
        return "low"
    return _severity(share)


def and_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _counted_gaps(ctx: CaptureContext, f: Finding) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gaps (sorted starts, ends; ns) a gpu_idle finding prices, and the threads that launch work on its
    device: its device's gaps of at least its ``min_gap_us``, without the largest when that one is a
    one-time pause its cost leaves out."""
    dev = next((d for d in ctx.devices if d.device_id == f.evidence.get("device_id")), None)
    if dev is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    keep = dev.gaps_of_at_least(float(f.evidence.get("counted_min_gap_us", f.threshold.get("min_gap_us", 0.0))) * 1e3)
    gs, ge = dev.gap_start_ns[keep], dev.gap_end_ns[keep]
    if f.evidence.get("one_time_pause") and len(gs):
        drop = int(np.argmax(ge - gs))
        gs, ge = np.delete(gs, drop), np.delete(ge, drop)
    return gs, ge, np.asarray(dev.launch_tids)


def _shared_ms(ctx: CaptureContext, series_id: int, gaps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> float:
    """Over the outlier instances of a series on threads that launch work on the gaps' device: the idle time
    each holds in the gaps beyond the series' median instance's, at most its excess over the median (ms)."""
    from profiler.capture.intervals import covered_before

    gs, ge, tids = gaps
    outl = ctx.outliers
    if not len(gs) or not len(outl):
        return 0.0
    mine = outl["series_id"].to_numpy() == series_id
    if not mine.any():
        return 0.0
    inst = ctx.table.instances_of(series_id)
    s, e = inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy()
    idle_ns = covered_before(gs, ge, e) - covered_before(gs, ge, s)
    pos = np.searchsorted(inst["idx"].to_numpy(), outl["idx"].to_numpy()[mine])
    on_device = np.isin(inst["tid"].to_numpy()[pos], tids) if len(tids) else np.ones(len(pos), dtype=bool)
    beyond_ms = np.maximum(idle_ns[pos] - np.median(idle_ns), 0) / 1e6
    excess_ms = np.maximum(outl["excess_ms"].to_numpy()[mine], 0.0)
    return float(np.minimum(beyond_ms, excess_ms)[on_device].sum())


def _without_nested_repeats(ctx: CaptureContext, findings: list[Finding]) -> list[Finding]:
    """A finding on a range that runs mostly inside the instances of another range with a finding of the
    same rule is the same problem seen from inside (an HtoD copy in ``aten::to`` in the request that made
    it): the enclosing one is kept and names the inner ranges in its evidence, so one cost is not
    reported twice. "Mostly inside": at least half of the inner range's time overlaps the outer's."""
    from profiler.capture.intervals import overlap_length, union_length

    table = ctx.table
    if table.window:
        return findings
    ids = {ctx.label(i): i for i in range(len(ctx.ranges))}
    spans: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
    for f in findings:
        if f.range in ids and f.range not in spans:
            inst = table.instances_of(ids[f.range])
            s, e = inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64)
            spans[f.range] = (s, e, union_length(s, e))
    inner: dict[int, list[str]] = {}
    dropped: set[int] = set()
    for a, f in enumerate(findings):
        for b, g in enumerate(findings):
            if a == b or b in dropped or f.rule != g.rule or f.range not in spans or g.range not in spans:
                continue
            fs, fe, f_len = spans[f.range]
            gs, ge, g_len = spans[g.range]
            if f_len == 0 or g_len < f_len or (g_len == f_len and b > a):
                continue
            if overlap_length(fs, fe, gs, ge) >= 0.5 * f_len:
                dropped.add(a)
                inner.setdefault(b, []).append(f.range)
                break
    for b, names in inner.items():
        if b not in dropped:
            findings[b].evidence["also_inside"] = names
    return [f for i, f in enumerate(findings) if i not in dropped]
