"""host_sleeps: the threads that feed the GPU sleep in OS calls that wait with a timeout (``select``, ``poll``,
``sem_timedwait`` ...) and return after exactly that timeout, over and over (:mod:`profiler.capture.sleeps`):
the program sleeping, not waiting for input. Priced at the GPU idle time those calls cover."""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler.capture.sleeps import Sleeps, idle_during_ns, timed_out_calls
from profiler.findings import Finding
from profiler.fmt import fmt_num, plural
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import pct
from profiler.capture.context import CaptureContext

SLEEP_MIN_CALLS = 5
"""A thread's calls of one name time out when at least this many last the same time ..."""
SLEEP_MIN_MS = 1.0
"""... each at least this long (a zero or tiny timeout is a poll, not a sleep) ..."""
SLEEP_EQUAL_WITHIN_US, SLEEP_EQUAL_WITHIN_SHARE = 200.0, 0.005
"""... equal within this many microseconds or this share of their length, whichever is larger (the kernel's
timer slack is 50 us; input that arrives ends a wait at times that vary by more) ..."""
SLEEP_MIN_CALL_SHARE = 0.5
"""... and they are at least this share of that thread's calls of that name lasting ``min_call_ms`` or more."""
SLEEP_MIN_IDLE_SHARE = 0.05
"""Fire when the GPU idles inside those calls for at least this share of the steady state."""

SLEEP_ADVICE = (
    "The thread that feeds the GPU sleeps: {calls} return after their timeout ({each}), not when input arrives, so "
    "the GPU waits for a timer, not for work. Wake on the work itself (a blocking queue get, a condition variable "
    "or eventfd the producer signals) instead of polling with a timeout, shorten the timeout, or queue the next "
    "inference before the thread waits.")


def sleeps_of(ctx: CaptureContext, t: Thresholds | dict) -> Sleeps:
    """The timed-out calls of the threads that launched GPU work, in the judged window."""
    tids = np.unique(np.concatenate([np.asarray(d.launch_tids, np.int64) for d in ctx.devices] or
                                    [np.zeros(0, np.int64)]))
    lo = ctx.judged_start_ns
    hi = ctx.phases.steady_end_ns if ctx.phases is not None else np.iinfo(np.int64).max
    return timed_out_calls(ctx.table.osrt, tids, lo, hi, min_calls=int(t["min_calls"]), min_ms=t["min_call_ms"],
                           equal_within_us=t["equal_within_us"], equal_within_share=t["equal_within_share"],
                           min_share=t["min_call_share"])


DEFAULTS = {"min_calls": SLEEP_MIN_CALLS, "min_call_ms": SLEEP_MIN_MS, "equal_within_us": SLEEP_EQUAL_WITHIN_US,
            "equal_within_share": SLEEP_EQUAL_WITHIN_SHARE, "min_call_share": SLEEP_MIN_CALL_SHARE,
            "min_idle_share": SLEEP_MIN_IDLE_SHARE}


def describe(groups: list[dict[str, Any]]) -> tuple[str, str]:
    """("5 select calls", "50.06 ms each") of the groups, the longest first."""
    groups = sorted(groups, key=lambda g: -g["total_ms"])
    calls = ", ".join(f"{g['calls']} {g['name']} {plural(g['calls'], 'call')}" for g in groups[:3])
    each = ", ".join(f"{fmt_num(g['duration_ms'], 4)} ms each" for g in groups[:3])
    return calls, each


@rule("host_sleeps", scope="capture", defaults=DEFAULTS)
def host_sleeps(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Waits with a timeout that return after exactly that timeout, repeatedly: the program sleeping."""
    found = sleeps_of(ctx, t)
    if not found.groups:
        return []
    osrt = ctx.table.osrt
    start, end = osrt.start_ns[found.rows], osrt.end_ns[found.rows]
    idle_ms = idle_during_ns(ctx.devices, start, end) / 1e6
    steady_ms = ctx.steady_ns / 1e6
    if steady_ms <= 0 or idle_ms < t["min_idle_share"] * steady_ms:
        return []
    calls, each = describe(found.groups)
    sleep_ms = sum(g["total_ms"] for g in found.groups)
    return [Finding(
        rule="host_sleeps", severity="medium",  # impact sets it from the idle time
        range=None,
        title=(f"The host sleeps: {calls} return after the same time ({each}): a timeout, not input arriving; the "
               f"GPU idles {fmt_num(idle_ms, 4)} ms inside them ({pct(idle_ms / steady_ms)}% of the steady state)"),
        evidence={"groups": found.groups, "sleep_ms": sleep_ms, "gpu_idle_during_sleeps_ms": idle_ms,
                  "calls": int(len(found.rows))},
        threshold=t.pick("min_calls", "min_call_ms", "equal_within_us", "equal_within_share", "min_call_share",
                         "min_idle_share"),
        recommendation=SLEEP_ADVICE.format(calls=calls, each=each),
    )]
