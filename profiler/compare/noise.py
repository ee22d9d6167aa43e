"""The between-run noise model: a latency change counts only when it beats the run-to-run spread.

Per-iteration samples of one process share that process's state (CPU frequency, co-tenants, the
allocator, thread placement, which cores the threads landed on, the host's enqueue speed). A
Mann-Whitney test on them answers "did these two processes differ?", not "did the code change?":
two processes of one configuration differ significantly all the time (on this project's CPU box, the
same sweep run twice 9 s apart measured +107% at p=1e-48). So a verdict needs evidence from several
processes, as trusted benchmark tools require:

- pyperf runs each benchmark in many worker processes (20 by default) and compares all their values,
  so process-to-process variation is inside the test; it hides a difference it cannot call significant.
- asv runs each benchmark in several processes and reports a change only when the ratio exceeds its
  factor AND the two results are statistically different given the noise of both sides.
- Conbench compares a result with the distribution of earlier results of the same fingerprint
  (a lookback z-score); a result inside that distribution is not a regression.

The rule here, per variant, after the within-run test (``profiler.compare.stats.decide``) has found
a change:

1. Both runs carry process-level repeats (``trtprof sweep --repeat N``, N >= MIN_REPEATS per side):
   the change stands when every candidate repeat's median lies beyond every baseline repeat's median
   (the two sets do not overlap: an exact rank test, p = 2/C(n+m, n), 0.8% for 5 against 5), and the
   median-of-repeats ratio moves by more than the relevance threshold and by more than the larger of
   the two sides' relative spreads (max-min over median) times a margin that is larger for fewer
   repeats (``spread_margin``: 2 for 3 repeats, 1.5 for 4, 1 from 5). Apart and beyond one spread but
   short of that margin, the verdict is ``inconclusive`` (more repeats would decide it), not no_change.
2. Else, MIN_HISTORY earlier runs of the candidate's fingerprint: the change stands when the candidate
   median lies outside the range of those runs' medians and moves by more than their relative spread.
3. Else, when the variant is noisy (its latency follows the host: a GPU query whose host enqueue
   dominates, a CPU backend whose compute is the host, or a CoV above the backend's jitter threshold),
   the verdict is ``inconclusive``: no gate fails on it, and the output says what evidence is missing.
4. Else (a quiet, device-bound variant), the within-run verdict stands, marked as such.

A shared host: the repeats of one run are taken back to back, under whatever else the machine was
doing then, so they do not measure load that comes and goes between runs (on this project's 2-core CI
box, with a second test worker, the same sweep run twice measured 0.798x with all three repeats of
each side apart). Every timed phase records the share of the host's CPU other processes took
(``profiler.harness.hostload``). For a host-sensitive variant (a CPU backend, an enqueue-bound GPU
query) a change confirmed by rule 1 or 2 must also exceed what that load can explain, 1 / (1 - share)
with the larger share of the two sides (a query that needs the whole host gets 1 - share of it);
when it does not, the verdict is ``inconclusive`` and says how busy the host was.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from profiler.rules._trtexec import ENQUEUE_BOUND_RATIO

#: Process-level repeats needed on each side (3 against 3: the non-overlap of two sets of three has
#: probability 2/20 under no change; the spread condition on top makes a false alarm rarer still).
MIN_REPEATS = 3
#: Earlier runs of a fingerprint needed to measure its run-to-run spread.
MIN_HISTORY = 3
#: trtexec's enqueue-bound condition: the host enqueue takes more than this share of the GPU compute time.
HOST_BOUND_RATIO = ENQUEUE_BOUND_RATIO
#: Host shares above this are capped: a host 90% busy with others explains up to a 10x change.
MAX_EXPLAINED_SHARE = 0.9


def _finite(values: Sequence[Any] | None) -> np.ndarray:
    items = [] if values is None else list(values)
    a = np.asarray([float(v) for v in items if isinstance(v, (int, float, np.floating))], dtype=float)
    return a[np.isfinite(a)]


def relative_spread(values: Sequence[float]) -> float | None:
    """(max - min) / median of a set of run medians; None for fewer than two."""
    a = _finite(values)
    if len(a) < 2 or np.median(a) <= 0:
        return None
    return float((a.max() - a.min()) / np.median(a))


def separation_p_value(n: int, m: int) -> float:
    """Two-sided probability that two sets of n and m exchangeable values do not overlap at all."""
    return min(1.0, 2.0 / math.comb(n + m, n))


def _median_of(metrics: dict[str, Any], *names: str) -> float | None:
    for n in names:
        d = metrics.get(n)
        v = d.get("median") if isinstance(d, dict) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def host_bound(variant: dict[str, Any]) -> bool:
    """True when the host enqueue dominates a GPU backend's query (trtexec's enqueue-bound condition).

    Such a query's latency follows the host CPU, and the host varies between processes (scheduling,
    frequency, caches) by more than within one run: on an H200, the same eager sweep run twice in a row
    measured 4.97 and 2.98 ms medians, while its CUDA-graph variant measured 0.478 and 0.475 ms.
    """
    m = {**(variant.get("metrics") or {}), **variant}
    if m.get("synchronous_enqueue"):
        return False
    enq = _median_of(m, "enqueue_ms")
    comp = _median_of(m, "compute_ms", "gpu_compute_ms")
    return enq is not None and comp is not None and comp > 0 and enq > HOST_BOUND_RATIO * comp


def noisy_reason(variant: dict[str, Any], jitter_cov_pct: float) -> str | None:
    """Why this variant's latency is expected to move between processes; None for a quiet device-bound one."""
    m = {**(variant.get("metrics") or {}), **variant}
    if host_bound(variant):
        return (f"the query is enqueue-bound (host enqueue > {HOST_BOUND_RATIO:g} x compute), so its latency "
                "follows the host CPU")
    if m.get("synchronous_enqueue"):
        return ("the backend computes on the host CPU, whose speed differs between processes (frequency, "
                "co-tenants, thread placement)")
    lat = m.get("latency_ms") if isinstance(m.get("latency_ms"), dict) else {}
    cov = lat.get("cov_pct")
    if isinstance(cov, (int, float)) and math.isfinite(cov) and cov > jitter_cov_pct:
        return f"its latency varies by {cov:.1f}% (CoV) within one run, above the {jitter_cov_pct:g}% jitter threshold"
    return None


