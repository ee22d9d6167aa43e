"""Layers from the capture: the child ranges of the inference unit (TensorRT's per-layer NVTX ranges).

Per layer (a series whose instances sit directly inside steady-state unit instances): GPU time per
inference (the busy union of the work launched inside the layer range, summed per inference; median
and p99), share of the inference's GPU time, the kernels it ran (TensorRT's tactics) and whether their
names say they use Tensor Cores (:mod:`profiler.kernel_math`). The layers' sum is set against the inference GPU time.

Under CUDA graphs an inference is one graph launch: TensorRT's layer ranges exist only while the graph
is captured, so per-layer GPU time is not in the capture; the replays are attributed as a unit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import series as S
from profiler.capture.unit import Unit, label_of
from profiler.kernel_math import TENSOR_CORE_MIN_MAJOR, gpu_tensor_cores, uses_tensor_cores  # noqa: F401 - the one table

MAX_KERNELS = 5

GRAPH_NOTE = ("The inference replays a CUDA graph: TensorRT's layer ranges exist only while the graph is "
              "captured, so per-layer GPU time is not in this capture and each replay is attributed as a "
              "whole. Profile a run without CUDA graphs (trtexec without --useCudaGraph) for per-layer times.")
GRAPH_NOTE_OTHER = ("The inference replays a CUDA graph: NVTX ranges inside it (per layer or per op) exist only "
                    "while the graph is captured, so per-layer GPU time is not in this capture and each replay "
                    "is attributed as a whole. Profile a run without CUDA graphs for per-layer times.")


def _layer_tensor_cores(kernels: list[dict[str, Any]]) -> bool | None:
    """A layer uses Tensor Cores when one of its kernels does; it does not when every kernel says it does
    not; else unknown."""
    said = [k["tensor_cores"] for k in kernels]
    if any(v is True for v in said):
        return True
    return False if said and all(v is False for v in said) else None


def layer_table(table: S.SeriesTable, unit: Unit, kernel_names: tuple[np.ndarray, np.ndarray] | None = None,
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
    kernels_of = _kernels_by_layer(act, sid[q[kern]], rows[kern], kernel_names)
    count_of = np.bincount(sid)
    per_s, per_b = per["s"].to_numpy(), per["b"].to_numpy()
    domains, names = table.series["domain"].to_numpy(), table.series["name"].to_numpy()
    layers = []
    for s, lo, hi in _runs(per_s):  # per is sorted by layer: one run of (layer, inference) sums each
        b = per_b[lo:hi]
        vals = np.zeros(n_inf)  # an inference without this layer spent 0 on it
        vals[: len(b)] = b
        layers.append({
            "name": label_of(domains[s], names[s]),
            "parent": unit.label, "count": int(count_of[s]),
            "gpu_ms": stats.summarize(vals / 1e6),
            "share": float(b.sum()) / unit_gpu_ns if unit_gpu_ns > 0 else None,
            "kernels": kernels_of.get(int(s), []),
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


def _runs(keys: np.ndarray) -> list[tuple[Any, int, int]]:
    """(key, lo, hi) of each run of equal values in the sorted ``keys``: ``keys[lo:hi]`` are that key."""
    if not len(keys):
        return []
    lo = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    hi = np.r_[lo[1:], len(keys)]
    return list(zip(keys[lo], lo.tolist(), hi.tolist()))


def _descending(values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` from the largest down, ties broken as pandas' ``sort_values(ascending=False)``
    breaks them (the reversed array's quicksort order, reversed), so the table keeps the order it had."""
    back = np.arange(len(values))[::-1]
    return back[values[::-1].argsort(kind="quicksort")][::-1]


def _kernels_by_layer(act: S.Activity, layer: np.ndarray, rows: np.ndarray,
                      names: tuple[np.ndarray, np.ndarray] | None) -> dict[int, list[dict[str, Any]]]:
    """Each layer's kernels by total GPU time: layer series id -> [{name, count, total_ms, tensor_cores}]
    (at most ``MAX_KERNELS``), in one grouping of every kernel row; ``layer`` is the series id of the
    layer instance holding each of the activity ``rows``; ``names`` is (code per kernel row, distinct
    names) of the trace's kernel frame."""
    if names is None or not len(rows):
        return {}
    codes, values = names
    d = act.end_ns[rows] - act.start_ns[rows]
    g = pd.DataFrame({"l": layer, "n": values[codes[act.frame_rows(rows)]], "d": d}).groupby(["l", "n"])["d"].agg(
        ["size", "sum"])
    name, size, total = g.index.get_level_values(1).to_numpy(), g["size"].to_numpy(), g["sum"].to_numpy()
    said: dict[str, bool | None] = {}  # what each name says, read once however many layers ran it
    out = {}
    for s, lo, hi in _runs(g.index.get_level_values(0).to_numpy()):
        out[int(s)] = rows_of = []
        for i in _descending(total[lo:hi])[:MAX_KERNELS] + lo:
            n = str(name[i])
            if n not in said:
                said[n] = uses_tensor_cores(n)
            rows_of.append({"name": n, "count": int(size[i]), "total_ms": float(total[i]) / 1e6,
                            "tensor_cores": said[n]})
    return out


def join_layer_info(layers: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """Add the engine's view of each layer (type, precisions, formats, tactic) from trtexec's
    ``--exportLayerInfo`` JSON (``profiler.layers.trtexec.parse_layer_info``), matched by layer name
    (TensorRT names its layer ranges after its layers; a ``[profile N]`` suffix is ignored). Returns
    ``{"path", "matched", "unmatched": [capture layer names], "messages"}``."""
    from profiler.layers.trtexec import _strip_profile, parse_layer_info

    info, messages, _ = parse_layer_info(path)
    by_name: dict[str, dict[str, Any]] = {}
    for rec in info.to_dict("records"):
        by_name.setdefault(str(rec["name"]), rec)
        by_name.setdefault(str(rec["base_name"]), rec)
    unmatched = []
    for layer in layers:
        name = layer["name"].split(":", 1)[1] if layer["name"].startswith("TensorRT:") else layer["name"]
        rec = by_name.get(name) or by_name.get(_strip_profile(name)[0])
        if rec is None:
            unmatched.append(layer["name"])
            continue
        layer["engine"] = {k: rec.get(k) for k in ("type", "precision_in", "precision_out", "tactic",
                                                   "formats_in", "formats_out", "dims_in") if k in rec}
    return {"path": str(path), "matched": len(layers) - len(unmatched), "unmatched": unmatched,
            "messages": messages}
