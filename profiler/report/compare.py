"""The regression-review report (``trtprof compare``): the verdict first, then the evidence.

Input: the ``trtprof compare --json`` document (:class:`profiler.documents.ComparisonDocument`; the page
is ``SECTIONS``, functions ``(doc) -> Section | None``): ``baseline`` and ``candidate`` run dicts, ``variants`` with a
verdict, median ratio, its confidence interval, the p-value and both runs' samples, plus environment
changes, findings that appeared or disappeared and an optional trend. Every part is optional.
"""

from __future__ import annotations

from typing import Any, Sequence

from profiler.documents import ComparisonDocument
from profiler.report.common import (
    NOT_IN_RUN, OUTLIER_COLOR, Section, SectionFn, add_sections, cell, chart, figure, findings_block, finite, kv,
    missing, new_page, note, rounded, rounded_list, shared_edges, short_label, histogram, table, unique_labels,
)
from profiler.fmt import DASH, fmt_ms, fmt_num, fmt_pct, fmt_ratio_pct, fmt_value, humanize_key, is_number

VERDICT_CLASSES = {"regression": "bad", "improvement": "ok", "no_change": "", "missing": "warn",
                   "inconclusive": "warn"}
VERDICT_ORDER = {"regression": 0, "inconclusive": 1, "missing": 2, "improvement": 3, "no_change": 4}
RUN_FIELDS = ("id", "label", "kind", "created_at", "host", "gpu", "driver_version", "cuda_version",
              "tensorrt_version", "nsys_version", "backend", "model", "status")
MAX_DISTRIBUTIONS = 12
TOP_DELTAS = 15


def _median(samples: Sequence[Any]) -> float | None:
    import numpy as np

    a = [float(s) for s in samples or [] if is_number(s)]
    return float(np.median(a)) if a else None


def variant_medians(v: dict) -> tuple[float | None, float | None]:
    """Baseline and candidate median latency: given (``baseline_median_ms``) or from the samples."""
    b = finite(v.get("baseline_median_ms"))
    c = finite(v.get("candidate_median_ms"))
    return (b if b is not None else _median(v.get("baseline_samples_ms")),
            c if c is not None else _median(v.get("candidate_samples_ms")))


def _verdict(v: dict) -> str:
    return str(v.get("verdict") or "no_change").lower()


def ci_text(v: dict) -> str:
    lo, hi = finite(v.get("ci_low")), finite(v.get("ci_high"))
    return f"{fmt_ratio_pct(lo)} to {fmt_ratio_pct(hi)}" if lo is not None and hi is not None else DASH


