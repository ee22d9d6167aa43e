"""The per-layer report (``trtprof import``): where the time goes, in which precision, and how two
engines of the same model line up layer by layer.

Input: the ``trtprof import --json`` document (:class:`profiler.documents.ImportDocument`); the page is
``SECTIONS``, functions ``(doc) -> Section | None``. The sum of per-layer times is larger than the end-to-end
latency (each layer's timing events add overhead); the report shows both and says so.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from profiler.documents import ImportDocument
from profiler.report.common import (
    NOT_IN_RUN, PALETTE, Section, SectionFn, add_sections, banner, card, cell, chart, details, figure, findings_block,
    findings_cards, finite, kv, missing, new_page, note, rounded_list, scalar_items, short_label, stat, table,
    unique_labels,
)
from profiler.fmt import DASH, fmt_pct, fmt_value, humanize_key, is_number
from profiler.report.variants import PRECISION_COLORS, layer_time_by_type, layer_time_metric, variant_key

MAX_LAYER_CHARTS = 6
TOP_LAYERS = 20
_PRECISION_ALIASES = {"float": "fp32", "float32": "fp32", "half": "fp16", "float16": "fp16", "bfloat16": "bf16",
                      "int8": "int8", "fp8": "fp8", "int32": "int32", "bool": "bool", "int64": "int64"}


def precision_label(layer: dict) -> str:
    """The precision a layer ran in: its output precision, else its input precision, else 'unknown'."""
    p = layer.get("precision_out") or layer.get("precision_in")
    if not p:
        return "unknown"
    p = str(p).strip().lower()
    return _PRECISION_ALIASES.get(p, p)


def precision_mix(layers: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Share of each variant's layer time (percent) spent per precision; each variant's shares sum to 100."""
    metric = layer_time_metric(layers)
    sums: "OrderedDict[str, OrderedDict[str, float]]" = OrderedDict()
    for x in layers:
        t = finite(x.get(metric))
        if t is None:
            continue
        var = str(x.get("variant") or "?")
        sums.setdefault(var, OrderedDict())
        p = precision_label(x)
        sums[var][p] = sums[var].get(p, 0.0) + t
    out: dict[str, dict[str, float]] = {}
    for var, by_p in sums.items():
        total = sum(by_p.values())
        out[var] = {p: (t / total * 100.0 if total > 0 else 100.0 / len(by_p)) for p, t in by_p.items()}
    return out


def layer_sum_vs_latency(data: dict) -> list[dict[str, Any]]:
    """Per variant: the sum of per-inference layer times against end-to-end latency and GPU compute time.

    ``layer_sum_ms`` adds ``time_avg_ms`` (else ``time_median_ms``) over the variant's layers;
    ``overhead_pct`` is how much larger it is than the GPU compute median (else the latency median).
    """
    layers = [x for x in data.get("layers") or [] if isinstance(x, dict)]
    variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    keys = [variant_key(v) for v in variants]
    for x in layers:
        k = str(x.get("variant") or "?")
        if k not in keys:
            keys.append(k)
    vmap = {variant_key(v): v for v in variants}
    out = []
    for k in keys:
        xs = [x for x in layers if str(x.get("variant") or "?") == k]
        col = "time_avg_ms" if xs and all(finite(x.get("time_avg_ms")) is not None for x in xs) else "time_median_ms"
        vals = [finite(x.get(col)) for x in xs]
        layer_sum = sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None
        v = vmap.get(k, {})
        lat, gpu = stat(v.get("latency_ms"), "median"), stat(v.get("gpu_compute_ms"), "median")
        ref = gpu if gpu is not None else lat
        out.append({"variant": k, "layers": len(xs), "layer_sum_ms": layer_sum, "layer_time_column": col,
                    "latency_median_ms": lat, "gpu_compute_median_ms": gpu,
                    "overhead_pct": (layer_sum / ref - 1) * 100 if layer_sum is not None and ref else None})
    return out


