"""The host's waits on the GPU: blocking synchronisation and copy calls, and waits made by polling.

A host waits on its GPU in one of two ways. It blocks in a call that returns when the work is done
(``cudaStreamSynchronize``, ``cudaEventSynchronize``, a synchronous copy of a result). Or it polls: it calls
``cudaEventQuery`` or ``cudaStreamQuery`` over and over until the work is done, with nothing else in between
(a spin loop, ``while not event.query(): pass``). A poll call itself lasts about a microsecond. What the
host waits is the whole run of them, from the first call's start to the last one's end; a polite poller
sleeps between its polls (``time.sleep(0.0001)``: ``clock_nanosleep`` in the OS runtime calls), which is
waiting too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler.capture.activity import HostCalls
from profiler.capture.blockwise import blocks
from profiler.capture.frames import ApiCategory
from profiler.capture.keys import Sorted
from profiler.capture.nsys_names import base_api_name

POLL_NAMES = frozenset({"cudaEventQuery", "cuEventQuery", "cudaStreamQuery", "cuStreamQuery"})
"""CUDA calls that ask whether work is done without waiting for it (base names, :func:`base_api_name`)."""
POLL_GAP_NS = 20_000
"""Two poll calls of one thread belong to one wait when the second starts at most this long after the first
ends (less the thread's sleeps), with no other call of the thread in between. A spin loop in Python polls
every microsecond or two (a garbage-collector pause now and then splits a wait, losing only the pause); a
host that checks the event between chunks of its own work of 30 us or more is working, not waiting."""
POLL_MAX_SLEEP_GAP_NS = 50_000_000
"""Polls further apart than this are not one wait, whatever the thread does between them."""
SLEEP_CALLS = ("clock_nanosleep", "nanosleep", "usleep", "sleep")
"""OS runtime calls that only wait for time to pass (name prefixes): a loop pacing itself, or polling."""
ASLEEP_BETWEEN_POLLS = (*SLEEP_CALLS, "sched_yield")
"""OS runtime calls in which a thread between two of its polls is still waiting (name prefixes)."""
POLL_MIN_CALLS = 2
"""A wait is at least this many poll calls in a row: a single poll that finds the work done waited for nothing."""


def polled_waits(api: HostCalls, srt: Sorted, osrt: HostCalls | None = None,
                 threads: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) of each polled wait of the host: a run of at least ``POLL_MIN_CALLS`` top-level poll
    calls of one thread with no other top-level call of that thread between them, each starting at most
    ``POLL_GAP_NS`` after the one before ended, not counting the time the thread spent in sleeping OS runtime
    calls (``osrt``, ``ASLEEP_BETWEEN_POLLS``) in between; only the waits of ``threads`` when given. ``srt`` orders
    ``api`` by (thread, start). The rows are walked in that order a block at a time; only the poll calls' arrays
    are made."""
    empty = np.zeros(0, dtype=np.int64)
    polls = np.array([base_api_name(str(n)) in POLL_NAMES for n in api.names], dtype=bool)
    if not len(api) or not polls.any():
        return empty, empty
    rows_out, paired_out = [], []
    prev = (False, -1, 0)  # the last top-level call before the block: (a poll?, thread, end)
    for sl in blocks(len(srt)):
        top = srt.part(api.top_level, sl.start, sl.stop)
        pos = np.flatnonzero(top) + sl.start  # sorted positions of the block's top-level calls
        if not len(pos):
            continue
        rows = srt.rows(pos)
        poll, tid = polls[api.name_code[rows]], api.tid[rows]
        before_poll = np.concatenate(([prev[0]], poll[:-1]))
        before_tid = np.concatenate(([prev[1]], tid[:-1]))
        rows_out.append(rows[poll])
        paired_out.append((before_poll & (before_tid == tid))[poll])  # the thread's call before it is a poll
        prev = (bool(poll[-1]), int(tid[-1]), int(api.end_ns[rows[-1]]))
    rows = np.concatenate(rows_out) if rows_out else empty
    if not len(rows):
        return empty, empty
    paired = np.concatenate(paired_out)
    start = api.start_ns[rows]
    gap_lo = np.concatenate(([0], api.end_ns[rows[:-1]]))  # the end of the poll before (when paired)
    gap = start - gap_lo
    linked = paired & (gap <= POLL_GAP_NS)
    maybe = np.flatnonzero(paired & ~linked & (gap <= POLL_MAX_SLEEP_GAP_NS))
    if len(maybe) and osrt is not None and len(osrt):
        asleep = _asleep_ns(osrt, api.tid[rows[maybe]], gap_lo[maybe], start[maybe])
        linked[maybe] = gap[maybe] - asleep <= POLL_GAP_NS
    run = np.cumsum(~linked) - 1  # runs of linked polls, in (thread, start) order
    size = np.bincount(run)
    first = np.concatenate(([0], np.cumsum(size)[:-1]))
    keep = size >= POLL_MIN_CALLS
    if threads is not None:
        keep &= np.isin(api.tid[rows[first]], threads)
    return start[first[keep]], api.end_ns[rows[first[keep] + size[keep] - 1]]


def _asleep_ns(osrt: HostCalls, tid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per interval [lo, hi) of thread ``tid``, the time (ns) that thread spent in sleeping OS runtime calls
    inside it. A thread's sleeps do not overlap one another, and none overlaps the poll calls around a gap."""
    out = np.zeros(len(lo), dtype=np.int64)
    sleeping = np.array([str(n).startswith(ASLEEP_BETWEEN_POLLS) for n in osrt.names], dtype=bool)
    rows = np.flatnonzero(sleeping[osrt.name_code]) if sleeping.any() else np.zeros(0, dtype=np.int64)
    for t in np.unique(tid):
        mine = rows[osrt.tid[rows] == t]
        if not len(mine):
            continue
        mine = mine[np.argsort(osrt.start_ns[mine], kind="stable")]
        s, e = osrt.start_ns[mine], osrt.end_ns[mine]
        done = np.concatenate(([0], np.cumsum(e - s)))
        q = np.flatnonzero(tid == t)
        a, b = np.searchsorted(s, lo[q], "left"), np.searchsorted(s, hi[q], "left")
        last_over = np.where(b > a, np.maximum(e[np.maximum(b - 1, 0)] - hi[q], 0), 0)
        out[q] = done[b] - done[a] - last_over
    return out


FEEDER_MIN_SHARE = 0.25
"""A thread feeds the GPU when the work it launched takes at least this share of the GPU time of the thread
that launched the most (a completion thread's result copy or small post-processing kernel does not)."""


def _feeders(table: Any) -> np.ndarray:
    """The threads that feed the GPU: the ones whose launched work (kernels, graphs, copies, memsets) takes
    at least ``FEEDER_MIN_SHARE`` of the GPU time of the thread that launched the most, summed a block of
    activity rows at a time."""
    act = table.activity
    tid = act.api_tid
    if not len(act) or tid.strides == (0,):
        return np.unique(tid[:1])
    busy: dict[int, float] = {}
    for sl in blocks(len(act)):
        t, inv = np.unique(tid[sl], return_inverse=True)
        ns = np.bincount(inv, weights=(act.end_ns[sl] - act.start_ns[sl]).astype(np.float64), minlength=len(t))
        for k, v in zip(t.tolist(), ns.tolist()):
            if k >= 0:  # work whose launch call is not in the capture has no thread
                busy[k] = busy.get(k, 0.0) + v
    top = max(busy.values(), default=0.0)
    return np.array(sorted(k for k, v in busy.items() if v >= FEEDER_MIN_SHARE * top), dtype=np.int64)


def host_waits_on_gpu_ms(table: Any, devices: list[Any], lo_ns: int, hi_ns: int) -> float:
    """Time (ms) the host's threads spend waiting on a GPU while it works, within [lo_ns, hi_ns): blocked in
    CUDA synchronisation calls and copy calls (``.cpu()``, ``.item()``: a synchronous copy waits for the work
    before it), or polling until the work is done (:func:`polled_waits`). Only the threads that feed the GPU
    count (:func:`_feeders`): a thread that waits for results while another one launches the work (a completion
    or callback thread) does not make the launching thread wait. Summed over those threads, on the device
    where it is longest. A copy call's time while the GPU idles (a pageable copy's staging on the host) is the
    host's own work."""
    api = table.api
    if not len(api) or not devices:
        return 0.0
    feeders = _feeders(table)
    rows = np.flatnonzero(api.blocking_sync | ((api.category == ApiCategory.memcpy) & api.top_level))
    rows = rows[np.isin(api.tid[rows], feeders)]
    poll_start, poll_end = polled_waits(api, table.api_sorted, getattr(table, "osrt", None), feeders)
    if not len(rows) and not len(poll_start):
        return 0.0
    from profiler.capture.intervals import covered_before

    start = np.concatenate((api.start_ns[rows], poll_start))
    end = np.concatenate((api.end_ns[rows], poll_end))
    best = 0
    for d in devices:  # waiting time inside the device's active window, less its idle gaps
        s = np.clip(start, max(lo_ns, d.active_start_ns), min(hi_ns, d.active_end_ns))
        e = np.clip(end, max(lo_ns, d.active_start_ns), min(hi_ns, d.active_end_ns))
        e = np.maximum(e, s)
        idle = covered_before(d.gap_start_ns, d.gap_end_ns, e) - covered_before(d.gap_start_ns, d.gap_end_ns, s)
        busy = (e - s) - idle
        best = max(best, int(busy.sum()))
    return best / 1e6
