"""The sweep report (``trtprof sweep``): every variant's build-and-run checklist, then variants side by side.

Input: the sweep's ``summary.json`` (:class:`profiler.documents.SweepDocument`), and optionally per-layer
records. The page is ``SECTIONS``, functions ``(doc) -> Section | None`` over the variants' data of
:mod:`profiler.report.variants`. Missing fields show as "not recorded" rather than failing, so a partial
or interrupted sweep still gets a report.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from profiler.documents import SweepDocument, current_variant
from profiler.report.analysis import box_stats, box_traces
from profiler.report.common import (
    NOT_IN_RUN, PALETTE, Section, SectionFn, add_sections, banner, card, category_colors, cell, chart, details,
    drop_empty_columns, figure, findings_block, findings_cards, finite, kv, missing, new_page, note, rounded,
    rounded_list, scalar_items, plot_text, stat, status_class, table,
)
from profiler.report.variants import (
    ACCURACY_KEYS, CHECKLIST_STEPS, accuracy_outputs, accuracy_vs_speed, checklist_rows,
    latency_by_workspace, layer_records, layer_time_by_type, ok_variants, throughput_by_streams, variant_key,
)
from profiler.report.verdict import breaches, fastest_variant, ungated_breaches
from profiler.fmt import DASH, fmt_bytes, fmt_ms, fmt_num, fmt_pct, fmt_value, humanize_key, is_number

# ----------------------------------------------------------------------------- page

def _variants(doc: SweepDocument) -> list[dict]:
    """The document's variant records, keys older documents spelt otherwise under their current names."""
    return [current_variant(v) for v in (doc.get("variants") or []) if isinstance(v, dict)]


def _run(doc: SweepDocument) -> dict:
    return doc["run"] if isinstance(doc.get("run"), dict) else {}


def _colors(doc: SweepDocument) -> dict[str, str]:
    """One colour per variant, the same in every chart of the page."""
    return category_colors(variant_key(v) for v in _variants(doc))


def _findings(doc: SweepDocument) -> Section:
    sec = Section("findings", "Findings", "Merged by rule and cause: one card per problem, listing the "
                                          "variants it applies to.")
    variants = _variants(doc)
    measured = bool(ok_variants(variants))
    return sec.add(findings_block(doc.get("findings") or [], empty=_no_findings_text(variants),
                                  empty_level="ok" if measured else "warn"))


def _timeline(doc: SweepDocument) -> Section | None:
    from profiler.report.timeline import SWEEP_TIMELINE_INTRO, timeline_section

    return timeline_section(doc, SWEEP_TIMELINE_INTRO)  # with --nsys only


RANDOM_CALIBRATION_TEXT = ("INT8 was calibrated on random inputs: its accuracy numbers mean nothing. Pass --calib "
                           "with real data.")


def _no_findings_text(variants: Sequence[dict]) -> str:
    if not ok_variants(variants):
        return "No findings, because nothing was measured (see the verdict above)."
    return "No findings: every rule passed."


def _banners_and_cards(page: dict, summary: dict, run: dict, variants: Sequence[dict]) -> None:
    random_cal = bool(run.get("random_calibration"))
    if random_cal:
        banner(page, "high", RANDOM_CALIBRATION_TEXT)
    for w in run.get("warnings") or summary.get("warnings") or []:
        if random_cal and "random input" in str(w).lower():
            continue  # the banner above says it once
        banner(page, "medium", str(w))
    if str(run.get("status") or "").lower() == "interrupted":
        banner(page, "medium", "This sweep was interrupted; the variants below are those that finished "
                               "(--resume continues it).")
    counts = {s: sum(1 for v in variants if str(v.get("status") or "").lower() == s) for s in ("ok", "failed", "skipped")}
    page["cards"].append(card("variants", str(len(variants)),
                              sub=", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none",
                              cls="bad" if counts["failed"] or not counts["ok"] else "ok"))
    fast = fastest_variant(summary)
    if fast:
        page["cards"].append(_fastest_card(fast))
    tput = [v for v in ok_variants(variants) if finite(v.get("throughput_qps")) is not None]
    if tput:
        best = max(tput, key=lambda v: v["throughput_qps"])
        page["cards"].append(card("best throughput", f"{fmt_num(best['throughput_qps'])} qps",
                                  sub=variant_key(best) + (": BREACH" if breaches(best) else ""),
                                  cls="warn" if breaches(best) else "ok"))
    findings_cards(page, summary.get("findings") or [])