def alignment_groups(alignment: Any) -> list[dict[str, Any]]:
    """Alignment as ``[{"title", "rows": [dict]}]``: a flat list of rows, or pairs holding ``groups``/``rows``."""
    if not isinstance(alignment, list) or not alignment:
        if isinstance(alignment, dict):
            alignment = [alignment]
        else:
            return []
    nested = [a for a in alignment if isinstance(a, dict) and isinstance(a.get("groups", a.get("rows")), list)]
    if nested:
        out = []
        for a in nested:
            title = " vs ".join(str(a[k]) for k in ("baseline", "candidate") if a.get(k)) or \
                    " vs ".join(str(a[k]) for k in ("a", "b") if a.get(k))
            names = {side: str(a[k]) for side, keys in (("a", ("a", "baseline")), ("b", ("b", "candidate")))
                     for k in keys[::-1] if a.get(k)}
            out.append({"title": title or "alignment", "names": names,
                        "rows": [r for r in a.get("groups", a.get("rows")) if isinstance(r, dict)]})
        return out
    return [{"title": "", "rows": [r for r in alignment if isinstance(r, dict)]}]


def _align_time_keys(rows: Sequence[dict]) -> list[str]:
    """The two time columns of an alignment to chart side by side (``*_ms`` keys other than deltas)."""
    keys: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k.endswith("_ms") and "delta" not in k and is_number(v) and k not in keys:
                keys.append(k)
    return keys[:2]


def _align_label(r: dict, i: int) -> str:
    for k in ("name", "label", "nodes", "layers_a", "baseline_layers", "a_layers", "layers", "layers_b", "group"):
        v = r.get(k)
        if v is not None and v != "" and v != []:
            return ", ".join(map(str, v)) if isinstance(v, list) else str(v)
    return f"group {i}"


# ----------------------------------------------------------------------------- page

def _variants(doc: ImportDocument) -> list[dict]:
    return [v for v in doc.get("variants") or [] if isinstance(v, dict)]


def _layers(doc: ImportDocument) -> list[dict]:
    return [x for x in doc.get("layers") or [] if isinstance(x, dict)]


def _head(page: dict, doc: ImportDocument) -> None:
    """The verdict, the banners, the cards and the run details (collapsed, last)."""
    from profiler.report.verdict import layers_verdict

    run = doc["run"] if isinstance(doc.get("run"), dict) else {}
    variants, layers = _variants(doc), _layers(doc)
    page["verdict"] = layers_verdict(doc)
    for w in run.get("warnings") or doc.get("warnings") or []:
        banner(page, "medium", str(w))
    page["cards"].append(card("variants", str(len(variants) or len({x.get('variant') for x in layers}))))
    page["cards"].append(card("profiled layers", len(layers)))
    findings_cards(page, doc.get("findings") or [])
    items = scalar_items(run, skip=("warnings",))
    if items:
        page["metadata"] = [kv(items)]


def _summary(doc: ImportDocument) -> Section:
    sec = Section("summary", "Summary", "End-to-end timing of each variant, and its per-layer sum.")
    sums = layer_sum_vs_latency(doc)
    if not sums:
        return sec.add(missing("No variants " + NOT_IN_RUN + "."))
    variants = _variants(doc)
    rows = []
    for s in sums:
        v = next((x for x in variants if variant_key(x) == s["variant"]), {})
        rows.append([s["variant"], s["layers"], s["layer_sum_ms"], s["latency_median_ms"],
                     s["gpu_compute_median_ms"], stat(v.get("enqueue_ms"), "median"), finite(v.get("throughput_qps")),
                     cell(fmt_pct(s["overhead_pct"]))])
    return sec.add(table(["variant", "layers", "sum of per-layer times ms", "latency median ms",
                          "GPU compute median ms", "enqueue median ms", "throughput qps",
                          "layer sum over GPU compute"], rows, numeric=[False] + [True] * 7),
                   note("The sum of per-layer times is larger than the end-to-end latency: profiling each "
                        "layer adds timing events around it (per-layer event overhead) and breaks the overlap "
                        "between layers. Use per-layer times for where the time goes (shares), and the "
                        "end-to-end latency for how long an inference takes."))


def _findings(doc: ImportDocument) -> Section:
    sec = Section("findings", "Findings", "Hotspots, unfused reformat and Q/DQ layers, layers left in "
                                          "higher precision, tiny layers, Tensor Core use.")
    return sec.add(findings_block(doc.get("findings") or []))


