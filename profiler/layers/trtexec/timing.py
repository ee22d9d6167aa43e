"""trtexec's per-query times (--exportTimes), run metadata and logs, with statistics exactly as trtexec prints them."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.errors import InputError
from profiler.layers.trtexec.common import (
    DEFAULT_WARMUP_MS,
    MAX_COUNT,
    log_number,
    mapping,
    number,
    options,
    read_json,
    read_text,
)


def exact_duration_ms(value: float, start_ms: float) -> float:
    """The float32 duration trtexec computed, rebuilt from its 6-significant-digit export.

    trtexec subtracts two float32 timestamps; the difference is an exact multiple of the float32
    spacing at the start timestamp. Rounding the printed value to that grid recovers the exact
    float32 (checked: it must print back to the same 6 digits), so means and medians computed from
    it equal trtexec's to the last printed digit. Falls back to the printed value when the check fails.
    """
    if value == 0 or not math.isfinite(value) or not math.isfinite(start_ms):
        return float(value)
    q = float(np.spacing(np.float32(abs(start_ms))))
    if q <= 0:
        return float(value)
    cand = float(np.float32(round(value / q) * q))
    return cand if float(f"{cand:.6g}") == float(f"{value:.6g}") else float(value)


def parse_times(path: str | Path, warmup_ms: float = DEFAULT_WARMUP_MS) -> tuple[pd.DataFrame, dict]:
    """``--exportTimes`` JSON -> (samples frame after warm-up, info).

    Samples have Sample's columns: idx, start_ms, latency_ms, enqueue_ms, h2d_ms, compute_ms, d2h_ms.
    trtexec drops every query before the first whose compute starts at or after the warm-up
    (``computeStart >= warmupMs``); older trtexec versions still export those records.
    """
    data = read_json(path)
    if not isinstance(data, list) or not data or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path} is not a trtexec --exportTimes file (expected a non-empty list of records)")
    need = ("startComputeMs", "endComputeMs")
    if not all(k in data[0] for k in need):
        raise InputError(f"{path} is not a trtexec --exportTimes file (records lack {', '.join(need)})")
    data = [_checked_times(r, f"{path}: query {i}") for i, r in enumerate(data)]
    first = next((i for i, r in enumerate(data) if r["startComputeMs"] >= warmup_ms), None)
    if first is None:
        raise InputError(f"{path}: every one of its {len(data)} queries starts inside the "
                         f"{warmup_ms:g} ms warm-up; nothing left to time")
    kept = data[first:]
    rows = []
    for i, r in enumerate(kept):
        h2d = exact_duration_ms(r.get("h2dMs", 0.0), r.get("startH2dMs", r["startComputeMs"]))
        comp_raw = r.get("computeMs", r["endComputeMs"] - r["startComputeMs"])
        comp = exact_duration_ms(comp_raw, r["startComputeMs"])
        d2h = exact_duration_ms(r.get("d2hMs", 0.0), r.get("startD2hMs", r["endComputeMs"]))
        lat = float(np.float32(np.float32(np.float32(h2d) + np.float32(comp)) + np.float32(d2h)))
        enq = float(np.float32(r["endEnqMs"]) - np.float32(r["startEnqMs"])) if "endEnqMs" in r else None
        rows.append({"idx": i, "start_ms": float(r.get("startH2dMs", r["startComputeMs"])), "latency_ms": lat,
                     "enqueue_ms": enq, "h2d_ms": h2d, "compute_ms": comp, "d2h_ms": d2h})
    samples = pd.DataFrame(rows)
    end = kept[-1].get("endD2hMs", kept[-1]["endComputeMs"])
    start = kept[0].get("startH2dMs", kept[0]["startComputeMs"])
    wall_ms = float(np.float32(end) - np.float32(start))
    info = {"warmup_ms": warmup_ms, "warmup_queries": first, "queries": len(kept), "walltime_ms": wall_ms,
            "first_compute_ms": float(kept[0]["startComputeMs"]),
            "timestamp_resolution_ms": _resolution(end)}
    return samples, info


_TIME_KEYS = ("startEnqMs", "endEnqMs", "startH2dMs", "endH2dMs", "startComputeMs", "endComputeMs",
              "startD2hMs", "endD2hMs", "h2dMs", "computeMs", "d2hMs", "latencyMs", "enqueueMs")


def _checked_times(rec: dict, where: str) -> dict:
    """One --exportTimes record with every timestamp and duration checked (finite, 0 to MAX_MS, start
    and end in order), so no statistic is built on a string, NaN, a negated or an absurd value."""
    if "startComputeMs" not in rec or "endComputeMs" not in rec:
        raise InputError(f"{where} lacks startComputeMs or endComputeMs")
    out = dict(rec)
    for key in _TIME_KEYS:
        if key in rec:
            out[key] = number(rec[key], f"{where} '{key}'")
    for a, b in (("startComputeMs", "endComputeMs"), ("startEnqMs", "endEnqMs"), ("startH2dMs", "endH2dMs"),
                 ("startD2hMs", "endD2hMs")):
        if a in out and b in out and out[b] < out[a]:
            raise InputError(f"{where} ends ('{b}' {out[b]:g}) before it starts ('{a}' {out[a]:g}): "
                             "the export is damaged")
    return out


def _resolution(timestamp_ms: float) -> float:
    """Resolution of a 6-significant-digit printed timestamp (e.g. 0.01 ms at 3200 ms)."""
    if not timestamp_ms:
        return 0.0
    return 10.0 ** (math.floor(math.log10(abs(timestamp_ms))) - 5)


def timing_summary(samples: pd.DataFrame, info: dict, percentiles=stats.PERCENTILES) -> dict[str, Any]:
    """trtexec's performance summary from samples: latency, GPU compute, enqueue, H2D, D2H, throughput."""
    n = len(samples)
    out: dict[str, Any] = {}
    for key, col in (("latency_ms", "latency_ms"), ("gpu_compute_ms", "compute_ms"), ("enqueue_ms", "enqueue_ms"),
                     ("h2d_ms", "h2d_ms"), ("d2h_ms", "d2h_ms")):
        vals = samples[col].dropna().to_numpy() if col in samples else np.array([])
        out[key] = stats.summarize(vals, percentiles)
    wall = np.float32(info["walltime_ms"])
    out["throughput_qps"] = float(np.float32(n) / wall * np.float32(1000)) if wall > 0 else None
    out["walltime_s"] = float(wall / np.float32(1000))
    gm = out["gpu_compute_ms"]["mean"]
    out["total_gpu_compute_s"] = float(np.float32(np.float32(gm) * np.float32(n)) / np.float32(1000)) if n else 0.0
    out["queries"] = n
    return out


