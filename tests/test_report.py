"""HTML reports: the plain page data (numbers), escaping, embedding and size; rendering without a browser.

The examples live in tests/report_examples.py; the browser test (real headless Chromium) is
tests/test_report_browser.py.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import InputError
from profiler.report import (
    report_kind, write_analysis_report, write_compare_report, write_layers_report, write_report,
    write_sweep_report,
)
from profiler.report.analysis import (
    box_stats, build_analysis_page, busy_vs_host, gap_histograms, kernel_rows, timeline,
)
from profiler.report.compare import (
    build_compare_page, delta_rows, environment_rows, overlaid_histogram, trend_series, verdict_summary,
)
from profiler.report.layers import build_layers_page, layer_sum_vs_latency, precision_mix
from profiler.report.render import plotly_js, plotly_cdn_url, render_html
from profiler.report.sweep import build_sweep_page
from profiler.report.variants import (
    accuracy_vs_speed, checklist_step, latency_by_workspace, layer_time_by_type, throughput_by_streams,
)
from tests.report_examples import (
    EVIL, EVIL_ESCAPED, ROOT, analysis_example, chart_ids, compare_example, evil_everywhere, figures_of,
    layers_example, sweep_example,
)

# ----------------------------------------------------------------------------- analysis data

def test_busy_vs_host_bars_equal_the_range_medians():
    result = analysis_example()
    page = build_analysis_page(result)
    fig = page["figures"]["fig-busy"]
    wall, busy = fig["data"][0], fig["data"][1]
    assert wall["y"] == [result["ranges"][0]["wall_ms"]["median"], 0.2]
    assert busy["y"] == [pytest.approx(result["ranges"][0]["gpu_busy_ms"]["median"], rel=1e-5), 0.05]
    assert busy["text"] == ["25%", "20%"]
    bvh = busy_vs_host(result["ranges"])
    assert bvh["gpu_busy_fraction"] == [0.25, 0.2]


def test_timeline_marks_outliers_at_their_indices():
    r = analysis_example()["ranges"][0]
    tl = timeline(r)
    assert tl["index"] == list(range(200)) and tl["total"] == 200
    assert tl["outlier_index"] == [13, 150]
    assert tl["outlier_wall_ms"] == [9.5, 7.25]
    assert tl["outlier_cause"] == ["", "clock_nanosleep"]
    page = build_analysis_page(analysis_example())
    trace = next(t for t in page["figures"]["fig-instances-1"]["data"] if t["name"] == "outlier")
    assert trace["x"] == [13, 150] and trace["y"] == [9.5, 7.25]


def test_distribution_box_comes_from_quartiles_with_outlying_points():
    result = analysis_example()
    wall = result["ranges"][0]["instances"]["wall_ms"]
    data = build_analysis_page(result)["figures"]["fig-distribution"]["data"]
    box, points = data[0], data[1]
    q1, med, q3 = np.percentile(wall, [25, 50, 75])
    assert box["type"] == "box" and box["median"] == [pytest.approx(med, rel=1e-5)]
    assert (box["q1"][0], box["q3"][0]) == (pytest.approx(q1, rel=1e-5), pytest.approx(q3, rel=1e-5))
    assert points["type"] == "scatter" and points["y"] == [7.25, 9.5]  # the two stalls, beyond the fence
    assert box["upperfence"][0] < 7.25


def test_timeline_of_a_long_series_keeps_peaks_and_outliers():
    wall = [1.0] * 50_000
    wall[12_345] = 30.0  # the slowest instance, not flagged
    r = {"instances": {"wall_ms": wall, "gpu_busy_ms": [0.5] * 50_000}, "outliers": [{"index": 40_001}]}
    tl = timeline(r, max_points=1000)
    assert tl["total"] == 50_000 and tl["shown"] <= 1001
    assert 12_345 in tl["index"] and 40_001 in tl["index"]
    assert tl["wall_ms"][tl["index"].index(12_345)] == 30.0
    assert tl["index"] == sorted(tl["index"])


def test_box_stats_are_the_quartiles_and_clipped_fences():
    samples = list(range(1, 101)) + [1000]
    b = box_stats(samples)
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    assert (b["q1"], b["median"], b["q3"]) == (q1, med, q3)
    assert b["upperfence"] == 100  # 1000 lies beyond q3 + 1.5 IQR
    assert b["lowerfence"] == 1 and b["max"] == 1000
    assert b["beyond"] == [1000.0]
    many = box_stats([1.0] * 1000 + [float(x) for x in range(100, 600)], max_points=10)
    assert many["beyond"] == [float(x) for x in range(590, 600)]  # the most extreme ones
    assert box_stats([]) is None and box_stats([None]) is None


def test_gap_histograms_accept_edges_bins_and_raw_gaps():
    edges = gap_histograms(analysis_example())
    assert edges[0]["label"] == "GPU 0" and edges[0]["count"] == [50, 20, 5, 1]
    assert edges[0]["lo_us"] == [0, 1, 10, 100] and edges[0]["hi_us"] == [1, 10, 100, 1000]
    assert edges[0]["info"] == {"idle_ms": 3.2}
    raw = gap_histograms({"gaps": {"gaps_us": [0.5, 3, 3, 7, 12, 400, 2000]}})[0]
    assert sum(raw["count"]) == 7
    assert dict(zip(raw["lo_us"], raw["count"]))[2] == 2  # 3 and 3 fall in [2, 5)
    ns = gap_histograms({"gap_histogram": {"gaps_ns": [500, 3000]}})[0]
    assert sum(ns["count"]) == 2
    bins = gap_histograms({"gap_histogram": [{"lo_us": 0, "hi_us": 5, "count": 4}]})[0]
    assert bins["count"] == [4]
    assert gap_histograms({}) == []


def test_kernel_rows_convert_units_and_sort_by_total():
    rows = kernel_rows(analysis_example())
    assert [r["name"] for r in rows] == ["void gemm<float>(float const*)", "relu_kernel"]
    assert rows[0]["total_ms"] == 8.0 and rows[0]["mean_ms"] == 0.02
    page = build_analysis_page(analysis_example())
    fig = page["figures"]["fig-kernels"]["data"][0]
    assert fig["x"] == [1.5, 8.0]  # smallest first: horizontal bars read top-down
    assert fig["y"][1] == "void gemm&lt;float&gt;(float const*)"


def test_analysis_sections_say_what_the_capture_lacks():
    page = build_analysis_page({"capture": {}, "ranges": [], "findings": []})
    texts = [b["text"] for s in page["sections"] for b in s["blocks"] if b["type"] == "missing"]
    assert sum("not in this capture" in t for t in texts) >= 5
    assert page["figures"] == {}
    html = render_html(build_analysis_page({}))
    assert "not in this capture" in html
    # stats without per-instance times: percentiles instead of a box, no timeline
    r = analysis_example()["ranges"][1]
    page = build_analysis_page({"ranges": [r]})
    assert page["figures"]["fig-distribution"]["data"][0]["type"] == "scatter"
    assert page["figures"]["fig-distribution"]["data"][0]["y"] == [0.1, 0.2, 0.2, 0.3, 0.3]
    assert not any(k.startswith("fig-timeline") for k in page["figures"])


def test_analysis_findings_sorted_by_severity_with_evidence():
    page = build_analysis_page(analysis_example())
    block = next(b for s in page["sections"] if s["id"] == "findings" for b in s["blocks"] if b["type"] == "findings")
    assert [f["severity"] for f in block["items"]] == ["high", "medium"]
    assert ("busy fraction", "0.25 (25%)") in block["items"][0]["evidence"]
    assert ("outlier indices", "13, 150") in block["items"][1]["evidence"]


# ----------------------------------------------------------------------------- sweep data

def test_checklist_steps_recorded_and_derived():
    s = sweep_example()
    v = s["variants"][0]
    assert checklist_step(v, "parsed")["status"] == "ok"
    opt = checklist_step(v, "optimized")
    assert opt["cls"] == "ok" and "workspace 64 MiB" in opt["details"] and "build 1.5 s" in opt["details"]
    assert checklist_step(v, "serialized")["status"] == "ok"
    assert checklist_step(v, "calibrated")["status"] == "n/a"  # fp32
    assert checklist_step(v, "executed")["details"] == "the FP32 reference"
    int8 = next(x for x in s["variants"] if x["precision"] == "int8" and x["status"] == "ok")
    assert checklist_step(int8, "calibrated")["status"] == "not recorded"
    ex = checklist_step(int8, "executed")
    assert ex["status"] == "warn" and "logits" in ex["details"]
    failed = next(x for x in s["variants"] if x["status"] == "failed")
    assert checklist_step(failed, "executed") == {"status": "failed", "cls": "bad",
                                                  "details": "unsupported op GridSample", "recorded": False}
    skipped = next(x for x in s["variants"] if x["status"] == "skipped")
    assert checklist_step(skipped, "parsed")["status"] == "skipped"
    assert checklist_step({"checklist": {"parsed": False}}, "parsed")["cls"] == "bad"
    assert checklist_step({"checklist": {"calibrated": {"status": "random", "data": "seeded random"}}},
                          "calibrated")["cls"] == "warn"


def test_throughput_by_streams_and_latency_by_workspace_series():
    s = sweep_example(n_variants=36)
    ser = throughput_by_streams(s["variants"])
    by_name = {x["name"]: x for x in ser}
    fp32 = by_name["fp32 · ws 64 MiB · no graph · onnxruntime"]
    assert fp32["x"] == [1, 2, 4]
    assert fp32["y"] == [pytest.approx(1000 / 4.4 * k * 0.8) for k in (1, 2, 4)]
    lat = latency_by_workspace(s["variants"])
    one = next(x for x in lat if x["name"] == "fp32 · 1 stream · no graph · onnxruntime")
    assert one["x"] == [64 << 20, 1 << 30]
    medians = {v["key"]: v["latency_ms"]["median"] for v in s["variants"] if v["status"] == "ok"}
    assert one["y"] == [medians["fp32-ws64M-s1-nograph"], medians["fp32-ws1G-s1-nograph"]]


def test_accuracy_vs_speed_takes_the_worst_output():
    v = {"key": "k", "precision": "fp16", "status": "ok", "latency_ms": {"median": 1.0},
         "accuracy": {"a": {"rel_l2": 0.01, "cosine": 0.99, "passed": True},
                      "b": {"rel_l2": 0.03, "cosine": 0.95, "max_abs": 2.0, "passed": False}}}
    (p,) = accuracy_vs_speed([v, {"key": "ref", "status": "ok", "latency_ms": {"median": 2.0}}])
    assert (p["rel_l2"], p["cosine"], p["max_abs"], p["passed"]) == (0.03, 0.95, 2.0, False)


def test_layer_time_by_type_sums_per_variant_and_folds_the_rest():
    layers = [{"variant": "a", "type": f"T{i}", "time_total_ms": float(i + 1)} for i in range(5)] + \
             [{"variant": "b", "type": "T4", "time_total_ms": 10.0}]
    lt = layer_time_by_type(layers, max_types=2)
    assert lt["variants"] == ["a", "b"] and lt["types"] == ["T4", "T3", "other"]
    assert lt["ms"]["T4"] == [5.0, 10.0] and lt["ms"]["other"] == [6.0, 0.0]
    assert sum(lt["ms"][t][0] for t in lt["types"]) == 15.0


def test_sweep_page_opens_with_verdict_and_variants_and_the_checklist_marks_failures():
    s = sweep_example()
    page = build_sweep_page(s)
    assert page["verdict"]["status"] == "FAILED"  # a variant failed to build
    assert "1 of 8 variants failed" in page["verdict"]["headline"]
    # the variants table first (what the verdict is about), the findings' evidence after it
    assert [x["id"] for x in page["sections"][:2]] == ["variants", "findings"]
    checklist = next(x for x in page["sections"] if x["id"] == "checklist")
    rows = checklist["blocks"][0]["rows"]
    assert len(rows) == len(s["variants"])
    failed = next(r for r in rows if r[0]["text"] == "fp16-ws1G-s1-bad")
    assert failed[1]["cls"] == "bad" and failed[0]["sub"] == "unsupported op GridSample"
    lat = [t for t in page["figures"]["fig-latency"]["data"] if t["type"] == "box"]
    assert len(lat) == 6
    assert {v["precision"] for v in s["variants"][:6]} == {"fp32", "fp16", "int8"}
    assert lat[0]["median"] == [pytest.approx(s["variants"][0]["latency_ms"]["median"], rel=1e-5)]
    cards = {c["label"]: c for c in page["cards"]}
    assert cards["variants"]["sub"] == "6 ok, 1 failed, 1 skipped"


def test_sweep_random_calibration_banner_and_missing_sections():
    page = build_sweep_page({"run": {"random_calibration": True}, "variants": [{"key": "x"}]})
    assert any("random inputs" in b["text"] for b in page["banners"])
    texts = [b["text"] for s in page["sections"] for b in s["blocks"] if b["type"] == "missing"]
    assert any("not in this run" in t for t in texts)
    # latency from stats alone: a median marker with min..p99 whiskers
    v = {"key": "k", "status": "ok", "latency_ms": {"min": 1.0, "median": 1.5, "p99": 2.5}}
    t = build_sweep_page({"variants": [v]})["figures"]["fig-latency"]["data"][0]
    assert t["y"] == [1.5] and t["error_y"]["array"] == [1.0] and t["error_y"]["arrayminus"] == [0.5]


# ----------------------------------------------------------------------------- layers data

def test_precision_mix_shares_sum_to_100():
    mix = precision_mix(layers_example()["layers"])
    assert mix["fp16"] == pytest.approx({"fp16": 87.5, "fp32": 12.5})  # Half reformat counts as fp16
    assert mix["int8"] == pytest.approx({"int8": 1.5 / 2.4 * 100, "fp32": 0.9 / 2.4 * 100})
    for shares in mix.values():
        assert sum(shares.values()) == pytest.approx(100.0)


def test_layer_sum_and_end_to_end_latency_shown_side_by_side():
    sums = {s["variant"]: s for s in layer_sum_vs_latency(layers_example())}
    assert sums["fp16"]["layer_sum_ms"] == 4.0 and sums["fp16"]["latency_median_ms"] == 4.0
    assert sums["fp16"]["overhead_pct"] == pytest.approx((4.0 / 3.8 - 1) * 100)
    assert sums["int8"]["layer_sum_ms"] == pytest.approx(2.4) and sums["int8"]["overhead_pct"] == pytest.approx(20.0)
    html = render_html(build_layers_page(layers_example()))
    assert "per-layer event overhead" in html


def test_layers_page_alignment_chart_uses_both_time_columns():
    page = build_layers_page(layers_example())
    fig = page["figures"]["fig-alignment-0"]["data"]
    assert [t["name"] for t in fig] == ["fp16 (time a ms)", "int8 (time b ms)"]  # the legend names the variants
    assert fig[0]["x"] == [0.5, 3.0] and fig[1]["x"] == [0.9, 1.5]  # horizontal, first group at the top
    assert fig[0]["y"] == ["softmax", "conv1, relu"]
    mix = page["figures"]["fig-precision"]["data"]
    per_variant = [sum(t["y"][i] for t in mix) for i in range(2)]
    assert per_variant == [pytest.approx(100.0), pytest.approx(100.0)]


def test_alignment_chart_draws_the_costliest_groups_in_network_order():
    from profiler.report.layers import ALIGN_CHART_GROUPS, alignment_figure

    rows = [{"group": i, "name": f"g{i}", "time_a_ms": float(i % 7), "time_b_ms": 0.1} for i in range(70)]
    fig = alignment_figure(rows, ["time_a_ms", "time_b_ms"], {"a": "fp32", "b": "fp16"})
    drawn = fig["data"][0]["y"][::-1]
    assert len(drawn) == ALIGN_CHART_GROUPS == 30
    kept = [int(n[1:]) for n in drawn]
    assert kept == sorted(kept) and all(i % 7 >= 4 for i in kept)  # the 30 largest (the 6s, 5s, 4s), in order
    assert fig["layout"]["height"] >= 26 * 30


def test_layers_report_from_real_trtexec_exports(trtexec_fixtures, tmp_path):
    """fp32 and fp16 ResNet-50 engines exported by trtexec on an RTX 3090."""
    trtexec = pytest.importorskip("profiler.layers.trtexec")
    frame_mod = pytest.importorskip("profiler.layers.frame")
    from profiler.findings import frame_records
    align_mod = pytest.importorskip("profiler.layers.align")
    base = trtexec_fixtures / "tensorflow" / "resnet" / "RTX-3090"
    frames, variants, raw_avg = {}, [], {}
    for v in ("fp32", "fp16"):
        prefix = str(base / v / "resnet.onnx.engine")
        prof, _, _ = trtexec.parse_profile(prefix + ".profile.json")
        info, _, _ = trtexec.parse_layer_info(prefix + ".graph.json")
        frames[v] = frame_mod.make_frame(prof.merge(info.drop(columns=["profile", "base_name"]), on="name",
                                                    how="left"), variant=v)
        samples, tinfo = trtexec.parse_times(prefix + ".timing.json")
        summ = trtexec.timing_summary(samples, tinfo)
        variants.append({"key": v, **{k: summ[k] for k in ("latency_ms", "gpu_compute_ms", "enqueue_ms",
                                                         "throughput_qps")}})
        raw = json.loads(Path(prefix + ".profile.json").read_text())
        raw_avg[v] = sum(r["averageMs"] for r in raw if "averageMs" in r)
    data = {"run": {"source": str(base)}, "variants": variants,
            "layers": frame_records(frames["fp32"]) + frame_records(frames["fp16"]),
            "alignment": [{"a": "fp32", "b": "fp16",
                           "groups": frame_records(align_mod.align(frames["fp32"], frames["fp16"]))}]}
    sums = {s["variant"]: s for s in layer_sum_vs_latency(data)}
    for v in ("fp32", "fp16"):
        assert sums[v]["layer_sum_ms"] == pytest.approx(raw_avg[v], rel=1e-9)
        # profiling every layer costs time: the per-layer sum exceeds the measured GPU compute time
        assert sums[v]["layer_sum_ms"] > sums[v]["gpu_compute_median_ms"]
    mix = precision_mix(data["layers"])
    assert sum(mix["fp16"].values()) == pytest.approx(100.0)
    assert mix["fp16"]["fp16"] > 50.0 and mix["fp32"]["fp32"] > 99.0
    out = write_layers_report(data, tmp_path / "layers.html")
    html = out.read_text()
    assert "fig-alignment-0" in figures_of(html)


# ----------------------------------------------------------------------------- compare data

def test_verdict_first_says_what_regressed_by_how_much_and_how_sure():
    v = verdict_summary(compare_example())
    assert v["cls"] == "bad" and v["headline"] == "Regression: 1 of 3 variants slower"
    assert v["regressions"] == ["fp16-ws1G-s1"] and v["missing"] == ["int8-ws1G-s1"]
    assert v["lines"][0].startswith("fp16-ws1G-s1: median +15% (95% CI +13% to +17%, p = 3.2e-40)")
    assert "missing from one run: int8-ws1G-s1" in v["lines"]
    ok = verdict_summary({"variants": [{"key": "a", "verdict": "no_change"}]})
    assert ok["cls"] == "ok" and ok["headline"] == "No change beyond noise in 1 variant"
    html = render_html(build_compare_page(compare_example()))
    assert html.index('id="verdict"') < html.index('id="distributions"')


def test_overlaid_histograms_share_their_bins():
    v = compare_example()["variants"][0]
    h = overlaid_histogram(v, bins=30)
    assert len(h["edges"]) == 31 and len(h["centers"]) == 30
    assert sum(h["baseline"]) == 400 and sum(h["candidate"]) == 400
    assert h["edges"][0] == min(v["baseline_samples_ms"] + v["candidate_samples_ms"])
    assert h["edges"][-1] == max(v["baseline_samples_ms"] + v["candidate_samples_ms"])
    assert overlaid_histogram({"key": "x"}) is None
    one = overlaid_histogram({"baseline_samples_ms": [1.0, 1.0], "candidate_samples_ms": [1.0]})
    assert sum(one["baseline"]) == 2 and sum(one["candidate"]) == 1


def test_delta_rows_environment_and_trend():
    rows = delta_rows(compare_example()["variants"][0]["layer_deltas"])
    assert [r["name"] for r in rows] == ["conv1", "relu", "fc"]
    assert rows[0]["delta_ms"] == pytest.approx(0.3) and rows[0]["delta_pct"] == pytest.approx(30.0)
    assert rows[2]["delta_ms"] == pytest.approx(-0.05)
    assert environment_rows([{"field": "driver", "baseline": "550", "candidate": "560"}, "clocks locked"]) == \
        [("driver", "550", "560"), ("clocks locked", None, None)]
    assert environment_rows({"gpu": ["A100", "H200"], "cuda": {"baseline": "12.4", "candidate": "12.8"}}) == \
        [("gpu", "A100", "H200"), ("cuda", "12.4", "12.8")]
    (t,) = trend_series(compare_example()["trend"])
    assert t["change_index"] == 3 and t["median_ms"][3] == 2.3 and t["labels"][0] == "r0"
    assert trend_series({"k": [{"run_id": 1, "median_ms": 1.0}]})[0]["title"] == "k"
    page = build_compare_page(compare_example())
    star = page["figures"]["fig-trend-0"]["data"][1]
    assert star["x"] == ["r3"] and star["y"] == [2.3]


# ----------------------------------------------------------------------------- escaping, embedding, size

@pytest.mark.parametrize("kind", ["analysis", "sweep", "layers", "compare"])
def test_names_with_markup_are_escaped_and_cannot_break_out(kind, tmp_path):
    data = dict(evil_everywhere())[kind]
    html = write_report(data, tmp_path / "r.html", cdn=True).read_text()
    assert EVIL not in html
    assert "<script>alert(1)" not in html
    assert EVIL_ESCAPED in html  # the HTML text shows the name, escaped
    # every <script> we open is closed exactly once: no </script> from data ends one early
    assert html.count("<script") == html.count("</script>") == 3
    figs = figures_of(html)
    blob = html[html.index('id="trtprof-figures"'):]
    blob = blob[: blob.index("</script>")]
    assert "<" not in blob.split(">", 1)[1]  # the JSON carries no raw '<' at all
    # plotly reads trace text as HTML: names are entity-escaped there and drawn literally
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; void foo&lt;int&gt;" in json.dumps(figs)


def test_plotly_embedded_exactly_once_and_absent_with_cdn(tmp_path):
    bundle_head = plotly_js()[:300]
    html = write_analysis_report(analysis_example(), tmp_path / "a.html").read_text()
    assert html.count(bundle_head) == 1
    assert len(chart_ids(html)) >= 5  # several charts, one library
    assert html.count("Plotly.newPlot(") == 1
    assert "<script src=" not in html
    cdn = write_analysis_report(analysis_example(), tmp_path / "b.html", cdn=True).read_text()
    assert bundle_head not in cdn
    assert cdn.count(f'<script src="{plotly_cdn_url()}"') == 1
    assert re.fullmatch(r"https://cdn\.plot\.ly/plotly-\d+\.\d+\.\d+\.min\.js", plotly_cdn_url())
    assert len(cdn) < 200_000 < len(html)


def test_a_20_variant_sweep_report_is_under_6_mb(tmp_path):
    s = sweep_example(n_variants=20, n_samples=5000)
    out = write_sweep_report(s, tmp_path / "sweep.html", layers=s.pop("layers"))
    size = out.stat().st_size
    assert size < 6 * 1024 * 1024, size
    figs = figures_of(out.read_text())
    assert len([t for t in figs["fig-latency"]["data"] if t["type"] == "box"]) == 20
    assert "fig-layers" in figs


@pytest.mark.parametrize("data", [
    {"kind": "analyze"}, {"kind": "sweep"}, {"kind": "import"}, {"kind": "compare"},
    {"ranges": None, "capture": None}, {"ranges": [{"name": "x", "wall_ms": {"median": float("nan")},
                                                        "instances": {"wall_ms": [1.0, float("inf"), None]}}]},
    {"variants": [{}]}, {"variants": [{"key": "k", "status": "ok", "latency_ms": {"median": float("nan")},
                                       "accuracy": {"o": None}, "checklist": "garbage", "memory": None}]},
    {"kind": "import", "layers": [{"variant": None, "time_avg_ms": None}], "alignment": "nope"},
    {"baseline": None, "candidate": {}, "variants": [{"verdict": "regression", "median_ratio": None}],
     "trend": [1, 2], "environment_changes": None},
])
def test_partial_and_odd_inputs_still_render_valid_pages(data, tmp_path):
    html = write_report(data, tmp_path / "r.html", cdn=True).read_text()
    figs = figures_of(html)
    assert set(chart_ids(html)) == set(figs)
    assert "<!DOCTYPE html>" in html


def test_report_written_atomically_with_normal_permissions(tmp_path):
    out = write_layers_report(layers_example(), tmp_path / "sub" / "dir" / "r.html", cdn=True)
    assert out == tmp_path / "sub" / "dir" / "r.html" and out.is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in out.parent.iterdir()] == ["r.html"]  # no temporary file left behind


def test_report_kind_dispatch():
    assert report_kind(analysis_example()) == "analysis"
    assert report_kind({"ranges": []}) == "analysis"
    assert report_kind({"run": {"kind": "sweep"}, "variants": []}) == "sweep"
    assert report_kind({"variants": [], "layers": []}) == "sweep"
    assert report_kind(sweep_example()) == "sweep"  # a sweep summary that carries its layers
    assert report_kind(layers_example()) == "layers"
    assert report_kind({"run": {}, "variants": [], "layers": [{"name": "x"}]}) == "layers"
    assert report_kind({"baseline": {}, "candidate": {}}) == "compare"
    with pytest.raises(InputError):
        report_kind({"something": 1})
    with pytest.raises(InputError):
        report_kind([1, 2])


def test_templates_ship_as_package_data():
    tpl = resources.files("reports") / "templates"
    for name in ("base.html.j2", "_blocks.html.j2", "style.css", "analysis.html.j2", "sweep.html.j2",
                 "layers.html.j2", "compare.html.j2"):
        assert (tpl / name).is_file(), name


def test_every_chart_placed_once_and_every_figure_placed(tmp_path):
    for kind, data in (("analysis", analysis_example()), ("sweep", sweep_example()),
                       ("layers", layers_example()), ("compare", compare_example())):
        html = write_report(data, tmp_path / f"{kind}.html", cdn=True).read_text()
        ids = chart_ids(html)
        assert len(ids) == len(set(ids)) and set(ids) == set(figures_of(html)), kind


def test_analysis_report_of_a_real_capture(tmp_path):
    """host_stall: 100 queries, a 5 ms host stall injected in every tenth (indices 7, 17, ... 97)."""
    cap = ROOT / "sample_traces" / "host_stall.sqlite"
    if not cap.is_file():
        pytest.skip(f"{cap} not found")
    analyze = pytest.importorskip("profiler.capture.analyze")
    truth = json.loads((ROOT / "sample_traces" / "host_stall.json").read_text())
    result = analyze.analyze_path(cap).to_json()
    page = build_analysis_page(result)
    rng = next(r for r in result["ranges"] if r["name"].endswith("query"))
    tl = timeline(rng)
    assert tl["total"] == 100
    assert set(truth["stalled_indices"]) <= set(tl["outlier_index"])
    for i in truth["stalled_indices"]:
        assert tl["outlier_wall_ms"][tl["outlier_index"].index(i)] >= truth["stall_ms"]
    bvh = busy_vs_host(result["ranges"])
    k = bvh["names"].index(next(n for n in bvh["names"] if n.endswith("query")))
    assert bvh["wall_ms_median"][k] == rng["wall_ms"]["median"]
    html = write_analysis_report(result, tmp_path / "real.html").read_text()
    assert set(chart_ids(html)) == set(figures_of(html)) == set(page["figures"])


def test_compare_report_of_two_stored_runs(tmp_path):
    """Two runs in a real SQLite store, compared by the library; the report renders what it decided."""
    runs_mod = pytest.importorskip("profiler.compare.runs")
    from profiler.store import Store

    store = Store.open(str(tmp_path / "trtprof.db"))
    rng = np.random.default_rng(11)
    ids = []
    for label, scale, trt, rel_l2 in (("base", 1.0, "10.3", 0.001), ("cand", 1.2, "10.5", 0.2)):
        rid = store.create_run(kind="sweep", source="m.onnx", label=label, tensorrt_version=trt, gpu="H200")
        for key in ("fp16-s1", "fp32-s1"):
            factor = scale if key == "fp16-s1" else 1.0
            lat = (2.0 * factor * (1 + 0.01 * rng.standard_normal(500))).tolist()
            store.add_variant(rid, {"key": key, "precision": key[:4], "status": "ok", "fingerprint": key,
                                    "latency_ms": {"median": float(np.median(lat))}, "throughput_qps": 500 / factor},
                              samples=[{"idx": i, "latency_ms": x} for i, x in enumerate(lat)],
                              layers=[{"name": "conv<3x3>", "type": "Convolution", "time_avg_ms": 1.0 * factor},
                                      {"name": "fc", "type": "Gemm", "time_avg_ms": 0.5}],
                              accuracy=[{"output": "logits", "rel_l2": rel_l2, "passed": rel_l2 < 0.1}])
        store.finish_run(rid)
        ids.append(rid)
    data = runs_mod.compare_runs(store, ids[0], ids[1])
    v = verdict_summary(data)
    assert v["cls"] == "bad" and "fp16-s1" in v["regressions"] and "fp32-s1" not in v["regressions"]
    page = build_compare_page(data)
    fp16 = next(x for x in data["variants"] if x["key"] == "fp16-s1")
    assert v["lines"][0].startswith(f"fp16-s1: median {(fp16['median_ratio'] - 1) * 100:+.3g}%")
    env = next(b for s in page["sections"] if s["id"] == "environment" for b in s["blocks"] if b["type"] == "table")
    assert ["tensorrt_version", "10.3", "10.5"] == [env["rows"][0][0]["text"], env["rows"][0][1]["text"],
                                                    env["rows"][0][2]["text"]]
    deltas = page["figures"]["fig-layers-delta-0"]["data"][0]
    assert "conv&lt;3x3&gt;" in deltas["y"]
    html = write_compare_report(data, tmp_path / "compare.html").read_text()
    assert set(chart_ids(html)) == set(figures_of(html))


def test_compare_accuracy_nested_deltas_trend_step_and_kernel_error():
    data = compare_example()
    data.pop("trend")
    data["variants"][0]["trend"] = {"fingerprint": "f", "step": {"index": 2},
                                    "points": [{"run_id": i, "label": None, "median_ms": m}
                                               for i, m in enumerate([2.0, 2.0, 2.4, 2.4])]}
    data["variants"][0]["accuracy"] = {"logits": {"rel_l2": {"baseline": 0.01, "candidate": 0.2, "delta": 0.19},
                                                  "passed": {"baseline": True, "candidate": False}}}
    data["variants"][0]["accuracy_verdict"] = "regression"
    data["variants"][2]["reason"] = "not in the candidate run"
    data["kernel_deltas"] = [{"error": "kernel deltas unavailable: capture moved"}]
    v = verdict_summary(data)
    assert v["accuracy_regressions"] == ["fp16-ws1G-s1"]
    assert v["headline"] == "Regression: 1 of 3 variants slower; accuracy regressed in 1"
    assert "missing from one run: int8-ws1G-s1 (not in the candidate run)" in v["lines"]
    page = build_compare_page(data)
    (t,) = [s for s in trend_series(data["variants"][0]["trend"])]
    assert t["change_index"] == 2 and t["labels"] == ["run 0", "run 1", "run 2", "run 3"]
    assert page["figures"]["fig-trend-0"]["data"][1]["x"] == ["run 2"]
    acc = next(s for s in page["sections"] if s["id"] == "accuracy")
    rows = next(b for b in acc["blocks"] if b["type"] == "table")["rows"]
    assert [r[1]["text"] for r in rows] == ["rel_l2", "passed"]
    assert rows[1][4]["cls"] == "bad"
    kern = next(s for s in page["sections"] if s["id"] == "kernels-deltas")
    assert kern["blocks"][0]["text"] == "kernel deltas unavailable: capture moved"
