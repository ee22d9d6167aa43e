"""The (thread, time) sorted orders and window sums of the series table, against brute force, with the row
chunk made small so every chunked path (carried segments, carried furthest end, chunked gathers) runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.capture import activity, ids, keys
from profiler.capture.activity import HostCalls, mark_top_level
from profiler.capture.keys import Sorted, ThreadKeys, WindowSums, sort_by_thread

CHUNK = 3


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(keys, "ROW_CHUNK", CHUNK)
    monkeypatch.setattr(activity, "ROW_CHUNK", CHUNK)
    monkeypatch.setattr(ids, "ROW_CHUNK", CHUNK)


windows = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-10**12, 10**12), max_size=40), mask=st.lists(st.booleans(), max_size=40),
       wins=windows)
def test_window_sums_equal_brute_force(values, mask, wins):
    n = min(len(values), len(mask))
    v, m = np.array(values[:n], dtype=np.int64), np.array(mask[:n], dtype=bool)
    lo = np.array([min(a, b) for a, b in wins], dtype=np.int64)
    hi = np.array([max(a, b) for a, b in wins], dtype=np.int64)
    sums = WindowSums(lo, hi, n)
    clip = [(min(a, n), min(b, n)) for a, b in zip(lo, hi)]
    assert sums(v).tolist() == [int(v[a:b].sum()) for a, b in clip]
    assert sums(m).tolist() == [int(m[a:b].sum()) for a, b in clip]  # a boolean column is counted
    assert sums(v, m).tolist() == [int(v[a:b][m[a:b]].sum()) for a, b in clip]


def test_a_segment_longer_than_a_chunk_is_summed_across_chunks():
    v = np.arange(1, 11, dtype=np.int64)  # 10 rows, chunks of 3: [0, 10) spans four chunks
    mask = np.ones(10, dtype=bool)
    mask[4] = False
    sums = WindowSums(np.array([0, 2, 9]), np.array([10, 8, 10]), 10)
    assert sums(v, mask).tolist() == [55 - 5, 3 + 4 + 6 + 7 + 8, 10]
    assert sums(mask).tolist() == [9, 5, 1]


rows = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 10)), max_size=30)


def _sorted_calls(rows):
    """(thread, start, end) rows as arrays, their keys and their (thread, time) order."""
    tid = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = start + np.array([r[2] for r in rows], dtype=np.int64)
    k = ThreadKeys([tid], [start, end])
    return tid, start, end, k, sort_by_thread(k, tid, start, later_first=end)


@settings(max_examples=200, deadline=None)
@given(rows=rows)
def test_sort_by_thread_orders_by_thread_time_then_latest_end_first(rows):
    tid, start, end, k, srt = _sorted_calls(rows)
    expected = np.lexsort((np.arange(len(rows)), -end, start, tid))
    assert srt.order.tolist() == expected.tolist()
    assert srt.identity == (expected.tolist() == list(range(len(rows))))
    assert srt.take(start).tolist() == start[expected].tolist()
    assert srt.part(start, 1, len(rows)).tolist() == start[expected][1:].tolist()


@settings(max_examples=200, deadline=None)
@given(rows=rows)
def test_a_call_is_nested_when_an_earlier_call_of_its_thread_covers_it(rows):
    tid, start, end, k, srt = _sorted_calls(rows)
    calls = HostCalls(tid=tid, start_ns=start, end_ns=end, name_code=np.zeros(len(rows), np.int32),
                      names=np.array([""], dtype=object), category=np.zeros(len(rows), np.int8),
                      top_level=np.ones(len(rows), dtype=bool))
    mark_top_level(calls, srt, k)
    order = srt.order.tolist()
    for pos, row in enumerate(order):  # covered by a call sorted before it on the same thread
        covered = any(tid[r] == tid[row] and end[r] >= end[row] for r in order[:pos])
        assert calls.top_level[row] == (not covered)


def test_take_of_an_identity_order_is_the_array_itself_and_of_another_order_a_gather():
    v = np.arange(4)
    ident = Sorted(order=None, key=None, identity=True, n=4)
    assert ident.take(v) is v and ident.order.tolist() == [0, 1, 2, 3] and len(ident) == 4
    assert ident.rows(np.array([2, 3])).tolist() == [2, 3] and ident.part(v, 1, 3).tolist() == [1, 2]
    perm = Sorted(order=np.array([3, 1, 0, 2], dtype=np.int32), key=None)
    assert perm.part(v * 10, 1, 3).tolist() == [10, 0] and perm.rows(np.array([0, 3])).tolist() == [3, 2]
    with pytest.raises(ValueError):
        Sorted(order=None, key=None)  # a permutation is needed unless the rows are in order
    assert Sorted(order=np.array([1, 0], dtype=np.int32), key=None).take(np.array([5, 6])).tolist() == [6, 5]


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(-2**40, 2**40) | st.integers(0, 5), max_size=40))
def test_factorize_ids_in_chunks_equals_pandas_factorize(values):
    import pandas as pd

    arr = np.array(values, dtype=np.int64)
    codes, uniq = ids.factorize_ids(arr)
    want_codes, want_uniq = pd.factorize(arr)
    assert codes.tolist() == want_codes.tolist() and uniq.tolist() == want_uniq.tolist()
    assert codes.dtype == np.int32


@pytest.mark.parametrize("name", ["graph", "multistream"])
def test_the_analysis_never_makes_the_order_of_an_identity(monkeypatch, name):
    """Rows already in (thread, start) order (most captures' activity and API calls) keep no permutation,
    and the analysis reads them through rows/part/take: the row-length arange of ``order`` is never made."""
    # default blocks: a module first imported here (the rules) would otherwise keep this file's 3-row ones
    monkeypatch.undo()
    from profiler.capture import analyze as A
    from profiler.capture import series as S
    from profiler.capture.cache import load_trace_cached
    from profiler.capture.trace import FRAMES
    from tests.conftest import SAMPLE_TRACES

    trace = load_trace_cached(SAMPLE_TRACES / f"{name}.sqlite", tables=[f for f in FRAMES if f != "sync"],
                              columns=A.ANALYSIS_COLUMNS, cache=False)
    table = S.build_series(trace)
    assert table.api_sorted.identity and table.act_sorted.identity == (name == "graph")
    made, real = [], Sorted.order

    def order(self: Sorted) -> np.ndarray:
        if self.identity:
            made.append(len(self))
        return real.fget(self)

    monkeypatch.setattr(Sorted, "order", property(order))
    A.analyze(trace).to_json()
    assert made == []
