"""Sweep rules: trtexec's warnings as findings, plus what trtexec does not say.

Each rule (scope ``sweep``) is a pure function of a :class:`profiler.rules.context.SweepContext` (the
``variants`` list of summary.json: ``latency_ms``/``enqueue_ms``/``compute_ms``/``h2d_ms``/``d2h_ms``
are ``profiler.stats.summarize`` dicts in ms, ``throughput_qps`` in queries per second) and its
thresholds, and returns findings. Rule ids are shared with the capture analysis and the layer rules
where the diagnosis is the same (``launch_overhead``, ``transfer_bound``, ``jitter``).

Thresholds (medians compared, as trtexec does):
- ``launch_overhead``: host enqueue > 0.8 x compute. Skipped for backends whose enqueue call is
  synchronous (ONNX Runtime on CPU: the call returns when the work is done, so enqueue == compute
  says nothing about launch cost).
- ``transfer_bound``: H2D or D2H >= compute.
- ``jitter``: compute CoV > 1.0 % (TensorRT 8.6 to 10.13), > 2.5 % (TensorRT 10.14 and later, and
  other GPU backends), > 5.0 % on CPU backends, where OS scheduling and frequency scaling add spread
  that is not the model's; medium above 4x the limit.
- ``multistream_latency``: with several concurrent streams, per-query latency includes waiting for the
  other streams; compare throughput instead (trtexec's caveat).
- ``workspace_limited`` / ``stream_scaling``: differences under 5 % of the median (or of throughput) are
  treated as noise.

Thresholds are overridable per rule: ``sweep_findings(variants, env, overrides={"jitter": {"cov_pct": 3}})``
(``--threshold jitter.cov_pct=3``; the ``"sweep.jitter"`` keys of configurations stored before are read too).

``precision_regression`` and ``precision_model_arithmetic`` judge the context's accuracy checks
(:mod:`profiler.rules.sweep_accuracy`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

from profiler.findings import Finding
from profiler.rules import Overrides, Thresholds, rule, run_rules
from profiler.rules._trtexec import (ENQUEUE_BOUND_RATIO, JITTER_COV_PCT_10_14, JITTER_MEDIUM_OVER_LIMIT,
                                     TRANSFER_BOUND_RATIO, jitter_cov_limit)
from profiler.rules.context import AccuracyCheck, SweepContext, Variant

JITTER_COV_PCT_GPU = JITTER_COV_PCT_10_14
JITTER_COV_PCT_CPU = 5.0
SPEEDUP_NOISE = 0.05
"""Latency or throughput differences under this share are noise (workspace_limited, stream_scaling)."""


def _med(v: Variant | None, part: str) -> float | None:
    d = (v or {}).get(part)
    if not isinstance(d, dict):
        return None
    m = d.get("median")
    return float(m) if isinstance(m, (int, float)) and m == m else None


def _ok(variants: Iterable[Variant]) -> list[Variant]:
    return [v for v in variants if v.get("status") == "ok" and _med(v, "latency_ms") is not None]


def jitter_threshold_pct(environment: dict[str, Any] | None) -> tuple[float, str]:
    """(CoV threshold in %, why) for the backend that measured the sweep."""
    env = environment or {}
    backend = env.get("name") or env.get("backend")
    if backend == "tensorrt":  # trtexec's own threshold depends on the TensorRT release
        return jitter_cov_limit(env.get("version") or env.get("tensorrt_version"))
    from profiler.backends import ran_on_gpu

    if ran_on_gpu(env):
        return JITTER_COV_PCT_GPU, "GPU backend other than TensorRT: trtexec's current threshold"
    return JITTER_COV_PCT_CPU, "CPU backend: OS scheduling and frequency scaling widen the spread"


def accuracy_passed(v: Variant) -> bool | None:
    """False if any output breached its threshold, True if all passed, None when not compared."""
    acc = v.get("accuracy") or {}
    flags = [m.get("passed") for m in acc.values() if isinstance(m, dict) and m.get("passed") is not None]
    if not flags:
        return None
    return all(flags)


@rule("launch_overhead", scope="sweep", defaults={"enqueue_over_compute": ENQUEUE_BOUND_RATIO})
def launch_overhead(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Enqueue-bound: the host's enqueue call takes more than 0.8 x the compute it launches."""
    limit = float(t["enqueue_over_compute"])
    out = []
    for v in _ok(ctx.variants):
        if v.get("synchronous_enqueue"):
            continue
        enq, comp = _med(v, "enqueue_ms"), _med(v, "compute_ms")
        if enq is None or comp is None or comp <= 0:
            continue
        if enq > limit * comp:
            out.append(Finding(
                rule="launch_overhead", severity="medium", variant=v["key"],
                title=f"{v['key']} is enqueue-bound: the host spends {enq:.3f} ms launching {comp:.3f} ms of compute",
                evidence={"median_enqueue_ms": enq, "median_compute_ms": comp, "enqueue_over_compute": enq / comp},
                threshold={"enqueue_over_compute": limit},
                recommendation="Capture the inference in a CUDA graph (--cuda-graph on), batch more work per "
                               "query, or run several streams so launches overlap compute."))
    return out


