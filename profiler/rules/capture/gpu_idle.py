"""gpu_idle: idle gaps on a device inside its active window, and where the launching threads were
meanwhile (CUDA and OS runtime calls, NVTX ranges, their own code); start-up gaps are warm-up."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.capture import blockwise
from profiler.capture import summary as SM
from profiler.capture.series import HostCalls
from profiler.findings import Finding
from profiler.fmt import fmt_num, plural
from profiler.rules import Thresholds, rule
from profiler.rules.capture import _common
from profiler.rules.capture._common import band, pct
from profiler.rules.capture._idle_cause import advice, dominant_cause
from profiler.rules.capture._idle_host import host_during
from profiler.capture.context import CaptureContext

IDLE_MIN_GAP_US = 50.0
"""A gap shorter than this is launch latency, not idleness (nsys's own 500 ms is far too coarse)."""
IDLE_MIN_FRACTION = 0.10
"""Fire when gaps of at least ``min_gap_us`` add up to this share of the device's active window."""
IDLE_TOP_GAPS = 5
IDLE_HIGH_FRACTION, IDLE_MEDIUM_FRACTION = 0.5, 0.25
"""Severity bands over the idle share of the active window."""
ONE_OFF_SHARE = 0.5
"""A gap holding at least this share of the idle time, without which the rest stays under
``min_idle_fraction``, is a one-time pause: reported low, not as steady idleness."""
IDLE_INIT_SHARE = 0.5
"""A gap at least this share of which the launching threads spend in start-up calls is warm-up."""
INIT_API_PREFIXES = ("cuInit", "cuCtxCreate", "cuDevicePrimaryCtxRetain", "cuLibraryLoad", "cuLibraryGet",
                     "cuModuleLoad", "cuModuleGet", "cuKernelGet", "cudaSetDevice")
"""One-off start-up work (context creation, lazy module loading): a gap spent mostly in these calls is
warm-up, reported apart and not counted as idleness ..."""
CONTEXT_FREE = re.compile(r"^cudaFree(_v\d+)?$")
"""... and so is a thread's first cudaFree (``cudaFree(0)``, the customary context init); its later ones free
memory in the loop, which is idleness like any other call."""

SHORT_GAPS_MIN = 100
SHORT_GAPS_MAX_LAUNCHES = 10
"""With an inference of fewer launches than this (launch_overhead's minimum) and at least SHORT_GAPS_MIN gaps,
idleness in gaps of any length counts once it reaches ``high_idle_fraction`` of the active window."""
SHORT_GAPS_ADVICE = (
    "Each inference is a few short kernels between host round trips (launch, wait, the host's own code): the "
    "host's per-inference cost, not the GPU, sets the rate. Give each launch more work (batch requests), keep "
    "several inferences in flight instead of waiting on each one, or move the per-request path off Python.")
TRT_IDLE_ADVICE = (
    " With TensorRT: keep the next inference queued before waiting on this one (enqueueV3 on a second execution "
    "context with its own stream), and replay the enqueue as a CUDA graph (--useCudaGraph) so the host feeds the "
    "GPU in one call.")


_FEW_THREADS = 8
"""Up to this many launching threads, a call's thread is matched by comparisons (np.isin would build
temporaries the size of a block)."""


def _on_threads(tid: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """``np.isin(tid, tids)``, by comparisons when the threads are few."""
    if len(tids) > _FEW_THREADS:
        return np.isin(tid, tids)
    out = np.zeros(len(tid), dtype=bool)
    for t in np.unique(tids).tolist():
        out |= tid == t
    return out


def _init_ns(api: HostCalls, is_init: np.ndarray, first_free: np.ndarray, d: SM.DeviceGaps, bi: np.ndarray
             ) -> np.ndarray:
    """Time (ns) the launching threads spend in start-up calls (names ``is_init``, and the rows
    ``first_free``) during each of the gaps ``bi``; the calls in blocks of rows (a capture can make a
    cuKernelGetName call per launch)."""
    gs, ge = d.gap_start_ns[bi], d.gap_end_ns[bi]
    init_ns = np.zeros(len(bi))
    for sl in blockwise.blocks(len(api), _common.CALL_BLOCK):
        rows = sl.start + np.flatnonzero(is_init[api.name_code[sl]] & _on_threads(api.tid[sl], d.launch_tids))
        rows = blockwise.sorted_distinct(np.concatenate([rows, first_free[(first_free >= sl.start) & (first_free < sl.stop)]]))
        rows = rows[_on_threads(api.tid[rows], d.launch_tids)]
        g, _, ov = SM.overlap_by_name(gs, ge, api.start_ns[rows], api.end_ns[rows])
        init_ns += np.bincount(g, weights=ov, minlength=len(bi))  # integer ns: the float sums are exact
    return init_ns


def _first_calls(api: HostCalls, named: np.ndarray) -> np.ndarray:
    """Rows of each thread's first call (earliest start) among the names ``named``, in row order."""
    rows = np.concatenate([sl.start + np.flatnonzero(named[api.name_code[sl]])
                           for sl in blockwise.blocks(len(api), _common.CALL_BLOCK)] or [np.zeros(0, np.int64)])
    if not len(rows):
        return rows.astype(np.int64)
    order = rows[np.lexsort((api.start_ns[rows], api.tid[rows]))]
    firsts = order[np.concatenate(([True], api.tid[order][1:] != api.tid[order][:-1]))]
    return np.sort(firsts).astype(np.int64)


@dataclass
class _Idle:
    """A device's idle gaps that count (long enough, not warm-up) and its active window without warm-up."""

    gs: np.ndarray  # start (ns) of each counted gap
    ge: np.ndarray  # its end (ns)
    active_ns: float
    idle_ns: float
    init_gaps: int  # gaps spent mostly in start-up calls
    init_ns: float

    @property
    def fraction(self) -> float:
        """The idle share of the active window (0 for an empty window)."""
        return self.idle_ns / self.active_ns if self.active_ns > 0 else 0.0


def _idle_of(d: SM.DeviceGaps, api: HostCalls, is_init: np.ndarray, first_free: np.ndarray, t: Thresholds,
             min_gap_us: float | None = None) -> _Idle:
    """The gaps long enough to count (``min_gap_us``, the threshold's unless given: a launch-bound loop has a
    short gap per kernel, never looked at); of those, gaps the launching threads spend mostly in start-up
    calls are warm-up, not idleness."""
    bi = d.gaps_of_at_least(float(t["min_gap_us"] if min_gap_us is None else min_gap_us) * 1e3)
    gap_ns = d.gap_end_ns[bi] - d.gap_start_ns[bi]
    init_gap = _init_ns(api, is_init, first_free, d, bi) >= t["init_gap_share"] * gap_ns
    big = bi[~init_gap]
    init_ns = float(gap_ns[init_gap].sum())
    return _Idle(gs=d.gap_start_ns[big], ge=d.gap_end_ns[big], active_ns=d.active_ns - init_ns,
                 idle_ns=float(gap_ns[~init_gap].sum()), init_gaps=int(init_gap.sum()), init_ns=init_ns)


@rule("gpu_idle", scope="capture", defaults={
    "min_gap_us": IDLE_MIN_GAP_US, "min_idle_fraction": IDLE_MIN_FRACTION, "top_gaps": IDLE_TOP_GAPS,
    "init_gap_share": IDLE_INIT_SHARE, "one_off_gap_share": ONE_OFF_SHARE, "high_idle_fraction": IDLE_HIGH_FRACTION,
    "medium_idle_fraction": IDLE_MEDIUM_FRACTION})
def gpu_idle(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Idle gaps on a device inside its active window, and where the host was meanwhile."""
    api = ctx.table.api
    is_init = np.array([str(n).startswith(INIT_API_PREFIXES) for n in api.names], dtype=bool)
    first_free = _first_calls(api, np.array([bool(CONTEXT_FREE.match(str(n))) for n in api.names], dtype=bool))
    out = []
    for d in ctx.devices:
        if d.active_ns <= 0:
            continue
        idle = _idle_of(d, api, is_init, first_free, t)
        if idle.fraction >= t["min_idle_fraction"] and len(idle.gs):
            out.append(_finding(ctx, d, idle, t))
        elif _few_launches(ctx):
            idle = _idle_of(d, api, is_init, first_free, t, min_gap_us=0.0)
            if idle.fraction >= t["high_idle_fraction"] and len(idle.gs) >= SHORT_GAPS_MIN:
                out.append(_finding(ctx, d, idle, t, short=True))
    return out


def _few_launches(ctx: CaptureContext) -> bool:
    """Whether the inference launches too few kernels for launch_overhead to judge it (a request of one
    short kernel and a wait): then the GPU idling between requests in gaps too short to count one by one
    is this rule's to report."""
    unit = getattr(ctx, "unit", None)
    if unit is None or unit.source == "window" or unit.series_id is None:
        return False
    r = next((r for r in ctx.ranges if r["series_id"] == unit.series_id), None)
    return r is not None and r["launches_per_instance"] < SHORT_GAPS_MAX_LAUNCHES


def _finding(ctx: CaptureContext, d: SM.DeviceGaps, idle: _Idle, t: Thresholds, short: bool = False) -> Finding:
    """The finding for one device idle for at least ``min_idle_fraction`` of its active window (``short``:
    at least ``high_idle_fraction`` in gaps of any length, around an inference of few launches): the host's
    whereabouts during the gaps name the cause and the advice."""
    gs, ge = idle.gs, idle.ge
    top = np.argsort(-(ge - gs), kind="stable")[: int(t["top_gaps"])]
    host, per_gap, ranges_ns = host_during(ctx, d, gs, ge, detail=top)
    cause = dominant_cause(ctx, host, ranges_ns, idle.idle_ns / 1e6)
    sev, what, one_off = _short_headline(ctx, d, idle) if short else _headline(ctx, d, idle, top, t)
    first_uses = cause.majority and cause.kind == "lazy_load"
    if first_uses:
        # most of the idle time is kernels' first launches loading their modules: a one-time cost however
        # much of a short capture it fills (a capture of first uses has no steady state to judge)
        sev, what = "low", what + " (kernels' first launches: a one-time cost)"
    largest = float((ge - gs).max())
    text, setup = _recommendation(ctx, cause, short)
    sleeps = _timed_out(ctx, cause) if not setup and not short else None
    if sleeps is not None:
        text = sleeps
    return Finding(
        rule="gpu_idle", severity=sev, range=None,
        title=f"{what}; meanwhile the host was {cause.sentence()}"
        + (", returning after the same time each call: a timeout, the host sleeping" if sleeps is not None else ""),
        evidence={
            "device_id": d.device_id, "active_window_ms": idle.active_ns / 1e6, "busy_ms": d.busy_ns / 1e6,
            "initialization_gaps": idle.init_gaps, "initialization_gaps_ms": idle.init_ns / 1e6,
            "idle_ms": idle.idle_ns / 1e6, "idle_fraction": idle.fraction, "gaps": len(gs),
            "largest_gap_ms": largest / 1e6, "median_gap_us": float(np.median(ge - gs)) / 1e3,
            "largest_gap_share": largest / idle.idle_ns, "one_time_pause": one_off, "host_cause": cause.kind,
            **({"one_time_cost": True} if first_uses else {}),
            **({"counted_min_gap_us": 0.0} if short else {}),  # gaps of any length: what impact shares out
            **({"setup_repeats": True} if setup else {}),  # the cause is repeated_setup's
            **({"host_sleeps": True} if sleeps is not None else {}),  # the cause is host_sleeps's
            "host_cause_range": cause.name if cause.kind == "range" else None,
            "host_during_gaps_ms": host, "top_gaps": _top_gaps(ctx, gs, ge, top, per_gap),
        },
        threshold=t.pick("min_gap_us", "min_idle_fraction"),
        recommendation=text,
    )


def _recommendation(ctx: CaptureContext, cause: Any, short: bool) -> tuple[str, bool]:
    """The advice for the cause, and whether the cause is setup calls (module loads, allocations ...) that recur
    between inferences: repeated_setup's diagnosis, whose advice (build once, reuse) replaces warm-up and
    CUDA-graph advice then."""
    if not short and cause.kind in ("api", "lazy_load") and _is_setup(cause.name):
        from profiler.rules.capture import repeated_setup as RS

        setup = RS.setup_of(ctx, RS.DEFAULTS)
        if RS.recurs(setup, RS.DEFAULTS):
            return ("The gaps are spent in setup work that repeats between inferences (repeated_setup). "
                    + RS.advice(setup, ctx.tensorrt)), True
    return ((SHORT_GAPS_ADVICE if short else advice(cause, ctx.tensorrt))
            + (TRT_IDLE_ADVICE if ctx.tensorrt and cause.kind != "range" else "")), False


def _timed_out(ctx: CaptureContext, cause: Any) -> str | None:
    """host_sleeps' advice when the OS call that fills the gaps waits with a timeout and returns after it,
    repeatedly (the program sleeping: never a slow producer or a wait for input); else None."""
    if cause.kind != "os_runtime":
        return None
    from profiler.rules.capture import host_sleeps as HS

    found = HS.sleeps_of(ctx, HS.DEFAULTS)
    groups = [g for g in found.groups if g["name"] == cause.name]
    if not groups:
        return None
    calls, each = HS.describe(groups)
    return "The gaps are the host sleeping (host_sleeps). " + HS.SLEEP_ADVICE.format(calls=calls, each=each)


def _is_setup(names: str) -> bool:
    """Whether the cause's call names (``/``-joined for allocation calls) are all setup calls."""
    from profiler.capture.recurring import setup_kind

    return bool(names) and all(setup_kind(n) is not None for n in names.split("/"))


def _short_headline(ctx: CaptureContext, d: SM.DeviceGaps, idle: _Idle) -> tuple[str, str, bool]:
    """(severity, what the title says, False) for a device idle most of its window in short gaps."""
    med_us = float(np.median(idle.ge - idle.gs)) / 1e3
    return "high", (f"{_window(ctx, d, idle)} in {len(idle.gs)} short gaps (median {med_us:.3g} us) between "
                    "inferences of a few kernels each"), False


def _window(ctx: CaptureContext, d: SM.DeviceGaps, idle: _Idle) -> str:
    """'GPU 0 (name) busy B% of its W ms active window, idle I% of it': the busy share of this window reads
    against the summary's."""
    names = ctx.gpu_names()
    dev_label = f"GPU {d.device_id}" + (f" ({names[d.device_id]})" if names.get(d.device_id) else "")
    return (f"{dev_label} busy {pct(d.busy_ns / idle.active_ns)}% of its {fmt_num(idle.active_ns / 1e6, 4)} ms active "
            f"window, idle {pct(idle.fraction)}% of it")


def _top_gaps(ctx: CaptureContext, gs: np.ndarray, ge: np.ndarray, top: np.ndarray, per_gap: dict[int, dict],
              ) -> list[dict[str, Any]]:
    """The longest gaps: when (ms from the capture's start), how long, and the host's three longest calls
    of each kind during each."""
    return [{
        "start_ms": (gs[i] - ctx.capture_start_ns) / 1e6, "duration_ms": (ge[i] - gs[i]) / 1e6,
        "host": {k: dict(sorted(v.items(), key=lambda kv: -kv[1])[:3]) for k, v in per_gap[int(i)].items()},
    } for i in top]


def _headline(ctx: CaptureContext, d: SM.DeviceGaps, idle: _Idle, top: np.ndarray, t: Thresholds,
              ) -> tuple[str, str, bool]:
    """(severity, what the title says of the idleness, whether it is one pause): one gap holding most of
    the idle time, without which the rest would not fire, is a one-time pause (phases of the program, a
    one-time allocation), reported low rather than as steady idleness."""
    frac, idle_ns, active_ns = idle.fraction, idle.idle_ns, idle.active_ns
    n_gaps = len(idle.gs)
    largest = float((idle.ge - idle.gs).max())
    one_off = n_gaps > 1 and largest >= t["one_off_gap_share"] * idle_ns and \
        (idle_ns - largest) / active_ns < t["min_idle_fraction"]
    window = _window(ctx, d, idle)
    if one_off:
        what = (f"{window}, {pct(largest / idle_ns)}% of that in one "
                f"gap of {largest / 1e6:.3g} ms at {(idle.gs[top[0]] - ctx.capture_start_ns) / 1e6:.6g} ms (a "
                f"one-time pause; the other {n_gaps - 1} {plural(n_gaps - 1, 'gap')} idle "
                f"{pct((idle_ns - largest) / active_ns)}%)")
        return "low", what, True
    what = f"{window} in {n_gaps} {plural(n_gaps, 'gap')} of {t['min_gap_us']:g} us or more"
    return band(frac, t["high_idle_fraction"], t["medium_idle_fraction"]), what, False


