"""A variant's record in summary.json: its fields, its build-and-run checklist, its progress line, and the
gate over the run's findings."""

from __future__ import annotations

from typing import Any

from profiler.documents import CHECKLIST_STEPS, current_variant
from profiler.backends.base import VariantSpec
from profiler.progress import trtexec_line

#: the variant fields of summary.json, in order (more keys follow them)
VARIANT_KEYS = ("key", "precision", "workspace_bytes", "streams", "cuda_graph", "backend", "status", "error",
                "latency_ms", "enqueue_ms", "throughput_qps", "accuracy")
#: the build-and-run chain of one variant, in order (the checklist's steps)


def variant_record(spec: VariantSpec, backend_name: str, status: str, error: str | None = None,
                   **extra: Any) -> dict[str, Any]:
    """A variant's summary.json record: VARIANT_KEYS (unmeasured ones None), its shapes, then ``extra``."""
    rec: dict[str, Any] = {"key": spec.key, "precision": spec.precision,
                           "workspace_bytes": spec.workspace_bytes, "streams": spec.streams,
                           "cuda_graph": spec.cuda_graph, "backend": backend_name, "status": status,
                           "error": error, "latency_ms": None, "enqueue_ms": None, "throughput_qps": None,
                           "accuracy": {}}
    rec["shapes"] = {k: list(v) for k, v in spec.shapes}
    rec.update(extra)
    return rec


def variant_line(rec: dict[str, Any]) -> str:
    """The progress line of a measured variant."""
    return (f"  {rec['key']}: {trtexec_line(rec['latency_ms'])}; throughput {rec['throughput_qps']:.1f} qps "
            f"over {rec['count']} queries")


def gate_failures(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings that fail the sweep's gate (exit 1): precision regressions that mean something, and
    variants that were asked for but failed to build or run (skips are not failures).

    A breach by an int8 variant calibrated on random inputs is reported (severity info) but does not
    fail the gate: its accuracy numbers mean nothing.
    """
    return [f for f in findings if f.get("rule") in ("precision_regression", "variant_failed")
            and f.get("severity") != "info"]


def failed_checklist(spec: VariantSpec, at: str, error: str) -> dict[str, Any]:
    """The checklist of a variant that failed at step ``at``: earlier steps ok, later ones not reached."""
    out: dict[str, Any] = {}
    where = CHECKLIST_STEPS.index(at)
    for i, step in enumerate(CHECKLIST_STEPS):
        if i < where:
            out[step] = {"status": "ok"}
        elif i == where:
            out[step] = {"status": "failed", "error": error}
        else:
            out[step] = {"status": "not reached"}
    if spec.precision != "int8" and at != "calibrated":
        out["calibrated"] = {"status": "n/a"}
    return out


def checklist(spec: VariantSpec, pinfo: dict[str, Any], einfo: dict[str, Any] | None,
              rec: dict[str, Any] | None) -> dict[str, Any]:
    """The build-and-run chain of a built variant: parsed, optimized, calibrated, serialized, executed.

    Each step is ``{"status": ok|warn|n/a, ...details}`` (see :func:`failed_checklist` for a failure)."""
    einfo = einfo or {}
    trt = einfo.get("checklist") or {}
    warns = list(trt.get("parser_warnings") or [])
    out: dict[str, Any] = {}
    out["parsed"] = {"status": "warn" if warns else "ok", "parser_warnings": warns,
                     **({"layers": trt["parsed"].get("layers")} if isinstance(trt.get("parsed"), dict) else {})}
    out["optimized"] = {"status": "ok", "workspace_bytes": spec.workspace_bytes,
                        "shapes": {k: list(v) for k, v in spec.shapes},
                        "build_time_s": einfo.get("build_time_s") or trt.get("build_time_s"),
                        "build_memory_bytes": einfo.get("build_memory_bytes"),
                        "device_memory": trt.get("device_memory")}
    out["calibrated"] = _calibrated(spec, pinfo)
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


def _calibrated(spec: VariantSpec, pinfo: dict[str, Any]) -> dict[str, Any]:
    if spec.precision != "int8":
        return {"status": "n/a"}
    cal = pinfo.get("calibration") or {}
    return {"status": "warn" if cal.get("meaningless") else "ok", "data": cal.get("source"),
            "method": cal.get("method"), "samples": cal.get("samples"), "cache_reused": cal.get("cache_hit")}


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
    return current_variant(rec)  # a run stored before the -ize spelling keeps 'localisation' in its metrics
