"""Compare two captures by their inference: ``trtprof compare`` of two analyses (stored runs, or two JSON
files of ``trtprof analyze``).

A capture's NVTX series are not a sweep's variants: two builds of one app name their ranges differently
(an eager enqueue against the graph replays that replaced it), number them (``Inference 0`` ...
``Inference 99``: one series each, one instance each), and most of them are layers or stages of the one
range that matters, the inference. So:

1. Series are matched by their normalised name: a trailing index number becomes ``#`` (``Inference 12``,
   ``step_3``, ``batch[7]`` -> ``Inference #``, ``step #``, ``batch #``), and numbered series of at most
   NUMBERED_MAX_COUNT instances each are pooled into one.
2. The units (each analysis's ``inference.series``) are matched first: by normalised name, else by their role
   (each is its capture's inference, whatever its name); the verdict is the unit's.
3. Each instance is judged on its time per inference: the larger of its host time (the range's wall time)
   and its GPU busy time, which is what bounds a loop of them. When one side's GPU time is unmeasured (no
   GPU work recorded for the unit, or the capture's integrity says GPU time is not to be trusted), host
   time alone, and the comparison says so.
4. One capture a side has no repeats: a host-sensitive change must pass ``noise.CAPTURE_RUN_TO_RUN_FACTOR``
   (``profiler.compare.noise.judge``).
5. Without a unit on either side, per-kernel-name GPU time (total and per call) decides: the per-call change of
   the matched kernels weighted by the baseline's calls, with the largest significant changes named.

The comparison says how many series it compared and how many it could not match on each side.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.compare.noise import judge
from profiler.compare.stats import DEFAULT_RULE, decide
from profiler.errors import InputError

#: Numbered series (``Inference 7``) are pooled into one when each has at most this many instances (a range per
#: inference); numbered series with more (``layer1`` ... ``layer4``, each once per inference) stay apart.
NUMBERED_MAX_COUNT = 2
#: Without a unit from either analysis, a numbered series pooled on both sides from at least this many ranges is
#: the unit (the one with the most instances): ``Inference 0`` ... ``Inference 59`` is one inference per range.
NUMBERED_UNIT_MIN_RANGES = 10
#: Kernels whose per-call median moved by more than the relative threshold and lies outside the baseline's
#: per-call range (min to max) are significant; the verdict without a unit needs the matched kernels to carry at
#: least this share of the baseline's GPU time, else it is inconclusive.
KERNEL_MIN_MATCHED_SHARE = 0.5
#: Kernel changes named in the verdict.
TOP_KERNEL_CHANGES = 5

_NUMBERED = re.compile(r"^(?P<base>.*?\S)(?:[\s_\-:#]+|[\s_\-:#]*[\[(])(?P<num>\d+)[\])]?$")


def normalised(name: str) -> str:
    """``Inference 12`` -> ``Inference #``; ``step_3``, ``batch[7]``, ``iter-40`` -> ``step #``, ``batch #``,
    ``iter #``; a name without a separated trailing number (``enqueueV3``, ``fc2``, ``Inference #``) stays."""
    m = _NUMBERED.match(name)
    if not m or not m.group("base").strip(" _-:#[("):
        return name
    return f"{m.group('base').rstrip(' _-:#[(')} #"


@dataclass
class Series:
    """One (possibly pooled) series of a capture: per-instance host and GPU time in ms."""

    key: str
    names: list[str]
    host_ms: np.ndarray
    gpu_ms: np.ndarray


@dataclass
class CaptureSide:
    """What one side's analysis says: its series, its unit (a key of ``series``), its kernels."""

    info: dict[str, Any]
    doc: dict[str, Any]
    series: dict[str, Series] = field(default_factory=dict)
    unit: str | None = None

    @property
    def gpu_trusted(self) -> bool:
        """False when the analysis's integrity check says its GPU time does not hold."""
        integ = self.doc.get("integrity") if isinstance(self.doc.get("integrity"), dict) else {}
        return not any("gpu" in str(x).lower() for x in integ.get("untrusted") or [])


