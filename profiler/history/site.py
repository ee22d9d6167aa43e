"""The history site: ``index.html`` (every series), ``series/<id>.html`` (one series: its own data only) and
``assets/plotly.min.js`` (once, so pages stay small and the folder opens offline; ``cdn`` links plotly instead).
The same pages are what ``serve`` answers."""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path
from typing import Any

from profiler.errors import InputError

PLOTLY_ASSET = "assets/plotly.min.js"


def _name(key: dict[str, Any]) -> tuple[str, str]:
    if key.get("kind") == "range":
        domain = f"{key['domain']}/" if key.get("domain") else ""
        return f"{domain}{key.get('key')}", f"label {key.get('label') or '(none)'}"
    return f"{key.get('key')}", str(key.get("model") or "(no model)")


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:.4g} ms"


def _render(template: str, page: dict[str, Any]) -> str:
    from profiler import __version__
    from profiler.report.render import environment

    return environment().get_template(template).render(
        page=page, version=__version__, generated_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        plotly_src=page.get("plotly_src"))


def index_html(reviewed: list[dict[str, Any]], *, title: str, subtitle: str) -> str:
    rows = []
    for s in reviewed:
        name, sub = _name(s["key"])
        last = s["change_points"][-1] if s["change_points"] else None
        newest = next((p["median_ms"] for p in reversed(s["points"]) if p["median_ms"] is not None), None)
        rows.append({"href": f"series/{s['id']}.html", "name": name, "sub": sub, "kind": s["key"].get("kind"),
                     "gpu": s["key"].get("gpu") or "", "backend": s["key"].get("backend") or "",
                     "runs": len(s["points"]), "newest": _ms(newest), "changes": len(s["change_points"]),
                     "last_change": "" if last is None else
                     f"{last['direction']} x{last['ratio']:.3f} at run {last['after_run']}",
                     "env": len(s["env_changes"]),
                     "cls": "regressed" if s["newest_regressed"] else ""})
    page = {"title": title, "subtitle": subtitle, "series": rows,
            "regressed": sum(1 for s in reviewed if s["newest_regressed"])}
    return _render("history_index.html.j2", page)


def _report_href(path: str | None, live: bool, run_id: int) -> str | None:
    if live:
        return f"../report/{run_id}.html"
    if not path:
        return None
    p = Path(path)
    return p.as_uri() if p.is_absolute() else path