def _by_layer(doc: ImportDocument) -> Section:
    layers = _layers(doc)
    metric = layer_time_metric(layers)
    sec = Section("by-layer", "Time by layer", f"The {TOP_LAYERS} slowest layers of each variant "
                                               f"({humanize_key(metric)}).")
    by_var: "OrderedDict[str, list[dict]]" = OrderedDict()
    for x in layers:
        by_var.setdefault(str(x.get("variant") or "?"), []).append(x)
    if not by_var:
        return sec.add(missing("Per-layer times " + NOT_IN_RUN + "."))
    for i, (var, xs) in enumerate(by_var.items()):
        xs = sorted(xs, key=lambda x: -(finite(x.get(metric)) or 0.0))
        if i < MAX_LAYER_CHARTS:
            sec.add({"type": "heading", "text": var},
                    chart(sec, f"by-layer-{i}", top_layers_figure(xs[:TOP_LAYERS], metric)))
    inner = []
    for var, xs in by_var.items():
        xs = sorted(xs, key=lambda x: -(finite(x.get(metric)) or 0.0))
        inner.append({"type": "heading", "text": var})
        inner.append(table(["layer", "type", "precision in", "precision out", "tactic", "avg ms", "median ms",
                            "total ms", "share"],
                           [[str(x.get("name", "?")), str(x.get("type") or DASH), str(x.get("precision_in") or DASH),
                             str(x.get("precision_out") or DASH), cell(str(x.get("tactic") or DASH)),
                             finite(x.get("time_avg_ms")), finite(x.get("time_median_ms")),
                             finite(x.get("time_total_ms")), cell(fmt_pct(x.get("share_pct")))] for x in xs],
                           numeric=[False] * 5 + [True] * 4, limit=300))
    return sec.add(details("Every layer", inner))


def _by_type(doc: ImportDocument) -> Section:
    sec = Section("by-type", "Time by layer type")
    layers = _layers(doc)
    lt = layer_time_by_type(layers) if layers else None
    if not (lt and lt["variants"]):
        return sec.add(missing("Layer types " + NOT_IN_RUN + "."))
    return sec.add(chart(sec, "by-type", by_type_figure(lt)),
                   table(["layer type"] + lt["variants"], [[typ] + lt["ms"][typ] for typ in lt["types"]],
                         numeric=[False] + [True] * len(lt["variants"]),
                         caption=f"{humanize_key(lt['metric'])} summed by type."))


def _precision(doc: ImportDocument) -> Section:
    sec = Section("precision", "Precision mix", "Share of each variant's layer time by the precision the "
                                                "layer ran in (its output format).")
    mix = precision_mix(_layers(doc))
    if not mix:
        return sec.add(missing("Layer precisions " + NOT_IN_RUN + "."))
    precs = sorted({p for d in mix.values() for p in d})
    return sec.add(chart(sec, "precision", precision_figure(mix)),
                   table(["variant"] + precs, [[var] + [cell(fmt_pct(d.get(p, 0.0))) for p in precs]
                                               for var, d in mix.items()], numeric=[False] + [True] * len(precs)))


def _alignment(doc: ImportDocument) -> Section:
    sec = Section("alignment", "Layer alignment between variants",
                  "Layers of two engines of the same model matched even where fusion made the lists differ: "
                  "where the time moved and which precision each piece ran in.")
    groups = alignment_groups(doc.get("alignment"))
    if not groups:
        return sec.add(missing("Layer alignment " + NOT_IN_RUN + " (it needs two variants of the same model)."))
    for gi, g in enumerate(groups):
        if g["title"]:
            sec.add({"type": "heading", "text": g["title"]})
        rows = g["rows"]
        tkeys = _align_time_keys(rows)
        if len(tkeys) == 2 and rows:
            shown = len(alignment_rows_drawn(rows, tkeys))
            sec.add(chart(sec, f"alignment-{gi}", alignment_figure(rows, tkeys, g.get("names")),
                          "" if shown == len(rows) else
                          f"The {shown} costliest of {len(rows)} groups, in network order; the table "
                          "lists every group."))
        cols: list[str] = []
        for r in rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
        sec.add(table([humanize_key(c) for c in cols],
                      [[r.get(c) if is_number(r.get(c)) else cell(fmt_value(c, r.get(c))) for c in cols]
                       for r in rows], limit=300))
    return sec


#: The per-layer page, in order. A new section is one function ``(doc) -> Section | None`` and one entry here.
SECTIONS: list[SectionFn] = [_summary, _findings, _by_layer, _by_type, _precision, _alignment]