def _fastest_card(fast: dict) -> dict:
    """The fastest variant within the accuracy thresholds, saying which faster ones breach them; a variant
    that breaches is marked as such (only when every measured variant does)."""
    if fast.get("breaches"):
        return card("fastest (median, 1 stream)", fmt_ms(fast["median_ms"]), sub=f"{fast['key']}: BREACH",
                    cls="bad")
    faster = fast.get("breaching_faster") or []
    sub = fast["key"] + (f" (faster, outside the thresholds: {', '.join(faster[:3])})" if faster else "")
    label = "fastest within thresholds (median, 1 stream)" if faster else "fastest (median, 1 stream)"
    return card(label, fmt_ms(fast["median_ms"]), sub=sub, cls="ok")


def _checklist_section(doc: SweepDocument) -> Section:
    sec = Section("checklist", "Build-and-run checklist",
                  "The chain to walk when an engine misbehaves: parsed, optimized, calibrated, serialized, "
                  "executed (outputs within threshold of FP32).")
    variants = _variants(doc)
    if not variants:
        return sec.add(missing("No variants " + NOT_IN_RUN + "."))
    rows = []
    for row in checklist_rows(variants):
        cells = [cell(row["key"], sub=str(row["error"]) if row["error"] else "")]
        cells.append(cell(row["status"], cls=status_class(row["status"])))
        for s in CHECKLIST_STEPS:
            st = row["steps"][s]
            cells.append(cell(st["status"], cls=st["cls"], sub=st["details"]))
        rows.append(cells)
    return sec.add(table(["variant", "status"] + list(CHECKLIST_STEPS), rows, numeric=[False] * 7))


def _accuracy_cell(v: dict, ungated: dict[str, str] | None = None) -> Any:
    acc = accuracy_vs_speed([v])
    a = acc[0] if acc else None
    why = (ungated or {}).get(variant_key(v))
    if a is None:
        return cell("FP32 reference" if str(v.get("precision") or "").lower() == "fp32" and
                    str(v.get("status") or "") == "ok" else DASH)
    return cell(fmt_num(a["rel_l2"]) if a["rel_l2"] is not None else DASH, cls="ok" if a["passed"] else "bad",
                sub=(f"{a['nonfinite']} NaN/Inf values, " if a.get("nonfinite") else "")
                + ("passed" if a["passed"] else "outside threshold" + (f", not gated: {why}" if why else "")),
                title="worst relative L2 over the outputs, elements finite in both")


def _streams_cell(v: dict) -> Any:
    """The stream count, with how many queries each stream kept in flight when the run says."""
    n = v.get("streams")
    if n is None:
        return DASH
    fl = v.get("in_flight")
    if fl is None:
        return n
    return cell(str(n), sub=f"{fl} in flight", title="queries each stream kept in flight: 2 = the next query enqueued "
                                                        "before the previous one is waited for (trtexec's default)")


