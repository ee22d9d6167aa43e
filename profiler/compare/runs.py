"""Compare a candidate run against a baseline run from the store.

Variants are matched by key (NVTX series by domain and name). For each matched variant: the latency
verdict (``profiler.compare.stats.decide`` on the per-iteration samples), the throughput ratio, the
accuracy deltas per output (and whether a threshold that passed now fails), per-layer time deltas,
and the trend of the variant's fingerprint across the history. For the run: what changed in the
environment, which findings appeared or disappeared, and kernel-level deltas when both runs kept an
nsys capture.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from profiler.compare.stats import DEFAULT_RULE, decide, detect_step
from profiler.store import Store

ENV_FIELDS = ("gpu", "driver_version", "cuda_version", "tensorrt_version", "nsys_version", "backend", "host",
              "model", "source_hash")
ACCURACY_METRICS = ("max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "nan_count", "inf_count")
#: Samples kept per side in the JSON/report output (the verdict uses all of them).
MAX_SAMPLES_OUT = 2000
#: trtexec's enqueue-bound condition: the host enqueue takes more than this share of the GPU compute time.
HOST_BOUND_RATIO = 0.8
#: Earlier runs of a fingerprint needed to measure its run-to-run spread.
MIN_HISTORY = 3
TOP_LAYER_DELTAS = 25


def _variant_name(v: dict[str, Any]) -> str:
    return f"{v['domain']}/{v['key']}" if v.get("domain") else v["key"]


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


def _median_of(metrics: dict[str, Any], *names: str) -> float | None:
    for n in names:
        v = (metrics.get(n) or {}).get("median") if isinstance(metrics.get(n), dict) else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def host_bound(variant: dict[str, Any]) -> bool:
    """True when the host enqueue dominates a GPU backend's query (trtexec's enqueue-bound condition).

    Such a query's latency follows the host CPU, and the host varies between processes (scheduling,
    frequency, caches) by more than within one run: on an H200, the same eager sweep run twice in a row
    measured 4.97 and 2.98 ms medians, while its CUDA-graph variant measured 0.478 and 0.475 ms.
    CPU backends (synchronous enqueue) are not host-bound in this sense: their compute is the host.
    """
    m = variant.get("metrics") or {}
    if m.get("synchronous_enqueue"):
        return False
    enq = _median_of(m, "enqueue_ms")
    comp = _median_of(m, "compute_ms", "gpu_compute_ms")
    return enq is not None and comp is not None and comp > 0 and enq > HOST_BOUND_RATIO * comp


def _host_bound_verdict(row: dict[str, Any], history: dict[str, Any] | None, candidate_run: int,
                        rule: dict[str, Any]) -> None:
    """Hold a host-bound variant's regression/improvement against its run-to-run spread (in place)."""
    points = (history or {}).get("points", [])
    at = next((i for i, p in enumerate(points) if p["run_id"] == candidate_run), len(points))
    prior = [p["median_ms"] for p in points[:at]]  # runs before the candidate (oldest first)
    if len(prior) < MIN_HISTORY:
        row["verdict_within_run"] = row["verdict"]
        row["verdict"] = "inconclusive"
        row["reason"] = (f"{row['reason']}; but the query is enqueue-bound (host enqueue > {HOST_BOUND_RATIO:g} x "
                         f"compute), so its latency follows the host CPU, which varies between runs more than "
                         f"within one: {len(prior)} earlier run(s) of this fingerprint are too few to measure that "
                         f"spread (need {MIN_HISTORY}); rerun the baseline, or measure a CUDA-graph variant")
        return
    arr = np.asarray(prior, dtype=float)
    spread = float((arr.max() - arr.min()) / np.median(arr))
    row["run_to_run_spread"] = spread
    if abs(row["median_ratio"] - 1.0) <= max(spread, rule["rel_threshold"]):
        row["verdict_within_run"] = row["verdict"]
        row["verdict"] = "no_change"
        row["reason"] = (f"{row['reason']}; but the query is enqueue-bound and the change is within the "
                         f"{spread * 100:.0f}% run-to-run spread of {len(prior)} earlier runs")
    else:
        row["reason"] += f" (beyond the {spread * 100:.0f}% run-to-run spread of {len(prior)} earlier runs)"


