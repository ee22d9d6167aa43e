"""Store rows from trtprof's documents: the one place where an analysed NVTX series, an imported
trtexec export and a sweep variant become rows of ``variants``, ``samples``, ``layers`` and
``accuracy``, and an analysis, an import or a sweep becomes a row of ``runs``.

Each ``*_rows`` function returns a :class:`VariantRows` that ``Store.add_rows`` writes in one
transaction; columns a model lacks are folded into its JSON column (``metrics``, ``extra``) by the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.documents import AnalysisDocument, ImportDocument
from profiler.findings import frame_records


@dataclass
class VariantRows:
    """One variant and its per-iteration samples, per-layer rows and per-output accuracy rows."""

    variant: dict[str, Any]  # Variant columns; other keys end up in its ``metrics``
    samples: Any = None  # list of dicts or a DataFrame with Sample's column names (``idx`` required)
    layers: list[dict[str, Any]] | None = None  # Layer columns; other keys end up in its ``extra``
    accuracy: list[dict[str, Any]] | None = None  # Accuracy columns, one row per output


# ----------------------------------------------------------------------------- analyze

def analysis_run(data: AnalysisDocument, source: str | os.PathLike, label: str | None,
                 options: dict[str, Any] | None, source_hash: str | None = None) -> dict[str, Any]:
    """``Store.create_run`` arguments of an analysis (kind 'analyze') of the capture at ``source``
    (``source_hash``: its content hash when the caller has it, else the file is hashed)."""
    from profiler.hashing import file_sha256_or_none

    cap = data["capture"]
    gpus = [g for g in cap.get("gpus") or [] if isinstance(g, dict)]
    drivers = sorted({str(g["driver_version"]) for g in gpus if g.get("driver_version")})
    cuda = sorted({str(g["cuda_version"]) for g in gpus if g.get("cuda_version")})
    return dict(
        kind="analyze", source=str(Path(source).resolve()), source_hash=source_hash or file_sha256_or_none(source), label=label,
        gpu=", ".join(sorted({str(g.get("name")) for g in gpus if g.get("name")})) or None,
        nsys_version=cap.get("nsys_version"), driver_version=", ".join(drivers) or None,
        cuda_version=", ".join(cuda) or None,
        config={"thresholds": data.get("thresholds"), **(options or {})},
        environment={"schema_version": cap.get("schema_version"), "gpus": gpus,
                     "processes": cap.get("processes"), "missing": cap.get("missing")})


def range_rows(r: dict[str, Any], instances: Any, capture_start_ns: int) -> VariantRows:
    """One analysed series (``CaptureContext.ranges`` entry) as a variant of kind 'range', with one sample
    per instance (``instances``: its rows of the series table's instance frame)."""
    import numpy as np
    import pandas as pd

    from profiler import stats

    wall_ms = instances["wall_ns"].to_numpy() / 1e6
    latency_ms, latency = range_latency_ms(instances)
    samples = pd.DataFrame({
        "idx": instances["idx"].to_numpy(),
        "start_ms": (instances["start_ns"].to_numpy() - capture_start_ns) / 1e6,
        "latency_ms": latency_ms,
        # an async range's own time, its enqueue (NaN, stored as NULL, where the latency is the wall time)
        "enqueue_ms": np.full(len(wall_ms), np.nan) if latency == "wall" else wall_ms,
        "gpu_busy_ms": instances["gpu_busy_ns"].to_numpy() / 1e6,
        "compute_ms": instances["compute_ns"].to_numpy() / 1e6,
    })
    metrics = {k: v for k, v in r.items() if k not in ("series_id", "name", "domain", "count", "wall_ms",
                                                       "outlier_indices") and not k.startswith("_")}
    metrics["count"] = r["count"]
    metrics["outlier_indices"] = r["outlier_indices"][:1000]
    metrics["latency"] = latency
    summary = r["wall_ms"] if latency == "wall" else stats.summarize(latency_ms)
    return VariantRows({"kind": "range", "key": r["name"], "domain": r["domain"] or None,
                        "latency_ms": summary, "metrics": metrics}, samples=samples)


def range_latency_ms(instances: Any) -> tuple[Any, str]:
    """(per-instance latency in ms, what it is): the range's wall time, or, for a range whose GPU work mostly
    ends after it (an async enqueue: TensorRT's, a CUDA graph launch), the GPU latency of that work (its first
    start to its last end; the wall time where an instance launched none). Comparing two runs on the
    enqueue's wall time called a GPU twice as slow 'no change'; the time from the enqueue to the work's end
    grows with how far the host runs ahead (queueing), which no engine change explains."""
    import numpy as np

    start, end = instances["start_ns"].to_numpy(), instances["end_ns"].to_numpy()
    gpu_end = instances["gpu_end_ns"].to_numpy() if "gpu_end_ns" in instances else np.zeros(len(start), np.int64)
    has = gpu_end > 0
    if not has.any() or np.median(gpu_end[has] - end[has]) <= 0:
        return (end - start) / 1e6, "wall"
    gpu_start = instances["gpu_start_ns"].to_numpy()
    return np.where(has, gpu_end - gpu_start, end - start) / 1e6, "gpu_latency"


def analysis_summary(data: AnalysisDocument) -> dict[str, Any]:
    """``runs.summary`` of an analysis: the document without the per-instance series (they are samples)."""
    summary = {k: v for k, v in data.items() if k != "ranges"}
    summary["ranges"] = [{k: v for k, v in r.items() if k != "instances"} for r in data["ranges"]]
    return summary


# ----------------------------------------------------------------------------- import

#: the variant fields of an import kept together in ``metrics`` (null when the export lacks them)
EXPORT_METRICS = ("gpu_compute_ms", "enqueue_ms", "h2d_ms", "d2h_ms", "walltime_s", "layer_sum_ms",
                  "per_layer_overhead_ms", "precision_mix_pct")
#: per-layer fields of an export stored in the layer's ``extra``
LAYER_EXTRA = ("fused_nodes", "weights_bytes", "activation_bytes")


def import_run(data: ImportDocument) -> dict[str, Any]:
    """``Store.create_run`` arguments of an import (kind 'import')."""
    run = data["run"]
    return dict(kind="import", source=run["source"], label=run.get("label"), gpu=run.get("gpu"),
                tensorrt_version=run.get("tensorrt_version"), backend="tensorrt", model=run.get("model"),
                config={"paths": run["source"].split(" ")})


def export_rows(v: dict[str, Any], export: Any) -> VariantRows:
    """One imported export (``variants`` entry and its ``profiler.layers.trtexec`` export) with its samples
    and per-layer rows."""
    vd = {k: val for k, val in v.items() if k not in ("time_by_type",)}
    vd["metrics"] = {k: v.get(k) for k in EXPORT_METRICS}
    vd["metrics"]["bindings"] = export_bindings(export.layers)
    layers = []
    for r in frame_records(export.layers):
        r.pop("variant", None)
        extra = {k: r.pop(k) for k in list(r) if k in LAYER_EXTRA}
        layers.append({**r, "extra": extra} if extra else r)
    return VariantRows(vd, samples=export.samples, layers=layers)


def export_bindings(layers: Any) -> dict[str, list[str]] | None:
    """{"inputs": [...], "outputs": [...]}: the engine's network input and output names its layer info
    gives (None without: an export with no layer-info file, or one without ``Bindings``). Two imports of one
    model share the input names (compare.comparable; exporters number the outputs)."""
    out = {}
    for key, col in (("inputs", "network_inputs"), ("outputs", "network_outputs")):
        names = set()
        for cell in (layers[col] if layers is not None and col in layers else []):
            if isinstance(cell, (list, tuple)) or hasattr(cell, "tolist"):
                names.update(str(x) for x in list(cell))
        out[key] = sorted(names)
    return out if out["inputs"] or out["outputs"] else None


def import_summary(data: ImportDocument) -> dict[str, Any]:
    """``runs.summary`` of an import: the run and the alignment (variants and layers are rows)."""
    return {k: data[k] for k in ("run", "alignment")}


# ----------------------------------------------------------------------------- sweep

def sweep_run(config: dict[str, Any], model_path: str | os.PathLike, model_hash: str, backend: Any,
              environment: dict[str, Any], label: str | None) -> dict[str, Any]:
    """``Store.create_run`` arguments of a sweep (kind 'sweep') of the model at ``model_path``, measured by
    ``backend`` (a :class:`profiler.backends.base.Backend`) in ``environment`` (its ``describe()`` and the
    host's); ``config`` is ``SweepConfig.to_dict()``, stored so ``--resume`` can continue the run."""
    env = environment
    return dict(
        kind="sweep", source=str(model_path), source_hash=model_hash, model=Path(model_path).name, label=label,
        backend=backend.name, host=env.get("host"), gpu=env.get("device") if backend.is_gpu else None,
        tensorrt_version=backend.tensorrt_version(), driver_version=env.get("driver_version"),
        cuda_version=env.get("cuda_version"), config=config, environment=env)


def sweep_rows(rec: dict[str, Any], samples: list[dict] | None, layers: list[dict] | None) -> VariantRows:
    """One sweep variant (its summary.json record) with its timed queries and per-layer records; its
    ``accuracy`` dict becomes one row per output."""
    row = {k: v for k, v in rec.items() if k != "accuracy"}
    accuracy = [{"output": name, **metrics} for name, metrics in (rec.get("accuracy") or {}).items()]
    return VariantRows(row, samples=samples, layers=layers, accuracy=accuracy)
