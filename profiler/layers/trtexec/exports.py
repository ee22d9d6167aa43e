"""One engine's trtexec files found by name and read together into an EngineExport."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.errors import InputError
from profiler.layers import frame as lf
from profiler.layers.trtexec.common import (
    DEFAULT_WARMUP_MS,
    DETAILED_HINT,
    SUFFIXES,
    options,
    read_json,
    text_of,
)
from profiler.layers.trtexec.layer_files import (
    fused_nodes_from_name,
    parse_layer_info,
    parse_profile,
)
from profiler.layers.trtexec.timing import (
    _percentiles_of,
    parse_log,
    parse_run_metadata,
    parse_times,
    timing_summary,
)


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
        else:
            from profiler.files import check_input_file

            check_input_file(p, "import path", "a trtexec export file or a folder of them")
            files.append(p)
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


def _build_metadata(path: Path) -> dict[str, Any]:
    """A ``*.build.metadata.json``: its build options, and its model options as ``model_*`` keys."""
    bm = read_json(path)
    if not isinstance(bm, dict):
        return {}
    build = dict(options(bm.get("build_options"), f"{path.name}: build_options"))
    model = options(bm.get("model_options"), f"{path.name}: model_options")
    build.update({f"model_{k}".lower(): v for k, v in model.items()})
    return build


def _device_metadata(path: Path) -> dict[str, Any]:
    """A ``*.metadata.json`` (the device list): the first device's name and compute capability."""
    dv = read_json(path)
    if not (isinstance(dv, list) and dv and isinstance(dv[0], dict)):
        return {}
    out: dict[str, Any] = {}
    name = dv[0].get("Name")
    if name is not None:
        out["Selected Device"] = str(name)
    cc = dv[0].get("ComputeCapability")
    if isinstance(cc, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in cc) and cc:
        out["Compute Capability"] = ".".join(map(str, cc))
    elif isinstance(cc, (int, float, str)) and not isinstance(cc, bool) and str(cc):
        out["Compute Capability"] = str(cc)  # 90 or "9.0": kept as written
    elif cc:
        raise InputError(f"{path.name}: ComputeCapability is {type(cc).__name__}, not a list of integers: "
                         "the export is damaged")
    return out


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
        build.update(readable(_build_metadata, s.files["build_meta"]) or {})
    if "device" in s.files:
        device.update({k: v for k, v in (readable(_device_metadata, s.files["device"]) or {}).items()
                       if k not in device})
    if device.get("Selected Device") is not None:  # a name, whatever type another writer gave it
        device["Selected Device"] = text_of(device["Selected Device"])
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
    precision = _precision_from_build(text_of(build.get("Precision")))
    if precision is None and len(layers) and layers["precision_in"].notna().any():
        mix = lf.precision_mix(layers)
        precision = max(mix, key=lambda k: lf.PRECISION_RANK.get(k, -1)) if mix else None
    key = variant or s.prefix
    layers = lf.make_frame(layers, key)
    return EngineExport(prefix=s.prefix, directory=s.directory, layers=layers, samples=samples, summary=summary,
                        trtexec=trt, build=build, device=device, tensorrt_version=version,
                        precision=precision, model=model_key(text_of(build.get("model_model")), s.prefix),
                        messages=messages, files=files, profile_count=count, detailed=detailed)
