"""Plain data about variants for the sweep and per-layer pages: each variant's build-and-run checklist,
series over an axis (throughput by streams, latency by workspace), accuracy against speed, and layer
time by type. Input: variant records of a sweep summary or an import (missing fields are tolerated)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Sequence

from profiler.documents import CHECKLIST_STEPS
from profiler.report.common import finite, stat, status_class
from profiler.fmt import fmt_bytes, fmt_value, humanize_key

ACCURACY_KEYS = ("max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "nan_count", "inf_count", "passed")
PRECISION_COLORS = {"fp32": "#2f74c0", "fp16": "#d9822b", "bf16": "#7b5ea7", "int8": "#2e9e5b", "fp8": "#c0392b"}
MAX_LAYER_TYPES = 12


def variant_key(v: dict) -> str:
    return str(v.get("key") or v.get("name") or "?")


def _details_text(value: Any, skip: Iterable[str] = ()) -> str:
    """A step's details as one short line: 'workspace 1 GiB; build 12.3 s'."""
    skip = set(skip)
    if value is None:
        return ""
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if k in skip or v is None or v == [] or v == {}:
                continue
            if isinstance(v, dict):
                v = "; ".join(f"{humanize_key(a, True)} {fmt_value(a, b)}" for a, b in v.items() if b is not None)
                parts.append(f"{humanize_key(k, True)}: {v}")
            else:
                parts.append(f"{humanize_key(k, True)} {fmt_value(k, v)}")
        text = "; ".join(parts)
    elif isinstance(value, (list, tuple)):
        text = "; ".join(str(x) for x in value)
    else:
        text = str(value)
    return text if len(text) <= 300 else text[:297] + "..."


def accuracy_outputs(v: dict) -> dict[str, dict]:
    """Accuracy per output as a dict, from a dict keyed by output or a list of per-output records."""
    acc = v.get("accuracy")
    if isinstance(acc, dict):
        return {str(k): a for k, a in acc.items() if isinstance(a, dict)}
    if isinstance(acc, list):
        return {str(a.get("output", i)): a for i, a in enumerate(acc) if isinstance(a, dict)}
    return {}


def checklist_step(v: dict, step: str) -> dict[str, str]:
    """One checklist step as ``{"status", "cls", "details", "recorded"}``.

    From ``variant["checklist"][step]`` when recorded (a dict with ``status`` or ``ok``, a bool, or a status
    string); otherwise ``executed`` is derived from the variant's status and accuracy, ``calibrated`` is
    "n/a" for non-int8 precisions, and the rest are "not recorded".
    """
    checklist = v.get("checklist") if isinstance(v.get("checklist"), dict) else {}
    raw = checklist.get(step)
    if raw is not None:
        if isinstance(raw, bool):
            status, det = ("ok" if raw else "failed"), ""
        elif isinstance(raw, str):
            status, det = raw, ""
        elif isinstance(raw, dict):
            if raw.get("status") is not None:
                status = str(raw["status"])
            elif isinstance(raw.get("ok"), bool):
                status = "ok" if raw["ok"] else "failed"
            else:
                status = "recorded"
            det = _details_text(raw, skip=("status", "ok"))
        else:
            status, det = str(raw), ""
        return {"status": status, "cls": status_class(status) or "", "details": det, "recorded": True}
    vstatus = str(v.get("status") or "").lower()
    if step == "calibrated" and str(v.get("precision") or "").lower() not in ("int8", "fp8", "int4"):
        return {"status": "n/a", "cls": "skip", "details": f"{v.get('precision') or 'this precision'} needs no "
                                                         "calibration", "recorded": False}
    if vstatus == "skipped":
        return {"status": "skipped", "cls": "skip", "details": str(v.get("error") or v.get("reason") or ""),
                "recorded": False}
    if step == "executed":
        if vstatus == "failed":
            return {"status": "failed", "cls": "bad", "details": str(v.get("error") or ""), "recorded": False}
        outs = accuracy_outputs(v)
        if vstatus == "ok" or stat(v.get("latency_ms"), "median") is not None:
            bad = [o for o, a in outs.items() if a.get("passed") is False]
            if bad:
                return {"status": "warn", "cls": "warn", "details": "outside the FP32 threshold: " + ", ".join(bad),
                        "recorded": False}
            if outs:
                return {"status": "ok", "cls": "ok", "details": f"{len(outs)} output(s) within the FP32 threshold",
                        "recorded": False}
            ref = str(v.get("precision") or "").lower() == "fp32"
            return {"status": "ok", "cls": "ok", "details": "the FP32 reference" if ref else "ran; no accuracy check",
                    "recorded": False}
    return {"status": "not recorded", "cls": "unknown", "details": "", "recorded": False}


def checklist_rows(variants: Sequence[dict]) -> list[dict[str, Any]]:
    """Every variant's checklist: ``[{"key", "status", "error", "steps": {step: checklist_step}}]``."""
    return [{"key": variant_key(v), "status": str(v.get("status") or "unknown"), "error": v.get("error"),
             "steps": {s: checklist_step(v, s) for s in CHECKLIST_STEPS}} for v in variants]


def ok_variants(variants: Sequence[dict]) -> list[dict]:
    """Variants that ran and have a median latency."""
    return [v for v in variants if str(v.get("status") or "ok").lower() == "ok"
            and stat(v.get("latency_ms"), "median") is not None]


