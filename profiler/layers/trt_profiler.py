"""TensorRT ``IProfiler`` records -> the per-layer frame.

The TensorRT backend subclasses ``trt.IProfiler`` and forwards each ``report_layer_time(layer, ms)``
to :meth:`LayerTimes.add`; every pass over the engine (one inference) starts again at the first
layer, so iterations are split where the first layer's name comes round again (as trtexec does).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from profiler.layers import frame as lf


class LayerTimes:
    """Collects (layer, ms) records, one list per profiled iteration."""

    def __init__(self) -> None:
        self.iterations: list[list[tuple[str, float]]] = []
        self._first: str | None = None

    def add(self, layer_name: str, time_ms: float) -> None:
        if self._first is None:
            self._first = layer_name
        if layer_name == self._first or not self.iterations:
            self.iterations.append([])
        self.iterations[-1].append((layer_name, float(time_ms)))

    def frame(self, variant: str | None = None, layer_info: pd.DataFrame | None = None) -> pd.DataFrame:
        return from_iterations(self.iterations, variant, layer_info)


def from_iterations(iterations: Iterable[Iterable[tuple[str, float]]], variant: str | None = None,
                    layer_info: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-iteration (layer, ms) lists -> frame (count, total, average, median per layer).

    ``layer_info`` (from ``profiler.layers.trtexec.parse_layer_info`` over the engine inspector's JSON)
    adds types, precisions and tactics by layer name.
    """
    times: dict[str, list[float]] = {}
    order: list[str] = []
    n_iter = 0
    for it in iterations:
        n_iter += 1
        for name, ms in it:
            if name not in times:
                times[name] = []
                order.append(name)
            times[name].append(float(ms))
    rows = []
    for name in order:
        t = np.asarray(times[name], dtype=float)
        rows.append({"name": name, "count": len(t), "time_total_ms": float(t.sum()),
                     "time_avg_ms": float(t.sum() / max(n_iter, 1)), "time_median_ms": float(np.median(t))})
    df = pd.DataFrame(rows, columns=["name", "count", "time_total_ms", "time_avg_ms", "time_median_ms"])
    if layer_info is not None and len(layer_info):
        from profiler.layers.trtexec import merge_profile_and_info

        df["profile"] = 0
        df, _ = merge_profile_and_info(df, layer_info, "IProfiler")
    else:
        from profiler.layers.trtexec import fused_nodes_from_name

        df["fused_nodes"] = [fused_nodes_from_name(n) for n in df["name"]]
    return lf.make_frame(df, variant)