def p_text(p: Any) -> str:
    p = finite(p)
    if p is None:
        return DASH
    if p <= 0:  # the normal tail underflowed: smaller than any double, not zero
        return "<1e-300"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def verdict_summary(data: dict) -> dict[str, Any]:
    """The headline: ``{"cls", "headline", "lines", "regressions", "improvements", "missing"}``.

    ``lines`` say for each regressed (then improved) variant by how much and how sure: the median ratio
    as a change, its confidence interval and the p-value.
    """
    if isinstance(data.get("captures"), dict):
        return captures_summary(data)
    variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    by = {k: [v for v in variants if _verdict(v) == k] for k in VERDICT_ORDER}
    rule = data.get("rule") if isinstance(data.get("rule"), dict) else {}
    level = data.get("confidence", data.get("confidence_level", rule.get("confidence", 0.95)))
    level_text = f"{float(level) * 100:g}% CI" if is_number(level) else "CI"

    def line(v: dict) -> str:
        b, c = variant_medians(v)
        parts = [f"{v.get('key', '?')}: median {fmt_ratio_pct(v.get('median_ratio'))}",
                 f"({level_text} {ci_text(v)}, p = {p_text(v.get('p_value'))})"]
        if b is not None and c is not None:
            parts.append(f"{fmt_ms(b)} → {fmt_ms(c)}")
        noise = v.get("noise") if isinstance(v.get("noise"), dict) else {}
        if noise.get("source") in ("repeats", "history", "capture"):
            parts.append(f"· between runs: {noise.get('summary')}")
        parts += [f"· {d}" for d in [disturbance_text(v)] if d]
        return " ".join(parts)

    reg = sorted(by["regression"], key=lambda v: -(finite(v.get("median_ratio")) or 0))
    imp = sorted(by["improvement"], key=lambda v: finite(v.get("median_ratio")) or 0)
    acc = [str(k) for k in data.get("accuracy_regressions") or []] or \
        [str(v.get("key", "?")) for v in variants if str(v.get("accuracy_verdict") or "") == "regression"]
    n = len(variants)
    if reg:
        cls, head = "bad", f"Regression: {len(reg)} of {n} variant{'s' if n != 1 else ''} slower"
        if acc:
            head += f"; accuracy regressed in {len(acc)}"
    elif acc:
        cls, head = "bad", f"Accuracy regression in {len(acc)} of {n} variant{'s' if n != 1 else ''}"
    elif not variants:
        cls, head = "warn", "No variants matched between the two runs"
    elif by["missing"] and not imp and len(by["missing"]) == n:
        few = all(str(v.get("reason") or "").startswith("fewer than two samples") for v in by["missing"])
        cls, head = "warn", ("Nothing to compare: every variant has fewer than two samples on one side"
                             if few else "No variant of the baseline is in the candidate")
    elif by["inconclusive"]:
        from profiler.compare.noise import INCONCLUSIVE_CAUSES, inconclusive_cause

        causes = dict.fromkeys(inconclusive_cause(v) for v in by["inconclusive"])
        why = " or ".join(INCONCLUSIVE_CAUSES[c][0] for c in causes)
        compared = n - len(by["missing"])  # "1 of 7" counted the variants missing from one run too
        changed = any(v.get("verdict_within_run") in ("regression", "improvement") for v in by["inconclusive"])
        seen = "changed within one run, but" if changed else "showed no change, but"
        cls, head = "warn", (f"Inconclusive: {len(by['inconclusive'])} of {compared} compared "
                             f"variant{'s' if compared != 1 else ''} {seen} {why}")
        worst = max((d for d in (detectable_rel(v) for v in by["inconclusive"]) if d is not None), default=None)
        if "underpowered" in causes and worst is not None and is_number(rule.get("rel_threshold")):
            head += f" ({worst * 100:.1f}% against a {float(rule['rel_threshold']) * 100:g}% threshold)"
    elif imp:
        cls, head = "ok", f"No regression; {len(imp)} of {n} variant{'s' if n != 1 else ''} faster"
    else:
        cls, head = "ok", f"No change beyond noise in {n} variant{'s' if n != 1 else ''}"
        worst = max((d for d in (detectable_rel(v) for v in variants) if d is not None), default=None)
        if worst is not None:
            head += f" (the smallest change it could detect: {worst * 100:.1f}%)"
    if data.get("forced"):
        head = "Forced comparison: " + head
    gate = data.get("gate_failed", data.get("gate"))
    if isinstance(gate, bool) and "gate_failed" in data:
        head += " (gate failed)" if gate else " (gate passed)"
    lines = [line(v) for v in reg]
    if acc:
        lines.append("outputs newly outside their accuracy threshold: " + ", ".join(acc))
    if cls != "bad":  # a red banner lists what regressed, nothing else
        lines += [line(v) for v in imp]
    for v in by["inconclusive"] if cls != "bad" else []:
        lines.append(f"{v.get('key', '?')}: inconclusive: {v.get('reason', '')}")
        if disturbance_text(v):
            lines.append(f"{v.get('key', '?')}: {disturbance_text(v)}")
    if by["missing"]:
        lines.append("missing from one run: " + ", ".join(
            str(v.get("key", "?")) + (f" ({v['reason']})" if v.get("reason") else "") for v in by["missing"]))
    return {"cls": cls, "headline": head, "lines": lines, "regressions": [v.get("key") for v in reg],
            "improvements": [v.get("key") for v in imp], "missing": [v.get("key") for v in by["missing"]],
            "accuracy_regressions": acc}


def detectable_rel(v: dict) -> float | None:
    """The smallest relative change the comparison of this variant could have detected, None if unknown."""
    d = v.get("detectable_change") if isinstance(v.get("detectable_change"), dict) else {}
    return finite(d.get("rel"))