def _variants_section(doc: SweepDocument) -> Section:
    sec = Section("variants", "Variants side by side",
                  "Latency statistics as trtexec prints them; accuracy is the worst relative L2 error "
                  "against FP32 over the outputs.")
    variants = _variants(doc)
    if not variants:
        return sec.add(missing("No variants " + NOT_IN_RUN + "."))
    ungated = {u["key"]: u["reason"] for u in ungated_breaches(doc)}
    rows = []
    for v in variants:
        lat = v.get("latency_ms")
        rows.append([
            cell(variant_key(v), sub=str(v.get("error") or "")[:160] if v.get("status") != "ok" else ""),
            cell(str(v.get("status") or "?"), cls=status_class(v.get("status"))),
            cell(str(v.get("precision") or DASH), sub=str((v.get("engine") or {}).get("precision_label") or "")),
            _accuracy_cell(v, ungated),
            stat(lat, "median"), stat(lat, "p99"), cell(fmt_pct(stat(lat, "cov_pct"))),
            finite(v.get("throughput_qps")), stat(v.get("enqueue_ms"), "median"),
            cell(fmt_bytes(v.get("workspace_bytes"))), _streams_cell(v),
            cell({True: "on", False: "off"}.get(v.get("cuda_graph"), DASH)), str(v.get("backend") or DASH),
        ])
    cols = ["variant", "status", "precision", "worst rel. L2 vs FP32", "median ms", "p99 ms", "CoV",
            "throughput qps", "enqueue median ms", "workspace", "streams", "CUDA graph", "backend"]
    numeric = dict(zip(cols, [False] * 4 + [True] * 5 + [False] * 4))
    cols, rows = drop_empty_columns(cols, rows, keep=2)
    return sec.add(table(cols, rows, numeric=[numeric[c] for c in cols]), *_executor_notes(variants))


def _executor_notes(variants: Sequence[dict]) -> list[dict]:
    """What a backend's latencies are, where they are not an inference engine's (its ``latency_note``:
    the cuda reference executor's)."""
    from profiler.backends import latency_notes

    texts = latency_notes(v.get("backend") for v in variants)
    return [note(text[0].upper() + text[1:] + ".", "info") for text in texts]


def _latency_section(doc: SweepDocument) -> Section:
    okv = ok_variants(_variants(doc))
    sec = Section("latency", "Latency distributions",
                  "Per-iteration latency (host enqueue + H2D + compute + D2H). Boxes from the stored samples; "
                  "where a variant has none, its min, median and p99.")
    if not okv:
        return sec.add(missing("No variant ran; latency " + NOT_IN_RUN + "."))
    fig = latency_figure(okv, _colors(doc))
    caption = ("Log scale: the slowest samples are more than 3x the upper whiskers and would flatten the boxes."
               if fig["layout"]["yaxis"].get("type") == "log" else "")
    return sec.add(chart(sec, "latency", fig, caption), *_executor_notes(okv))


def _streams_section(doc: SweepDocument) -> Section | None:
    ser = throughput_by_streams(_variants(doc))
    if not (ser and any(len(s["x"]) > 1 for s in ser)):
        return None
    sec = Section("streams", "Throughput against streams",
                  "Each line holds the other axes fixed; a flat line means more streams did not help.")
    return sec.add(chart(sec, "streams", line_figure(ser, "streams", "throughput (qps)", xtype="linear")))


def _workspace_section(doc: SweepDocument) -> Section | None:
    ser = latency_by_workspace(_variants(doc))
    if not (ser and any(len(s["x"]) > 1 for s in ser)):
        return None
    sec = Section("workspace", "Latency against workspace",
                  "Median latency by workspace size; a falling line means the smaller workspace limited tactics.")
    return sec.add(chart(sec, "workspace", line_figure(ser, "workspace", "median latency (ms)", xtype="bytes")))


def _accuracy_section(doc: SweepDocument) -> Section:
    sec = Section("accuracy", "Accuracy against speed",
                  "Worst relative L2 error over each variant's outputs against its median latency (lower left "
                  "is better); × marks a variant outside its threshold.")
    variants = _variants(doc)
    avs = accuracy_vs_speed(variants)
    if not avs:
        return sec.add(missing("Accuracy against FP32 " + NOT_IN_RUN + "."))
    sec.add(chart(sec, "accuracy", accuracy_figure(avs, _colors(doc))))
    rows = []
    for v in variants:
        for out, a in accuracy_outputs(v).items():
            rows.append([variant_key(v), out] + [
                cell("yes" if a.get(k) else "no", cls="ok" if a.get(k) else "bad") if k == "passed"
                and isinstance(a.get(k), bool) else (a.get(k) if is_number(a.get(k)) else cell(DASH))
                for k in ACCURACY_KEYS])
    return sec.add(details(f"Accuracy per output ({len(rows)} rows)",
                           [table(["variant", "output"] + [humanize_key(k) for k in ACCURACY_KEYS], rows,
                                  numeric=[False, False] + [True] * 7 + [False], limit=500)]))


