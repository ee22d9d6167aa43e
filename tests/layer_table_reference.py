"""The layer table as it was computed before it became one grouping: a pandas aggregate per layer.

Kept as the reference the vectorised :func:`profiler.capture.layer_table.layer_table` must equal
byte for byte (tests/test_layer_table.py) and as the baseline of benchmarks/bench_layer_table.py. Its
cost grows with layers x kernel rows (each layer scans every member row); nothing in the product uses it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import series as S
from profiler.capture.layer_table import (GRAPH_NOTE, GRAPH_NOTE_OTHER, MAX_KERNELS, _layer_tensor_cores,
                                          gpu_tensor_cores, uses_tensor_cores)
from profiler.capture.unit import Unit, label_of


def layer_table_per_layer(table: S.SeriesTable, unit: Unit, kernel_names: tuple[np.ndarray, np.ndarray] | None = None,
                gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``layers`` (list, most GPU time first) and ``layer_total`` for the unit's steady instances; on GPUs
    without Tensor Cores (``gpus``' compute capability below 7.0) no layer or kernel uses them."""
    empty = {"layers": [], "layer_total": None}
    if unit.source == "window" or unit.series_id is None or unit.count <= unit.warmup:
        return empty
    inst = table.instances
    steady_rows = unit.rows[unit.warmup:]
    unit_gpu_ns = float(unit.gpu_ns[unit.warmup:].sum())
    parent = inst["parent"].to_numpy()
    is_steady = np.zeros(len(inst), bool)
    is_steady[steady_rows] = True
    child = np.flatnonzero((parent >= 0) & is_steady[np.maximum(parent, 0)])
    has_tc = gpu_tensor_cores(gpus)
    total = {"layers_gpu_ms": 0.0, "inference_gpu_ms": unit_gpu_ns / 1e6 / max(len(steady_rows), 1),
             "note": None, "gpu_tensor_cores": has_tc}
    if unit.graph_launches:  # trtexec's advice only where TensorRT made the ranges
        total["note"] = GRAPH_NOTE if unit.source == "tensorrt" else GRAPH_NOTE_OTHER
    if not len(child):
        total["difference_ms"] = -total["inference_gpu_ms"]
        return {"layers": [], "layer_total": total}
    sid = inst["series_id"].to_numpy()[child]
    busy = inst["gpu_busy_ns"].to_numpy()[child]
    df = pd.DataFrame({"s": sid, "p": parent[child], "b": busy})
    per = df.groupby(["s", "p"])["b"].sum().reset_index()
    n_inf = len(steady_rows)
    act = table.activity
    q, rows = table.members(inst.iloc[child], "activity")
    kern = act.kind[rows] == S.KERNEL
    layers = []
    for s, g in per.groupby("s"):
        vals = np.zeros(n_inf)  # an inference without this layer spent 0 on it
        vals[: len(g)] = g["b"].to_numpy()
        mine = kern & (sid[q] == s)
        layers.append({
            "name": label_of(table.series["domain"].iat[s], table.series["name"].iat[s]),
            "parent": unit.label, "count": int((sid == s).sum()),
            "gpu_ms": stats.summarize(vals / 1e6),
            "share": float(g["b"].sum()) / unit_gpu_ns if unit_gpu_ns > 0 else None,
            "kernels": _kernels_of_layer(act, rows[mine], kernel_names),
        })
        layers[-1]["tensor_cores"] = _layer_tensor_cores(layers[-1]["kernels"])
    if has_tc is False:
        for r in layers:
            r["tensor_cores"] = False
            for k in r["kernels"]:
                k["tensor_cores"] = False
    layers.sort(key=lambda r: -(r["share"] or 0.0))
    layers_ms = float(per["b"].sum()) / 1e6 / n_inf
    total.update(layers_gpu_ms=layers_ms, difference_ms=layers_ms - total["inference_gpu_ms"])
    # shares of a total must add up to it: overlapping child ranges (streams inside a layer) are capped
    share_sum = sum(r["share"] or 0.0 for r in layers)
    if share_sum > 1.0:
        for r in layers:
            r["share"] = (r["share"] or 0.0) / share_sum
        total["note"] = ((total["note"] + " ") if total["note"] else "") + (
            "Layer ranges overlap in GPU time (work of several layers running at once); shares are scaled to sum to 1.")
    return {"layers": layers, "layer_total": total}


def _kernels_of_layer(act: S.Activity, rows: np.ndarray, names: tuple[np.ndarray, np.ndarray] | None,
             ) -> list[dict[str, Any]]:
    """The layer's kernels by total GPU time: [{name, count, total_ms}] (at most ``MAX_KERNELS``);
    ``names`` is (code per kernel row, distinct names) of the trace's kernel frame."""
    if names is None or not len(rows):
        return []
    codes, values = names
    d = act.end_ns[rows] - act.start_ns[rows]
    s = pd.DataFrame({"n": values[codes[act.frame_rows(rows)]], "d": d}).groupby("n")["d"].agg(["size", "sum"])
    s = s.sort_values("sum", ascending=False).head(MAX_KERNELS)
    return [{"name": str(n), "count": int(c), "total_ms": float(t) / 1e6, "tensor_cores": uses_tensor_cores(str(n))}
            for n, c, t in zip(s.index, s["size"], s["sum"])]
