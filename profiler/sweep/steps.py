"""One variant, measured as a pipeline of small steps over a :class:`VariantState` created up front.

    prepare -> build -> bind -> CUDA graph -> time -> memory -> accuracy -> model arithmetic -> localize -> layers

Each step reads and writes the state and returns None when it ran, or why it did not apply (kept in
``state.skipped``). A step that raises fails the variant: its ``failure`` says at which checklist step
and with which error, in :func:`run_steps`, the one place that handles failures (a failed variant is
recorded and the sweep goes on; a usage error, a bug in the caller's options, goes up). The engine and
its contexts are closed whatever happens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from profiler.backends.base import Backend, BuildError, Engine, ExecutionContext, UnsupportedOp, VariantSpec
from profiler.errors import InputError, UsageError
from profiler.nvtx import ranges, step_range_name
from profiler.harness.runner import Measurement, run_queries, summarize_timings
from profiler.progress import phase
from profiler.sweep.accuracy_check import CPU_FAITHFUL_NOTES, check_accuracy, model_arithmetic
from profiler.sweep.config import BUSY_HOST_SHARE, HOLDOUT_FRACTION, SweepConfig
from profiler.sweep.localize import localize_breach
from profiler.sweep.records import checklist, failed_checklist, variant_record

if TYPE_CHECKING:
    from profiler.sweep.run import Sweep
    from profiler.variants import PreparedModel

Feeds = list[dict[str, np.ndarray]]


@dataclass
class VariantState:
    """What one variant's steps share: the inputs given up front, then what each step produced."""

    spec: VariantSpec
    backend: Backend
    model_path: Path  # the FP32 model the sweep was given
    shapes: dict[str, tuple[int, ...]]
    feeds: Feeds  # the accuracy inputs; the first one is timed
    reference: Feeds | None  # FP32 outputs on ``feeds``; None: there is no reference
    notes: list[str] = field(default_factory=list)  # said with the variant's record
    skipped: dict[str, str] = field(default_factory=dict)  # step name -> why it did not apply
    prepared: PreparedModel | None = None  # the model in this precision (path, hash, info)
    prepare_s: float | None = None
    prepare_info: dict[str, Any] | None = None  # the preparation's info; None until prepared
    engine: Engine | None = None
    engine_info: dict[str, Any] = field(default_factory=dict)
    contexts: list[ExecutionContext] = field(default_factory=list)
    graph_fallback: str | None = None  # why CUDA graph capture fell back to plain enqueue
    measured: Measurement | None = None
    timing: dict[str, Any] = field(default_factory=dict)  # summarize_timings of the timed phase
    rss_after_run_bytes: int | None = None
    device_memory_run: dict[str, int] | None = None  # Backend.memory_snapshot with the contexts alive
    accuracy: dict[str, dict[str, Any]] = field(default_factory=dict)  # per output, against FP32
    accuracy_breached: bool = False  # an output of the timed engine is outside its limits (the gate's check)
    model_arithmetic: dict[str, Any] | None = None
    localization: dict[str, Any] | None = None
    layers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def variant(self) -> PreparedModel:
        """The prepared model (the prepare step has run)."""
        assert self.prepared is not None, "the prepare step has not run"
        return self.prepared

    @property
    def calibration(self) -> dict[str, Any] | None:
        return (self.prepare_info or {}).get("calibration")

    def close(self) -> None:
        """Close the contexts, then the engine (each step may have left them open)."""
        for ctx in self.contexts:
            ctx.close()
        if self.engine is not None:
            self.engine.close()


@dataclass(frozen=True)
class Failure:
    """Why a variant failed: the checklist step it failed at, the error recorded, and what is said."""

    at: str
    error: str
    said: str | None = None


def _detail(exc: Exception, *clear: type[Exception]) -> str:
    """An error's own message when it is one of ``clear`` (written for users), else its type too."""
    return str(exc) if isinstance(exc, clear) else f"{type(exc).__name__}: {exc}"


