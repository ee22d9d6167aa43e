"""``--resume RUN``: continue an interrupted (or failed) sweep; only the variants not yet stored run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.backends.base import Backend
from profiler.errors import InputError, UsageError
from profiler.sweep.accuracy_check import stored_accuracy_checks
from profiler.sweep.config import SweepConfig
from profiler.sweep.records import stored_variant_record
from profiler.sweep.run import Progress, Sweep


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
    sweep.resumed_model_hash = run.get("source_hash")
    sweep.samples_ms = {v["key"]: [x["latency_ms"] for x in v["samples"]] for v in run["variants"]
                        if v.get("samples")}
    old = (run.get("summary") or {}).get("run") or {}
    sweep.started_at = old.get("started_at") or run.get("created_at") or sweep.started_at
    # the accuracy checks of stored variants are rebuilt from their stored metrics, and judged again
    sweep.accuracy_checks = stored_accuracy_checks(previous, config)
    return sweep


def lost_keys(run: dict[str, Any]) -> list[str]:
    """The variants of a stored run that were lost with their worker (stored failed, ``lost`` in metrics)."""
    return [v["key"] for v in run.get("variants") or []
            if v.get("status") == "failed" and (v.get("metrics") or {}).get("lost")]


def forget_lost(store: Any, run: dict[str, Any]) -> dict[str, Any]:
    """Before a resume: delete the stored rows of the variants lost with their worker, so that they run
    again (and the run keeps one row per variant). Returns ``run`` without them."""
    keys = lost_keys(run)
    if not keys:
        return run
    store.delete_variants(run["id"], keys)
    return {**run, "variants": [v for v in run["variants"] if v["key"] not in keys]}
