"""No impossible numbers: every number of the analysis JSON of every real capture obeys its meaning.

Over every capture we have (../shared/fixtures/nsys, ../shared/fixtures/nsys-tensorrt, sample_traces/):
fractions and shares lie in [0, 1], durations are >= 0, the parts of a total add up to at most the
total (layers' shares, kernel shares, GPU time per kind of work against the busy union), and the
summary numbers agree with each other (concurrency >= 1, setup + steady state inside the capture).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from profiler.capture.analyze import AnalysisOptions, analyze_path
from tests.conftest import SAMPLE_TRACES, SHARED, nsys_fixture_files

TRT = SHARED / "fixtures" / "nsys-tensorrt"
CAPTURES = nsys_fixture_files() + (sorted(TRT.glob("*.sqlite")) if TRT.is_dir() else []) + \
    sorted(SAMPLE_TRACES.glob("*.sqlite"))

SIGNED = {"difference_ms", "slope_ms_per_100_steps", "start_ms", "end_ms", "capture_start_ns", "capture_end_ns", "events_start_ns",
          "events_end_ns"}
"""Numbers that may be negative: a difference, and times on the capture's clock (a capture may start
before zero)."""
NOT_FRACTION = {"pinned_speedup", "p99_over_median", "max_over_median", "copy_to_compute",
                "max_kernel_to_launch_ratio", "max_tail_ratio"}
"""Ratios that are not shares of a whole."""


def walk(node, path=()):
    """(path, key, value) for every number in a JSON document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, path + (str(k),))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, path + (i,))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        key = next((p for p in reversed(path) if isinstance(p, str)), "")
        yield path, key, node


def is_fraction_key(key: str) -> bool:
    """A key that names a share of a whole: 'fraction' or 'share' is one of its words, wherever it stands
    (gpu_busy_fraction, copy_fraction_of_span, share_of_copy, top_level_share), except percentages."""
    words = key.lower().split("_")
    return ("fraction" in words or "share" in words) and not key.endswith("_pct")


def check_numbers(doc: dict) -> list[str]:
    bad = []
    for path, key, v in walk(doc):
        where = "/".join(map(str, path))
        if isinstance(v, float) and not math.isfinite(v):
            bad.append(f"{where} = {v} (not finite)")
            continue
        if path and path[0] in ("thresholds", "heuristics"):
            continue  # limits and the capture model's settings, not measurements
        if key in NOT_FRACTION or key.endswith("_gbps"):
            continue
        if is_fraction_key(key) and not 0 <= v <= 1:
            bad.append(f"{where} = {v} (a fraction outside [0, 1])")
        if key.endswith("_pct") and key != "cov_pct" and not 0 <= v <= 100 + 1e-9:
            bad.append(f"{where} = {v} (a percentage outside [0, 100])")
        timed = key.endswith(("_ms", "_ns", "_us")) or "_ms_" in key or key.startswith("ms_") or key in ("min", "max", "median", "mean", "p90", "p95", "p99")
        if timed and key not in SIGNED and "instances" not in path[:2] and v < 0:
            bad.append(f"{where} = {v} (a negative duration)")
        if "instances" in path and key in ("wall_ms", "gpu_busy_ms") and v < 0:
            bad.append(f"{where} = {v} (a negative duration)")
    return bad


def check_totals(doc: dict) -> list[str]:
    bad = []
    eps = 1e-6
    layers = doc.get("layers") or []
    if sum(r["share"] or 0 for r in layers) > 1 + eps:
        bad.append("layers' shares add up to more than the inference")
    if sum(k["share_pct"] for k in doc.get("top_kernels") or []) > 100 + 1e-6:
        bad.append("kernel shares add up to more than 100%")
    ph = doc.get("phases") or {}
    if ph:
        steady = ph["steady"]
        for kind, ms in steady["gpu_ms_by_kind"].items():
            if ms > steady["gpu_busy_ms"] + eps:
                bad.append(f"steady {kind} time {ms} exceeds the GPU busy union {steady['gpu_busy_ms']}")
        if steady["gpu_busy_ms"] > steady["duration_ms"] * max(1, len(doc["capture"].get("gpus") or [1])) + eps:
            bad.append("steady GPU busy time exceeds the steady state's duration")
        if ph["setup"]["end_ms"] > steady["end_ms"] + eps:
            bad.append("setup ends after the steady state")
    conc = doc.get("gpu_concurrency")
    if conc is not None and conc < 1 - eps:
        bad.append(f"gpu_concurrency {conc} < 1")
    ov = doc.get("copy_compute_overlap") or {}
    if ov and ov["overlap_ms"] > min(ov["copy_ms"], ov["compute_ms"]) + eps:
        bad.append("copy/compute overlap exceeds the copy or the compute time")
    inf = doc.get("inference") or {}
    if inf and inf["steady_count"] > inf["count"]:
        bad.append("more steady inferences than inferences")
    for f in doc.get("findings") or []:
        if "impact" not in f:
            bad.append(f"finding {f['rule']} without impact")
    for r in doc.get("ranges") or []:
        if r.get("depth", 0) < 0:
            bad.append(f"range {r['name']} has a negative depth")
    return bad


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
@pytest.mark.parametrize("include_setup", [False, True], ids=["steady", "whole"])
def test_no_impossible_numbers(path: Path, include_setup: bool):
    doc = analyze_path(path, AnalysisOptions(include_setup=include_setup)).to_json()
    json.dumps(doc, allow_nan=False)
    problems = check_numbers(doc) + check_totals(doc)
    assert not problems, "\n".join(problems[:20])


def test_the_checks_catch_impossible_numbers():
    """The checks above fail on the numbers issue 11 saw (busy 1812%, negative durations, shares > 1)."""
    doc = {"ranges": [{"name": "x", "gpu_busy_fraction": 18.12, "wall_ms": {"median": -1.0},
                       "gpu_busy_ms": {"median": 1.0}}],
           "layers": [{"share": 0.7}, {"share": 0.6}], "gpu_concurrency": 0.5,
           "findings": [{"rule": "r", "impact": {"share": 1.5, "ms_per_instance": -2.0}}]}
    bad = check_numbers(doc) + check_totals(doc)
    assert any("gpu_busy_fraction = 18.12" in b for b in bad)
    assert any("wall_ms/median = -1.0" in b for b in bad)
    assert any("impact/share = 1.5" in b for b in bad)
    assert any("ms_per_instance = -2.0" in b for b in bad)
    assert any("layers' shares" in b for b in bad) and any("gpu_concurrency" in b for b in bad)


def test_fraction_keys_are_found_wherever_the_word_stands():
    """A fraction named in the middle of its key (the review's copy_fraction_of_wall = 6.45) is checked."""
    doc = {"findings": [{"evidence": {"copy_fraction_of_wall": 6.45, "copy_to_compute": 5056.0,
                                      "share_of_copy": 1.2, "init_gap_share": -0.1, "share_pct": 55.0}}]}
    bad = check_numbers(doc)
    assert any("copy_fraction_of_wall = 6.45" in b for b in bad)
    assert any("share_of_copy = 1.2" in b for b in bad) and any("init_gap_share = -0.1" in b for b in bad)
    assert not any("copy_to_compute" in b or "share_pct" in b for b in bad)