def repeat_medians(variant: dict[str, Any]) -> list[float]:
    """The per-process medians ``trtprof sweep --repeat`` stored with the variant (empty when none)."""
    m = {**(variant.get("metrics") or {}), **variant}
    rep = m.get("repeats") if isinstance(m.get("repeats"), dict) else {}
    return [float(x) for x in _finite(rep.get("medians_ms"))]


def host_sensitive(variant: dict[str, Any]) -> bool:
    """True when the variant's latency follows the host CPU: a CPU backend or an enqueue-bound GPU query."""
    m = {**(variant.get("metrics") or {}), **variant}
    return bool(m.get("synchronous_enqueue")) or host_bound(variant)


def host_share(variant: dict[str, Any], *, repeats: bool) -> float | None:
    """Share of the host's CPU other processes took while the variant was timed: the median over its
    process-level repeats (``repeats=True``) or its main measurement's; None when not recorded."""
    m = {**(variant.get("metrics") or {}), **variant}
    if repeats:
        rep = m.get("repeats") if isinstance(m.get("repeats"), dict) else {}
        a = _finite(rep.get("host_others_shares"))
        return float(np.median(a)) if len(a) else None
    a = _finite([m.get("host_others_share")])
    return float(a[0]) if len(a) else None


def _slowdown(share: float | None) -> float:
    """How much slower a query that needs the whole host runs when others take ``share`` of it (1 unknown)."""
    if not isinstance(share, (int, float)) or not math.isfinite(share):
        return 1.0
    return 1.0 / (1.0 - min(max(float(share), 0.0), MAX_EXPLAINED_SHARE))