def _range_key(r: dict[str, Any]) -> str:
    return f"{r['domain']}/{r['name']}" if r.get("domain") else str(r["name"])


def _unit_key(doc: dict[str, Any]) -> str | None:
    """The key (``domain/name``) of the series the analysis chose as its inference, None without one."""
    inf = doc.get("inference") if isinstance(doc.get("inference"), dict) else {}
    series = inf.get("series")
    if not series:
        return None
    for r in doc.get("ranges") or []:
        if series in (f"{r.get('domain')}:{r.get('name')}", r.get("name"), _range_key(r)):
            return _range_key(r)
    return None


def _pool(raw: dict[str, tuple[int, np.ndarray, np.ndarray]]) -> tuple[dict[str, Series], dict[str, str]]:
    """Series keyed by normalised name ({raw key: series key} too): numbered one-instance series pooled."""
    groups: dict[str, list[str]] = {}
    for k in raw:
        groups.setdefault(normalised(k), []).append(k)
    out: dict[str, Series] = {}
    where: dict[str, str] = {}
    for norm, keys in groups.items():
        pooled = len(keys) > 1 and max(raw[k][0] for k in keys) <= NUMBERED_MAX_COUNT
        for names in ([keys] if pooled else [[k] for k in keys]):
            key = norm if pooled else names[0]
            out[key] = Series(key, names, np.concatenate([raw[k][1] for k in names]),
                              np.concatenate([raw[k][2] for k in names]))
            where.update({k: key for k in names})
    return out, where


def _side(info: dict[str, Any], doc: dict[str, Any], raw: dict[str, tuple[int, np.ndarray, np.ndarray]]) -> CaptureSide:
    side = CaptureSide(info, doc)
    side.series, where = _pool(raw)
    unit = _unit_key(doc)
    side.unit = where.get(unit) if unit else None
    return side


def _arr(values: Any) -> np.ndarray:
    a = np.asarray([float(v) if isinstance(v, (int, float)) else np.nan for v in values or []], dtype=float)
    return a


def side_from_document(doc: dict[str, Any], path: str | Path) -> CaptureSide:
    """One side from an analysis JSON document (``trtprof analyze --json``): its ranges' instances."""
    raw = {}
    for r in doc.get("ranges") or []:
        inst = r.get("instances") if isinstance(r.get("instances"), dict) else {}
        host = _arr(inst.get("wall_ms"))
        gpu = _arr(inst.get("gpu_busy_ms")) if inst.get("gpu_busy_ms") is not None else np.zeros(len(host))
        if len(gpu) != len(host):
            gpu = np.zeros(len(host))
        raw[_range_key(r)] = (int(r.get("count") or len(host)), host, np.nan_to_num(gpu))
    info = {"id": None, "label": Path(path).name, "kind": "analyze", "source": str(path),
            "created_at": None, **{k: (doc.get("capture") or {}).get(k) for k in ("nsys_version",)}}
    return _side(info, doc, raw)


def load_document(path: str | Path) -> dict[str, Any]:
    """An analysis JSON file, or InputError saying what it is instead."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("ranges"), list) or "capture" not in doc:
        raise InputError(f"{path}: not the JSON of `trtprof analyze` (it has no 'capture' and 'ranges'); compare "
                         "two analyses, or two stored runs")
    return doc


def side_from_run(store: Any, run: dict[str, Any]) -> CaptureSide:
    """One side from a stored analysis run: its summary and each range variant's samples."""
    raw = {}
    for v in run.get("variants") or []:
        f = store.samples_frame(v["id"])
        lat = f["latency_ms"].to_numpy(dtype=float) if "latency_ms" in f else np.zeros(0)
        enq = f["enqueue_ms"].to_numpy(dtype=float) if "enqueue_ms" in f else np.full(len(lat), np.nan)
        host = np.where(np.isfinite(enq), enq, lat)  # the enqueue's own time where latency is its GPU work's
        gpu = np.nan_to_num(f["gpu_busy_ms"].to_numpy(dtype=float)) if "gpu_busy_ms" in f else np.zeros(len(lat))
        key = f"{v['domain']}/{v['key']}" if v.get("domain") else str(v["key"])
        raw[key] = (int((v.get("metrics") or {}).get("count") or len(host)), host, gpu)
    info = {k: run.get(k) for k in ("id", "label", "kind", "source", "created_at", "gpu", "driver_version",
                                    "cuda_version", "nsys_version", "source_hash")}
    return _side(info, dict(run.get("summary") or {}), raw)