def disturbance_text(v: dict) -> str:
    """Which way each side's host load pushed the ratio, e.g. 'host load: baseline 55% (pushes toward an
    improvement), candidate 3%'; empty when not recorded."""
    noise = v.get("noise") if isinstance(v.get("noise"), dict) else {}
    dist = noise.get("disturbance") if isinstance(noise.get("disturbance"), dict) else None
    if not dist:
        return ""
    parts = []
    for side in ("baseline", "candidate"):
        d = dist.get(side) or {}
        share = finite(d.get("host_others_share"))
        if share is None:
            parts.append(f"{side} unknown")
            continue
        toward = d.get("pushes_toward")
        parts.append(f"{side} {share * 100:.0f}%" + (f" (slows the {side}: pushes toward "
                                                      f"{'a regression' if toward == 'regression' else 'an improvement'})"
                                                      if toward and share >= 0.05 else ""))
    return "host load: " + ", ".join(parts)


_CAPTURE_HEADS = {"regression": ("bad", "Regression"), "improvement": ("ok", "Improvement"),
                  "no_change": ("ok", "No change"), "inconclusive": ("warn", "Inconclusive")}


def captures_summary(data: dict) -> dict[str, Any]:
    """The headline of a comparison of two captures (``captures``): decided on the inference unit, or on the
    per-kernel GPU time where neither capture has one, with what was compared and what was not matched."""
    cap = data["captures"]
    variants = [v for v in data.get("variants") or [] if isinstance(v, dict)]
    unit = next((v for v in variants if v.get("role") == "unit"), None)
    verdict = str(data.get("verdict") or "inconclusive")
    cls, word = _CAPTURE_HEADS.get(verdict, ("warn", verdict))
    head = f"{word}: {cap.get('summary', '')}"
    lines = []
    if unit is not None:
        lines.append(f"{unit.get('key', '?')}: {unit.get('reason', '')}")
        d = unit.get("detectable_change") if isinstance(unit.get("detectable_change"), dict) else {}
        said = d.get("what") if verdict in ("regression", "improvement") else d.get("text")
        if said:
            lines.append(f"smallest change this comparison could detect: {said}")
    kernels = cap.get("kernels") if isinstance(cap.get("kernels"), dict) else None
    for r in (kernels or {}).get("significant") or []:
        lines.append(f"kernel {r.get('name', '?')}: x{r.get('per_call_ratio', float('nan')):.3f} per call, "
                     f"{fmt_ms(r.get('baseline_per_call_ms'))} -> {fmt_ms(r.get('candidate_per_call_ms'))}, "
                     f"{r.get('baseline_calls')} -> {r.get('candidate_calls')} calls")
    unmatched = cap.get("unmatched") or {}
    for side in ("baseline", "candidate"):
        keys = [str(k) for k in unmatched.get(side) or []]
        if keys:
            lines.append(f"only in the {side} ({len(keys)}): " + ", ".join(keys[:8]) + (" ..." if len(keys) > 8 else ""))
    reg = [str(k) for k in data.get("latency_regressions") or []]
    imp = ([unit.get("key")] if unit is not None else
           [v.get("key") for v in variants if v.get("verdict") == "improvement"]) if verdict == "improvement" else []
    return {"cls": cls, "headline": head, "lines": lines, "regressions": reg, "improvements": imp,
            "missing": [k for side in ("baseline", "candidate") for k in unmatched.get(side) or []],
            "accuracy_regressions": []}


def overlaid_histogram(v: dict, bins: int = 40) -> dict[str, Any] | None:
    """Both runs' samples binned on shared edges: ``{"edges", "centers", "baseline", "candidate"}``."""
    b = [s for s in v.get("baseline_samples_ms") or [] if is_number(s)]
    c = [s for s in v.get("candidate_samples_ms") or [] if is_number(s)]
    if not b and not c:
        return None
    edges = shared_edges(b, c, bins=bins)
    return {"edges": edges, "centers": [(edges[i] + edges[i + 1]) / 2 for i in range(len(edges) - 1)],
            "baseline": histogram(b, edges), "candidate": histogram(c, edges)}


