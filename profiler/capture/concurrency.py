"""Contexts, threads and throughput over the steady state: who shares the GPU, and how.

- **Contexts**: the CUDA contexts whose kernels run on each GPU. Without MPS the GPU time-slices between
  contexts: kernels of different contexts never run at once, so two contexts (two processes, or
  ``cuCtxCreate`` per thread) on one GPU add no concurrency. ``overlap_ms`` is the time kernels of two
  contexts of one device ran at the same moment (summed over pairs).
- **Threads**: the threads that launch GPU work, each with its kernels, its inferences and its time blocked
  in lock waits (:data:`LOCK_WAIT_CALLS`, from the OS runtime trace); ``lock_wait_overlap_ms`` is the time two
  launching threads both waited at once. Threads that each wait long while the other never does at the
  same time hand a lock back and forth: they take turns.
- **Throughput**: steady-state inferences per second in all, per thread and per stream (the stream of most of
  each inference's GPU work).

``concurrency_json`` is the analysis JSON's ``concurrency`` entry; the capture rules ``time_slicing`` and
``serialised_threads`` read the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.frames import factor, frame_of, i64

LOCK_WAIT_CALLS = ("sem_wait", "sem_timedwait", "sem_clockwait", "pthread_mutex_lock", "pthread_mutex_timedlock",
                   "pthread_mutex_clocklock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
                   "pthread_rwlock_timedrdlock", "pthread_rwlock_timedwrlock")
"""OS runtime calls that block on a lock or semaphore (Python's threading.Lock is a semaphore wait). Condition
variable waits are left out: they wait for an event (work to arrive), not for another thread to let go."""
MIN_THREAD_KERNELS = 10
"""A thread launching fewer kernels in the steady state is not a launching thread (a one-off upload, a
watchdog)."""
MIN_CONTEXT_KERNELS = 10
"""A context with fewer kernels in the steady state does not share the GPU (a context that only initialised)."""


@dataclass
class Concurrency:
    """The numbers of ``concurrency_json`` (ns inside, ms in the JSON)."""

    steady_ns: int
    contexts: list[dict[str, Any]] = field(default_factory=list)
    device_overlap_ns: dict[int, int] = field(default_factory=dict)
    threads: list[dict[str, Any]] = field(default_factory=list)
    lock_wait_overlap_ns: int = 0
    thread_gpu_overlap_ns: int = 0
    throughput: dict[str, Any] | None = None
    _waits: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _gpu: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def overlaps_among(self, tids: list[int]) -> tuple[int, int]:
        """(lock-wait, GPU-work) time two of ``tids`` spent at once (ns, summed over pairs)."""
        waits = gpu = 0
        for i, a in enumerate(tids):
            for b in tids[i + 1:]:
                waits += intervals.overlap_length(*self._waits[a], *self._waits[b])
                gpu += intervals.overlap_length(*self._gpu[a], *self._gpu[b])
        return waits, gpu


def measure(trace: Any, lo: int, hi: int, unit: Any = None, table: Any = None,
            steady: tuple[int, int] | None = None) -> Concurrency:
    """Contexts and launching threads of the kernels that start in [lo, hi] (the judged period), and with the
    inference ``unit`` of ``table`` its throughput over the ``steady`` state (start, end; default [lo, hi])."""
    out = Concurrency(steady_ns=max(int(hi - lo), 0))
    k = frame_of(trace, "kernels")
    if not len(k):
        return out
    start, end = i64(k, "start_ns", 0), i64(k, "end_ns", 0)
    keep = (start >= lo) & (start <= hi)
    start, end = start[keep], np.maximum(end[keep], start[keep])
    ctx, dev, tid = i64(k, "context_id", -1)[keep], i64(k, "device_id", 0)[keep], i64(k, "api_tid", -1)[keep]
    stream, pid = i64(k, "stream_id", -1)[keep], i64(k, "pid", -1)[keep]
    out.contexts, out.device_overlap_ns = _contexts(dev, pid, ctx, tid, stream, start, end)
    out.threads, out._waits, out._gpu = _threads(trace, tid, start, end, lo, hi)
    out.lock_wait_overlap_ns, out.thread_gpu_overlap_ns = out.overlaps_among([t["tid"] for t in out.threads])
    if unit is not None and table is not None:
        s_lo, s_hi = steady or (lo, hi)
        out.throughput = throughput(table, unit, max(int(s_hi - s_lo), 0))
        counts = {t["tid"]: t["count"] for t in (out.throughput or {}).get("per_thread", [])}
        for t in out.threads:
            t["inferences"] = counts.get(t["tid"], 0)
    return out


def _contexts(dev, pid, ctx, tid, stream, start, end) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Per (device, process, context id): context ids are numbered per process, so two processes' first
    contexts share an id."""
    rows, unions = [], {}
    for d, p, c in _distinct_rows(dev, pid, ctx):
        m = (dev == d) & (pid == p) & (ctx == c)
        if m.sum() < MIN_CONTEXT_KERNELS:
            continue
        us, ue = intervals.union(start[m], end[m])
        unions[d, p, c] = (us, ue)
        threads = pd.Series(tid[m]).value_counts()
        rows.append({"device": int(d), "pid": int(p), "context": int(c), "kernels": int(m.sum()),
                     "busy_ns": int((ue - us).sum()),
                     "threads": [int(t) for t in threads.index[threads >= MIN_THREAD_KERNELS]],
                     "streams": sorted(int(s) for s in np.unique(stream[m]))})
    overlap: dict[int, int] = {}
    keys = sorted(unions)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[0] == b[0]:
                overlap[a[0]] = overlap.get(a[0], 0) + intervals.overlap_length(*unions[a], *unions[b])
    return rows, overlap


def _distinct_rows(*cols: np.ndarray) -> list[tuple[int, ...]]:
    """The distinct rows of equal-length integer columns, sorted: ``sorted(set(zip(...)))`` without a Python
    tuple per row (each column factorised, the codes combined into one key, its distinct values decoded)."""
    uniq, key = [], np.zeros(len(cols[0]), np.int64)
    for c in cols:
        codes, u = pd.factorize(np.asarray(c))
        uniq.append(u)
        if np.prod([float(len(x)) for x in uniq]) > 2.0 ** 62:  # a combined key would overflow
            return sorted(set(zip(*(np.asarray(x).tolist() for x in cols))))
        key = key * max(len(u), 1) + codes
    k, parts = pd.unique(key), []
    for u in reversed(uniq):
        parts.append(u[k % len(u)] if len(u) else u)
        k = k // max(len(u), 1)
    return sorted(zip(*(x.tolist() for x in reversed(parts))))


def _threads(trace: Any, tid, start, end, lo: int, hi: int) -> tuple[list[dict[str, Any]], dict, dict]:
    """The launching threads' rows, and per thread the union of its lock waits and of its kernels."""
    counts = pd.Series(tid).value_counts()
    launchers = [int(t) for t in counts.index[counts >= MIN_THREAD_KERNELS] if t >= 0]
    waits = _lock_waits(trace, set(launchers), lo, hi)
    rows, wait_unions, gpu_unions = [], {}, {}
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    for t in sorted(launchers):
        m = tid == t
        ws, we = waits.get(t, empty)
        wait_unions[t] = intervals.union(ws, we)
        gpu_unions[t] = intervals.union(start[m], end[m])
        rows.append({"tid": t, "kernels": int(m.sum()),
                     "gpu_busy_ns": int((gpu_unions[t][1] - gpu_unions[t][0]).sum()),
                     "lock_wait_ns": int((wait_unions[t][1] - wait_unions[t][0]).sum()), "lock_waits": int(len(ws)),
                     "inferences": 0})
    return rows, wait_unions, gpu_unions


def _lock_waits(trace: Any, tids: set[int], lo: int, hi: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(starts, ends) of the lock-wait calls of ``tids`` clipped to [lo, hi], per thread (global tid)."""
    o = frame_of(trace, "osrt")
    if not len(o) or not tids:
        return {}
    codes, names = factor(o, "name")
    wanted = np.isin(names, LOCK_WAIT_CALLS)
    gt = i64(o, "global_tid", -1)
    s, e = i64(o, "start_ns", 0), i64(o, "end_ns", 0)
    m = wanted[codes] & np.isin(gt, list(tids)) & (e > lo) & (s < hi)
    s, e, gt = np.maximum(s[m], lo), np.minimum(e[m], hi), gt[m]
    return {int(t): (s[gt == t], e[gt == t]) for t in np.unique(gt)}


def throughput(table: Any, unit: Any, steady_ns: int) -> dict[str, Any] | None:
    """Steady inferences per second in all, per thread and per stream; None without an inference unit."""
    if unit.source == "window" or unit.count <= unit.warmup or steady_ns <= 0:
        return None
    rows = np.asarray(unit.rows[unit.warmup:])
    inst = table.instances.iloc[rows]
    secs = steady_ns / 1e9
    tids = inst["tid"].to_numpy()
    per_thread = [{"tid": int(t), "count": int(n), "per_s": n / secs}
                  for t, n in zip(*np.unique(tids, return_counts=True))]
    streams = _main_streams(table, inst)
    per_stream = [{"device": int(d), "stream": int(s), "count": int(n), "per_s": n / secs}
                  for (d, s), n in pd.Series(list(streams)).value_counts().sort_index().items()] if streams else []
    return {"inferences": int(len(rows)), "duration_ms": steady_ns / 1e6, "per_s": len(rows) / secs,
            "per_thread": per_thread, "per_stream": per_stream}


def _main_streams(table: Any, inst: pd.DataFrame) -> list[tuple[int, int]]:
    """(device, stream) of most of each instance's GPU time; instances without GPU work are left out."""
    q, rows = table.members(inst, "activity")
    if not len(rows):
        return []
    act = table.activity
    df = pd.DataFrame({"q": q, "d": act.device_id[rows], "s": act.stream_id[rows],
                       "t": act.end_ns[rows] - act.start_ns[rows]})
    top = df.groupby(["q", "d", "s"])["t"].sum().reset_index().sort_values(["q", "t"], ascending=[True, False])
    top = top.drop_duplicates("q")
    return list(zip(top["d"].astype(int), top["s"].astype(int)))


def concurrency_json(c: Concurrency) -> dict[str, Any]:
    """The ``concurrency`` entry: contexts per device with their overlap, launching threads, throughput."""
    steady = c.steady_ns or 1
    devices = sorted({r["device"] for r in c.contexts})
    return {
        "contexts": [{**{k: v for k, v in r.items() if k != "busy_ns"}, "busy_ms": r["busy_ns"] / 1e6,
                      "busy_share": r["busy_ns"] / steady} for r in c.contexts],
        "context_overlap_ms": {str(d): c.device_overlap_ns.get(d, 0) / 1e6 for d in devices
                               if sum(r["device"] == d for r in c.contexts) > 1},
        "threads": [{"tid": r["tid"], "kernels": r["kernels"], "inferences": r["inferences"],
                     "gpu_busy_ms": r["gpu_busy_ns"] / 1e6, "lock_wait_ms": r["lock_wait_ns"] / 1e6,
                     "lock_wait_share": r["lock_wait_ns"] / steady, "lock_waits": r["lock_waits"]}
                    for r in c.threads],
        "lock_wait_overlap_ms": c.lock_wait_overlap_ns / 1e6,
        "thread_gpu_overlap_ms": c.thread_gpu_overlap_ns / 1e6,
        "lock_wait_calls": list(LOCK_WAIT_CALLS),
    }


__all__ = ["LOCK_WAIT_CALLS", "Concurrency", "concurrency_json", "measure", "throughput"]


def of_context(ctx: Any) -> Concurrency:
    """The judged period's :class:`Concurrency` of a capture rule's context (measured once, kept on it)."""
    if ctx.concurrency is None:
        ph = ctx.phases
        hi = ph.steady_end_ns if ph is not None else int(np.iinfo(np.int64).max)
        ctx.concurrency = measure(ctx.trace, ctx.judged_start_ns, hi, ctx.unit, None)
    return ctx.concurrency