def trend(store: Store, fingerprint: str | None, *, limit: int = 50) -> dict[str, Any] | None:
    """Median latency of every stored variant with this fingerprint, oldest first, with the step."""
    if not fingerprint:
        return None
    rows = [r for r in store.fingerprint_history(fingerprint) if r["status"] == "ok"][-limit:]
    points = [{"run_id": r["run_id"], "label": r["label"], "created_at": r["created_at"],
               "median_ms": (r["latency_ms"] or {}).get("median")} for r in rows]
    points = [p for p in points if p["median_ms"] is not None]
    if len(points) < 2:
        return None
    step = detect_step([p["median_ms"] for p in points])
    if step is not None:
        step["run_id"] = points[step["index"]]["run_id"]
    return {"fingerprint": fingerprint, "points": points, "step": step}


def compare_runs(store: Store, baseline_ref: int | str, candidate_ref: int | str,
                 rule: dict | None = None) -> dict[str, Any]:
    """The comparison as one JSON-able dict (the shape ``write_compare_report`` renders)."""
    r = {**DEFAULT_RULE, **(rule or {})}
    base = store.run_dict(baseline_ref)
    cand = store.run_dict(candidate_ref)
    bvars = {_variant_name(v): v for v in base["variants"]}
    variants = []
    for cv in cand["variants"]:
        name = _variant_name(cv)
        bv = bvars.pop(name, None)
        row: dict[str, Any] = {"key": name, "status": cv.get("status")}
        if bv is None:
            row.update({"verdict": "missing", "reason": "not in the baseline run"})
            variants.append(row)
            continue
        if cv.get("status") != "ok" or bv.get("status") != "ok":
            row.update({"verdict": "missing",
                        "reason": f"status baseline={bv.get('status')} candidate={cv.get('status')}"})
            variants.append(row)
            continue
        bs, cs = _samples(store, bv["id"]), _samples(store, cv["id"])
        verdict = decide(bs, cs, r)
        row.update(verdict.to_dict())
        bt, ct = bv.get("throughput_qps"), cv.get("throughput_qps")
        row["throughput_ratio"] = (ct / bt) if bt and ct else None
        row["baseline_samples_ms"], row["candidate_samples_ms"] = _thin(bs), _thin(cs)
        row["accuracy"], newly_failed = _accuracy_deltas(bv.get("accuracy", []), cv.get("accuracy", []))
        if newly_failed:
            row["accuracy_verdict"] = "regression"
        row["layer_deltas"] = _layer_deltas(bv.get("layers", []), cv.get("layers", []))
        row["fingerprint_changed"] = bv.get("fingerprint") != cv.get("fingerprint")
        row["trend"] = trend(store, cv.get("fingerprint"))
        row["host_bound"] = host_bound(bv) or host_bound(cv)
        if row["host_bound"] and row["verdict"] in ("regression", "improvement"):
            _host_bound_verdict(row, row["trend"], cand["id"], r)
        variants.append(row)
    for name, bv in bvars.items():
        variants.append({"key": name, "verdict": "missing", "reason": "not in the candidate run"})

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

    bf = {_finding_key(f): f for f in base["findings"]}
    cf = {_finding_key(f): f for f in cand["findings"]}
    latency_regressions = [v["key"] for v in variants if v.get("verdict") == "regression"]
    accuracy_regressions = [v["key"] for v in variants if v.get("accuracy_verdict") == "regression"]
    inconclusive = [v["key"] for v in variants if v.get("verdict") == "inconclusive"]
    summary_verdict = "regression" if latency_regressions or accuracy_regressions else (
        "improvement" if any(v.get("verdict") == "improvement" for v in variants) else
        "inconclusive" if inconclusive else "no_change")
    return {
        "kind": "compare",
        "verdict": summary_verdict,
        "latency_regressions": latency_regressions,
        "inconclusive": inconclusive,
        "accuracy_regressions": accuracy_regressions,
        "rule": r,
        "baseline": {k: base.get(k) for k in ("id", "label", "kind", "source", "created_at", *ENV_FIELDS)},
        "candidate": {k: cand.get(k) for k in ("id", "label", "kind", "source", "created_at", *ENV_FIELDS)},
        "variants": variants,
        "environment_changes": env,
        "findings_appeared": [f for k, f in cf.items() if k not in bf],
        "findings_disappeared": [f for k, f in bf.items() if k not in cf],
        "kernel_deltas": _kernel_deltas(base, cand),
    }