def disturbance(base_share: float | None, cand_share: float | None) -> dict[str, Any]:
    """Which way each side's host load pushes the ratio: load on the baseline slows the baseline (the ratio
    falls: it can explain an improvement, never a regression); load on the candidate slows the candidate (it
    can explain a regression, never an improvement). Each side's slowdown is 1 / (1 - share); the same load
    on both sides cancels, so what load can explain in a direction is the pushing side's slowdown over the
    other side's: ``explains`` {"regression": factor, "improvement": factor}, 1.0 where it explains nothing."""
    fb, fc = _slowdown(base_share), _slowdown(cand_share)
    sides = {}
    for name, share, pushes in (("baseline", base_share, "improvement"), ("candidate", cand_share, "regression")):
        known = isinstance(share, (int, float)) and math.isfinite(share)
        sides[name] = {"host_others_share": float(share) if known else None,
                       "pushes_toward": pushes if known and share > 0 else None}
    return {**sides, "explains": {"regression": max(1.0, fc / fb), "improvement": max(1.0, fb / fc)}}


def _hold_against_load(ev: dict[str, Any], ratio: float, needed: float, base_share: float | None,
                       cand_share: float | None) -> None:
    """A confirmed change of a host-sensitive variant must also beat what the host's other load explains in
    the change's own direction: load on the side that would make the change look smaller never weakens it."""
    dist = disturbance(base_share, cand_share)
    ev["disturbance"] = dist
    direction = "regression" if ratio > 1 else "improvement"
    pushing = "candidate" if ratio > 1 else "baseline"
    share = dist[pushing]["host_others_share"]
    ev["host_others_share"] = share
    if not ev["confirmed"] or share is None:
        return
    factor = dist["explains"][direction]
    adjusted = ratio / factor if ratio > 1 else ratio * factor
    ev["load_adjusted_ratio"] = adjusted
    if abs(adjusted - 1.0) > needed and (adjusted > 1) == (ratio > 1):
        return
    other = dist["baseline" if pushing == "candidate" else "candidate"]["host_others_share"]
    ev["confirmed"], ev["host_shared"] = False, True
    ev["why"] += (f"; but other processes took {share * 100:.0f}% of the host's CPU while the {pushing} was timed "
                  f"(the {'baseline' if pushing == 'candidate' else 'candidate'}: "
                  + (f"{other * 100:.0f}%" if other is not None else "unknown")
                  + f"), which slows the {pushing} and alone can move a host-bound query toward "
                  f"{'a regression' if ratio > 1 else 'an improvement'} by up to {factor:.2f}x (x{ratio:.3f} is "
                  f"x{adjusted:.3f} after allowing for it)")
    ev["summary"] += (f", {pushing} host {share * 100:.0f}% busy with others (explains up to x{factor:.2f} "
                      f"toward {'regression' if ratio > 1 else 'improvement'})")


#: Repeats per side the advice may ask for before it says the spread must come down first.
MAX_ADVISED_REPEATS = 20


@functools.lru_cache(maxsize=None)
def _expected_range(n: int) -> float:
    """Expected range of ``n`` standard normal values (d2: 1.128 for 2, 1.693 for 3, 2.326 for 5)."""
    x = np.linspace(-8.0, 8.0, 4001)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return float(np.trapezoid(1.0 - cdf ** n - (1.0 - cdf) ** n, x))


def detectable_with(n: int, spread: float, n_seen: int) -> float:
    """The smallest relative change ``n`` repeats a side could confirm, given a relative spread ``spread``
    measured over ``n_seen`` repeats: the margin times the spread ``n`` repeats are expected to show."""
    if n < MIN_REPEATS or n_seen < 2:
        return float("inf")
    sigma = spread / _expected_range(n_seen)
    return spread_margin(n) * _expected_range(n) * sigma


def repeats_to_decide(spread: float, n_seen: int, rel_threshold: float) -> int | None:
    """The fewest repeats a side whose detectable change is at most ``rel_threshold``; None above
    MAX_ADVISED_REPEATS (the spread itself must come down: a quieter host, a longer timed phase)."""
    for n in range(MIN_REPEATS, MAX_ADVISED_REPEATS + 1):
        if detectable_with(n, spread, n_seen) <= rel_threshold:
            return n
    return None


