"""The capture-analysis report (``trtprof analyze --report``): plain data from the analysis dict.

Input: the ``trtprof analyze --json`` document (:class:`profiler.documents.AnalysisDocument`). The page
is ``SECTIONS``, a list of functions ``(doc) -> Section | None``; a section whose data the capture lacks
says so ("not in this capture") instead of failing.
"""

from __future__ import annotations

from typing import Any, Sequence

from profiler.documents import AnalysisDocument
from profiler.report.common import (
    NOT_IN_CAPTURE, OUTLIER_COLOR, PALETTE, Section, SectionFn, add_sections, banner, card, cell, chart, figure,
    findings_block, findings_cards, finite, kv, missing, new_page, note, rounded, rounded_list, scalar_items,
    short_label, stat, table, unique_labels,
)
from profiler.fmt import fmt_num, fmt_pct, fmt_value, is_number
from profiler.report.concurrency import contexts_section
from profiler.report.generation import generation_section
from profiler.report.inference import inference_cards, inference_section

MAX_DISTRIBUTION_RANGES = 16
MAX_TIMELINE_RANGES = 8
MAX_TIMELINE_POINTS = 2000
MAX_KERNELS = 25
GAP_EDGES_US = [0.0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000]


def range_label(r: dict) -> str:
    """'domain:name', or just the name for the default domain."""
    name = str(r.get("name") if r.get("name") is not None else "(whole capture)")
    dom = r.get("domain")
    return f"{dom}:{name}" if dom not in (None, "", "default") else name


def instances(r: dict) -> dict[str, list[float | None]]:
    """Per-instance values of a range as ``{"wall_ms": [...], "gpu_busy_ms": [...], "start_ms": [...]}``.

    Accepts ``instances`` as a dict of lists or as a list of per-instance dicts; missing series are empty.
    """
    raw = r.get("instances")
    out: dict[str, list] = {"wall_ms": [], "gpu_busy_ms": [], "start_ms": []}
    if isinstance(raw, dict):
        for k in out:
            v = raw.get(k)
            if isinstance(v, (list, tuple)):
                out[k] = [finite(x) for x in v]
    elif isinstance(raw, list):
        rows = [x for x in raw if isinstance(x, dict)]
        for k in out:
            if any(k in x for x in rows):
                out[k] = [finite(x.get(k)) for x in rows]
    return out


def outliers(r: dict) -> list[dict[str, Any]]:
    """The range's outliers as ``[{"index", "wall_ms", "cause", ...}]`` (ints or dicts accepted)."""
    out = []
    for o in r.get("outliers") or []:
        if isinstance(o, bool):
            continue
        if isinstance(o, int):
            out.append({"index": o})
        elif isinstance(o, dict):
            idx = next((o[k] for k in ("index", "instance", "idx") if isinstance(o.get(k), int)), None)
            if idx is not None:
                out.append({**o, "index": idx})
    return out


