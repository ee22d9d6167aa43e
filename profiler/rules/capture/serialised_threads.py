"""serialised_threads: threads that launch GPU work take turns on a lock, so their work never overlaps.

Two or more threads each block long in lock or semaphore waits (sem_wait, pthread_mutex_lock: Python's
threading.Lock is a semaphore) while the others never wait at the same moment (the lock is handed back and
forth), and their GPU work does not overlap either: each thread's inference waits for the other's. The
threads add latency (each waits the others' turn), not throughput; the throughput per thread says so.
"""

from __future__ import annotations

from profiler.capture import concurrency as C
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import pct
from profiler.capture.context import CaptureContext

SERIAL_MIN_WAIT_SHARE = 0.2
"""Each of at least two launching threads blocks in lock waits for at least this share of the judged period ..."""
SERIAL_MAX_WAIT_OVERLAP_SHARE = 0.05
"""... the threads wait at the same moment for less than this share of the least waiting thread's wait (one
holds the lock while the other waits: handed back and forth) ..."""
SERIAL_MAX_GPU_OVERLAP_SHARE = 0.05
"""... and their GPU work overlaps for less than this share of the least busy thread's GPU time."""

ADVICE = ("Let the threads run at once: hold the lock only around what must not run concurrently (not around "
          "the enqueue and the synchronize), give each thread its own stream and TensorRT execution context, and "
          "in Python release the GIL while waiting (a synchronize in pycuda/cuda-python does) or use one thread "
          "with several streams. Where one inference fills the GPU, more threads add latency only: batch instead.")


@rule("serialised_threads", scope="capture", defaults={
    "min_wait_share": SERIAL_MIN_WAIT_SHARE, "max_wait_overlap_share": SERIAL_MAX_WAIT_OVERLAP_SHARE,
    "max_gpu_overlap_share": SERIAL_MAX_GPU_OVERLAP_SHARE})
def serialised_threads(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Threads launching GPU work that take turns on a lock (their waits and their GPU work never overlap)."""
    conc = C.of_context(ctx)
    steady = max(conc.steady_ns, 1)
    waiting = [r for r in conc.threads if r["lock_wait_ns"] >= t["min_wait_share"] * steady]
    if len(waiting) < 2:
        return []
    wait_overlap_ns, gpu_overlap_ns = conc.overlaps_among([r["tid"] for r in waiting])
    if wait_overlap_ns >= t["max_wait_overlap_share"] * min(r["lock_wait_ns"] for r in waiting):
        return []  # they wait at the same moment: for something else, not for each other
    if gpu_overlap_ns >= t["max_gpu_overlap_share"] * min(r["gpu_busy_ns"] for r in waiting):
        return []  # their GPU work runs at once: the lock does not hold it back
    tp = conc.throughput or {}
    per_thread = {r["tid"]: r["per_s"] for r in tp.get("per_thread", [])}
    mean_wait_ms = sum(r["lock_wait_ns"] for r in waiting) / len(waiting) / 1e6
    rows = [{"tid": r["tid"], "lock_wait_ms": r["lock_wait_ns"] / 1e6, "lock_wait_share": r["lock_wait_ns"] / steady,
             "lock_waits": r["lock_waits"], "gpu_busy_ms": r["gpu_busy_ns"] / 1e6, "inferences": r["inferences"],
             "lock_wait_ms_per_inference": r["lock_wait_ns"] / 1e6 / r["inferences"] if r["inferences"] else None,
             "inferences_per_s": per_thread.get(r["tid"])} for r in waiting]
    return [Finding(
        rule="serialised_threads", severity="medium",
        title=(f"{len(waiting)} threads take turns: each waits on a lock {pct(mean_wait_ms * 1e6 / steady):.0f}% "
               f"of the time, never at once ({wait_overlap_ns / 1e6:.3f} ms together), and their GPU work "
               f"never overlaps ({gpu_overlap_ns / 1e6:.3f} ms)"),
        evidence={"threads": rows, "lock_wait_overlap_ms": wait_overlap_ns / 1e6,
                  "gpu_overlap_ms": gpu_overlap_ns / 1e6, "lock_wait_ms_per_thread": mean_wait_ms,
                  "judged_ms": conc.steady_ns / 1e6, "throughput_per_s": tp.get("per_s"),
                  "lock_wait_calls": list(C.LOCK_WAIT_CALLS)},
        threshold=t.pick("min_wait_share", "max_wait_overlap_share", "max_gpu_overlap_share"),
        recommendation=ADVICE)]