def power(source: str, rel_threshold: float, *, spread: float | None = None, n: int = 0,
          factor: float | None = None, ci: tuple[Any, Any] = (None, None)) -> dict[str, Any]:
    """The smallest change this comparison could have detected (relative, 0.2 = 20%), where it comes from,
    whether the threshold is below it (``underpowered``) and how many repeats a side would decide."""
    if source == "repeats" and spread is not None:
        rel = spread_margin(n) * spread
        todo = repeats_to_decide(spread, n, rel_threshold)
        how = f"{spread_margin(n):g} x the run-to-run spread {spread * 100:.1f}% of {n} repeats"
    elif source == "history" and spread is not None:
        rel, todo, how = spread, None, f"the spread {spread * 100:.1f}% of the fingerprint's earlier runs"
    elif source == "capture" and factor is not None:
        rel, todo, how = factor - 1.0, None, (f"one capture a side: x{factor:g} either way, the declared "
                                              "allowance between two processes of a host-sensitive range")
    else:
        lo, hi = (finite_or_none(x) for x in ci)
        rel = max(hi - 1.0, 1.0 - lo) if lo is not None and hi is not None else None
        todo, how = None, "the half-width of the within-run confidence interval"
    under = rel is not None and rel > rel_threshold
    text = what = ("unknown" if rel is None else f"{rel * 100:.1f}% ({how})")
    if under:
        text += f"; the {rel_threshold * 100:g}% threshold is below it"
        if source == "repeats":
            text += (f": {todo} repeats a side would decide (trtprof sweep --repeat {todo})" if todo else
                     f": no number of repeats up to {MAX_ADVISED_REPEATS} would; the spread must come down first "
                     "(a quieter host, a longer timed phase)")
    return {"rel": rel, "source": source, "underpowered": under, "repeats_to_decide": todo, "text": text,
            "what": what}


def finite_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def spread_margin(n: int) -> float:
    """How many run-to-run spreads a change must exceed with ``n`` repeats on the smaller side.

    Chosen so that two sets of identical runs (log-normal medians) pass both conditions less than 0.6%
    of the time: with a margin of 1, that rate is 4% for 3 against 3, 0.9% for 4, 0.2% for 5; with
    margins 2 / 1.5 / 1 it is 0.56% / 0.17% / 0.19% (200,000 simulated pairs each). A 20% slowdown on
    runs spread by 5% is still caught 46% / 57% / 80% of the time; more repeats buy sensitivity. Past 5
    repeats the margin shrinks as the spread of n values grows and the median's uncertainty falls
    (d2(5) / d2(n) x sqrt(5 / n), d2 the expected range of n normal values), so more repeats keep buying
    sensitivity; the non-overlap alone then has a chance of at most 2/C(12, 6) = 0.2% without a change.
    """
    if n < MIN_REPEATS:
        return float("inf")
    if n <= 5:
        return {3: 2.0, 4: 1.5}.get(n, 1.0)
    return _expected_range(5) / _expected_range(n) * math.sqrt(5.0 / n)


def _from_repeats(direction: int, b: np.ndarray, c: np.ndarray, rel_threshold: float) -> dict[str, Any]:
    ratio = float(np.median(c) / np.median(b))
    spread = max(relative_spread(b) or 0.0, relative_spread(c) or 0.0)
    margin = spread_margin(min(len(b), len(c)))
    separated = bool(c.min() > b.max()) if direction > 0 else bool(c.max() < b.min())
    needed = max(margin * spread, rel_threshold)
    beyond = abs(ratio - 1.0) > needed
    p = separation_p_value(len(b), len(c))
    ok = separated and beyond and (ratio > 1) == (direction > 0)
    # apart and beyond one spread, short of the margin few repeats need: more repeats would decide it
    weak = (not ok and separated and (ratio > 1) == (direction > 0)
            and abs(ratio - 1.0) > max(spread, rel_threshold) and margin > 1)
    why = (f"{len(b)} and {len(c)} process-level repeats: median of repeats {ratio:.3f}x, run-to-run spread "
           f"{spread * 100:.1f}% (a change must exceed {margin:g}x that), "
           + ("no overlap between the two sides' repeats" if separated else "the two sides' repeats overlap")
           + f" (chance of no overlap without a change: {p:.2g})")
    summary = (f"{len(b)} vs {len(c)} process repeats: x{ratio:.3f}, spread {spread * 100:.1f}% "
               f"(needs > {margin:g}x), " + ("no overlap" if separated else "overlap"))
    return {"source": "repeats", "confirmed": ok, "weak": weak, "run_to_run_spread": spread, "spread_margin": margin,
            "repeat_ratio": ratio, "separation_p_value": p, "needed": needed, "why": why, "summary": summary}


