"""The verdict: what every report page and terminal summary says first.

Plain data, no HTML and no plotly, so the CLI prints the same words the page shows:

    v = sweep_verdict(summary)          # or analysis_verdict / layers_verdict / compare_verdict
    print("\\n".join(terminal_lines(v)))

A verdict is ``{"status", "cls", "headline", "lines", "items"}``: ``status`` one of ``STATUSES``,
``cls`` the colour (ok / warn / bad), and ``items`` the top findings merged by rule and cause
(:func:`merge_findings`), ranked by impact, each with the variants or ranges it applies to and one
recommendation.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from profiler.documents import AnalysisDocument, ComparisonDocument, ImportDocument, SweepDocument

from profiler.fmt import fmt_ms, fmt_num, is_number

STATUSES = ("PASS", "ISSUES FOUND", "GATE FAILED", "REGRESSION", "INCONCLUSIVE", "IMPROVEMENT", "FAILED",
            "INCOMPLETE CAPTURE")
SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}
TOP_ITEMS = 5
#: evidence keys that say how much time a finding costs, most specific first, with how to say it
COST_MS_KEYS = {"impact_ms": "{}", "ms_per_inference": "{} per inference", "cost_ms": "{}",
                "graph_saving_ms_per_instance": "{} per instance to save",
                "estimated_saving_ms": "{} to save", "saving_ms": "{} to save",
                "outlier_excess_ms": "{} lost to outliers in total", "idle_ms": "{} GPU idle in total",
                "sync_ms": "{} in synchronisation", "gpu_ms": "{} of GPU time", "excess_ms": "{} in excess",
                "delta_ms": "{} slower"}
#: evidence keys that say which share of the time a finding costs (fractions; ``_pct`` keys are percents)
SHARE_KEYS = ("share", "graph_saving_pct", "idle_fraction", "share_of_active_gpu_time", "sync_fraction",
              "copy_fraction", "share_pct")


def as_dict(f: Any) -> dict[str, Any] | None:
    if hasattr(f, "to_dict"):
        f = f.to_dict()
    return f if isinstance(f, dict) else None


def _num(x: Any) -> float | None:
    return float(x) if is_number(x) else None


def impact(f: dict[str, Any]) -> dict[str, Any]:
    """What a finding costs: ``{"ms", "share", "text"}`` from its ``impact`` dict or its evidence.

    ``ms`` is time (per inference where the rule measures per instance), ``share`` a fraction of the
    time in question; either may be None. ``text`` is the short form shown beside the finding.
    """
    given = f.get("impact") if isinstance(f.get("impact"), dict) else {}
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    per = next((k for k in ("ms_per_inference", "ms_per_instance") if _num(given.get(k)) is not None), None)
    ms = _num(given.get("ms")) if per is None else _num(given[per])
    share = _num(given.get("share"))
    how = "{} per inference" if per else "{}"
    if per and f.get("rule") == "transfer_bound":  # the cost is the copy time compute does not hide
        how = "{} of exposed copy time per inference"
    if ms is None and _num(given.get("ms_total")) is not None:  # a range other than the inference unit
        ms = _num(given["ms_total"])
        how = "{} of GPU time in the steady state" if given.get("gpu_time") else "{} over the steady state"
    if ms is None:
        key = next((k for k in COST_MS_KEYS if _num(ev.get(k)) is not None), None)
        if key is not None:
            ms, how = _num(ev[key]), COST_MS_KEYS[key]
    if share is None:
        for k in SHARE_KEYS:
            v = _num(ev.get(k))
            if v is not None:
                share = v / 100.0 if k.endswith("_pct") else v
                break
    parts = []
    if ms is not None:
        parts.append(how.format(fmt_ms(ms)))
    if share is not None:
        of = "steady state" if "steady_ms" in given else "time"
        if isinstance(given.get("gpus"), int) and given["gpus"] > 1:
            of = f"steady state's GPU time on {given['gpus']} GPUs"
        parts.append(f"{share * 100:.3g}% of the {of}")
    cov = next((_num(ev[k]) for k in ("cov_pct", "compute_cov_pct") if _num(ev.get(k)) is not None), None)
    if not parts and cov is not None:
        parts.append(f"CoV {cov:.3g}%")
    if given.get("included_in"):  # the same time another finding already prices
        parts.append(f"the same time as {given['included_in']}")
    elif given.get("shared_with") and _num(given.get("shared_ms")) is not None:  # priced beyond what another holds
        parts.append(_not_counting(given, per is not None))
    return {"ms": ms, "share": share, "cov": cov, "text": given.get("text") or ", ".join(parts)}


def _not_counting(given: dict[str, Any], per_inference: bool) -> str:
    """The idle time a gpu_idle finding leaves to the jitter findings whose outliers hold it, in the unit of
    the finding's own cost (per inference beside a per-inference cost, else over the steady state)."""
    ms, n = _num(given["shared_ms"]), _num(given.get("instances"))
    amount = f"{fmt_ms(ms / n)} per inference" if per_inference and n else fmt_ms(ms)
    return f"not counting {amount} of idle time in the outliers of {given['shared_with']}"


