"""HTML reports: one self-contained file per run, built as plain data first and rendered second.

Each document kind (:mod:`profiler.documents`) has a page: ``build_*_page(doc) -> dict`` (plain,
testable data: tables, findings and plotly figure specs), made of the page module's ``SECTIONS``, a list
of functions ``(doc) -> Section | None``; and ``write_*_report(doc, path, *, cdn=False) -> Path`` renders
it with the Jinja2 templates of the ``reports`` package. :func:`write_report` dispatches on the kind. plotly.js is embedded once, so a report opens
offline; ``cdn=True`` references it from a CDN instead.

    from profiler.report import write_report
    write_report(json.load(open("analysis.json")), "report.html")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler.documents import AnalysisDocument, ComparisonDocument, ImportDocument, SweepDocument


__all__ = [
    "write_analysis_report", "write_sweep_report", "write_layers_report", "write_compare_report",
    "write_report", "report_kind",
]


def write_analysis_report(result: AnalysisDocument, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The capture-analysis report of a ``trtprof analyze --json`` dict."""
    from profiler.report.analysis import build_analysis_page
    from profiler.report.render import write_html

    return write_html(build_analysis_page(result), path, cdn=cdn)


def write_sweep_report(summary: SweepDocument, path: str | os.PathLike, *, cdn: bool = False,
                       layers: list[dict] | None = None) -> Path:
    """The sweep report of a sweep's ``summary.json`` dict (``layers``: optional per-layer records)."""
    from profiler.report.render import write_html
    from profiler.report.sweep import build_sweep_page

    return write_html(build_sweep_page(summary, layers=layers), path, cdn=cdn)


def write_layers_report(data: ImportDocument, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The per-layer report of a ``trtprof import --json`` dict."""
    from profiler.report.layers import build_layers_page
    from profiler.report.render import write_html

    return write_html(build_layers_page(data), path, cdn=cdn)


def write_compare_report(data: ComparisonDocument, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The regression-review report of a ``trtprof compare --json`` dict."""
    from profiler.report.compare import build_compare_page
    from profiler.report.render import write_html

    return write_html(build_compare_page(data), path, cdn=cdn)


#: the page that renders each document kind (its template is ``reports/templates/<page>.html.j2``)
PAGE_OF_KIND = {"analyze": "analysis", "sweep": "sweep", "import": "layers", "compare": "compare"}


def report_kind(data: Any) -> str:
    """Which report page fits ``data``: 'analysis', 'sweep', 'layers' or 'compare', from the document's
    kind (:func:`profiler.documents.document_kind`, which alone reads the shape of older files)."""
    from profiler.documents import document_kind

    return PAGE_OF_KIND[document_kind(data)]


def write_report(data: dict, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """Write the report of a trtprof document (any kind: see :mod:`profiler.documents`)."""
    kind = report_kind(data)
    if kind == "analysis":
        return write_analysis_report(data, path, cdn=cdn)
    if kind == "layers":
        return write_layers_report(data, path, cdn=cdn)
    if kind == "compare":
        return write_compare_report(data, path, cdn=cdn)
    return write_sweep_report(data, path, cdn=cdn, layers=data.get("layers") or None)