def timeline(r: dict, max_points: int = MAX_TIMELINE_POINTS) -> dict[str, Any]:
    """Per-instance wall and GPU busy time by 0-based index, with the outliers marked.

    Long series are reduced to ``max_points`` by keeping the slowest instance of each bucket (peaks
    stay visible) plus every outlier; ``shown`` and ``total`` say how many.
    """
    inst = instances(r)
    wall, busy = inst["wall_ms"], inst["gpu_busy_ms"]
    n = len(wall)
    outs = outliers(r)
    out_idx = sorted({o["index"] for o in outs if 0 <= o["index"] < n} if n else {o["index"] for o in outs})
    keep: list[int]
    if n <= max_points:
        keep = list(range(n))
    else:
        bucket = -(-n // max_points)
        keep = []
        for start in range(0, n, bucket):
            chunk = range(start, min(start + bucket, n))
            keep.append(max(chunk, key=lambda i: wall[i] if wall[i] is not None else float("-inf")))
        keep = sorted(set(keep) | set(out_idx))
    by_index = {o["index"]: o for o in outs}
    return {
        "index": keep,
        "wall_ms": [wall[i] for i in keep],
        "gpu_busy_ms": [busy[i] if i < len(busy) else None for i in keep] if busy else [],
        "outlier_index": out_idx,
        "outlier_wall_ms": [wall[i] if i < n else finite(by_index[i].get("wall_ms")) for i in out_idx],
        "outlier_cause": [str(by_index[i].get("cause") or "") for i in out_idx],
        "shown": len(keep),
        "total": n,
    }


def busy_vs_host(ranges: Sequence[dict]) -> dict[str, list]:
    """Median wall (host) time against median GPU busy time per range, from the range statistics."""
    names, wall, busy, frac = [], [], [], []
    for r in ranges:
        names.append(range_label(r))
        wall.append(stat(r.get("wall_ms"), "median"))
        busy.append(stat(r.get("gpu_busy_ms"), "median"))
        frac.append(finite(r.get("gpu_busy_fraction")))
    return {"names": names, "wall_ms_median": wall, "gpu_busy_ms_median": busy, "gpu_busy_fraction": frac}


def box_stats(samples: Sequence[float | None], max_points: int = 300) -> dict[str, Any] | None:
    """Quartiles, fences (1.5 IQR, clipped to the data), mean, and the samples beyond the fences (at most
    ``max_points``, the most extreme), for a box drawn from precomputed stats: the page stays small."""
    import numpy as np

    a = np.asarray([s for s in samples if s is not None], dtype=float)
    if a.size == 0:
        return None
    q1, med, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
    iqr = q3 - q1
    lo = float(a[a >= q1 - 1.5 * iqr].min())
    hi = float(a[a <= q3 + 1.5 * iqr].max())
    beyond = a[(a < lo) | (a > hi)]
    if beyond.size > max_points:  # keep the most extreme ones
        order = np.argsort(np.abs(beyond - med))
        beyond = beyond[order[-max_points:]]
    return {"q1": q1, "median": med, "q3": q3, "lowerfence": lo, "upperfence": hi, "mean": float(a.mean()),
            "min": float(a.min()), "max": float(a.max()), "beyond": sorted(float(x) for x in beyond)}


def box_traces(label: str, b: dict, color: str, hover: str = "") -> list[dict]:
    """A box drawn from precomputed quartiles and fences, plus the samples beyond the fences as points."""
    traces = [{"type": "box", "name": label, "x": [label], "q1": [rounded(b["q1"])], "median": [rounded(b["median"])],
               "q3": [rounded(b["q3"])], "lowerfence": [rounded(b["lowerfence"])],
               "upperfence": [rounded(b["upperfence"])], "mean": [rounded(b["mean"])], "marker": {"color": color},
               "showlegend": False, "hovertext": hover or label}]
    if b["beyond"]:
        traces.append({"type": "scatter", "mode": "markers", "name": label, "x": [label] * len(b["beyond"]),
                       "y": rounded_list(b["beyond"]), "marker": {"color": color, "size": 5, "opacity": 0.6},
                       "showlegend": False, "hovertext": hover or label})
    return traces


def _total_wall(r: dict) -> float:
    mean = stat(r.get("wall_ms"), "mean")
    count = finite(r.get("count"))
    if mean is not None and count is not None:
        return mean * count
    wall = [w for w in instances(r)["wall_ms"] if w is not None]
    return float(sum(wall))


def kernel_rows(result: dict) -> list[dict[str, Any]]:
    """Top kernels (``top_kernels`` or ``kernels``) with times normalized to ms, largest total first."""
    raw = result.get("top_kernels", result.get("kernels"))
    if isinstance(raw, dict):
        raw = raw.get("kernels") or raw.get("rows") or []
    rows = []
    for k in raw or []:
        if not isinstance(k, dict):
            continue
        row = dict(k)
        for base in ("total", "mean", "avg", "median", "min", "max"):
            if f"{base}_ms" not in row:
                if is_number(row.get(f"{base}_ns")):
                    row[f"{base}_ms"] = row[f"{base}_ns"] / 1e6
                elif is_number(row.get(f"{base}_us")):
                    row[f"{base}_ms"] = row[f"{base}_us"] / 1e3
        if "mean_ms" not in row and "avg_ms" in row:
            row["mean_ms"] = row["avg_ms"]
        rows.append(row)
    rows.sort(key=lambda x: -(finite(x.get("total_ms")) or 0.0))
    return rows


def gap_histograms(result: dict) -> list[dict[str, Any]]:
    """Idle-gap histograms as ``[{"label", "lo_us", "hi_us", "count", "info"}]``, one per device.

    Accepted inputs (``gap_histogram`` or ``gaps``, a dict or a list of per-device dicts): bin edges and
    counts (``edges_us``/``bin_edges_us`` + ``counts``), a list of bins (``bins``: ``lo_us``, ``hi_us``,
    ``count``), or raw gap durations (``gaps_us`` or ``gaps_ns``) binned here on a 1-2-5 µs scale.
    """
    raw = result.get("gap_histogram", result.get("gaps"))
    if raw is None:
        return []
    items = raw if isinstance(raw, list) and all(isinstance(x, dict) for x in raw) else [raw]
    if isinstance(raw, list) and raw and all(isinstance(x, dict) and "count" in x for x in raw):
        items = [{"bins": raw}]
    out = []
    for i, h in enumerate(items):
        if isinstance(h, list):
            h = {"gaps_us": h}
        if not isinstance(h, dict):
            continue
        label = str(h.get("device", h.get("label", f"device {i}" if len(items) > 1 else "all devices")))
        edges = h.get("edges_us", h.get("bin_edges_us"))
        lo, hi, count = [], [], []
        if isinstance(edges, list) and isinstance(h.get("counts"), list):
            lo, hi, count = edges[:-1], edges[1:], list(h["counts"])[: max(len(edges) - 1, 0)]
        elif isinstance(h.get("bins"), list):
            bins = [b for b in h["bins"] if isinstance(b, dict)]
            lo = [b.get("lo_us") for b in bins]
            hi = [b.get("hi_us") for b in bins]
            count = [b.get("count") for b in bins]
        elif isinstance(h.get("gaps_us"), list) or isinstance(h.get("gaps_ns"), list):
            from profiler.report.common import histogram

            gaps = h.get("gaps_us")
            if gaps is None:
                gaps = [g / 1e3 for g in h["gaps_ns"] if is_number(g)]
            top = max([g for g in gaps if is_number(g)] or [0.0])
            edges = [e for e in GAP_EDGES_US if e <= top] + [next((e for e in GAP_EDGES_US if e > top), top * 2)]
            if len(edges) < 2:
                edges = [0.0, 1.0]
            count = histogram(gaps, edges)
            lo, hi = edges[:-1], edges[1:]
        else:
            continue
        info = {k: v for k, v in h.items() if k not in ("edges_us", "bin_edges_us", "counts", "bins", "gaps_us",
                                                       "gaps_ns", "device", "label")}
        out.append({"label": label, "lo_us": list(lo), "hi_us": list(hi), "count": list(count), "info": info})
    return out


def _bin_label(lo: Any, hi: Any) -> str:
    def f(x: Any) -> str:
        if not is_number(x):
            return "?"
        x = float(x)
        if x >= 1000:
            return f"{x / 1000:g} ms"
        return f"{x:g} µs"
    return f"{f(lo)}–{f(hi)}"


def _ranges(doc: AnalysisDocument) -> list[dict]:
    return [r for r in (doc.get("ranges") or []) if isinstance(r, dict)]


def _capture(doc: AnalysisDocument) -> dict:
    return doc["capture"] if isinstance(doc.get("capture"), dict) else {}


def _head(page: dict, doc: AnalysisDocument) -> None:
    """The verdict strip, the cards, the banners (each said once) and the capture details (collapsed, last)."""
    from profiler.report.verdict import analysis_verdict

    capture, ranges = _capture(doc), _ranges(doc)
    page["verdict"] = analysis_verdict(doc)
    n_inst = sum(int(r["count"]) for r in ranges if is_number(r.get("count")))
    inf = doc.get("inference") if isinstance(doc.get("inference"), dict) else {}
    if is_number(inf.get("count")) and inf.get("source") != "window":  # what the verdict is about, first
        steady = inf.get("steady_count")
        page["cards"].append(card("inferences", int(inf["count"]),
                                  sub=f"{fmt_num(steady)} in the steady state" if is_number(steady) else ""))
    page["cards"].append(card("ranges", len(ranges), sub=f"{fmt_num(n_inst)} range instances"))
    gpus = capture.get("gpus")
    if isinstance(gpus, list) and gpus:
        names = sorted({str(g.get("name") or "name not in the export") if isinstance(g, dict) else str(g)
                        for g in gpus})
        page["cards"].append(card("GPUs", str(len(gpus)), sub=", ".join(names)))
    findings_cards(page, doc.get("findings") or [])
    page["cards"] += inference_cards(doc)
    integ = doc.get("integrity") if isinstance(doc.get("integrity"), dict) else {}
    for p in (integ.get("problems") or [])[4:] if integ.get("complete") is False else []:
        if isinstance(p, dict):  # the verdict names the first four signs of missing data, the banners the rest
            banner(page, "high", f"incomplete capture ({p.get('kind')}): {p.get('what')}")
    for w in doc.get("warnings") or capture.get("warnings") or []:
        banner(page, "medium", str(w))
    for k in ("missing", "degraded"):
        items = capture.get(k)
        for item in items if isinstance(items, list) else ([items] if items else []):
            banner(page, "medium", f"{k}: {item}" if k == "degraded" else str(item))
    items = scalar_items(capture, skip=("warnings", "missing", "degraded"))
    page["metadata"] = [kv(items)] if items else [missing("No capture details " + NOT_IN_CAPTURE + ".")]


def _findings(doc: AnalysisDocument) -> Section:
    sec = Section("findings", "Findings", "Each diagnosis with the numbers that prove it, the threshold it was "
                                          "held to and what to do; one card per problem.")
    unjudged = (doc.get("capture") or {}).get("kernel_launches_without_records")
    not_run = (doc.get("integrity") or {}).get("rules_not_run") or []
    empty = (f"No findings from the rules that could run; {', '.join(map(str, not_run))} did not run: they need "
             "the data this capture lost." if not_run else
             "No findings from the rules that could run: those judging GPU time need the kernels this export "
             "lacks." if unjudged else "No findings: every rule passed.")
    sec.add(_by_impact(findings_block(doc.get("findings") or [], empty), doc.get("findings") or []))
    sync = [x for x in doc.get("sync_summary") or [] if isinstance(x, dict)]
    if sync:
        sec.add({"type": "heading", "text": "Synchronisation calls"},
                table(["call", "count", "total ms", "max ms"],
                      [[str(x.get("name", "?")), x.get("count"), finite(x.get("total_ms")),
                        finite(x.get("max_ms"))] for x in sync], numeric=[False, True, True, True]))
    return sec


def _timeline(doc: AnalysisDocument) -> Section | None:
    from profiler.report.timeline import timeline_section

    return timeline_section(doc, absent="The timeline needs the capture itself: `trtprof analyze CAPTURE "
                                        "--report` draws it (a stored run or --json without it cannot).")


def _summary(doc: AnalysisDocument) -> Section:
    sec = Section("summary", "Range series", "Each NVTX range series at a glance, most total wall time first.")
    ranges = _ranges(doc)
    if not ranges:
        return sec.add(missing("No NVTX ranges " + NOT_IN_CAPTURE + "."))
    rows = []
    for r in ranges:
        outs = outliers(r)
        rows.append([
            cell(range_label(r), sub=(f"inside {r['parent']}" if r.get("parent") else
                                      f"domain {r.get('domain')}" if r.get("domain") not in (None, "") else "")),
            r.get("count"),
            stat(r.get("wall_ms"), "median"), stat(r.get("wall_ms"), "p90"), stat(r.get("wall_ms"), "p99"),
            stat(r.get("wall_ms"), "max"),
            cell(fmt_pct(stat(r.get("wall_ms"), "cov_pct"))),
            stat(r.get("gpu_busy_ms"), "median"),
            cell(fmt_pct(finite(r.get("gpu_busy_fraction")) * 100) if finite(r.get("gpu_busy_fraction"))
                 is not None else "—"),
            r["outlier_count"] if is_number(r.get("outlier_count")) else len(outs),
        ])
    return sec.add(table(["range", "count", "median ms", "p90 ms", "p99 ms", "max ms", "CoV",
                          "GPU busy median ms", "GPU busy fraction", "outliers"], rows,
                         numeric=[False] + [True] * 9))


def _busiest(ranges: list[dict]) -> list[dict]:
    """The ranges the charts draw: the most total wall time first, at most MAX_DISTRIBUTION_RANGES."""
    return sorted(ranges, key=_total_wall, reverse=True)[:MAX_DISTRIBUTION_RANGES]


def _distribution(doc: AnalysisDocument) -> Section:
    sec = Section("distribution", "Latency distribution per series",
                  "Wall time of each range instance. Boxes show quartiles and 1.5×IQR whiskers where the "
                  "per-instance times are in the capture; otherwise the summary percentiles.")
    ranges = _ranges(doc)
    order = _busiest(ranges)
    if not order:
        return sec.add(missing("Latency distribution " + NOT_IN_CAPTURE + " (no ranges)."))
    sec.add(chart(sec, "distribution", distribution_figure(order)))
    if len(ranges) > len(order):
        sec.add(note(f"Showing the {len(order)} ranges with the most total wall time of {len(ranges)}."))
    return sec


def _instances(doc: AnalysisDocument) -> Section:
    sec = Section("instances", "Per-instance times",
                  "Wall and GPU busy time of each instance in start order (0-based index); outliers marked "
                  "with a red ×.")
    ranges = _ranges(doc)
    shown = 0
    for r in _busiest(ranges):
        tl = timeline(r)
        if not tl["total"]:
            continue
        if shown >= MAX_TIMELINE_RANGES:
            break
        shown += 1
        caption = "" if tl["shown"] == tl["total"] else (
            f"{tl['shown']} of {tl['total']} instances shown (the slowest of each bucket, and every outlier).")
        sec.add({"type": "heading", "text": range_label(r)}, chart(sec, f"instances-{shown}", timeline_figure(tl), caption))
    if not shown:
        sec.add(missing("Per-instance times " + NOT_IN_CAPTURE + "."))
    out_rows = []
    for r in ranges:
        inst = instances(r)["wall_ms"]
        for o in outliers(r):
            w = o.get("wall_ms", inst[o["index"]] if o["index"] < len(inst) else None)
            extra = {k: v for k, v in o.items() if k not in ("index", "instance", "idx", "wall_ms", "cause")}
            out_rows.append([range_label(r), o["index"], finite(w), str(o.get("cause") or "—"),
                             "; ".join(f"{k} {fmt_value(k, v)}" for k, v in extra.items()) or "—"])
    if out_rows:
        sec.add(table(["range", "instance", "wall ms", "cause", "details"], out_rows,
                      numeric=[False, True, True, False, False], caption="Outlier instances.", limit=200))
    return sec


def _busy(doc: AnalysisDocument) -> Section:
    sec = Section("busy", "GPU busy vs host time",
                  "Median wall time of each range against the median union of its GPU activity (kernels, "
                  "copies, memsets, graph launches). A low fraction means the host, not the GPU, sets the pace.")
    bvh = busy_vs_host(_ranges(doc))
    if any(v is not None for v in bvh["wall_ms_median"] + bvh["gpu_busy_ms_median"]):
        return sec.add(chart(sec, "busy", busy_figure(bvh)))
    return sec.add(missing("GPU busy time " + NOT_IN_CAPTURE + "."))


def _kernels(doc: AnalysisDocument) -> Section:
    sec = Section("kernels", "Top kernels", "Kernels by total GPU time.")
    krows = kernel_rows(doc)
    if not krows:
        return sec.add(missing("Kernel summary " + NOT_IN_CAPTURE + "."))
    sec.add(chart(sec, "kernels", kernels_figure(krows[:MAX_KERNELS]), ""))
    cols = [c for c in ("count", "total_ms", "mean_ms", "median_ms", "min_ms", "max_ms", "share_pct")
            if any(c in k for k in krows)]
    return sec.add(table(["kernel"] + [c.replace("_", " ") for c in cols],
                         [[cell(str(k.get("name", "?")))] + [_num_or_text(k.get(c)) for c in cols]
                          for k in krows], numeric=[False] + [True] * len(cols), limit=100))


def _gaps(doc: AnalysisDocument) -> Section:
    sec = Section("gaps", "GPU idle gaps", "Idle time between GPU activities inside the active window, by gap length.")
    hists = gap_histograms(doc)
    if not hists:
        return sec.add(missing("Gap histogram " + NOT_IN_CAPTURE + "."))
    sec.add(chart(sec, "gaps", gaps_figure(hists)))
    for h in hists:
        if h["info"]:
            sec.add(kv([(f"{h['label']}: {k}", v) for k, v in h["info"].items() if not isinstance(v, (list, dict))]))
    return sec


# ----------------------------------------------------------------------------- page

#: The analysis page, in order: as in the terminal, the inference (its throughput, layers, phases, streams),
#: the generation (LLM decode) and the contexts and threads when the capture has them, then the findings
#: ranked by impact, then the detail. A new section is one function here and one entry.
SECTIONS: list[SectionFn] = [inference_section, generation_section, contexts_section, _findings, _timeline,
                             _summary, _distribution, _instances, _busy, _kernels, _gaps]


def build_analysis_page(result: AnalysisDocument) -> dict[str, Any]:
    """The analysis report as plain data (see :mod:`profiler.report.common` for the page shape)."""
    doc = result if isinstance(result, dict) else {}
    capture = _capture(doc)
    source = capture.get("source_path") or capture.get("path") or capture.get("source") or capture.get("file") or ""
    page = new_page("analysis", "trtprof capture analysis", str(source))
    _head(page, doc)
    add_sections(page, doc, SECTIONS)
    return page


def _by_impact(block: dict, findings: list) -> dict:
    """Within each severity, the findings in the analysis's order (costliest first), as in the terminal;
    a merged card takes the place of its first finding."""
    if block.get("type") != "findings":
        return block
    sev = {s: i for i, s in enumerate(("high", "medium", "low", "info"))}
    block["items"].sort(key=lambda x: (sev.get(x["severity"], 9), x.get("order", 0)))
    return block


def _num_or_text(v: Any) -> Any:
    return v if is_number(v) else cell("—" if v is None else str(v))


def distribution_figure(ranges: Sequence[dict]) -> dict:
    """Boxes from per-instance times (precomputed quartiles, so the page stays small), else percentiles."""
    data = []
    labels = unique_labels([short_label(range_label(r)) for r in ranges])
    for i, r in enumerate(ranges):
        name = range_label(r)
        label = labels[i]
        b = box_stats(instances(r)["wall_ms"])
        color = PALETTE[i % len(PALETTE)]
        if b is not None:
            data.extend(box_traces(label, b, color, name))
        else:
            w = r.get("wall_ms") if isinstance(r.get("wall_ms"), dict) else {}
            keys = [k for k in ("min", "median", "mean", "p90", "p95", "p99", "max") if stat(w, k) is not None]
            if keys:
                data.append({"type": "scatter", "mode": "markers", "name": label,
                             "x": [label] * len(keys), "y": [rounded(stat(w, k)) for k in keys],
                             "marker": {"color": color, "size": 10, "symbol": "line-ew-open",
                                        "line": {"width": 2, "color": color}},
                             "showlegend": False, "hovertext": [f"{name}: {k}" for k in keys]})
    return figure(data, {"yaxis": {"title": {"text": "wall time (ms)"}, "rangemode": "tozero"}})


def timeline_figure(tl: dict) -> dict:
    data = [{"type": "scatter", "mode": "lines+markers", "name": "wall (host) time", "x": tl["index"],
             "y": rounded_list(tl["wall_ms"]), "marker": {"size": 4}, "line": {"width": 1}}]
    if tl["gpu_busy_ms"]:
        data.append({"type": "scatter", "mode": "lines", "name": "GPU busy time", "x": tl["index"],
                     "y": rounded_list(tl["gpu_busy_ms"]), "line": {"width": 1}})
    if tl["outlier_index"]:
        data.append({"type": "scatter", "mode": "markers", "name": "outlier", "x": tl["outlier_index"],
                     "y": rounded_list(tl["outlier_wall_ms"]), "text": tl["outlier_cause"],
                     "marker": {"symbol": "x", "size": 11, "color": OUTLIER_COLOR, "line": {"width": 2}}})
    return figure(data, {"xaxis": {"title": {"text": "instance (0-based, start order)"}},
                         "yaxis": {"title": {"text": "ms"}, "rangemode": "tozero"}}, height=300)


def busy_figure(bvh: dict) -> dict:
    labels = unique_labels([short_label(n) for n in bvh["names"]])
    frac_text = [fmt_pct(f * 100) if f is not None else "" for f in bvh["gpu_busy_fraction"]]
    return figure([
        {"type": "bar", "name": "wall (host) time, median", "x": labels, "y": rounded_list(bvh["wall_ms_median"]),
         "hovertext": bvh["names"]},
        {"type": "bar", "name": "GPU busy time, median", "x": labels, "y": rounded_list(bvh["gpu_busy_ms_median"]),
         "text": frac_text, "textposition": "outside", "hovertext": bvh["names"]},
    ], {"barmode": "group", "yaxis": {"title": {"text": "ms"}}})


def kernels_figure(rows: Sequence[dict]) -> dict:
    rows = list(rows)[::-1]
    return figure([{"type": "bar", "orientation": "h", "name": "total GPU time",
                    "y": unique_labels([short_label(k.get("name", "?"), 60) for k in rows]),
                    "x": rounded_list(k.get("total_ms") for k in rows),
                    "hovertext": [str(k.get("name", "?")) for k in rows], "showlegend": False}],
                  {"xaxis": {"title": {"text": "total time (ms)"}}, "margin": {"l": 20}},
                  height=max(260, 22 * len(rows) + 80))


def gaps_figure(hists: Sequence[dict]) -> dict:
    data = []
    for h in hists:
        data.append({"type": "bar", "name": h["label"], "x": [_bin_label(a, b) for a, b in zip(h["lo_us"], h["hi_us"])],
                     "y": h["count"]})
    return figure(data, {"barmode": "group", "xaxis": {"title": {"text": "gap length"}, "type": "category"},
                         "yaxis": {"title": {"text": "gaps"}}, "showlegend": len(data) > 1})