def _from_history(direction: int, prior: np.ndarray, cand_median: float, rel_threshold: float) -> dict[str, Any]:
    spread = relative_spread(prior) or 0.0
    centre = float(np.median(prior))
    ratio = cand_median / centre
    outside = cand_median > prior.max() if direction > 0 else cand_median < prior.min()
    needed = max(spread, rel_threshold)
    ok = bool(outside) and abs(ratio - 1.0) > needed
    why = (f"{len(prior)} earlier runs of this fingerprint: candidate {ratio:.3f}x their median, their spread "
           f"{spread * 100:.0f}%" + ("" if outside else ", and the candidate lies inside their range"))
    summary = (f"{len(prior)} earlier runs: x{ratio:.3f} their median, spread {spread * 100:.0f}%, "
               + ("outside their range" if outside else "inside their range"))
    return {"source": "history", "confirmed": ok, "run_to_run_spread": spread, "history_ratio": ratio,
            "needed": needed, "why": why, "summary": summary}


#: Why a variant is inconclusive -> (what the headline says, what to do).
INCONCLUSIVE_CAUSES = {
    "host_busy": ("the host was busy with other processes", "rerun both sides on a quiet host"),
    "few_repeats": ("too few repeats to tell it from noise", "rerun both sides with `trtprof sweep --repeat 5`"),
    "underpowered": ("the smallest change the comparison could detect is above the threshold",
                     "rerun both sides with the repeats the verdict names (`trtprof sweep --repeat N`)"),
    "unmeasured": ("run-to-run spread unmeasured", "rerun both sides with `trtprof sweep --repeat 5`"),
    "capture": ("one capture a side carries no spread between runs", "time the model with `trtprof sweep "
                "--repeat 5`, which measures it"),
    "few_samples": ("too few samples in a run to test it", "measure more iterations (--iterations/--duration, or "
                    "a longer capture)"),
}

#: One capture a side: a host-sensitive range (enqueue-bound, jittery) must move by more than this factor either
#: way to count. Two processes of one command differ by up to 1.67x on such ranges (the same eager H200 sweep
#: run twice: 4.97 and 2.98 ms medians), and a capture carries no repeats to measure that.
CAPTURE_RUN_TO_RUN_FACTOR = 2.0
#: ... and the bulk of the two captures' instances must not overlap: the candidate's 10th percentile beyond the
#: baseline's 90th (a regression), or its 90th below the baseline's 10th (an improvement).
CAPTURE_BULK_QUANTILE = 0.10


def inconclusive_cause(row: dict[str, Any]) -> str:
    """The key of INCONCLUSIVE_CAUSES for an inconclusive comparison row."""
    ev = row.get("noise") or {}
    return "few_samples" if ev.get("few_samples") else "host_busy" if ev.get("host_shared") else \
        "few_repeats" if ev.get("weak") else "underpowered" if ev.get("underpowered") else \
        "capture" if ev.get("capture") else "unmeasured"


def _power_of(ev: dict[str, Any], n: int, rel: float) -> dict[str, Any]:
    return power(ev["source"], rel, spread=ev.get("run_to_run_spread"), n=n)