# ----------------------------------------------------------------------------- matching

def _match(base: CaptureSide, cand: CaptureSide) -> tuple[list[tuple[str, str, str]], list[str], list[str]]:
    """[(baseline key, candidate key, how)], the unit first; then the unmatched keys of each side."""
    bl, cl = dict(base.series), dict(cand.series)
    pairs = []
    bu, cu = base.unit, cand.unit
    if bu is None and cu in bl:
        bu = cu  # the baseline's analysis chose no unit but has the candidate's
    if cu is None and bu in cl:
        cu = bu
    if bu is not None and cu is not None and bu != cu:  # a name match beats a role match
        bu, cu = (cu, cu) if cu in bl else (bu, bu) if bu in cl else (bu, cu)
    if bu is None or cu is None:  # no analysis of the unit (an older stored run): TensorRT's inference range
        bu, cu = _tensorrt_inference(list(bl), list(cl))
    how = None
    if bu is None or cu is None:  # ... or the numbered ranges, one per inference
        bu = cu = _numbered_unit(base, cand)
        how = "unit, by name (numbered ranges pooled; neither analysis chose a unit)"
    if bu is not None and cu is not None:
        pairs.append((bu, cu, how or ("unit, by name" if bu == cu else "unit, by role")))
        bl.pop(bu), cl.pop(cu)
    for k in [k for k in cl if k in bl]:
        pairs.append((k, k, "name"))
        bl.pop(k), cl.pop(k)
    return pairs, sorted(bl), sorted(cl)


def _numbered_unit(base: CaptureSide, cand: CaptureSide) -> str | None:
    """The numbered series pooled on both sides from NUMBERED_UNIT_MIN_RANGES ranges or more with the most
    instances, None without one."""
    both = [k for k, s in base.series.items() if k in cand.series
            and min(len(s.names), len(cand.series[k].names)) >= NUMBERED_UNIT_MIN_RANGES]
    return max(both, key=lambda k: min(len(base.series[k].host_ms), len(cand.series[k].host_ms)), default=None)


TENSORRT_INFERENCE = re.compile(r"^TensorRT/(ExecutionContext::(enqueue|execute)\w*|cudaGraphLaunch)$")
"""TensorRT's range around each inference: enqueue, enqueueV2/V3, execute, executeV2 by version and API, or
the range made for each graph replay of it (:mod:`profiler.capture.replays`: trtexec --useCudaGraph)."""


def _tensorrt_inference(base: list[str], cand: list[str]) -> tuple[str | None, str | None]:
    """The one TensorRT inference range (enqueue, execute, the graph replays) of each side, None if not one."""
    b = [k for k in base if TENSORRT_INFERENCE.match(k)]
    c = [k for k in cand if TENSORRT_INFERENCE.match(k)]
    return (b[0], c[0]) if len(b) == 1 and len(c) == 1 else (None, None)


# ----------------------------------------------------------------------------- judging

