"""Compare a candidate run against a baseline run from the store.

Variants are matched by key (NVTX series by domain and name; TensorRT's inference range also across its API
names, enqueueV2 against enqueueV3, when it is the one unmatched on each side). For each matched variant: the latency
verdict (``profiler.compare.stats.decide`` on the per-iteration samples), the throughput ratio, the
accuracy deltas per output (and whether a threshold that passed now fails), per-layer time deltas,
and the trend of the variant's fingerprint across the history. For the run: what changed in the
environment, which findings appeared or disappeared, and kernel-level deltas when both runs kept an
nsys capture.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler.compare.captures import TENSORRT_INFERENCE, compare_captures, side_from_run
from profiler.compare.comparable import incomparable
from profiler.compare.noise import host_bound, judge, repeat_medians
from profiler.compare.stats import DEFAULT_RULE, decide, detect_step
from profiler.errors import UsageError
from profiler.store import Store

ENV_FIELDS = ("gpu", "driver_version", "cuda_version", "tensorrt_version", "nsys_version", "backend", "host",
              "model", "source_hash")
ACCURACY_METRICS = ("max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "nan_count", "inf_count")
#: Samples kept per side in the JSON/report output (the verdict uses all of them).
MAX_SAMPLES_OUT = 2000
TOP_LAYER_DELTAS = 25
#: A per-layer time from a short profiling pass is never trusted to better than this fraction.
LAYER_NOISE_FLOOR = 0.10


def _variant_name(v: dict[str, Any]) -> str:
    return f"{v['domain']}/{v['key']}" if v.get("domain") else v["key"]



def _tensorrt_renamed(base: list[str], cand: list[str]) -> dict[str, str]:
    """{candidate key: baseline key} for the TensorRT inference range under another API name (an engine
    moved from enqueueV2 to enqueueV3 across TensorRT versions, or from eager enqueues to graph replays): one
    such range unmatched on each side."""
    b = [k for k in base if TENSORRT_INFERENCE.match(k) and k not in cand]
    c = [k for k in cand if TENSORRT_INFERENCE.match(k) and k not in base]
    return {c[0]: b[0]} if len(b) == 1 and len(c) == 1 else {}


def _samples(store: Store, variant_id: int) -> np.ndarray:
    frame = store.samples_frame(variant_id)
    for col in ("latency_ms", "compute_ms"):
        if col in frame and frame[col].notna().any():
            return frame[col].dropna().to_numpy(dtype=float)
    return np.array([], dtype=float)


def _thin(x: np.ndarray, n: int = MAX_SAMPLES_OUT) -> list[float]:
    if len(x) > n:
        x = x[np.linspace(0, len(x) - 1, n).astype(int)]
    return [float(v) for v in x]


def _accuracy_deltas(base: list[dict], cand: list[dict]) -> tuple[dict[str, Any], bool]:
    """Per output and metric: baseline, candidate, delta; True when an output that passed now fails."""
    b = {a["output"]: a for a in base}
    out, newly_failed = {}, False
    for a in cand:
        ref = b.get(a["output"])
        row = {}
        for k in ACCURACY_METRICS:
            bv, cv = (ref or {}).get(k), a.get(k)
            row[k] = {"baseline": bv, "candidate": cv,
                      "delta": (cv - bv) if isinstance(bv, (int, float)) and isinstance(cv, (int, float)) else None}
        row["passed"] = {"baseline": (ref or {}).get("passed"), "candidate": a.get("passed")}
        if a.get("passed") is False and ref is not None and ref.get("passed") is True:
            newly_failed = True  # passed in the baseline, fails in the candidate
        out[a["output"]] = row
    return out, newly_failed


def _layer_deltas(base: list[dict], cand: list[dict]) -> list[dict[str, Any]]:
    def per_layer(rows):
        t: dict[str, float] = {}
        for r in rows:
            v = r.get("time_avg_ms") if r.get("time_avg_ms") is not None else r.get("time_total_ms")
            if v is not None:
                t[r["name"]] = t.get(r["name"], 0.0) + float(v)
        return t

    b, c = per_layer(base), per_layer(cand)
    rows = []
    for name in set(b) | set(c):
        bv, cv = b.get(name), c.get(name)
        delta = (cv or 0.0) - (bv or 0.0)
        rows.append({"name": name, "baseline_ms": bv, "candidate_ms": cv, "delta_ms": delta,
                     "ratio": (cv / bv) if bv and cv is not None else None,
                     "status": "new" if bv is None else "gone" if cv is None else "both"})
    rows.sort(key=lambda r: -abs(r["delta_ms"]))
    return rows[:TOP_LAYER_DELTAS]


def _finding_key(f: dict) -> tuple:
    """Findings are the same across runs when rule, range, variant and (per-output rules) output match."""
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    return (f.get("rule"), f.get("range"), f.get("variant"), ev.get("output"))


def _kernel_deltas(base_run: dict, cand_run: dict) -> list[dict[str, Any]] | None:
    """Per-kernel-name total GPU time deltas when both runs kept a readable nsys capture."""
    paths = []
    for run in (base_run, cand_run):
        caps = [a["path"] for a in run.get("artifacts", []) if a.get("kind") == "capture"]
        paths.append(caps[0] if caps else None)
    if not all(paths):
        return None
    try:
        from profiler.capture.loader import load_trace

        sums = []
        for p in paths:
            k = load_trace(p, tables=["kernels"], columns={"kernels": ("name",)}).kernels
            dur = (k["end_ns"] - k["start_ns"]).astype("float64") / 1e6
            sums.append(dur.groupby(k["name"].astype(str)).sum())
    except Exception as exc:  # a capture moved or unreadable: say so, don't fail the comparison
        return [{"error": f"kernel deltas unavailable: {exc}"}]
    b, c = sums
    names = set(b.index) | set(c.index)
    rows = [{"name": n, "baseline_ms": float(b.get(n, 0.0)), "candidate_ms": float(c.get(n, 0.0)),
             "delta_ms": float(c.get(n, 0.0) - b.get(n, 0.0))} for n in names]
    rows.sort(key=lambda r: -abs(r["delta_ms"]))
    return rows[:TOP_LAYER_DELTAS]


def trend(store: Store, fingerprint: str | None, *, limit: int = 50) -> dict[str, Any] | None:
    """Median latency of every stored variant with this fingerprint, oldest first, with the step."""
    if not fingerprint:
        return None
    rows = [r for r in store.fingerprint_history(fingerprint) if r["status"] == "ok"][-limit:]
    points = [{"run_id": r["run_id"], "label": r["label"], "created_at": r["created_at"],
               "median_ms": (r["latency_ms"] or {}).get("median"),
               "host_others_share": r.get("host_others_share")} for r in rows]
    points = [p for p in points if p["median_ms"] is not None]
    if len(points) < 2:
        return None
    step = detect_step([p["median_ms"] for p in points])
    if step is not None:
        step["run_id"] = points[step["index"]]["run_id"]
    return {"fingerprint": fingerprint, "points": points, "step": step}


def _jitter_cov_pct(run: dict[str, Any]) -> float:
    from profiler.rules.sweep import jitter_threshold_pct

    env = {"backend": run.get("backend"), "tensorrt_version": run.get("tensorrt_version"),
           **(run.get("environment") or {})}
    return jitter_threshold_pct(env)[0]


def _prior_points(trend_: dict[str, Any] | None, candidate_run: int) -> list[dict[str, Any]]:
    """The fingerprint's runs before the candidate (oldest first)."""
    points = (trend_ or {}).get("points", [])
    at = next((i for i, p in enumerate(points) if p["run_id"] == candidate_run), len(points))
    return points[:at]