def delta_rows(rows: Any) -> list[dict[str, Any]]:
    """Per-layer (or per-kernel) deltas with ``delta_ms``/``delta_pct`` filled in, largest slowdown first."""
    out = []
    for r in rows or []:
        if not isinstance(r, dict):
            continue
        r = dict(r)
        b, c = finite(r.get("baseline_ms")), finite(r.get("candidate_ms"))
        if finite(r.get("delta_ms")) is None and b is not None and c is not None:
            r["delta_ms"] = c - b
        if finite(r.get("delta_pct")) is None and b and c is not None:
            r["delta_pct"] = (c - b) / b * 100
        out.append(r)
    out.sort(key=lambda r: -(finite(r.get("delta_ms")) or 0.0))
    return out


def environment_rows(changes: Any) -> list[tuple[str, Any, Any]]:
    """Environment changes as ``(field, baseline, candidate)``; accepts a list of dicts or strings, or a dict."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(changes, dict):
        for k, v in changes.items():
            if isinstance(v, dict):
                out.append((str(k), v.get("baseline"), v.get("candidate")))
            elif isinstance(v, (list, tuple)) and len(v) == 2:
                out.append((str(k), v[0], v[1]))
            else:
                out.append((str(k), None, v))
    elif isinstance(changes, list):
        for c in changes:
            if isinstance(c, dict):
                field = c.get("field", c.get("name", c.get("key", "?")))
                out.append((str(field), c.get("baseline", c.get("before")), c.get("candidate", c.get("after"))))
            elif c is not None:
                out.append((str(c), None, None))
    return out


def trend_series(trend: Any) -> list[dict[str, Any]]:
    """Trend as ``[{"title", "labels", "median_ms", "change_index"}]``.

    Accepts ``{"points": [{"label"|"run_id"|"run"|"created_at", "median_ms"}], "change_index" (or
    ``"step": {"index"}``), "variant"}``, a list of those, or ``{variant: [points]}``.
    """
    if trend is None:
        return []
    items: list[dict] = []
    if isinstance(trend, dict) and isinstance(trend.get("points"), list):
        items = [trend]
    elif isinstance(trend, list):
        items = [t for t in trend if isinstance(t, dict) and isinstance(t.get("points"), list)]
        if not items and all(isinstance(t, dict) for t in trend):
            items = [{"points": trend}]
    elif isinstance(trend, dict):
        items = [{"variant": k, "points": v} for k, v in trend.items() if isinstance(v, list)]
    out = []
    for t in items:
        pts = [p for p in t["points"] if isinstance(p, dict)]
        labels, ys = [], []
        for i, p in enumerate(pts):
            lab = p.get("label") or (f"run {p['run_id']}" if p.get("run_id") is not None else None) or \
                p.get("run") or p.get("created_at") or i
            labels.append(str(lab))
            ys.append(finite(p.get("median_ms", p.get("latency_ms", p.get("value")))))
        ci = t.get("change_index", t.get("step_index"))
        if ci is None and isinstance(t.get("step"), dict):
            ci = t["step"].get("index")
        out.append({"title": str(t.get("variant") or t.get("key") or ""), "labels": unique_labels(labels),
                    "median_ms": ys, "change_index": ci if isinstance(ci, int) and 0 <= ci < len(pts) else None})
    return [s for s in out if s["labels"]]


def accuracy_rows(acc: Any) -> list[dict[str, Any]]:
    """Accuracy deltas as ``[{"output", "metric", "baseline", "candidate", "delta"}]``.

    Accepts ``{output: {metric: {"baseline", "candidate", "delta"}}}`` or a list of flat rows.
    """
    out = []
    if isinstance(acc, dict):
        for output, metrics in acc.items():
            if not isinstance(metrics, dict):
                continue
            for metric, v in metrics.items():
                if isinstance(v, dict):
                    out.append({"output": str(output), "metric": str(metric), "baseline": v.get("baseline"),
                                "candidate": v.get("candidate"), "delta": v.get("delta")})
    elif isinstance(acc, list):
        for r in acc:
            if isinstance(r, dict) and ("baseline" in r or "candidate" in r):
                out.append({"output": str(r.get("output", "?")), "metric": str(r.get("metric", "?")),
                            "baseline": r.get("baseline"), "candidate": r.get("candidate"), "delta": r.get("delta")})
    return out


def _num_or_cell(v: Any, cls: str = "") -> Any:
    if is_number(v) and not cls:
        return v
    return cell(fmt_value("", v) if v is not None else DASH, cls=cls)


# ----------------------------------------------------------------------------- page

def _variants(doc: ComparisonDocument) -> list[dict]:
    return [v for v in doc.get("variants") or [] if isinstance(v, dict)]


def _side(doc: ComparisonDocument, which: str) -> dict:
    return doc[which] if isinstance(doc.get(which), dict) else {}


def run_name(r: dict) -> str:
    return str(r.get("label") or (f"run {r['id']}" if r.get("id") is not None else "?"))


def _head(page: dict, doc: ComparisonDocument) -> None:
    """The verdict, the banners and the two runs' details side by side (collapsed, last)."""
    from profiler.report.verdict import compare_verdict

    page["verdict"] = compare_verdict(doc, verdict_summary(doc))
    for w in doc.get("warnings") or []:
        page["banners"].append({"level": "medium", "text": str(w)})
    if doc.get("forced"):
        page["banners"].append({"level": "high", "text": "Compared with --force although " + "; ".join(
            str(x) for x in doc["forced"]) + ": differences may come from that, not from a regression."})
    base, cand = _side(doc, "baseline"), _side(doc, "candidate")
    rows = []
    for f in RUN_FIELDS if base or cand else ():
        b, c = base.get(f), cand.get(f)
        if b is None and c is None:
            continue
        cls = "warn" if b != c and f not in ("id", "label", "created_at", "status") else ""
        rows.append([humanize_key(f), cell(fmt_value(f, b), cls=cls), cell(fmt_value(f, c), cls=cls)])
    if rows:
        page["metadata"].append(table(["", "baseline", "candidate"], rows, numeric=[False] * 3))


