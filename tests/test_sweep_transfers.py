"""--no-transfers (trtexec's --noDataTransfers) and --no-overlap (its --exposeDMA): the sweep records the
choices and what took effect; outputs stay correct."""

from __future__ import annotations

import json
import subprocess
import sys

from profiler.sweep import SweepConfig, run_sweep

FAST = {"iterations": 5, "duration_s": 0.0, "warmup_ms": 0.0, "layers": False, "localize": False}


def test_sweep_without_transfers_keeps_accuracy_and_records_the_choice(tmp_path):
    summary = run_sweep(SweepConfig(precisions=["fp32", "fp16"], backend="onnxruntime", transfers=False,
                                    cache_dir=str(tmp_path / "cache"), **FAST))
    assert summary["run"]["config"]["transfers"] is False
    fp16 = summary["variants"][1]
    assert fp16["status"] == "ok" and fp16["accuracy"]["probs"]["passed"] is True
    assert fp16["accuracy"]["probs"]["cosine"] > 0.999  # outputs still reach the host for the check


def test_cli_flags(tmp_path):
    r = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--precision", "fp32", "--no-transfers",
                        "--no-overlap", "--iterations", "3", "--duration", "0", "--warmup", "0", "--no-layers",
                        "--no-store", "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["run"]["config"]["transfers"] is False and summary["run"]["config"]["overlap"] is False
    assert summary["variants"][0]["in_flight"] == 1


def test_overlap_is_asked_by_default_and_recorded_as_what_happened(tmp_path):
    summary = run_sweep(SweepConfig(precisions=["fp32"], backend="onnxruntime", cache_dir=str(tmp_path / "c"),
                                    **FAST))
    assert summary["run"]["config"]["overlap"] is True
    # onnxruntime's queries are synchronous: one in flight, whatever was asked
    assert summary["variants"][0]["in_flight"] == 1


def test_runs_stored_before_the_option_resume_one_query_at_a_time():
    old = SweepConfig.from_dict({"precisions": ["fp32"], "iterations": 4})
    assert old.overlap is False and old.harness.overlap is False
    assert SweepConfig.from_dict({**old.to_dict(), "overlap": True}).harness.overlap is True
    assert SweepConfig().harness.overlap is True


def test_the_report_says_how_many_queries_were_in_flight(tmp_path):
    from profiler.report import write_sweep_report

    summary = run_sweep(SweepConfig(precisions=["fp32"], backend="onnxruntime", cache_dir=str(tmp_path / "c"),
                                    **FAST))
    summary["variants"].append({**summary["variants"][0], "key": "fp32-s1-graph", "in_flight": 2})
    html = write_sweep_report(summary, tmp_path / "r.html", cdn=True).read_text()
    assert html.count("1 in flight") == 1 and html.count("2 in flight") == 1
