"""The series table's row passes made a block at a time (launch marking, per-instance sums, narrow name
codes) against the plain whole-array computations they replace, on random rows and every block size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.capture import activity, frames, keys
from profiler.capture.keys import WindowSums


def _first_of_launch_by_sort(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    out = np.ones(len(corr), dtype=bool)
    known = np.flatnonzero(corr >= 0)
    order = known[np.lexsort((known, corr[known], pid[known]))]
    dup = (corr[order][1:] == corr[order][:-1]) & (pid[order][1:] == pid[order][:-1])
    out[order[1:][dup]] = False
    return out


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 18])
def test_first_of_launch_matches_the_sort_for_rising_repeated_and_shuffled_ids(monkeypatch, block):
    monkeypatch.setattr(activity, "ROW_CHUNK", block)
    rng = np.random.default_rng(block)
    seen_fast = seen_dup = 0
    for _ in range(400):
        n = int(rng.integers(0, 30))
        pid = np.broadcast_to(np.int32(rng.integers(0, 3)), (n,)) if rng.random() < 0.5 else rng.integers(0, 2, n)
        shape = rng.random()
        corr = (np.arange(n) - 1 if shape < 0.3 else np.sort(rng.integers(-1, 20, n)) if shape < 0.6
                else rng.integers(-1, 20, n))
        got = activity._first_of_launch(pid, corr)
        np.testing.assert_array_equal(got, _first_of_launch_by_sort(pid, corr))
        seen_fast += n > 1 and activity._distinct_ids(pid, corr)
        seen_dup += not got.all()
    assert seen_fast > 20 and seen_dup > 20  # both the sort-free path and the duplicates were exercised


@pytest.mark.parametrize("block", [1, 5, 64, 1 << 18])
def test_window_sums_a_block_at_a_time_equal_the_whole_array_sums(monkeypatch, block):
    monkeypatch.setattr(keys, "ROW_CHUNK", block)
    rng = np.random.default_rng(7 + block)
    for _ in range(60):
        n = int(rng.integers(0, 300))
        lo = rng.integers(0, n + 1, int(rng.integers(0, 40)))
        hi = np.minimum(lo + rng.integers(0, 50, len(lo)), n)
        values = rng.integers(-5, 1_000_000_000_000, n)
        mask = rng.random(n) < rng.random()
        sums = WindowSums(lo, hi, n)
        got = sums.columns(lambda a, b: [values[a:b], np.where(mask[a:b], values[a:b], 0), mask[a:b]], 3)
        plain = [np.array([values[x:y].sum() for x, y in zip(lo, hi)], dtype=np.int64),
                 np.array([values[x:y][mask[x:y]].sum() for x, y in zip(lo, hi)], dtype=np.int64),
                 np.array([mask[x:y].sum() for x, y in zip(lo, hi)], dtype=np.int64)]
        for g, p in zip(got, plain):
            np.testing.assert_array_equal(g, p)


@pytest.mark.parametrize("n_names", [1, 127, 128, 300, 40_000])
def test_small_codes_name_the_same_rows_as_int64_codes(n_names):
    rng = np.random.default_rng(n_names)
    pool = np.array([f"k{i}" for i in range(n_names)], dtype=object)
    values = pool[rng.integers(0, n_names, 2000)]
    values[rng.random(2000) < 0.05] = None  # missing names take the fill's code
    for column in (pd.Series(values, dtype="category"), pd.Series(values, dtype=object)):
        df = pd.DataFrame({"name": column})
        wide, wide_names = frames.factor(df, "name", "?")
        narrow, narrow_names = frames.factor(df, "name", "?", small=True)
        assert narrow.itemsize <= 2 and wide.dtype == np.int64
        np.testing.assert_array_equal(narrow_names[narrow], wide_names[wide])
        assert (narrow_names[narrow] == "?").sum() == pd.isna(values).sum()


def test_sparse_bytes_give_the_dense_column_by_positions_masks_and_slices():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        dense = np.where(rng.random(n) < rng.random(), rng.integers(1, 1 << 40, n), 0)
        col = activity.SparseInts.from_dense(dense)
        assert len(col.rows) == np.count_nonzero(dense)
        pos = rng.integers(0, n, int(rng.integers(0, 80))) if n else np.zeros(0, np.int64)
        mask = rng.random(n) < 0.5
        lo, hi = sorted(rng.integers(0, n + 3, 2))
        for index in (pos, rng.permutation(n), mask, slice(lo, hi), slice(lo, None, 2)):
            np.testing.assert_array_equal(col[index], dense[index])
            taken = col.take(index)
            assert len(taken) == len(dense[index])
            np.testing.assert_array_equal(taken[np.arange(len(taken))], dense[index])


def _trace_frames(rng: np.random.Generator, interleave: bool) -> dict[str, pd.DataFrame]:
    """Kernels, copies and memsets with distinct starts; interleaved in time, or each kind after the last."""
    counts = {"kernels": 40, "memcpy": 15, "memset": 5}
    starts = rng.permutation(10 * sum(counts.values()))[:sum(counts.values())] if interleave \
        else np.arange(sum(counts.values())) * 10
    out, at = {}, 0
    for name, n in counts.items():
        start = np.sort(starts[at:at + n]) if interleave else starts[at:at + n]
        at += n
        frame = pd.DataFrame({"start_ns": start, "end_ns": start + 3, "api_tid": np.full(n, 7)})
        if name != "kernels":
            frame["bytes"] = np.where(rng.random(n) < 0.8, rng.integers(1, 1 << 33, n), 0)
        out[name] = frame
    return out


@pytest.mark.parametrize("interleave", [True, False])
def test_activity_bytes_and_frame_rows_when_kernels_and_copies_interleave(interleave):
    from types import SimpleNamespace

    rng = np.random.default_rng(3)
    frames_ = _trace_frames(rng, interleave)
    act = activity.build_activity(SimpleNamespace(**frames_))
    assert (act.row is None) == (not interleave)  # rows kept in trace order derive their frame rows
    assert np.all(np.diff(act.start_ns) >= 0)
    names = ("kernels", "memcpy", "memset")
    # every position's frame row holds its start, and its bytes are that row's (0 for a kernel)
    for index in (np.ones(len(act), bool), act.start_ns >= 200, slice(12, 47)):
        sub = act.select(index)
        rows = sub.frame_rows(np.arange(len(sub)))
        want_start = [frames_[names[k]]["start_ns"].iat[r] for k, r in zip(sub.kind, rows)]
        want_bytes = [frames_[names[k]]["bytes"].iat[r] if k else 0 for k, r in zip(sub.kind, rows)]
        np.testing.assert_array_equal(sub.start_ns, want_start)
        np.testing.assert_array_equal(sub.bytes[np.arange(len(sub))], want_bytes)
        assert sum(want_bytes) > 0
    copies = np.flatnonzero(act.kind == frames.MEMCPY)
    assert int(act.bytes[copies].sum()) == int(frames_["memcpy"]["bytes"].sum())
