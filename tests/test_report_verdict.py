"""The verdict strip and merged findings: what every report and terminal summary says first.

Plain data (no browser): the status for each kind of run, findings merged by rule and cause with the
variants they apply to, ranking by what they cost, the terminal lines, and the sweep page's pieces that
used to mislead (one bar labelled '?', empty memory columns, 'fastest' disagreeing with itself).
"""

from __future__ import annotations

import json
import re

import pytest

from profiler.report import write_report
from profiler.report.analysis import build_analysis_page
from profiler.report.common import merged_finding_views
from profiler.report.sweep import build_sweep_page
from profiler.report.verdict import (
    analysis_verdict, fastest_variant, impact, merge_findings, sweep_verdict, terminal_lines,
)
from tests.report_examples import analysis_example, figures_of, sweep_example


def _breach(key: str, rel: float) -> dict:
    return {"rule": "precision_regression", "severity": "medium", "variant": key,
            "title": "fp16 output 'probs' differs from fp32: rel_l2 0.00036 > 1e-09",
            "evidence": {"output": "probs", "rel_l2": rel, "cosine": 1.0},
            "threshold": {"rel_l2_max": 1e-9},
            "recommendation": "Keep the layers that lose precision in float32."}


def _jitter(key: str, cov: float) -> dict:
    return {"rule": "jitter", "severity": "medium", "variant": key,
            "title": f"{key} is unstable: compute time varies by {cov:.1f}% (CoV)",
            "evidence": {"compute_cov_pct": cov, "median_compute_ms": 0.7}, "threshold": {"cov_pct": 5},
            "recommendation": "Lock clocks, run longer (--duration)."}


def _variant(key: str, median: float, streams: int = 1, status: str = "ok", **extra) -> dict:
    return {"key": key, "status": status, "precision": key.split("-")[0], "streams": streams,
            "latency_ms": {"median": median, "p99": median * 2} if status == "ok" else None, **extra}


def test_one_card_for_one_problem_across_variants_and_one_for_jitter():
    findings = [_breach(f"fp16-s{i}", 3e-4 + i * 1e-5) for i in range(4)] + \
        [_jitter(f"v{i}", 100.0 + i) for i in range(6)] + \
        [{"rule": "fastest_variant", "severity": "info", "variant": "fp32-s1", "title": "Fastest: fp32-s1",
          "recommendation": ""}]
    groups = merge_findings(findings)
    assert [g["rule"] for g in groups] == ["precision_regression", "jitter", "fastest_variant"]  # gate first
    assert groups[0]["applies_to"] == [f"fp16-s{i}" for i in range(4)]
    assert len(groups[0]["members"]) == 4 and groups[0]["gate"]
    assert sorted(groups[1]["applies_to"]) == [f"v{i}" for i in range(6)]
    assert groups[1]["members"][0]["variant"] == "v5"  # the worst (highest CoV) leads
    views = merged_finding_views(findings)
    jitter = views[1]
    # what differs becomes a table, a row per variant; what they share is said once
    assert jitter["evidence_table"]["columns"] == ["applies to", "compute cov pct"]
    assert len(jitter["evidence_table"]["rows"]) == 6
    assert ("median compute ms", "0.7 ms") in jitter["evidence"]
    assert jitter["title"].endswith("(the worst of 6)")


def test_different_causes_of_one_rule_stay_apart():
    a = {**_jitter("a", 50.0), "recommendation": "Lock clocks."}
    b = {**_jitter("b", 60.0), "recommendation": "Move the logging thread off the core."}
    assert len(merge_findings([a, b])) == 2


def test_impact_reads_the_cost_and_its_meaning_from_the_evidence():
    assert impact({"evidence": {"idle_ms": 53.98, "idle_fraction": 0.28}})["text"] == \
        "53.98 ms GPU idle in total, 28% of the time"
    assert impact({"evidence": {"graph_saving_pct": 40.0}})["share"] == pytest.approx(0.4)
    given = impact({"impact": {"ms_per_inference": 0.25, "share": 0.1}, "evidence": {"idle_ms": 99}})
    assert given["ms"] == 0.25 and given["text"] == "0.25 ms per inference, 10% of the time"


