"""GPU clocks over a generation's decode steps, from the GPU metrics nsys sampled (``--gpu-metrics-devices``).

An export made with GPU metrics holds two tables (schema 3.x, Nsight Systems 2023-2025):

- ``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)``: one row per metric and sampled
  GPU (``typeId``); names such as ``GPC Clock Frequency [MHz]``, ``SYS Clock Frequency [MHz]``,
  ``GR Active [Throughput %]``, ``SMs Active [Throughput %]``;
- ``GPU_METRICS(rawTimestamp, timestamp, typeId, metricId, value)``: one row per metric per sample, ``timestamp``
  in ns on the timeline of the CUDA activity. Clock values are written in Hz although the names say MHz (an H200
  at its 1980 MHz boost reads 1979985378; :data:`HZ_ABOVE`).

Read straight from the export (``meta["source_path"]``, a ``.sqlite``), only over the decode steps, when a
generation is found. :func:`evidence` compares the clock over the baseline steps with the clock over the slow
steps of a drift: ``clocks dropped`` (heat, the power limit) against ``clocks steady`` (the GPU at the same clock
runs the step slower: contention).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

CLOCK_METRIC = "GPC Clock Frequency"
"""The metric whose samples are the GPU's graphics (SM) clock; ``SM Clock`` on GPUs whose metric set names it so."""
CLOCK_METRIC_ALIASES = (CLOCK_METRIC, "SM Clock", "Graphics Clock")
ACTIVE_METRIC = "GR Active"
"""The share of time the graphics engine was busy in each sample period (%)."""
HZ_ABOVE = 100_000
"""Clock values above this are in Hz (nsys writes Hz under an MHz name), below it in MHz."""
CLOCK_DROP_SHARE = 0.05
"""The median clock over the slow steps this share or more below the baseline steps' is a clock drop."""
MIN_SAMPLES = 3
"""Samples needed in each window before its clock is given (a 10 Hz default rate holds few per step)."""


