"""trtexec exports: per-layer profile, engine layer info, per-query times, logs and summaries.

Files of one engine are found by name prefix (``resnet.onnx.engine.profile.json``,
``resnet.onnx.engine.graph.json``, ``resnet.onnx.engine.timing.json``...) or given explicitly;
:func:`find_export_sets` groups them, :func:`load_export` reads one group into an :class:`EngineExport`.

Timing statistics follow trtexec exactly (``profiler.stats``): queries whose compute starts inside
the warm-up are dropped, and each duration is rebuilt as the float32 difference trtexec computed
(see :func:`exact_duration_ms`) so min/max/median/percentiles/mean equal trtexec's printed summary.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.errors import InputError
from profiler.layers import frame as lf

DEFAULT_WARMUP_MS = 200.0
DETAILED_HINT = ("rerun trtexec with --profilingVerbosity=detailed --exportLayerInfo=FILE "
                 "to get layer types, precisions and tactics")

# Longest suffixes first: ".profile.metadata.json" must win over ".metadata.json" and ".profile.json".
SUFFIXES: list[tuple[str, str]] = [
    (".profile.metadata.json", "run_meta"), (".build.metadata.json", "build_meta"),
    (".profile.json", "profile"), (".graph.json", "layers"), (".layers.json", "layers"),
    (".layerinfo.json", "layers"), (".layer_info.json", "layers"), (".timing.json", "times"),
    (".times.json", "times"), (".metadata.json", "device"), (".build.log", "log"), (".profile.log", "log"),
    (".log", "log"), (".txt", "log"),
]
MAX_MS = 1e9  # 11.6 days: no trtexec duration or timestamp is longer; beyond it a value is damage
MAX_COUNT = 1e12
_PROFILE_SUFFIX = re.compile(r"^(?P<base>.*?)\s*\[profile (?P<profile>\d+)\]$")


# -- reading ---------------------------------------------------------------------------------------
def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a truncated or malformed file raises InputError naming file and position."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{p} nests JSON arrays or objects too deeply to be a trtexec export") from None
    except json.JSONDecodeError as exc:
        tail = text.rstrip()[-1:]
        what = "truncated" if exc.pos >= len(text.rstrip()) or tail not in ("]", "}") else "invalid"
        raise InputError(f"{p} is not valid JSON ({what} at line {exc.lineno}, column {exc.colno}, "
                         f"character {exc.pos} of {len(text)}: {exc.msg})") from exc


def number(value: Any, what: str, *, lo: float = 0.0, hi: float = MAX_MS, optional: bool = False
           ) -> float | None:
    """A finite number in [lo, hi] (None allowed when ``optional``), else InputError naming ``what``:
    the boundary check that keeps NaN, strings, negative times and 1e308 out of every statistic."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise InputError(f"{what} is {_shown(value)}, not a number from {lo:g} to {hi:g}: the export is damaged")
    return float(value)


def _shown(value: Any) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _strip_profile(name: str) -> tuple[str, int]:
    m = _PROFILE_SUFFIX.match(name)
    return (m.group("base"), int(m.group("profile"))) if m else (name, 0)


