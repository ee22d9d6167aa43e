"""Statistics for run-against-run review: pure functions of sample arrays, no I/O.

- ``bootstrap_median_ratio``: candidate median / baseline median with a percentile bootstrap
  confidence interval (both samples resampled independently, vectorised).
- ``mann_whitney_u``: two-sided Mann-Whitney U test, normal approximation with tie correction and
  continuity correction (accurate for the sample sizes a benchmark produces: tens to thousands).
- ``decide``: the regression decision rule (see :data:`DEFAULT_RULE`).
- ``detect_step``: the single most likely change point in a series of run medians (trend view).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: The decision rule. A change is a regression (or an improvement) only when ALL hold:
#:   significant: Mann-Whitney p < alpha AND the bootstrap CI of the median ratio excludes 1;
#:   relevant:    |median ratio - 1| > rel_threshold;
#:   material:    |candidate median - baseline median| > abs_floor_ms.
DEFAULT_RULE = {"alpha": 0.01, "rel_threshold": 0.05, "abs_floor_ms": 0.005, "confidence": 0.95,
                "bootstrap": 2000, "max_samples": 4000, "seed": 0}


def _as_array(samples) -> np.ndarray:
    a = np.asarray(samples, dtype=np.float64)
    return a[np.isfinite(a)]


def bootstrap_median_ratio(baseline, candidate, *, n_boot: int = 2000, confidence: float = 0.95,
                           max_samples: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """(ratio, ci_low, ci_high) of median(candidate) / median(baseline).

    Samples longer than ``max_samples`` are thinned evenly first (keeps memory at n_boot x max_samples).
    """
    return _bootstrap_ratio(baseline, candidate, np.median, n_boot=n_boot, confidence=confidence,
                            max_samples=max_samples, seed=seed)


def _bootstrap_ratio(baseline, candidate, stat, *, n_boot: int, confidence: float, max_samples: int,
                     seed: int) -> tuple[float, float, float]:
    """(ratio, ci_low, ci_high) of stat(candidate) / stat(baseline), ``stat`` a numpy reduction (median, mean)."""
    b, c = _as_array(baseline), _as_array(candidate)
    if len(b) == 0 or len(c) == 0:
        return float("nan"), float("nan"), float("nan")
    mb = float(stat(b))
    ratio = float(stat(c)) / mb if mb else float("nan")
    rng = np.random.default_rng(seed)

    def boot(x: np.ndarray) -> np.ndarray:
        if len(x) > max_samples:
            x = x[np.linspace(0, len(x) - 1, max_samples).astype(int)]
        idx = rng.integers(0, len(x), size=(n_boot, len(x)))
        return stat(x[idx], axis=1)

    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = boot(c) / boot(b)
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) == 0:
        return ratio, float("nan"), float("nan")
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return ratio, float(lo), float(hi)


def _rankdata(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the sizes of tie groups."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    boundaries = np.flatnonzero(np.diff(xs)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(xs)]])
    avg = (starts + ends + 1) / 2.0  # mean of 1-based ranks start+1 .. end
    ranks_sorted = np.repeat(avg, ends - starts)
    ranks = np.empty_like(ranks_sorted)
    ranks[order] = ranks_sorted
    return ranks, ends - starts


def fmt_p(p: float) -> str:
    """``=0.031`` or, where the normal tail underflows to 0.0, ``<1e-300`` (never "p=0")."""
    return f"={p:.2g}" if p > 0 else "<1e-300"


def mann_whitney_u(baseline, candidate) -> tuple[float, float]:
    """(U of the candidate, two-sided p-value). p is NaN when either sample is empty."""
    b, c = _as_array(baseline), _as_array(candidate)
    n1, n2 = len(c), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    ranks, ties = _rankdata(np.concatenate([c, b]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    mu = n1 * n2 / 2
    n = n1 + n2
    tie_term = float((ties ** 3 - ties).sum())
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return u1, min(1.0, p)


@dataclass
class Verdict:
    verdict: str  # regression | improvement | no_change | inconclusive (too few samples) | missing
    median_ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    baseline_median_ms: float
    candidate_median_ms: float
    delta_ms: float
    significant: bool
    reason: str
    modes: list[dict] | None = None  # two modes of the samples (:func:`mode_split`): each one's verdict and share

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.modes is None:
            del out["modes"]
        return out


def decide(baseline, candidate, rule: dict | None = None, *, modes: bool = True) -> Verdict:
    """Apply the decision rule to two sample arrays (ms). Larger is worse (latency). Samples in two modes far
    apart (:func:`mode_split`) are judged mode by mode and on the share of each (:func:`decide_modes`) unless
    ``modes`` is False."""
    r = {**DEFAULT_RULE, **(rule or {})}
    b, c = _as_array(baseline), _as_array(candidate)
    if len(b) < 2 or len(c) < 2:
        nan = float("nan")
        return Verdict("missing", nan, nan, nan, nan, nan, nan, nan, False,
                       "fewer than two samples on one side")
    split = mode_split(b, c) if modes else None
    judged = decide_modes(b, c, split, r) if split is not None else None
    if judged is not None:
        return judged
    ratio, lo, hi = bootstrap_median_ratio(b, c, n_boot=int(r["bootstrap"]), confidence=float(r["confidence"]),
                                           max_samples=int(r["max_samples"]), seed=int(r["seed"]))
    _, p = mann_whitney_u(b, c)
    mb, mc = float(np.median(b)), float(np.median(c))
    delta = mc - mb
    significant = p < r["alpha"] and (lo > 1.0 or hi < 1.0)
    relevant = abs(ratio - 1.0) > r["rel_threshold"]
    material = abs(delta) > r["abs_floor_ms"]
    if significant and relevant and material:
        verdict = "regression" if ratio > 1 else "improvement"
        reason = (f"median {'up' if ratio > 1 else 'down'} {abs(ratio - 1) * 100:.1f}% "
                  f"(95% CI {lo:.3f}-{hi:.3f}x, p{fmt_p(p)}, {delta * 1000:+.1f} us)")
    elif relevant and material and (floor := smallest_p(len(b), len(c))) >= r["alpha"]:
        # a change of this size that no p below alpha could confirm at these sample counts is no evidence of
        # no change: 4 against 4 samples can never reach p < 0.01
        verdict = "inconclusive"
        reason = (f"median {'up' if ratio > 1 else 'down'} {abs(ratio - 1) * 100:.1f}% on {len(b)} and {len(c)} "
                  f"samples, too few for p < {r['alpha']:g} (the smallest p they allow is {floor:.2g})")
    else:
        missing = [name for name, ok in (("significant", significant), (f"> {r['rel_threshold'] * 100:g}%", relevant),
                                         (f"> {r['abs_floor_ms'] * 1000:g} us", material)) if not ok]
        verdict = "no_change"
        reason = f"median ratio {ratio:.3f} (p{fmt_p(p)}) is not " + " and not ".join(missing)
    return Verdict(verdict, ratio, lo, hi, p, mb, mc, delta, significant, reason)


MODE_GAP_RATIO = 2.0
"""Two modes: the fastest sample above the split at least this multiple of the slowest below it."""
MODE_MIN_SHARE = 0.1
"""... each mode holding at least this share of the pooled samples ..."""
MODE_MIN_SAMPLES = 20
"""... of at least this many pooled samples."""


def mode_split(baseline: np.ndarray, candidate: np.ndarray) -> float | None:
    """The latency (ms) between two modes of the pooled samples, None when they have one. A range whose
    instances are of two kinds (a layer's forward and backward calls, GPU work queued behind a backlog or
    not: 0.16 ms and 7.9 ms) has a median that jumps from one mode to the other when their shares move by a
    sample: its ratio (25x) says nothing of either mode. The split is the widest gap, as a ratio between
    neighbouring pooled samples, with at least ``MODE_MIN_SHARE`` of them on each side; ``MODE_GAP_RATIO`` or
    wider makes two modes."""
    x = np.sort(np.concatenate([baseline, candidate]))
    n = len(x)
    if n < MODE_MIN_SAMPLES or x[0] <= 0:
        return None
    lo = max(math.ceil(MODE_MIN_SHARE * n), 1)
    if n - lo < lo:
        return None
    gaps = x[lo:n - lo + 1] / x[lo - 1:n - lo]  # x[i] / x[i - 1] for i in [lo, n - lo]
    best = int(np.argmax(gaps))
    if gaps[best] < MODE_GAP_RATIO:
        return None
    return float(math.sqrt(x[lo - 1 + best] * x[lo + best]))


def decide_modes(b: np.ndarray, c: np.ndarray, split: float, r: dict) -> Verdict | None:
    """The verdict on samples in two modes split at ``split`` ms; None when each run lies wholly in one mode
    (one shift, for the plain rule). Two kinds of evidence: each mode judged on its own (:func:`decide`; a mode
    with fewer than two samples on a side is not judged), and a shift of the share of the slow mode (a
    two-proportion test) that moves the mean beyond the rule's relative and absolute thresholds. Any of them
    that regressed makes a regression, whatever the others did (a kind of instance got slower, or more
    instances took the slow path); else any that improved makes an improvement. The ratio, interval and p are
    the deciding evidence's: a mode's medians and ratio, or the means' ratio and its bootstrap interval for
    the mix. With neither, no change (or an inconclusive mode), with the figures of the mode that moved most."""
    slow_b, slow_c = b > split, c > split
    if (slow_b.all() or not slow_b.any()) and (slow_c.all() or not slow_c.any()):
        return None
    share_b, share_c = float(slow_b.mean()), float(slow_c.mean())
    p_share = _two_proportions(int(slow_b.sum()), len(b), int(slow_c.sum()), len(c))
    per_mode = [_judge_mode(name, b[kb], c[kc], r) for name, kb, kc in (("fast", ~slow_b, ~slow_c),
                                                                         ("slow", slow_b, slow_c))]
    modes = [*per_mode, {"mode": "share of slow", "split_ms": split, "baseline": share_b, "candidate": share_c,
                         "p_value": p_share}]
    shares = (f"two modes split at {split:.3g} ms, {share_b * 100:.0f}% slow in the baseline and "
              f"{share_c * 100:.0f}% in the candidate (p{fmt_p(p_share)}); median ratio "
              + ", ".join(f"{m['mode']} {m['median_ratio']:.3f}" if np.isfinite(m["median_ratio"]) else
                          f"{m['mode']} not judged ({m['baseline_count']} and {m['candidate_count']} samples)"
                          for m in per_mode))
    mean_b, mean_c = float(b.mean()), float(c.mean())
    gap = _median(c[slow_c], b[slow_b]) - _median(c[~slow_c], b[~slow_b])  # slow minus fast, ms
    mix_ms = (share_c - share_b) * gap
    mix = None
    if p_share < r["alpha"] and abs(mix_ms) > r["rel_threshold"] * mean_b and abs(mix_ms) > r["abs_floor_ms"]:
        mix = "regression" if mix_ms > 0 else "improvement"
    mix_text = (f"the mix moved the mean {(mean_c / mean_b - 1) * 100:+.1f}% ({mean_b:.4g} -> {mean_c:.4g} ms)"
                if mean_b else "the mix moved")
    for verdict in ("regression", "improvement"):
        moved = [m for m in per_mode if m["verdict"] == verdict]
        if not moved and mix != verdict:
            continue
        other = [f"the {m['mode']} mode's {m['verdict']} ({m['median_ratio']:.3f})" for m in per_mode
                 if m["verdict"] in ("regression", "improvement") and m["verdict"] != verdict]
        other += [mix_text] if mix is not None and mix != verdict else []
        but = f"; against it, {' and '.join(other)}" if other else ""
        if moved:
            return _mode_verdict(verdict, max(moved, key=lambda m: abs(m["median_ratio"] - 1.0)), shares, but, modes)
        ratio, lo, hi = _bootstrap_ratio(b, c, np.mean, n_boot=int(r["bootstrap"]), confidence=float(r["confidence"]),
                                         max_samples=int(r["max_samples"]), seed=int(r["seed"]))
        reason = f"{shares}: {mix_text}{but}"
        return Verdict(verdict, ratio, lo, hi, p_share, float(np.median(b)), float(np.median(c)), mean_c - mean_b,
                       True, reason, modes)
    unsure = [m for m in per_mode if m["verdict"] == "inconclusive"]
    pick = max(unsure or per_mode, key=lambda m: abs(m["median_ratio"] - 1.0) if np.isfinite(m["median_ratio"])
               else -1.0)
    return _mode_verdict("inconclusive" if unsure else "no_change", pick, shares, "", modes)


def _judge_mode(name: str, b: np.ndarray, c: np.ndarray, r: dict) -> dict:
    """One mode's samples judged by the plain rule, as a row of the verdict's ``modes``."""
    v = decide(b, c, r, modes=False).to_dict()
    return {"mode": name, "baseline_count": len(b), "candidate_count": len(c),
            **{k: v[k] for k in ("verdict", "median_ratio", "ci_low", "ci_high", "p_value", "baseline_median_ms",
                                 "candidate_median_ms", "reason")}}


def _mode_verdict(verdict: str, pick: dict, shares: str, but: str, modes: list[dict]) -> Verdict:
    """The verdict told by one mode's figures (``pick``, a row of ``modes``)."""
    mb, mc = pick["baseline_median_ms"], pick["candidate_median_ms"]
    reason = (f"{shares}; the {pick['mode']} mode ({pick['baseline_count']} and {pick['candidate_count']} "
              f"samples): {pick['reason']}{but}")
    return Verdict(verdict, pick["median_ratio"], pick["ci_low"], pick["ci_high"], pick["p_value"], mb, mc, mc - mb,
                   verdict in ("regression", "improvement"), reason, modes)


