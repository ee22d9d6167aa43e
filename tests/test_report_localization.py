"""Report pieces for precision localization and for evidence that holds records."""

from __future__ import annotations

from profiler.report.common import finding_views
from profiler.report.sweep import build_sweep_page


def _summary():
    curve = [{"index": i, "node": n, "op": "Mul", "rel_l2": e} for i, (n, e) in
             enumerate([("a", 1e-4), ("b", 2e-4), ("square", None), ("root", None)])]
    loc = {"curve": curve, "first_jumps": [{"node": "square", "op": "Mul", "rel_l2": None, "input_rel_l2": 2e-4,
                                            "amplification": None, "variant_node": "square"}],
           "conclusion": "keeping square, root in FP32 removes 100% of the fp16 error",
           "verification": {"kept_fp32": ["square", "root"], "variants": {
               "fp32": {"latency_ms": 1.0, "accuracy": None},
               "fp16": {"latency_ms": 0.8, "accuracy": {"y": {"rel_l2": 3e-4, "inf_count": 207, "nan_count": 0}}},
               "fp16+kept": {"latency_ms": 0.9, "accuracy": {"y": {"rel_l2": 2e-4, "inf_count": 0, "nan_count": 0}}}}}}
    return {"run": {"kind": "sweep"}, "findings": [], "variants": [
        {"key": "fp32-wsdefault-s1", "precision": "fp32", "status": "ok", "latency_ms": {"median": 1.0}},
        {"key": "fp16-wsdefault-s1", "precision": "fp16", "status": "ok", "latency_ms": {"median": 0.8},
         "accuracy": {"y": {"rel_l2": 3e-4, "inf_count": 207, "nan_count": 0, "passed": False}},
         "localization": loc}]}


def test_localization_section_curve_jumps_and_verification():
    page = build_sweep_page(_summary())
    sec = next(s for s in page["sections"] if s["id"] == "localization")
    fig = next(f for k, f in page["figures"].items() if "loc" in k)
    curve, jumps = fig["data"]
    assert curve["y"][:2] == [1e-4, 2e-4] and curve["y"][2] == curve["y"][3] > 2e-4  # overflow drawn above
    assert jumps["x"] == [2]
    tables = [b for b in sec["blocks"] if b["type"] == "table"]
    assert tables[0]["rows"][0][2]["text"] == "inf/NaN (overflow)"
    verify_rows = {r[0]["text"]: r for r in tables[1]["rows"]}
    assert verify_rows["fp16"][3]["text"] == "207" and verify_rows["fp16+kept"][3]["text"] == "0"
    variants_table = next(b for s in page["sections"] if s["id"] == "variants" for b in s["blocks"]
                          if b["type"] == "table")
    acc = variants_table["columns"].index("worst rel. L2 vs FP32")
    assert acc == 3  # the accuracy column sits beside the variant, never behind a scroll bar
    assert variants_table["rows"][1][acc]["sub"].startswith("207 NaN/Inf values")


def test_evidence_records_become_a_table():
    (view,) = finding_views([{"rule": "jitter", "severity": "high", "title": "t",
                              "evidence": {"outliers": [{"index": 7, "cause": "host_stall"},
                                                        {"index": 17, "cause": "host_stall"}], "count": 100}}])
    ev = dict(view["evidence"])
    assert ev["outliers"]["type"] == "table" and ev["outliers"]["columns"] == ["index", "cause"]
    assert [r[0]["text"] for r in ev["outliers"]["rows"]] == ["7", "17"]


def test_nsys_section_lists_each_variant_as_the_capture_saw_it():
    summary = {"run": {"kind": "sweep"}, "findings": [], "nsys": {"capture": "out/sweep.sqlite"}, "variants": [
        {"key": "fp32-wsdefault-s1", "status": "ok", "latency_ms": {"median": 7.5},
         "nsys": {"found": True, "count": 40, "wall_ms": {"median": 7.56}, "gpu_busy_ms": {"median": 0.40},
                  "gpu_busy_fraction": 0.052, "rules": ["launch_overhead"],
                  "compute_vs_gpu_busy": {"ratio": 18.56}}},
        {"key": "fp32-wsdefault-s1-graph", "status": "ok", "latency_ms": {"median": 0.52},
         "nsys": {"found": True, "count": 555, "wall_ms": {"median": 0.54}, "gpu_busy_ms": {"median": 0.46},
                  "gpu_busy_fraction": 0.856, "rules": [], "compute_vs_gpu_busy": {"ratio": 1.088}}},
        {"key": "fp16-wsdefault-s1", "status": "ok", "nsys": {"found": False}}]}
    page = build_sweep_page(summary)
    sec = next(s for s in page["sections"] if s["id"] == "nsys")
    rows = [[c["text"] for c in r] for r in sec["blocks"][0]["rows"]]
    assert rows[0][0] == "fp32-wsdefault-s1" and rows[0][-1] == "launch_overhead" and rows[0][4] == "5.2%"
    assert rows[1][-1] == "none" and rows[1][1] == "555"
    assert rows[2][1] == "not in the capture"
    assert "out/sweep.sqlite" in sec["blocks"][1]["text"]
