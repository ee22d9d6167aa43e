"""Sleeps that look like waits: OS calls given a timeout (``select``, ``poll``, ``epoll_wait``, ``sem_timedwait``,
``pthread_cond_timedwait`` ...) that return after that timeout, over and over, are the program sleeping, not
waiting for input that arrives.

nsys records no call arguments, so the timeout is not in the export: a thread's calls of one name count as timed
out when many of them last the same time, equal within a declared tolerance (a wait for input returns when the
input comes, at times that vary), and they are most of that thread's calls of that name long enough to matter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture.blockwise import blocks

TIMED_CALLS = ("select", "pselect", "pselect6", "poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2",
               "sem_timedwait", "sem_clockwait", "pthread_cond_timedwait", "pthread_cond_clockwait",
               "pthread_mutex_timedlock", "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock",
               "mq_timedreceive", "sigtimedwait")
"""OS runtime calls (as nsys names them) that wait for something but give up after a timeout. Plain sleeps
(``nanosleep``, ``clock_nanosleep``, ``usleep``) are named sleeps wherever they show (``gpu_idle``, ``jitter``)."""


@dataclass
class Sleeps:
    """Timed-out calls found: per (thread, name) group, its calls' rows and the time they take."""

    groups: list[dict[str, Any]] = field(default_factory=list)  # thread, name, calls, duration_ms, spread_us ...
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the timed-out calls (osrt rows)

    @property
    def names(self) -> set[str]:
        return {g["name"] for g in self.groups}


def _cluster(d: np.ndarray, abs_ns: float, rel: float) -> tuple[int, int]:
    """(first, stop) of the largest run of sorted durations ``d`` within ``max(abs_ns, rel * d_first)`` of its
    first: the calls that last the same time."""
    stop = np.searchsorted(d, d + np.maximum(abs_ns, rel * d), "right")
    i = int(np.argmax(stop - np.arange(len(d))))
    return i, int(stop[i])


def timed_out_calls(osrt: Any, tids: np.ndarray, lo_ns: int, hi_ns: int, *, min_calls: int, min_ms: float,
                    equal_within_us: float, equal_within_share: float, min_share: float) -> Sleeps:
    """The calls of ``TIMED_CALLS`` by the threads ``tids`` starting in ``[lo_ns, hi_ns)`` that time out: per
    thread and name, the largest set of at least ``min_calls`` calls of ``min_ms`` or more lasting the same time
    (within ``equal_within_us`` or ``equal_within_share`` of it, whichever is larger) that is at least
    ``min_share`` of that thread's calls of that name lasting ``min_ms`` or more."""
    out = Sleeps()
    if osrt is None or not len(osrt):
        return out
    timed = np.array([str(n) in TIMED_CALLS for n in osrt.names], dtype=bool)
    if not timed.any():
        return out
    rows = np.concatenate([sl.start + np.flatnonzero(
        timed[osrt.name_code[sl]] & osrt.top_level[sl] & np.isin(osrt.tid[sl], tids) &
        (osrt.start_ns[sl] >= lo_ns) & (osrt.start_ns[sl] < hi_ns)) for sl in blocks(len(osrt))])
    dur = osrt.end_ns[rows] - osrt.start_ns[rows]
    rows, dur = rows[dur >= min_ms * 1e6], dur[dur >= min_ms * 1e6]
    found = []
    for tid in np.unique(osrt.tid[rows]).tolist():
        for code in np.unique(osrt.name_code[rows[osrt.tid[rows] == tid]]).tolist():
            m = (osrt.tid[rows] == tid) & (osrt.name_code[rows] == code)
            r, d = rows[m], dur[m]
            order = np.argsort(d, kind="stable")
            r, d = r[order], d[order]
            i, j = _cluster(d, equal_within_us * 1e3, equal_within_share)
            if j - i < min_calls or j - i < min_share * len(d):
                continue
            found.append(r[i:j])
            out.groups.append({"thread": int(tid), "name": str(osrt.names[code]), "calls": j - i,
                               "of_calls": len(d), "duration_ms": float(np.median(d[i:j])) / 1e6,
                               "spread_us": float(d[j - 1] - d[i]) / 1e3, "total_ms": float(d[i:j].sum()) / 1e6})
    if found:
        out.rows = np.sort(np.concatenate(found))
    return out


def idle_during_ns(devices: list[Any], start: np.ndarray, end: np.ndarray) -> int:
    """GPU idle time (ns) inside the calls ``[start, end)``: per device, its idle gaps' time that the union of the
    calls covers, on the device where it is longest."""
    if not len(start):
        return 0
    us, ue = intervals.union(start, end)
    best = 0
    for d in devices:
        gs, ge = d.gap_start_ns, d.gap_end_ns
        if not len(gs):
            continue
        covered = intervals.covered_before(us, ue, ge) - intervals.covered_before(us, ue, gs)
        best = max(best, int(covered.sum()))
    return best
