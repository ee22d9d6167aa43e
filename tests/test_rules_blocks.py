"""The capture rules walk a range's members and the calls in the GPU's idle gaps block by block, so their
temporaries stay small on captures of millions of rows: with blocks of a few rows, crossing every
boundary, they must give the one-pass answer, number for number."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from profiler.capture.analyze import analyze, analyze_path
from profiler.capture.loader import load_trace
from profiler.capture.series import build_series
from profiler.capture.trace import Trace
from profiler.rules.capture import _common
from tests.capture_builders import T, api, kernels
from tests.conftest import NSYS_FIXTURES, SAMPLE_TRACES

# captures where the block-wise rules fire: gpu_idle with OS runtime calls in its gaps, launch_overhead
# on one flat range and on nested PyTorch op ranges (rows held several times), both transfer_bound paths
CAPTURES = {
    "host_stall": SAMPLE_TRACES / "host_stall.sqlite",
    "harness_cls": SAMPLE_TRACES / "harness_cls.sqlite",
    "launch_bound": SAMPLE_TRACES / "launch_bound.sqlite",
    "transfer_bound": SAMPLE_TRACES / "transfer_bound.sqlite",
    "mfu_before": NSYS_FIXTURES / "v2026.2.1_nsysai_mfu_2gpu_before.sqlite",
    "saxpy_mpi": NSYS_FIXTURES / "v2022.2.1_pipit_saxpy_mpi_cuda_nvtx_domains.sqlite",
    "h100_nested": NSYS_FIXTURES / "v2026.2.1_nsysai_h100_2gpu_1s_nvtx.sqlite",  # series holding rows twice
}


def _path(name: str):
    path = CAPTURES[name]
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.mark.parametrize("name", ["harness_cls", "h100_nested"])
def test_member_blocks_are_member_counts_in_pieces(name):
    table = build_series(load_trace(_path(name)))
    checked, nested = 0, 0
    for sid in range(len(table.series)):
        inst = table.instances_of(sid)
        for which in ("activity", "api", "osrt"):
            rows, counts = table.member_counts(inst, which)
            if len(rows) < 20 or (sid % 10 and counts.max() < 2):
                continue  # every tenth series and every one holding rows twice: blocks of 7 rows are slow
            pieces = list(table.member_blocks(inst, which, 7))
            np.testing.assert_array_equal(np.concatenate([r for r, _ in pieces]), rows)
            np.testing.assert_array_equal(np.concatenate([c for _, c in pieces]), counts)
            assert max(len(r) for r, _ in pieces) <= 7
            checked += 1
            nested += int(counts.max() > 1)
    assert checked >= 3 and (nested >= 2 if name == "h100_nested" else nested == 0)


@pytest.mark.parametrize("name", sorted(set(CAPTURES) - {"harness_cls"}))  # 238 ranges: slow in blocks of 7
def test_rules_give_the_same_numbers_with_tiny_blocks(name, monkeypatch):
    path = _path(name)
    one_pass = analyze_path(path, cache=False).to_json()
    monkeypatch.setattr(_common, "MEMBER_BLOCK", 7)
    monkeypatch.setattr(_common, "CALL_BLOCK", 7)
    blocks = analyze_path(path, cache=False).to_json()
    fired = {f["rule"] for f in one_pass["findings"]}
    assert fired & {"gpu_idle", "launch_overhead", "transfer_bound"}
    assert json.dumps(blocks, sort_keys=True, default=str) == json.dumps(one_pass, sort_keys=True, default=str)


def _busy_host_gaps() -> tuple[Trace, int]:
    """20 kernels 1 ms apart; in each gap an allocation and 25 reads of odd lengths, the last ones
    overlapping the next. Also the time (ns) the calls cover inside the gaps, from a plain merge."""
    krows, arows, reads, pieces = [], [], [], []
    for i in range(20):
        t = i * 1020 * T
        krows.append((t, t + 20 * T, 5, t - 2 * T, i + 1))
        gap = (t + 20 * T, t + 1020 * T)
        calls = [(gap[0] + 5 * T, gap[0] + 300 * T)]
        arows.append(("cudaMalloc", *calls[0], 5, "other"))
        for j in range(25):
            start = gap[0] + 10 * T + j * 30_001
            calls.append((start, start + 12_345 + j * 1_001))  # odd lengths: ms sums that round
            reads.append({"name": "read", "start_ns": calls[-1][0], "end_ns": calls[-1][1], "global_tid": 5,
                          "pid": 1, "tid": 5})
        pieces += [(max(a, gap[0]), min(b, gap[1])) for a, b in calls if i < 19]  # the last call has no gap after
    covered, reach = 0, 0
    for a, b in sorted(pieces):
        covered += max(b - max(a, reach), 0)
        reach = max(reach, b)
    return Trace(kernels=kernels(*krows), api=api(*arows), osrt=pd.DataFrame(reads)), covered


def test_idle_gaps_host_time_is_the_same_in_blocks_and_matches_a_plain_merge(monkeypatch):
    trace, covered_ns = _busy_host_gaps()
    [one_pass] = [f.to_dict() for f in analyze(trace).findings if f.rule == "gpu_idle"]
    monkeypatch.setattr(_common, "CALL_BLOCK", 7)
    [blocks] = [f.to_dict() for f in analyze(trace).findings if f.rule == "gpu_idle"]
    assert json.dumps(blocks, sort_keys=True, default=str) == json.dumps(one_pass, sort_keys=True, default=str)
    ev = one_pass["evidence"]
    assert ev["gaps"] == 19
    assert ev["host_during_gaps_ms"]["outside_cuda_and_os_calls_ms"] == pytest.approx(
        ev["idle_ms"] - covered_ns / 1e6, abs=1e-9)
