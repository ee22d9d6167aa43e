"""trtexec's per-layer profile (--exportProfile) and engine layer information (--exportLayerInfo)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.errors import InputError
from profiler.layers import frame as lf
from profiler.layers.trtexec.common import (
    DETAILED_HINT,
    MAX_COUNT,
    _strip_profile,
    number,
    read_json,
)


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


def network_io(data: Any) -> tuple[set[str], set[str]]:
    """(input, output) binding names of a layer-info file. ``Bindings`` lists the engine's I/O tensors
    without saying which way they go: one some layer writes is a network output, any other a network
    input. Both empty without ``Bindings`` (nothing is guessed from names); bare layer names (the default
    verbosity) list no tensors, so no row names a binding."""
    bindings = data.get("Bindings") if isinstance(data, dict) else None
    if not isinstance(bindings, list):
        return set(), set()
    written = {str(t.get("Name")) for layer in data.get("Layers") or [] if isinstance(layer, dict)
               for t in layer.get("Outputs", []) if isinstance(t, dict)}
    names = {str(b) for b in bindings if isinstance(b, str)}
    return names - written, names & written


def _layer_row(layer: dict, idx: int, net_in: set[str], net_out: set[str]) -> dict[str, Any]:
    """One detailed layer of ``--exportLayerInfo`` as a frame row (``network_inputs`` / ``network_outputs``:
    the I/O bindings it reads or writes, from :func:`network_io`)."""
    name = str(layer["Name"])
    base, prof = _strip_profile(name)
    ins = [t for t in layer.get("Inputs", []) if isinstance(t, dict)]
    outs = [t for t in layer.get("Outputs", []) if isinstance(t, dict)]
    meta = layer.get("Metadata")
    tb = [_tensor_bytes(t) for t in ins + outs]
    return {
        "name": name, "order": idx, "profile": prof, "base_name": base,
        "type": layer.get("LayerType"),
        "precision_in": lf.precision_from_format(_tensor_format(ins[0])) if ins else None,
        "precision_out": lf.precision_from_format(_tensor_format(outs[0])) if outs else None,
        "tactic": layer.get("TacticName") or None,
        "tactic_value": layer.get("TacticValue"),
        "fused_nodes": fused_nodes_from_metadata(meta) if meta else fused_nodes_from_name(name),
        "nodes_from": "metadata" if meta else "name",
        "weights_bytes": _weights_bytes(layer),
        "activation_bytes": float(sum(b for b in tb if b is not None)) if any(b is not None for b in tb) else None,
        "formats_in": [_tensor_format(t) for t in ins],
        "formats_out": [_tensor_format(t) for t in outs],
        "dims_in": [t.get("Dimensions") for t in ins],
        "dims_out": [t.get("Dimensions") for t in outs],
        "network_inputs": [str(t.get("Name")) for t in ins if str(t.get("Name")) in net_in],
        "network_outputs": [str(t.get("Name")) for t in outs if str(t.get("Name")) in net_out],
        "parameter_type": layer.get("ParameterType"),
        "out_maps": layer.get("OutMaps"), "groups": layer.get("Groups"),
        "stream_id": layer.get("StreamId"),
    }


def parse_layer_info(path: str | Path) -> tuple[pd.DataFrame, list[str], bool]:
    """``--exportLayerInfo`` JSON -> (frame, messages, detailed?).

    Detailed verbosity gives dict layers (formats, tactic, weights, TensorRT 10 ``Metadata`` and
    ``StreamId``, the I/O bindings each layer touches); the default verbosity gives bare layer names
    only: the frame then has names and the messages say what to rerun with.
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
    net_in, net_out = network_io(data)
    for idx, layer in enumerate(layers):
        if isinstance(layer, str):
            base, prof = _strip_profile(layer)
            rows.append({"name": layer, "order": idx, "profile": prof, "base_name": base,
                         "fused_nodes": fused_nodes_from_name(layer), "nodes_from": "name"})
        elif isinstance(layer, dict) and "Name" in layer:
            rows.append(_layer_row(layer, idx, net_in, net_out))
    df = pd.DataFrame(rows)
    if df.empty:
        raise InputError(f"{path} lists no layers")
    return df, messages, detailed


# -- per-query times ---------------------------------------------------------------------------------
