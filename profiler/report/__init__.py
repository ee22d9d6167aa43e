"""HTML reports: one self-contained file per run, built as plain data first and rendered second.

Each report has a ``build_*_page(data) -> dict`` function (plain, testable data: tables, findings and
plotly figure specs) and a ``write_*_report(data, path, *, cdn=False) -> Path`` function that renders
it with the Jinja2 templates of the ``reports`` package. plotly.js is embedded once, so a report opens
offline; ``cdn=True`` references it from a CDN instead.

    from profiler.report import write_report
    write_report(json.load(open("analysis.json")), "report.html")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from profiler.errors import InputError

__all__ = [
    "write_analysis_report", "write_sweep_report", "write_layers_report", "write_compare_report",
    "write_report", "report_kind",
]


def write_analysis_report(result: dict, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The capture-analysis report of a ``trtprof analyze --json`` dict."""
    from profiler.report.analysis import build_analysis_page
    from profiler.report.render import write_html

    return write_html(build_analysis_page(result), path, cdn=cdn)


def write_sweep_report(summary: dict, path: str | os.PathLike, *, cdn: bool = False,
                       layers: list[dict] | None = None) -> Path:
    """The sweep report of a sweep's ``summary.json`` dict (``layers``: optional per-layer records)."""
    from profiler.report.render import write_html
    from profiler.report.sweep import build_sweep_page

    return write_html(build_sweep_page(summary, layers=layers), path, cdn=cdn)


def write_layers_report(data: dict, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The per-layer report of a ``trtprof import --json`` dict."""
    from profiler.report.layers import build_layers_page
    from profiler.report.render import write_html

    return write_html(build_layers_page(data), path, cdn=cdn)


def write_compare_report(data: dict, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """The regression-review report of a ``trtprof compare --json`` dict."""
    from profiler.report.compare import build_compare_page
    from profiler.report.render import write_html

    return write_html(build_compare_page(data), path, cdn=cdn)


def report_kind(data: Any) -> str:
    """Which report fits ``data``: 'compare', 'analysis', 'layers' or 'sweep'.

    An explicit ``kind`` (top level or in ``run``: ``analyze``/``sweep``/``import``/``compare``) wins;
    otherwise the shape decides.
    """
    if not isinstance(data, dict):
        raise InputError("a report needs a JSON object (the --json output of analyze, sweep, import or compare)")
    aliases = {"analyze": "analysis", "analysis": "analysis", "capture": "analysis", "sweep": "sweep",
               "import": "layers", "layers": "layers", "compare": "compare"}
    run = data.get("run") if isinstance(data.get("run"), dict) else {}
    for kind in (data.get("kind"), run.get("kind")):
        if isinstance(kind, str) and kind.lower() in aliases:
            return aliases[kind.lower()]
    if "baseline" in data and "candidate" in data:
        return "compare"
    if "ranges" in data or "capture" in data:
        return "analysis"
    variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    sweep_keys = ("checklist", "streams", "workspace_bytes", "cuda_graph", "accuracy", "samples_ms")
    if data.get("layers") and not any(k in v for v in variants for k in sweep_keys):
        return "layers"
    if "variants" in data:
        return "sweep"
    raise InputError("cannot tell which report this data is for: expected the --json output of "
                     "analyze (ranges), sweep (variants), import (layers) or compare (baseline, candidate)")


def write_report(data: dict, path: str | os.PathLike, *, cdn: bool = False) -> Path:
    """Write the report that fits ``data`` (see :func:`report_kind`)."""
    kind = report_kind(data)
    if kind == "analysis":
        return write_analysis_report(data, path, cdn=cdn)
    if kind == "layers":
        return write_layers_report(data, path, cdn=cdn)
    if kind == "compare":
        return write_compare_report(data, path, cdn=cdn)
    return write_sweep_report(data, path, cdn=cdn, layers=data.get("layers") or None)