def _measure(b: Series, c: Series, base: CaptureSide, cand: CaptureSide) -> tuple[np.ndarray, np.ndarray, str, str | None]:
    """(baseline samples, candidate samples, what they are, why GPU time is left out or None)."""
    def gpu_measured(s: Series, side: CaptureSide) -> bool:
        return side.gpu_trusted and len(s.gpu_ms) > 0 and bool(np.any(s.gpu_ms > 0))

    bg, cg = gpu_measured(b, base), gpu_measured(c, cand)
    if bg and cg:
        return np.fmax(b.host_ms, b.gpu_ms), np.fmax(c.host_ms, c.gpu_ms), "inference", None
    if not bg and not cg:
        return b.host_ms, c.host_ms, "host", None  # a host-only range on both sides: nothing left out
    which = "baseline" if not bg else "candidate"
    side = base if not bg else cand
    why = ("its capture's integrity check does not trust GPU time" if not side.gpu_trusted else
           "no GPU work was recorded for it")
    return b.host_ms, c.host_ms, "host", f"the {which}'s GPU time is unmeasured ({why}): judged on host time"


def _meta(x: np.ndarray, host: np.ndarray, gpu: np.ndarray) -> dict[str, Any]:
    """What ``noise.judge`` reads of a side: a capture range, its CoV, its host and GPU medians."""
    x = x[np.isfinite(x)]
    med = float(np.median(x)) if len(x) else float("nan")
    cov = float(np.std(x) / np.mean(x) * 100) if len(x) > 1 and np.mean(x) > 0 else None
    return {"kind": "range", "latency_ms": {"median": med, "cov_pct": cov},
            "enqueue_ms": {"median": float(np.median(host)) if len(host) else None},
            "compute_ms": {"median": float(np.median(gpu)) if len(gpu) else None}}


def _row(bk: str, ck: str, how: str, base: CaptureSide, cand: CaptureSide, rule: dict, jitter: float) -> dict:
    b, c = base.series[bk], cand.series[ck]
    bs, cs, measure, unmeasured = _measure(b, c, base, cand)
    row: dict[str, Any] = {"key": ck, "status": "ok", "matched_by": how, "role": "unit" if how.startswith("unit")
                           else "range", "measure": measure}
    if bk != ck:
        row["baseline_key"] = bk
    if len(b.names) > 1 or len(c.names) > 1:
        row["pooled"] = {"baseline": len(b.names), "candidate": len(c.names)}
    row.update(decide(bs, cs, rule).to_dict())
    if unmeasured:
        row["gpu_unmeasured"] = unmeasured
        row["reason"] = f"{unmeasured}; {row['reason']}"
    row["baseline_samples_ms"] = [float(v) for v in bs[np.isfinite(bs)][:2000]]
    row["candidate_samples_ms"] = [float(v) for v in cs[np.isfinite(cs)][:2000]]
    if row["verdict"] == "missing":
        return row
    bm, cm = _meta(bs, b.host_ms, b.gpu_ms), _meta(cs, c.host_ms, c.gpu_ms)
    noisy = ("it is timed on the host, whose speed differs between processes" if measure == "host" else None)
    judge(row, bm, cm, [], rule, jitter, samples=(bs, cs), noisy=noisy)
    return row