def _nsys_section(doc: SweepDocument) -> Section | None:
    captured = [v for v in _variants(doc) if isinstance(v.get("nsys"), dict)]
    if not captured:
        return None
    nsys_info = doc["nsys"] if isinstance(doc.get("nsys"), dict) else {}
    sec = Section("nsys", "What the Nsight Systems capture shows",
                  "Each variant's timed queries (NVTX ranges <key>/iter) as the capture sees them: GPU busy "
                  "time is the union of the GPU work the query launched; the harness's compute time is "
                  "measured with CUDA events around the enqueue, so it also covers GPU time spent waiting "
                  "for a launch-bound host.")
    blocks = sec.blocks
    rows = []
    for v in captured:
        n = v["nsys"]
        if not n.get("found"):
            rows.append([variant_key(v), cell("not in the capture", cls="warn"), cell(DASH), cell(DASH),
                         cell(DASH), cell(DASH), cell(DASH)])
            continue
        cmp_ = n.get("compute_vs_gpu_busy") or {}
        rules = ", ".join(n.get("rules") or []) or "none"
        rows.append([variant_key(v), n.get("count"), stat(n.get("wall_ms"), "median"),
                     stat(n.get("gpu_busy_ms"), "median"),
                     cell(fmt_pct((finite(n.get("gpu_busy_fraction")) or 0.0) * 100)),
                     cmp_.get("ratio") if cmp_ else cell(DASH),
                     cell(rules, cls="warn" if n.get("rules") else "ok")])
    blocks.append(table(["variant", "queries", "wall median ms", "GPU busy median ms", "GPU busy",
                         "harness compute / GPU busy", "capture rules"], rows,
                        numeric=[False, True, True, True, True, True, False]))
    if nsys_info.get("capture"):
        blocks.append(note(f"capture: {nsys_info['capture']}", "info"))
    return sec


def _localization_section(doc: SweepDocument) -> Section | None:
    localized = [v for v in _variants(doc) if isinstance(v.get("localization"), dict)]
    if not localized:
        return None
    sec = Section("localization", "Where precision is lost",
                  "For each variant that breached its accuracy threshold: the error of every node's output "
                  "against FP32 in topological order, the first nodes whose error jumps, and what "
                  "keeping them in FP32 buys.")
    blocks = sec.blocks
    for v in localized:
        loc = v["localization"]
        key = variant_key(v)
        blocks.append({"type": "heading", "text": key})
        if loc.get("error"):
            blocks.append(note(f"localization failed: {loc['error']}", "warn"))
            continue
        if loc.get("conclusion"):
            blocks.append(note(str(loc["conclusion"]), "info"))
        if loc.get("curve"):
            blocks.append(chart(sec, f"loc-{key}", error_curve_figure(loc)))
        jumps = loc.get("first_jumps") or []
        if jumps:
            blocks.append(table(["node", "op", "rel L2", "inputs' rel L2", "amplification", "node in variant"],
                                [[str(j.get("node")), str(j.get("op")),
                                  j.get("rel_l2") if j.get("rel_l2") is not None else cell("inf/NaN (overflow)"),
                                  j.get("input_rel_l2"),
                                  j.get("amplification") if j.get("amplification") is not None else cell("inf"),
                                  str(j.get("variant_node") or DASH)] for j in jumps],
                                numeric=[False, False, True, True, True, False]))
        check = loc.get("verification") or {}
        rows = []
        for label, row in (check.get("variants") or {}).items():
            acc = row.get("accuracy") or {}
            worst = max((finite(m.get("rel_l2")) or 0.0 for m in acc.values()), default=None) if acc else None
            broken = sum((m.get("nan_count") or 0) + (m.get("inf_count") or 0) for m in acc.values())
            rows.append([label, row.get("latency_ms"), worst if worst is not None else cell(DASH),
                         int(broken) if acc else cell(DASH)])
        if rows:
            blocks.append(table(["model", "latency ms (ONNX Runtime CPU)", "worst rel L2", "NaN/Inf values"],
                                rows, numeric=[False, True, True, True],
                                caption="kept in FP32: " + ", ".join(check.get("kept_fp32") or [])))
    return sec