def where(f: dict[str, Any]) -> str:
    """The variant or range a finding is about ('' for the whole run)."""
    return str(f.get("variant") or f.get("range") or "")


def _cause_key(f: dict[str, Any]) -> tuple:
    """Findings with equal keys are one problem: the same rule, severity and advice once names are removed."""
    rec = str(f.get("recommendation") or "")
    name = where(f)
    if name:
        rec = rec.replace(name, "{}")
    rec = re.sub(r"\d+(\.\d+)?", "#", rec)
    return (str(f.get("rule") or "?"), str(f.get("severity") or "info"), rec)


def merge_findings(findings: Iterable[Any]) -> list[dict[str, Any]]:
    """Findings grouped by rule and cause, most important first.

    Each group is ``{"rule", "severity", "title", "recommendation", "applies_to", "members", "impact",
    "gate"}``: ``members`` are the original finding dicts (most costly first), ``applies_to`` the
    variants or ranges they name, ``impact`` the largest member's.
    """
    groups: dict[tuple, list[dict]] = {}
    first: dict[tuple, int] = {}
    for i, f in enumerate(findings or []):
        d = as_dict(f)
        if d is not None:
            groups.setdefault(_cause_key(d), []).append(d)
            first.setdefault(_cause_key(d), i)
    out = []
    for key, members in groups.items():
        rule, sev, _ = key
        members = sorted(members, key=lambda m: (-(impact(m)["ms"] or 0.0), -(impact(m)["share"] or 0.0),
                                                 -(impact(m)["cov"] or 0.0), where(m)))
        names = list(dict.fromkeys(where(m) for m in members if where(m)))
        lead = members[0]
        out.append({
            "rule": rule, "severity": sev if sev in SEVERITY_RANK else "info",
            "title": str(lead.get("title") or rule),
            "recommendation": str(lead.get("recommendation") or ""),
            "applies_to": names, "members": members, "impact": impact(lead),
            "gate": rule == "precision_regression" and sev != "info", "order": first[key],
        })
    out.sort(key=lambda g: (not g["gate"], SEVERITY_RANK.get(g["severity"], 9), -(g["impact"]["ms"] or 0.0),
                            -(g["impact"]["share"] or 0.0), -len(g["members"]), g["rule"]))
    return out


def many(g: dict[str, Any]) -> str:
    """How a merged group's lead finding stands among the others: the worst of them, or one of them (info)."""
    return f"{'one' if g['severity'] == 'info' else 'the worst'} of {len(g['members'])}"


def _item(g: dict[str, Any]) -> dict[str, Any]:
    n = len(g["applies_to"])
    title = g["title"]
    if len({m.get("title") for m in g["members"]}) > 1:
        title += f" ({many(g)})"
    return {"rule": g["rule"], "severity": g["severity"], "title": title, "impact": g["impact"]["text"],
            "applies_to": g["applies_to"], "recommendation": g["recommendation"],
            "more": f"and {n - 1} more" if n > 1 else ""}


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def _items(groups: Sequence[dict], top: int = TOP_ITEMS) -> list[dict[str, Any]]:
    """The groups worth the verdict: anything above info first, info only to fill up."""
    serious = [g for g in groups if g["severity"] != "info"]
    rest = [g for g in groups if g["severity"] == "info"]
    return [_item(g) for g in (serious + rest)[:top]]