def test_sweep_status_for_every_kind_of_outcome():
    skipped = {"variants": [_variant("fp32-s1-graph", 0, status="skipped", error="no CUDA EP"),
                            _variant("fp16-s1-graph", 0, status="skipped", error="no CUDA EP")], "findings": []}
    v = sweep_verdict(skipped)
    assert (v["status"], v["cls"]) == ("FAILED", "bad")
    assert v["headline"] == "Nothing was measured: all 2 variants were skipped"
    assert v["lines"] == ["first reason: no CUDA EP"]

    gate = {"variants": [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.6), _variant("fp16-s2", 0.7, 2)],
            "findings": [_breach("fp16-s1", 1e-3), _breach("fp16-s2", 1e-3)]}
    v = sweep_verdict(gate)
    assert v["status"] == "GATE FAILED" and "2 variants outside the FP32 thresholds (fp16-s1, fp16-s2)" in v["headline"]
    assert v["items"][0]["applies_to"] == ["fp16-s1", "fp16-s2"]

    random_int8 = {"run": {"random_calibration": True},
                   "variants": [_variant("fp32-s1", 1.0), _variant("int8-s1", 0.5)],
                   "findings": [{**_breach("int8-s1", 0.5), "severity": "info"}]}
    v = sweep_verdict(random_int8)  # a breach on random calibration means nothing: it does not fail the gate
    assert v["status"] == "PASS" and any("random inputs" in line for line in v["lines"])

    failed = {"variants": [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0, status="failed", error="GridSample")],
              "findings": []}
    v = sweep_verdict(failed)
    assert v["status"] == "FAILED" and v["headline"] == "1 of 2 variants failed to build or run"
    assert "fp16-s1 (GridSample)" in v["lines"][0]

    stopped = {"run": {"status": "interrupted"}, "variants": [_variant("fp32-s1", 1.0)], "findings": []}
    assert sweep_verdict(stopped)["status"] == "INCONCLUSIVE"
    ok = {"variants": [_variant("fp32-s1", 1.0)], "findings": [_jitter("fp32-s1", 30.0)]}
    assert (sweep_verdict(ok)["status"], sweep_verdict(ok)["cls"]) == ("PASS", "warn")


def test_fastest_is_computed_once_single_stream_by_median_and_the_page_agrees():
    variants = [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.70), _variant("fp16-s2", 0.66, streams=2)]
    assert fastest_variant({"variants": variants}) == {"key": "fp16-s1", "median_ms": 0.70, "breaching_faster": []}
    # the rule's choice wins where the run has one
    rule = {"rule": "fastest_variant", "severity": "info", "evidence": {"lowest_latency_variant": "fp32-s1"}}
    assert fastest_variant({"variants": variants, "findings": [rule]})["key"] == "fp32-s1"
    page = build_sweep_page({"variants": variants, "findings": []})
    card = next(c for c in page["cards"] if c["label"].startswith("fastest"))
    assert card["sub"] == "fp16-s1" and "fp16-s1" in page["verdict"]["lines"][-1]


def test_terminal_lines_put_the_verdict_first_and_name_each_finding_s_variants():
    gate = {"variants": [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.6), _variant("fp16-s2", 0.7)],
            "findings": [_breach("fp16-s1", 1e-3), _breach("fp16-s2", 1e-3), _jitter("fp32-s1", 40.0)]}
    lines = terminal_lines(sweep_verdict(gate), width=160)
    assert lines[0].startswith("GATE FAILED: Accuracy gate failed: 2 variants")
    assert lines[2].startswith("  1. MEDIUM precision_regression [fp16-s1, fp16-s2]: ")
    assert sum("precision_regression" in line for line in lines) == 1  # said once, not per variant
    assert "  2. MEDIUM jitter [fp32-s1]: fp32-s1 is unstable" in "\n".join(lines)
    assert all(len(line) <= 160 for line in lines)


def test_sweep_layers_chart_has_one_bar_per_variant_as_shares_even_when_records_carry_variant_none():
    variants = [_variant("fp32-s1", 1.0), _variant("fp32-s1-graph", 0.5, cuda_graph=True)]
    summary = {"variants": [{**v, "layers": [{"name": "conv", "type": "Conv", "time_avg_ms": 0.6, "variant": None},
                                             {"name": "relu", "type": "Relu", "time_avg_ms": 0.2, "variant": None}]}
                            for v in variants], "findings": []}
    page = build_sweep_page(summary)
    bars = page["figures"]["fig-layers"]["data"]
    assert [b["name"] for b in bars] == ["Conv", "Relu"]
    assert bars[0]["x"] == ["fp32-s1", "fp32-s1-graph"]
    assert bars[0]["y"] == [pytest.approx(75.0), pytest.approx(75.0)] and bars[1]["y"] == [pytest.approx(25.0)] * 2
    sec = next(s for s in page["sections"] if s["id"] == "layers")
    assert "eager" in sec["intro"]
    sums = next(b for b in sec["blocks"] if b["type"] == "table")
    graph_row = next(r for r in sums["rows"] if r[0]["text"] == "fp32-s1-graph")
    assert graph_row[1]["text"] == "0.8" and graph_row[2]["text"] == "0.5" and "eager" in graph_row[3]["text"]