def kernel_changes(base: dict[str, Any], cand: dict[str, Any], rule: dict) -> dict[str, Any]:
    """Per-kernel-name GPU time of two analyses (their ``top_kernels``): total and per call, the significant
    per-call changes (largest first), and the per-call change of the matched kernels at the baseline's calls."""
    bk = {k["name"]: k for k in base.get("top_kernels") or [] if isinstance(k, dict) and k.get("name")}
    ck = {k["name"]: k for k in cand.get("top_kernels") or [] if isinstance(k, dict) and k.get("name")}
    rel = float(rule["rel_threshold"])
    rows = []
    for name in sorted(set(bk) | set(ck)):
        b, c = bk.get(name) or {}, ck.get(name) or {}
        row = {"name": name, "baseline_ms": b.get("total_ms"), "candidate_ms": c.get("total_ms"),
               "baseline_calls": b.get("count"), "candidate_calls": c.get("count"),
               "baseline_per_call_ms": b.get("median_ms"), "candidate_per_call_ms": c.get("median_ms"),
               "status": "both" if b and c else "gone" if b else "new"}
        if b and c and b.get("median_ms") and c.get("median_ms") is not None:
            ratio = c["median_ms"] / b["median_ms"]
            outside = c["median_ms"] > (b.get("max_ms") or math.inf) or c["median_ms"] < (b.get("min_ms") or 0.0)
            row.update(per_call_ratio=ratio, significant=bool(abs(ratio - 1) > rel and outside),
                       delta_ms=(c["median_ms"] - b["median_ms"]) * (b.get("count") or 0))
        rows.append(row)
    both = [r for r in rows if r["status"] == "both" and "per_call_ratio" in r]
    total_b = sum(float(r["baseline_ms"] or 0) for r in rows if r["baseline_ms"] is not None)
    at_b = sum(r["baseline_per_call_ms"] * (r["baseline_calls"] or 0) for r in both)
    change = sum(r["delta_ms"] for r in both) / at_b if at_b else None
    share = at_b / total_b if total_b else 0.0
    sig = sorted([r for r in both if r["significant"]], key=lambda r: -abs(r["delta_ms"]))
    if not both or share < KERNEL_MIN_MATCHED_SHARE:
        verdict = "inconclusive"
    elif change is not None and abs(change) > rel and sig:
        verdict = "regression" if change > 0 else "improvement"
    else:
        verdict = "no_change"
    return {"verdict": verdict, "per_call_change": change, "matched_share": share, "matched": len(both),
            "unmatched": len(rows) - len(both), "significant": sig[:TOP_KERNEL_CHANGES], "kernels": rows}


def _kernel_text(k: dict[str, Any]) -> str:
    """The kernel comparison in one sentence."""
    if k["verdict"] == "inconclusive":
        return (f"per-kernel GPU time: {k['matched']} kernel names on both sides carry "
                f"{k['matched_share'] * 100:.0f}% of the baseline's GPU time, under the "
                f"{KERNEL_MIN_MATCHED_SHARE * 100:g}% needed to judge")
    named = ", ".join(f"{r['name'][:60]} x{r['per_call_ratio']:.3f} per call" for r in k["significant"])
    return (f"per-kernel GPU time of {k['matched']} kernel names on both sides ({k['matched_share'] * 100:.0f}% "
            f"of the baseline's): {k['per_call_change'] * 100:+.1f}% per call at the baseline's calls"
            + (f"; largest significant changes: {named}" if named else "; no kernel changed significantly"))


def compare_captures(base: CaptureSide, cand: CaptureSide, rule: dict | None = None, *,
                     jitter_cov_pct: float = 5.0) -> dict[str, Any]:
    """The comparison of two captures, in the shape of ``compare_runs``'s document, plus ``captures``."""
    r = {**DEFAULT_RULE, **(rule or {})}
    pairs, only_b, only_c = _match(base, cand)
    rows = [_row(bk, ck, how, base, cand, r, jitter_cov_pct) for bk, ck, how in pairs]
    rows += [{"key": k, "verdict": "missing", "reason": "not in the candidate capture"} for k in only_b]
    rows += [{"key": k, "verdict": "missing", "reason": "not in the baseline capture"} for k in only_c]
    unit = next((x for x in rows if x.get("role") == "unit"), None)
    kernels = kernel_changes(base.doc, cand.doc, r) if unit is None else None
    if unit is not None:
        verdict = unit["verdict"] if unit["verdict"] != "missing" else "inconclusive"
        decided_by = "unit"
    elif kernels["kernels"]:
        verdict, decided_by = kernels["verdict"], "kernels"
    else:  # neither a unit nor kernel times (a stored run without its analysis): every matched range
        verdict, decided_by = _by_ranges(rows), "ranges"
    compared = sum(1 for x in rows if x.get("verdict") != "missing")
    captures = {"decided_by": decided_by, "ranges_compared": compared,
                "unmatched": {"baseline": only_b, "candidate": only_c},
                "baseline_unit": base.unit, "candidate_unit": cand.unit, "kernels": kernels}
    if unit is not None:
        captures["unit"] = {k: unit.get(k) for k in ("key", "baseline_key", "matched_by", "measure", "verdict",
                                                     "median_ratio", "gpu_unmeasured", "detectable_change")}
    captures["summary"] = _summary(captures, unit, kernels)
    gate = [x["key"] for x in rows if x.get("verdict") == "regression" and (x is unit or decided_by == "ranges")]
    if decided_by == "kernels" and verdict == "regression":
        gate = ["per-kernel GPU time"]
    return {"kind": "compare", "verdict": verdict, "forced": None, "latency_regressions": gate,
            "inconclusive": [x["key"] for x in rows if x.get("verdict") == "inconclusive"
                             and (x is unit or decided_by == "ranges")],
            "accuracy_regressions": [], "rule": r, "baseline": base.info, "candidate": cand.info,
            "variants": rows, "captures": captures, "environment_changes": _env(base, cand),
            "findings_appeared": _findings(cand, base), "findings_disappeared": _findings(base, cand),
            "kernel_deltas": None, "accuracy_unmeasured": False}


