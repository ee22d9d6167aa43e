"""The capture tables that run over the activity block by block (to bound memory on long captures) give
what a plain whole-array computation gives, on data crossing many block boundaries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.capture import blockwise, intervals
from profiler.capture import series as S
from profiler.capture import streams


def _activity(rng: np.random.Generator, n: int) -> S.Activity:
    """Random GPU work on 2 devices and 3 streams, sorted by start, overlapping, with empty rows."""
    start = np.sort(rng.integers(0, 50 * n, n))
    end = start + rng.choice([0, 1, 5, 40, 300], n)
    kind = rng.choice([S.KERNEL, S.MEMCPY, S.MEMSET, S.GRAPH], n, p=[0.6, 0.2, 0.1, 0.1]).astype(np.int8)
    return S.Activity(kind=kind, start_ns=start, end_ns=end, device_id=rng.choice([3, 0], n),
                      stream_id=rng.choice([7, 13, 21], n), api_tid=np.full(n, 1), api_start_ns=start - 3,
                      bytes=np.zeros(n, np.int64), copy_kind=np.zeros(n, np.int8), pageable=np.zeros(n, bool),
                      is_launch=kind != S.MEMCPY, row=np.arange(n))


def _streams_reference(act: S.Activity) -> tuple[dict, dict]:
    """(busy ns, copies) per (device, stream), the union per device and the copy/compute overlap, row by mask."""
    busy, copy_ms = {}, {}
    for d, s in dict.fromkeys(zip(act.device_id.tolist(), act.stream_id.tolist())):
        m = (act.device_id == d) & (act.stream_id == s)
        busy[(d, s)] = intervals.union_length(act.start_ns[m], act.end_ns[m])
        c = m & (act.kind == S.MEMCPY)
        copy_ms[(d, s)] = int((act.end_ns[c] - act.start_ns[c]).sum()) / 1e6
    ov = copy_ns = comp_ns = union = 0
    for d in np.unique(act.device_id):
        m = act.device_id == d
        c, k = m & (act.kind == S.MEMCPY), m & (act.kind != S.MEMCPY)
        union += intervals.union_length(act.start_ns[m], act.end_ns[m])
        ov += intervals.overlap_length(act.start_ns[c], act.end_ns[c], act.start_ns[k], act.end_ns[k])
        copy_ns += intervals.union_length(act.start_ns[c], act.end_ns[c])
        comp_ns += intervals.union_length(act.start_ns[k], act.end_ns[k])
    return busy, {"copy_ms": copy_ms, "union": union, "ov": ov, "copy_ns": copy_ns, "comp_ns": comp_ns}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streams_in_blocks_equal_whole_unions(monkeypatch, seed):
    act = _activity(np.random.default_rng(seed), 2000)
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 37)  # pieces of one stream reach across blocks
    out = streams.streams_json(act)
    busy, ref = _streams_reference(act)
    assert {(r["device"], r["stream"]): r["busy_ms"] * 1e6 for r in out["streams"]} == pytest.approx(busy, abs=1e-6)
    assert {(r["device"], r["stream"]): r["copy_ms"] for r in out["streams"]} == ref["copy_ms"]
    assert [r["busy_ms"] for r in out["streams"]] == sorted((r["busy_ms"] for r in out["streams"]), reverse=True)
    assert sum(r["kernels"] + r["graph_launches"] + r["copies"] for r in out["streams"]) == \
        int((act.kind != S.MEMSET).sum())
    assert out["gpu_concurrency"] == sum(busy.values()) / ref["union"]
    cco = out["copy_compute_overlap"]
    assert ref["ov"] > 0  # the data does overlap copies with compute
    assert (cco["overlap_ms"], cco["copy_ms"], cco["compute_ms"]) == \
        (ref["ov"] / 1e6, ref["copy_ns"] / 1e6, ref["comp_ns"] / 1e6)
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 1 << 18)
    assert streams.streams_json(act) == out


def test_streams_unsorted_activity_is_taken_whole(monkeypatch):
    act = _activity(np.random.default_rng(5), 500)
    rev = S.Activity(**{k: getattr(act, k)[::-1].copy() for k in S.Activity.__dataclass_fields__
                        if k not in ("sorted_by_start", "row_base")})  # reversed: its order is not known
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 16)
    busy, ref = _streams_reference(rev)
    out = streams.streams_json(rev)
    assert {(r["device"], r["stream"]): r["busy_ms"] * 1e6 for r in out["streams"]} == pytest.approx(busy, abs=1e-6)
    assert out["copy_compute_overlap"]["overlap_ms"] == ref["ov"] / 1e6


def test_top_kernels_sorted_in_blocks_equal_groupby(monkeypatch):
    """Exact medians, totals and extremes per kernel name and per graph, with names' runs longer and
    shorter than a sort block, equal a pandas groupby over the whole rows."""
    import pandas as pd
    from types import SimpleNamespace

    from profiler.capture import analyze as A

    rng = np.random.default_rng(3)
    n = 3000
    sizes = [1, 2, 5, 40, 700]  # runs of one name shorter and longer than the block
    name = np.repeat([f"k{i}" for i in range(len(sizes))], sizes)
    name = np.concatenate([name, rng.choice([f"m{i}" for i in range(60)], n - len(name))])
    rng.shuffle(name)
    start = np.sort(rng.integers(0, 10 ** 9, n))
    end = start + rng.integers(-5, 10 ** 5, n)  # a few corrupt rows: zero duration
    kernels = pd.DataFrame({"name": pd.Categorical(name), "start_ns": start, "end_ns": end})
    gid = rng.choice([4, 9], 200)
    gs = np.sort(rng.integers(0, 10 ** 9, 200))
    graphs = pd.DataFrame({"graph_id": pd.array(gid, dtype="Int64"), "start_ns": gs,
                           "end_ns": gs + rng.integers(1, 10 ** 6, 200)})
    trace = SimpleNamespace(kernels=kernels, graphs=graphs)
    monkeypatch.setattr(A, "SORT_BLOCK_ROWS", 64)
    out = {r["name"]: r for r in A.top_kernels(trace, limit=1000)}

    replays = [f"CUDA graph {x} (replays)" for x in gid]
    dur = pd.concat([pd.DataFrame({"name": name, "d": np.maximum(end - start, 0)}),
                     pd.DataFrame({"name": replays, "d": graphs.end_ns - graphs.start_ns})])
    ref = dur.groupby("name")["d"].agg(["size", "sum", "median", "min", "max"])
    assert set(out) == set(ref.index)
    for nm, r in ref.iterrows():
        got = out[nm]
        assert (got["count"], got["total_ms"], got["min_ms"], got["max_ms"]) == \
            (r["size"], r["sum"] / 1e6, r["min"] / 1e6, r["max"] / 1e6), nm
        assert got["median_ms"] == pytest.approx(r["median"] / 1e6, rel=1e-12), nm
    assert [r["total_ms"] for r in out.values()] == sorted((r["total_ms"] for r in out.values()), reverse=True)
    monkeypatch.setattr(A, "SORT_BLOCK_ROWS", 1 << 18)
    assert A.top_kernels(trace, limit=1000) == list(out.values())
    # graph records without a graph id (and no kernel record at all) are one group of their own
    graphs["graph_id"] = pd.array([pd.NA if i % 3 else x for i, x in enumerate(gid)], dtype="Int64")
    rows = A.top_kernels(SimpleNamespace(kernels=kernels.iloc[:0], graphs=graphs), limit=10)
    assert sorted((r["name"], r["count"]) for r in rows) == sorted(
        (f"CUDA graph {x} (replays)", n) for x, n in
        pd.Series(["?" if i % 3 else str(x) for i, x in enumerate(gid)]).value_counts().items())


@pytest.mark.parametrize("seed", [0, 1])
def test_device_gaps_swept_in_blocks_equal_whole_gaps(monkeypatch, seed):
    from profiler.capture import summary

    rng = np.random.default_rng(seed)
    act = _activity(rng, 3000)
    act.end_ns[::97] = act.start_ns[::97] + 4000  # long rows reaching over many later ones (and blocks)
    focus = np.zeros(len(act), bool)
    focus[400:2500] = True  # a window inside each device's work
    monkeypatch.setattr(summary, "GAP_BLOCK_ROWS", 50)
    for foc in (None, focus):
        out = summary.device_gaps(act, foc)
        assert [d.device_id for d in out] == [0, 3]
        for d in out:
            m = act.device_id == d.device_id
            f = m if foc is None else m & foc
            a0, a1 = int(act.start_ns[f].min()), int(act.end_ns[f].max())
            gs, ge = intervals.gaps(act.start_ns[m], act.end_ns[m], a0, a1)
            assert len(gs) > 20
            assert (d.active_start_ns, d.active_end_ns) == (a0, a1)
            assert np.array_equal(d.gap_start_ns, gs) and np.array_equal(d.gap_end_ns, ge)
            assert d.busy_ns == intervals.clipped_union_length(act.start_ns[m], act.end_ns[m], [a0], [a1])[0]
            assert d.focused == (foc is not None)
    rev = S.Activity(**{k: getattr(act, k)[::-1].copy() for k in S.Activity.__dataclass_fields__
                        if k not in ("sorted_by_start", "row_base")})  # reversed: its order is not known
    for a, b in zip(summary.device_gaps(rev, focus[::-1].copy()), summary.device_gaps(act, focus)):
        assert np.array_equal(a.gap_start_ns, b.gap_start_ns) and a.busy_ns == b.busy_ns


def test_device_gaps_window_before_and_after_the_work(monkeypatch):
    """A focus window narrower than the work: rows before and after it give no gaps of their own."""
    from profiler.capture import summary

    start = np.array([0, 10, 30, 60, 100, 130])
    end = np.array([5, 20, 40, 70, 110, 140])
    n = len(start)
    act = S.Activity(kind=np.zeros(n, np.int8), start_ns=start, end_ns=end, device_id=np.zeros(n, np.int64),
                     stream_id=np.zeros(n, np.int64), api_tid=np.array([5, 5, -1, 6, 5, 5]), api_start_ns=start,
                     bytes=np.zeros(n, np.int64), copy_kind=np.zeros(n, np.int8), pageable=np.zeros(n, bool),
                     is_launch=np.ones(n, bool), row=np.arange(n))
    monkeypatch.setattr(summary, "GAP_BLOCK_ROWS", 2)
    (d,) = summary.device_gaps(act, np.array([False, True, False, True, False, False]))
    assert (d.active_start_ns, d.active_end_ns) == (10, 70)
    assert d.gap_start_ns.tolist() == [20, 40] and d.gap_end_ns.tolist() == [30, 60]
    assert d.busy_ns == 10 + 10 + 10 and d.launch_tids.tolist() == [5, 6]


def test_gap_histogram_in_blocks_equals_whole_histogram(monkeypatch):
    from types import SimpleNamespace

    from profiler.capture import analyze as A
    from profiler.capture import summary

    rng = np.random.default_rng(7)
    gs = np.cumsum(rng.integers(1, 10 ** 7, 1000))
    ge = gs + np.exp(rng.uniform(0, 16, 1000)).astype(np.int64) + 1  # 1 ns to ~9 ms
    dev = summary.DeviceGaps(0, int(gs[0]), int(ge[-1]), 5, gs, ge, np.array([1]))
    ctx = SimpleNamespace(devices=[dev], gpu_names=lambda: {0: "H200"})
    monkeypatch.setattr(A, "HISTOGRAM_BLOCK_ROWS", 33)
    (h,) = A._gap_histograms(ctx, 50.0)
    gap_us = (ge - gs) / 1e3
    assert h["counts"] == np.histogram(gap_us, bins=np.array(A.GAP_EDGES_US))[0].tolist()
    assert sum(h["counts"]) == 1000
    assert h["edges_us"][-1] == max(float(gap_us.max()) * 1.01, A.GAP_EDGES_US[-2] * 10)
    assert h["gaps_over_threshold"] == int((gap_us >= 50).sum()) > 0
    assert h["idle_over_threshold_ms"] == float((ge - gs)[gap_us >= 50].sum()) / 1e6


@pytest.mark.parametrize("seed", [0, 1])
def test_block_union_lengths_equal_whole_unions(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    n = 3000
    start = np.sort(rng.integers(0, 20 * n, n))
    end = start + rng.integers(-30, 400, n)  # reversed rows count as empty
    end[::211] += 20_000  # rows reaching over several blocks
    label = rng.integers(-1, 4, n)  # -1: left out
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 53)
    got = blockwise.union_lengths(start, end, lambda rows: label[rows], 4)
    want = [intervals.union_length(start[label == g], end[label == g]) for g in range(4)]
    assert got.tolist() == want
    keep = label >= 0
    assert blockwise.union_length(start, end, lambda rows: keep[rows]) == intervals.union_length(start[keep], end[keep])
    assert blockwise.union_length(start, end) == intervals.union_length(start, end)
    back = slice(None, None, -1)  # out of start order: one pass
    assert blockwise.union_lengths(start[back], end[back], lambda rows: label[back][rows], 4).tolist() == want
    assert blockwise.distinct(label, lambda rows: keep[rows]).tolist() == [0, 1, 2, 3]


def _reach_before(end: np.ndarray, initial: int) -> np.ndarray:
    """The reach before each row by one whole-length accumulate: the latest of ``initial`` and earlier ends."""
    before = np.full(len(end), initial, dtype=np.int64)
    if len(end) > 1:
        np.maximum(before[1:], np.maximum.accumulate(end)[:-1], out=before[1:])
    return before


@settings(max_examples=300, deadline=None)
@given(ivs=st.lists(st.tuples(st.integers(0, 200), st.integers(-5, 80)), max_size=60),
       rows=st.integers(1, 70), initial=st.sampled_from([blockwise.NO_REACH, 0, 100]))
def test_reach_carried_across_blocks_equals_one_accumulate(ivs, rows, initial):
    start = np.sort(np.array([a for a, _ in ivs], dtype=np.int64))
    end = start + np.array([b for _, b in ivs], dtype=np.int64)  # empty and reversed rows too
    reach = blockwise.Reach(initial)
    parts = [reach.before_each(end[sl]) for sl in blockwise.blocks(len(end), rows)]
    got = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    assert got.tolist() == _reach_before(end, initial).tolist()
    assert reach.value == max([initial] + end.tolist())


@pytest.mark.parametrize("rows", [1, 2, 7, 64, 1001, 5000])
def test_the_three_reach_sweeps_in_blocks_equal_one_accumulate(monkeypatch, rows):
    """The sweeps that carry the reach across blocks (the one-group union, the gap walk, the nesting of
    calls) give what one whole-length np.maximum.accumulate gives: blocks of one row, of sizes not dividing
    the 1001 rows, of all of them in one."""
    from profiler.capture import activity, summary
    from profiler.capture.activity import HostCalls, mark_top_level
    from profiler.capture.keys import ThreadKeys, sort_by_thread

    rng = np.random.default_rng(rows)
    n = 1001
    start = np.sort(rng.integers(0, 30 * n, n))
    end = start + rng.choice([-3, 0, 1, 20, 90, 600], n, p=[.1, .1, .2, .3, .28, .02])  # reversed, empty, long
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", rows)
    monkeypatch.setattr(summary, "GAP_BLOCK_ROWS", rows)
    monkeypatch.setattr(activity, "ROW_CHUNK", rows)
    covered = np.maximum(start, _reach_before(end, blockwise.NO_REACH))
    assert blockwise.union_length(start, end) == int(np.maximum(end - covered, 0).sum()) \
        == intervals.union_length(start, end)
    sel = rng.random(n) < 0.7
    lo, hi = int(start[10]), int(end[-20])
    s, e = start[sel & (end > start)], end[sel & (end > start)]
    before = _reach_before(e, lo)
    new = np.minimum(s, hi) > before
    want_start = np.append(before[new], max(lo, int(e.max()))) if max(lo, int(e.max())) < hi else before[new]
    gs, ge = summary._swept_gaps(start, end, sel, lo, hi)
    assert gs.tolist() == want_start.tolist() and len(gs) > 20
    assert (gs.tolist(), ge.tolist()) == tuple(a.tolist() for a in intervals.gaps(s, e, lo, hi))
    ends = np.maximum(end, start)  # calls of one thread, each ending no earlier than it starts
    keys = ThreadKeys([np.ones(n, np.int64)], [start, ends])
    srt = sort_by_thread(keys, np.ones(n, np.int64), start, later_first=ends)
    calls = HostCalls(tid=np.ones(n, np.int64), start_ns=start, end_ns=ends, name_code=np.zeros(n, np.int32),
                      names=np.array([""], dtype=object), category=np.zeros(n, np.int8),
                      top_level=np.ones(n, dtype=bool))
    mark_top_level(calls, srt, keys)
    in_order = srt.take(ends)
    nested = in_order <= _reach_before(in_order, blockwise.NO_REACH)
    assert calls.top_level[srt.order].tolist() == (~nested).tolist() and 50 < nested.sum() < n - 50


def test_start_order_is_checked_across_block_boundaries(monkeypatch):
    """Rows sorted within each block but not across a boundary are out of order: their union is the plain one."""
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 4)
    start = np.array([0, 10, 20, 30, 5, 40, 50, 60])  # 30 then 5: only the boundary is out of order
    end = start + 3
    assert not blockwise.in_start_order(start) and blockwise.in_start_order(np.sort(start))
    assert blockwise.in_start_order(start, True) and not blockwise.in_start_order(np.sort(start), False)
    assert blockwise.union_length(start, end) == intervals.union_length(start, end) == 24
    assert blockwise.union_length(start, end, sorted_by_start=True) == 21  # swept as if sorted: the caller's word


@pytest.mark.parametrize("name", ["multistream", "transfer_bound", "harness_cls_streams", "launch_bound", "graph"])
def test_analysis_in_small_blocks_is_identical(monkeypatch, name):
    """Every number of the analysis of a real capture stays the same when each blockwise pass runs over
    blocks of a few dozen rows (many boundaries inside streams, instances, names and gaps)."""
    import json

    from profiler.capture import analyze as A
    from profiler.capture import summary
    from profiler.capture.cache import load_trace_cached
    from profiler.capture.trace import FRAMES
    from tests.conftest import SAMPLE_TRACES

    path = SAMPLE_TRACES / f"{name}.sqlite"
    trace = load_trace_cached(path, tables=[f for f in FRAMES if f != "sync"], columns=A.ANALYSIS_COLUMNS, cache=False)
    whole = json.dumps(A.analyze(trace).to_json(), sort_keys=True, default=str)
    for module, const, rows in ((blockwise, "BLOCK_ROWS", 61), (blockwise, "DISTINCT_BLOCK_ROWS", 17),
                                (summary, "GAP_BLOCK_ROWS", 29), (summary, "PAIR_CHUNK", 97),
                                (A, "SORT_BLOCK_ROWS", 13), (A, "HISTOGRAM_BLOCK_ROWS", 11)):
        monkeypatch.setattr(module, const, rows)
    assert json.dumps(A.analyze(trace).to_json(), sort_keys=True, default=str) == whole


def test_overlap_by_name_in_blocks_equals_pairwise(monkeypatch):
    from profiler.capture import summary

    rng = np.random.default_rng(11)
    gs = np.cumsum(rng.integers(50, 200, 40))
    ge = gs + rng.integers(1, 40, 40)
    start = rng.integers(0, int(ge[-1]) + 50, 700)
    end = start + rng.choice([0, 5, 30, 400], 700)  # some reach over several gaps
    monkeypatch.setattr(blockwise, "BLOCK_ROWS", 41)
    g, q, ov = summary.overlap_by_name(gs, ge, start, end)
    want = [(j, i, min(end[i], ge[j]) - max(start[i], gs[j])) for i in range(700) for j in range(40)
            if min(end[i], ge[j]) > max(start[i], gs[j])]
    assert sorted(zip(g.tolist(), q.tolist(), ov.tolist()), key=lambda t: (t[1], t[0])) == want
    assert (np.diff(q) >= 0).all() and len(want) > 100


def _every_capture() -> list:
    from tests.conftest import SAMPLE_TRACES, SHARED, nsys_fixture_files

    return (sorted(SAMPLE_TRACES.glob("*.sqlite")) + nsys_fixture_files()
            + sorted((SHARED / "fixtures" / "nsys-tensorrt").glob("*.sqlite")))


def _block_constants() -> list:
    from profiler.capture import activity, ids, instance_metrics, keys, summary, trace
    from profiler.capture import analyze as A
    from profiler.rules.capture import _common

    return [(keys, "ROW_CHUNK"), (activity, "ROW_CHUNK"), (ids, "ROW_CHUNK"), (trace, "_DECODE_ROWS"),
            (blockwise, "BLOCK_ROWS"), (blockwise, "DISTINCT_BLOCK_ROWS"), (summary, "GAP_BLOCK_ROWS"),
            (summary, "PAIR_CHUNK"), (instance_metrics, "PAIR_CHUNK"), (S, "PAIR_CHUNK"), (A, "SORT_BLOCK_ROWS"),
            (A, "HISTOGRAM_BLOCK_ROWS"), (_common, "CALL_BLOCK"), (_common, "MEMBER_BLOCK")]


@pytest.mark.parametrize("path", _every_capture(), ids=lambda p: p.name)
def test_every_capture_gives_the_same_analysis_with_every_block_small(monkeypatch, path):
    """The chunked path: with every block size of the loader, the series table, the tables and the rules
    set to a few hundred rows (boundaries inside threads, instances, names, gaps and calls), the analysis
    JSON of each sample trace and real capture (those in ../shared when present) is byte-identical."""
    import json

    from profiler.capture.analyze import analyze_path

    whole = json.dumps(analyze_path(path, cache=False).to_json(), sort_keys=True, default=str)
    for i, (module, const) in enumerate(_block_constants()):
        assert getattr(module, const) >= 1 << 16, (module.__name__, const)  # the defaults are large
        monkeypatch.setattr(module, const, (101, 211, 307, 401, 503)[i % 5])
    assert json.dumps(analyze_path(path, cache=False).to_json(), sort_keys=True, default=str) == whole


def test_gaps_of_at_least_match_the_plain_selection_in_any_block_size(monkeypatch):
    """DeviceGaps.gaps_of_at_least walks the gaps a block at a time (gpu_idle and impact held every gap's
    length at once: 200 MB at 25 M kernels); the indices are those of the plain comparison."""
    import numpy as np

    from profiler.capture import blockwise
    from profiler.capture.summary import DeviceGaps

    rng = np.random.default_rng(7)
    start = np.cumsum(rng.integers(1, 100_000, 5000))
    end = start + rng.integers(0, 200_000, 5000)
    d = DeviceGaps(0, 0, int(end.max()), 0, start, end, np.zeros(0, np.int64))
    for rows in (7, 4096, 1 << 18):
        monkeypatch.setattr(blockwise, "BLOCK_ROWS", rows)
        for min_ns in (0.0, 1.0, 50_000.0, 150_000.0):
            assert np.array_equal(d.gaps_of_at_least(min_ns), np.flatnonzero(d.gap_ns >= min_ns)), (rows, min_ns)
