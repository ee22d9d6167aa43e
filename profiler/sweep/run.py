"""The sweep run: prepare what every variant shares, measure each planned variant, store, summarise."""

from __future__ import annotations

import datetime as dt
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler import __version__
from profiler.accuracy import KIND_WORDS
from profiler.backends.base import Backend, BuildError, VariantSpec
from profiler.errors import InputError
from profiler.findings import Finding, json_safe, sort_findings
from profiler.nvtx import ranges, variant_range_name
from profiler.progress import phase
from profiler.rules.context import AccuracyCheck
from profiler.sweep.accuracy_check import accuracy_limits
from profiler.sweep.config import (ACCURACY_SAMPLES, HOLDOUT_FRACTION, PlannedVariant, SweepConfig, plan_order,
                                   plan_variants)
from profiler.sweep.records import variant_line, variant_record
from profiler.sweep.repeat import repeat_variants
from profiler.sweep.steps import VariantState, measure_variant

Progress = Callable[[str], None]
Feeds = list[dict[str, np.ndarray]]


@dataclass
class Prepared:
    """What ``Sweep.prepare`` resolved: the inputs every variant of the run shares, and what is left to do."""

    model_path: Path
    shapes: dict[str, tuple[int, ...]]
    backend: Backend
    plan: list[PlannedVariant]
    feeds: Feeds
    todo: list[PlannedVariant]


