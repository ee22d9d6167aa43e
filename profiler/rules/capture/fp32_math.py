"""fp32_math: matrix kernels (GEMM, convolution) running FP32 math on the CUDA cores of a GPU with Tensor Cores.

Kernel names say their precision and whether they use Tensor Cores (:mod:`profiler.kernel_math`). When a
large share of the judged period's kernel time is FP32 matrix math without them on GPUs that have them
(compute capability 7.0 or newer, from the capture's TARGET_INFO_GPU), an FP16/BF16/INT8 (or TF32) build
would run that math on Tensor Cores. The saving is priced with the smallest ratio of Tensor-Core to
CUDA-core peak rates among such GPUs (:data:`FP32_ASSUMED_SPEEDUP`), so it is a floor, not a promise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler import kernel_math as KM
from profiler.capture.frames import factor, i64
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import pct
from profiler.capture.context import CaptureContext

FP32_MIN_SHARE = 0.25
"""Fire when FP32 matrix kernels without Tensor Cores take at least this share of the judged period's
kernel time (below it other kernels dominate and a precision change is not where the time goes) ..."""
FP32_MIN_MS = 1.0
"""... and at least this much kernel time (ms) in all: a few stray kernels prove nothing."""
FP32_ASSUMED_SPEEDUP = 2.0
"""Tensor-Core math is assumed this many times faster than the FP32 CUDA-core math it replaces: the smallest
ratio of peak rates among Tensor-Core GPUs (GeForce Turing/Ampere/Ada FP16 with FP32 accumulation is 2x their
FP32 rate; data-centre parts and FP16 accumulation are 4-16x). The estimated saving is a floor."""
FP32_HIGH_SHARE, FP32_MEDIUM_SHARE = 0.5, 0.25
"""Severity bands of the FP32 share of kernel time (the impact's share of the judged period then decides)."""
MAX_KERNELS_LISTED = 5

TRT_ADVICE = ("Build the engine in reduced precision: trtexec --fp16 (or --bf16, or --int8 with calibration or "
              "Q/DQ nodes; --best lets TensorRT choose per layer), or a strongly typed network (--stronglyTyped) "
              "from an FP16 ONNX model; keep TF32 enabled (no --noTF32) for layers that must stay FP32. Check "
              "the layers' precisions with --exportLayerInfo and any accuracy with trtprof sweep.")
GENERIC_ADVICE = ("Run the matrix math in reduced precision: an FP16/INT8 TensorRT engine (trtexec --fp16 / --int8, "
                  "or --stronglyTyped from an FP16 model); in PyTorch torch.autocast(dtype=torch.float16 or bfloat16), "
                  "or TF32 for FP32 models (torch.set_float32_matmul_precision('high'), "
                  "torch.backends.cudnn.allow_tf32 = True).")


@rule("fp32_math", scope="capture", defaults={
    "min_share": FP32_MIN_SHARE, "min_ms": FP32_MIN_MS, "assumed_speedup": FP32_ASSUMED_SPEEDUP,
    "high_share": FP32_HIGH_SHARE, "medium_share": FP32_MEDIUM_SHARE})
def fp32_math(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """FP32 GEMM/convolution kernels without Tensor Cores on a GPU that has them."""
    gpus = (getattr(ctx.trace, "meta", None) or {}).get("gpus") or []
    if KM.gpu_tensor_cores(gpus) is not True:
        return []  # no Tensor Cores (or unknown): FP32 on CUDA cores is all the GPU can do
    by_name = kernel_time_by_name(ctx)
    if by_name.empty:
        return []
    total_ns = float(by_name["ns"].sum())
    math = [KM.classify(n) for n in by_name.index]
    fp32 = by_name[np.array([m.fp32_on_cuda_cores for m in math], dtype=bool)]
    fp32_ns = float(fp32["ns"].sum())
    share = fp32_ns / total_ns if total_ns > 0 else 0.0
    if share < t["min_share"] or fp32_ns / 1e6 < t["min_ms"]:
        return []
    speedup = float(t["assumed_speedup"])
    saving_ms = fp32_ns / 1e6 * (1.0 - 1.0 / speedup) if speedup > 1 else 0.0
    severity = "high" if share >= t["high_share"] else "medium" if share >= t["medium_share"] else "low"
    return [Finding(
        rule="fp32_math", severity=severity,
        title=(f"{pct(share):.0f}% of kernel time is FP32 matrix math on CUDA cores ({len(fp32)} GEMM/convolution "
               "kernel(s)); this GPU has Tensor Cores"),
        evidence={"fp32_kernel_ms": fp32_ns / 1e6, "kernel_ms": total_ns / 1e6, "fp32_share": share,
                  "kernels": _listed(fp32, math, by_name), "kernel_names": int(len(fp32)),
                  "gpus": [_gpu(g) for g in gpus if isinstance(g, dict)],
                  "estimated_saving_ms": saving_ms,
                  "saving_method": (f"FP32 matrix kernel time x (1 - 1/{speedup:g}): Tensor-Core math assumed "
                                    f"{speedup:g}x the FP32 CUDA-core rate (the smallest ratio among Tensor-Core GPUs)"),
                  "how_read": "precision and Tensor Cores read from the kernel names (profiler.kernel_math)"},
        threshold=t.pick("min_share", "min_ms", "assumed_speedup", "high_share", "medium_share"),
        recommendation=TRT_ADVICE if ctx.tensorrt else GENERIC_ADVICE)]


def kernel_time_by_name(ctx: CaptureContext) -> pd.DataFrame:
    """Kernel GPU time (``ns``) and ``count`` per kernel name over the judged period (kernels that start in it)."""
    k = getattr(ctx.trace, "kernels", None)
    if k is None or not len(k):
        return pd.DataFrame({"ns": [], "count": []})
    start, end = i64(k, "start_ns", 0), i64(k, "end_ns", 0)
    ph = ctx.phases
    keep = np.ones(len(start), dtype=bool) if ph is None else (
        (start >= ctx.judged_start_ns) & (start < ph.steady_end_ns))
    codes, names = factor(k, "name", small=True)
    codes = np.asarray(codes)[keep]
    dur = np.maximum(end[keep] - start[keep], 0)
    ok = codes >= 0
    ns = np.bincount(codes[ok], weights=dur[ok], minlength=len(names))
    count = np.bincount(codes[ok], minlength=len(names))
    out = pd.DataFrame({"ns": ns, "count": count}, index=[str(n) for n in names])
    return out[out["count"] > 0]


def _listed(fp32: pd.DataFrame, math: list[KM.KernelMath], by_name: pd.DataFrame) -> list[dict[str, Any]]:
    top = fp32.sort_values("ns", ascending=False).head(MAX_KERNELS_LISTED)
    family = dict(zip(by_name.index, (m.family for m in math)))
    op = dict(zip(by_name.index, (m.op for m in math)))
    return [{"name": n, "count": int(r["count"]), "total_ms": float(r["ns"]) / 1e6, "op": op[n], "family": family[n]}
            for n, r in top.iterrows()]


def _gpu(g: dict[str, Any]) -> dict[str, Any]:
    return {"name": g.get("name"), "compute_capability": (f"{g.get('compute_major')}.{g.get('compute_minor')}"
                                                          if g.get("compute_major") is not None else None)}