def _no_change_power(row: dict[str, Any], base: dict[str, Any], cand: dict[str, Any], b: np.ndarray, c: np.ndarray,
                     prior: np.ndarray, rel: float, capture_noisy: bool) -> None:
    """A within-run 'no change': the smallest change the comparison could have seen; a threshold below it makes the
    verdict inconclusive (with the repeats that would decide), never no change."""
    if len(b) >= MIN_REPEATS and len(c) >= MIN_REPEATS:
        ratio = float(np.median(c) / np.median(b))
        ev = _from_repeats(1 if ratio > 1 else -1, b, c, rel)
        ev["confirmed"] = False
        _hold_against_load(ev, ratio, ev["needed"], host_share(base, repeats=True), host_share(cand, repeats=True))
        pw = _power_of(ev, min(len(b), len(c)), rel)
    elif len(prior) >= MIN_HISTORY:
        ev = {"source": "history", "run_to_run_spread": relative_spread(prior) or 0.0}
        pw = power("history", rel, spread=ev["run_to_run_spread"])
    elif capture_noisy:
        ev, pw = {"source": None, "capture": True}, power("capture", rel, factor=CAPTURE_RUN_TO_RUN_FACTOR)
    else:
        row["detectable_change"] = power("within-run", rel, ci=(row.get("ci_low"), row.get("ci_high")))
        return
    row["detectable_change"] = pw
    ev["summary"] = ev.get("summary") or "no change seen"  # the repeats' own figures where there are repeats
    row["noise"] = ev
    if pw["underpowered"]:
        ev["underpowered"] = True
        row["verdict_within_run"] = row.get("verdict")
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']}; but this comparison could not have seen a change of the threshold's size: "
                         f"the smallest it could detect is {pw['text']}")


def _capture_rule(row: dict[str, Any], direction: int, samples: tuple[Any, Any], noisy: str, rel: float) -> bool:
    """One capture a side of a host-sensitive range: the change stands when it is beyond
    CAPTURE_RUN_TO_RUN_FACTOR either way and the bulk of the instances does not overlap. True when it stands."""
    b, c = (_finite(x) for x in samples)
    ratio = finite_or_none(row.get("median_ratio"))
    if ratio is None or len(b) < 2 or len(c) < 2:
        return False
    q = CAPTURE_BULK_QUANTILE
    apart = (np.quantile(c, q) > np.quantile(b, 1 - q)) if direction > 0 else \
        (np.quantile(c, 1 - q) < np.quantile(b, q))
    factor = CAPTURE_RUN_TO_RUN_FACTOR
    beyond = ratio >= factor if direction > 0 else ratio <= 1.0 / factor
    pw = power("capture", rel, factor=factor)
    row["detectable_change"] = pw
    if not (apart and beyond):
        return False
    row["noise"] = {"source": "capture", "confirmed": True, "capture": True, "noisy": noisy,
                    "summary": f"one capture a side: x{ratio:.3f}, beyond the x{factor:g} allowed between two "
                               f"processes and the instances' bulk ({q * 100:g}th-{100 - q * 100:g}th percentiles) "
                               "apart"}
    row["reason"] += (f"; beyond the x{factor:g} two processes of a host-sensitive range can differ by, with the "
                      f"bulk of the two captures' instances apart ({noisy})")
    return True


