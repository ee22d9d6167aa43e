"""gpu_idle's host evidence in bounded memory: the time the launching threads' calls cover inside the GPU's
idle gaps is a union over every thread and both call tables, read as a merge of the threads' calls in
start order a block at a time. It must equal one plain union of all the pieces, and the rule's transient
memory must not grow with the number of calls in the gaps."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest

from profiler.capture import intervals
from profiler.capture.analyze import AnalysisOptions, analyze
from profiler.capture.series import build_series
from profiler.capture.trace import Trace
from profiler.rules import run_rules
from profiler.rules.capture import _common
from tests.capture_builders import T, kernels

LAUNCH_TIDS = (5, 6)


def _calls(rng: np.random.Generator, n: int, span_ns: int, tids: tuple[int, ...], name: str,
           max_len_ns: int) -> pd.DataFrame:
    """``n`` calls at random starts over ``[0, span_ns)`` on the threads ``tids``, lengths up to
    ``max_len_ns`` (so calls nest, overlap partly and cross gap edges), rows in no particular order."""
    start = rng.integers(0, span_ns, n)
    return pd.DataFrame({"name": np.array([name, name + "_b"], dtype=object)[rng.integers(0, 2, n)],
                         "start_ns": start, "end_ns": start + rng.integers(1, max_len_ns, n),
                         "global_tid": np.array(tids)[rng.integers(0, len(tids), n)], "pid": 1, "category": "other",
                         "correlation_id": np.arange(n) + 10_000})


def _busy_threads(n_osrt: int, seed: int = 0, osrt_len_ns: int = 60 * T, osrt_tids=(5, 6, 9)) -> Trace:
    """Eleven kernels 10 ms apart launched alternately by threads 5 and 6; OS runtime calls at random on
    ``osrt_tids``, and 300 CUDA API calls on threads 5, 6 and 9 (which launches nothing)."""
    rng = np.random.default_rng(seed)
    span = 10 * 10_020 * T
    krows = [(i * 10_020 * T, i * 10_020 * T + 20 * T, LAUNCH_TIDS[i % 2], i * 10_020 * T - 2 * T, i + 1)
             for i in range(11)]
    osrt = _calls(rng, n_osrt, span, osrt_tids, "poll", osrt_len_ns)
    osrt["tid"] = osrt["global_tid"]
    api = _calls(rng, 300, span, (5, 6, 9), "cudaStreamSynchronize", 400 * T)
    api["tid"], api["api"] = api["global_tid"], "runtime"
    return Trace(kernels=kernels(*krows), api=api, osrt=osrt)


def _plain_covered_ns(trace: Trace, gs: np.ndarray, ge: np.ndarray, gap_tid: np.ndarray | None = None) -> int:
    """The union of every launching-thread call's pieces inside the gaps, taken all at once (a call nested
    in another of its thread adds nothing to the union, so every call can be taken); with ``gap_tid``, only
    the calls of that thread count in each gap."""
    calls = pd.concat([trace.api, trace.osrt])
    calls = calls[calls["global_tid"].isin(LAUNCH_TIDS)]
    s, e = calls["start_ns"].to_numpy(), calls["end_ns"].to_numpy()
    g = np.arange(len(gs)).repeat(len(s))
    ps, pe = np.maximum(np.tile(s, len(gs)), gs[g]), np.minimum(np.tile(e, len(gs)), ge[g])
    keep = pe > ps
    if gap_tid is not None:
        keep &= np.tile(calls["global_tid"].to_numpy(), len(gs)) == gap_tid[g]
    return int(intervals.union_length_by_group(g[keep], ps[keep], pe[keep], len(gs)).sum())


def _tally(table, tids: tuple[int, ...], gs: np.ndarray, ge: np.ndarray):
    """The host tally of the calls of ``tids`` in the gaps, read window by window (no gap's names kept)."""
    from profiler.rules.capture._idle_host import _HostTally, call_windows  # here: the memory test runs on older trees

    tally = _HostTally(gs, ge, np.zeros(len(gs), dtype=bool), {"cuda_api": table.api, "os_runtime": table.osrt})
    latest = np.iinfo(np.int64).min  # the latest start of the windows so far
    for window in call_windows(table, np.array(tids)):
        tally.add(window)
        starts = []
        for label, rows in window.items():
            calls = table.api if label == "cuda_api" else table.osrt
            assert np.isin(calls.tid[rows], tids).all() and calls.top_level[rows].all()
            starts.append(calls.start_ns[rows])
        starts = np.concatenate(starts)
        if len(starts):
            assert starts.min() >= latest  # no call starts before one of an earlier window
            latest = int(starts.max())
    return tally


@pytest.mark.parametrize("block", [7, 101, 1 << 16])
def test_covered_time_in_gaps_is_one_plain_union(block, monkeypatch):
    trace = _busy_threads(3_000)
    table = build_series(trace)
    assert not table.osrt_sorted.identity  # rows out of thread order: the merge reads them through the sort
    rng = np.random.default_rng(1)
    edges = np.sort(rng.choice(100 * 1_000 * T, 40, replace=False))
    gs, ge = edges[0::2], edges[1::2]  # 20 disjoint gaps of random lengths
    want = _plain_covered_ns(trace, gs, ge)
    monkeypatch.setattr(_common, "CALL_BLOCK", block)
    tally = _tally(table, LAUNCH_TIDS, gs, ge)
    assert tally.covered_ns == want
    for label, calls in (("cuda_api", table.api), ("os_runtime", table.osrt)):  # time per name, call by call
        m = calls.top_level & np.isin(calls.tid, LAUNCH_TIDS)
        ov = np.clip(np.minimum(calls.end_ns[m, None], ge) - np.maximum(calls.start_ns[m, None], gs), 0, None)
        by_name = pd.Series(ov.sum(axis=1), index=calls.name_of(np.flatnonzero(m))).groupby(level=0).sum()
        assert tally.top_names(label) == pytest.approx((by_name[by_name > 0] / 1e6).to_dict(), abs=1e-12)
    assert 0 < want < int((ge - gs).sum())  # the calls cover part of the gaps, not none and not all
    assert _tally(table, (5,), gs, ge).covered_ns < want  # one thread covers less than both
    assert _tally(table, (7,), gs, ge).covered_ns == 0  # a thread with no calls covers nothing


def _rule_peak_bytes(trace: Trace) -> tuple[int, dict]:
    """The gpu_idle rule's peak traced memory beyond what was held when it started, and its evidence."""
    ctx = analyze(trace, AnalysisOptions(include_setup=True)).context
    tracemalloc.start()
    try:
        held, _ = tracemalloc.get_traced_memory()
        [finding] = run_rules("capture", ctx, only=["gpu_idle"]).findings
        peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    return peak, finding.evidence


def test_gpu_idle_transient_memory_does_not_grow_with_the_calls_in_the_gaps(monkeypatch):
    """100,000 OS runtime calls of the launching threads, 1 us long on average, nearly all in the ten gaps,
    read in blocks of 512 calls: keeping every call's piece of a gap (16 bytes: start and end) until the
    union is summed takes about as much as the calls' own start and end columns (1.6 MB); read as a merge,
    the rule holds a few blocks, however many calls there are. The bound allows 2 bytes per call."""
    n = 100_000
    trace = _busy_threads(n, seed=2, osrt_len_ns=2 * T, osrt_tids=LAUNCH_TIDS)
    monkeypatch.setattr(_common, "CALL_BLOCK", 512)
    peak, ev = _rule_peak_bytes(trace)
    input_bytes = 16 * n  # the OS runtime calls' start and end columns
    assert peak < input_bytes / 8, (peak, input_bytes)
    assert ev["gaps"] == 10
    # each gap counts the calls of the thread that launched the kernel ending it (threads 5 and 6 alternate)
    ending = np.array([LAUNCH_TIDS[(i + 1) % 2] for i in range(10)])
    covered = _plain_covered_ns(trace, *_gaps_of(trace), gap_tid=ending)
    assert covered < _plain_covered_ns(trace, *_gaps_of(trace))
    assert ev["host_during_gaps_ms"]["outside_cuda_and_os_calls_ms"] == pytest.approx(
        ev["idle_ms"] - covered / 1e6, abs=1e-9)


def _gaps_of(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The ten gaps between the eleven kernels (each gap's end is the next kernel's start)."""
    k = trace.kernels.sort_values("start_ns")
    return k["end_ns"].to_numpy()[:-1], k["start_ns"].to_numpy()[1:]


def test_the_threads_a_gap_waited_for_are_all_that_launched_work_starting_at_its_end():
    """The review's ties: another device's row at the same nanosecond, two streams starting together, and
    an empty row (which the gap sweep skips) must neither hide nor replace a launching thread."""
    from types import SimpleNamespace

    from profiler.capture.summary import DeviceGaps
    from profiler.rules.capture._idle_host import _GapThreads

    start = np.array([100, 100, 200, 200, 300, 300, 400])
    act = SimpleNamespace(start_ns=start, end_ns=start + np.array([5, 5, 5, 5, 0, 5, 5]),
                          device_id=np.array([1, 0, 0, 0, 0, 0, 0]), api_tid=np.array([9, 6, 5, 6, 7, 5, -1]))
    d = DeviceGaps(device_id=0, active_start_ns=0, active_end_ns=500, busy_ns=0, gap_start_ns=np.zeros(0),
                   gap_end_ns=np.zeros(0), launch_tids=np.array([5, 6, 7]))
    waited = _GapThreads(act, d, np.array([100, 200, 300, 400, 450]))
    g = np.repeat(np.arange(5), 3)
    tid = np.tile([5, 6, 7], 5)
    assert waited.mine(g, tid).reshape(5, 3).tolist() == [
        [False, True, False],   # device 1's row at 100 is not this device's: thread 6 ended the gap
        [True, True, False],    # two streams start at 200: both threads
        [True, False, False],   # the empty row of thread 7 ends nothing
        [True, True, True],     # the work at 400 has no known launching thread: every thread counts
        [True, True, True]]     # nothing starts at 450: every thread counts
