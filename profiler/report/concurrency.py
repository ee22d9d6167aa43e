"""Throughput, CUDA contexts and launching threads in the capture-analysis report.

Input: the ``trtprof analyze --json`` dict's ``inference.throughput`` (steady-state inferences per second
in all, per thread, per stream) and ``concurrency`` (contexts per GPU, their kernel overlap, the
launching threads' lock waits). Absent keys add nothing.
"""

from __future__ import annotations

from profiler.documents import AnalysisDocument
from profiler.report.common import Section, kv, note, table
from profiler.fmt import fmt_pct

MAX_ROWS = 40
"""Threads, streams or contexts listed per table (the JSON has them all)."""


def throughput_blocks(inf: dict) -> list[dict]:
    """The Inference section's throughput: overall, then per thread and per stream when there are several."""
    tp = inf.get("throughput") if isinstance(inf.get("throughput"), dict) else {}
    if tp.get("per_s") is None:
        return []
    rows = [["all", "", tp.get("inferences"), tp.get("per_s")]]
    for key, what, ident in (("per_thread", "thread", "tid"), ("per_stream", "stream", "stream")):
        items = [r for r in tp.get(key) or [] if isinstance(r, dict)]
        if len(items) > 1:
            rows += [[what, _ident(r, ident), r.get("count"), r.get("per_s")] for r in items[:MAX_ROWS]]
    return [{"type": "heading", "text": "Throughput"},
            table(["over", "which", "inferences", "inferences per s"], rows, numeric=[False, False, True, True],
                  caption=f"steady state, {tp.get('duration_ms') or 0:.6g} ms")]


def _ident(row: dict, key: str) -> str:
    if key == "stream" and row.get("device") is not None:
        return f"GPU {row['device']} stream {row.get('stream')}"
    return str(row.get(key))


def contexts_section(doc: AnalysisDocument) -> Section | None:
    """'Contexts and threads': shown when several CUDA contexts or several launching threads ran GPU work."""
    conc = doc.get("concurrency")
    if not isinstance(conc, dict):
        return None
    contexts = [c for c in conc.get("contexts") or [] if isinstance(c, dict)]
    threads = [t for t in conc.get("threads") or [] if isinstance(t, dict)]
    if len(contexts) < 2 and len(threads) < 2:
        return None
    sec = Section("contexts", "Contexts and threads",
                  "The CUDA contexts that ran kernels in the steady state, per GPU, and the threads that launched "
                  "them. Kernels of two contexts of one GPU overlap only where the GPU runs them at once; "
                  "a lock wait is time a launching thread spent blocked in a semaphore, mutex or rwlock call.")
    sec.add(kv(overlap_rows(conc)))
    sec.add(table(["GPU", "process", "context", "kernels", "threads", "streams", "busy ms", "busy share"],
                  [[c.get("device"), str(c.get("pid")), c.get("context"), c.get("kernels"), len(c.get("threads") or []),
                    ", ".join(str(s) for s in c.get("streams") or []), c.get("busy_ms"),
                    fmt_pct((c.get("busy_share") or 0) * 100)] for c in contexts],
                  numeric=[True, False, True, True, True, False, True, True], limit=MAX_ROWS))
    sec.add(table(["thread", "kernels", "inferences", "GPU busy ms", "lock wait ms", "lock wait share",
                   "lock waits"],
                  [[str(t.get("tid")), t.get("kernels"), t.get("inferences"), t.get("gpu_busy_ms"),
                    t.get("lock_wait_ms"), fmt_pct((t.get("lock_wait_share") or 0) * 100), t.get("lock_waits")]
                   for t in threads], numeric=[False] + [True] * 6, limit=MAX_ROWS))
    if conc.get("lock_wait_calls"):
        sec.add(note("Lock waits count these calls of the OS runtime trace: "
                     + ", ".join(str(c) for c in conc["lock_wait_calls"]) + "."))
    return sec


def overlap_rows(conc: dict) -> list[tuple[str, object]]:
    """Kernel overlap between contexts per GPU, and the threads' overlaps, as (label, value in ms)."""
    rows: list[tuple[str, object]] = [(f"GPU {dev} kernel overlap between contexts ms", ms)
                                      for dev, ms in (conc.get("context_overlap_ms") or {}).items()]
    rows += [("threads waiting on locks at once ms", conc.get("lock_wait_overlap_ms")),
             ("threads' GPU work overlapping ms", conc.get("thread_gpu_overlap_ms"))]
    return rows


__all__ = ["contexts_section", "overlap_rows", "throughput_blocks"]