def _findings_status(groups: Sequence[dict]) -> tuple[str, str]:
    worst = min((SEVERITY_RANK.get(g["severity"], 9) for g in groups), default=9)
    if worst <= 1:
        return "ISSUES FOUND", "bad" if worst == 0 else "warn"
    return "PASS", "ok"


# ----------------------------------------------------------------------------- per report kind

def sweep_verdict(summary: SweepDocument) -> dict[str, Any]:
    """PASS, GATE FAILED (an accuracy breach, exit 1), FAILED (nothing measured, or variants that failed)
    or INCONCLUSIVE (interrupted)."""
    summary = summary if isinstance(summary, dict) else {}
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    variants = [v for v in summary.get("variants") or [] if isinstance(v, dict)]
    groups = merge_findings(summary.get("findings") or [])
    status_of = [str(v.get("status") or "").lower() for v in variants]
    ok = [v for v, s in zip(variants, status_of) if s == "ok"]
    failed = [v for v, s in zip(variants, status_of) if s == "failed"]
    skipped = [v for v, s in zip(variants, status_of) if s == "skipped"]
    gate = [g for g in groups if g["gate"]]
    ungated = ungated_breaches(summary)
    lines: list[str] = []
    if not ok:
        status, cls = "FAILED", "bad"
        if variants and len(skipped) == len(variants):
            reason = next((str(v.get("error") or v.get("reason")) for v in skipped if v.get("error") or v.get("reason")), "")
            head = f"Nothing was measured: all {_plural(len(variants), 'variant')} were skipped"
            if reason:
                lines.append(f"first reason: {reason}")
        elif variants:
            head = (f"Nothing was measured: {_plural(len(failed), 'variant')} failed"
                    + (f", {len(skipped)} skipped" if skipped else ""))
        else:
            head = "Nothing was measured: the sweep holds no variants"
    elif gate:
        status, cls = "GATE FAILED", "bad"
        keys = list(dict.fromkeys(k for g in gate for k in g["applies_to"]))
        head = (f"Accuracy gate failed: {_plural(len(keys), 'variant')} outside the FP32 thresholds "
                f"({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''})")
    elif failed:
        status, cls = "FAILED", "bad"
        head = f"{len(failed)} of {_plural(len(variants), 'variant')} failed to build or run"
    elif str(run.get("status") or "").lower() == "interrupted":
        status, cls = "INCONCLUSIVE", "warn"
        head = f"Interrupted: {len(ok)} of {_plural(len(variants), 'variant')} measured"
    else:
        status = "PASS"  # the gate passed; the findings below still say what to look at
        cls = "ok" if _findings_status(groups)[0] == "PASS" else "warn"
        if ungated:  # the table below shows these as BREACH: the headline says why they pass anyway
            cls = "warn"
            n = _plural(len(ungated), "ungated breach", "ungated breaches")
            head = (f"Gated variants within their accuracy thresholds; {n}: "
                    + ", ".join(f"{u['key']} ({u['reason']})" for u in ungated[:4])
                    + (f" and {len(ungated) - 4} more" if len(ungated) > 4 else ""))
        else:
            head = f"All {_plural(len(ok), 'measured variant')} within their accuracy thresholds"
    if failed:
        lines.append("failed: " + ", ".join(f"{v.get('key', '?')} ({str(v.get('error') or '')[:80]})" for v in failed[:4]))
    if ungated and status != "PASS":  # a PASS headline names them
        lines.append("outside the accuracy thresholds but not gated: "
                     + ", ".join(f"{u['key']} ({u['reason']})" for u in ungated))
    if ok:
        fast = fastest_variant(summary)
        if fast:
            lines.append(f"fastest (median latency): {fast['key']} {fmt_ms(fast['median_ms'])}"
                         + (f"; faster but outside the accuracy thresholds: {', '.join(fast['breaching_faster'])}"
                            if fast.get("breaching_faster") else ""))
    if run.get("random_calibration"):
        lines.append("int8 was calibrated on random inputs: its accuracy numbers mean nothing (pass --calib)")
    return {"status": status, "cls": cls, "headline": head, "lines": lines, "items": _items(groups)}


