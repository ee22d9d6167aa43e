"""Building blocks shared by every report: pages, sections, tables, findings, plotly figure specs.

A *page* is plain data: ``{"kind", "title", "subtitle", "banners", "cards", "sections", "figures"}``.
Each page kind lists its sections as functions ``(doc) -> Section | None`` (``SECTIONS`` in its
module; None: the document has nothing for it) and :func:`add_sections` places them in that order.
A section holds *blocks* (``chart``, ``table``, ``kv``, ``findings``, ``note``, ``missing``,
``details``) that the templates render one way everywhere, and its charts' figures. Figures are
plotly JSON specs (dicts); plotly itself is never imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from profiler.fmt import DASH, fmt_num, fmt_value, humanize_key, is_number

SEVERITY_ORDER = ("high", "medium", "low", "info")
STATUS_CLASSES = {
    "ok": "ok", "passed": "ok", "pass": "ok", "yes": "ok", "true": "ok", "done": "ok", "reused": "ok",
    "warn": "warn", "warning": "warn", "degraded": "warn", "random": "warn",
    "failed": "bad", "fail": "bad", "error": "bad", "false": "bad", "no": "bad",
    "skipped": "skip", "n/a": "skip", "not applicable": "skip", "not run": "skip", "not reached": "skip",
}
PALETTE = ["#2f74c0", "#d9822b", "#2e9e5b", "#c0392b", "#7b5ea7", "#8c6d31", "#d45fa6", "#6b7280",
           "#17a2b8", "#a3b83a"]
#: more distinct colours for categories that can be many (layer types, variants): no two share one
WIDE_PALETTE = PALETTE + ["#1f3f77", "#f2b36b", "#7fcf9f", "#e58a82", "#b9a6d6", "#c9b27c", "#f0a6cf",
                          "#a8b0ba", "#7fd1dd", "#d4e08a"]
OUTLIER_COLOR = "#c0392b"
NOT_IN_CAPTURE = "not in this capture"
NOT_IN_RUN = "not in this run"


# ----------------------------------------------------------------------------- numbers

def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    return float(value) if is_number(value) else None


def rounded(value: Any, sig: int = 6) -> float | None:
    """A finite number rounded to ``sig`` significant digits (keeps page size small), else None."""
    v = finite(value)
    if v is None or v == 0:
        return v
    return round(v, sig - 1 - int(math.floor(math.log10(abs(v)))))


def rounded_list(values: Iterable[Any], sig: int = 6) -> list[float | None]:
    return [rounded(v, sig) for v in values]


def stat(stats: Any, key: str) -> float | None:
    """One statistic out of a ``{"min", "median", ...}`` dict, tolerant of a missing dict or key."""
    return finite(stats.get(key)) if isinstance(stats, dict) else None


# ----------------------------------------------------------------------------- page scaffolding

def new_page(kind: str, title: str, subtitle: str = "") -> dict[str, Any]:
    """An empty page. ``verdict`` (see :mod:`profiler.report.verdict`) is rendered first, ``metadata``
    (blocks) last, collapsed."""
    return {"kind": kind, "title": title, "subtitle": subtitle, "verdict": None, "banners": [], "cards": [],
            "sections": [], "figures": {}, "metadata": []}


def banner(page: dict, level: str, text: str) -> None:
    """Add a banner unless the page already says the same thing."""
    key = " ".join(str(text).lower().split())
    if any(" ".join(b["text"].lower().split()) == key for b in page["banners"]):
        return
    page["banners"].append({"level": level, "text": str(text)})


def drop_empty_columns(columns: Sequence[str], rows: Sequence[Sequence[Any]], keep: int = 1
                       ) -> tuple[list[str], list[list[Any]]]:
    """Columns (after the first ``keep``) that hold a value in some row, and the rows cut to them."""
    def empty(c: Any) -> bool:
        text = c.get("text") if isinstance(c, dict) else c
        return text is None or text == "" or text == DASH
    idx = [i for i in range(len(columns)) if i < keep or any(i < len(r) and not empty(r[i]) for r in rows)]
    return [columns[i] for i in idx], [[r[i] for i in idx] for r in rows]


@dataclass
class Section:
    """One section of a page: an anchor id, a title, an intro line, its blocks and its charts' figures."""

    id: str
    title: str
    intro: str = ""
    blocks: list[dict] = field(default_factory=list)
    figures: dict[str, dict] = field(default_factory=dict)

    def add(self, *blocks: dict) -> "Section":
        self.blocks.extend(blocks)
        return self


#: a section of a page: None when the document has nothing for it (the section is left out)
SectionFn = Callable[[Any], "Section | None"]


