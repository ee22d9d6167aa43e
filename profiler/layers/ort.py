"""ONNX Runtime profiles (``SessionOptions.enable_profiling``) -> the per-layer frame.

ORT writes a Chrome-trace JSON list; every executed node gives a ``cat == "Node"`` event named
``<node>_kernel_time`` with ``dur`` in microseconds and ``args`` holding ``op_name``, ``provider``,
``parameter_size``, ``activation_size``, ``output_size`` and ``input_type_shape``. Fence events
(``_fence_before``/``_fence_after``) are synchronisation markers and are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.errors import InputError
from profiler.layers import frame as lf

_ORT_TYPES = {"float": "fp32", "float16": "fp16", "bfloat16": "bf16", "double": "fp64", "int8": "int8",
              "uint8": "uint8", "int32": "int32", "int64": "int64", "bool": "bool"}


def _precision(shapes: Any) -> str | None:
    if isinstance(shapes, list) and shapes and isinstance(shapes[0], dict) and shapes[0]:
        return _ORT_TYPES.get(next(iter(shapes[0])), next(iter(shapes[0])))
    return None


def _int(x: Any) -> float | None:
    try:
        return float(int(x))
    except (TypeError, ValueError):
        return None


def parse_ort_profile(source: str | Path | list, variant: str | None = None, skip_runs: int = 0) -> pd.DataFrame:
    """One row per ONNX node: time total/avg/median over its executions, in the shared schema.

    ``skip_runs`` drops each node's first N executions (warm-up runs).
    """
    if isinstance(source, list):
        events = source
    else:
        from profiler.layers.trtexec import read_json

        events = read_json(source)
        if isinstance(events, dict):
            events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise InputError(f"{source} is not an ONNX Runtime profile (expected a JSON list of trace events)")
    per: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for e in events:
        if not isinstance(e, dict) or e.get("cat") != "Node":
            continue
        name = str(e.get("name", ""))
        if not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        args = e.get("args") or {}
        rec = per.get(node)
        if rec is None:
            rec = per[node] = {"durs_us": [], "args": args}
            order.append(node)
        rec["durs_us"].append(float(e.get("dur", 0)))
    if not per:
        raise InputError(f"{source} holds no ONNX Runtime node events (was enable_profiling set?)")
    rows = []
    for node in order:
        rec = per[node]
        d = np.asarray(rec["durs_us"][skip_runs:] or rec["durs_us"], dtype=float) / 1000.0
        a = rec["args"]
        act = [_int(a.get("activation_size")), _int(a.get("output_size"))]
        rows.append({
            "name": node, "type": a.get("op_name"),
            "precision_in": _precision(a.get("input_type_shape")),
            "precision_out": _precision(a.get("output_type_shape")),
            "tactic": a.get("provider"), "fused_nodes": [node],
            "weights_bytes": _int(a.get("parameter_size")),
            "activation_bytes": sum(x for x in act if x is not None) if any(x is not None for x in act) else None,
            "count": len(d), "time_total_ms": float(d.sum()), "time_avg_ms": float(d.mean()),
            "time_median_ms": float(np.median(d)),
        })
    return lf.make_frame(rows, variant)