def test_sweep_report_data_keeps_the_sweep_s_key_over_the_profile_s_variant_none():
    from profiler.sweep import Sweep, SweepConfig

    s = Sweep(SweepConfig())
    s.layers = {"fp16-s1": [{"name": "conv", "variant": None, "time_avg_ms": 1.0}]}
    _, layers = s.report_data({"variants": []})
    assert layers == [{"name": "conv", "variant": "fp16-s1", "time_avg_ms": 1.0}]


def test_memory_table_drops_empty_columns_and_flattens_device_memory(tmp_path):
    mem = {"engine_size_bytes": 2048, "activation_bytes_per_context": None, "build_memory_bytes": None,
           "rss_before_build_bytes": None, "device_memory_build": None,
           "device_memory_run": {"free_bytes": 1 << 30, "used_bytes": 1 << 20, "total_bytes": (1 << 30) + (1 << 20)}}
    summary = {"variants": [_variant("fp32-s1", 1.0, memory=mem)], "findings": []}
    page = build_sweep_page(summary)
    sec = next(s for s in page["sections"] if s["id"] == "memory")
    cols = sec["blocks"][0]["columns"]
    assert cols == ["variant", "engine size", "device memory run free", "device memory run used",
                    "device memory run total"]
    html = write_report(summary, tmp_path / "r.html", cdn=True).read_text()
    body = html[html.index('id="memory"'):html.index("</section>", html.index('id="memory"'))]
    assert "{" not in body and "1 GiB" in body


def test_every_page_kind_opens_with_the_verdict_and_keeps_metadata_for_the_end(tmp_path):
    from tests.report_examples import compare_example, layers_example

    for data in (analysis_example(), sweep_example(), layers_example(), compare_example()):
        html = write_report(data, tmp_path / "r.html", cdn=True).read_text()
        main = html[html.index("<main>"):]
        assert re.match(r'<main>\s*<section class="verdict (ok|warn|bad)" id="verdict">', main), main[:200]
        assert html.count('id="verdict"') == 1
        if 'id="metadata"' in html:
            assert html.index('id="metadata"') > html.rindex('<section class="sec"')
            assert '<details class="metadata" id="metadata">' in html  # collapsed
    page = build_analysis_page(analysis_example())
    assert page["verdict"]["status"] == "ISSUES FOUND"
    assert not any(s["id"] == "summary" and any(b["type"] == "kv" for b in s["blocks"]) for s in page["sections"])
    assert analysis_verdict({"capture": {"counts": {"kernels": 0}}, "ranges": [], "findings": []})["status"] == \
        "INCONCLUSIVE"


def test_banners_are_said_once():
    warning = "INT8 CALIBRATION USED RANDOM INPUTS (no --calib given): the int8 variant's accuracy numbers mean nothing"
    page = build_sweep_page({"run": {"random_calibration": True, "warnings": [warning, warning, "other"]},
                             "variants": [_variant("int8-s1", 1.0)], "findings": []})
    texts = [b["text"] for b in page["banners"]]
    assert sum("random inputs" in t.lower() for t in texts) == 1 and texts.count("other") == 1


def test_latency_axis_goes_log_only_when_outliers_would_crush_the_boxes():
    calm = [_variant("a", 1.0, samples_ms=[1.0 + 0.01 * (i % 7) for i in range(200)])]
    wild = [_variant("a", 1.0, samples_ms=[1.0 + 0.01 * (i % 7) for i in range(200)] + [40.0])]
    assert build_sweep_page({"variants": calm})["figures"]["fig-latency"]["layout"]["yaxis"].get("type") is None
    fig = build_sweep_page({"variants": wild})["figures"]["fig-latency"]
    assert fig["layout"]["yaxis"]["type"] == "log"


def test_a_one_point_accuracy_chart_has_no_negative_latency_axis_and_names_the_variant():
    v = _variant("fp16-s1", 0.7, accuracy={"probs": {"rel_l2": 3e-4, "passed": False}})
    fig = build_sweep_page({"variants": [v]})["figures"]["fig-accuracy"]
    assert fig["layout"]["xaxis"]["rangemode"] == "tozero"
    assert [t["name"] for t in fig["data"]] == ["fp16-s1"] and fig["data"][0]["marker"]["symbol"] == "x"