def _within_text(v: dict) -> str:
    """The within-run test's own verdict and reason, under the final verdict."""
    within = v.get("verdict_within_run") or v.get("verdict")
    return f"within the run: {str(within).replace('_', ' ')}; {v.get('within_reason') or v.get('reason') or ''}"


def _underpowered(v: dict) -> bool:
    """True when the threshold is below what the comparison could detect and that left the verdict undecided."""
    d = v.get("detectable_change") if isinstance(v.get("detectable_change"), dict) else {}
    return bool(d.get("underpowered")) and _verdict(v) not in ("regression", "improvement")


def _detectable_cell(v: dict) -> str:
    """The smallest detectable change; with the threshold's comparison only where the verdict is undecided."""
    d = v.get("detectable_change") if isinstance(v.get("detectable_change"), dict) else {}
    said = d.get("what") if _verdict(v) in ("regression", "improvement") else d.get("text")
    return str(said or d.get("text") or DASH)


def _by_variant(doc: ComparisonDocument) -> Section:
    sec = Section("by-variant", "Verdict by variant",
                  "Median latency ratio candidate/baseline with its bootstrap confidence interval, and the "
                  "Mann-Whitney U p-value on the per-iteration samples; a change must also beat the "
                  "run-to-run spread (process repeats of trtprof sweep --repeat, or the fingerprint's "
                  "history), or it is not called.")
    rule = doc.get("decision_rule", doc.get("rule", doc.get("thresholds")))
    if isinstance(rule, dict) and rule:
        sec.add(kv(rule.items()))
    variants = _variants(doc)
    if not variants:
        return sec.add(missing("No variants matched by key " + NOT_IN_RUN + "."))
    ordered = sorted(variants, key=lambda v: (VERDICT_ORDER.get(_verdict(v), 9), -(finite(v.get("median_ratio")) or 0)))
    rows = []
    for v in ordered:
        b, c = variant_medians(v)
        noise = v.get("noise") if isinstance(v.get("noise"), dict) else {}
        key = str(v.get("key", "?"))  # a TensorRT inference range matched under another API name says which
        rows.append([cell(key, sub=f"baseline: {v['baseline_key']}") if v.get("baseline_key") else key,
                     cell(_verdict(v).replace("_", " "), cls=VERDICT_CLASSES.get(_verdict(v), ""),
                          sub=_within_text(v)),
                     cell(str(noise.get("summary") or DASH), cls="warn" if _verdict(v) == "inconclusive" else "",
                          sub=disturbance_text(v)),
                     cell(_detectable_cell(v), cls="warn" if _underpowered(v) else ""),
                     b, c, cell(fmt_ratio_pct(v.get("median_ratio"))), cell(ci_text(v)), cell(p_text(v.get("p_value"))),
                     cell(fmt_ratio_pct(v.get("throughput_ratio"))),
                     cell(f"{len(v.get('baseline_samples_ms') or [])} / {len(v.get('candidate_samples_ms') or [])}")])
    return sec.add(table(["variant", "verdict (samples and run-to-run noise)", "between runs",
                          "smallest detectable change", "baseline median ms",
                          "candidate median ms", "median change", "confidence interval", "p-value",
                          "throughput change", "samples (base / cand)"], rows,
                         numeric=[False, False, False, False] + [True] * 7))