def prepare_failure(st: VariantState, exc: Exception) -> Failure | None:
    """Conversion or calibration trouble fails this variant, not the sweep; a usage error goes up."""
    if isinstance(exc, UsageError):
        return None
    error = f"preparing the {st.spec.precision} model failed: {_detail(exc, BuildError, InputError)}"
    return Failure("calibrated" if st.spec.precision == "int8" else "parsed", error)


def run_failure(st: VariantState, exc: Exception) -> Failure | None:
    """Binding or running failed: this engine is unusable, the sweep goes on."""
    error = str(exc) if isinstance(exc, BuildError) else f"running failed: {type(exc).__name__}: {exc}"
    return Failure("executed", error, said=error)


def build_failure(st: VariantState, exc: Exception) -> Failure | None:
    """A BuildError fails the variant at the parser (an unsupported op) or the optimizer."""
    if not isinstance(exc, BuildError):
        return run_failure(st, exc)
    return Failure("parsed" if isinstance(exc, UnsupportedOp) else "optimized", str(exc), said=f"build failed: {exc}")


# -- the steps ------------------------------------------------------------------------------------
def precision_model(c: SweepConfig, model_path: Any, precision: str, shapes: dict, progress: Any = None) -> Any:
    """``variants.prepare`` as the sweep asks it (one cache entry per model, precision and settings): the
    prepare step, and a coordinator converting ahead of its GPU workers, share the entry."""
    from profiler import variants

    return variants.prepare(
        model_path, precision, shapes=shapes, calib=c.calib, fp16_range_check=c.fp16_range_check,
        calib_method=c.calib_method, cache_dir=str(c.cache_root() / "variants"), progress=progress, seed=c.seed,
        keep_fp32=c.keep_fp32,
        holdout_fraction=HOLDOUT_FRACTION if (c.calib and not c.inputs) else 0.0)


def prepare_model(sw: Sweep, st: VariantState) -> str | None:
    """The model in this precision (fp16 conversion, int8 calibration), from the variants cache."""
    from profiler import variants

    c, key = sw.config, st.key
    started = time.perf_counter()
    with phase(sw.say, f"  {key}: preparing the {st.spec.precision} model"):
        st.prepared = precision_model(c, st.model_path, st.spec.precision, st.shapes,
                                      progress=lambda m: sw.say(f"  {key}: {m}"))
    st.prepare_s = time.perf_counter() - started
    st.prepare_info = {k: v for k, v in st.variant.info.items() if k != "op_block_list"}
    st.notes.extend(w for w in st.variant.warnings if w not in st.notes)
    if st.variant.calibration_meaningless:
        if variants.RANDOM_CALIBRATION_WARNING not in st.notes:
            st.notes.append(variants.RANDOM_CALIBRATION_WARNING)
        sw.say(f"  WARNING {key}: {variants.RANDOM_CALIBRATION_WARNING}")
    return None


def build_engine(sw: Sweep, st: VariantState) -> str | None:
    sw.say(f"  {st.key}: building on {st.backend.name}")
    with phase(sw.say, f"  {st.key}: building"):
        st.engine = st.backend.build(str(st.variant.path), st.spec, str(sw.config.cache_root() / "engines"))
    st.engine_info = dict(st.engine.info)
    st.notes.extend(st.engine_info.pop("notes", []) or [])
    return None


def bind_inputs(sw: Sweep, st: VariantState) -> str | None:
    """One context per stream, the first input bound (transfers off: on the device from now on)."""
    assert st.engine is not None
    st.contexts = [st.engine.create_context(i) for i in range(st.spec.streams)]
    for ctx in st.contexts:
        ctx.set_transfers(sw.config.transfers)  # off: inputs reach the device at set_inputs, outputs on demand
        ctx.set_inputs(st.feeds[0])
    return None


def capture_graphs(sw: Sweep, st: VariantState) -> str | None:
    if not st.spec.cuda_graph:
        return "not a CUDA graph variant"
    for ctx in st.contexts:
        reason = ctx.enable_cuda_graph()
        if reason:
            st.graph_fallback = reason
    if st.graph_fallback:
        st.notes.append(f"CUDA graph capture fell back to plain enqueue: {st.graph_fallback}")
    return None


