"""--no-transfers (trtexec's --noDataTransfers): the sweep records the choice, outputs stay correct."""

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


def test_cli_flag(tmp_path):
    r = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--precision", "fp32", "--no-transfers",
                        "--iterations", "3", "--duration", "0", "--warmup", "0", "--no-layers", "--no-store",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["run"]["config"]["transfers"] is False
