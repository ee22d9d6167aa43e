"""Impact and severity of capture findings: what each costs the steady state, and how much that matters.

Each finding gets ``impact = {ms_per_instance, share}``: the time the problem costs over the judged
period (the steady state by default) per inference and as a share of that period, from the evidence
its rule measured (the launch-overhead saving, idle time, the outliers' excess, the GPU idle time a
sync causes up to the time the host blocks in it, the pinned-copy saving, the copy time not hidden behind compute, the
floor of what reduced-precision math saves). Severity follows the
share, not the rule; negligible findings and weak ones on one-instance series are dropped. Time two findings
see is priced once: GPU idle time inside a launch-overhead range (or the capture's one window it judges), or
inside jitter's outlier instances, is that finding's cost, and the gpu_idle finding says so
(``impact.included_in``, ``shared_with``).
"""

from __future__ import annotations

import numpy as np

from profiler.findings import Finding
from profiler.fmt import fmt_num
from profiler.capture.context import CaptureContext

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
        "fp32_math": ev.get("estimated_saving_ms"),
        "decode_drift": ev.get("excess_ms"),
        "repeated_setup": ev.get("setup_ms_total"),
        "host_sleeps": ev.get("gpu_idle_during_sleeps_ms"),
    }.get(f.rule)
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


#: Rules whose cost is GPU time summed over devices: its share is of the steady state times the GPUs that
#: worked in it (two GPUs copying side by side for a whole second cost 2 s of GPU time in 1 s).
GPU_TIME_COSTS = frozenset({"transfer_bound", "pageable_memcpy", "fp32_math"})


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
    compare with take their GPU copy time, of which pinned memory would save an unmeasured part; threads that
    take turns on a lock wait for each other this long (per thread)."""
    key = {"pageable_memcpy": "gpu_ms", "serialised_threads": "lock_wait_ms_per_thread"}.get(f.rule)
    value = f.evidence.get(key) if key else None
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


EXPOSURE_TEXT = {
    "pageable_memcpy": "{ms} ms of GPU copy time, {pct}% of the steady state's GPU time; the saving is not measured",
    "serialised_threads": ("{ms} ms per thread waiting for the other threads' turn, {pct}% of the steady state; "
                           "the saving is not measured (it is latency; throughput gains only where the GPU idles)"),
}
"""How an unpriced finding's exposure (:func:`_exposure_ms`) reads."""


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
    text = EXPOSURE_TEXT[f.rule].format(ms=fmt_num(exposure, 4), pct=fmt_num(100 * share, 3))
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
    _idle_seen_elsewhere(ctx, out, steady_ms)
    _copies_seen_elsewhere(out, steady_ms)
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


def _idle_seen_elsewhere(ctx: CaptureContext, findings: list[Finding], steady_ms: float) -> None:
    """A gpu_idle finding's idle time that a launch_overhead or jitter finding already prices is taken out of
    its cost once (:func:`_leave_shared`): GPU idle time inside the instances of a launch_overhead range (the
    whole capture, for a capture's one window) is part of that range's CUDA-graph saving, which is the
    instances' wall time beyond their GPU work, idle gaps included, where the host spent them in what a graph
    removes (``GRAPH_REMOVES_CAUSES``); idle time in jitter's outliers is jitter's (:func:`_outlier_shares`)."""
    for f in findings:
        if f.rule != "gpu_idle" or f.impact.get("included_in") or f.impact.get("ms_total") is None:
            continue
        gaps = _counted_gaps(ctx, f)
        launch = _launch_shares(ctx, findings, gaps, f.evidence.get("host_cause"))
        _leave_shared(f, {**launch, **_outlier_shares(ctx, findings, gaps)}, steady_ms)


GRAPH_REMOVES_CAUSES = frozenset({"launch", "code", "range"})
"""The host causes of GPU idle time (gpu_idle's ``host_cause``) a replayed CUDA graph removes: launch calls,
the host's own code between launches and a range's host work (TensorRT's enqueue). Idle time the host spends
loading modules (a one-time cost), allocating, synchronising or waiting in the OS (for input, asleep) stays
under a graph: gpu_idle keeps pricing it even inside a launch_overhead range."""


def _launch_shares(ctx: CaptureContext, findings: list[Finding],
                   gaps: tuple[np.ndarray, np.ndarray, np.ndarray], cause: str | None) -> dict[str, float]:
    """The idle time (ms) of ``gaps`` inside each launch_overhead finding's instances, at most what it prices,
    by the finding's name ('launch_overhead [range]'); none when the gaps' host ``cause`` is not one a graph
    removes (``GRAPH_REMOVES_CAUSES``)."""
    if cause not in GRAPH_REMOVES_CAUSES:
        return {}
    ids = {ctx.label(i): i for i in range(len(ctx.ranges))}
    out = {}
    for g in findings:
        if g.rule == "launch_overhead" and (g.impact.get("ms_total") or 0) > 0 and g.range in ids:
            ms = min(_idle_inside_ms(ctx, ids[g.range], gaps[0], gaps[1]), g.impact["ms_total"])
            if ms > 0:
                out[f"launch_overhead [{g.range}]" if g.range else "launch_overhead"] = ms
    return out


def _idle_inside_ms(ctx: CaptureContext, series_id: int, gs: np.ndarray, ge: np.ndarray) -> float:
    """Idle time (ms) of the sorted gaps ``gs``-``ge`` inside the union of a series' instances."""
    from profiler.capture.intervals import covered_before, union

    if not len(gs):
        return 0.0
    inst = ctx.table.instances_of(series_id)
    us, ue = union(inst["start_ns"].to_numpy(np.int64), inst["end_ns"].to_numpy(np.int64))
    return float((covered_before(gs, ge, ue) - covered_before(gs, ge, us)).sum()) / 1e6