@dataclass(frozen=True)
class VariantOutcome:
    """One variant as the run keeps it: measured (``Sweep.measure``, the pipeline's measure task), skipped or
    lost with its worker. ``Sweep.merge`` adds it to the run."""

    record: dict[str, Any]
    """summary.json's variant record."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """One row per timed query (``latency_ms``, ...), as the store keeps them."""
    layers: list[dict[str, Any]] = field(default_factory=list)
    accuracy_checks: list[AccuracyCheck] = field(default_factory=list)
    """The variant's accuracy checks as measured, judged with the run's findings."""
    stored: bool = False
    """The task that measured it wrote it into the run store already (a parallel sweep's worker)."""


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
        self.accuracy_checks: list[AccuracyCheck] = []  # judged by the accuracy rules (rules/sweep_accuracy.py)
        self.extra_findings: list[Finding] = []  # e.g. profiler.distributed's devices_differ
        self.notes: list[str] = []
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat()
        self.status = "running"
        self.resumed_model_hash: str | None = None  # --resume: the model hash the run recorded
        # set by prepare()
        self.model_path: Path | None = None
        self.model_info: Any = None  # profiler.models.ModelInfo
        self.inputs_source: str | None = None
        self.environment: dict[str, Any] = {}
        self._lease: Any = None  # the store lease's Heartbeat while this process runs the run
        self._kinds_said: set[str] = set()  # outputs whose kind was said already

    def say(self, msg: str) -> None:
        self.progress(msg)

    # -- setup -------------------------------------------------------------------------------
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

    def _inputs(self, info: Any, shapes: dict[str, tuple[int, ...]]) -> tuple[Feeds, str]:
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

    def prepare(self, *, create_run: bool = True) -> Prepared:
        """Everything before the first variant: the model, shapes, backend, plan, inputs and (with a store and
        ``create_run``) the stored run. Also used by each worker of a parallel sweep (profiler.distributed)."""
        from profiler.models import default_model_path, inspect_model, resolve_shapes
        from profiler.sweep.options import check_keep_fp32

        c = self.config
        # absolute paths are stored with the run, so --resume works from any folder
        for attr in ("model", "calib", "inputs", "cache_dir"):
            value = getattr(c, attr)
            if value and not Path(value).is_absolute():
                setattr(c, attr, str(Path(value).absolute()))
        model_path = Path(c.model) if c.model else default_model_path()
        self.say(f"model {model_path}")
        with phase(self.say, "  reading and checking the model"):  # a model of 30,000 nodes takes seconds
            info = inspect_model(model_path)
        self.say(f"  {info.node_count} node(s), opset {info.opset}, {info.size_bytes / 1e6:.3g} MB")
        self._check_resumed_model(model_path, info.model_hash)
        self._check_output_names(model_path, [t.name for t in info.outputs])
        check_keep_fp32(model_path, info, c.keep_fp32)
        shapes = resolve_shapes(info, {k: tuple(v) for k, v in (c.shapes or {}).items()})
        backend = self._resolve_backend()
        self.say(f"backend {backend.name}: {self.backend_reason}")
        env = self._environment(backend)
        plan = plan_variants(c, backend, shapes)
        feeds, self.inputs_source = self._inputs(info, shapes)
        self.model_info = info
        if create_run:
            self._open_run(model_path, info.model_hash, backend, env)
        self.environment = env
        self.model_path = model_path
        done = {v["key"] for v in self.variants}
        todo = [p for p in plan if p.spec.key not in done]
        self.say(f"{len(plan)} variant(s): {sum(p.skip_reason is None for p in todo)} to run, "
                 f"{sum(p.skip_reason is not None for p in todo)} skipped, {len(plan) - len(todo)} already done")
        return Prepared(model_path, shapes, backend, plan, feeds, todo)

    def _check_resumed_model(self, model_path: Path, model_hash: str) -> None:
        """--resume measures the model the run started with: a file changed since (another model with the
        same inputs and outputs) would put variants of two models in one run."""
        from profiler.errors import UsageError

        was = self.resumed_model_hash
        if was and model_hash and was != model_hash:
            raise UsageError(f"run {self.run_id}'s model {model_path} changed since the run started (sha256 "
                             f"{was[:16]}... then, {model_hash[:16]}... now); start a new sweep instead of "
                             "resuming it")

    def _check_output_names(self, model_path: Path, outputs: list[str]) -> None:
        """--output-kind and --output-tolerance name outputs of the model (a typo would go unused, unsaid)."""
        from profiler.errors import UsageError

        for option, names in (("--output-kind", self.config.output_kinds),
                              ("--output-tolerance", self.config.output_tolerances)):
            unknown = [n for n in names or {} if n not in outputs]
            if unknown:
                raise UsageError(f"{option} names {unknown[0]!r}, which is not an output of {model_path.name} "
                                 f"(its outputs: {', '.join(map(repr, outputs)) or 'none'})")

    def _open_run(self, model_path: Path, model_hash: str, backend: Backend, env: dict[str, Any]) -> None:
        """Store a new run (or claim the resumed one) and hold its lease while this process runs it."""
        from profiler.store import lease

        if self.store is None:
            return
        owner = lease.new_owner()
        if self.run_id is None:
            from profiler.store.rows import sweep_run

            self.run_id = self.store.create_run(
                **sweep_run(self.config.to_dict(), model_path, model_hash, backend, env, self.config.label),
                lease_owner=owner,
                lease_expires_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=lease.LEASE_TTL_S))
        else:
            lease.claim(self.store, self.run_id, owner)  # refuses a run another live process is running
        self._lease = lease.Heartbeat(self.store, self.run_id, owner).start()

    # -- the variants ------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        p0 = self.prepare()
        try:
            reference = self.reference_outputs(p0) if p0.todo else None
            for i, p in enumerate(p0.todo, 1):
                if p.skip_reason:
                    self.say(f"[{i}/{len(p0.todo)}] {p.spec.key}: skipped ({p.skip_reason})")
                    self.merge(VariantOutcome(variant_record(p.spec, p0.backend.name, "skipped", p.skip_reason)))
                    continue
                self.say(f"[{i}/{len(p0.todo)}] {p.spec.key}")
                done = self.measure(p, p0, reference)
                if done.record["status"] == "ok":
                    self.say(variant_line(done.record))
                self.merge(done)
            if self.config.repeat >= 2:
                repeat_variants(self, p0.backend, p0.feeds[0])
        except KeyboardInterrupt:
            self.interrupted()
            raise
        except Exception:  # not left 'running': stored failed (resumable), the error goes on up
            self._fail()
            raise
        return self.finish()

    def measure(self, planned: PlannedVariant, prep: Prepared, reference: Feeds | None) -> VariantOutcome:
        """Measure one planned variant inside its NVTX range (``sweep/<key>``), not yet added to the run."""
        before = len(self.accuracy_checks)
        with ranges().range(variant_range_name(planned.spec.key)):
            rec, samples, layers = self._run_variant(planned.spec, prep.backend, prep.model_path, prep.shapes,
                                                     prep.feeds, reference)
        checks = self.accuracy_checks[before:]
        del self.accuracy_checks[before:]  # the run holds them once merged
        return VariantOutcome(rec, samples, layers, checks)

    def merge(self, outcome: VariantOutcome) -> None:
        """Add a variant to the run: its record, samples, layers and accuracy checks, and its rows in the
        store (unless the task that measured it stored them)."""
        if outcome.stored:
            self._keep(json_safe(outcome.record), outcome.samples, outcome.layers)
        else:
            self._store_variant(outcome.record, outcome.samples, outcome.layers)
        self.accuracy_checks.extend(outcome.accuracy_checks)

    def reference_outputs(self, prep: Prepared) -> Feeds | None:
        """The FP32 outputs the lower-precision variants of the plan are checked against (None: none needed)."""
        return self._reference(prep.backend, prep.model_path, prep.shapes, prep.feeds, prep.plan)

    def _run_variant(self, spec: VariantSpec, backend: Backend, model_path: Path,
                     shapes: dict[str, tuple[int, ...]], feeds: Feeds,
                     reference: Feeds | None) -> tuple[dict[str, Any], list[dict], list[dict]]:
        """Measure one variant (profiler.sweep.steps): (summary record, samples, layers)."""
        return measure_variant(self, VariantState(spec, backend, model_path, shapes, feeds, reference))

    def _reference(self, backend: Backend, model_path: Path, shapes: dict[str, tuple[int, ...]],
                   feeds: Feeds, plan: list[PlannedVariant]) -> Feeds | None:
        """FP32 outputs on the accuracy inputs, from an fp32 engine of the same backend."""
        if not any(p.skip_reason is None and p.spec.precision != "fp32" for p in plan):
            return None
        self.say("fp32 reference outputs for the accuracy check")
        spec = VariantSpec("fp32", None, 1, False, tuple(sorted(shapes.items())))
        try:
            with phase(self.say, "  building the fp32 reference"):
                engine = backend.build(str(model_path), spec, str(self.config.cache_root() / "engines"))
        except BuildError as exc:
            self.notes.append(f"no fp32 reference (its build failed: {exc}); accuracy not checked")
            self.say(f"  no fp32 reference: {exc}")
            return None
        try:
            ctx = engine.create_context(0)
            outs = []
            for sample in feeds:
                ctx.set_inputs(sample)
                ctx.query()
                outs.append(ctx.outputs())
            ctx.close()
        except BuildError as exc:  # the FP32 model itself does not run: every variant would fail the same way
            raise InputError(str(exc)) from None
        finally:
            engine.close()
        return outs

    def say_kinds(self, per_output: dict[str, dict[str, Any]]) -> None:
        """Say once per output what it was taken to hold (declared or detected) and so which checks apply."""
        for name, m in per_output.items():
            if name not in self._kinds_said and m.get("kind"):
                self._kinds_said.add(name)
                words = KIND_WORDS.get(m["kind"], m["kind"])
                line = f"output {name!r} taken as {words} ({m.get('kind_reason', '')})"
                self.say(f"  {line}")
                if line not in self.notes:
                    self.notes.append(line)

    def _store_variant(self, rec: dict[str, Any], samples: list[dict], layers: list[dict]) -> None:
        rec = json_safe(rec)
        self._keep(rec, samples, layers)
        if self.store is None or self.run_id is None:
            return
        from profiler.store.rows import sweep_rows

        self.store.add_rows(self.run_id, sweep_rows(rec, samples, layers))

    def _keep(self, rec: dict[str, Any], samples: list[dict], layers: list[dict]) -> None:
        """A variant's record, latencies and layers into this run's summary and report."""
        self.variants.append(rec)
        if samples:
            self.samples_ms[rec["key"]] = [s["latency_ms"] for s in samples]
        if layers:
            self.layers[rec["key"]] = json_safe(layers)

    # -- the end of the run ------------------------------------------------------------------
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
        hb, self._lease = self._lease, None
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
        self.say(f"interrupted: {len(self.variants)} variant(s) stored")  # the CLI says how to continue

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

    # -- what the run says -------------------------------------------------------------------
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

        found = sweep_findings(self.variants, self.environment, self.config.rule_thresholds,
                               accuracy_checks=self.accuracy_checks, accuracy_limits=accuracy_limits(self.config))
        return sort_findings(found + list(self.extra_findings))

    def summary(self) -> dict[str, Any]:
        """summary.json: the run, every variant (in plan order), the findings."""
        c, info = self.config, self.model_info
        run = {
            "id": self.run_id, "kind": "sweep", "label": c.label, "status": self.status,
            "model": str(self.model_path if self.model_path is not None else (c.model or "")),
            "model_hash": info.model_hash if info is not None else None,
            "model_info": info.to_dict() if info is not None else None,
            "backend": self.backend.name if self.backend is not None else c.backend,
            "backend_reason": self.backend_reason,
            "environment": self.environment,
            "config": c.to_dict(), "inputs_source": self.inputs_source,
            "started_at": self.started_at, "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "notes": list(self.notes),
            "warnings": self._warnings(),
            "random_calibration": any(((v.get("prepare") or {}).get("calibration") or {}).get("meaningless")
                                      for v in self.variants),
            "skipped": [{"key": v["key"], "reason": v.get("error")} for v in self.variants
                        if v["status"] == "skipped"],
        }
        variants = sorted(self.variants, key=plan_order(c))
        return json_safe({"kind": "sweep", "run": run, "variants": variants,
                          "findings": [f.to_dict() for f in self.findings()]})


def run_sweep(config: SweepConfig, *, store: Any = None, backend: Backend | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Run a new sweep (stored when ``store`` is given) and return summary.json's dict."""
    return Sweep(config, store=store, backend=backend, progress=progress).run()