def _layers_section(doc: SweepDocument) -> Section:
    variants = _variants(doc)
    recs = layer_records(doc, None)
    lt = layer_time_by_type(recs) if recs else None
    graph_keys = [variant_key(v) for v in variants if v.get("cuda_graph")]
    sec = Section("layers", "Per-layer time by variant",
                  "Share of each variant's per-layer time by layer type. The per-layer pass is separate from "
                  "the timed run: it runs the engine layer by layer (eager, never as a CUDA graph) with a "
                  "timing event around each layer, so its sum exceeds the latency; compare shares, not sums.")
    blocks = sec.blocks
    if not (lt and lt["variants"]):
        blocks.append(missing("Per-layer times " + NOT_IN_RUN + "."))
        return sec
    blocks.append(chart(sec, "layers", layer_type_figure(lt)))
    sums = []
    vmap = {variant_key(v): v for v in variants}
    for i, var in enumerate(lt["variants"]):
        total = sum(lt["ms"][t][i] for t in lt["types"])
        med = stat((vmap.get(var) or {}).get("latency_ms"), "median")
        sums.append([var, total, med, cell("yes (per-layer pass ran eager)" if var in graph_keys else "no")])
    blocks.append(table(["variant", f"sum of per-layer {humanize_key(lt['metric'], True)} (ms)",
                         "median latency (ms)", "CUDA graph in the timed run"], sums,
                        numeric=[False, True, True, False]))
    by_var: "OrderedDict[str, list[dict]]" = OrderedDict()
    for x in recs:
        by_var.setdefault(str(x.get("variant") or "?"), []).append(x)
    inner = []
    for var, xs in by_var.items():
        xs = sorted(xs, key=lambda x: -(finite(x.get(lt["metric"])) or 0.0))
        inner.append({"type": "heading", "text": var})
        inner.append(table(["layer", "type", "precision out", humanize_key(lt["metric"]), "share"],
                           [[str(x.get("name", "?")), str(x.get("type") or DASH),
                             str(x.get("precision_out") or DASH), finite(x.get(lt["metric"])),
                             cell(fmt_pct(x.get("share_pct")))] for x in xs],
                           numeric=[False, False, False, True, True], limit=15))
    blocks.append(details("Slowest layers of each variant", inner))
    return sec


def _flat_memory(mem: Any) -> dict[str, Any]:
    """A variant's memory dict with nested dicts (device memory free/used/total) flattened one level."""
    out: dict[str, Any] = {}
    for k, v in (mem or {}).items() if isinstance(mem, dict) else ():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out[f"{k} {k2}"] = v2
        elif not isinstance(v, list):
            out[k] = v
    return out


def _memory_section(doc: SweepDocument) -> Section:
    sec = Section("memory", "Memory", "Engine size, activation memory per context and device memory, "
                                      "to see which workspace and how many streams fit beside a service.")
    mems = [(variant_key(v), _flat_memory(v.get("memory"))) for v in _variants(doc)]
    mems = [(k, m) for k, m in mems if any(x is not None for x in m.values())]
    keys = list(dict.fromkeys(k for _, m in mems for k, x in m.items() if x is not None))
    if not keys:
        return sec.add(missing("Memory " + NOT_IN_RUN + "."))
    rows = [[key] + [cell(fmt_value(k, m.get(k))) for k in keys] for key, m in mems]
    return sec.add(table(["variant"] + [humanize_key(k.replace("_bytes", "")) for k in keys], rows,
                        numeric=[False] + [True] * len(keys)))