def _by_ranges(rows: list[dict[str, Any]]) -> str:
    """The verdict of the matched ranges where nothing else decides: any regression, else inconclusive when any
    is (or none was compared), else any improvement, else no change."""
    verdicts = [x.get("verdict") for x in rows if x.get("verdict") != "missing"]
    return ("regression" if "regression" in verdicts else "inconclusive" if "inconclusive" in verdicts or not verdicts
            else "improvement" if "improvement" in verdicts else "no_change")


def _summary(cap: dict[str, Any], unit: dict | None, kernels: dict | None) -> str:
    """What was compared, in one sentence: the unit (or kernels), the ranges compared and not matched."""
    nb, nc = len(cap["unmatched"]["baseline"]), len(cap["unmatched"]["candidate"])
    counts = (f"{cap['ranges_compared']} range series compared; {nb} of the baseline's and {nc} of the "
              "candidate's not matched")
    if unit is None and cap["decided_by"] == "ranges":
        return f"neither capture has an inference unit or kernel times: judged on every matched range; {counts}"
    if unit is None:
        return f"neither capture has an inference unit: {_kernel_text(kernels)}; {counts}"
    names = unit["key"] if not unit.get("baseline_key") else f"{unit['baseline_key']} -> {unit['key']}"
    measure = ("time per inference (the larger of its host time and its GPU time)" if unit["measure"] == "inference"
               else "host time")
    ratio = unit.get("median_ratio")
    head = (f"the inference ({names}, matched {unit['matched_by'].replace('unit, ', '')}) "
            + (f"x{ratio:.3f}" if isinstance(ratio, float) and math.isfinite(ratio) else "not compared")
            + f" on {measure}")
    if unit.get("gpu_unmeasured"):
        head += f" ({unit['gpu_unmeasured']})"
    return f"{head}; {counts}"


def _env(base: CaptureSide, cand: CaptureSide) -> list[dict[str, Any]]:
    return [{"field": f, "baseline": base.info.get(f), "candidate": cand.info.get(f)}
            for f in ("gpu", "driver_version", "cuda_version", "nsys_version")
            if base.info.get(f) != cand.info.get(f) and (base.info.get(f) or cand.info.get(f))]


def _findings(a: CaptureSide, b: CaptureSide) -> list[dict[str, Any]]:
    """Findings of ``a`` whose rule and range ``b`` does not have."""
    def key(f: dict) -> tuple:
        return f.get("rule"), f.get("range")

    have = {key(f) for f in b.doc.get("findings") or [] if isinstance(f, dict)}
    return [f for f in a.doc.get("findings") or [] if isinstance(f, dict) and key(f) not in have]
