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
    """Each mode as fast as before, but 60% of the instances slow instead of 10% (or 25%): the mean rises, and
    the ratio is that of the means with its interval, not a median that jumped modes (50x) or did not (1.00x)."""
    rng = np.random.default_rng(2)
    b = _two_modes(rng, 200, 0.1)
    for slow in (0.6, 0.25):
        c = _two_modes(rng, 200, slow)
        v = decide(b, c)
        assert v.verdict == "regression" and v.significant
        assert v.median_ratio == pytest.approx(c.mean() / b.mean()) and v.ci_low > 1.0
        assert v.p_value < 1e-3 and f"the mix moved the mean {(c.mean() / b.mean() - 1) * 100:+.1f}%" in v.reason
        assert (v.baseline_median_ms, v.candidate_median_ms) == (np.median(b), np.median(c))
    assert decide(c, b).verdict == "improvement"


def test_both_modes_slower_is_a_regression_whatever_the_mix_did():
    """Both modes 20% slower while the share of slow instances fell from 50% to 33%: the mean fell, but every
    kind of instance got slower; a mode's change decides, not the mix."""
    rng = np.random.default_rng(4)
    b = _two_modes(rng, 300, 0.5, fast_ms=1.0, slow_ms=8.0)
    c = _two_modes(rng, 300, 1 / 3, fast_ms=1.2, slow_ms=9.6)
    assert c.mean() < b.mean()
    v = decide(b, c)
    assert v.verdict == "regression" and v.median_ratio == pytest.approx(1.2, abs=0.01)
    assert [m["verdict"] for m in v.modes[:2]] == ["regression", "regression"]


def test_a_slow_path_new_in_the_candidate_is_a_regression_of_the_mix():
    """None (or 1%) of the baseline's instances at 8 ms against 30% of the candidate's: the medians stay in the
    fast mode (ratio 1.00), the mean triples; the mode with no baseline sample is not judged on its own."""
    rng = np.random.default_rng(6)
    for before in (0.0, 0.01):
        b, c = _two_modes(rng, 200, before, 1.0, 8.0), _two_modes(rng, 200, 0.3, 1.0, 8.0)
        v = decide(b, c)
        assert v.verdict == "regression" and v.median_ratio == pytest.approx(c.mean() / b.mean())
        assert decide(b, c, modes=False).verdict == "no_change"  # what the median alone says
        if before == 0.0:
            assert "slow not judged (0 and 60 samples)" in v.reason


def test_a_mode_faster_does_not_hide_more_instances_taking_the_slow_path():
    """The fast mode 7% faster while the slow share rises from 10% to 60% (the mean triples): a regression of
    the mix, the faster mode named against it; the reverse (a mode 7% slower, the mix toward fast) is a
    regression of that mode: a kind of instance got slower whatever the mix did."""
    rng = np.random.default_rng(7)
    b = _two_modes(rng, 400, 0.1, 1.0, 8.0)
    c = _two_modes(rng, 400, 0.6, 0.93, 8.0)
    v = decide(b, c)
    assert v.verdict == "regression" and "the mix moved the mean" in v.reason
    assert "against it, the fast mode's improvement" in v.reason
    back = decide(c, b)
    assert back.verdict == "regression" and back.median_ratio == pytest.approx(1 / 0.93, rel=0.01)
    assert "the fast mode (" in back.reason and "against it, the mix moved the mean" in back.reason


def test_one_run_wholly_above_the_other_is_one_shift_not_two_modes():
    """1 ms then 3 ms: the pooled samples split in two, but each run sits in one of them; the plain rule judges it."""
    rng = np.random.default_rng(5)
    b, c = rng.normal(1.0, 0.01, 40), rng.normal(3.0, 0.03, 40)
    assert mode_split(b, c) is not None
    assert decide(b, c).to_dict() == decide(b, c, modes=False).to_dict()
    assert decide(b, c).verdict == "regression"


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
