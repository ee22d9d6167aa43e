"""``trtprof sweep`` as a library: engine variants of one ONNX model, timed, checked against FP32, stored.

    from profiler.sweep import SweepConfig, run_sweep
    summary = run_sweep(SweepConfig(model="model.onnx", precisions=["fp32", "fp16"], streams=[1, 2]),
                        store=Store.open("trtprof.db"), progress=print)

The sweep is the product of the axes (precision x workspace x streams x CUDA graph); combinations the
backend cannot run are listed as ``skipped`` with the reason. Each variant goes: prepare the model
(fp16 conversion, int8 calibration) -> build (a ``BuildError`` marks it ``failed`` and the sweep goes
on) -> time it with the harness -> compare its outputs with the FP32 reference on the same inputs ->
per-layer profile in a separate pass. Every finished variant is stored at once, so Ctrl-C loses nothing
already measured: the run is marked ``interrupted`` and ``resume_sweep`` (``--resume RUN``) runs only
the variants not yet done.

The returned summary is summary.json, a :class:`profiler.documents.SweepDocument`:
``{"kind": "sweep", "run": {...}, "variants": [...], "findings": [...]}``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import platform
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler import __version__
from profiler.backends.base import PRECISIONS, Backend, BuildError, UnsupportedOp, VariantSpec
from profiler.errors import InputError, UsageError
from profiler.findings import Finding, json_safe, sort_findings
from profiler.harness.nvtx import ranges, variant_range_name
from profiler.harness.runner import HarnessConfig, run_queries, summarize_timings
from profiler.progress import phase, trtexec_line

Progress = Callable[[str], None]

#: the variant fields of summary.json, in order (more keys follow them)
VARIANT_KEYS = ("key", "precision", "workspace_bytes", "streams", "cuda_graph", "backend", "status", "error",
                "latency_ms", "enqueue_ms", "throughput_qps", "accuracy")
#: On ONNX Runtime's CPU provider the gate judges the timed session, as everywhere; beside it, the
#: model's own arithmetic (every intermediate tensor materialised in its declared type, no kernel
#: fusion) is shown, labelled, because that provider (fp16) computes float16 nodes in float32 without
#: the casts between them, and (int8) runs fused integer kernels that saturate on CPUs without VNNI:
#: neither is what a GPU engine of the same model computes.
CPU_FAITHFUL_NOTES = {
    "fp16": "model arithmetic: every intermediate tensor stored in float16 (ONNX Runtime's CPU provider computes "
            "float16 models in float32, hiding float16 rounding and overflow a GPU engine would show)",
    "int8": "model arithmetic: the Q/DQ model's own arithmetic without fused integer CPU kernels (which saturate "
            "on CPUs without VNNI and are not what a GPU engine computes)",
}
ACCURACY_SAMPLES = 4  # seeded random inputs for the accuracy check when no data is given
HOLDOUT_FRACTION = 0.2  # of --calib, kept out of calibration for the accuracy check
#: Other processes taking this share of the host CPU during a timed phase is said (and noted with the variant).
BUSY_HOST_SHARE = 0.25


@dataclass
class SweepConfig:
    """Everything a sweep needs; stored with the run so ``--resume`` can continue it."""

    model: str | None = None  # None: the bundled default model
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    workspaces: list[int | None] = field(default_factory=lambda: [None])  # bytes; None = backend default
    streams: list[int] = field(default_factory=lambda: [1])
    cuda_graph: list[bool] = field(default_factory=lambda: [False])
    shapes: dict[str, list[int]] = field(default_factory=dict)
    calib: str | None = None
    calib_method: str = "entropy"
    inputs: str | None = None
    iterations: int = 10
    duration_s: float = 3.0
    warmup_ms: float = 200.0
    backend: str = "auto"
    label: str | None = None
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)  # {"fp16": {"cosine_min": .999}}
    rule_thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"jitter": {"cov_pct": 3}}
    layers: bool = True
    layer_iterations: int = 10
    cache_dir: str | None = None
    seed: int = 0
    localize: bool = True  # on a precision breach, find the nodes where the error starts and verify
    fp16_range_check: bool = True  # keep nodes whose sample activations near float16's range in fp32
    transfers: bool = True  # False: no per-query H2D/D2H (trtexec --noDataTransfers); latency = compute
    overlap: bool = True  # two queries in flight per stream where the backend can (trtexec's default)
    out_dir: str | None = None  # where summary.json and report.html go (--resume writes there again)
    repeat: int = 0  # process-level repeats of the timed phase after all variants (profiler.harness.repeat)
    output_kinds: dict[str, str] = field(default_factory=dict)  # output -> classes|logits|boxes|regression
    output_tolerances: dict[str, dict[str, float]] = field(default_factory=dict)  # output -> {atol, rtol}

    def __post_init__(self) -> None:
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad:
            raise UsageError(f"unknown precision {bad[0]!r}; choose from {', '.join(PRECISIONS)}")
        if not self.precisions or not self.workspaces or not self.streams or not self.cuda_graph:
            raise UsageError("every sweep axis needs at least one value")
        if any(int(s) < 1 for s in self.streams):
            raise UsageError("--streams values must be at least 1")
        if self.iterations < 1:
            raise UsageError("--iterations must be at least 1")
        if self.duration_s < 0 or self.warmup_ms < 0:
            raise UsageError("--duration and --warmup cannot be negative")
        if self.repeat == 1 or self.repeat < 0:
            raise UsageError("--repeat needs at least 2 processes to measure a run-to-run spread "
                             "(trtprof compare uses it from 3 on each side; 5 is a good default)")

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepConfig":
        keys = cls.__dataclass_fields__.keys()
        d = {"overlap": False, **d}  # runs stored before the option ran one query at a time
        return cls(**{k: v for k, v in d.items() if k in keys})

    @property
    def harness(self) -> HarnessConfig:
        return HarnessConfig(iterations=int(self.iterations), duration_s=float(self.duration_s),
                             warmup_ms=float(self.warmup_ms), overlap=bool(self.overlap))

    def cache_root(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir)
        from profiler.variants.cache import default_cache_dir

        return default_cache_dir().parent


@dataclass
class PlannedVariant:
    spec: VariantSpec
    skip_reason: str | None = None


@dataclass
class Prepared:
    """What ``Sweep.prepare`` resolved: the inputs every variant of the run shares, and what is left to do."""

    model_path: Path
    shapes: dict[str, tuple[int, ...]]
    backend: Backend
    plan: list[PlannedVariant]
    feeds: list[dict[str, np.ndarray]]
    todo: list[PlannedVariant]


def variant_line(rec: dict[str, Any]) -> str:
    """The progress line of a measured variant."""
    return (f"  {rec['key']}: {trtexec_line(rec['latency_ms'])}; throughput {rec['throughput_qps']:.1f} qps "
            f"over {rec['count']} queries")


def plan_variants(config: SweepConfig, backend: Backend,
                  shapes: dict[str, tuple[int, ...]] | None = None) -> list[PlannedVariant]:
    """The axes' product in a stable order; what the backend cannot run carries its skip reason."""
    shape_items = tuple(sorted((k, tuple(int(d) for d in v)) for k, v in (shapes or {}).items()))
    out: list[PlannedVariant] = []
    uses_ws = getattr(backend, "uses_workspace", True)
    first_ws = config.workspaces[0]
    for prec, ws, streams, graph in itertools.product(dict.fromkeys(config.precisions),
                                                      dict.fromkeys(config.workspaces),
                                                      dict.fromkeys(int(s) for s in config.streams),
                                                      dict.fromkeys(bool(g) for g in config.cuda_graph)):
        spec = VariantSpec(prec, ws, streams, graph, shape_items)
        reason = backend.unsupported(spec)
        if reason is None and not uses_ws and ws != first_ws:
            same = VariantSpec(prec, first_ws, streams, graph, shape_items)
            reason = (f"{backend.name} has no workspace setting: this variant would be the same engine as "
                      f"{same.key}, which is measured")
        out.append(PlannedVariant(spec, reason))
    return out