def _median(a: np.ndarray, b: np.ndarray) -> float:
    """The median of ``a``, else of ``b`` (a mode with no sample on one side)."""
    return float(np.median(a if len(a) else b))


def _two_proportions(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided p of a difference between the proportions k1/n1 and k2/n2 (pooled normal approximation)."""
    pooled = (k1 + k2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return 1.0
    z = abs(k1 / n1 - k2 / n2) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p that :func:`mann_whitney_u` gives samples of sizes ``n1`` and ``n2``: every one
    of one side below every one of the other, no ties (4 against 4: 0.030; 5 against 5: 0.012; 6: 0.0051)."""
    return mann_whitney_u(np.arange(n1, dtype=np.float64), np.arange(n1, n1 + n2, dtype=np.float64))[1]


def detect_step(values, *, min_rel: float = 0.05) -> dict | None:
    """The single change point of a series (e.g. run medians in time order) that best splits it into
    two flat segments (least squares). None when the series is shorter than 3 or the step is below
    ``min_rel`` of the earlier level."""
    x = _as_array(values)
    n = len(x)
    if n < 3:
        return None
    csum, csq = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(1, n)  # split before index k
    left_n, right_n = k, n - k
    left_sse = csq[k - 1] - csum[k - 1] ** 2 / left_n
    right_sum, right_sq = csum[-1] - csum[k - 1], csq[-1] - csq[k - 1]
    right_sse = right_sq - right_sum ** 2 / right_n
    best = int(np.argmin(left_sse + right_sse))
    split = int(k[best])
    before, after = float(x[:split].mean()), float(x[split:].mean())
    rel = (after - before) / before if before else float("inf")
    if abs(rel) < min_rel:
        return None
    return {"index": split, "before": before, "after": after, "relative_change": rel}