def build_layers_page(data: ImportDocument) -> dict[str, Any]:
    """The per-layer report as plain data."""
    doc = data if isinstance(data, dict) else {}
    run = doc["run"] if isinstance(doc.get("run"), dict) else {}
    page = new_page("layers", "trtprof per-layer report", str(run.get("source") or run.get("model") or ""))
    _head(page, doc)
    add_sections(page, doc, SECTIONS)
    return page


# ----------------------------------------------------------------------------- figures

def top_layers_figure(xs: Sequence[dict], metric: str) -> dict:
    xs = list(xs)[::-1]
    colors = [PRECISION_COLORS.get(precision_label(x), "#6b7280") for x in xs]
    return figure([{"type": "bar", "orientation": "h", "name": humanize_key(metric),
                    "y": unique_labels([short_label(x.get("name", "?"), 60) for x in xs]), "x": rounded_list(x.get(metric) for x in xs),
                    "hovertext": [f"{x.get('name', '?')} ({x.get('type') or '?'}, {precision_label(x)})" for x in xs],
                    "marker": {"color": colors}, "showlegend": False}],
                  {"xaxis": {"title": {"text": humanize_key(metric).replace(" ms", " (ms)")}}, "margin": {"l": 20}},
                  height=max(260, 22 * len(xs) + 80))


def by_type_figure(lt: dict) -> dict:
    data = [{"type": "bar", "name": var, "x": lt["types"], "y": rounded_list(lt["ms"][t][i] for t in lt["types"])}
            for i, var in enumerate(lt["variants"])]
    return figure(data, {"barmode": "group", "xaxis": {"type": "category"},
                         "yaxis": {"title": {"text": humanize_key(lt["metric"]).replace(" ms", " (ms)")}}})


def precision_figure(mix: dict[str, dict[str, float]]) -> dict:
    precs = sorted({p for d in mix.values() for p in d})
    variants = list(mix)
    data = [{"type": "bar", "name": p, "x": variants, "y": rounded_list(mix[v].get(p, 0.0) for v in variants),
             "marker": {"color": PRECISION_COLORS.get(p, PALETTE[i % len(PALETTE)])}} for i, p in enumerate(precs)]
    return figure(data, {"barmode": "stack", "xaxis": {"type": "category"},
                         "yaxis": {"title": {"text": "share of layer time (%)"}, "range": [0, 100]}})


def _side_name(key: str, names: dict[str, str] | None) -> str:
    """A time column's legend entry: the variant it belongs to (``time_a_ms`` -> the pair's ``a``)."""
    for side in ("a", "b"):
        if (names or {}).get(side) and (key.endswith(f"_{side}_ms") or key.startswith(f"{side}_")):
            return f"{names[side]} ({humanize_key(key)})"
    return humanize_key(key)


#: Alignment groups drawn at most (the costliest, in network order); the table below lists them all.
ALIGN_CHART_GROUPS = 30


def alignment_rows_drawn(rows: Sequence[dict], tkeys: Sequence[str], limit: int = ALIGN_CHART_GROUPS
                         ) -> list[tuple[int, dict]]:
    """(position, row) of the groups the chart draws: all, or the ``limit`` costliest in network order."""
    cost = [max((v for v in (finite(r.get(k)) for k in tkeys) if v is not None), default=0.0) for r in rows]
    keep = sorted(sorted(range(len(rows)), key=lambda i: -cost[i])[:limit])
    return [(i, rows[i]) for i in keep]


def alignment_figure(rows: Sequence[dict], tkeys: Sequence[str], names: dict[str, str] | None = None) -> dict:
    """Grouped horizontal bars, one group per aligned layer group (names readable on the left, first at
    the top); at most ALIGN_CHART_GROUPS, the costliest."""
    drawn = alignment_rows_drawn(rows, tkeys)[::-1]  # plotly draws the first category at the bottom
    labels = unique_labels([short_label(_align_label(r, i), 48) for i, r in drawn])
    data = [{"type": "bar", "orientation": "h", "name": _side_name(k, names), "y": labels,
             "x": rounded_list(r.get(k) for _, r in drawn), "hovertext": [_align_label(r, i) for i, r in drawn]}
            for k in tkeys]
    return figure(data, {"barmode": "group", "yaxis": {"type": "category"}, "xaxis": {"title": {"text": "ms"}},
                         "margin": {"l": 20}}, height=120 + 26 * len(drawn))