def _layer_noise(row: dict[str, Any], bv: dict[str, Any], cv: dict[str, Any]) -> float:
    """Relative uncertainty of a per-layer time: the variant's run-to-run spread when measured, else
    twice its within-run CoV, and never under LAYER_NOISE_FLOOR (a layer profile is a short separate pass)."""
    covs = [((v.get("latency_ms") or {}).get("cov_pct") or 0.0) / 100 for v in (bv, cv)
            if isinstance(v.get("latency_ms"), dict)]
    spread = row.get("run_to_run_spread")
    return max(LAYER_NOISE_FLOOR, spread or 0.0, 2 * max(covs, default=0.0))


def _judged_layers(row: dict[str, Any], bv: dict[str, Any], cv: dict[str, Any]) -> None:
    """Per-layer deltas with their uncertainty; only those beyond it are kept, and only for a variant
    whose latency changed beyond noise (otherwise any per-layer difference is noise by the variant's own
    measure)."""
    rows = _layer_deltas(bv.get("layers", []), cv.get("layers", []))
    noise = _layer_noise(row, bv, cv)
    for r in rows:
        r["uncertainty_ms"] = noise * max(r["baseline_ms"] or 0.0, r["candidate_ms"] or 0.0)
        r["beyond_noise"] = r["status"] != "both" or abs(r["delta_ms"]) > r["uncertainty_ms"]
    row["layer_noise_rel"] = noise
    if row.get("verdict") not in ("regression", "improvement"):
        row["layer_deltas"] = []
        row["layer_deltas_hidden"] = (f"{len(rows)} per-layer deltas hidden: the variant's latency did not change "
                                      "beyond noise, so its per-layer differences are noise too") if rows else None
        return
    kept = [r for r in rows if r["beyond_noise"]]
    row["layer_deltas"] = kept
    row["layer_deltas_hidden"] = (f"{len(rows) - len(kept)} per-layer deltas within their uncertainty "
                                  f"(+/-{noise * 100:.0f}% of the layer time) hidden") if len(kept) < len(rows) else None


