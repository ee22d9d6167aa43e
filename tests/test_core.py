"""Core contracts: trtexec statistics, findings, CLI exit codes."""

import json
import subprocess
import sys

import numpy as np
import pytest

from profiler import stats
from profiler.findings import Finding, json_safe, sort_findings


def test_percentile_uses_trtexec_index_not_interpolation():
    s = np.arange(1, 11, dtype=np.float32)  # 1..10
    # float32: (1 - 0.9f) * 10 = 1.0000002 -> exclude 1 -> sorted[8]
    assert stats.percentile(s, 90) == 9.0
    assert stats.percentile(s, 99) == 10.0
    assert stats.percentile(s, 0) == 1.0
    assert np.percentile(s, 90) != stats.percentile(s, 90)  # numpy interpolates: 9.1


def test_median_even_and_odd():
    assert stats.median(np.array([1, 2, 3, 4], dtype=np.float32)) == 2.5
    assert stats.median(np.array([1, 2, 7], dtype=np.float32)) == 2.0


def test_cov_is_population_std_over_mean():
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    assert stats.cov_pct(x) == pytest.approx(np.std(x) / np.mean(x) * 100, rel=1e-6)


def test_summarize_empty_is_nan_not_error():
    out = stats.summarize([])
    assert out["count"] == 0 and np.isnan(out["median"])


def test_finding_rejects_unknown_severity_and_sorts():
    with pytest.raises(ValueError):
        Finding("x", "critical", "t")
    fs = sort_findings([Finding("b", "low", "t"), Finding("a", "high", "t"), Finding("c", "medium", "t")])
    assert [f.rule for f in fs] == ["a", "c", "b"]


def test_json_safe_maps_non_finite_to_null():
    d = json_safe({"a": np.float32(1.5), "b": float("nan"), "c": np.array([1, 2])})
    assert json.dumps(d) == '{"a": 1.5, "b": null, "c": [1, 2]}'


def test_cli_help_and_usage_exit_code():
    r = subprocess.run([sys.executable, "-m", "profiler", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "analyze" in r.stdout
    r = subprocess.run([sys.executable, "-m", "profiler", "no-such-command"], capture_output=True, text=True)
    assert r.returncode == 2


def test_click_usage_errors_are_one_sentence():
    r = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--calib-method", "best"],
                       capture_output=True, text=True)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1
    assert "'best' is not one of" in lines[0] and "trtprof sweep --help" in lines[0]
