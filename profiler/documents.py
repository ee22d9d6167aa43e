"""The JSON documents trtprof writes, one type per kind: the schema in code, and the one place that
tells a document's kind.

Every document carries a top-level ``kind``, the name of the command that wrote it::

    "analyze"  trtprof analyze --json      AnalysisDocument   (profiler.capture.analyze.AnalysisResult.to_json)
    "sweep"    the sweep's summary.json    SweepDocument      (profiler.sweep.Sweep.summary)
    "import"   trtprof import --json       ImportDocument     (profiler.layers.importer.build_import)
    "compare"  trtprof compare --json      ComparisonDocument (profiler.compare.runs.compare_runs)

(The values are the commands' names, as the analysis and comparison documents and the store's
``runs.kind`` column have always spelt them.) Consumers dispatch on :func:`document_kind` instead of
guessing from a dict's shape; the shape is looked at only for files written before the sweep and
import documents carried ``kind``, in :func:`document_kind` alone.

The TypedDicts below are the documents' top-level fields (``total=False``: a partial or older
document may lack any of them). Nested records are plain dicts described in each field's comment;
their full vocabulary lives with the code that writes them.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from profiler.errors import InputError

#: The build checklist of a sweep variant, in order (``variant["checklist"]`` maps each to ok/failed/skipped).
CHECKLIST_STEPS = ("parsed", "optimized", "calibrated", "serialized", "executed")

Kind = Literal["analyze", "sweep", "import", "compare"]
#: every document kind, in the order the CLI lists its commands
KINDS: tuple[Kind, ...] = ("analyze", "sweep", "import", "compare")


class Stats(TypedDict, total=False):
    """trtexec-exact statistics of one series, in the unit its field name says (``latency_ms``)."""

    min: float
    mean: float
    median: float
    p90: float
    p95: float
    p99: float
    max: float
    cov_pct: float


class FindingRecord(TypedDict, total=False):
    """``profiler.findings.Finding.to_dict()``: one diagnosis with the numbers that prove it."""

    rule: str  # the registry id of the rule that made it (profiler.rules)
    scope: str  # capture | layers | sweep: what was judged; (scope, rule) names one rule
    severity: str  # high | medium | low | info
    title: str
    range: str | None  # analysis: the NVTX series it concerns
    variant: str | None  # sweep: the variant it concerns
    evidence: dict[str, Any]
    threshold: dict[str, Any]
    recommendation: str
    impact: dict[str, Any]  # {ms_per_instance, share, ...}


class AnalysisDocument(TypedDict, total=False):
    """``trtprof analyze --json``: one capture diagnosed (field by field in :mod:`profiler.capture.analyze`)."""

    kind: Literal["analyze"]
    integrity: dict[str, Any]  # complete, problems [{kind, what, evidence, lost}], trusted, untrusted, rules_not_run
    capture: dict[str, Any]  # source_path, nsys_version, gpus, duration_ms, counts, missing, warnings
    ranges: list[dict[str, Any]]  # per NVTX series: name, domain, count, wall_ms/gpu_busy_ms Stats, outliers
    findings: list[FindingRecord]  # costliest first
    inference: dict[str, Any]  # the inference unit: series, source, gpu_ms/host_ms/queue_ms Stats, bound_by
    layers: list[dict[str, Any]]  # the unit's child ranges: name, gpu_ms, share, kernels
    layer_total: dict[str, Any]
    phases: dict[str, Any]  # setup and steady state
    streams: list[dict[str, Any]]
    gpu_concurrency: float
    overlap_saved_ms: float
    copy_compute_overlap: dict[str, Any]
    top_kernels: list[dict[str, Any]]
    gap_histogram: list[dict[str, Any]]
    sync_summary: list[dict[str, Any]]
    thresholds: dict[str, dict[str, Any]]
    heuristics: dict[str, dict[str, Any]]  # profiler.capture.heuristics.values()
    timeline: dict[str, Any]  # added by `analyze --report` (profiler.capture.timeline.build_timeline)


class SweepRun(TypedDict, total=False):
    id: int | None  # the stored run, None with --no-store
    kind: Literal["sweep"]
    label: str | None
    status: str  # running | ok | failed | interrupted
    model: str
    backend: str
    environment: dict[str, Any]
    config: dict[str, Any]  # profiler.sweep.SweepConfig.to_dict()
    warnings: list[str]
    random_calibration: bool


class SweepDocument(TypedDict, total=False):
    """A sweep's ``summary.json``: every variant's build-and-run record, in plan order."""

    kind: Literal["sweep"]
    run: SweepRun
    variants: list[dict[str, Any]]  # profiler.sweep.VARIANT_KEYS first: key, precision, ..., latency_ms Stats
    findings: list[FindingRecord]
    layers: list[dict[str, Any]]  # per-layer records tagged with their variant (report data only)
    nsys: dict[str, Any]  # with --nsys: the capture and its capture-wide findings
    timeline: dict[str, Any]  # with --nsys: each variant's median query drawn
    artifacts: list[dict[str, Any]]


class ImportDocument(TypedDict, total=False):
    """``trtprof import --json``: trtexec exports as variants with their per-layer times."""

    kind: Literal["import"]
    run: dict[str, Any]  # kind "import", source, label, gpu, tensorrt_version, model, warnings, note
    variants: list[dict[str, Any]]  # one per export: key, precision, latency_ms/gpu_compute_ms Stats, ...
    layers: list[dict[str, Any]]  # per layer: variant, name, type, precision_in/out, time_avg_ms, share_pct
    alignment: list[dict[str, Any]]  # pairs of variants of one model: a, b, summary, groups
    findings: list[FindingRecord]


class ComparisonDocument(TypedDict, total=False):
    """``trtprof compare --json``: a candidate run against a baseline, variant by variant."""

    kind: Literal["compare"]
    verdict: str  # regression | inconclusive | improvement | no_change
    forced: list[str] | None  # why the runs were not comparable, when --force compared them anyway
    latency_regressions: list[str]
    inconclusive: list[str]
    accuracy_regressions: list[str]
    rule: dict[str, Any]  # the decision rule's thresholds
    baseline: dict[str, Any]  # id, label, kind, source, created_at, environment fields
    candidate: dict[str, Any]
    # key, verdict, median_ratio, ci_low/high, p_value, both runs' samples; detectable_change {rel, source,
    # underpowered, repeats_to_decide, text}; noise.disturbance {baseline/candidate: {host_others_share,
    # pushes_toward}, explains}; two captures: role (unit | range), matched_by, measure (inference | host)
    variants: list[dict[str, Any]]
    # two captures only: decided_by (unit | kernels | ranges), ranges_compared, unmatched {baseline, candidate},
    # baseline_unit, candidate_unit, unit, kernels (per-kernel-name comparison), summary
    captures: dict[str, Any]
    environment_changes: list[dict[str, Any]]  # field, baseline, candidate
    findings_appeared: list[FindingRecord]
    findings_disappeared: list[FindingRecord]
    kernel_deltas: list[dict[str, Any]]
    trend: Any


Document = AnalysisDocument | SweepDocument | ImportDocument | ComparisonDocument

#: Variant-record keys that documents and stored runs written before trtprof settled on the -ize spelling
#: spell otherwise: old name -> current name (``localization`` and, in its verification's conclusion,
#: ``localized``).
RENAMED_VARIANT_KEYS = {"localisation": "localization"}
RENAMED_CONCLUSION_KEYS = {"localised": "localized"}


def current_variant(v: dict[str, Any]) -> dict[str, Any]:
    """A sweep variant record with the keys an older document or stored run spelt otherwise
    (:data:`RENAMED_VARIANT_KEYS`) under their current names; ``v`` itself when it has none of them.
    Every reader of a variant's localization goes through here."""
    if not any(old in v for old in RENAMED_VARIANT_KEYS):
        return v
    # an old key beside its current one (never written so) loses to it
    out = {RENAMED_VARIANT_KEYS.get(k, k): x for k, x in v.items() if RENAMED_VARIANT_KEYS.get(k) not in v}
    loc = out.get("localization")
    check = loc.get("verification") if isinstance(loc, dict) else None
    conclusion = check.get("conclusion") if isinstance(check, dict) else None
    if isinstance(conclusion, dict) and any(old in conclusion for old in RENAMED_CONCLUSION_KEYS):
        conclusion = {RENAMED_CONCLUSION_KEYS.get(k, k): x for k, x in conclusion.items()}
        out["localization"] = {**loc, "verification": {**check, "conclusion": conclusion}}
    return out


