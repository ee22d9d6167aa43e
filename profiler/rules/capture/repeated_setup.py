"""repeated_setup: setup work (module loading, context and stream creation, allocation and weight-sized uploads)
that recurs between inferences in the steady state (:mod:`profiler.capture.recurring`): an engine built or
deserialised, or buffers allocated, per request. Priced at the time that work takes between inferences."""

from __future__ import annotations

from profiler.capture.recurring import UPLOAD, Setup, recurring_setup
from profiler.findings import Finding
from profiler.fmt import fmt_num
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import pct, repeated_series_id
from profiler.capture.context import CaptureContext

SETUP_MIN_INTERVALS = 3
"""Fire when setup work happens between at least this many pairs of consecutive inferences ..."""
SETUP_MIN_SHARE = 0.5
"""... and in at least this share of the intervals between them (the odd allocation of a caching allocator that
grows, or a stream made once mid-run, is no pattern)."""
UPLOAD_MIN_BYTES = 16 << 20
"""A host-to-device copy this large between the same two inferences as module loads or a context creation is a
weight upload (the rebuilt engine's weights), counted with them."""

ADVICE = {
    "module": ("modules are loaded and unloaded for every inference: the engine (or the library holding its "
               "kernels) is built or deserialised again each time. Build or deserialise it once, at start-up, "
               "and keep it for every request"),
    "context": "a CUDA context is created and destroyed for every inference: create it once and keep it",
    "stream": "streams are created and destroyed for every inference: create them once and reuse them",
    "allocation": ("device or pinned memory is allocated and freed for every inference: allocate the buffers once "
                   "and reuse them (or use a pool: cudaMallocAsync, a framework's caching allocator)"),
    UPLOAD: "the weights are uploaded again with each rebuild: keep the engine resident on the GPU",
}
TRT_ADVICE = (" With TensorRT: deserialise the engine once (IRuntime::deserializeCudaEngine), create its execution "
              "context once (createExecutionContext) and bind reusable input and output buffers; only enqueueV3 "
              "belongs in the per-request path.")
KIND_WORDS = {"module": "module loads/unloads", "context": "context creations", "stream": "stream creations",
              "allocation": "allocations/frees", UPLOAD: "weight-sized uploads"}


def setup_of(ctx: CaptureContext, t: Thresholds | dict) -> Setup:
    """The setup work between the capture's inferences (the unit's instances, else those of the outermost range
    repeated most: a rebuild per image can leave the image's range too little of the GPU work to be the unit;
    none without NVTX ranges)."""
    sid, _ = repeated_series_id(ctx, int(t["min_intervals"]) + 1)
    return recurring_setup(ctx.table, sid, int(t["upload_min_bytes"]))


def recurs(setup: Setup, t: Thresholds | dict) -> bool:
    """Whether the setup work recurs often enough to report (gpu_idle's advice defers to it then)."""
    return setup.with_setup >= t["min_intervals"] and setup.share >= t["min_interval_share"]


def advice(setup: Setup, tensorrt: bool) -> str:
    """What to do, by the kinds of setup that recur (module loads first: they imply the rest)."""
    kinds = [k for k in ADVICE if k in setup.intervals_by_kind]
    text = "Setup repeats between inferences: " + "; ".join(ADVICE[k] for k in kinds) + "."
    rebuild = "module" in kinds or "context" in kinds
    return text + (TRT_ADVICE if tensorrt and rebuild else "")


DEFAULTS = {"min_intervals": SETUP_MIN_INTERVALS, "min_interval_share": SETUP_MIN_SHARE,
            "upload_min_bytes": UPLOAD_MIN_BYTES}


@rule("repeated_setup", scope="capture", defaults=DEFAULTS)
def repeated_setup(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Setup work (module loads, context/stream creation, allocations, weight uploads) recurring between inferences."""
    setup = setup_of(ctx, t)
    if not recurs(setup, t):
        return []
    n = setup.with_setup
    per = {k: setup.intervals_by_kind[k] for k in KIND_WORDS if k in setup.intervals_by_kind}
    kinds = ", ".join(KIND_WORDS[k] for k in per)
    cost_ms = setup.cost_ns / 1e6
    return [Finding(
        rule="repeated_setup", severity="medium",  # impact sets it from the cost
        range=repeated_series_id(ctx, int(t["min_intervals"]) + 1)[1],
        title=(f"Setup repeats between inferences: {kinds} between {n} of {setup.intervals} pairs of consecutive "
               f"inferences ({pct(setup.share)}%), {fmt_num(cost_ms / n, 3)} ms per interval "
               f"({fmt_num(cost_ms, 4)} ms in all)"),
        evidence={
            "intervals": setup.intervals, "intervals_with_setup": n, "interval_share": setup.share,
            "intervals_by_kind": per, "ms_by_kind": {k: setup.ns_by_kind[k] / 1e6 for k in per},
            "calls": dict(sorted(setup.calls.items(), key=lambda kv: -kv[1])),
            "calls_per_interval": {name: c / n for name, c in setup.calls.items()},
            "upload_bytes_per_interval": setup.upload_bytes / n, "setup_ms_total": cost_ms,
            "setup_ms_per_interval": cost_ms / n,
        },
        threshold=t.pick("min_intervals", "min_interval_share", "upload_min_bytes"),
        recommendation=advice(setup, ctx.tensorrt),
    )]