def _distributions(doc: ComparisonDocument) -> Section:
    sec = Section("distributions", "Latency distributions, both runs overlaid",
                  "Per-iteration latency histograms on shared bins.")
    base, cand = run_name(_side(doc, "baseline")), run_name(_side(doc, "candidate"))
    shown = 0
    for v in sorted(_variants(doc), key=lambda v: (VERDICT_ORDER.get(_verdict(v), 9),
                                                    -abs((finite(v.get("median_ratio")) or 1) - 1))):
        h = overlaid_histogram(v)
        if h is None or shown >= MAX_DISTRIBUTIONS:
            continue
        shown += 1
        sec.add({"type": "heading", "text": f"{v.get('key', '?')} ({_verdict(v).replace('_', ' ')})"},
                chart(sec, f"dist-{shown}", distribution_figure(h, base, cand)))
    if not shown:
        sec.add(missing("Per-iteration samples " + NOT_IN_RUN + "."))
    return sec


def _deltas_section(kind: str, label: str, has: list[dict], hidden: list[dict]) -> Section:
    """Per-layer or per-kernel deltas of the variants in ``has`` (``hidden``: variants whose deltas were
    withheld, with why)."""
    sec = Section(f"{kind}-deltas", f"Per-{label} deltas",
                  f"Which {label}s got slower (candidate − baseline), largest slowdown first. Per-layer "
                  "times come from a short profiling pass: a delta is shown only for a variant whose "
                  "latency changed beyond noise, and only when it exceeds its uncertainty (± shown).")
    key = f"{label}_deltas"
    for v in hidden:
        sec.add(note(f"{v.get('key', '?')}: {v['layer_deltas_hidden']}."))
    if not has and not hidden:
        sec.add(missing(f"Per-{label} times " + NOT_IN_RUN + " (both runs need them)."))
    for i, v in enumerate(has):
        rows = delta_rows(v.get(key))
        sec.add({"type": "heading", "text": str(v.get("key", "?"))})
        if i < MAX_DISTRIBUTIONS:
            sec.add(chart(sec, f"{kind}-delta-{i}", delta_figure(rows[:TOP_DELTAS] + [r for r in rows[TOP_DELTAS:]][-5:])))
        extra = [c for c in ("type", "precision_baseline", "precision_candidate", "uncertainty_ms")
                 if any(c in r for r in rows)]
        sec.add(table([label] + [humanize_key(c) for c in extra] + ["baseline ms", "candidate ms", "delta ms", "delta"],
                      [[str(r.get("name", "?"))] + [cell(fmt_value(c, r.get(c))) for c in extra] +
                       [finite(r.get("baseline_ms")), finite(r.get("candidate_ms")),
                        cell(fmt_num(r.get("delta_ms")), cls="bad" if (finite(r.get("delta_ms")) or 0) > 0
                             else "ok" if (finite(r.get("delta_ms")) or 0) < 0 else ""),
                        cell(fmt_pct(r.get("delta_pct")))] for r in rows],
                      numeric=[False] + [False] * len(extra) + [True] * 4, limit=40))
    return sec


def _layer_deltas(doc: ComparisonDocument) -> Section:
    variants = _variants(doc)
    return _deltas_section("layers", "layer", [v for v in variants if delta_rows(v.get("layer_deltas"))],
                           [v for v in variants if v.get("layer_deltas_hidden")])


def _kernel_deltas(doc: ComparisonDocument) -> Section | None:
    top_kernels = doc.get("kernel_deltas")
    kernel_error = next((r.get("error") for r in top_kernels or [] if isinstance(r, dict) and r.get("error")), None)
    if kernel_error:
        return Section("kernels-deltas", "Per-kernel deltas").add(note(str(kernel_error), "warn"))
    has = [v for v in _variants(doc) if delta_rows(v.get("kernel_deltas"))]
    whole = [r for r in top_kernels or [] if isinstance(r, dict) and "name" in r]
    if delta_rows(whole):
        has = [{"key": "whole capture", "kernel_deltas": whole}] + has
    return _deltas_section("kernels", "kernel", has, []) if has else None