#: The sweep page, in order. A new section is one function ``(doc) -> Section | None`` and one entry here.
SECTIONS: list[SectionFn] = [_variants_section, _findings, _latency_section, _accuracy_section, _checklist_section,
                             _streams_section, _workspace_section, _nsys_section, _timeline, _localization_section,
                             _layers_section, _memory_section]


def build_sweep_page(summary: SweepDocument, *, layers: Sequence[dict] | None = None) -> dict[str, Any]:
    """The sweep report as plain data: the verdict, the findings, the variants, then the detail
    (``layers``: per-layer records, instead of the summary's own)."""
    from profiler.report.verdict import sweep_verdict

    doc = summary if isinstance(summary, dict) else {}
    if layers:
        doc = {**doc, "layers": list(layers)}
    run = _run(doc)
    page = new_page("sweep", "trtprof sweep", str(run.get("model") or run.get("source") or ""))
    page["verdict"] = sweep_verdict(doc)
    _banners_and_cards(page, doc, run, _variants(doc))
    add_sections(page, doc, SECTIONS)
    items = scalar_items(run, skip=("warnings",))
    page["metadata"] = [kv(items)] if items else []
    return page


# ----------------------------------------------------------------------------- figures

def latency_figure(variants: Sequence[dict], colors: dict[str, str] | None = None) -> dict:
    """Latency boxes, one per variant in its page colour; a log axis when outliers would crush the boxes."""
    colors = colors or category_colors(variant_key(v) for v in variants)
    data = []
    fences, tops = [], []
    for v in variants:
        key = variant_key(v)
        color = colors.get(key, PALETTE[0])
        b = box_stats([finite(s) for s in v.get("samples_ms") or []]) if v.get("samples_ms") else None
        if b is not None:
            data.extend(box_traces(key, b, color))
            fences.append(b["upperfence"])
            tops.append(b["max"])
        else:
            lat = v.get("latency_ms")
            med, lo, hi = stat(lat, "median"), stat(lat, "min"), stat(lat, "p99")
            data.append({"type": "scatter", "mode": "markers", "name": key, "x": [key], "y": [rounded(med)],
                         "error_y": {"type": "data", "symmetric": False,
                                     "array": [rounded(hi - med) if hi is not None else 0],
                                     "arrayminus": [rounded(med - lo) if lo is not None else 0]},
                         "marker": {"color": color, "size": 9, "symbol": "diamond"}, "showlegend": False})
    log = bool(fences) and max(tops) > 3 * max(fences) and min(fences) > 0
    yaxis: dict[str, Any] = {"title": {"text": "latency (ms)" + (", log scale" if log else "")}}
    yaxis.update({"type": "log", "dtick": "D2"} if log else {"rangemode": "tozero"})
    return figure(data, {"yaxis": yaxis, "xaxis": {"type": "category", "tickangle": -35}}, height=420)


def line_figure(series: Sequence[dict], xtitle: str, ytitle: str, *, xtype: str = "linear") -> dict:
    """Lines of ``series_by`` output; ``xtype="bytes"`` puts sizes on a category axis as '64 MiB', '1 GiB'."""
    if xtype == "bytes":
        sizes = sorted({x for s in series for x in s["x"]})
        data = [{"type": "scatter", "mode": "lines+markers", "name": s["name"], "x": [fmt_bytes(x) for x in s["x"]],
                 "y": rounded_list(s["y"]), "text": s["keys"]} for s in series]
        xaxis: dict[str, Any] = {"title": {"text": xtitle}, "type": "category", "categoryorder": "array",
                                 "categoryarray": [fmt_bytes(x) for x in sizes]}
    else:
        data = [{"type": "scatter", "mode": "lines+markers", "name": s["name"], "x": rounded_list(s["x"]),
                 "y": rounded_list(s["y"]), "text": s["keys"]} for s in series]
        xaxis = {"title": {"text": xtitle}, "type": xtype}
        if xtype == "linear":
            xaxis["dtick"] = 1
    return figure(data, {"xaxis": xaxis, "yaxis": {"title": {"text": ytitle}, "rangemode": "tozero"}})