def compare_runs(store: Store, baseline_ref: int | str, candidate_ref: int | str,
                 rule: dict | None = None, *, force: bool = False) -> dict[str, Any]:
    """The comparison as one JSON-able dict (the shape ``write_compare_report`` renders).

    Runs of different kinds, models or input shapes raise ``UsageError`` unless ``force``; a forced
    comparison carries ``forced`` (the reasons) and says so in its verdict.
    """
    r = {**DEFAULT_RULE, **(rule or {})}
    base = store.run_dict(baseline_ref)
    cand = store.run_dict(candidate_ref)
    if base.get("id") is not None and base.get("id") == cand.get("id"):
        raise UsageError(f"{baseline_ref!r} and {candidate_ref!r} are the same run ({base['id']}): compare two "
                         "different runs")
    why_not = incomparable(base, cand)
    if why_not and not force:
        raise UsageError(f"refusing to compare: {'; '.join(why_not)} (--force compares them anyway)")
    if base.get("kind") == cand.get("kind") == "analyze":  # two captures: by their inference
        return compare_captures(side_from_run(store, base), side_from_run(store, cand), r,
                                jitter_cov_pct=_jitter_cov_pct(cand))
    variants = _variant_rows(store, base, cand, r)
    bf = {_finding_key(f): f for f in base["findings"]}
    cf = {_finding_key(f): f for f in cand["findings"]}
    latency_regressions = [v["key"] for v in variants if v.get("verdict") == "regression"]
    accuracy_regressions = [v["key"] for v in variants if v.get("accuracy_verdict") == "regression"]
    inconclusive = [v["key"] for v in variants if v.get("verdict") == "inconclusive"]
    # nothing compared (no variant on both sides, or too few samples in each) decides nothing: no_change
    # would let a CI gate pass on two runs it could not tell apart
    compared = [v for v in variants if v.get("verdict") != "missing"]
    summary_verdict = "regression" if latency_regressions or accuracy_regressions else (
        "inconclusive" if inconclusive or not compared else
        "improvement" if any(v.get("verdict") == "improvement" for v in variants) else "no_change")
    return {
        "kind": "compare",
        "verdict": summary_verdict,
        "forced": why_not or None,
        "latency_regressions": latency_regressions,
        "inconclusive": inconclusive,
        "accuracy_regressions": accuracy_regressions,
        "rule": r,
        "baseline": {k: base.get(k) for k in ("id", "label", "kind", "source", "created_at", *ENV_FIELDS)},
        "candidate": {k: cand.get(k) for k in ("id", "label", "kind", "source", "created_at", *ENV_FIELDS)},
        "variants": variants,
        "environment_changes": _environment_changes(base, cand),
        "findings_appeared": [f for k, f in cf.items() if k not in bf],
        "findings_disappeared": [f for k, f in bf.items() if k not in cf],
        "kernel_deltas": _kernel_deltas(base, cand),
        # engines of other precisions compared on speed alone: say that nobody checked their outputs
        "accuracy_unmeasured": base.get("kind") == "import"
        and not any(v.get("accuracy") for run in (base, cand) for v in run["variants"]),
    }


