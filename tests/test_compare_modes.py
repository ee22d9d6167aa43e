"""Samples in two modes far apart: each mode judged on its own and the share of the slow one, not the median
that jumps between them (the nsys fixtures mfu_2gpu before/after: FlashAttnFunc's GPU latency is 0.155 ms or
7.87 ms, about half and half, and its median ratio read 25.6)."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.compare.stats import decide, mode_split


def _two_modes(rng, n: int, slow_share: float, fast_ms: float = 0.155, slow_ms: float = 7.866,
               spread: float = 0.004) -> np.ndarray:
    slow = int(round(n * slow_share))
    return np.concatenate([fast_ms * (1 + spread * rng.standard_normal(n - slow)),
                           slow_ms * (1 + spread * rng.standard_normal(slow))])


def test_a_median_that_jumps_between_modes_is_no_change_when_neither_mode_moved():
    rng = np.random.default_rng(1)
    b, c = _two_modes(rng, 67, 33 / 67), _two_modes(rng, 60, 0.5)
    assert np.median(c) / np.median(b) > 20  # what the median ratio says
    v = decide(b, c)
    assert v.verdict == "no_change" and v.median_ratio == pytest.approx(1.0, abs=0.01)
    fast, slow, share = v.modes
    assert (fast["baseline_count"], fast["candidate_count"], slow["baseline_count"], slow["candidate_count"]) \
        == (34, 30, 33, 30)
    assert share["baseline"] == pytest.approx(33 / 67) and share["candidate"] == 0.5 and share["p_value"] > 0.5
    assert 0.2 < share["split_ms"] < 7.0
    assert "two modes split at" in v.reason and "49% slow in the baseline and 50% in the candidate" in v.reason
    # the row's medians are those of the mode its ratio is of: the table reads the same either way
    mode = fast if "the fast mode" in v.reason else slow
    assert (v.baseline_median_ms, v.candidate_median_ms) == (mode["baseline_median_ms"], mode["candidate_median_ms"])
    assert v.median_ratio == pytest.approx(v.candidate_median_ms / v.baseline_median_ms)


def test_more_instances_in_the_slow_mode_is_a_regression_of_the_mix():
    """Each mode as fast as before, but 60% of the instances slow instead of 10%: the typical instance is now a
    slow one, so the medians (and their ratio, 50x) say so; the share's test is the evidence."""
    rng = np.random.default_rng(2)
    b, c = _two_modes(rng, 200, 0.1), _two_modes(rng, 200, 0.6)
    v = decide(b, c)
    assert v.verdict == "regression" and v.significant
    assert v.median_ratio == pytest.approx(np.median(c) / np.median(b)) and v.median_ratio > 40
    assert v.p_value < 1e-10 and f"the mean moved {(c.mean() / b.mean() - 1) * 100:+.1f}% with the mix" in v.reason
    assert decide(c, b).verdict == "improvement"


def test_a_slower_mode_is_a_regression_with_that_modes_ratio():
    """The same shares, the slow mode 20% slower: the verdict is the slow mode's, at its ratio."""
    rng = np.random.default_rng(3)
    b = _two_modes(rng, 100, 0.5)
    c = _two_modes(rng, 100, 0.5, slow_ms=7.866 * 1.2)
    v = decide(b, c)
    assert v.verdict == "regression" and v.median_ratio == pytest.approx(1.2, abs=0.01)
    assert v.delta_ms == pytest.approx(7.866 * 0.2, rel=0.02)
    assert "the slow mode (50 and 50 samples)" in v.reason
    assert [m["verdict"] for m in v.modes[:2]] == ["no_change", "regression"]


@pytest.mark.parametrize("seed", range(5))
def test_one_mode_is_judged_as_before(seed):
    """Lognormal latencies (a long tail, one mode) and a few far outliers (under a tenth of the samples) are
    not split: the verdict and its JSON are those of the plain rule."""
    rng = np.random.default_rng(seed)
    b = 1.0 * rng.lognormal(0, 0.3, 300)
    c = 1.08 * rng.lognormal(0, 0.3, 300)
    c[:20] *= 10  # 6.7% outliers
    assert mode_split(b, c) is None
    assert decide(b, c).to_dict() == decide(b, c, modes=False).to_dict()
    assert "modes" not in decide(b, c).to_dict()


def test_the_split_is_the_widest_gap_with_a_tenth_on_each_side():
    b = np.array([1.0] * 9 + [3.0] * 11)
    assert mode_split(b, b) == pytest.approx(np.sqrt(3.0))
    assert mode_split(b[:19], b[:0]) is None  # fewer than 20 samples
    assert mode_split(np.array([1.0] * 19 + [5.0]), np.array([1.0] * 19 + [5.0])) is None  # 5% slow: outliers
    assert mode_split(np.array([1.0] * 10 + [1.9] * 10), np.array([1.0] * 20)) is None  # 1.9x apart: one mode