def add_sections(page: dict, doc: Any, sections: Sequence[SectionFn]) -> None:
    """Append to ``page`` each section the functions build from ``doc``, in order, with their figures
    (an id another section already took gets a suffix, as :func:`chart` gives one inside a section)."""
    for build in sections:
        sec = build(doc)
        if sec is None:
            continue
        renamed = {}
        for fig_id, fig in sec.figures.items():
            new, n = fig_id, 2
            while new in page["figures"]:
                new, n = f"{fig_id}-{n}", n + 1
            page["figures"][new] = fig
            if new != fig_id:
                renamed[fig_id] = new
        if renamed:
            _rename_charts(sec.blocks, renamed)
        page["sections"].append({"id": sec.id, "title": sec.title, "intro": sec.intro, "blocks": sec.blocks})


def _rename_charts(blocks: list[dict], renamed: dict[str, str]) -> None:
    for b in blocks:
        if b.get("type") == "chart" and b.get("id") in renamed:
            b["id"] = renamed[b["id"]]
        elif b.get("type") == "details":
            _rename_charts(b.get("blocks") or [], renamed)


def card(label: str, value: Any, cls: str = "", sub: str = "") -> dict[str, str]:
    return {"label": label, "value": value if isinstance(value, str) else fmt_num(value), "cls": cls, "sub": sub}


def missing(text: str) -> dict[str, str]:
    return {"type": "missing", "text": text}


def note(text: str, level: str = "info") -> dict[str, str]:
    return {"type": "note", "text": text, "level": level}


def chart(owner: "Section | dict", fig_id: str, figure: dict, caption: str = "") -> dict[str, str]:
    """Register ``figure`` under ``fig_id`` on a section (or a page dict) and return the block that places it."""
    figures = owner.figures if isinstance(owner, Section) else owner["figures"]
    fig_id = "fig-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in fig_id)
    base, n = fig_id, 2
    while fig_id in figures:
        fig_id, n = f"{base}-{n}", n + 1
    for trace in figure.get("data", []):
        escape_trace_text(trace)
    figures[fig_id] = figure
    return {"type": "chart", "id": fig_id, "caption": caption}


TEXT_KEYS = ("name", "text", "hovertext", "x", "y", "labels", "legendgroup")


def plot_text(value: Any) -> Any:
    """Escape a label for plotly, which reads trace text as a subset of HTML: 'f<int>' -> 'f&lt;int&gt;'.

    plotly turns the entities back into the literal characters when it draws the SVG text.
    """
    if isinstance(value, str):
        return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if isinstance(value, list):
        return [plot_text(v) for v in value]
    return value


def escape_trace_text(trace: dict) -> dict:
    """Escape, in place, every data-derived string of one trace (names, labels, hover text, categories)."""
    for key in TEXT_KEYS:
        if key in trace:
            trace[key] = plot_text(trace[key])
    return trace


def cell(text: Any, cls: str = "", sub: str = "", title: str = "") -> dict[str, str]:
    """A table cell with a CSS class (status colours), a second line and a tooltip."""
    return {"text": text if isinstance(text, str) else fmt_num(text), "cls": cls, "sub": sub, "title": title}


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric: Sequence[bool] | None = None,
          caption: str = "", limit: int | None = None) -> dict[str, Any]:
    """A table block; plain values are formatted with :func:`fmt_num`, dict cells come from :func:`cell`."""
    rows = list(rows)
    total = len(rows)
    if limit is not None and total > limit:
        rows = rows[:limit]
        caption = (caption + " " if caption else "") + f"(first {limit} of {total} rows)"
    out_rows = [[c if isinstance(c, dict) else cell(c if isinstance(c, str) else fmt_num(c)) for c in r]
                for r in rows]
    if numeric is None:
        numeric = [all(is_number(r[i]) for r in rows if i < len(r) and r[i] is not None) and bool(rows)
                   for i in range(len(columns))]
    return {"type": "table", "columns": list(columns), "rows": out_rows, "numeric": list(numeric),
            "caption": caption}