def test_variant_colours_are_the_same_in_every_chart(tmp_path):
    s = sweep_example()
    figs = figures_of(write_report(s, tmp_path / "r.html", cdn=True).read_text())
    box = {t["name"]: t["marker"]["color"] for t in figs["fig-latency"]["data"] if t["type"] == "box"}
    acc = {t["name"]: t["marker"]["color"] for t in figs["fig-accuracy"]["data"]}
    assert acc and all(box[k] == c for k, c in acc.items())
    assert len(set(box.values())) == len(box)  # no two variants share a colour
    json.dumps(figs)


@pytest.mark.parametrize("given, said", [
    ({"ms_per_instance": 2.0, "instances": 100, "shared_ms": 3.0, "shared_with": "jitter [a] and jitter [b]"},
     "2 ms per inference, not counting 0.03 ms per inference of idle time in the outliers of jitter [a] and jitter [b]"),
    ({"ms_total": 200.0, "shared_ms": 3.0, "shared_with": "jitter [a]"},
     "200 ms over the steady state, not counting 3 ms of idle time in the outliers of jitter [a]"),
])
def test_idle_left_to_jitter_is_said_in_the_unit_of_the_cost_beside_it(given, said):
    assert impact({"rule": "gpu_idle", "impact": given})["text"] == said


# -- one verdict per page, consistent with the tables under it -----------------------------------------------
def _breaching(key: str, median: float, **extra) -> dict:
    """A measured variant whose output is outside its thresholds (the variants table's BREACH)."""
    return _variant(key, median, accuracy={"probs": {"rel_l2": 0.05, "passed": False}}, **extra)


def test_an_ungated_breach_is_named_in_the_pass_headline():
    """int8 calibrated on random inputs breaches but does not gate: the headline says PASS for the gated
    variants and names the breach and why it does not gate, as the variants table shows it."""
    summary = {"run": {"random_calibration": True},
               "variants": [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.7,
                                                               accuracy={"probs": {"passed": True}}),
                            _breaching("int8-s1", 0.5)],
               "findings": [{**_breach("int8-s1", 0.05), "severity": "info",
                             "evidence": {"calibration_meaningless": True}}]}
    v = sweep_verdict(summary)
    assert v["status"] == "PASS" and v["cls"] == "warn"
    assert v["headline"] == ("Gated variants within their accuracy thresholds; 1 ungated breach: "
                             "int8-s1 (random calibration)")
    assert "within their accuracy thresholds" in v["headline"] and "All" not in v["headline"]
    # the tables under it say the same: the terminal's variants table and the page's accuracy column
    from profiler.sweep.outputs import format_table

    row = next(line for line in format_table(summary).splitlines() if line.startswith("int8-s1"))
    assert row.endswith("BREACH (not gated: random calibration)")
    sec = next(s for s in build_sweep_page(summary)["sections"] if s["id"] == "variants")
    acc = {r[0]["text"] if isinstance(r[0], dict) else r[0]: r[3] for r in sec["blocks"][0]["rows"]}
    assert acc["int8-s1"]["sub"] == "outside threshold, not gated: random calibration"
    clean = {"variants": [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.7)], "findings": []}
    assert sweep_verdict(clean)["headline"] == "All 2 measured variants within their accuracy thresholds"


def test_fastest_is_picked_among_variants_within_their_thresholds():
    variants = [_variant("fp32-s1", 1.0), _variant("fp16-s1", 0.7), _breaching("int8-s1", 0.5),
                _breaching("int8-s1-graph", 0.45)]
    rule = {"rule": "fastest_variant", "severity": "info", "evidence": {"lowest_latency_variant": "int8-s1-graph"}}
    fast = fastest_variant({"variants": variants, "findings": [rule]})  # the rule's pick breaches: not taken
    assert fast == {"key": "fp16-s1", "median_ms": 0.7, "breaching_faster": ["int8-s1-graph", "int8-s1"]}
    page = build_sweep_page({"variants": variants, "findings": [rule]})
    card = next(c for c in page["cards"] if c["label"].startswith("fastest"))
    assert card["label"] == "fastest within thresholds (median, 1 stream)" and card["sub"].startswith("fp16-s1")
    assert "int8-s1-graph" in card["sub"] and card["cls"] == "ok"
    assert any(line.startswith("fastest (median latency): fp16-s1") and "int8-s1-graph" in line
               for line in page["verdict"]["lines"])
    # every measured variant breaches (fp32 alone is no choice here): the card marks the breach
    only = fastest_variant({"variants": [_breaching("int8-s1", 0.5)]})
    assert only["key"] == "int8-s1" and only["breaches"]
    card = next(c for c in build_sweep_page({"variants": [_breaching("int8-s1", 0.5)]})["cards"]
                if c["label"].startswith("fastest"))
    assert card["sub"] == "int8-s1: BREACH" and card["cls"] == "bad"