def parse_profile(path: str | Path) -> tuple[pd.DataFrame, int, list[str]]:
    """``--exportProfile`` JSON -> (frame of name/time columns, profiled iterations, messages)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path} is not a trtexec --exportProfile file (expected a JSON list)")
    count, rows, messages = None, [], []
    skipped = 0
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            skipped += 1
            continue
        where = f"{path}: record {i}"
        if "count" in rec and "name" not in rec:
            n = number(rec["count"], f"{where} 'count'", lo=1, hi=MAX_COUNT)
            if n != int(n):
                raise InputError(f"{where} 'count' is {n!r}, not a whole number of iterations")
            count = int(n) if count is None else count
            continue
        if "name" not in rec:
            skipped += 1
            continue
        times = {col: number(rec.get(key), f"{where} '{key}'", optional=True)
                 for col, key in (("time_total_ms", "timeMs"), ("time_avg_ms", "averageMs"),
                                  ("time_median_ms", "medianMs"))}
        pct = number(rec.get("percentage"), f"{where} 'percentage'", hi=100.5, optional=True)
        base, prof = _strip_profile(str(rec["name"]))
        rows.append({"name": str(rec["name"]), "profile": prof, "base_name": base, **times, "trtexec_pct": pct})
    if not rows:
        raise InputError(f"{path} holds no per-layer records (an empty trtexec --exportProfile file)")
    df = pd.DataFrame(rows)
    if skipped:
        messages.append(f"{Path(path).name}: {skipped} record(s) are neither a layer (no 'name') nor the "
                        "iteration count; they were ignored")
    count = count or 1
    df["count"] = count
    if df["time_median_ms"].isna().all():
        messages.append(f"{Path(path).name}: no medianMs per layer (older trtexec); medians left empty")
    profiles = sorted(df["profile"].unique())
    if len(profiles) > 1:
        messages.append(f"{Path(path).name}: layers of optimization profiles {profiles} are mixed; "
                        "shares are computed per profile column 'profile'")
    return df, count, messages


def _unwrap_tokens(name: str) -> list[str]:
    """Node tokens of a fused layer name: 'A + PWN(B, PWN(C))' -> [A, B, C]."""
    flat = re.sub(r"PWN\(|\)", " + ", name).replace(",", " + ")
    return [t.strip() for t in flat.split(" + ") if t.strip()]


def _is_constant_token(tok: str) -> bool:
    return bool(re.search(r"\.(weight|bias)$|ReadVariableOp|:0$|^onnx::|^Constant_?\d*$", tok))


def fused_nodes_from_name(name: str) -> list[str]:
    """ONNX node names a TensorRT layer name covers (constants and reformat names excluded)."""
    if name.startswith("Reformatting CopyNode"):
        return []
    return [t for t in _unwrap_tokens(_strip_profile(name)[0]) if not _is_constant_token(t)]


def fused_nodes_from_metadata(meta: str) -> list[str]:
    """TensorRT 10 ``Metadata``: '[ONNX Layer: a]\\x1E[ONNX Layer: b]' -> [a, b]."""
    out = []
    for part in str(meta).split("\x1e"):
        part = part.strip()
        m = re.match(r"^\[ONNX Layer:\s*(.*)\]$", part)
        part = m.group(1).strip() if m else part
        if part:
            out.append(part)
    return out


def _tensor_bytes(t: dict) -> float | None:
    dims = t.get("Dimensions")
    per = lf.bytes_per_element(lf.precision_from_format(t.get("Format/Datatype")))
    if not isinstance(dims, list) or per is None or any((not isinstance(d, int)) or d < 0 for d in dims):
        return None
    return float(math.prod(dims)) * per


def _weights_bytes(layer: dict) -> float | None:
    total, seen = 0.0, False
    for v in layer.values():
        if isinstance(v, dict) and "Type" in v and "Count" in v:
            per = lf.bytes_per_element(lf.precision_from_format(v["Type"])) or 0
            total += float(v["Count"]) * per
            seen = True
    return total if seen else None


def _tensor_format(t: dict) -> str | None:
    """A tensor's format string: TensorRT 8-10 write one ``Format/Datatype`` field; TensorRT 11's
    inspector writes ``DataType`` and ``Format`` separately."""
    if t.get("Format/Datatype"):
        return str(t["Format/Datatype"])
    parts = [str(t[k]) for k in ("DataType", "Format") if t.get(k)]
    return " ".join(parts) or None


def parse_layer_info(path: str | Path) -> tuple[pd.DataFrame, list[str], bool]:
    """``--exportLayerInfo`` JSON -> (frame, messages, detailed?).

    Detailed verbosity gives dict layers (formats, tactic, weights, TensorRT 10 ``Metadata`` and
    ``StreamId``); the default verbosity gives bare layer names only: the frame then has names and
    the messages say what to rerun with.
    """
    data = read_json(path)
    layers = data.get("Layers") if isinstance(data, dict) else data if isinstance(data, list) else None
    if not isinstance(layers, list):
        raise InputError(f"{path} is not a trtexec --exportLayerInfo file (no 'Layers' list)")
    rows, messages = [], []
    detailed = any(isinstance(x, dict) for x in layers)
    if not detailed:
        messages.append(f"{Path(path).name}: layer info was exported at the default profiling verbosity "
                        f"(layer names only); {DETAILED_HINT}")
    for idx, layer in enumerate(layers):
        if isinstance(layer, str):
            base, prof = _strip_profile(layer)
            rows.append({"name": layer, "order": idx, "profile": prof, "base_name": base,
                         "fused_nodes": fused_nodes_from_name(layer), "nodes_from": "name"})
            continue
        if not isinstance(layer, dict) or "Name" not in layer:
            continue
        name = str(layer["Name"])
        base, prof = _strip_profile(name)
        ins = [t for t in layer.get("Inputs", []) if isinstance(t, dict)]
        outs = [t for t in layer.get("Outputs", []) if isinstance(t, dict)]
        meta = layer.get("Metadata")
        nodes = fused_nodes_from_metadata(meta) if meta else fused_nodes_from_name(name)
        tb = [_tensor_bytes(t) for t in ins + outs]
        rows.append({
            "name": name, "order": idx, "profile": prof, "base_name": base,
            "type": layer.get("LayerType"),
            "precision_in": lf.precision_from_format(_tensor_format(ins[0])) if ins else None,
            "precision_out": lf.precision_from_format(_tensor_format(outs[0])) if outs else None,
            "tactic": layer.get("TacticName") or None,
            "tactic_value": layer.get("TacticValue"),
            "fused_nodes": nodes, "nodes_from": "metadata" if meta else "name",
            "weights_bytes": _weights_bytes(layer),
            "activation_bytes": float(sum(b for b in tb if b is not None)) if any(b is not None for b in tb) else None,
            "formats_in": [_tensor_format(t) for t in ins],
            "formats_out": [_tensor_format(t) for t in outs],
            "dims_in": [t.get("Dimensions") for t in ins],
            "dims_out": [t.get("Dimensions") for t in outs],
            "parameter_type": layer.get("ParameterType"),
            "out_maps": layer.get("OutMaps"), "groups": layer.get("Groups"),
            "stream_id": layer.get("StreamId"),
        })
    df = pd.DataFrame(rows)
    if df.empty:
        raise InputError(f"{path} lists no layers")
    return df, messages, detailed


# -- per-query times ---------------------------------------------------------------------------------
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


def _stat_list(values: list[float], percentiles: list[float]) -> dict[str, float]:
    keys = ["min", "max", "mean", "median"] + [f"p{int(p) if float(p).is_integer() else p}" for p in percentiles]
    return {k: float(v) for k, v in zip(keys, values)}


def parse_run_metadata(path: str | Path) -> dict[str, Any]:
    """A ``*.profile.metadata.json`` (trtexec's printed summary as JSON) -> canonical summary dict."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path} is not a trtexec run summary (expected a JSON object)")
    perf = data.get("performance_summary", {})
    out: dict[str, Any] = {"source": str(path)}
    for label, key in _SUMMARY_FIELDS.items():
        vals = perf.get(label)
        if isinstance(vals, list) and len(vals) in (5, 7):  # min, max, mean, median + p99, or p90/p95/p99
            out[key] = _stat_list(vals, [99] if len(vals) == 5 else [90, 95, 99])
        elif isinstance(vals, list) and vals:
            out.setdefault("messages", []).append(
                f"{Path(path).name}: '{label}' has {len(vals)} values; trtexec prints 5 or 7 "
                "(min, max, mean, median and its percentiles), so it was left out")
    for label, key in (("Throughput", "throughput_qps"), ("Total Host Walltime", "walltime_s"),
                       ("Total GPU Compute Time", "total_gpu_compute_s")):
        if label in perf:
            out[key] = float(perf[label])
    out["inference_options"] = data.get("inference_options", {})
    out["device"] = data.get("device_information", {})
    out["warmup_ms"] = _warmup_from_text(str(out["inference_options"].get("Duration", "")))
    return out


def _warmup_from_text(text: str) -> float | None:
    m = re.search(r"\+\s*([\d.]+)\s*ms warm ?up", text) or re.search(r"[Ww]arm ?up[^\d]*([\d.]+)\s*ms", text)
    return float(m.group(1)) if m else None


_LOG_STAT = re.compile(r"(min|max|mean|median|percentile\((?P<p>[\d.]+)%\))\s*=\s*(?P<v>[-\d.eE+]+)\s*ms")


def parse_log(path: str | Path) -> dict[str, Any]:
    """A trtexec log: version, device, options, warm-up and the printed performance summary."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    out: dict[str, Any] = {"source": str(p), "inference_options": {}, "build_options": {}, "device": {}}
    m = re.search(r"TensorRT version:\s*([\d.]+)", text)
    if m:
        out["tensorrt_version"] = m.group(1)
    else:
        m = re.search(r"\[TensorRT v(\d+)\]", text)
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
    mw = re.search(r"Warmup completed (\d+) queries over ([\d.]+) ms", text)
    if mw:
        out["warmup_queries"], out["warmup_ms"] = int(mw.group(1)), float(mw.group(2))
    else:
        out["warmup_ms"] = _warmup_from_text(out["inference_options"].get("Duration", ""))
    summary = text.split("=== Performance summary ===")[-1] if "=== Performance summary ===" in text else ""
    for line in summary.splitlines():
        body = re.sub(r"^\[[^\]]*\]\s*(\[[^\]]*\]\s*)?", "", line.strip())
        for label, key in _SUMMARY_FIELDS.items():
            if body.startswith(label + ":") and key not in out:
                vals, pct = {}, []
                for sm in _LOG_STAT.finditer(body):
                    if sm.group("p"):
                        pv = float(sm.group("p"))
                        pct.append(pv)
                        vals[f"p{int(pv) if pv.is_integer() else pv}"] = float(sm.group("v"))
                    else:
                        vals[sm.group(1)] = float(sm.group("v"))
                out[key] = vals
        for label, key in (("Throughput", "throughput_qps"), ("Total Host Walltime", "walltime_s"),
                           ("Total GPU Compute Time", "total_gpu_compute_s")):
            mm = re.match(rf"{label}:\s*([-\d.eE+]+)", body)
            if mm and key not in out:
                out[key] = float(mm.group(1))
    mc = re.search(r"coefficient of variance\s*=\s*([\d.]+)%", text)
    if mc:
        out["gpu_compute_cov_pct"] = float(mc.group(1))
    return out


# -- grouping files into engines ---------------------------------------------------------------------
def classify(path: Path) -> tuple[str, str] | None:
    """(prefix, role) of an export file from its name, or by sniffing its JSON content."""
    name = path.name
    for suffix, role in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            if suffix == ".txt" and not _looks_like_log(path):
                return None
            return name[: -len(suffix)], role
    if name.endswith(".json"):
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:4000]
        except OSError:
            return None
        if '"Layers"' in head:
            return name[:-5], "layers"
        if '"startComputeMs"' in head:
            return name[:-5], "times"
        if '"count"' in head and '"timeMs"' in head:
            return name[:-5], "profile"
    return None


def _looks_like_log(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(20000)
    except OSError:
        return False
    return "trtexec" in head or "TensorRT" in head


@dataclass
class ExportSet:
    """The files of one engine (same directory and name prefix)."""

    prefix: str
    directory: Path
    files: dict[str, Path] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)


def find_export_sets(paths: list[str | Path]) -> list[ExportSet]:
    """Group files (and files inside given directories, recursively) into one set per engine prefix."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(sorted(x for x in p.rglob("*") if x.is_file()))
        elif p.is_file():
            files.append(p)
        else:
            raise InputError(f"{p} does not exist")
    sets: dict[tuple[Path, str], ExportSet] = {}
    for f in files:
        c = classify(f)
        if c is None:
            continue
        prefix, role = c
        key = (f.parent.resolve(), prefix)
        s = sets.setdefault(key, ExportSet(prefix=prefix, directory=f.parent))
        if role == "log":
            s.logs.append(f)
        elif role in s.files and s.files[role] != f:
            raise InputError(f"two {role} files for {prefix}: {s.files[role]} and {f}")
        else:
            s.files[role] = f
    out = [s for s in sets.values() if {"profile", "layers", "times"} & set(s.files) or s.logs]
    # A lone log beside a full set with another prefix (trtexec.log) joins the only set in its directory.
    by_dir: dict[Path, list[ExportSet]] = {}
    for s in out:
        by_dir.setdefault(s.directory.resolve(), []).append(s)
    merged = []
    for group in by_dir.values():
        full = [s for s in group if {"profile", "layers", "times"} & set(s.files)]
        lone = [s for s in group if not ({"profile", "layers", "times"} & set(s.files))]
        if len(full) == 1:
            for s in lone:
                full[0].logs.extend(s.logs)
            merged.extend(full)
        else:
            merged.extend(group)
    if not merged:
        raise InputError("no trtexec exports found (expected *.profile.json, *.graph.json / layer info, "
                         "*.timing.json or trtexec logs)")
    return sorted(merged, key=lambda s: (str(s.directory), s.prefix))


# -- one engine ------------------------------------------------------------------------------------------
@dataclass
class EngineExport:
    """Everything read for one engine; ``layers`` is the per-layer frame (``profiler.layers.frame``)."""

    prefix: str
    directory: Path
    layers: pd.DataFrame
    samples: pd.DataFrame | None = None
    summary: dict[str, Any] | None = None  # computed from the timing export
    trtexec: dict[str, Any] = field(default_factory=dict)  # trtexec's own printed summary (metadata/log)
    build: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    tensorrt_version: str | None = None
    precision: str | None = None  # lowest precision the build allowed: fp32 | fp16 | int8 ...
    model: str | None = None
    messages: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    profile_count: int | None = None
    detailed: bool = False


def _precision_from_build(text: str | None) -> str | None:
    """'FP32+FP16+INT8' -> 'int8' (the lowest precision the builder may choose)."""
    if not text:
        return None
    toks = [lf.precision_from_format(t) for t in re.split(r"[+, ]+", text)]
    toks = [t for t in toks if t in lf.PRECISION_RANK]
    return max(toks, key=lambda t: lf.PRECISION_RANK[t]) if toks else None


def model_key(model_path: str | None, prefix: str) -> str:
    """Model identity for alignment: the ONNX path without precision/QAT suffixes."""
    base = model_path or prefix
    p = Path(base)
    stem = p.name
    for ext in (".engine", ".plan", ".onnx", ".trt"):
        stem = stem.replace(ext, "")
    stem = re.sub(r"([-_.](qat|ptq|int8|fp16|fp32|bf16|fp8|quant\w*|residual\w*|qgap))+$", "", stem, flags=re.I)
    parent = p.parent.as_posix() if model_path else ""
    return f"{parent}/{stem}" if parent and parent != "." else stem


def merge_profile_and_info(profile: pd.DataFrame | None, info: pd.DataFrame | None,
                           source: str) -> tuple[pd.DataFrame, list[str]]:
    """Join per-layer times with layer info by name; report names found on one side only."""
    messages: list[str] = []
    if profile is None and info is None:
        return lf.empty_frame(), messages
    if info is None:
        messages.append(f"{source}: a profile without its layer info: times only (no types, precisions, "
                        f"tactics); {DETAILED_HINT}")
        df = profile.copy()
        df["fused_nodes"] = [fused_nodes_from_name(n) for n in df["name"]]
        df["nodes_from"] = "name"
        return lf.make_frame(df), messages
    if profile is None:
        messages.append(f"{source}: layer info without a per-layer profile: no layer times "
                        "(rerun trtexec with --exportProfile=FILE)")
        return lf.make_frame(info.drop(columns=["order"], errors="ignore")), messages
    info_profiles = sorted(info["profile"].unique())
    prof_profiles = sorted(profile["profile"].unique())
    if len(info_profiles) > 1:
        keep = prof_profiles[0] if len(prof_profiles) == 1 else None
        messages.append(f"{source}: the engine has {len(info_profiles)} optimization profiles "
                        f"({', '.join(map(str, info_profiles))}); "
                        + (f"the profile timed profile {keep}, so layer info of profile {keep} is used"
                           if keep is not None else "the profile mixes several; layers are kept per profile"))
        if keep is not None:
            info = info[info["profile"] == keep]
    p_names, i_names = set(profile["name"]), set(info["name"])
    only_p = [n for n in profile["name"] if n not in i_names]
    only_i = [n for n in info["name"] if n not in p_names]
    if only_p or only_i:
        def few(xs):
            return "; ".join(repr(x) for x in xs[:3]) + (" ..." if len(xs) > 3 else "")
        parts = []
        if only_p:
            parts.append(f"{len(only_p)} profiled layer(s) missing from the layer info ({few(only_p)})")
        if only_i:
            parts.append(f"{len(only_i)} layer-info layer(s) never profiled ({few(only_i)})")
        messages.append(f"{source}: layer names differ between profile and layer info: " + ", ".join(parts)
                        + f"; kept the {len(p_names & i_names)} that match (unmatched profiled layers keep "
                        "their times without layer details); were the files exported from the same engine?")
    info_cols = [c for c in info.columns if c not in ("profile", "base_name")]
    df = profile.merge(info[info_cols], on="name", how="left")
    missing = df["fused_nodes"].isna() if "fused_nodes" in df else pd.Series(True, index=df.index)
    if missing.any():
        df.loc[missing, "nodes_from"] = "name"
        df["fused_nodes"] = [fused_nodes_from_name(n) if m else v
                             for n, v, m in zip(df["name"], df["fused_nodes"], missing)]
    return lf.make_frame(df.drop(columns=["order"], errors="ignore")), messages


def load_export(s: ExportSet, variant: str | None = None) -> EngineExport:
    """Read one engine's files into an :class:`EngineExport` (partial when files are missing)."""
    messages: list[str] = []
    files = {k: str(v) for k, v in s.files.items()}
    trt: dict[str, Any] = {}
    build: dict[str, Any] = {}
    device: dict[str, Any] = {}
    version = None
    broken: list[InputError] = []

    def readable(read: Any, *args: Any) -> Any:
        """``read(*args)``, or None when the file is unreadable (kept as a message: partial results
        from the other files of the set are still true)."""
        try:
            return read(*args)
        except InputError as exc:
            broken.append(exc)
            messages.append(f"{exc}; the file was skipped")
            return None

    for log in s.logs:
        parsed = readable(parse_log, log) or {}
        files.setdefault("log", str(log))
        version = version or parsed.get("tensorrt_version")
        for k, v in parsed.items():
            if k in ("build_options", "inference_options", "device"):
                (build if k == "build_options" else device if k == "device" else trt.setdefault(k, {})).update(v)
            elif k not in trt or trt[k] is None:
                trt[k] = v
    if "run_meta" in s.files:
        meta = readable(parse_run_metadata, s.files["run_meta"]) or {}
        device.update(meta.pop("device", {}))
        trt.update({k: v for k, v in meta.items() if v is not None})
    if "build_meta" in s.files:
        bm = readable(read_json, s.files["build_meta"])
        if isinstance(bm, dict):
            build.update(bm.get("build_options", {}))
            build.update({f"model_{k}".lower(): v for k, v in bm.get("model_options", {}).items()})
    if "device" in s.files:
        dv = readable(read_json, s.files["device"])
        if isinstance(dv, list) and dv and isinstance(dv[0], dict):
            device.setdefault("Selected Device", dv[0].get("Name"))
            cc = dv[0].get("ComputeCapability")
            if cc:
                device.setdefault("Compute Capability", ".".join(map(str, cc)))
    source = s.prefix
    profile, count = None, None
    if "profile" in s.files:
        profile, count, msgs = readable(parse_profile, s.files["profile"]) or (None, None, [])
        messages += msgs
    info, detailed = None, False
    if "layers" in s.files:
        info, msgs, detailed = readable(parse_layer_info, s.files["layers"]) or (None, [], False)
        messages += msgs
    layers, msgs = merge_profile_and_info(profile, info, source)
    messages += msgs
    samples, summary = None, None
    parsed_times = None
    if "times" in s.files:
        parsed_times = readable(parse_times, s.files["times"], trt.get("warmup_ms") or DEFAULT_WARMUP_MS)
    if broken and profile is None and info is None and parsed_times is None and not trt:
        raise broken[0]  # nothing of this engine could be read
    if parsed_times is not None:
        samples, tinfo = parsed_times
        pcts = _percentiles_of(trt)
        summary = timing_summary(samples, tinfo, pcts)
        summary.update({k: tinfo[k] for k in ("warmup_ms", "warmup_queries", "timestamp_resolution_ms")})
    elif profile is not None and "times" not in s.files:
        messages.append(f"{source}: no per-query times (--exportTimes): latency statistics come from the "
                        "trtexec summary when present")
    precision = _precision_from_build(build.get("Precision"))
    if precision is None and len(layers) and layers["precision_in"].notna().any():
        mix = lf.precision_mix(layers)
        precision = max(mix, key=lambda k: lf.PRECISION_RANK.get(k, -1)) if mix else None
    key = variant or s.prefix
    layers = lf.make_frame(layers, key)
    return EngineExport(prefix=s.prefix, directory=s.directory, layers=layers, samples=samples, summary=summary,
                        trtexec=trt, build=build, device=device, tensorrt_version=version,
                        precision=precision, model=model_key(build.get("model_model"), s.prefix),
                        messages=messages, files=files, profile_count=count, detailed=detailed)


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