def time_queries(sw: Sweep, st: VariantState) -> str | None:
    """The harness's timed phase over every stream, and whether other processes loaded the host."""
    c, key = sw.config, st.key
    sw.say(f"  {key}: timing (warm-up {c.warmup_ms:g} ms, >= {c.iterations} iterations, "
           f">= {c.duration_s:g} s, {st.spec.streams} stream(s))")
    with phase(sw.say, f"  {key}: timing"):
        st.measured = m = run_queries(st.contexts, c.harness, key=key)
    st.timing = summarize_timings(m.timings)
    if m.host_others_share is not None and m.host_others_share >= BUSY_HOST_SHARE:
        busy = (f"other processes took {m.host_others_share * 100:.0f}% of the host's CPU while this "
                "variant was timed: a host-bound latency is inflated by that load")
        sw.say(f"  {key}: {busy}")
        st.notes.append(busy)
    return None


def snapshot_memory(sw: Sweep, st: VariantState) -> str | None:
    """Host RSS and device memory while the variant's contexts are alive: what the variant holds."""
    from profiler.backends.onnxruntime import rss_bytes

    st.rss_after_run_bytes = rss_bytes()
    st.device_memory_run = st.backend.memory_snapshot(st.engine)
    return None


def check_outputs(sw: Sweep, st: VariantState) -> str | None:
    """The accuracy inputs through the timed engine (the gate judges it), against FP32."""
    if st.spec.precision == "fp32":
        return "fp32 is the reference"
    if st.reference is None:
        return "no fp32 reference outputs"
    ctx, outs = st.contexts[0], []
    with phase(sw.say, f"  {st.key}: running the {len(st.feeds)} accuracy input(s)"):
        for sample in st.feeds:
            ctx.set_inputs(sample)
            ctx.query()
            outs.append(ctx.outputs())
    ctx.set_inputs(st.feeds[0])
    st.accuracy, check = check_accuracy(st.key, st.spec.precision, st.reference, outs, sw.config, st.calibration)
    st.accuracy_breached = any(m.get("passed") is False for m in st.accuracy.values())
    sw.accuracy_checks.append(check)
    sw.say_kinds(st.accuracy)
    return None


def compare_model_arithmetic(sw: Sweep, st: VariantState) -> str | None:
    """Beside the gate, where the timed engine does not compute the precision as a GPU engine would."""
    if "accuracy" in st.skipped:
        return "no accuracy check"
    if st.spec.precision not in CPU_FAITHFUL_NOTES or st.backend.faithful_low_precision:
        return f"the gated figure is {st.backend.name}'s own {st.spec.precision} arithmetic"
    st.model_arithmetic, check = model_arithmetic(st.spec, Path(st.variant.path), st.feeds, st.reference or [],
                                                  sw.config, st.calibration)
    if check is not None:
        sw.accuracy_checks.append(check)
    return None


def localize_error(sw: Sweep, st: VariantState) -> str | None:
    if "accuracy" in st.skipped:
        return "no accuracy check"
    if not (st.accuracy_breached or (st.model_arithmetic or {}).get("breached")):
        return "no accuracy finding"
    if not sw.config.localize or st.spec.precision not in ("fp16", "int8"):
        return "--no-localize" if not sw.config.localize else f"{st.spec.precision} is not localized"
    st.localization = localize_breach(st.spec, st.model_path, Path(st.variant.path), st.feeds,
                                      st.calibration or {}, sw.config, sw.say)
    return None


def profile_layers(sw: Sweep, st: VariantState) -> str | None:
    """Per-layer times in a separate pass; a profile is a bonus: the timing stands without it."""
    c = sw.config
    if not c.layers:
        return "--no-layers"
    assert st.engine is not None
    sw.say(f"  {st.key}: per-layer profile ({c.layer_iterations} iterations, separate pass)")
    try:
        with phase(sw.say, f"  {st.key}: per-layer profile"):
            st.layers = st.engine.profile_layers(st.feeds[0], iterations=c.layer_iterations)
    except Exception as exc:
        st.notes.append(f"per-layer profile failed: {type(exc).__name__}: {exc}")
    return None


# -- the pipeline ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Sweep, VariantState], str | None]
    failure: Callable[[VariantState, Exception], Failure | None] = run_failure