def kv(rows: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A two-column key/value block; values are formatted by their key's unit."""
    return {"type": "kv", "rows": [(humanize_key(k), v if isinstance(v, str) else fmt_value(k, v))
                                   for k, v in rows]}


def details(summary: str, blocks: list[dict]) -> dict[str, Any]:
    """A collapsible group of tables (never charts: plotly cannot size a hidden div)."""
    return {"type": "details", "summary": summary, "blocks": blocks}


def status_class(status: Any) -> str:
    return STATUS_CLASSES.get(str(status).strip().lower(), "") if status is not None else "unknown"


def scalar_items(d: Any, skip: Iterable[str] = ()) -> list[tuple[str, Any]]:
    """The entries of a dict worth a key/value row (nested lists of dicts are summarised)."""
    if not isinstance(d, dict):
        return []
    skip = set(skip)
    out = []
    for k, v in d.items():
        if k in skip or v is None or v == "" or v == [] or v == {}:
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            v = "; ".join(describe(x) for x in v[:16]) + (f"; ... ({len(v)} in all)" if len(v) > 16 else "")
        elif isinstance(v, dict):
            v = describe(v)
        out.append((str(k), v))
    return out


def describe(d: dict) -> str:
    """A compact one-line description of a small dict: 'name=H200, memory=141 GiB'."""
    name = d.get("name") or d.get("key")
    parts = [str(name)] if name else []
    for k, v in d.items():
        if k in ("name", "key") or v is None or isinstance(v, (dict, list)):
            continue
        parts.append(f"{humanize_key(k, True)} {fmt_value(k, v)}")
    text = ", ".join(parts) if parts else DASH
    return text if len(text) <= 400 else text[:397] + "..."


# ----------------------------------------------------------------------------- findings

def _severity_rank(sev: Any) -> int:
    s = str(sev).lower()
    return SEVERITY_ORDER.index(s) if s in SEVERITY_ORDER else len(SEVERITY_ORDER)


EVIDENCE_TABLE_ROWS = 20


def _evidence_value(key: str, value: Any) -> Any:
    """An evidence value for display: a list of records becomes a small table, anything else text."""
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        columns: list[str] = []
        for rec in value[:EVIDENCE_TABLE_ROWS]:
            for k in rec:
                if k not in columns:
                    columns.append(k)
        rows = [[cell(fmt_value(k, rec.get(k)) if not isinstance(rec.get(k), (dict, list))
                      else describe(rec[k]) if isinstance(rec.get(k), dict) else fmt_value(k, rec.get(k)))
                 for k in columns] for rec in value]
        return table([humanize_key(k) for k in columns], rows, numeric=[False] * len(columns),
                     limit=EVIDENCE_TABLE_ROWS)
    if isinstance(value, dict) and value:
        if all(isinstance(v, dict) for v in value.values()):  # {name: {metric: value}}: one row per name
            return _evidence_value(key, [{"name": k, **v} for k, v in value.items()])
        return table(["", ""], [[cell(humanize_key(k)), cell(fmt_value(k, v) if not isinstance(v, dict)
                                                              else describe(v))] for k, v in value.items()],
                     numeric=[False, False], limit=EVIDENCE_TABLE_ROWS)
    return fmt_value(key, value)


def _pairs(d: Any) -> list[tuple[str, Any]]:
    """A finding's evidence or threshold as display pairs (dicts of records become tables)."""
    if isinstance(d, dict):
        return [(humanize_key(k), _evidence_value(k, v)) for k, v in d.items() if v not in (None, {}, [], "")]
    return [("evidence", fmt_value("", d))] if d else []


def finding_views(findings: Iterable[Any]) -> list[dict[str, Any]]:
    """Findings (dicts or Finding objects) as display records, one per finding, most severe first."""
    items = []
    for f in findings or []:
        if hasattr(f, "to_dict"):
            f = f.to_dict()
        if not isinstance(f, dict):
            continue
        sev = str(f.get("severity") or "info").lower()
        items.append({
            "rule": str(f.get("rule") or "?"),
            "severity": sev,
            "severity_cls": sev if sev in SEVERITY_ORDER else "info",
            "title": str(f.get("title") or f.get("rule") or ""),
            "range": f.get("range"),
            "variant": f.get("variant"),
            "evidence": _pairs(f.get("evidence")),
            "threshold": _pairs(f.get("threshold")),
            "recommendation": str(f.get("recommendation") or ""),
        })
    items.sort(key=lambda x: (_severity_rank(x["severity"]), x["rule"], str(x["range"] or ""),
                              str(x["variant"] or "")))
    return items


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def merged_finding_views(findings: Iterable[Any]) -> list[dict[str, Any]]:
    """Findings merged by rule and cause (:func:`profiler.report.verdict.merge_findings`) as display records.

    A group of one shows its evidence as key/value rows; a larger group shows the evidence that differs
    as one table (a row per variant or range) and what every member shares once.
    """
    from profiler.report.verdict import many, merge_findings

    out = []
    for g in merge_findings(findings):
        members = g["members"]
        lead = members[0]
        view = {"rule": g["rule"], "severity": g["severity"], "severity_cls": g["severity"], "order": g["order"],
                "title": g["title"], "applies_to": g["applies_to"], "impact": g["impact"]["text"],
                "recommendation": g["recommendation"], "range": None, "variant": None,
                "threshold": _pairs(lead.get("threshold")), "evidence": [], "evidence_table": None}
        if len(members) == 1:
            view["range"], view["variant"] = lead.get("range"), lead.get("variant")
            view["evidence"] = _pairs(lead.get("evidence"))
        else:
            evs = [m.get("evidence") if isinstance(m.get("evidence"), dict) else {} for m in members]
            keys = list(dict.fromkeys(k for e in evs for k, v in e.items() if _scalar(v)))
            same = [k for k in keys if all(e.get(k) == evs[0].get(k) for e in evs)]
            differ = [k for k in keys if k not in same]
            view["evidence"] = [(humanize_key(k), fmt_value(k, evs[0].get(k))) for k in same
                                if evs[0].get(k) is not None]
            from profiler.report.verdict import where

            rows = [[cell(where(m) or "—")] + [cell(fmt_value(k, e.get(k))) for k in differ]
                    for m, e in zip(members, evs)]
            view["evidence_table"] = None if not differ else table(["applies to"] + [humanize_key(k) for k in differ], rows,
                                           numeric=[False] + [True] * len(differ), limit=EVIDENCE_TABLE_ROWS)
            if len({m.get("title") for m in members}) > 1:
                view["title"] = f"{g['title']} ({many(g)})"
        out.append(view)
    return out


def severity_counts(findings: Iterable[Any]) -> dict[str, int]:
    """Findings per severity, one per problem as the headline and the findings section count them (a rule
    firing on several ranges or variants for one cause is one)."""
    counts = {s: 0 for s in SEVERITY_ORDER}
    for f in merged_finding_views(findings):
        counts[f["severity_cls"]] += 1
    return counts


def findings_block(findings: Iterable[Any], empty: str = "No findings: every rule passed.",
                   empty_level: str = "ok") -> dict[str, Any]:
    """The findings of a page, merged by rule and cause (one card for one problem in many variants)."""
    views = merged_finding_views(findings)
    if not views:
        return note(empty, empty_level)
    return {"type": "findings", "items": views}


def findings_cards(page: dict, findings: Iterable[Any]) -> None:
    findings = list(findings)
    counts = severity_counts(findings)
    total = sum(counts.values())
    worst = next((s for s in SEVERITY_ORDER if counts[s]), None)
    sub = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    raw = len(finding_views(findings))
    if raw != total:  # the card counts problems, as the headline does; say how many rule results they merge
        sub += f" ({raw} findings over ranges or variants)"
    page["cards"].append(card("findings", str(total), cls=f"sev-{worst}" if worst else "ok", sub=sub))


# ----------------------------------------------------------------------------- figures

def category_colors(names: Iterable[Any]) -> dict[str, str]:
    """One colour per name, in first-seen order, stable across every chart of a page (variants, layer
    types): pass the same full list everywhere so a name keeps its colour even in a chart that lacks others."""
    out: dict[str, str] = {}
    for name in names:
        key = str(name)
        if key not in out:
            out[key] = WIDE_PALETTE[len(out) % len(WIDE_PALETTE)]
    return out


def figure(data: list[dict], layout: dict | None = None, *, height: int = 360) -> dict[str, Any]:
    """A plotly figure spec with the report's house style."""
    base = {
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 12},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "colorway": PALETTE,
        "hovermode": "closest",
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"gridcolor": "#eceff3", "zeroline": False, "automargin": True},
        "yaxis": {"gridcolor": "#eceff3", "zeroline": False, "automargin": True},
    }
    for k, v in (layout or {}).items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return {"data": data, "layout": base}