def _group_name(v: dict, fields: Sequence[str]) -> str:
    parts = []
    for f in fields:
        val = v.get(f)
        if val is None:
            continue
        if f == "workspace_bytes":
            parts.append(f"ws {fmt_bytes(val)}")
        elif f == "streams":
            parts.append(f"{val} stream{'s' if val != 1 else ''}")
        elif f == "cuda_graph":
            parts.append("graph" if val else "no graph")
        else:
            parts.append(str(val))
    return " · ".join(parts) or "all"


def series_by(variants: Sequence[dict], x_field: str, y_of, group_fields: Sequence[str]) -> list[dict[str, Any]]:
    """Group variants by ``group_fields`` into series of (x_field, y) points sorted by x."""
    groups: "OrderedDict[str, list[tuple[float, float, str]]]" = OrderedDict()
    for v in variants:
        x, y = finite(v.get(x_field)), y_of(v)
        if x is None or y is None:
            continue
        groups.setdefault(_group_name(v, group_fields), []).append((x, y, variant_key(v)))
    out = []
    for name, pts in groups.items():
        pts.sort()
        out.append({"name": name, "x": [p[0] for p in pts], "y": [p[1] for p in pts], "keys": [p[2] for p in pts]})
    return out


def throughput_by_streams(variants: Sequence[dict]) -> list[dict[str, Any]]:
    """Throughput (qps) against the number of streams, one series per other-axes combination."""
    return series_by(ok_variants(variants), "streams", lambda v: finite(v.get("throughput_qps")),
                     ("precision", "workspace_bytes", "cuda_graph", "backend"))


def latency_by_workspace(variants: Sequence[dict]) -> list[dict[str, Any]]:
    """Median latency against workspace bytes, one series per other-axes combination."""
    return series_by(ok_variants(variants), "workspace_bytes", lambda v: stat(v.get("latency_ms"), "median"),
                     ("precision", "streams", "cuda_graph", "backend"))


def accuracy_vs_speed(variants: Sequence[dict]) -> list[dict[str, Any]]:
    """Per variant with accuracy: median latency, worst (largest) relative L2 error and max abs error over
    its outputs, smallest cosine, and whether every output passed."""
    out = []
    for v in ok_variants(variants):
        outs = accuracy_outputs(v)
        if not outs:
            continue
        rel = [finite(a.get("rel_l2")) for a in outs.values() if finite(a.get("rel_l2")) is not None]
        mx = [finite(a.get("max_abs")) for a in outs.values() if finite(a.get("max_abs")) is not None]
        cos = [finite(a.get("cosine")) for a in outs.values() if finite(a.get("cosine")) is not None]
        out.append({"key": variant_key(v), "precision": str(v.get("precision") or "?"),
                    "latency_ms": stat(v.get("latency_ms"), "median"),
                    "rel_l2": max(rel) if rel else None, "max_abs": max(mx) if mx else None,
                    "cosine": min(cos) if cos else None,
                    "nonfinite": int(sum((a.get("nan_count") or 0) + (a.get("inf_count") or 0)
                                         for a in outs.values())),
                    "passed": all(a.get("passed") is not False for a in outs.values())})
    return out


def layer_records(summary: dict, layers: Sequence[dict] | None) -> list[dict]:
    """Per-layer records from ``layers``, else ``summary["layers"]``, else each variant's ``layers`` list."""
    if layers:
        return [x for x in layers if isinstance(x, dict)]
    if isinstance(summary.get("layers"), list):
        return [x for x in summary["layers"] if isinstance(x, dict)]
    out = []
    for v in summary.get("variants") or []:
        for x in (v.get("layers") or []) if isinstance(v, dict) else []:
            if isinstance(x, dict):
                out.append({**x, "variant": variant_key(v)})
    return out


def layer_time_metric(layers: Sequence[dict]) -> str:
    """The per-layer time column to compare: per-inference average where every record has it, else total."""
    if layers and all(finite(x.get("time_avg_ms")) is not None for x in layers):
        return "time_avg_ms"
    return "time_total_ms"


def layer_time_by_type(layers: Sequence[dict], max_types: int = MAX_LAYER_TYPES) -> dict[str, Any]:
    """Per-variant layer time summed by layer type: ``{"variants", "types", "ms": {type: [per variant]}, "metric"}``.

    Types beyond the ``max_types`` largest are folded into "other"; the per-variant sums are kept exact.
    """
    metric = layer_time_metric(layers)
    variants: list[str] = []
    totals: dict[tuple[str, str], float] = {}
    by_type: dict[str, float] = {}
    for x in layers:
        t = finite(x.get(metric))
        if t is None:
            continue
        var = str(x.get("variant") or "?")
        typ = str(x.get("type") or "unknown")
        if var not in variants:
            variants.append(var)
        totals[(var, typ)] = totals.get((var, typ), 0.0) + t
        by_type[typ] = by_type.get(typ, 0.0) + t
    ordered = sorted(by_type, key=lambda k: -by_type[k])
    keep, rest = ordered[:max_types], ordered[max_types:]
    ms = {typ: [totals.get((var, typ), 0.0) for var in variants] for typ in keep}
    if rest:
        ms["other"] = [sum(totals.get((var, typ), 0.0) for typ in rest) for var in variants]
    return {"variants": variants, "types": list(ms), "ms": ms, "metric": metric}
