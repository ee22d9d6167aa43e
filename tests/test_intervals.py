"""Interval arithmetic against a brute-force reference (covered integer points) and its algebra."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.capture.intervals import (
    clip, clipped_union_length, gaps, overlap_length, union, union_by_group, union_length,
    union_length_by_group,
)

LO, HI = -60, 60  # small integer axis so a boolean mask is an exact reference

interval = st.tuples(st.integers(LO, HI), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1]))
interval_lists = st.lists(interval, max_size=40)


def arrays(ivs):
    s = np.array([a for a, _ in ivs], dtype=np.int64)
    e = np.array([b for _, b in ivs], dtype=np.int64)
    return s, e


def covered(ivs, lo=LO, hi=HI + 31) -> np.ndarray:
    """Mask of integer points t with some interval [s, e) containing t."""
    mask = np.zeros(hi - lo + 1, dtype=bool)
    for s, e in ivs:
        mask[s - lo:e - lo] = True
    return mask


@settings(max_examples=300, deadline=None)
@given(interval_lists)
def test_union_matches_brute_force(ivs):
    s, e = arrays(ivs)
    us, ue = union(s, e)
    # pieces are sorted, non-empty, disjoint and not touching
    assert (ue > us).all()
    assert (us[1:] > ue[:-1]).all()
    # and cover exactly the points the inputs cover
    assert covered(list(zip(us.tolist(), ue.tolist()))).tolist() == covered(ivs).tolist()
    assert union_length(s, e) == int(covered(ivs).sum())


@settings(max_examples=200, deadline=None)
@given(interval_lists)
def test_union_length_bounds_and_idempotence(ivs):
    s, e = arrays(ivs)
    length = union_length(s, e)
    assert length <= int((e - s).sum())
    if len(ivs):
        nonempty = e > s
        if nonempty.any():
            assert length <= int(e[nonempty].max() - s[nonempty].min())
    us, ue = union(s, e)
    us2, ue2 = union(us, ue)
    assert us2.tolist() == us.tolist() and ue2.tolist() == ue.tolist()
    # the union of a set together with its own union is the union
    us3, ue3 = union(np.concatenate([s, us]), np.concatenate([e, ue]))
    assert us3.tolist() == us.tolist() and ue3.tolist() == ue.tolist()
    # order does not matter
    perm = np.random.default_rng(len(ivs)).permutation(len(s))
    assert union_length(s[perm], e[perm]) == length


@settings(max_examples=200, deadline=None)
@given(interval_lists, st.integers(LO - 10, HI), st.integers(0, 100))
def test_gaps_and_union_tile_the_window(ivs, w0, width):
    s, e = arrays(ivs)
    w1 = w0 + width
    gs, ge = gaps(s, e, w0, w1)
    cs, ce = clip(s, e, w0, w1)
    busy = union_length(cs, ce)
    assert int((ge - gs).sum()) + busy == width
    assert (ge > gs).all()
    # every gap point is uncovered and inside the window
    mask = covered(ivs, lo=LO - 10, hi=HI + 131)
    for a, b in zip(gs.tolist(), ge.tolist()):
        assert w0 <= a < b <= w1
        assert not mask[a - (LO - 10):b - (LO - 10)].any()


@settings(max_examples=200, deadline=None)
@given(interval_lists)
def test_gaps_without_window_fill_the_span(ivs):
    s, e = arrays(ivs)
    us, ue = union(s, e)
    gs, ge = gaps(s, e)
    if len(us) == 0:
        assert len(gs) == 0
        return
    assert int((ge - gs).sum()) + union_length(s, e) == int(ue[-1] - us[0])
    assert len(gs) == len(us) - 1


@settings(max_examples=200, deadline=None)
@given(interval_lists, st.lists(interval, max_size=15))
def test_clipped_union_length_per_window(ivs, windows):
    s, e = arrays(ivs)
    ws, we = arrays(windows)
    got = clipped_union_length(s, e, ws, we)
    mask = covered(ivs)
    want = [int(mask[a - LO:b - LO].sum()) for a, b in windows]
    assert got.tolist() == want
    # clipping the intervals first gives the same answer window by window
    for (a, b), g in zip(windows, got.tolist()):
        cs, ce = clip(s, e, a, b)
        assert union_length(cs, ce) == g


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), interval), max_size=40))
def test_union_by_group_equals_union_of_each_group(rows):
    g = np.array([r[0] for r in rows], dtype=np.int64)
    s = np.array([r[1][0] for r in rows], dtype=np.int64)
    e = np.array([r[1][1] for r in rows], dtype=np.int64)
    gg, us, ue = union_by_group(g, s, e)
    lengths = union_length_by_group(g, s, e, n_groups=5)
    for k in range(5):
        ks, ke = union(s[g == k], e[g == k])
        sel = gg == k
        assert us[sel].tolist() == ks.tolist() and ue[sel].tolist() == ke.tolist()
        assert lengths[k] == union_length(s[g == k], e[g == k])


@settings(max_examples=100, deadline=None)
@given(interval_lists, interval_lists)
def test_overlap_length(a, b):
    sa, ea = arrays(a)
    sb, eb = arrays(b)
    assert overlap_length(sa, ea, sb, eb) == int((covered(a) & covered(b)).sum())


def test_known_values_and_edge_cases():
    # two overlapping streams and a later kernel: busy 10 + 5, not the 18 of summed durations
    s = np.array([0, 5, 3, 20])
    e = np.array([4, 10, 6, 25])
    assert union(s, e)[0].tolist() == [0, 20] and union(s, e)[1].tolist() == [10, 25]
    assert union_length(s, e) == 15
    assert gaps(s, e)[0].tolist() == [10] and gaps(s, e)[1].tolist() == [20]
    assert clipped_union_length(s, e, [2, 0, 100], [22, 30, 200]).tolist() == [10, 15, 0]
    # touching intervals merge; reversed ones count as empty; empty input is fine
    assert union([0, 5], [5, 9])[0].tolist() == [0]
    assert union_length([10], [4]) == 0
    assert union_length([], []) == 0
    assert clipped_union_length([], [], [0], [5]).tolist() == [0]
    assert union_length_by_group([], [], [], n_groups=2).tolist() == [0, 0]
    with pytest.raises(ValueError):
        union([1, 2], [3])


def test_large_and_negative_timestamps():
    base = -(2**62)
    s = np.array([base, base + 10, 2**62 - 100], dtype=np.int64)
    e = np.array([base + 20, base + 30, 2**62], dtype=np.int64)
    assert union_length(s, e) == 130
    assert union_length_by_group([7, 7, 9], s, e, n_groups=10).tolist()[7] == 30


def test_a_million_intervals_reduce_exactly():
    rng = np.random.default_rng(0)
    n = 1_000_000
    s = np.sort(rng.integers(0, 10**12, n))
    e = s + rng.integers(1, 10**6, n)
    us, ue = union(s, e)
    # exact check against an independent formulation: sweep over sorted event points
    pts = np.concatenate([s, e])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((-delta, pts))  # at equal times open before close, so touching merges
    depth = np.cumsum(delta[order])
    p = pts[order]
    seg = np.diff(p)
    assert int(seg[depth[:-1] > 0].sum()) == int((ue - us).sum())
