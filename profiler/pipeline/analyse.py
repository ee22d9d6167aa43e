"""The analyse task: one capture read, analysed, written (JSON, report with its timeline, Chrome trace) and
stored, whoever asks: ``trtprof analyze CAPTURE``, each task of ``analyze A B --jobs N`` or ``--scheduler``,
and ``sweep --nsys`` (which leaves the sweep's variant ranges out and writes nothing).

    outcome = analyse(AnalyseRequest("run.sqlite", json_path="a.json", report_path="a.html", store_url=url))
    outcome.data["findings"], outcome.run_id

The task prints nothing: what a caller shows (the JSON on stdout, the trace's note, a missing report
renderer) is in the outcome.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.capture.options import AnalysisOptions


@dataclass(frozen=True)
class AnalyseRequest:
    """What to analyse and where its results go (None: not written)."""

    path: str
    options: AnalysisOptions = field(default_factory=AnalysisOptions)
    json_path: str | None = None
    """``-``: the JSON text comes back in the outcome instead (the caller prints it)."""
    report_path: str | None = None
    trace_path: str | None = None
    """The capture and its findings in the Chrome Trace Event format."""
    store_url: str | None = None
    """The run store to record the run in, already created (the task opens it without upgrading)."""
    label: str | None = None
    cdn: bool = False
    cache: bool = True
    """False: read and analyse the export even when its analysis or frames are cached."""
    leave_out_ranges: str | None = None
    """Leave out the NVTX ranges whose name starts with this (``sweep/``: a sweep's per-variant ranges, so
    the rules judge each timed query); the analysis then bypasses the caches."""


@dataclass(frozen=True)
class AnalyseOutcome:
    """What one analysis made."""

    path: str
    data: dict[str, Any]
    """The analysis document as written to ``--json`` (with ``timeline`` when a JSON or report was asked
    for), plus ``run_id`` once stored."""
    result: Any = field(repr=False, compare=False)
    """The ``AnalysisResult`` (or the cache's ``CachedAnalysis``) behind ``data``."""
    run_id: int | None = None
    json_path: str | None = None
    report_path: str | None = None
    json_text: str | None = None
    """The JSON for a caller to print (``json_path`` ``-``)."""
    report_missing: bool = False
    """A report was asked for and this build has no report renderer."""
    trace_info: dict[str, Any] | None = None
    """The Chrome trace's ``otherData`` (events kept, total, where it was cut)."""


def analyse(request: AnalyseRequest, store: Any = None) -> AnalyseOutcome:
    """Analyse ``request.path`` and write and store what ``request`` asks for. ``store``: an open run store
    to record into (else ``request.store_url``'s, opened and closed here)."""
    result = _analysis(request)
    data = result.to_json()
    stored = dict(data)  # the store keeps the analysis; the timeline pictures live in --json and the report
    if request.json_path or request.report_path:
        data["timeline"] = result.timeline_json(data)  # read back with a cached analysis
    artifacts: list[tuple[str, str]] = [("capture", str(Path(request.path).resolve()))]
    trace_info = None
    if request.trace_path:
        artifacts.append(("trace", str(Path(request.trace_path).resolve())))
        trace_info = _write_trace(result.trace(), result.findings, data, request.trace_path)
    json_text = _write_json(data, request.json_path, artifacts)
    report_missing = _write_report(data, request, artifacts)
    run_id = _store(request, result, stored, artifacts, store)
    if run_id is not None:
        data["run_id"] = run_id
    kinds = {kind for kind, _path in artifacts}
    return AnalyseOutcome(path=request.path, data=data, result=result, run_id=run_id,
                          json_path=request.json_path if "summary" in kinds else None,
                          report_path=request.report_path if "report" in kinds else None,
                          json_text=json_text, report_missing=report_missing, trace_info=trace_info)


def _analysis(request: AnalyseRequest) -> Any:
    if request.leave_out_ranges is not None:
        return _analysis_without(request.path, request.options, request.leave_out_ranges)
    from profiler.capture.result_cache import analyze_path_cached  # a hit imports no pandas

    return analyze_path_cached(request.path, request.options, cache=None if request.cache else False,
                               results=request.cache)


def _analysis_without(path: str, options: AnalysisOptions, prefix: str) -> Any:
    """The analysis of the capture with the NVTX ranges named ``prefix...`` dropped from its frames."""
    from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze
    from profiler.capture.loader import load_trace
    from profiler.capture.trace import FRAMES

    trace = load_trace(path, tables=[f for f in FRAMES if f != "sync"], columns=ANALYSIS_COLUMNS)
    nv = trace.nvtx
    if nv is not None and len(nv):
        names = nv["name"].astype(str)
        trace.nvtx = nv[~names.str.startswith(prefix)].reset_index(drop=True)
    return analyze(trace, options)


def _write_trace(trace: Any, findings: list, data: dict[str, Any], path: str) -> dict[str, Any]:
    from profiler.report.chrome_trace import chrome_trace, write_chrome_trace

    doc = chrome_trace(trace, findings, result=data)
    write_chrome_trace(doc, path)
    return doc["otherData"]


def _write_json(data: dict[str, Any], path: str | None, artifacts: list[tuple[str, str]]) -> str | None:
    """Write the document to ``path``; returns its text instead for ``-``."""
    if not path:
        return None
    text = json.dumps(data, indent=1, allow_nan=False)
    if path == "-":
        return text
    from profiler.files import atomic_write_bytes

    atomic_write_bytes(Path(path), text.encode("utf-8"), "--json")
    artifacts.append(("summary", str(Path(path).resolve())))
    return None


def _write_report(data: dict[str, Any], request: AnalyseRequest, artifacts: list[tuple[str, str]]) -> bool:
    """Write the HTML report; True when it was asked for and this build cannot render one."""
    if not request.report_path:
        return False
    writer = report_writer()
    if writer is None:
        return True
    writer(data, request.report_path, cdn=request.cdn)
    artifacts.append(("report", str(Path(request.report_path).resolve())))
    return False


def report_writer() -> Any:
    """``profiler.report.write_analysis_report``, or None in a build without the report."""
    try:
        from profiler import report
    except ImportError:
        return None
    return getattr(report, "write_analysis_report", None)


def _store(request: AnalyseRequest, result: Any, stored: dict[str, Any], artifacts: list[tuple[str, str]],
           store: Any) -> int | None:
    if store is None and not request.store_url:
        return None
    from profiler.capture.record import store_analysis

    o = request.options
    options = {"min_gap_us": o.min_gap_us, "unit": o.unit, "include_setup": o.include_setup,
               "layer_info": o.layer_info}
    own = store is None
    if own:
        from profiler.store import Store

        store = Store.open(request.store_url, upgrade=False)  # the caller created or upgraded it
    try:
        return store_analysis(store, result, source=request.path, label=request.label, artifacts=artifacts,
                              options=options, data=stored)
    finally:
        if own:
            store.close()