def breaches(v: dict[str, Any]) -> bool:
    """Whether any output of a variant is outside its accuracy thresholds (the variants table's BREACH)."""
    acc = v.get("accuracy") if isinstance(v.get("accuracy"), dict) else {}
    return any(isinstance(m, dict) and m.get("passed") is False for m in acc.values())


def ungated_breaches(summary: dict[str, Any]) -> list[dict[str, str]]:
    """Measured variants that breach their accuracy thresholds but do not fail the gate, with why:
    ``[{"key", "reason"}]`` ("random calibration" where the int8 calibration ran on random inputs)."""
    variants = [v for v in summary.get("variants") or [] if isinstance(v, dict)
                and str(v.get("status") or "ok").lower() == "ok"]
    found = [as_dict(f) or {} for f in summary.get("findings") or []]
    gated = {str(f.get("variant")) for f in found if f.get("rule") == "precision_regression"
             and f.get("severity") != "info"}
    random_cal = {str(f.get("variant")) for f in found if f.get("rule") == "precision_regression"
                  and (f.get("evidence") or {}).get("calibration_meaningless")}
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    out = []
    for v in variants:
        key = str(v.get("key"))
        if not breaches(v) or key in gated:
            continue
        int8_random = str(v.get("precision") or "").lower() == "int8" and run.get("random_calibration")
        out.append({"key": key, "reason": "random calibration" if key in random_cal or int8_random
                    else "not gated"})
    return out