def _variant_rows(store: Store, base: dict, cand: dict, r: dict) -> list[dict[str, Any]]:
    """One row per variant of either run: matched by key (and TensorRT's inference range across its API
    names), judged where both sides measured it, 'missing' with the reason elsewhere."""
    jitter_cov = _jitter_cov_pct(cand)
    bvars = {_variant_name(v): v for v in base["variants"]}
    renamed = _tensorrt_renamed(list(bvars), [_variant_name(v) for v in cand["variants"]])
    variants = []
    for cv in cand["variants"]:
        name = _variant_name(cv)
        bv = bvars.pop(renamed.get(name, name), None)
        row: dict[str, Any] = {"key": name, "status": cv.get("status")}
        if name in renamed:
            row["baseline_key"] = renamed[name]
        if bv is None:
            row.update({"verdict": "missing", "reason": "not in the baseline run"})
        elif cv.get("status") != "ok" or bv.get("status") != "ok":
            row.update({"verdict": "missing",
                        "reason": f"status baseline={bv.get('status')} candidate={cv.get('status')}"})
        else:
            _judged_row(store, row, bv, cv, cand["id"], r, jitter_cov)
        variants.append(row)
    for name, bv in bvars.items():
        variants.append({"key": name, "verdict": "missing", "reason": "not in the candidate run"})
    return variants


def _judged_row(store: Store, row: dict, bv: dict, cv: dict, cand_id: Any, r: dict, jitter_cov: float) -> None:
    """Fill ``row`` for a variant both runs measured: the latency verdict within and between runs, throughput,
    accuracy deltas, trend and per-layer deltas."""
    bs, cs = _samples(store, bv["id"]), _samples(store, cv["id"])
    row.update(decide(bs, cs, r).to_dict())
    bt, ct = bv.get("throughput_qps"), cv.get("throughput_qps")
    row["throughput_ratio"] = (ct / bt) if bt and ct else None
    row["baseline_samples_ms"], row["candidate_samples_ms"] = _thin(bs), _thin(cs)
    row["accuracy"], newly_failed = _accuracy_deltas(bv.get("accuracy", []), cv.get("accuracy", []))
    if newly_failed:
        row["accuracy_verdict"] = "regression"
    row["fingerprint_changed"] = bv.get("fingerprint") != cv.get("fingerprint")
    row["trend"] = trend(store, cv.get("fingerprint"))
    row["host_bound"] = host_bound(bv) or host_bound(cv)
    row["baseline_repeats_ms"], row["candidate_repeats_ms"] = repeat_medians(bv), repeat_medians(cv)
    prior = _prior_points(row["trend"], cand_id)
    judge(row, bv, cv, [p["median_ms"] for p in prior], r, jitter_cov,
          prior_shares=[p.get("host_others_share") for p in prior])
    _judged_layers(row, bv, cv)


def _environment_changes(base: dict, cand: dict) -> list[dict[str, Any]]:
    """What differs between the runs' environments (driver, GPU, versions ...) and how their queries ran."""
    env = [{"field": f, "baseline": base.get(f), "candidate": cand.get(f)}
           for f in ENV_FIELDS if base.get(f) != cand.get(f)]
    be, ce = base.get("environment") or {}, cand.get("environment") or {}
    env += [{"field": f"environment.{k}", "baseline": be.get(k), "candidate": ce.get(k)}
            for k in sorted(set(be) | set(ce)) if be.get(k) != ce.get(k)]
    # how the queries were run: a throughput measured with two queries in flight is not one measured with one
    bc, cc = base.get("config") or {}, cand.get("config") or {}
    env += [{"field": f"config.{k}", "baseline": bc.get(k, default), "candidate": cc.get(k, default)}
            for k, default in (("transfers", True), ("overlap", False))
            if (bc or cc) and bc.get(k, default) != cc.get(k, default)]
    return env