# -- trtexec's own summary: metadata JSON and logs -------------------------------------------------------
_SUMMARY_FIELDS = {"Latency": "latency_ms", "Enqueue Time": "enqueue_ms", "H2D Latency": "h2d_ms",
                   "GPU Compute Time": "gpu_compute_ms", "D2H Latency": "d2h_ms",
                   "End-to-End Host Latency": "end_to_end_ms"}


def _stat_list(values: list[Any], percentiles: list[float], what: str) -> dict[str, float]:
    keys = ["min", "max", "mean", "median"] + [f"p{int(p) if float(p).is_integer() else p}" for p in percentiles]
    return checked_stats({k: number(v, f"{what} {k}") for k, v in zip(keys, values)}, what)


def checked_stats(vals: dict[str, float], what: str) -> dict[str, float]:
    """trtexec's printed statistics of one quantity, refused when they cannot be (min above max, a median or a
    percentile outside [min, max]): numbers each in range but impossible together are damage."""
    lo, hi = vals.get("min"), vals.get("max")
    if lo is not None and hi is not None and lo > hi:
        raise InputError(f"{what}: min = {lo:g} ms is above max = {hi:g} ms: the export is damaged")
    for k, v in vals.items():
        if k not in ("min", "max") and ((lo is not None and v < lo) or (hi is not None and v > hi)):
            raise InputError(f"{what}: {k} = {v:g} ms is outside min..max ({lo:g}..{hi:g} ms): the export is damaged")
    return vals


