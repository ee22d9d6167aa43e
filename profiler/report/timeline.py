"""The timeline as a picture: the windows of :mod:`profiler.capture.timeline` (stored in the analysis JSON
under ``timeline``) as plotly figures, one per window, and the report section that holds them.
"""

from __future__ import annotations

from typing import Any

from profiler.capture.timeline import MIN_GAP_US

CATEGORY_COLORS = {
    "NVTX range": "#7b5ea7", "launch": "#2f74c0", "graph launch": "#17a2b8", "sync": "#c0392b",
    "memcpy call": "#f2b36b", "other CUDA API": "#8a939c", "OS runtime": "#b8a200", "kernel": "#2e9e5b",
    "memcpy": "#d9822b", "memset": "#8c6d31", "graph": "#17a2b8", "GPU idle": "rgba(192,57,43,0.35)",
}


def timeline_figure(w: dict[str, Any]) -> dict:
    """One window as horizontal bars on lanes (threads, then streams), gaps in translucent red."""
    from profiler.report.common import figure, rounded_list, short_label

    ev = w["events"]
    span = w["span_ms"] or 1.0
    min_w = span / 1500  # a 50 ns kernel in a 5 ms window still shows as a sliver
    data = []
    cats = list(dict.fromkeys(ev["category"]))
    for cat in cats:
        idx = [i for i, c in enumerate(ev["category"]) if c == cat]
        data.append({"type": "bar", "orientation": "h", "name": cat, "y": [ev["lane"][i] for i in idx],
                     "base": rounded_list(ev["start_ms"][i] for i in idx),
                     "x": rounded_list(max(ev["dur_ms"][i], min_w) for i in idx),
                     "hovertext": [f"{short_label(ev['name'][i], 80)}: {ev['dur_ms'][i] * 1000:.4g} µs at "
                                   f"{ev['start_ms'][i]:.4g} ms" for i in idx], "hoverinfo": "text",
                     "marker": {"color": CATEGORY_COLORS.get(cat, "#6b7280"), "line": {"width": 0}}})
    gaps = w.get("gaps") or []
    if gaps:
        lanes = [f"{g['device']} · idle" for g in gaps]
        data.append({"type": "bar", "orientation": "h", "name": "GPU idle", "y": lanes,
                     "base": rounded_list(g["start_ms"] for g in gaps), "x": rounded_list(g["dur_ms"] for g in gaps),
                     "hovertext": [f"GPU idle {g['dur_ms'] * 1000:.4g} µs" + (
                         f"; host in {short_label(g['cause'], 60)} for {g['cause_overlap_fraction'] * 100:.3g}% of it"
                         if g["cause"] else "") for g in gaps], "hoverinfo": "text",
                     "marker": {"color": CATEGORY_COLORS["GPU idle"], "line": {"width": 0}}})
    lanes = list(w["lanes"]) + sorted({f"{g['device']} · idle" for g in gaps})
    shapes = [{"type": "line", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1,
               "line": {"color": "#1f2933", "width": 1, "dash": "dot"}}
              for x in (w["window_start_ms"], w["window_end_ms"])]
    return figure(data, {"barmode": "overlay", "bargap": 0.25, "shapes": shapes,
                         "xaxis": {"title": {"text": "ms from the window's start (dotted: the instance)"}},
                         "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": lanes,
                                   "autorange": "reversed"},
                         "margin": {"l": 20}, "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}},
                  height=max(220, 26 * len(lanes) + 140))


ANALYSIS_TIMELINE_INTRO = ("What each host thread and GPU stream did during a representative (median) and the "
                           "worst instance of the busiest series. Red: the GPU idle, with the host call that "
                           "overlapped the gap most (hover). Zoom by dragging; double-click resets.")
SWEEP_TIMELINE_INTRO = ("From the sweep's nsys capture: the median timed query of each variant (fastest first), "
                        "every host thread and GPU stream. Red: the GPU idle, with the host call that overlapped "
                        "the gap most (hover). Zoom by dragging; double-click resets.")


def timeline_section(result: dict[str, Any], intro: str = ANALYSIS_TIMELINE_INTRO,
                     absent: str | None = None) -> Any:
    """The report section ``timeline`` of an analysis or a sweep document: each window's picture, what
    was left out, the longest gaps and the findings that explain them pinned below. ``absent``: what to
    say without windows (None: no section)."""
    from profiler.report.common import Section, chart, missing, note
    from profiler.report.verdict import merge_findings

    tl = result.get("timeline") if isinstance(result.get("timeline"), dict) else {}
    windows = [w for w in tl.get("windows") or [] if isinstance(w, dict) and w.get("lanes")]
    if not windows and absent is None:
        return None
    sec = Section("timeline", "Timeline", intro)
    blocks = sec.blocks
    if not windows:
        blocks.append(missing(absent))
        return sec
    for i, w in enumerate(windows):
        blocks.append({"type": "heading", "text": f"{w['label']}: {w['window_end_ms'] - w['window_start_ms']:.4g} ms"})
        caption = "" if w["shown"] == w["total"] else (
            f"{w['shown']:,} of {w['total']:,} events shown (the longest; GPU work and NVTX before host calls).")
        gaps = sorted(w.get("gaps") or [], key=lambda g: -g["dur_ms"])
        if gaps:
            idle = sum(g["dur_ms"] for g in gaps)
            top = gaps[0]
            caption += (f" GPU idle {idle:.4g} ms in {len(gaps)} gap(s) of {tl.get('min_gap_us', MIN_GAP_US):g} µs "
                        f"or more; the longest {top['dur_ms'] * 1000:.4g} µs"
                        + (f", host in {top['cause']}" if top["cause"] else "") + ".")
        blocks.append(chart(sec, f"timeline-{i}", timeline_figure(w), caption.strip()))
    pinned = [g for g in merge_findings(result.get("findings") or []) if g["severity"] != "info"][:3]
    for g in pinned:
        blocks.append(note(f"{g['rule']}: {g['title']}" + (f" → {g['recommendation']}" if g["recommendation"] else ""),
                           "warn" if g["severity"] == "medium" else "bad" if g["severity"] == "high" else "info"))
    return sec