def _accuracy(doc: ComparisonDocument) -> Section | None:
    acc = [(v, accuracy_rows(v.get("accuracy_deltas", v.get("accuracy")))) for v in _variants(doc)]
    acc = [(v, rows) for v, rows in acc if rows]
    if not acc:
        return None
    sec = Section("accuracy", "Accuracy deltas", "Each output's error against FP32 in both runs.")
    for v, rows in acc:
        bad = str(v.get("accuracy_verdict") or "") == "regression"
        sec.add({"type": "heading", "text": f"{v.get('key', '?')}" + (" (accuracy regression)" if bad else "")})
        sec.add(table(["output", "metric", "baseline", "candidate", "delta"],
                      [[r["output"], r["metric"], _num_or_cell(r["baseline"]), _num_or_cell(r["candidate"]),
                        _num_or_cell(r["delta"], cls="bad" if r["metric"] == "passed"
                                     and r["candidate"] is False and r["baseline"] is not False else "")]
                       for r in rows], numeric=[False, False, True, True, True], limit=200))
    return sec


def _environment(doc: ComparisonDocument) -> Section:
    sec = Section("environment", "Environment differences",
                  "What changed between the runs: GPU, driver, CUDA, TensorRT, engine fingerprint, clocks.")
    env = environment_rows(doc.get("environment_changes"))
    if env:
        return sec.add(table(["what", "baseline", "candidate"],
                             [[f, cell(fmt_value(f, b), cls="warn"), cell(fmt_value(f, c), cls="warn")] for f, b, c in env],
                             numeric=[False, False, False]))
    if "environment_changes" in doc:
        return sec.add(note("Nothing changed in the recorded environment.", "ok"))
    return sec.add(missing("Environment comparison " + NOT_IN_RUN + "."))


def _findings(doc: ComparisonDocument) -> Section:
    sec = Section("findings", "Findings that appeared or disappeared")
    appeared, gone = doc.get("findings_appeared"), doc.get("findings_disappeared")
    if appeared is None and gone is None:
        return sec.add(missing("Finding comparison " + NOT_IN_RUN + "."))
    return sec.add({"type": "heading", "text": f"Appeared in the candidate ({len(appeared or [])})"},
                   findings_block(appeared or [], "No new findings."),
                   {"type": "heading", "text": f"Disappeared from the candidate ({len(gone or [])})"},
                   findings_block(gone or [], "No finding went away."))


def _trend(doc: ComparisonDocument) -> Section | None:
    series = trend_series(doc.get("trend"))
    for v in _variants(doc):
        for t in trend_series(v.get("trend")):
            t["title"] = t["title"] if t["title"] and t["title"] != "None" else str(v.get("key", "?"))
            series.append(t)
    if not series:
        return None
    sec = Section("trend", "Trend", "Median latency of the runs of the same fingerprint over time; "
                                    "the star marks the run where the change began.")
    for i, s in enumerate(series[:MAX_DISTRIBUTIONS]):
        if s["title"]:
            sec.add({"type": "heading", "text": s["title"]})
        sec.add(chart(sec, f"trend-{i}", trend_figure(s)))
    return sec