def fastest_variant(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest variant by median latency among those within their accuracy thresholds, computed once:
    the ``fastest_variant`` finding's choice (single-stream variants; multi-stream latency includes waiting
    for the other streams) when the run has it and it does not breach, else the same rule here.
    ``{"key", "median_ms", "breaching_faster"}`` (the faster variants left out because they breach, fastest
    first) or None; when every variant breaches, the fastest of them with ``"breaches": True``."""
    variants = [v for v in summary.get("variants") or [] if isinstance(v, dict)]
    measured = [v for v in variants if str(v.get("status") or "ok").lower() == "ok"]
    med = {str(v.get("key")): _num((v.get("latency_ms") or {}).get("median")) if isinstance(v.get("latency_ms"), dict)
           else None for v in measured}
    med = {k: m for k, m in med.items() if m is not None}
    breaching = {str(v.get("key")) for v in measured if breaches(v)}
    single = [str(v.get("key")) for v in variants if str(v.get("key")) in med and (v.get("streams") or 1) == 1]
    pool = single or list(med)
    if not pool:
        return None
    within = [k for k in pool if k not in breaching]
    for f in summary.get("findings") or []:
        d = as_dict(f) or {}
        key = (d.get("evidence") or {}).get("lowest_latency_variant") if d.get("rule") == "fastest_variant" else None
        if key in med and key not in breaching:
            return {"key": key, "median_ms": med[key], "breaching_faster": []}
    if not within:
        key = min(pool, key=lambda k: med[k])
        return {"key": key, "median_ms": med[key], "breaching_faster": [], "breaches": True}
    key = min(within, key=lambda k: med[k])
    faster = sorted((k for k in pool if k in breaching and med[k] < med[key]), key=lambda k: med[k])
    return {"key": key, "median_ms": med[key], "breaching_faster": faster}


def analysis_verdict(result: AnalysisDocument) -> dict[str, Any]:
    """INCOMPLETE CAPTURE (the export lacks data nsys traced: ``integrity.complete`` false), ISSUES FOUND (a high
    or medium finding), PASS, or INCONCLUSIVE (nothing to judge: no GPU activity)."""
    result = result if isinstance(result, dict) else {}
    integ = result.get("integrity") if isinstance(result.get("integrity"), dict) else {}
    if integ.get("complete") is False:
        return incomplete_verdict(result, integ)
    cap = result.get("capture") if isinstance(result.get("capture"), dict) else {}
    groups = merge_findings(result.get("findings") or [])
    counts = cap.get("counts") if isinstance(cap.get("counts"), dict) else {}
    gpu = sum(int(counts.get(k) or 0) for k in ("kernels", "memcpy", "memset", "graphs"))
    status, cls = _findings_status(groups)
    lines = []
    unrecorded = cap.get("kernel_launches_without_records")
    if status == "PASS" and counts and not gpu:
        status, cls = "INCONCLUSIVE", "warn"
        head = "Nothing to judge: the capture holds no GPU activity"
    elif status == "PASS" and unrecorded:
        status, cls = "INCONCLUSIVE", "warn"
        minor = [g for g in groups if g["severity"] == "low"]
        found = f"only {_plural(len(minor), 'minor finding')} (below)" if minor else "no problem"
        head = (f"GPU time not judged: the export holds {fmt_num(unrecorded)} kernel launch calls but no kernel "
                f"record; the rules that could run found {found}")
    elif status == "PASS":
        minor = [g for g in groups if g["severity"] == "low"]
        head = (f"No problem worth acting on ({_plural(len(minor), 'minor finding')} below)" if minor
                else "No problem found: every capture rule passed")
    else:
        serious = [g for g in groups if g["severity"] in ("high", "medium")]
        minor = len(groups) - len(serious)
        head = f"{_plural(len(serious), 'problem')} found" + (f" (and {_plural(minor, 'minor finding')})" if minor else "")
        costly = [g for g in serious if g["impact"]["text"]]
        if costly:
            head += f"; the costliest: {costly[0]['rule']}, {costly[0]['impact']['text']}"
    inf = result.get("inference") if isinstance(result.get("inference"), dict) else {}
    if inf.get("other_loops"):  # a sweep's variants, each loop in a range of its own: one was judged
        head += (f" (judged: the loop {inf.get('series')}; not judged: {', '.join(inf['other_loops'])}, "
                 "--unit NAME judges one)")
    ranges = [r for r in result.get("ranges") or [] if isinstance(r, dict)]
    if ranges and not isinstance(result.get("inference"), dict):  # the inference, where known, says it better
        r = ranges[0]
        w = r.get("wall_ms") if isinstance(r.get("wall_ms"), dict) else {}
        name = r.get("name") if r.get("name") is not None else "(whole capture)"
        lines.append(f"busiest series: {name}: {fmt_num(r.get('count'))} instances, median "
                     f"{fmt_ms(w.get('median'))}, p99 {fmt_ms(w.get('p99'))}")
    return {"status": status, "cls": cls, "headline": head, "lines": lines, "items": _items(groups)}


def incomplete_verdict(result: dict[str, Any], integ: dict[str, Any]) -> dict[str, Any]:
    """The verdict of a capture that lacks data: what was lost and how much first, then what still holds (host
    time per inference), the rules that did not run, and the findings of those that did."""
    parts = integ.get("parts") if isinstance(integ.get("parts"), dict) else {}
    problems = [p for p in integ.get("problems") or [] if isinstance(p, dict)]
    head = str(problems[0].get("what") or problems[0].get("kind")) if problems else "the export lacks data"
    if len(problems) > 1:
        head += f" (and {_plural(len(problems) - 1, 'more sign')} of missing data)"
    lines = [f"also: {p.get('what') or p.get('kind')}" for p in problems[1:4]]
    inf = result.get("inference") if isinstance(result.get("inference"), dict) else {}
    host = inf.get("host_ms") if isinstance(inf.get("host_ms"), dict) else {}
    trusted = [t for t in integ.get("trusted") or [] if t in parts]
    if "host_range_timing" in trusted and inf.get("source") in ("tensorrt", "nvtx") and is_number(host.get("median")):
        lines.append(f"still holds: host time per inference of {inf.get('series')}: median {fmt_ms(host['median'])}, "
                     f"p99 {fmt_ms(host.get('p99'))} over {fmt_num(inf.get('count'))} instances")
    elif trusted:
        lines.append("still holds: " + "; ".join(str(parts[t]) for t in trusted))
    untrusted = [str(parts[t]) for t in integ.get("untrusted") or [] if t in parts]
    if untrusted:
        lines.append("does not hold: " + "; ".join(untrusted))
    not_run = [str(r) for r in integ.get("rules_not_run") or []]
    if not_run:
        lines.append(f"not run (they need the lost data): {', '.join(not_run)}")
    groups = merge_findings(result.get("findings") or [])
    return {"status": "INCOMPLETE CAPTURE", "cls": "bad", "headline": head, "lines": lines, "items": _items(groups)}


def layers_verdict(data: ImportDocument) -> dict[str, Any]:
    """ISSUES FOUND or PASS for an import of per-layer exports (there is no gate)."""
    data = data if isinstance(data, dict) else {}
    groups = merge_findings(data.get("findings") or [])
    status, cls = _findings_status(groups)
    layers = [x for x in data.get("layers") or [] if isinstance(x, dict)]
    if not layers and not data.get("variants"):
        status, cls, head = "INCONCLUSIVE", "warn", "Nothing to judge: no layers and no timings were imported"
    elif status == "PASS":
        head = "No layer problem found"
    else:
        head = f"{_plural(sum(1 for g in groups if g['severity'] in ('high', 'medium')), 'problem')} found in the layers"
    return {"status": status, "cls": cls, "headline": head, "lines": [], "items": _items(groups)}


def compare_verdict(data: ComparisonDocument, summary: dict[str, Any]) -> dict[str, Any]:
    """The compare verdict (``profiler.report.compare.verdict_summary``) as a strip: REGRESSION,
    GATE FAILED (the run's gate says so), INCONCLUSIVE, IMPROVEMENT (two captures whose inference got faster)
    or PASS."""
    gate = data.get("gate_failed")
    if gate is True:
        status = "GATE FAILED"
    elif summary.get("regressions") or summary.get("accuracy_regressions"):
        status = "REGRESSION"
    elif summary.get("cls") == "warn":
        status = "INCONCLUSIVE"
    elif data.get("captures") and data.get("verdict") == "improvement":
        status = "IMPROVEMENT"  # two captures decided on their inference: say what the verdict is
    else:
        status = "PASS"
    groups = merge_findings(data.get("findings_appeared") or [])
    items = _items(groups)
    for it in items:
        it["title"] = "new: " + it["title"]
    head = str(summary.get("headline") or "")
    if head.lower().startswith(status.lower() + ":"):
        head = head[len(status) + 1:].strip()
    return {"status": status, "cls": summary.get("cls") or "ok", "headline": head,
            "lines": list(summary.get("lines") or []), "items": items}


# ----------------------------------------------------------------------------- terminal

TERMINAL_FALLBACK_COLUMNS = 160
"""The width terminal lines are wrapped to when the output is no terminal (a pipe, a file) and COLUMNS is unset."""
TERMINAL_MIN_COLUMNS = 40
"""Terminal lines are never wrapped narrower than this (a tiny window would split every word onto a line)."""


def terminal_width() -> int:
    """The terminal's width in columns (COLUMNS, else the terminal's, else ``TERMINAL_FALLBACK_COLUMNS``)."""
    import shutil

    cols = shutil.get_terminal_size((TERMINAL_FALLBACK_COLUMNS, 24)).columns
    return max(int(cols), TERMINAL_MIN_COLUMNS)


def terminal_lines(v: dict[str, Any], *, top: int = TOP_ITEMS, width: int | None = None) -> list[str]:
    """The verdict as the first lines of a terminal summary: status and headline, then one entry per
    top finding naming what it applies to, what it costs and what to do; each wrapped (never cut) to
    ``width`` columns (the terminal's by default), continuation lines indented under their entry."""
    width = terminal_width() if width is None else max(int(width), TERMINAL_MIN_COLUMNS)
    out = _wrap(f"{v['status']}: {v['headline']}", width, "  ")
    for line in v.get("lines") or []:
        out += _wrap(f"  {line}", width, "    ")
    for i, it in enumerate((v.get("items") or [])[:top], 1):
        names = it["applies_to"]
        on = f" [{', '.join(names[:4])}{f' +{len(names) - 4} more' if len(names) > 4 else ''}]" if names else ""
        cost = f" ({it['impact']})" if it["impact"] else ""
        out += _wrap(f"  {i}. {it['severity'].upper()} {it['rule']}{on}: {it['title']}{cost}", width, "     ")
        if it["recommendation"]:
            out += _wrap(f"     -> {it['recommendation']}", width, "        ")
    return out


def _wrap(text: str, width: int, indent: str) -> list[str]:
    """``text`` wrapped at spaces to ``width`` columns, later lines under ``indent``; a word longer than a
    line (a kernel name, a path) stays whole on a line of its own rather than being split."""
    import textwrap

    lead = text[:len(text) - len(text.lstrip(" "))]
    return textwrap.wrap(text, width, initial_indent="", subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True) or [lead]