def _legacy_kind(data: dict[str, Any]) -> Kind | None:
    """The kind of a document written before it carried one, from its shape (older files only)."""
    run = data.get("run") if isinstance(data.get("run"), dict) else {}
    if run.get("kind") in ("sweep", "import"):  # summary.json and import --json named it in their run
        return run["kind"]
    if "baseline" in data and "candidate" in data:
        return "compare"
    if "ranges" in data or "capture" in data:
        return "analyze"
    variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    sweep_keys = ("checklist", "streams", "workspace_bytes", "cuda_graph", "accuracy", "samples_ms")
    if data.get("layers") and not any(k in v for v in variants for k in sweep_keys):
        return "import"
    if "variants" in data:
        return "sweep"
    return None


def document_kind(data: Any) -> Kind:
    """The kind of a trtprof document: its ``kind`` field; for a file written before the field existed
    (sweep summaries and imports), its shape. An unknown ``kind`` or shape is bad input."""
    if not isinstance(data, dict):
        raise InputError("expected a JSON object: the --json output of analyze, sweep, import or compare")
    kind = data.get("kind")
    if kind is not None:
        if kind in KINDS:
            return kind
        known = ", ".join(map(repr, KINDS[:-1])) + f" or {KINDS[-1]!r}"
        raise InputError(f"unknown document kind {kind!r}: a trtprof document's kind is {known}")
    # Older files: the one place a document's kind is inferred from its shape.
    legacy = _legacy_kind(data)
    if legacy is None:
        raise InputError("cannot tell which kind of trtprof document this is: expected the --json output of "
                         "analyze (ranges), sweep (variants), import (layers) or compare (baseline, candidate)")
    return legacy

