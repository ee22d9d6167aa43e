"""decode_drift: LLM decode steps that slow down over the capture.

The decode steps of a generation (:mod:`profiler.capture.generation`) are the inference here: one step per
token, the same graph every time, so its time should be flat. When the rolling median of the step time rises
above the first steps' by ``min_change_share``, the finding gives where it starts (the step index), how far it
goes, whether it is sustained (clocks falling: heat, power) or intermittent (other work on the GPU: another
process, a co-located job), what the capture shows of the cause (other GPU work during the slow steps; for eager
steps, the same GPU work with longer host gaps; the GPU clock when nsys sampled it:
:mod:`profiler.capture.clocks`), and what the slow steps cost beyond the baseline.
"""

from __future__ import annotations

from profiler.capture.generation import DRIFT_MIN_SHARE
from profiler.findings import Finding
from profiler.rules import Thresholds, rule
from profiler.capture.context import CaptureContext

DRIFT_MIN_SLOW_STEPS = 8
"""Steps slower than the baseline by ``min_change_share`` before a rise counts (a few slow steps are jitter)."""

ADVICE = {
    "contention": ("Other GPU work of this process runs during the slow steps (the evidence's "
                   "other_gpu_ms_per_step_after): it competes with the decode graph for the SMs. Move it off the "
                   "serving GPU, run it between requests, or give the decode stream a higher priority "
                   "(cudaStreamCreateWithPriority / torch.cuda.Stream(priority=-1))."),
    "intermittent": ("Fast steps between slow ones: something else shares the GPU or the host at times (another "
                     "process or job, a data loader, the display). Check nvidia-smi for other processes, pin the "
                     "service to its own GPU (or MIG slice), and capture with --gpu-metrics-devices=all to rule "
                     "clocks out."),
    "host": ("The slow steps run the same GPU work with longer gaps between their kernels: the host is what slowed "
             "(module loading or a library building plans for each new sequence length, as cuDNN's attention does "
             "on a first request; Python work; a busy CPU). Warm up over the sequence lengths served, load modules "
             "eagerly (CUDA_MODULE_LOADING=EAGER), and replay the decode step as a CUDA graph."),
    "sustained": ("The steps stay slow: the GPU clock most likely fell (heat or the power limit). Record clocks "
                  "(nsys profile --gpu-metrics-devices=all; nvidia-smi -q -d PERFORMANCE shows throttle reasons), "
                  "check cooling and power limits, and lock clocks (nvidia-smi -lgc) when benchmarking."),
}


@rule("decode_drift", scope="capture", defaults={"min_change_share": DRIFT_MIN_SHARE,
                                                 "min_slow_steps": DRIFT_MIN_SLOW_STEPS})
def decode_drift(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """LLM decode steps whose time rises over the capture."""
    gen = ctx.generation
    if not gen:
        return []
    d = gen["drift"]
    base, peak = d["baseline_ms"], d["peak_ms"]
    if d["start_step"] is None or base <= 0 or peak < base * (1 + t["min_change_share"]):
        return []
    if d["slow_steps"] < t["min_slow_steps"]:
        return []
    pattern = d["pattern"] or "sustained"
    clocks = gen["clocks"]
    advice = ADVICE["host" if d.get("cause") == "host" else "contention" if d.get("cause_seen")
                    else "sustained" if clocks.get("verdict") == "clocks dropped" else pattern]
    return [Finding(
        rule="decode_drift", severity="medium",
        title=(f"Decode steps slow down from {base:.1f} ms to {peak:.1f} ms (rolling median of "
               f"{d['window_steps']} steps) from step {d['start_step']} of {gen['decode_steps']}: {pattern}, "
               f"{d['slow_steps']} slow steps" + (f"; {d['cause_seen']}" if d.get("cause_seen") else "")
               + (f"; {clocks['verdict']}" if clocks.get("verdict") else "")),
        evidence={**d, "decode_steps": gen["decode_steps"], "requests": gen["requests"],
                  "ms_per_token_median": gen["ms_per_token"]["median"], "clocks": gen["clocks"]},
        threshold=t.pick("min_change_share", "min_slow_steps"),
        recommendation=advice + " " + gen["clocks"]["note"][0].upper() + gen["clocks"]["note"][1:] + ".")]