def _ort_cpu(backend: Backend) -> bool:
    """True for ONNX Runtime on its CPU provider (see CPU_FAITHFUL_NOTES)."""
    if backend.name != "onnxruntime":
        return False
    try:
        return backend.describe().get("provider") == "CPUExecutionProvider"
    except Exception:
        return False


# -- accuracy (profiler.accuracy) ---------------------------------------------------------------
def _accuracy(key: str, precision: str, ref: list[dict[str, np.ndarray]], out: list[dict[str, np.ndarray]],
              config: "SweepConfig", calibration: dict | None) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Per-output metrics against FP32 over every input sample, each marked passed or not against its
    precision's thresholds, and the ``precision_regression`` findings of the breaches."""
    from profiler import accuracy as acc

    thresholds = acc.merge_thresholds(config.thresholds)
    tolerances = acc.tolerances_for(precision, thresholds, ref[0] if ref else {}, config.output_tolerances,
                                    config.thresholds)
    per_output = acc.compare_batches(ref, out, kinds=config.output_kinds, tolerances=tolerances)
    _, breaches = acc.evaluate(per_output, precision, thresholds)
    failed = {b["output"] for b in breaches}
    limits = dict(thresholds.get(precision, {}))
    for name, metrics in per_output.items():
        metrics["passed"] = name not in failed
        metrics["threshold"] = limits
    findings = acc.accuracy_findings(key, precision, per_output, thresholds, calibration=calibration)
    return per_output, findings