def series_html(s: dict[str, Any], *, db: str | None, live: bool, cdn: bool) -> str:
    from profiler.report.render import plotly_cdn_url

    name, sub = _name(s["key"])
    by_run = {p["run_id"]: p for p in s["points"]}
    db_arg = f" --db {shlex.quote(db)}" if db else ""
    changes = []
    for c in s["change_points"]:
        b, a = by_run[c["before_run"]], by_run[c["after_run"]]
        changes.append({
            "direction": c["direction"], "ratio": f"x{c['ratio']:.3f}", "confidence": f"{c['confidence'] * 100:.2f}%",
            "before_text": f"run {b['run_id']} ({_ms(c['before_ms'])} level, {b['created_at'][:16]})",
            "after_text": f"run {a['run_id']} ({_ms(c['after_ms'])} level, {a['created_at'][:16]})",
            "before_report": _report_href(b.get("report"), live, b["run_id"]),
            "after_report": _report_href(a.get("report"), live, a["run_id"]),
            "compare_href": f"../compare/{b['run_id']}/{a['run_id']}.html" if live else None,
            "command": f"trtprof compare {b['run_id']} {a['run_id']}{db_arg}", "rule": c["rule"],
            "env_note": ("the environment changed at this step: " + ", ".join(c["environment_changed"])
                         if c.get("environment_changed") else "")})
    env_rows = [{"run": f"run {e['run_id']}", "text": "; ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in e["changes"].items())}
                for e in s["env_changes"]]
    pts = s["points"]
    data = {"points": _columns(pts),
            "changes": [{"x": by_run[c["after_run"]]["created_at"], "ratio": c["ratio"], "direction": c["direction"]}
                        for c in s["change_points"]],
            "env": [{"x": pts[e["index"]]["created_at"], "text": ", ".join(sorted(e["changes"]))} for e in s["env_changes"]]}
    banners = []
    if s["newest_regressed"]:
        banners.append({"level": "bad", "text": f"the newest run ({s['newest_run']}) is a regression beyond the "
                                                "run-to-run spread"})
    key_text = ", ".join(f"{k} {v}" for k, v in s["key"].items() if v not in (None, ""))
    page = {"title": f"{name} — history", "subtitle": f"{sub} · {key_text} · {len(pts)} runs",
            "index_href": "../index.html", "changes": changes, "env_rows": env_rows, "banners": banners,
            "run_count": len(pts), "data": data,
            "has_accuracy": any(p["accuracy"] for p in pts), "has_memory": any(p["memory"] for p in pts),
            "plotly_src": plotly_cdn_url() if cdn else f"../{PLOTLY_ASSET}"}
    return _render("history_series.html.j2", page)


def _short(x: float | None) -> float | None:
    """Six significant digits: what a chart can show, at a third of the bytes of a float's repr."""
    return None if x is None else float(f"{x:.6g}")


def _columns(pts: list[dict[str, Any]]) -> dict[str, Any]:
    """The chart's data as columns (one list per figure), the compact form of a long series."""
    acc = [p["accuracy"] or {} for p in pts]
    names = sorted({k for p in pts for k in p["memory"]})
    return {"run_id": [p["run_id"] for p in pts], "x": [p["created_at"] for p in pts],
            "median_ms": [_short(p["median_ms"]) for p in pts], "p99_ms": [_short(p["p99_ms"]) for p in pts],
            "repeats_ms": [[_short(r) for r in p["repeats_ms"]] for p in pts],
            "cosine_min": [_short(a.get("cosine_min")) for a in acc], "max_abs": [_short(a.get("max_abs")) for a in acc],
            "memory_bytes": {n: [p["memory"].get(n) for p in pts] for n in names}}


def subtitle_of(label: str | None, model: str | None, db: str | None, n_series: int) -> str:
    parts = [f"{n_series} series"]
    if label:
        parts.append(f"label {label}")
    if model:
        parts.append(f"model contains {model}")
    if db:
        parts.append(f"store {db}")
    return " · ".join(parts)


def _drop_stale(folder: Path, keep: set[str]) -> None:
    """Remove series pages an earlier build wrote that this one did not (only files named as this module names
    them), so the folder holds exactly the index's series."""
    for page in folder.glob("*.html"):
        if page.name not in keep and len(page.stem) == 12 and all(ch in "0123456789abcdef" for ch in page.stem):
            page.unlink(missing_ok=True)


def write_site(reviewed: list[dict[str, Any]], out: str | Path, *, db: str | None, label: str | None = None,
               model: str | None = None, cdn: bool = False) -> dict[str, Any]:
    """Write the site under ``out``; returns {pages, bytes, largest_page_bytes}."""
    from profiler.files import atomic_write_bytes, os_reason
    from profiler.report.render import plotly_js

    root = Path(out)
    try:
        (root / "series").mkdir(parents=True, exist_ok=True)
        (root / "assets").mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the history site to {root}: {os_reason(exc)}") from None
    sizes = []

    def put(rel: str, text: str) -> None:
        data = text.encode("utf-8")
        atomic_write_bytes(root / rel, data, "the history site")
        sizes.append(len(data))

    if not cdn:
        put(PLOTLY_ASSET, plotly_js())
    put("index.html", index_html(reviewed, title="trtprof history", subtitle=subtitle_of(label, model, db, len(reviewed))))
    plotly = sizes[0] if not cdn else 0
    for s in reviewed:
        put(f"series/{s['id']}.html", series_html(s, db=db, live=False, cdn=cdn))
    _drop_stale(root / "series", {f"{s['id']}.html" for s in reviewed})
    pages = sizes[1:] if not cdn else sizes
    return {"pages": len(pages), "bytes": sum(sizes), "largest_page_bytes": max(pages), "plotly_bytes": plotly}