def _leave_shared(f: Finding, shared: dict[str, float], steady_ms: float, keep_severity: bool = False) -> None:
    """Take the time ``shared`` (ms by the finding that prices it) out of a finding's cost: the finding keeps
    the rest and names the others (``shared_with``, ``shared_ms``: never more than its cost, where two of
    them hold the same time), ``included_in`` as well when what is left is under ``IMPACT_MIN_SHARE``. Its
    severity follows what is left. With ``keep_severity`` (a cause with advice of its own: pageable copies
    inside a transfer-bound range's copy time) its cost, share and severity stay as measured and only the
    names are added: ``included_in`` says its share is not to be added to the other's."""
    if not shared:
        return
    cost = f.impact["ms_total"]
    included = min(sum(shared.values()), cost)
    rest = cost - included
    n_inf = f.impact["instances"]
    period = steady_ms * (f.impact.get("gpus") or 1)  # a GPU-time cost's share is of all the GPUs' time
    share = min(max(rest / period, 0.0), 1.0) if period > 0 else None
    names = and_list(list(shared))
    if keep_severity:  # its cost stays its own figure; where all of it is another's time, it says so
        f.impact.update({"shared_with": names, "shared_ms": included})
        if share is None or share < IMPACT_MIN_SHARE:
            f.impact["included_in"] = names
        f.evidence["impact"] = dict(f.impact)
        return
    f.impact.update({
        "ms_total": rest, "share": share,
        "ms_per_instance": rest / n_inf if f.impact["ms_per_instance"] is not None and n_inf else
        f.impact["ms_per_instance"],
        "shared_with": names, "shared_ms": included})
    if share is None or share < IMPACT_MIN_SHARE:  # nothing of its own left: all of it is that time
        f.impact["included_in"] = names
    f.evidence["impact"] = dict(f.impact)
    if not keep_severity:
        f.severity = _banded(f, share, steady_ms)


def _copies_seen_elsewhere(findings: list[Finding], steady_ms: float) -> None:
    """Copy time two findings price is priced once. A transfer_bound finding over the steady state's copies
    (the inference's, or the steady state's as a whole) holds every range's: a transfer_bound finding on
    another range is part of it. A pageable_memcpy finding's saving is copy time a transfer_bound finding
    prices where its pageable copies are that finding's copies (all of them for the steady state's, those in
    its range for a range's): it keeps its severity and advice (pinned memory is a remedy of its own) and
    says which finding holds its time."""
    bound = [g for g in findings if g.rule == "transfer_bound" and (g.impact.get("ms_total") or 0) > 0]
    whole = [g for g in bound if _prices_steady_copies(g)]
    for g in bound:
        if whole and g not in whole and not g.impact.get("included_in"):
            _leave_shared(g, {_name(w): min(g.impact["ms_total"], w.impact["ms_total"]) for w in whole[:1]},
                          steady_ms)
    for f in findings:
        if f.rule != "pageable_memcpy" or f.impact.get("ms_total") is None or f.impact.get("included_in"):
            continue
        copies = f.evidence.get("copies") or 0
        per_range = f.evidence.get("ranges") or {}
        shared = {}
        for g in bound:
            if g.impact.get("included_in"):
                continue
            part = 1.0 if _prices_steady_copies(g) else min(per_range.get(g.range, 0) / copies, 1.0) if copies else 0.0
            ms = min(f.impact["ms_total"] * part, g.impact["ms_total"])
            if ms > 0:
                shared[_name(g)] = ms
        _leave_shared(f, shared, steady_ms, keep_severity=True)


def _prices_steady_copies(f: Finding) -> bool:
    """Whether a transfer_bound finding prices the steady state's copies (the inference's, or all of them)
    rather than its range's own."""
    return "instances_with_copies" in f.evidence or "steady_state" in f.evidence


def _name(f: Finding) -> str:
    """How a finding is named where another says it holds its time: 'rule [range]', or the rule alone."""
    return f"{f.rule} [{f.range}]" if f.range else f.rule


def _idle_in_outliers(ctx: CaptureContext, findings: list[Finding], steady_ms: float) -> None:
    """The jitter part of :func:`_idle_seen_elsewhere` alone (the idle time in jitter's outliers)."""
    for f in findings:
        if f.rule == "gpu_idle" and not f.impact.get("included_in") and f.impact.get("ms_total") is not None:
            _leave_shared(f, _outlier_shares(ctx, findings, _counted_gaps(ctx, f)), steady_ms)


def _outlier_shares(ctx: CaptureContext, findings: list[Finding],
                    gaps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, float]:
    """GPU idle time inside jitter's outlier instances is one cost seen twice: a pause of the host (garbage
    collection, a stall) idles the GPU and stretches the instance it falls in. Jitter keeps that time (it
    names the instances and their cause), so the shares add up once. Per outlier, the shared time is the
    idle time it holds in ``gaps`` beyond what the series' median instance holds, at most its excess over
    the median; per jitter finding never more than it prices (it leaves out what a GPU backlog or the work
    explains). By name ('jitter [range]'), ms."""
    ids = {ctx.label(i): i for i in range(len(ctx.ranges))}
    shared = {f"jitter [{j.range}]": min(_shared_ms(ctx, ids[j.range], gaps), j.impact.get("ms_total") or 0.0)
              for j in findings if j.rule == "jitter" and j.range is not None and j.range in ids}
    return {name: ms for name, ms in shared.items() if ms > 0}


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
