"""time_slicing: several CUDA contexts share one GPU, and their kernels never run at the same time.

Without MPS a GPU runs one context at a time: the contexts of two processes, or of threads that each create
their own (``cuCtxCreate``, pycuda's ``make_context`` per thread), take turns, so work meant to run in
parallel runs one after the other, each context's inference waits for the other's, and every switch costs.
The finding says so with the overlap measured (kernels of different contexts at the same moment), each
context's busy time, and the threads that launch into them.
"""

from __future__ import annotations

from typing import Any

from profiler.capture import concurrency as C
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import pct
from profiler.capture.context import CaptureContext

SLICING_MIN_BUSY_SHARE = 0.05
"""Each of the contexts holds at least this share of the device's kernel time in the judged period (a context
that only initialised, or ran a few kernels, does not share the GPU in earnest) ..."""
SLICING_MAX_OVERLAP_SHARE = 0.01
"""... and their kernels overlap for less than this share of the least busy one's kernel time: the GPU ran
them one at a time (kernels of one context on two streams overlap when there is room)."""

ADVICE = ("Share one CUDA context: in one process, use the device's primary context in every thread "
          "(cudaSetDevice / cuDevicePrimaryCtxRetain, pycuda.autoprimaryctx rather than make_context per thread) "
          "and give each thread its own stream and TensorRT execution context from one engine, so kernels can "
          "overlap and no context switch separates them; across processes, run the CUDA MPS daemon "
          "(nvidia-cuda-mps-control -d) or one server process (Triton) that owns the GPU. When one inference "
          "already fills the GPU, a second context adds latency, not throughput: batch instead.")


@rule("time_slicing", scope="capture", defaults={
    "min_busy_share": SLICING_MIN_BUSY_SHARE, "max_overlap_share": SLICING_MAX_OVERLAP_SHARE})
def time_slicing(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Several CUDA contexts on one GPU whose kernels never overlap (time-slicing)."""
    conc = C.of_context(ctx)
    out = []
    for dev in sorted({r["device"] for r in conc.contexts}):
        mine = [r for r in conc.contexts if r["device"] == dev]
        device_ns = sum(r["busy_ns"] for r in mine)
        busy = [r for r in mine if r["busy_ns"] >= t["min_busy_share"] * device_ns]
        if len(busy) < 2:
            continue
        overlap = conc.device_overlap_ns.get(dev, 0)
        least = min(r["busy_ns"] for r in busy)
        if overlap >= t["max_overlap_share"] * least:
            continue
        out.append(_finding(ctx, dev, busy, overlap, conc, t))
    return out


def _finding(ctx: CaptureContext, dev: int, busy: list[dict[str, Any]], overlap_ns: int, conc: C.Concurrency,
             t: Thresholds) -> Finding:
    steady = max(conc.steady_ns, 1)
    total = sum(r["busy_ns"] for r in busy)
    name = ctx.gpu_names().get(dev) or f"GPU {dev}"
    return Finding(
        rule="time_slicing", severity="medium",
        title=(f"{len(busy)} CUDA contexts{_of_processes(busy)} share {name} and take turns: their kernels overlap "
               f"{overlap_ns / 1e6:.3f} ms in {conc.steady_ns / 1e6:.0f} ms (busy {pct(total / steady):.0f}% "
               "of the time, one context at a time)"),
        evidence={"device_id": dev, "contexts": [
            {"pid": r["pid"], "context": r["context"], "kernels": r["kernels"], "busy_ms": r["busy_ns"] / 1e6,
             "busy_share": r["busy_ns"] / steady, "threads": r["threads"], "streams": r["streams"]} for r in busy],
            "overlap_ms": overlap_ns / 1e6, "busy_ms_all_contexts": total / 1e6, "judged_ms": conc.steady_ns / 1e6,
            "throughput_per_s": (conc.throughput or {}).get("per_s")},
        threshold=t.pick("min_busy_share", "max_overlap_share"), recommendation=ADVICE)


def _of_processes(busy: list[dict[str, Any]]) -> str:
    """' of 2 processes' when the contexts belong to several processes, else ''."""
    n = len({r["pid"] for r in busy})
    return f" of {n} processes" if n > 1 else ""