def parse_run_metadata(path: str | Path) -> dict[str, Any]:
    """A ``*.profile.metadata.json`` (trtexec's printed summary as JSON) -> canonical summary dict."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path} is not a trtexec run summary (expected a JSON object)")
    name = Path(path).name
    perf = mapping(data.get("performance_summary"), f"{name}: performance_summary")
    out: dict[str, Any] = {"source": str(path)}
    for label, key in _SUMMARY_FIELDS.items():
        vals = perf.get(label)
        if isinstance(vals, list) and len(vals) in (5, 7):  # min, max, mean, median + p99, or p90/p95/p99
            out[key] = _stat_list(vals, [99] if len(vals) == 5 else [90, 95, 99], f"{name}: {label}")
        elif isinstance(vals, list) and vals:
            out.setdefault("messages", []).append(
                f"{Path(path).name}: '{label}' has {len(vals)} values; trtexec prints 5 or 7 "
                "(min, max, mean, median and its percentiles), so it was left out")
    for label, key in (("Throughput", "throughput_qps"), ("Total Host Walltime", "walltime_s"),
                       ("Total GPU Compute Time", "total_gpu_compute_s")):
        if label in perf:
            out[key] = number(perf[label], f"{name}: {label}", hi=MAX_COUNT)
    out["inference_options"] = options(data.get("inference_options"), f"{name}: inference_options")
    out["device"] = options(data.get("device_information"), f"{name}: device_information")
    out["warmup_ms"] = _warmup_from_text(str(out["inference_options"].get("Duration", "")))
    return out


def _warmup_from_text(text: str) -> float | None:
    m = re.search(r"\+\s*([\d.]+)\s*ms warm ?up", text) or re.search(r"[Ww]arm ?up[^\d]*([\d.]+)\s*ms", text)
    return number(log_number(m.group(1), "the warm-up"), "the warm-up") if m else None


_LOG_STAT = re.compile(r"(min|max|mean|median|percentile\((?P<p>[\d.]+)%\))\s*=\s*(?P<v>[-\d.eE+]+)\s*ms")


def parse_log(path: str | Path) -> dict[str, Any]:
    """A trtexec log: version, device, options, warm-up and the printed performance summary."""
    p = Path(path)
    text = read_text(p)
    out: dict[str, Any] = {"source": str(p), "inference_options": {}, "build_options": {}, "device": {}}
    m = re.search(r"TensorRT version:\s*([\d.]+)", text)
    if m:
        out["tensorrt_version"] = m.group(1)
    else:
        m = re.search(r"\[TensorRT v(\d{4,8})\]", text)
        if m:
            v = m.group(1)  # 8401 -> 8.4.1, 100300 -> 10.3.0
            major = v[:-3] if len(v) > 4 else v[0]
            rest = v[len(major):]
            out["tensorrt_version"] = f"{int(major)}.{int(rest[:-2] or 0)}.{int(rest[-2:])}"
    for key, pat in (("Selected Device", r"Selected Device:\s*(.+)"), ("Precision", r"Precision:\s*(.+)"),
                     ("Streams", r"\] Streams:\s*(\d+)"), ("CUDA Graph", r"CUDA Graph:\s*(\w+)"),
                     ("Duration", r"Duration:\s*(.+)"), ("Data transfers", r"Data transfers:\s*(\w+)")):
        mm = re.search(pat, text)
        if mm:
            target = "device" if key == "Selected Device" else "build_options" if key == "Precision" \
                else "inference_options"
            out[target][key] = mm.group(1).strip()
    mw = re.search(r"Warmup completed (\d{1,12}) queries over ([\d.]+) ms", text)
    if mw:
        out["warmup_queries"] = int(mw.group(1))
        out["warmup_ms"] = number(log_number(mw.group(2), f"{p.name}: the warm-up"), f"{p.name}: the warm-up")
    else:
        out["warmup_ms"] = _warmup_from_text(out["inference_options"].get("Duration", ""))
    summary = text.split("=== Performance summary ===")[-1] if "=== Performance summary ===" in text else ""
    for line in summary.splitlines():
        body = re.sub(r"^\[[^\]]*\]\s*(\[[^\]]*\]\s*)?", "", line.strip())
        for label, key in _SUMMARY_FIELDS.items():
            if body.startswith(label + ":") and key not in out:
                vals, pct = {}, []
                for sm in _LOG_STAT.finditer(body):
                    what = f"{p.name}: {label} {sm.group(1)}"
                    v = number(log_number(sm.group("v"), what), what)
                    if sm.group("p"):
                        pv = number(log_number(sm.group("p"), what), what, hi=100.0)
                        pct.append(pv)
                        vals[f"p{int(pv) if pv.is_integer() else pv}"] = v
                    else:
                        vals[sm.group(1)] = v
                out[key] = checked_stats(vals, f"{p.name}: {label}")
        for label, key in (("Throughput", "throughput_qps"), ("Total Host Walltime", "walltime_s"),
                           ("Total GPU Compute Time", "total_gpu_compute_s")):
            mm = re.match(rf"{label}:\s*([-\d.eE+]+)", body)
            if mm and key not in out:
                out[key] = number(log_number(mm.group(1), f"{p.name}: {label}"), f"{p.name}: {label}", hi=MAX_COUNT)
    mc = re.search(r"coefficient of variance\s*=\s*([\d.]+)%", text)
    if mc:
        out["gpu_compute_cov_pct"] = number(log_number(mc.group(1), f"{p.name}: the coefficient of variance"),
                                            f"{p.name}: the coefficient of variance", hi=MAX_COUNT)
    return out


# -- grouping files into engines ---------------------------------------------------------------------


def _percentiles_of(trt: dict) -> tuple:
    """The percentiles trtexec printed (99 only before 8.4; 90, 95, 99 since), default 90/95/99."""
    g = trt.get("gpu_compute_ms") or {}
    ps = [float(k[1:]) for k in g if k.startswith("p")]
    return tuple(int(p) if p.is_integer() else p for p in ps) or stats.PERCENTILES


def compare_with_trtexec(summary: dict, trt: dict) -> dict[str, dict[str, Any]]:
    """Field-by-field comparison of our statistics with trtexec's printed ones (6 significant digits).

    Returns {"gpu_compute_ms.median": {"ours": x, "trtexec": y, "equal": bool}, ...}.
    """
    out: dict[str, dict[str, Any]] = {}
    for key in ("latency_ms", "gpu_compute_ms", "enqueue_ms", "h2d_ms", "d2h_ms"):
        theirs = trt.get(key) or {}
        for stat, v in theirs.items():
            ours = (summary.get(key) or {}).get(stat)
            if ours is None:
                continue
            out[f"{key}.{stat}"] = {"ours": ours, "trtexec": v, "equal": float(f"{ours:.6g}") == v}
    for key in ("throughput_qps", "walltime_s", "total_gpu_compute_s"):
        if key in trt and summary.get(key) is not None:
            out[key] = {"ours": summary[key], "trtexec": trt[key], "equal": float(f"{summary[key]:.6g}") == trt[key]}
    return out