def short_label(text: Any, limit: int = 48) -> str:
    """A label short enough for an axis; the full name stays in the hover text."""
    s = str(text)
    return s if len(s) <= limit else s[: limit // 2 - 1] + "…" + s[-(limit // 2 - 1):]


def histogram(samples: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts of ``samples`` in bins ``[edges[i], edges[i+1])`` (the last bin is closed)."""
    import numpy as np

    values = np.asarray([v for v in samples if is_number(v)], dtype=float)
    counts, _ = np.histogram(values, bins=np.asarray(edges, dtype=float))
    return [int(c) for c in counts]


def shared_edges(*sample_sets: Sequence[float], bins: int = 40) -> list[float]:
    """Common bin edges covering every sample set (so overlaid histograms line up)."""
    import numpy as np

    values = np.concatenate([np.asarray([v for v in s if is_number(v)], dtype=float) for s in sample_sets]
                            or [np.zeros(0)])
    if values.size == 0:
        return []
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo:
        span = abs(lo) * 0.01 or 1e-3
        lo, hi = lo - span, hi + span
    return [float(x) for x in np.linspace(lo, hi, bins + 1)]


def unique_labels(labels: Sequence[Any]) -> list[str]:
    """Labels made distinct (a category axis would merge equal ones): 'a', 'a (2)', ..."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        s = str(lab)
        if s in seen:
            seen[s] += 1
            s = f"{s} ({seen[s]})"
        else:
            seen[s] = 1
        out.append(s)
    return out