def test_terminal_lines_wrap_to_the_width_and_lose_nothing():
    long_title = "Launch-bound: the GPU is busy 21.1% of the range while the host issues 21 launches " * 3
    v = {"status": "ISSUES FOUND", "headline": "1 problem found; the costliest: launch_overhead, 0.5549 ms",
         "lines": [], "items": [{"rule": "launch_overhead", "severity": "high", "title": long_title.strip(),
                                 "impact": "0.5549 ms per inference, 61.5% of the steady state",
                                 "applies_to": ["TensorRT:ExecutionContext::enqueue"],
                                 "recommendation": "Replay the enqueue as a CUDA graph (--useCudaGraph). " * 4}]}
    for width in (60, 100, 160):
        lines = terminal_lines(v, width=width)
        assert all(len(line) <= width for line in lines)
        words = " ".join(lines).split()
        assert "61.5%" in words and words.count("launches") == 3  # cut nowhere, mid-number least of all
        assert " ".join(words).count("--useCudaGraph).") == 4
        first = next(i for i, line in enumerate(lines) if line.startswith("  1. HIGH launch_overhead"))
        assert all(line.startswith("     ") for line in lines[first + 1:])  # continuations under their entry
        assert all(line.startswith("  ") for line in lines[1:first])  # the headline's too
    # a word longer than the line (a kernel name) stays whole rather than split
    v["items"][0]["title"] = "k" * 90
    assert any("k" * 90 in line for line in terminal_lines(v, width=60))


def test_analysis_cards_open_with_the_inference_count():
    doc = analysis_example()
    doc["inference"] = {"series": "infer", "source": "nvtx", "count": 1381, "steady_count": 1379,
                        "gpu_ms": {"median": 0.5}, "host_ms": {"median": 0.6}}
    doc["ranges"][0]["count"] = 35_880  # layer ranges nested in the inference outnumber it
    page = build_analysis_page(doc)
    assert page["cards"][0]["label"] == "inferences" and page["cards"][0]["value"] == "1,381"
    assert page["cards"][0]["sub"] == "1,379 in the steady state"
    assert not any(c["label"] == "instances" for c in page["cards"])
    ranges = next(c for c in page["cards"] if c["label"] == "ranges")
    assert ranges["sub"] == "35,883 range instances"  # 35,880 + the 3 preprocess instances


def test_compare_s_verdict_column_says_what_the_verdict_is_made_of():
    """An 'inconclusive' read under 'verdict (within the run)' as if the samples alone had been judged: the
    verdict is that of the samples and the run-to-run noise together."""
    from profiler.report.compare import build_compare_page
    from tests.report_examples import compare_example

    page = build_compare_page(compare_example())
    sec = next(s for s in page["sections"] if s["id"] == "by-variant")
    [tab] = [b for b in sec["blocks"] if b.get("type") == "table"]
    assert tab["columns"][:3] == ["variant", "verdict (samples and run-to-run noise)", "between runs"]


def test_the_findings_card_counts_problems_as_the_headline_does():
    """One rule firing on three ranges for one cause is one problem on the card, as in the headline; the card
    says how many rule results it merges."""
    from profiler.report.common import findings_cards

    def f(rule, severity, rng, title):
        return {"rule": rule, "scope": "capture", "severity": severity, "title": title, "range": rng,
                "recommendation": "capture a CUDA graph", "evidence": {}, "impact": {"ms_per_instance": 0.5}}

    findings = [f("launch_overhead", "medium", r, "Launch-bound: 14 launches per instance") for r in ("fp32/iter", "fp16/iter", "int8/iter")]
    findings.append(f("gpu_idle", "high", None, "GPU idle"))
    page = {"cards": []}
    findings_cards(page, findings)
    card = page["cards"][0]
    assert card["value"] == "2" == str(len(merge_findings(findings)))
    assert card["sub"] == "1 high, 1 medium (4 findings over ranges or variants)"
    page = {"cards": []}
    findings_cards(page, findings[-1:])
    assert page["cards"][0]["value"] == "1" and page["cards"][0]["sub"] == "1 high"