def gate_failures(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings that fail the sweep's gate (exit 1): precision regressions that mean something, and
    variants that were asked for but failed to build or run (skips are not failures).

    A breach by an int8 variant calibrated on random inputs is reported (severity info) but does not
    fail the gate: its accuracy numbers mean nothing.
    """
    return [f for f in findings if f.get("rule") in ("precision_regression", "variant_failed")
            and f.get("severity") != "info"]


def _checklist(spec: VariantSpec, pinfo: dict[str, Any], einfo: dict[str, Any] | None,
               rec: dict[str, Any] | None, failed: tuple[str, str] | None = None) -> dict[str, Any]:
    """The build-and-run chain of one variant: parsed, optimized, calibrated, serialized, executed.

    Each step is ``{"status": ok|warn|failed|n/a|not reached, ...details}``; a failure marks its step and
    leaves the later ones "not reached".
    """
    steps = ("parsed", "optimized", "calibrated", "serialized", "executed")
    out: dict[str, Any] = {}
    einfo = einfo or {}
    trt = einfo.get("checklist") or {}
    if failed is not None:
        at = steps.index(failed[0])
        for i, step in enumerate(steps):
            if i < at:
                out[step] = {"status": "ok"}
            elif i == at:
                out[step] = {"status": "failed", "error": failed[1]}
            else:
                out[step] = {"status": "not reached"}
        if spec.precision != "int8" and failed[0] != "calibrated":
            out["calibrated"] = {"status": "n/a"}
        return out
    warns = list(trt.get("parser_warnings") or [])
    out["parsed"] = {"status": "warn" if warns else "ok", "parser_warnings": warns,
                     **({"layers": trt["parsed"].get("layers")} if isinstance(trt.get("parsed"), dict) else {})}
    out["optimized"] = {"status": "ok", "workspace_bytes": spec.workspace_bytes,
                        "shapes": {k: list(v) for k, v in spec.shapes},
                        "build_time_s": einfo.get("build_time_s") or trt.get("build_time_s"),
                        "build_memory_bytes": einfo.get("build_memory_bytes"),
                        "device_memory": trt.get("device_memory")}
    if spec.precision == "int8":
        cal = pinfo.get("calibration") or {}
        out["calibrated"] = {"status": "warn" if cal.get("meaningless") else "ok",
                             "data": cal.get("source"), "method": cal.get("method"), "samples": cal.get("samples"),
                             "cache_reused": cal.get("cache_hit")}
    else:
        out["calibrated"] = {"status": "n/a"}
    out["serialized"] = {"status": "ok", "engine_size_bytes": einfo.get("engine_size_bytes"),
                         "fingerprint": einfo.get("fingerprint"),
                         "cache_reused": einfo.get("cache_hit", trt.get("plan_cache_hit")),
                         "bound_to": einfo.get("device") or trt.get("device"),
                         "backend_version": einfo.get("backend_version") or trt.get("tensorrt_version")}
    if rec is not None:
        acc = rec.get("accuracy") or {}
        bad = [o for o, m in acc.items() if m.get("passed") is False]
        out["executed"] = {"status": "warn" if bad else "ok", "queries": rec.get("count"),
                           "outputs_checked": len(acc), "outputs_outside_threshold": bad}
    return out


# -- the sweep ------------------------------------------------------------------------------------
class Sweep:
    """One sweep run; ``run()`` measures every planned variant not yet done and returns the summary."""

    def __init__(self, config: SweepConfig, *, store: Any = None, backend: Backend | None = None,
                 progress: Progress | None = None, run_id: int | None = None,
                 previous: list[dict[str, Any]] | None = None,
                 previous_layers: dict[str, list[dict]] | None = None):
        self.config = config
        self.store = store
        self.progress = progress or (lambda _msg: None)
        self.run_id = run_id
        self.backend = backend
        self.backend_reason = ""
        self.variants: list[dict[str, Any]] = list(previous or [])
        self.layers: dict[str, list[dict]] = dict(previous_layers or {})
        self.samples_ms: dict[str, list[float]] = {}  # latency per kept query, for the report's distributions
        self.accuracy_findings: list[Finding] = []
        self.extra_findings: list[Finding] = []  # e.g. profiler.distributed's devices_differ
        self.notes: list[str] = []
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat()
        self.status = "running"

    # -- setup -------------------------------------------------------------------------------
    def _say(self, msg: str) -> None:
        self.progress(msg)

    def _resolve_backend(self) -> Backend:
        if self.backend is not None:
            self.backend_reason = self.backend_reason or "given by the caller"
            return self.backend
        from profiler.backends import choose_auto, get_backend

        name = self.config.backend
        if name == "auto":
            name, self.backend_reason = choose_auto()
        else:
            self.backend_reason = "chosen with --backend"
        try:
            self.backend = get_backend(name)
        except (ImportError, BuildError) as exc:
            raise InputError(f"backend {name!r} is not usable here: {exc}") from exc
        return self.backend

    def _inputs(self, info: Any, shapes: dict[str, tuple[int, ...]]) -> tuple[list[dict], str]:
        """(accuracy inputs, where they came from): --inputs, else held-out --calib, else seeded random."""
        from profiler.models import load_samples, make_inputs, split_holdout

        c = self.config
        if c.inputs:
            return make_inputs(info, shapes, source=c.inputs), f"--inputs {c.inputs}"
        if c.calib:
            calib_part, held = split_holdout(load_samples(c.calib, info, shapes), HOLDOUT_FRACTION)
            if held:
                return held, f"held-out {len(held)} sample(s) of --calib {c.calib}"
            return calib_part[:ACCURACY_SAMPLES], f"--calib {c.calib} (too few samples to hold any out)"
        return (make_inputs(info, shapes, seed=c.seed, count=ACCURACY_SAMPLES),
                f"{ACCURACY_SAMPLES} seeded random sample(s) (seed {c.seed})")

    def _environment(self, backend: Backend) -> dict[str, Any]:
        d = dict(backend.describe())
        d.update({"python": platform.python_version(), "platform": platform.platform(),
                  "trtprof_version": __version__, "host": socket.gethostname(),
                  "backend_reason": self.backend_reason})
        return d

    # -- one variant -------------------------------------------------------------------------------
    def _record(self, spec: VariantSpec, backend: Backend, status: str, error: str | None = None,
                **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {"key": spec.key, "precision": spec.precision,
                               "workspace_bytes": spec.workspace_bytes, "streams": spec.streams,
                               "cuda_graph": spec.cuda_graph, "backend": backend.name, "status": status,
                               "error": error, "latency_ms": None, "enqueue_ms": None, "throughput_qps": None,
                               "accuracy": {}}
        rec["shapes"] = {k: list(v) for k, v in spec.shapes}
        rec.update(extra)
        return rec

    def _run_variant(self, spec: VariantSpec, backend: Backend, model_path: Path,
                     shapes: dict[str, tuple[int, ...]], feeds: list[dict[str, np.ndarray]],
                     reference: list[dict[str, np.ndarray]] | None) -> tuple[dict[str, Any], list[dict], list[dict]]:
        """Measure one variant: (summary record, samples, layers). Build failures become a failed record."""
        from profiler.variants import RANDOM_CALIBRATION_WARNING, prepare

        c = self.config
        key = spec.key
        notes: list[str] = []
        t_prepare = time.perf_counter()
        try:
            with phase(self._say, f"  {key}: preparing the {spec.precision} model"):
                prepared = prepare(model_path, spec.precision, shapes=shapes, calib=c.calib,
                                   fp16_range_check=c.fp16_range_check,
                                   calib_method=c.calib_method, cache_dir=str(c.cache_root() / "variants"),
                                   progress=lambda m: self._say(f"  {key}: {m}"), seed=c.seed,
                                   holdout_fraction=HOLDOUT_FRACTION if (c.calib and not c.inputs) else 0.0)
        except UsageError:
            raise
        except Exception as exc:  # conversion/calibration trouble fails this variant, not the sweep
            detail = str(exc) if isinstance(exc, (BuildError, InputError)) else f"{type(exc).__name__}: {exc}"
            err = f"preparing the {spec.precision} model failed: {detail}"
            step = "calibrated" if spec.precision == "int8" else "parsed"
            return self._record(spec, backend, "failed", err,
                                checklist=_checklist(spec, {}, None, None, failed=(step, err))), [], []
        prepare_s = time.perf_counter() - t_prepare
        pinfo = {k: v for k, v in prepared.info.items() if k != "op_block_list"}
        notes.extend(w for w in prepared.warnings if w not in notes)
        if prepared.calibration_meaningless:
            if RANDOM_CALIBRATION_WARNING not in notes:
                notes.append(RANDOM_CALIBRATION_WARNING)
            self._say(f"  WARNING {key}: {RANDOM_CALIBRATION_WARNING}")

        self._say(f"  {key}: building on {backend.name}")
        engine = None
        einfo: dict[str, Any] = {}
        contexts: list[Any] = []
        try:
            try:
                with phase(self._say, f"  {key}: building"):
                    engine = backend.build(str(prepared.path), spec, str(c.cache_root() / "engines"))
            except BuildError as exc:
                self._say(f"  {key}: build failed: {exc}")
                step = "parsed" if isinstance(exc, UnsupportedOp) else "optimized"
                return self._record(spec, backend, "failed", str(exc), prepare=pinfo, notes=notes,
                                    checklist=_checklist(spec, pinfo, None, None, failed=(step, str(exc)))), [], []
            einfo = dict(engine.info)
            notes.extend(einfo.pop("notes", []) or [])
            contexts = [engine.create_context(i) for i in range(spec.streams)]
            for ctx in contexts:
                ctx.set_transfers(c.transfers)  # off: inputs reach the device at set_inputs, outputs on demand
                ctx.set_inputs(feeds[0])
            graph_fallback = None
            if spec.cuda_graph:
                for ctx in contexts:
                    reason = ctx.enable_cuda_graph()
                    if reason:
                        graph_fallback = reason
                if graph_fallback:
                    notes.append(f"CUDA graph capture fell back to plain enqueue: {graph_fallback}")
            self._say(f"  {key}: timing (warm-up {c.warmup_ms:g} ms, >= {c.iterations} iterations, "
                      f">= {c.duration_s:g} s, {spec.streams} stream(s))")
            with phase(self._say, f"  {key}: timing"):
                m = run_queries(contexts, c.harness, key=key)
            timing = summarize_timings(m.timings)
            if m.host_others_share is not None and m.host_others_share >= BUSY_HOST_SHARE:
                busy = (f"other processes took {m.host_others_share * 100:.0f}% of the host's CPU while this "
                        "variant was timed: a host-bound latency is inflated by that load")
                self._say(f"  {key}: {busy}")
                notes.append(busy)
            rss_after_run = _rss()
            device_run = _device_memory(backend)  # contexts still alive: what the variant holds

            # accuracy: the same inputs through this variant and through fp32
            per_output: dict[str, dict[str, Any]] = {}
            localisation: dict[str, Any] | None = None
            model_arithmetic: dict[str, Any] | None = None
            if reference is not None and spec.precision != "fp32":
                outs = []  # the gate judges the engine that was timed
                with phase(self._say, f"  {key}: running the {len(feeds)} accuracy input(s)"):
                    for sample in feeds:
                        contexts[0].set_inputs(sample)
                        contexts[0].query()
                        outs.append(contexts[0].outputs())
                contexts[0].set_inputs(feeds[0])
                per_output, found = _accuracy(key, spec.precision, reference, outs, c, pinfo.get("calibration"))
                self.accuracy_findings.extend(found)
                self._say_kinds(per_output)
                if spec.precision in CPU_FAITHFUL_NOTES and _ort_cpu(backend):
                    model_arithmetic = self._model_arithmetic(spec, Path(prepared.path), feeds, reference,
                                                              pinfo.get("calibration"))
                if ((found or (model_arithmetic or {}).get("breached")) and c.localize
                        and spec.precision in ("fp16", "int8")):
                    localisation = self._localize(spec, model_path, Path(prepared.path), feeds,
                                                  (pinfo.get("calibration") or {}))

            layers: list[dict] = []
            if c.layers:
                self._say(f"  {key}: per-layer profile ({c.layer_iterations} iterations, separate pass)")
                try:
                    with phase(self._say, f"  {key}: per-layer profile"):
                        layers = engine.profile_layers(feeds[0], iterations=c.layer_iterations)
                except Exception as exc:  # a profile is a bonus; the timing stands without it
                    notes.append(f"per-layer profile failed: {type(exc).__name__}: {exc}")
        except Exception as exc:  # binding or running failed: this engine is unusable, the sweep goes on
            err = str(exc) if isinstance(exc, BuildError) else f"running failed: {type(exc).__name__}: {exc}"
            self._say(f"  {key}: {err}")
            return self._record(spec, backend, "failed", err, prepare=pinfo, notes=notes,
                                checklist=_checklist(spec, pinfo, einfo, None, failed=("executed", err))), [], []
        finally:
            for ctx in contexts:
                ctx.close()
            if engine is not None:
                engine.close()

        memory = {
            "engine_size_bytes": einfo.get("engine_size_bytes"),
            "activation_bytes_per_context": einfo.get("activation_bytes_per_context"),
            "build_memory_bytes": einfo.get("build_memory_bytes"),
            "rss_before_build_bytes": einfo.get("rss_before_build_bytes"),
            "rss_after_build_bytes": einfo.get("rss_after_build_bytes"),
            "rss_after_run_bytes": rss_after_run,
            "device_memory_build": (einfo.get("checklist") or {}).get("device_memory") or einfo.get("device_memory"),
            "device_memory_run": device_run,
        }
        rec = self._record(
            spec, backend, "ok", None,
            latency_ms=timing["latency_ms"], enqueue_ms=timing["enqueue_ms"],
            throughput_qps=timing["throughput_qps"], accuracy=per_output,
            compute_ms=timing["compute_ms"], h2d_ms=timing["h2d_ms"], d2h_ms=timing["d2h_ms"],
            count=timing["count"], span_ms=timing.get("span_ms"), warmup_dropped=m.warmup_dropped,
            per_stream_count=m.per_stream_count, in_flight=m.in_flight, synchronous_enqueue=bool(einfo.get("synchronous_enqueue")),
            cuda_graph_fallback=graph_fallback, fingerprint=einfo.get("fingerprint") or backend.fingerprint(prepared.model_hash, spec),
            build_time_s=einfo.get("build_time_s") or (einfo.get("checklist") or {}).get("build_time_s"),
            prepare_s=prepare_s, memory=memory, model_path=str(prepared.path), model_hash=prepared.model_hash,
            prepare=pinfo, engine=einfo, notes=notes, layer_count=len(layers), localisation=localisation,
            model_arithmetic_accuracy=model_arithmetic, host_others_share=m.host_others_share,
        )
        rec["checklist"] = _checklist(spec, pinfo, einfo, rec)
        return rec, m.samples(), layers

    # -- the whole run -----------------------------------------------------------------------------
    def prepare(self, *, create_run: bool = True) -> "Prepared":
        """Everything before the first variant: the model, shapes, backend, plan, inputs and (with a store and
        ``create_run``) the stored run. Also used by each worker of a parallel sweep (profiler.distributed)."""
        from profiler.models import default_model_path, inspect_model, resolve_shapes

        c = self.config
        # absolute paths are stored with the run, so --resume works from any folder
        for attr in ("model", "calib", "inputs", "cache_dir"):
            value = getattr(c, attr, None)
            if value and not Path(value).is_absolute():
                setattr(c, attr, str(Path(value).absolute()))
        model_path = Path(c.model) if c.model else default_model_path()
        self._say(f"model {model_path}")
        info = inspect_model(model_path)
        shapes = resolve_shapes(info, {k: tuple(v) for k, v in (c.shapes or {}).items()})
        backend = self._resolve_backend()
        self._say(f"backend {backend.name}: {self.backend_reason}")
        env = self._environment(backend)
        plan = plan_variants(c, backend, shapes)
        feeds, feeds_source = self._inputs(info, shapes)
        self.model_info = info
        self.inputs_source = feeds_source

        from profiler.store import lease

        owner = lease.new_owner()
        if self.store is not None and self.run_id is None and create_run:
            self.run_id = self.store.create_run(
                kind="sweep", source=str(model_path), source_hash=info.model_hash, model=model_path.name,
                label=c.label, backend=backend.name, host=env.get("host"),
                gpu=env.get("device") if backend.name != "onnxruntime" or "CUDA" in str(env.get("provider")) else None,
                tensorrt_version=env.get("version") if backend.name == "tensorrt" else None,
                driver_version=env.get("driver_version"), cuda_version=env.get("cuda_version"),
                config=c.to_dict(), environment=env, lease_owner=owner,
                lease_expires_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=lease.LEASE_TTL_S))
        elif self.store is not None and create_run:
            lease.claim(self.store, self.run_id, owner)  # refuses a run another live process is running
        if self.store is not None and create_run:  # this process owns the run until finish/interrupted
            self._lease = lease.Heartbeat(self.store, self.run_id, owner).start()
        self.environment = env
        self.model_path = model_path
        done = {v["key"] for v in self.variants}
        todo = [p for p in plan if p.spec.key not in done]
        self._say(f"{len(plan)} variant(s): {sum(p.skip_reason is None for p in todo)} to run, "
                  f"{sum(p.skip_reason is not None for p in todo)} skipped, {len(plan) - len(todo)} already done")
        return Prepared(model_path, shapes, backend, plan, feeds, todo)

    def run(self) -> dict[str, Any]:
        p0 = self.prepare()
        backend, model_path, shapes, feeds, todo = p0.backend, p0.model_path, p0.shapes, p0.feeds, p0.todo
        try:
            reference = self._reference(backend, model_path, shapes, feeds, p0.plan) if todo else None
            nv = ranges()
            for i, p in enumerate(todo, 1):
                spec = p.spec
                if p.skip_reason:
                    self._say(f"[{i}/{len(todo)}] {spec.key}: skipped ({p.skip_reason})")
                    self._store_variant(self._record(spec, backend, "skipped", p.skip_reason), [], [])
                    continue
                self._say(f"[{i}/{len(todo)}] {spec.key}")
                with nv.range(variant_range_name(spec.key)):
                    rec, samples, layers = self._run_variant(spec, backend, model_path, shapes, feeds, reference)
                if rec["status"] == "ok":
                    self._say(variant_line(rec))
                self._store_variant(rec, samples, layers)
            if self.config.repeat >= 2:
                self._repeat(backend, feeds[0])
        except KeyboardInterrupt:
            self.interrupted()
            raise
        except Exception:  # not left 'running': stored failed (resumable), the error goes on up
            self._fail()
            raise
        return self.finish()

    def _fail(self) -> None:
        try:
            if self.store is not None and self.run_id is not None:
                self.store.finish_run(self.run_id, status="failed")
        except Exception:
            pass
        finally:
            self._end_lease()

    def _end_lease(self) -> None:
        """Stop renewing this process's lease on the run and give it up (finished, failed, interrupted)."""
        hb, self._lease = getattr(self, "_lease", None), None
        if hb is not None:
            hb.stop()
            from profiler.store import lease

            lease.release(self.store, hb.run_id, hb.owner)

    def interrupted(self) -> None:
        """Ctrl-C: the run is stored as ``interrupted`` with what was measured, resumable."""
        self.status = "interrupted"
        summary = self.summary()
        if self.store is not None and self.run_id is not None:
            self.store.finish_run(self.run_id, status="interrupted", summary=summary)
        self._end_lease()
        self._say(f"interrupted: {len(self.variants)} variant(s) stored")  # the CLI says how to continue

    def finish(self, status: str | None = None) -> dict[str, Any]:
        """The summary, with the findings and the final status stored (``status`` overrides ok/failed)."""
        ran = [v for v in self.variants if v["status"] != "skipped"]
        self.status = status or ("failed" if ran and all(v["status"] == "failed" for v in ran) else "ok")
        summary = self.summary()
        if self.store is not None and self.run_id is not None:
            self.store.add_findings(self.run_id, [Finding.from_dict(f) for f in summary["findings"]])
            self.store.finish_run(self.run_id, status=self.status, summary=summary)
        self._end_lease()
        return summary

    def _repeat(self, backend: Backend, feed: dict[str, np.ndarray]) -> None:
        """``--repeat N``: N fresh processes re-time every measured variant, interleaved; each variant
        gets ``repeats`` = {medians_ms (one per process), ...}, stored with it."""
        from profiler.harness.repeat import run_repeats

        c = self.config
        ok = [v for v in self.variants if v.get("status") == "ok" and v.get("model_path") and not v.get("repeats")]
        if not ok:
            return
        self._say(f"--repeat {c.repeat}: {c.repeat} new processes time {len(ok)} variant(s) each "
                  "(the run-to-run spread that trtprof compare needs)")
        options: dict[str, Any] = {}
        if backend.name == "onnxruntime":
            options = {"device": getattr(backend, "device", "auto"),
                       "intra_op_threads": getattr(backend, "intra_op_threads", None)}
        got = run_repeats(ok, backend=backend.name, backend_options=options,
                          harness={"iterations": int(c.iterations), "duration_s": float(c.duration_s),
                                   "warmup_ms": float(c.warmup_ms), "overlap": bool(c.overlap)},
                          transfers=c.transfers, feeds=feed, cache_dir=str(c.cache_root() / "engines"),
                          repeats=c.repeat, progress=self._say)
        for v in ok:
            rep = json_safe(got[v["key"]])
            meds = rep["medians_ms"]
            busy = [x for x in rep.get("host_others_shares") or [] if x is not None and x >= BUSY_HOST_SHARE]
            if busy:
                self._say(f"  {v['key']}: other processes took up to {max(busy) * 100:.0f}% of the host's CPU during "
                          f"{len(busy)} of the repeats; trtprof compare holds that load against any change")
            if meds:
                rep["spread_rel"] = float((max(meds) - min(meds)) / np.median(meds)) if len(meds) > 1 else None
                self._say(f"  {v['key']}: medians of {len(meds)} processes {', '.join(f'{m:.3f}' for m in meds)} ms"
                          + (f" (spread {rep['spread_rel'] * 100:.1f}%)" if rep["spread_rel"] is not None else ""))
            for err in dict.fromkeys(rep["errors"]):
                self._say(f"  {v['key']}: a repeat failed: {err}")
            v["repeats"] = rep
            if self.store is not None and self.run_id is not None:
                self.store.update_variant_metrics(self.run_id, v["key"], {"repeats": rep})

    def _say_kinds(self, per_output: dict[str, dict[str, Any]]) -> None:
        """Say once per output what it was taken to hold (declared or detected) and so which checks apply."""
        said = self.__dict__.setdefault("_kinds_said", set())
        for name, m in per_output.items():
            if name not in said and m.get("kind"):
                said.add(name)
                line = f"output {name!r}: {m['kind']} ({m.get('kind_reason', '')})"
                self._say(f"  {line}")
                if line not in self.notes:
                    self.notes.append(line)

    def _model_arithmetic(self, spec: VariantSpec, variant_path: Path, feeds: list[dict[str, np.ndarray]],
                          reference: list[dict[str, np.ndarray]], calibration: dict | None) -> dict[str, Any]:
        """The model's own arithmetic (every intermediate stored in its declared type), shown beside the
        gated figure on ONNX Runtime's CPU provider, which fuses and upcasts what a GPU engine would not.
        A breach here is a ``precision_model_arithmetic`` finding that does not fail the gate: the gate
        judges the engine that was timed."""
        from profiler import accuracy as acc
        from profiler.compare.precision import faithful_outputs

        c = self.config
        thresholds = acc.merge_thresholds(c.thresholds)
        try:
            outs = faithful_outputs(variant_path, feeds)
            tolerances = acc.tolerances_for(spec.precision, thresholds, reference[0], c.output_tolerances,
                                            c.thresholds)
            per_output = acc.compare_batches(reference, outs, kinds=c.output_kinds, tolerances=tolerances)
        except Exception as exc:  # a figure beside the verdict; never the verdict
            return {"error": f"{type(exc).__name__}: {exc}"}
        found = acc.accuracy_findings(spec.key, spec.precision, per_output, thresholds, calibration=calibration)
        for f in found:
            f.rule = "precision_model_arithmetic"
            f.severity = "info" if f.severity == "info" else "low"
            f.title = f"model arithmetic (not the timed ONNX Runtime CPU session): {f.title}"
            f.recommendation = ("A GPU engine storing intermediates in this precision would show this error; the "
                                "timed CPU session does not, so the gate passes it. " + f.recommendation)
        self.accuracy_findings.extend(found)
        keep = ("kind", "max_abs", "p99_abs", "rel_l2", "cosine", "top1_agreement", "exact_match",
                "elementwise_fail_frac", "nan_count", "inf_count")
        return {"note": CPU_FAITHFUL_NOTES[spec.precision] + " (for information: the gate judges the timed session)",
                "breached": bool(found),
                "outputs": {name: {k: m.get(k) for k in keep if k in m} for name, m in per_output.items()}}

    def _localize(self, spec: VariantSpec, model_path: Path, variant_path: Path,
                  feeds: list[dict[str, np.ndarray]], calibration: dict[str, Any]) -> dict[str, Any] | None:
        """Where the precision is lost (per-node error curve) and what keeping those nodes in FP32 buys."""
        from profiler.compare.precision import keep_candidates, localize, verify

        key = spec.key
        if calibration.get("meaningless"):
            reason = ("skipped: the int8 calibration used random inputs, so where its error starts says "
                      "nothing about real data (pass --calib)")
            self._say(f"  {key}: precision localisation {reason}")
            return {"skipped": reason}
        self._say(f"  {key}: accuracy breached: localising the error node by node against fp32")
        try:
            with phase(self._say, f"  {key}: localising (running both models node by node)"):
                found = localize(model_path, variant_path, feeds[:2], progress=lambda m: self._say(f"  {key}: {m}"))
            keep = keep_candidates(found)
            result: dict[str, Any] = {k: found[k] for k in ("nodes_compared", "final_rel_l2", "first_jumps",
                                                            "largest_jumps", "jump_factor", "floor")}
            result["curve"] = [{k: c[k] for k in ("index", "node", "op", "rel_l2")} for c in found["curve"]]
            if keep:
                self._say(f"  {key}: verifying with {', '.join(keep)} kept in fp32")
                calib = None
                if spec.precision == "int8":
                    from profiler.models import inspect_model, make_inputs

                    info = inspect_model(model_path)
                    calib = make_inputs(info, spec.shape_dict, source=self.config.calib, seed=self.config.seed,
                                        count=8) if self.config.calib else feeds
                # a private scratch folder: concurrent sweeps sharing the cache never share its files
                scratch = self.config.cache_root() / "localize"
                scratch.mkdir(parents=True, exist_ok=True)
                with phase(self._say, f"  {key}: verifying"), \
                        tempfile.TemporaryDirectory(prefix=f"{key}-", dir=scratch) as work:
                    check = verify(model_path, spec.precision, keep, feeds[:2], variant_model=variant_path,
                                   work_dir=work,
                                   calib_samples=calib, calib_method=self.config.calib_method)
                result["verification"] = check
                result["conclusion"] = check["conclusion"]["text"]
            else:
                worst = max(found["curve"], key=lambda c: c["rel_l2"], default=None)
                result["conclusion"] = (
                    f"no node's error jumps (>= {found['jump_factor']:g}x its inputs' and above "
                    f"{found['floor']:g}): the error grows gradually to {found['final_rel_l2']:.3g}"
                    + (f", largest at {worst['node']} ({worst['rel_l2']:.3g})" if worst else "")
                    + "; tighten thresholds only if this error matters to the application")
            self._say(f"  {key}: {result['conclusion']}")
            return json_safe(result)
        except Exception as exc:  # localisation explains a breach; it must not lose the measurement
            self._say(f"  {key}: precision localisation failed: {type(exc).__name__}: {exc}")
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _reference(self, backend: Backend, model_path: Path, shapes: dict[str, tuple[int, ...]],
                   feeds: list[dict[str, np.ndarray]], plan: list[PlannedVariant]) -> list[dict[str, np.ndarray]] | None:
        """FP32 outputs on the accuracy inputs, from an fp32 engine of the same backend."""
        if not any(p.skip_reason is None and p.spec.precision != "fp32" for p in plan):
            return None
        self._say("fp32 reference outputs for the accuracy check")
        spec = VariantSpec("fp32", None, 1, False, tuple(sorted(shapes.items())))
        try:
            with phase(self._say, "  building the fp32 reference"):
                engine = backend.build(str(model_path), spec, str(self.config.cache_root() / "engines"))
        except BuildError as exc:
            self.notes.append(f"no fp32 reference (its build failed: {exc}); accuracy not checked")
            self._say(f"  no fp32 reference: {exc}")
            return None
        try:
            ctx = engine.create_context(0)
            outs = []
            for sample in feeds:
                ctx.set_inputs(sample)
                ctx.query()
                outs.append(ctx.outputs())
            ctx.close()
        finally:
            engine.close()
        return outs

    def _store_variant(self, rec: dict[str, Any], samples: list[dict], layers: list[dict]) -> None:
        rec = json_safe(rec)
        self.variants.append(rec)
        if samples:
            self.samples_ms[rec["key"]] = [s["latency_ms"] for s in samples]
        if layers:
            self.layers[rec["key"]] = json_safe(layers)
        if self.store is None or self.run_id is None:
            return
        from profiler.store.rows import sweep_rows

        self.store.add_rows(self.run_id, sweep_rows(rec, samples, layers))

    def _warnings(self) -> list[str]:
        out = list(self.notes)
        for v in self.variants:
            for w in list((v.get("prepare") or {}).get("warnings") or []):
                if w not in out:
                    out.append(w)
            if v.get("cuda_graph_fallback"):
                out.append(f"{v['key']}: CUDA graph capture fell back to plain enqueue: {v['cuda_graph_fallback']}")
        return out

    def report_data(self, summary: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
        """(summary with per-query latencies added, per-layer records tagged by variant) for the report."""
        variants = [{**v, "samples_ms": self.samples_ms.get(v["key"])} if self.samples_ms.get(v["key"]) else v
                    for v in summary["variants"]]
        # the sweep's key wins over a "variant" the per-layer frame carries (None from a backend's profile)
        layers = [{**rec, "variant": key} for key, recs in self.layers.items() for rec in recs]
        return {**summary, "variants": variants}, layers

    def findings(self) -> list[Finding]:
        from profiler.rules.sweep import sweep_findings

        found = sweep_findings(self.variants, getattr(self, "environment", {}), self.config.rule_thresholds)
        return sort_findings(found + list(self.accuracy_findings) + list(self.extra_findings))

    def summary(self) -> dict[str, Any]:
        """summary.json: the run, every variant (in plan order), the findings."""
        c = self.config
        info = getattr(self, "model_info", None)
        run = {
            "id": self.run_id, "kind": "sweep", "label": c.label, "status": self.status,
            "model": str(getattr(self, "model_path", c.model or "")),
            "model_hash": info.model_hash if info is not None else None,
            "model_info": info.to_dict() if info is not None else None,
            "backend": self.backend.name if self.backend is not None else c.backend,
            "backend_reason": self.backend_reason,
            "environment": getattr(self, "environment", {}),
            "config": c.to_dict(), "inputs_source": getattr(self, "inputs_source", None),
            "started_at": self.started_at, "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "notes": list(self.notes),
            "warnings": self._warnings(),
            "random_calibration": any(((v.get("prepare") or {}).get("calibration") or {}).get("meaningless")
                                      for v in self.variants),
            "skipped": [{"key": v["key"], "reason": v.get("error")} for v in self.variants
                        if v["status"] == "skipped"],
        }
        variants = sorted(self.variants, key=_plan_order(c))
        return json_safe({"kind": "sweep", "run": run, "variants": variants,
                          "findings": [f.to_dict() for f in self.findings()]})


def _plan_order(c: SweepConfig) -> Callable[[dict[str, Any]], tuple]:
    """Sort key putting variants in the axes' order (precision, workspace, streams, graph)."""
    precs = list(dict.fromkeys(c.precisions))
    wss = list(dict.fromkeys(c.workspaces))
    strs = list(dict.fromkeys(int(s) for s in c.streams))

    def key(v: dict[str, Any]) -> tuple:
        def idx(seq: list, val: Any) -> int:
            return seq.index(val) if val in seq else len(seq)
        return (idx(precs, v.get("precision")), idx(wss, v.get("workspace_bytes")),
                idx(strs, v.get("streams")), bool(v.get("cuda_graph")))

    return key


def _device_memory(backend: Backend) -> dict[str, int] | None:
    """Free/used/total device memory from the driver while a GPU variant's contexts are alive."""
    if backend.name == "onnxruntime" and getattr(backend, "device", "cpu") == "cpu":
        return None
    try:
        from profiler.cuda import mem_info

        mi = mem_info()
        return {"free_bytes": mi.free_bytes, "used_bytes": mi.used_bytes, "total_bytes": mi.total_bytes}
    except Exception:
        return None


def _rss() -> int | None:
    from profiler.backends.onnxruntime import rss_bytes

    return rss_bytes()


def run_sweep(config: SweepConfig, *, store: Any = None, backend: Backend | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Run a new sweep (stored when ``store`` is given) and return summary.json's dict."""
    return Sweep(config, store=store, backend=backend, progress=progress).run()


def stored_variant_record(row: dict[str, Any]) -> dict[str, Any]:
    """A stored variant (``Store.run_dict``) back in summary.json's variant form."""
    metrics = dict(row.get("metrics") or {})
    rec = {k: row.get(k) for k in ("key", "precision", "workspace_bytes", "streams", "cuda_graph", "backend",
                                   "status", "error", "latency_ms", "throughput_qps", "fingerprint")}
    rec.update(metrics)
    if not rec.get("latency_ms"):
        rec["latency_ms"] = None
    rec.setdefault("enqueue_ms", None)
    acc = {}
    for a in row.get("accuracy") or []:
        acc[a["output"]] = {k: v for k, v in a.items() if k not in ("id", "variant_id", "output")}
    rec["accuracy"] = acc
    return rec


def resume_sweep(store: Any, run_ref: int | str, *, backend: Backend | None = None,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Continue an interrupted (or failed) sweep: only the variants not yet stored are run."""
    return open_resume(store, run_ref, backend=backend, progress=progress).run()


def open_resume(store: Any, run_ref: int | str, *, backend: Backend | None = None,
                progress: Progress | None = None) -> Sweep:
    """A Sweep that continues stored run ``run_ref`` (its config, its finished variants) when run."""
    run = store.run_dict(run_ref, with_samples=True)
    if run.get("kind") != "sweep":
        kind = run.get("kind") or "unknown"
        article = "an" if kind[:1] in "aeiou" else "a"
        raise UsageError(f"run {run['id']} is {article} {kind} run, not a sweep; --resume continues sweeps")
    if run.get("status") == "ok":
        raise UsageError(f"run {run['id']} finished already; there is nothing to resume")
    from profiler.distributed.sweep import forget_lost

    run = forget_lost(store, run)  # variants lost with their worker (parallel sweeps) are measured again
    config = SweepConfig.from_dict(run.get("config") or {})
    if config.model and not Path(config.model).exists():
        where = "" if Path(config.model).is_absolute() else (
            " (a relative path stored by an older trtprof: run --resume from the folder the sweep started in)")
        raise InputError(f"run {run['id']}'s model {config.model} is not found{where}")
    if backend is None and run.get("backend"):
        config.backend = run["backend"]  # the backend that measured the stored variants
    previous = [stored_variant_record(v) for v in run["variants"]]
    layers = {v["key"]: [{k: x for k, x in layer.items() if k not in ("id", "variant_id")}
                         for layer in v.get("layers") or []]
              for v in run["variants"] if v.get("layers")}
    sweep = Sweep(config, store=store, backend=backend, progress=progress, run_id=run["id"],
                  previous=previous, previous_layers=layers)
    sweep.samples_ms = {v["key"]: [x["latency_ms"] for x in v["samples"]] for v in run["variants"]
                        if v.get("samples")}
    old = (run.get("summary") or {}).get("run") or {}
    sweep.started_at = old.get("started_at") or run.get("created_at") or sweep.started_at
    # accuracy findings of stored variants are rebuilt from their stored metrics
    sweep.accuracy_findings = _stored_accuracy_findings(previous, config)
    return sweep


def _stored_accuracy_findings(previous: list[dict[str, Any]], config: SweepConfig) -> list[Finding]:
    from profiler import accuracy as acc

    out: list[Finding] = []
    thresholds = acc.merge_thresholds(config.thresholds)
    for v in previous:
        if v.get("status") == "ok" and v.get("precision") != "fp32" and v.get("accuracy"):
            per_output = {}
            for name, m in v["accuracy"].items():
                metrics = {k: x for k, x in m.items() if k not in ("passed", "threshold")}
                # a breach whose evidence the store could not keep (a non-finite metric becomes NULL, an
                # 'error' has no column) still fails: the stored verdict is what was measured
                if m.get("passed") is False and acc.evaluate({name: metrics}, v["precision"], thresholds)[0]:
                    metrics["error"] = "outside its threshold when measured (the failing value was not stored)"
                per_output[name] = metrics
            out.extend(acc.accuracy_findings(v["key"], v["precision"], per_output, thresholds,
                                             calibration=(v.get("prepare") or {}).get("calibration")))
    return out


__all__ = ["PlannedVariant", "Sweep", "SweepConfig", "VARIANT_KEYS", "gate_failures", "open_resume", "plan_variants",
           "resume_sweep", "run_sweep", "stored_variant_record"]