def judge(row: dict[str, Any], base: dict[str, Any], cand: dict[str, Any], prior_medians: Sequence[float],
          rule: dict[str, Any], jitter_cov_pct: float, *, prior_shares: Sequence[float | None] = (),
          samples: tuple[Any, Any] | None = None, noisy: str | None = None) -> None:
    """Hold a within-run regression/improvement (``row``, in place) against the between-run evidence, and say
    for every verdict the smallest change the comparison could have detected (``row["detectable_change"]``).
    ``prior_shares``: the host load recorded with each earlier run of the fingerprint (None where not);
    ``samples``: both sides' per-instance samples, for one capture a side (CAPTURE_RUN_TO_RUN_FACTOR);
    ``noisy``: why the latency moves between processes where the caller knows (a range timed on the host)."""
    within = row.get("verdict")
    row["within_reason"] = row.get("reason")
    row["noise"] = {"source": None, "summary": "not needed: no change within the run"}
    rel = float(rule["rel_threshold"])
    b, c = _finite(repeat_medians(base)), _finite(repeat_medians(cand))
    prior = _finite(prior_medians)
    noisy = noisy or noisy_reason(base, jitter_cov_pct) or noisy_reason(cand, jitter_cov_pct)
    capture = base.get("kind") == "range"  # a capture's range: no repeats, no fingerprint history
    if within == "inconclusive":  # stats.decide: too few samples to test the change it saw
        row["noise"] = {"source": None, "few_samples": True, "summary": "not reached: too few samples within the run"}
        row["detectable_change"] = power("within-run", rel)
        return
    if within == "no_change":
        _no_change_power(row, base, cand, b, c, prior, rel, capture and noisy is not None)
        return
    if within not in ("regression", "improvement"):
        return
    direction = 1 if within == "regression" else -1
    sensitive = host_sensitive(base) or host_sensitive(cand)
    if len(b) >= MIN_REPEATS and len(c) >= MIN_REPEATS:
        ev = _from_repeats(direction, b, c, rel)
        if sensitive:
            _hold_against_load(ev, ev["repeat_ratio"], ev["needed"], host_share(base, repeats=True),
                               host_share(cand, repeats=True))
        else:
            ev["disturbance"] = disturbance(host_share(base, repeats=True), host_share(cand, repeats=True))
        pw = _power_of(ev, min(len(b), len(c)), rel)
    elif len(prior) >= MIN_HISTORY:
        ev = _from_history(direction, prior, float(row["candidate_median_ms"]), rel)
        known = [float(x) for x in prior_shares if finite_or_none(x) is not None]
        # a busy host on either side: the candidate's run, or (for an improvement) the busiest earlier run
        base_share = (max(known) if direction < 0 else min(known)) if known else None
        if sensitive:
            _hold_against_load(ev, ev["history_ratio"], ev["needed"], base_share, host_share(cand, repeats=False))
        pw = power("history", rel, spread=ev["run_to_run_spread"])
    else:
        if noisy is None:
            row["noise"] = {"source": "within-run only", "confirmed": True,
                            "summary": "unmeasured; device-bound and steady, so the within-run test stands"}
            row["reason"] += "; the variant is device-bound and steady, so the within-run test stands (no repeats)"
            row["detectable_change"] = power("within-run", rel, ci=(row.get("ci_low"), row.get("ci_high")))
            return
        if capture and samples is not None and _capture_rule(row, direction, samples, noisy, rel):
            return
        row.setdefault("detectable_change", power("capture" if capture else "within-run", rel,
                                                  factor=CAPTURE_RUN_TO_RUN_FACTOR))
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        todo = "one capture a side carries no spread between runs" if capture else \
            "run both sides with trtprof sweep --repeat 5"
        row["noise"] = {"source": None, "confirmed": False, "noisy": noisy, "capture": capture,
                        "summary": f"UNMEASURED: {noisy}; {todo}"}
        missing = ("a capture has neither process-level repeats nor a history of earlier runs" if capture else
                   f"neither side has process-level repeats ({len(b)} and {len(c)}, need {MIN_REPEATS}: trtprof "
                   f"sweep --repeat 5) nor {MIN_HISTORY} earlier runs of this fingerprint ({len(prior)} found, need "
                   f"{MIN_HISTORY})")
        row["reason"] = (f"{row['reason']} within one run; but {noisy}, which varies between runs more than "
                         f"within one, and {missing} to measure that spread")
        if capture:
            row["reason"] += (f" (one capture a side decides only a change beyond x{CAPTURE_RUN_TO_RUN_FACTOR:g} with "
                              "the bulk of the instances apart)")
        return
    row["noise"] = ev
    row["run_to_run_spread"] = ev["run_to_run_spread"]
    row["detectable_change"] = pw
    if ev["confirmed"]:
        row["reason"] += f"; beyond the run-to-run noise ({ev['why']})"
    elif ev.get("weak"):  # never with host_shared: that one is set only on a change the repeats confirmed
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        todo = pw.get("repeats_to_decide") or 5
        row["reason"] = (f"{row['reason']} within one run, and the repeats moved beyond their spread but not by "
                         f"the margin {len(b)} and {len(c)} repeats need: {ev['why']}; rerun both sides with "
                         f"trtprof sweep --repeat {max(todo, 5)}")
    elif ev.get("host_shared"):
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']} within one run and beyond the run-to-run spread, but the host was "
                         f"shared: {ev['why']}; compare runs made on a quiet host")
    elif pw["underpowered"]:
        ev["underpowered"] = True
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']} within one run, not beyond the run-to-run noise ({ev['why']}), and this "
                         f"comparison could not have seen a change of the threshold's size: the smallest it could "
                         f"detect is {pw['text']}")
    else:
        row["verdict_within_run"] = within
        row["verdict"] = "no_change"
        row["reason"] = f"{row['reason']} within one run, but not beyond the run-to-run noise: {ev['why']}"
