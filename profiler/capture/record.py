"""Record an analysis in the run store: one run of kind 'analyze', a variant per range with its samples,
the findings and the artifacts (rows from :mod:`profiler.store.rows`). Apart from the analysis, so that
storing a cached analysis (:class:`~profiler.capture.result_cache.CachedAnalysis`) does not import it."""

from __future__ import annotations

import os
from typing import Any


def store_analysis(store: Any, result: Any, *, source: str | os.PathLike, label: str | None = None,
                   artifacts: list[tuple[str, str]] | None = None, options: dict[str, Any] | None = None,
                   data: dict[str, Any] | None = None) -> int:
    """Record an analysis (an ``AnalysisResult`` or a ``CachedAnalysis``) as a run of kind 'analyze': one
    variant (kind 'range') per series with its per-instance samples (latency, GPU busy time), the
    findings and the artifacts. Returns the run id. ``data``: ``result.to_json()`` when the caller
    already has it. The run's source hash is the one the analysis cache computed, else the file's."""
    from profiler.store import rows

    data = result.to_json() if data is None else data
    run_id = store.create_run(**rows.analysis_run(data, source, label, options,
                                                  source_hash=getattr(result, "source_sha256", None)))
    status = "failed"
    try:
        for variant_rows in result.range_records():
            store.add_rows(run_id, variant_rows)
        store.add_findings(run_id, result.findings)
        for kind, path in artifacts or []:
            store.add_artifact(run_id, kind, path)
        status = "ok"
    finally:
        store.finish_run(run_id, status, summary=rows.analysis_summary(data) if status == "ok" else None)
    return run_id