STEPS: tuple[Step, ...] = (
    Step("prepare", prepare_model, prepare_failure),
    Step("build", build_engine, build_failure),
    Step("bind", bind_inputs),
    Step("cuda_graph", capture_graphs),
    Step("time", time_queries),
    Step("memory", snapshot_memory),
    Step("accuracy", check_outputs),
    Step("model_arithmetic", compare_model_arithmetic),
    Step("localize", localize_error),
    Step("layers", profile_layers),
)


def run_steps(sw: Sweep, st: VariantState, steps: tuple[Step, ...] = STEPS) -> Failure | None:
    """Run ``steps`` in order until one fails; its Failure (said once), or None when all ran. Under a
    profiler each step is an NVTX range of its own (``sweep/<key>/<step>``)."""
    nv = ranges()
    for step in steps:
        try:
            with nv.range(step_range_name(st.key, step.name)):
                why = step.run(sw, st)
        except Exception as exc:
            failure = step.failure(st, exc)
            if failure is None:
                raise
            if failure.said:
                sw.say(f"  {st.key}: {failure.said}")
            return failure
        if why:
            st.skipped[step.name] = why
    return None


def measure_variant(sw: Sweep, st: VariantState) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """(summary record, per-query samples, per-layer records) of one variant; a failure is a failed record."""
    try:
        failure = run_steps(sw, st)
    finally:
        st.close()
    if failure is not None:
        return failed_record(st, failure), [], []
    assert st.measured is not None
    return measured_record(st), st.measured.samples(), st.layers


def failed_record(st: VariantState, failure: Failure) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if st.prepare_info is not None:  # what was prepared stays on the record
        extra = {"prepare": st.prepare_info, "notes": st.notes}
    return variant_record(st.spec, st.backend.name, "failed", failure.error, **extra,
                          checklist=failed_checklist(st.spec, failure.at, failure.error))


def memory_record(st: VariantState) -> dict[str, Any]:
    e = st.engine_info
    return {
        "engine_size_bytes": e.get("engine_size_bytes"),
        "activation_bytes_per_context": e.get("activation_bytes_per_context"),
        "build_memory_bytes": e.get("build_memory_bytes"),
        "rss_before_build_bytes": e.get("rss_before_build_bytes"),
        "rss_after_build_bytes": e.get("rss_after_build_bytes"),
        "rss_after_run_bytes": st.rss_after_run_bytes,
        "device_memory_build": (e.get("checklist") or {}).get("device_memory") or e.get("device_memory"),
        "device_memory_run": st.device_memory_run,
    }


def measured_record(st: VariantState) -> dict[str, Any]:
    m, t, e, spec = st.measured, st.timing, st.engine_info, st.spec
    assert m is not None
    rec = variant_record(
        spec, st.backend.name, "ok", None,
        latency_ms=t["latency_ms"], enqueue_ms=t["enqueue_ms"], throughput_qps=t["throughput_qps"],
        accuracy=st.accuracy, compute_ms=t["compute_ms"], h2d_ms=t["h2d_ms"], d2h_ms=t["d2h_ms"],
        count=t["count"], span_ms=t.get("span_ms"), warmup_dropped=m.warmup_dropped,
        per_stream_count=m.per_stream_count, in_flight=m.in_flight,
        synchronous_enqueue=bool(st.backend.synchronous_enqueue), cuda_graph_fallback=st.graph_fallback,
        fingerprint=e.get("fingerprint") or st.backend.fingerprint(st.variant.model_hash, spec),
        build_time_s=e.get("build_time_s") or (e.get("checklist") or {}).get("build_time_s"),
        prepare_s=st.prepare_s, memory=memory_record(st), model_path=str(st.variant.path),
        model_hash=st.variant.model_hash, prepare=st.prepare_info, engine=e, notes=st.notes,
        layer_count=len(st.layers), localization=st.localization, model_arithmetic_accuracy=st.model_arithmetic,
        host_others_share=m.host_others_share,
    )
    rec["checklist"] = checklist(spec, st.prepare_info or {}, e, rec)
    return rec