def accuracy_figure(points: Sequence[dict], colors: dict[str, str] | None = None) -> dict:
    """One marker per variant (named in the legend, in its page colour); × where it breaches its threshold."""
    colors = colors or category_colors(p["key"] for p in points)
    data = [{"type": "scatter", "mode": "markers", "name": p["key"], "x": [rounded(p["latency_ms"])],
             "y": [rounded(p["rel_l2"])], "text": [f"{p['key']} ({p['precision']})"],
             "marker": {"size": 12, "color": colors.get(p["key"], PALETTE[0]),
                        "symbol": "circle" if p["passed"] else "x"}} for p in points if p["rel_l2"] is not None]
    positive = all(p["rel_l2"] > 0 for p in points if p["rel_l2"] is not None)
    yaxis: dict[str, Any] = {"title": {"text": "worst relative L2 error vs FP32 (unitless)"}, "exponentformat": "e"}
    yaxis.update({"type": "log", "dtick": "D2"} if positive else {"rangemode": "tozero"})
    return figure(data, {"xaxis": {"title": {"text": "median latency (ms)"}, "rangemode": "tozero"},
                         "yaxis": yaxis, "showlegend": True})


def error_curve_figure(loc: dict) -> dict:
    """Relative L2 error of each node's output against FP32, in topological order; jumps marked."""
    curve = loc.get("curve") or []
    finite_max = max((finite(c.get("rel_l2")) or 0.0 for c in curve), default=0.0)
    ys = [finite(c.get("rel_l2")) if finite(c.get("rel_l2")) is not None else finite_max * 10 or 1.0 for c in curve]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "rel L2 vs FP32",
             "x": list(range(len(curve))), "y": rounded_list(ys),
             "text": [f"{c.get('node')} ({c.get('op')})" for c in curve], "marker": {"size": 4}}]
    jump_names = {j.get("node") for j in loc.get("first_jumps") or []}
    jx = [i for i, c in enumerate(curve) if c.get("node") in jump_names]
    if jx:
        data.append({"type": "scatter", "mode": "markers", "name": "error jumps here", "x": jx,
                     "y": rounded_list(ys[i] for i in jx), "text": [str(curve[i].get("node")) for i in jx],
                     "marker": {"size": 12, "symbol": "x", "color": "#c0392b"}})
    positive = all(y and y > 0 for y in ys)
    return figure(data, {"xaxis": {"title": {"text": "node (topological order)"}},
                         "yaxis": {"title": {"text": "relative L2 error vs FP32"},
                                   "type": "log" if positive else "linear"}})


def layer_type_figure(lt: dict) -> dict:
    """One stacked bar per variant: each layer type's share of that variant's per-layer time (hover: ms)."""
    totals = [sum(lt["ms"][t][i] for t in lt["types"]) for i in range(len(lt["variants"]))]
    colors = category_colors(lt["types"])
    data = [{"type": "bar", "name": typ, "x": lt["variants"],
             "y": rounded_list(ms / tot * 100 if tot else 0.0 for ms, tot in zip(lt["ms"][typ], totals)),
             "customdata": rounded_list(lt["ms"][typ]), "marker": {"color": colors[typ]},
             "hovertemplate": "%{x}<br>" + plot_text(typ) + ": %{y:.3g}% (%{customdata:.4g} ms)<extra></extra>"}
            for typ in lt["types"]]
    return figure(data, {"barmode": "stack", "xaxis": {"type": "category", "tickangle": -35},
                         "yaxis": {"title": {"text": "share of per-layer time (%)"}, "range": [0, 100]},
                         "legend": {"title": {"text": "layer type"}}}, height=420)
