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


def explained_by_load(shares: Sequence[float | None]) -> tuple[float, float | None]:
    """(factor, share): how large a change the busiest side's host load can explain on its own."""
    known = [float(x) for x in shares if isinstance(x, (int, float)) and math.isfinite(x)]
    if not known:
        return 1.0, None
    share = max(known)
    return 1.0 / (1.0 - min(share, MAX_EXPLAINED_SHARE)), share


def _hold_against_load(ev: dict[str, Any], ratio: float, needed: float, shares: Sequence[float | None]) -> None:
    """A confirmed change of a host-sensitive variant must also beat what the host's other load explains."""
    factor, share = explained_by_load(shares)
    ev["host_others_share"] = share
    if not ev["confirmed"] or share is None:
        return
    adjusted = ratio / factor if ratio > 1 else ratio * factor
    ev["load_adjusted_ratio"] = adjusted
    if abs(adjusted - 1.0) > needed and (adjusted > 1) == (ratio > 1):
        return
    ev["confirmed"], ev["host_shared"] = False, True
    ev["why"] += (f"; but other processes took {share * 100:.0f}% of the host's CPU while one side was timed, "
                  f"which alone can move a host-bound query by up to {factor:.2f}x (x{ratio:.3f} is "
                  f"x{adjusted:.3f} after allowing for it)")
    ev["summary"] += f", host {share * 100:.0f}% busy with others (explains up to x{factor:.2f})"


def spread_margin(n: int) -> float:
    """How many run-to-run spreads a change must exceed with ``n`` repeats on the smaller side.

    Chosen so that two sets of identical runs (log-normal medians) pass both conditions less than 0.6%
    of the time: with a margin of 1, that rate is 4% for 3 against 3, 0.9% for 4, 0.2% for 5; with
    margins 2 / 1.5 / 1 it is 0.56% / 0.17% / 0.19% (200,000 simulated pairs each). A 20% slowdown on
    runs spread by 5% is still caught 46% / 57% / 80% of the time; more repeats buy sensitivity.
    """
    return {3: 2.0, 4: 1.5}.get(n, 1.0) if n >= MIN_REPEATS else float("inf")


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
    "unmeasured": ("run-to-run spread unmeasured", "rerun both sides with `trtprof sweep --repeat 5`"),
    "capture": ("one capture a side carries no spread between runs", "time the model with `trtprof sweep "
                "--repeat 5`, which measures it"),
    "few_samples": ("too few samples in a run to test it", "measure more iterations (--iterations/--duration, or "
                    "a longer capture)"),
}


def inconclusive_cause(row: dict[str, Any]) -> str:
    """The key of INCONCLUSIVE_CAUSES for an inconclusive comparison row."""
    ev = row.get("noise") or {}
    return "few_samples" if ev.get("few_samples") else "host_busy" if ev.get("host_shared") else \
        "few_repeats" if ev.get("weak") else "capture" if ev.get("capture") else "unmeasured"


def judge(row: dict[str, Any], base: dict[str, Any], cand: dict[str, Any], prior_medians: Sequence[float],
          rule: dict[str, Any], jitter_cov_pct: float, *, prior_shares: Sequence[float | None] = ()) -> None:
    """Hold a within-run regression/improvement (``row``, in place) against the between-run evidence.
    ``prior_shares``: the host load recorded with each earlier run of the fingerprint (None where not)."""
    within = row.get("verdict")
    row["within_reason"] = row.get("reason")
    row["noise"] = {"source": None, "summary": "not needed: no change within the run"}
    if within == "inconclusive":  # stats.decide: too few samples to test the change it saw
        row["noise"] = {"source": None, "few_samples": True, "summary": "not reached: too few samples within the run"}
        return
    if within not in ("regression", "improvement"):
        return
    direction = 1 if within == "regression" else -1
    rel = float(rule["rel_threshold"])
    b, c = _finite(repeat_medians(base)), _finite(repeat_medians(cand))
    prior = _finite(prior_medians)
    sensitive = host_sensitive(base) or host_sensitive(cand)
    if len(b) >= MIN_REPEATS and len(c) >= MIN_REPEATS:
        ev = _from_repeats(direction, b, c, rel)
        if sensitive:
            _hold_against_load(ev, ev["repeat_ratio"], ev["needed"],
                               [host_share(base, repeats=True), host_share(cand, repeats=True)])
    elif len(prior) >= MIN_HISTORY:
        ev = _from_history(direction, prior, float(row["candidate_median_ms"]), rel)
        if sensitive:  # a busy host on either side: the candidate's run or any earlier one
            _hold_against_load(ev, ev["history_ratio"], ev["needed"], [host_share(cand, repeats=False),
                                                                       *prior_shares])
    else:
        noisy = noisy_reason(base, jitter_cov_pct) or noisy_reason(cand, jitter_cov_pct)
        if noisy is None:
            row["noise"] = {"source": "within-run only", "confirmed": True,
                            "summary": "unmeasured; device-bound and steady, so the within-run test stands"}
            row["reason"] += "; the variant is device-bound and steady, so the within-run test stands (no repeats)"
            return
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        capture = base.get("kind") == "range"  # a capture's range: no repeats, no fingerprint history
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
        return
    row["noise"] = ev
    row["run_to_run_spread"] = ev["run_to_run_spread"]
    if ev["confirmed"]:
        row["reason"] += f"; beyond the run-to-run noise ({ev['why']})"
    elif ev.get("weak"):  # never with host_shared: that one is set only on a change the repeats confirmed
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']} within one run, and the repeats moved beyond their spread but not by "
                         f"the margin {len(b)} and {len(c)} repeats need: {ev['why']}; rerun both sides with "
                         f"trtprof sweep --repeat 5")
    elif ev.get("host_shared"):
        row["verdict_within_run"] = within
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']} within one run and beyond the run-to-run spread, but the host was "
                         f"shared: {ev['why']}; compare runs made on a quiet host")
    else:
        row["verdict_within_run"] = within
        row["verdict"] = "no_change"
        row["reason"] = f"{row['reason']} within one run, but not beyond the run-to-run noise: {ev['why']}"