@rule("variant_failed", scope="sweep")
def variant_failed(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """A variant that was asked for and could not be built or run: the sweep did not measure it.

    Skips (a combination the backend cannot run, said before anything ran) are not failures."""
    out = []
    for v in ctx.variants:
        if v.get("status") != "failed":
            continue
        err = str(v.get("error") or "no reason recorded")
        step = next((k for k, st in (v.get("checklist") or {}).items()
                     if isinstance(st, dict) and st.get("status") == "failed"), None)
        out.append(Finding(
            rule="variant_failed", severity="high", variant=v["key"],
            title=f"{v['key']} failed{f' at {step}' if step else ''}: {err}",
            evidence={"error": err, "failed_step": step, "precision": v.get("precision")},
            recommendation=("An invalid converted graph is the converter's bug or a model pattern it mishandles: "
                            "keep the failing nodes in float32 (the error names them) or export the model "
                            "with its own fp16/int8 path; a backend limitation needs another backend.")))
    return out


@rule("transfer_bound", scope="sweep", defaults={"transfer_over_compute": TRANSFER_BOUND_RATIO})
def transfer_bound(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Transfer-bound: H2D or D2H copies take at least as long as the compute."""
    limit = float(t["transfer_over_compute"])
    out = []
    for v in _ok(ctx.variants):
        comp = _med(v, "compute_ms")
        h2d, d2h = _med(v, "h2d_ms"), _med(v, "d2h_ms")
        if comp is None or (h2d is None and d2h is None):
            continue
        worst = max((x for x in (h2d, d2h) if x is not None), default=0.0)
        if worst >= limit * comp:
            which = "H2D" if (h2d or 0.0) >= (d2h or 0.0) else "D2H"
            out.append(Finding(
                rule="transfer_bound", severity="medium", variant=v["key"],
                title=f"{v['key']} is transfer-bound: {which} copies take {worst:.3f} ms against {comp:.3f} ms of compute",
                evidence={"median_h2d_ms": h2d, "median_d2h_ms": d2h, "median_compute_ms": comp},
                threshold={"transfer_over_compute": limit},
                recommendation="Keep inputs and outputs on the device between queries, use pinned host memory, "
                               "or overlap copies with compute on separate streams."))
    return out


@rule("jitter", scope="sweep", defaults={"cov_pct": None, "medium_over_limit": JITTER_MEDIUM_OVER_LIMIT})
def jitter(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Unstable: the compute time's coefficient of variation exceeds the backend's threshold
    (``cov_pct`` None: the backend's, :func:`jitter_threshold_pct`)."""
    given = t["cov_pct"]
    if given is None:
        limit, why = jitter_threshold_pct(ctx.environment)
    else:
        limit, why = float(given), "given on the command line"
    out = []
    for v in _ok(ctx.variants):
        part = "compute_ms" if isinstance(v.get("compute_ms"), dict) else "latency_ms"
        cov = v[part].get("cov_pct")
        if cov is None or cov != cov or cov <= limit:
            continue
        out.append(Finding(
            rule="jitter", severity="medium" if cov > t["medium_over_limit"] * limit else "low", variant=v["key"],
            title=f"{v['key']} is unstable: compute time varies by {cov:.1f}% (CoV) over {v[part].get('count')} queries",
            evidence={"compute_cov_pct": cov, "median_compute_ms": v[part].get("median"),
                      "p99_compute_ms": v[part].get("p99"), "max_compute_ms": v[part].get("max")},
            threshold={"cov_pct": limit, "why": why},
            recommendation="Lock clocks, keep other work off the device (and the CPU), run longer (--duration), "
                           "and compare medians rather than means."))
    return out


@rule("multistream_latency", scope="sweep")
def multistream_latency(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Multi-stream latencies include waiting for the other streams: compare throughput instead."""
    ok = _ok(ctx.variants)
    multi = [v for v in ok if (v.get("streams") or 1) > 1]
    if not multi:
        return []
    single = {(v["precision"], v.get("workspace_bytes"), bool(v.get("cuda_graph"))): v
              for v in ok if (v.get("streams") or 1) == 1}
    rows = []
    for v in multi:
        base = single.get((v["precision"], v.get("workspace_bytes"), bool(v.get("cuda_graph"))))
        rows.append({"variant": v["key"], "streams": v["streams"], "median_latency_ms": _med(v, "latency_ms"),
                     "single_stream_median_latency_ms": _med(base, "latency_ms"),
                     "throughput_qps": v.get("throughput_qps")})
    return [Finding(
        rule="multistream_latency", severity="info",
        title=f"{len(multi)} multi-stream variant(s): their latencies include waiting for the other streams",
        evidence={"variants": rows},
        recommendation="Judge multi-stream variants by throughput; take per-query latency from the "
                       "single-stream variant.")]


@rule("fastest_variant", scope="sweep")
def fastest_variant(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Which variant is fastest (single-stream median latency), and the highest throughput."""
    ok = _ok(ctx.variants)
    if not ok:
        return []
    single = [v for v in ok if (v.get("streams") or 1) == 1] or ok
    by_latency = min(single, key=lambda v: _med(v, "latency_ms"))
    tput = [v for v in ok if isinstance(v.get("throughput_qps"), (int, float))]
    by_tput = max(tput, key=lambda v: v["throughput_qps"]) if tput else None
    ref = next((v for v in single if v["precision"] == "fp32"
                and v.get("workspace_bytes") == by_latency.get("workspace_bytes")
                and bool(v.get("cuda_graph")) == bool(by_latency.get("cuda_graph"))), None)
    ev: dict[str, Any] = {"lowest_latency_variant": by_latency["key"],
                          "median_latency_ms": _med(by_latency, "latency_ms"),
                          "accuracy_passed": accuracy_passed(by_latency)}
    if ref is not None and ref is not by_latency:
        ev["fp32_variant"] = ref["key"]
        ev["speedup_vs_fp32"] = _med(ref, "latency_ms") / _med(by_latency, "latency_ms")
    if by_tput is not None:
        ev["highest_throughput_variant"] = by_tput["key"]
        ev["throughput_qps"] = by_tput["throughput_qps"]
    title = f"Fastest variant: {by_latency['key']} ({_med(by_latency, 'latency_ms'):.3f} ms median latency"
    if "speedup_vs_fp32" in ev:
        title += f", {ev['speedup_vs_fp32']:.2f}x fp32"
    title += ")"
    rec = ""
    if accuracy_passed(by_latency) is False:
        passing = [v for v in single if accuracy_passed(v) is not False]
        if passing:
            best_ok = min(passing, key=lambda v: _med(v, "latency_ms"))
            ev["fastest_within_accuracy_thresholds"] = best_ok["key"]
            rec = (f"{by_latency['key']} breaches its accuracy thresholds; the fastest variant within them is "
                   f"{best_ok['key']}.")
    return [Finding(rule="fastest_variant", severity="info", variant=by_latency["key"], title=title,
                    evidence=ev, recommendation=rec)]


@rule("workspace_limited", scope="sweep", defaults={"min_slowdown_pct": SPEEDUP_NOISE * 100})
def workspace_limited(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Whether more workspace made a variant faster (the smaller workspace limited its tactics)."""
    tol = float(t["min_slowdown_pct"]) / 100
    groups: dict[tuple, list[Variant]] = defaultdict(list)
    for v in _ok(ctx.variants):
        if v.get("workspace_bytes") is not None:
            groups[(v["precision"], v.get("streams"), bool(v.get("cuda_graph")))].append(v)
    out = []
    for members in groups.values():
        if len({v["workspace_bytes"] for v in members}) < 2:
            continue
        members = sorted(members, key=lambda v: v["workspace_bytes"])
        best = min(members, key=lambda v: _med(v, "latency_ms"))
        table = {v["key"]: _med(v, "latency_ms") for v in members}
        slower = [v for v in members if v["workspace_bytes"] < best["workspace_bytes"]
                  and _med(v, "latency_ms") > _med(best, "latency_ms") * (1 + tol)]
        for v in slower:
            pct = (_med(v, "latency_ms") / _med(best, "latency_ms") - 1) * 100
            out.append(Finding(
                rule="workspace_limited", severity="medium", variant=v["key"],
                title=f"{v['key']} is workspace-limited: {pct:.0f}% slower than {best['key']}",
                evidence={"median_latency_ms_by_variant": table, "workspace_bytes": v["workspace_bytes"],
                          "best_workspace_bytes": best["workspace_bytes"], "slowdown_pct": pct},
                threshold={"min_slowdown_pct": tol * 100},
                recommendation=f"Build with at least {best['workspace_bytes']} bytes of workspace; the builder "
                               "needs it for faster tactics."))
        if not slower:
            smallest = members[0]
            out.append(Finding(
                rule="workspace_limited", severity="info", variant=smallest["key"],
                title=f"More workspace did not help {smallest['precision']}: {smallest['key']} is within "
                      f"{tol:.0%} of the best",
                evidence={"median_latency_ms_by_variant": table},
                threshold={"min_slowdown_pct": tol * 100},
                recommendation=f"{smallest['workspace_bytes']} bytes of workspace are enough; the rest can "
                               "stay with the service."))
    return out


@rule("stream_scaling", scope="sweep", defaults={"min_gain_pct": SPEEDUP_NOISE * 100})
def stream_scaling(ctx: SweepContext, t: Thresholds) -> list[Finding]:
    """Whether more concurrent streams raised throughput."""
    tol = float(t["min_gain_pct"]) / 100
    groups: dict[tuple, list[Variant]] = defaultdict(list)
    for v in _ok(ctx.variants):
        if isinstance(v.get("throughput_qps"), (int, float)):
            groups[(v["precision"], v.get("workspace_bytes"), bool(v.get("cuda_graph")))].append(v)
    out = []
    for members in groups.values():
        if len({v.get("streams") or 1 for v in members}) < 2:
            continue
        members = sorted(members, key=lambda v: v.get("streams") or 1)
        base = members[0]
        rows, flat = [], []
        prev = base
        for v in members:
            gain = v["throughput_qps"] / base["throughput_qps"]
            rows.append({"variant": v["key"], "streams": v.get("streams") or 1, "throughput_qps": v["throughput_qps"],
                         "speedup": gain, "efficiency": gain / ((v.get("streams") or 1) / (base.get("streams") or 1))})
            if v is not base and v["throughput_qps"] < prev["throughput_qps"] * (1 + tol):
                flat.append(v["key"])
            prev = v
        top = members[-1]
        best = max(members, key=lambda v: v["throughput_qps"])
        gain = top["throughput_qps"] / base["throughput_qps"]
        if flat:
            sev = "medium"
            title = (f"More streams did not raise {base['precision']} throughput beyond {best['key']} "
                     f"({best['throughput_qps']:.1f} qps)")
            rec = (f"Use {best.get('streams') or 1} stream(s): more concurrent contexts do not overlap (the device, "
                   "or the CPU, is already saturated) and only cost memory and latency.")
        else:
            sev = "info"
            title = (f"Streams scale {base['precision']} throughput {gain:.2f}x from {base.get('streams') or 1} to "
                     f"{top.get('streams') or 1} stream(s)")
            rec = "More streams still help; try more until throughput stops rising."
        out.append(Finding(rule="stream_scaling", severity=sev, variant=best["key"], title=title,
                           evidence={"scaling": rows, "no_gain_variants": flat},
                           threshold={"min_gain_pct": tol * 100}, recommendation=rec))
    return out


def sweep_findings(variants: list[Variant], environment: dict[str, Any] | None = None,
                   overrides: Overrides | None = None, *, accuracy_checks: Iterable[AccuracyCheck] = (),
                   accuracy_limits: Mapping[str, Mapping[str, float]] | None = None) -> list[Finding]:
    """Every sweep rule over the variant records and accuracy checks (most severe first); ``accuracy_limits``
    per precision, None for the defaults."""
    ctx = SweepContext(list(variants), dict(environment or {}), list(accuracy_checks), accuracy_limits)
    return run_rules("sweep", ctx, overrides=overrides).findings