def _captures(doc: ComparisonDocument) -> Section | None:
    """Two captures: what was matched (the unit, by name or role), how many series were compared and which
    were not matched, and the per-kernel comparison where it decided."""
    cap = doc.get("captures") if isinstance(doc.get("captures"), dict) else None
    if cap is None:
        return None
    sec = Section("captures", "What was compared",
                  "Two captures are compared by their inference: the units matched first (by normalised name, or by "
                  "role when the names differ), judged on time per inference (the larger of host and GPU time), "
                  "or on host time where one side's GPU time is unmeasured. Without a unit, per-kernel GPU time.")
    sec.add(note(str(cap.get("summary") or ""), ""))
    unmatched = cap.get("unmatched") or {}
    rows = [["compared", str(cap.get("ranges_compared", 0))]]
    rows += [[f"only in the {side}", ", ".join(str(k) for k in unmatched.get(side) or []) or DASH]
             for side in ("baseline", "candidate")]
    rows += [[f"{side} unit", str(cap.get(f"{side}_unit") or "none")] for side in ("baseline", "candidate")]
    sec.add(table(["", "range series"], rows, numeric=[False, False]))
    kernels = cap.get("kernels") if isinstance(cap.get("kernels"), dict) else None
    if kernels and kernels.get("kernels"):
        krows = sorted(kernels["kernels"], key=lambda r: -abs(finite(r.get("delta_ms")) or 0.0))
        sec.add(table(["kernel", "calls (base / cand)", "baseline ms per call", "candidate ms per call",
                       "per call", "significant"],
                      [[str(r.get("name", "?")), f"{r.get('baseline_calls')} / {r.get('candidate_calls')}",
                        finite(r.get("baseline_per_call_ms")), finite(r.get("candidate_per_call_ms")),
                        cell(fmt_ratio_pct(r.get("per_call_ratio"))),
                        cell("yes" if r.get("significant") else "no", cls="warn" if r.get("significant") else "")]
                       for r in krows], numeric=[False, False, True, True, True, False], limit=40))
    return sec


#: The compare page, in order. A new section is one function ``(doc) -> Section | None`` and one entry here.
SECTIONS: list[SectionFn] = [_captures, _by_variant, _distributions, _layer_deltas, _kernel_deltas, _accuracy, _environment,
                             _findings, _trend]


def build_compare_page(data: ComparisonDocument) -> dict[str, Any]:
    """The compare report as plain data; ``page["verdict"]`` is shown before everything else."""
    doc = data if isinstance(data, dict) else {}
    base, cand = _side(doc, "baseline"), _side(doc, "candidate")
    page = new_page("compare", "trtprof regression review", f"{run_name(base)} → {run_name(cand)}")
    _head(page, doc)
    add_sections(page, doc, SECTIONS)
    return page


# ----------------------------------------------------------------------------- figures

def distribution_figure(h: dict, base_name: str, cand_name: str) -> dict:
    width = (h["edges"][1] - h["edges"][0]) if len(h["edges"]) > 1 else None
    common = {"type": "bar", "x": rounded_list(h["centers"]), "width": rounded(width), "opacity": 0.6}
    return figure([{**common, "name": f"baseline ({base_name})", "y": h["baseline"], "marker": {"color": "#2f74c0"}},
                   {**common, "name": f"candidate ({cand_name})", "y": h["candidate"], "marker": {"color": "#d9822b"}}],
                  {"barmode": "overlay", "bargap": 0, "xaxis": {"title": {"text": "latency (ms)"}},
                   "yaxis": {"title": {"text": "iterations"}}}, height=300)


def delta_figure(rows: Sequence[dict]) -> dict:
    rows = [r for r in rows if finite(r.get("delta_ms")) is not None][::-1]
    names = unique_labels([short_label(r.get("name", "?"), 60) for r in rows])
    return figure([{"type": "bar", "orientation": "h", "name": "delta", "y": names,
                    "x": rounded_list(r["delta_ms"] for r in rows), "hovertext": [str(r.get("name", "?")) for r in rows],
                    "marker": {"color": [OUTLIER_COLOR if r["delta_ms"] > 0 else "#2e9e5b" for r in rows]},
                    "showlegend": False}],
                  {"xaxis": {"title": {"text": "candidate − baseline (ms)"}, "zeroline": True}, "margin": {"l": 20}},
                  height=max(240, 22 * len(rows) + 80))


def trend_figure(s: dict) -> dict:
    data = [{"type": "scatter", "mode": "lines+markers", "name": "median latency", "x": s["labels"],
             "y": rounded_list(s["median_ms"])}]
    if s["change_index"] is not None:
        i = s["change_index"]
        data.append({"type": "scatter", "mode": "markers", "name": "change begins", "x": [s["labels"][i]],
                     "y": [rounded(s["median_ms"][i])], "marker": {"symbol": "star", "size": 16, "color": OUTLIER_COLOR}})
    return figure(data, {"xaxis": {"type": "category", "title": {"text": "run"}},
                         "yaxis": {"title": {"text": "median latency (ms)"}}}, height=300)
