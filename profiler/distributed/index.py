"""The index of a many-capture analysis: one row per capture, as data (index.json) and as a sortable page.

An engineer triaging a fleet looks for the capture that is unlike the others: each row carries its
inference's median GPU latency against the median of its peers (``vs_peers``, when at least ``MIN_PEERS``
captures are peers), so the slow host sorts to the top. Peers run the same network: their units have the
same name and their ``network`` fingerprints (layer names or heaviest kernels, input shapes where known:
:func:`profiler.distributed.captures.network_fingerprint`) are equal; every TensorRT capture's unit is
``ExecutionContext::enqueue``, so the name alone would compare unrelated engines. The
host wall time of the unit's range is shown beside it but not compared: for an asynchronous loop (CUDA
graphs, TensorRT's enqueueV3) it is only the time to enqueue the work.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

MIN_PEERS = 3  # captures sharing an inference unit before a peer median means anything
COMPARED = "unit_gpu_latency_ms"  # what peers are compared on: the inference's median GPU latency
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3, None: 4}


def build_index(rows: list[dict[str, Any]], *, wall_s: float, mode: str) -> dict[str, Any]:
    """index.json: the rows (input order) with peer ratios added, the failed captures, the totals."""
    peers: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get("status") == "ok" and isinstance(r.get(COMPARED), (int, float)) and _comparable(r):
            peers.setdefault(peer_key(r), []).append(float(r[COMPARED]))
    out_rows = []
    for r in rows:
        r = dict(r)
        group = (peers.get(peer_key(r)) or []) if _comparable(r) else []
        median = statistics.median(group) if len(group) >= MIN_PEERS else None
        value = r.get(COMPARED)
        r["peer_count"] = len(group) if r.get("status") == "ok" else 0
        r["vs_peers"] = (float(value) / median) if median and isinstance(value, (int, float)) else None
        worst = next((f.get("severity") for f in r.get("top_findings") or []), None)
        r["worst_severity"] = worst
        out_rows.append(r)
    failed = [{"capture": r["capture"], "error": r.get("error")} for r in out_rows if r.get("status") != "ok"]
    return {"kind": "analyze_index", "mode": mode, "min_peers": MIN_PEERS, "wall_s": round(wall_s, 3), "captures": out_rows,
            "counts": {"total": len(out_rows), "ok": len(out_rows) - len(failed), "failed": len(failed)},
            "failed": failed}


def peer_key(row: dict[str, Any]) -> tuple[str, str]:
    """What makes two captures peers: the same unit name and the same network fingerprint."""
    return str(row.get("unit")), str(row.get("network"))


def _comparable(row: dict[str, Any]) -> bool:
    """A unit that is a whole-capture window (no NVTX, or no repeated range) measures how long the capture
    ran, not an inference: captures are not compared on it."""
    return row.get("unit_source") != "window" and row.get("unit") != "(capture)"


def _rel(path: str | None, base: Path) -> str | None:
    if not path:
        return None
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return path


def _num(v: Any, digits: int = 3) -> tuple[str, str]:
    """(shown text, sort value) of a number; missing numbers sort last."""
    if isinstance(v, (int, float)) and v == v:
        return f"{v:,.{digits}f}", repr(float(v))
    return "-", ""


def page_rows(index: dict[str, Any], base: Path) -> list[dict[str, Any]]:
    """The table's rows for the template: each cell as (text, sort value, css class)."""
    rows = []
    for r in index["captures"]:
        counts = r.get("finding_counts") or {}
        busy = r.get("gpu_busy_fraction", r.get("unit_gpu_busy_fraction"))  # older indexes: the unit's
        vs = r.get("vs_peers")
        cells = {
            "status": (r["status"], r["status"], "ok" if r["status"] == "ok" else "bad"),
            "gpus": (", ".join(r.get("gpus") or []) or "-", ", ".join(r.get("gpus") or []), ""),
            "duration": _num(r.get("duration_ms"), 1) + ("num",),
            "series": (r.get("unit") or "-", r.get("unit") or "", "mono", r.get("unit_source"), r.get("bound_by")),
            "count": _num(r.get("unit_count"), 0) + ("num",),
            "latency": _num(r.get("unit_gpu_latency_ms")) + ("num",),
            "p99": _num(r.get("unit_gpu_latency_p99_ms")) + ("num",),
            "wall": _num(r.get("unit_wall_ms")) + ("num",),
            "busy": (_num(busy * 100 if isinstance(busy, (int, float)) else None, 1)) + ("num",),
            "vs": (_num(vs, 2)[0] + ("x" if vs is not None else ""), _num(vs, 2)[1],
                   "num " + ("bad" if vs is not None and vs >= 1.2 else "")),
            "findings": (" / ".join(str(counts.get(s, 0)) for s in ("high", "medium", "low")),
                         str(-(counts.get("high", 0) * 10000 + counts.get("medium", 0) * 100 + counts.get("low", 0))),
                         "num"),
        }
        rows.append({"name": r["name"], "capture": r["capture"], "report": _rel(r.get("report"), base),
                     "json": _rel(r.get("json"), base), "run_id": r.get("run_id"), "error": r.get("error"),
                     "cells": cells, "top_findings": [{**f, "short": _short(f.get("title"))}
                                                      for f in r.get("top_findings") or []],
                     "severity_rank": SEVERITY_ORDER.get(r.get("worst_severity"), 4)})
    return rows


def _short(text: Any, limit: int = 90) -> str:
    text = str(text or "")
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "\u2026"


def write_index(index: dict[str, Any], out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``index.json`` and ``index.html`` into ``out_dir`` (atomically each)."""
    from profiler import __version__
    from profiler.report.render import environment

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = _atomic(out / "index.json", json.dumps(index, indent=1, allow_nan=False))
    html = environment().get_template("capture_index.html.j2").render(
        index=index, rows=page_rows(index, out), version=__version__)
    html_path = _atomic(out / "index.html", html)
    return json_path, html_path


def _atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
