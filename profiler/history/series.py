"""The store's runs as series: one per model x variant key x GPU x backend (sweeps, imports), or per label x
range (capture units), each point one run, oldest first. Read in a few queries over the whole selection, so a
year of nightly runs (10,000 runs x 20 variants) loads in seconds."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from profiler.store.api import Store
from profiler.store.queries import accuracy_by_variant, ok_variant_figures, selected_runs

#: Run columns that make a run's environment: a change of one between two runs of a series is marked on the axis.
ENV_COLUMNS = ("gpu", "driver_version", "cuda_version", "tensorrt_version", "nsys_version", "backend")
#: ... and these entries of the run's ``environment`` (a sweep's backend: its version, device, host CPU; the
#: Python and OS), with every entry whose name says clock or ends in _version (not trtprof's own).
ENV_KEYS = ("version", "device", "provider", "compute_capability", "cpu", "cpu_count", "python", "platform")
ENV_EXCLUDED_KEYS = ("trtprof_version", "schema_version")
#: ... and of each GPU a capture recorded (``environment.gpus``): its name and clocks.
GPU_KEYS = ("name",)


def _number(x: Any) -> float | None:
    if type(x) is float:
        return x if math.isfinite(x) else None
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _wanted(key: str) -> bool:
    return key in ENV_KEYS or "clock" in key or (key.endswith("_version") and key not in ENV_EXCLUDED_KEYS)


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


def environment_of(run: dict[str, Any]) -> dict[str, str]:
    """The fields of a run's environment whose change is marked on the axis: ENV_COLUMNS, the ``environment``
    entries _wanted names (a dict of clocks flattened to ``name.key``) and each captured GPU's name and clocks."""
    env = {k: str(run[k]) for k in ENV_COLUMNS if run.get(k) not in (None, "")}
    extra = run.get("environment") if isinstance(run.get("environment"), dict) else {}
    for k, v in extra.items():
        if k == "gpus" and isinstance(v, list):
            for i, gpu in enumerate(v):
                if isinstance(gpu, dict):
                    env.update({f"gpu{i}.{kk}": str(vv) for kk, vv in gpu.items()
                                if _scalar(vv) and (kk in GPU_KEYS or "clock" in kk)})
        elif _wanted(k) and _scalar(v):
            env[k] = str(v)
        elif _wanted(k) and isinstance(v, dict):  # clocks: {"sm_mhz": 1980, ...}
            env.update({f"{k}.{kk}": str(vv) for kk, vv in v.items() if _scalar(vv)})
    return env


def series_id(key: dict[str, Any]) -> str:
    text = "\x1f".join(f"{k}={key.get(k) or ''}" for k in sorted(key))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _series_key(row: dict[str, Any]) -> dict[str, Any]:
    if row["vkind"] == "range":  # a capture unit: the label names what was captured
        return {"kind": "range", "label": row["label"], "domain": row.get("domain"), "key": row["key"], "gpu": row["gpu"]}
    return {"kind": row["vkind"] or "variant", "model": row["model"], "key": row["key"], "gpu": row["gpu"],
            "backend": row["vbackend"] or row["rbackend"]}


def _runs(store: Store, label: str | None, model: str | None) -> dict[int, dict[str, Any]]:
    runs = selected_runs(store, ENV_COLUMNS, label=label, model=model)
    for run in runs.values():
        run["env"] = environment_of(run)
        del run["environment"]
    return runs


def _accuracy(store: Store, label: str | None, model: str | None) -> dict[int, dict[str, Any]]:
    return {vid: {"cosine_min": _number(cos), "max_abs": _number(mx), "failed_outputs": bad}
            for vid, (cos, mx, bad) in accuracy_by_variant(store, label=label, model=model).items()}


#: Memory figures charted, by their path in a variant's ``metrics``.
MEMORY_PATHS = {"rss_after_run_bytes": ("memory", "rss_after_run_bytes"),
                "engine_size_bytes": ("memory", "engine_size_bytes"),
                "activation_bytes_per_context": ("memory", "activation_bytes_per_context")}
#: Latency figures read from a variant's ``latency_ms`` summary.
LATENCY_KEYS = ("median", "p99")


def _repeats(text: Any) -> list[float]:
    """The per-process medians of a run's repeats, from the JSON array the database handed back as text."""
    if not isinstance(text, str) or not text.startswith("["):
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [x for x in (_number(r) for r in value) if x is not None] if isinstance(value, list) else []


def _point(run: dict[str, Any], vid: int, median: Any, p99: Any, mem: tuple, reps: Any,
           acc: dict[str, Any] | None) -> dict[str, Any]:
    memory = {name: x for name, raw in zip(MEMORY_PATHS, mem) if (x := _number(raw)) is not None} if any(
        x is not None for x in mem) else {}
    return {"run_id": run["id"], "variant_id": vid, "created_at": run["created_at"], "label": run["label"],
            "median_ms": _number(median), "p99_ms": _number(p99), "repeats_ms": _repeats(reps) if reps else [],
            "accuracy": acc, "memory": memory, "report": run.get("report"), "env": run["env"]}


def load_series(store: Store, *, label: str | None = None, model: str | None = None) -> list[dict[str, Any]]:
    """Every series of the selection: [{id, key, points (oldest first)}], newest-moving first is the caller's."""
    runs = _runs(store, label, model)
    accuracy = _accuracy(store, label, model)
    rows = ok_variant_figures(store, LATENCY_KEYS, MEMORY_PATHS.values(), label=label, model=model)
    series: dict[tuple, dict[str, Any]] = {}
    for vid, rid, vkind, key, domain, vbackend, median, p99, *rest in rows:
        run = runs.get(rid)
        if run is None:
            continue
        backend = vbackend or run.get("backend")
        group = (vkind, key, domain, backend, run["label"] if vkind == "range" else None, run.get("gpu"),
                 None if vkind == "range" else run.get("model"))
        s = series.get(group)
        if s is None:
            skey = _series_key({"vkind": vkind, "key": key, "domain": domain, "vbackend": backend, "rbackend": None,
                                "label": run["label"], "gpu": run.get("gpu"), "model": run.get("model")})
            s = series[group] = {"id": series_id(skey), "key": skey, "points": []}
        s["points"].append(_point(run, vid, median, p99, rest[:-1], rest[-1], accuracy.get(vid)))
    for s in series.values():
        s["points"].sort(key=lambda p: (p["created_at"] or "", p["run_id"], p["variant_id"]))
    return sorted(series.values(), key=lambda s: tuple(str(s["key"].get(k) or "") for k in
                                                         ("kind", "model", "label", "key", "gpu", "backend")))