def read_metrics(path: str, names: tuple[str, ...], lo_ns: int, hi_ns: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{metric name: (timestamps ns, values)} of the metrics whose name starts with one of ``names``, sampled in
    ``[lo_ns, hi_ns]``, of the first sampled GPU that has them; {} when the export has no GPU metrics."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables:
            return {}
        info = con.execute("SELECT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS "
                           "ORDER BY typeId, metricId").fetchall()
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for type_id, metric_id, name in info:
            key = next((n for n in names if str(name).startswith(n)), None)
            if key is None or key in out:
                continue
            rows = con.execute("SELECT timestamp, value FROM GPU_METRICS WHERE typeId = ? AND metricId = ? AND "
                               "timestamp BETWEEN ? AND ? ORDER BY timestamp",
                               (type_id, metric_id, int(lo_ns), int(hi_ns))).fetchall()
            a = np.array(rows, dtype=np.float64).reshape(-1, 2)
            out[key] = (a[:, 0].astype(np.int64), a[:, 1])
        return out
    finally:
        con.close()


def _mhz(v: np.ndarray) -> np.ndarray:
    return np.where(v > HZ_ABOVE, v / 1e6, v)


def _in(t: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(len(t), bool)
    for a, b in spans:
        m |= (t >= a) & (t <= b)
    return m


def _window(samples: dict[str, tuple[np.ndarray, np.ndarray]], spans: list[tuple[int, int]]) -> dict[str, Any]:
    """Median clock (MHz), its lowest sample and the median GR Active (%) over the samples in ``spans``."""
    t, v = samples[CLOCK_METRIC]
    m = _in(t, spans)
    out: dict[str, Any] = {"samples": int(m.sum()), "clock_mhz": None, "clock_min_mhz": None, "gr_active_pct": None}
    if m.sum() >= MIN_SAMPLES:
        out["clock_mhz"] = float(np.median(_mhz(v[m])))
        out["clock_min_mhz"] = float(_mhz(v[m]).min())
    if ACTIVE_METRIC in samples:
        ta, va = samples[ACTIVE_METRIC]
        ma = _in(ta, spans)
        out["gr_active_pct"] = float(np.median(va[ma])) if ma.sum() >= MIN_SAMPLES else None
    return out


def evidence(trace: Any, steps: Any, reqs: list[tuple[int, int, int, int]], drift: dict[str, Any],
             drop_share: float = CLOCK_DROP_SHARE) -> dict[str, Any]:
    """The ``generation.clocks`` entry: ``recorded`` (whether the export holds GPU metrics), ``note``, and with
    samples: ``baseline`` (over the drift's baseline steps) and ``slow`` (over the steps after the drift starts;
    without a drift, ``decode``: over every step), each {samples, clock_mhz, clock_min_mhz, gr_active_pct}, and
    ``verdict`` "clocks dropped" / "clocks steady (contention)" for a drift ("clocks steady (host)" when the drift's
``cause`` is the host: eager steps whose GPU work did not grow). ``steps``: the decode steps
    (:class:`profiler.capture.generation.Steps`), ``reqs`` their requests (first, end, ...)."""
    meta = getattr(trace, "meta", None) or {}
    recorded = meta.get("gpu_metrics")
    path = str(meta.get("source_path") or "")
    if not recorded:
        return {"recorded": False if recorded is False else None,
                "note": "no GPU clock samples in this export: record them with nsys profile --gpu-metrics-devices=all, "
                        "or watch nvidia-smi -q -d PERFORMANCE,CLOCK (throttle reasons) during the run"}
    idx = np.concatenate([np.arange(a, b) for a, b, *_ in reqs])
    s, e = steps.start_ns[idx], steps.end_ns[idx]
    samples = read_metrics(path, CLOCK_METRIC_ALIASES + (ACTIVE_METRIC,), int(s.min()), int(e.max())) \
        if path.endswith(".sqlite") else {}
    for alias in CLOCK_METRIC_ALIASES[1:]:
        if CLOCK_METRIC not in samples and alias in samples:
            samples[CLOCK_METRIC] = samples.pop(alias)
    if CLOCK_METRIC not in samples:
        return {"recorded": True, "note": "the export holds GPU metrics (GPU_METRICS) but no clock samples over the "
                                          "decode steps (read from a .sqlite export only)"}
    out: dict[str, Any] = {"recorded": True}
    start = drift.get("start_step")
    if start is None:
        out["decode"] = _window(samples, [(int(s[0]), int(e[-1]))])
        c = out["decode"]["clock_mhz"]
        out["note"] = (f"GPU clock {c:.0f} MHz median over the decode steps (GPU metrics)" if c is not None else
                       "too few GPU metric samples over the decode steps: raise --gpu-metrics-frequency")
        return out
    w = int(drift.get("window_steps") or 1)
    out["baseline"] = _window(samples, [(int(s[0]), int(e[min(w, len(s)) - 1]))])
    slow = np.flatnonzero(np.arange(len(s)) >= start)
    out["slow"] = _window(samples, [(int(s[i]), int(e[i])) for i in slow])
    b, lo = out["baseline"]["clock_mhz"], out["slow"]["clock_mhz"]
    if b is None or lo is None:
        out["verdict"] = None
        out["note"] = "too few GPU metric samples over the baseline or the slow steps: raise --gpu-metrics-frequency"
    elif lo <= b * (1 - drop_share):
        out["verdict"] = "clocks dropped"
        out["note"] = (f"the GPU clock fell from {b:.0f} MHz over the baseline steps to {lo:.0f} MHz over the slow "
                       "ones (GPU metrics): heat or the power limit")
    elif drift.get("cause") == "host":
        out["verdict"] = "clocks steady (host)"
        out["note"] = (f"the GPU clock held ({b:.0f} MHz over the baseline steps, {lo:.0f} MHz over the slow ones; "
                       "GPU metrics) and the steps' GPU work did not grow: the host is what slowed")
    else:
        out["verdict"] = "clocks steady (contention)"
        out["note"] = (f"the GPU clock held ({b:.0f} MHz over the baseline steps, {lo:.0f} MHz over the slow ones; "
                       "GPU metrics): the same clock runs the steps slower, so other work competes for the GPU")
    return out


__all__ = ["CLOCK_DROP_SHARE", "evidence", "read_metrics"]
