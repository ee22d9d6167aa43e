"""LLM generation: a prefill followed by many repeated decode steps, per request.

Decode steps are the replays of one CUDA graph (``generate(cg=True)``, vLLM, TensorRT-LLM decode graphs),
from the graph trace (one record per replay) or, under node-level tracing, the kernels of each graph launch.
Consecutive replays belong to one request; a gap longer than :data:`REQUEST_GAP_STEPS` median step periods,
holding a dense burst of other GPU work (the prefill over the prompt, at least :data:`MIN_PREFILL_STEPS` steps'
worth of GPU time), starts the next. Without such a prefill the replays are repeated inferences, not decode.

Per capture: ``requests``, ``prefill_ms`` (statistics over requests), ``decode_steps``, ``ms_per_token`` (the
period from one step's start to the next within a request: what a token costs, sampling in between included),
``step_gpu_ms``, ``tokens_per_s`` (decode steps over the requests' decode time) and ``drift``: the trend of the
step time over the capture, in step order across requests: the baseline (median of the first
:data:`DRIFT_WINDOW_STEPS` steps), the rolling median's peak and last value, the step index where it first
exceeds the baseline by :data:`DRIFT_MIN_SHARE`, the least-squares slope, and whether the slow steps are
``sustained`` or ``intermittent`` (fast steps between slow ones: contention from other work rather than
clocks, which change smoothly). Clocks: the export's GPU metrics, when nsys recorded them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import intervals
from profiler.capture.frames import frame_of, i64

MIN_DECODE_STEPS = 16
"""Replays of one graph in a request before they count as decode steps (fewer: a few graph launches)."""
REQUEST_GAP_STEPS = 20.0
"""A gap between consecutive replays longer than this many median step periods ends a request ..."""
MIN_PREFILL_STEPS = 4.0
"""... when the GPU work in it just before the next replay (the prefill) takes at least this many median
steps' GPU time; a request's prefill is that burst."""
PREFILL_MAX_GAP_MS = 10.0
"""The prefill burst before a request's first step: GPU work back from that step while the GPU idles no
longer than this between kernels (host-side tokenisation before it is not prefill)."""
DRIFT_WINDOW_STEPS = 16
"""Steps in the baseline and in the rolling median that traces the step time over the capture."""
DRIFT_MIN_SHARE = 0.1
"""The rolling median of the step time exceeding the baseline by this share is drift."""
INTERMITTENT_FAST_SHARE = 0.2
"""Drift is ``intermittent`` when at least this share of the steps after it starts still run at the baseline
(within :data:`DRIFT_MIN_SHARE`): slow steps between fast ones, not a slower GPU."""


@dataclass
class Steps:
    """Decode-step candidates: one graph's replays in start order (ns)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    graph: int


def graph_steps(trace: Any) -> Steps | None:
    """The replays of the most replayed CUDA graph (graph trace records, else kernels grouped by launch)."""
    g = frame_of(trace, "graphs")
    if len(g):
        key = i64(g, "graph_exec_id", -1)
        if (key < 0).all():
            key = i64(g, "graph_id", -1)
        s, e = i64(g, "start_ns", 0), i64(g, "end_ns", 0)
    else:
        k = frame_of(trace, "kernels")
        gid = i64(k, "graph_id", -1) if len(k) else np.zeros(0, np.int64)
        m = gid >= 0
        if not m.any():
            return None
        df = pd.DataFrame({"g": gid[m], "c": i64(k, "correlation_id", -1)[m], "s": i64(k, "start_ns", 0)[m],
                           "e": i64(k, "end_ns", 0)[m]}).groupby(["g", "c"]).agg(s=("s", "min"), e=("e", "max"))
        key, s, e = df.index.get_level_values("g").to_numpy(), df["s"].to_numpy(), df["e"].to_numpy()
    if not len(key):
        return None
    ids, n = np.unique(key, return_counts=True)
    top = ids[np.argmax(n)]
    m = key == top
    order = np.argsort(s[m], kind="stable")
    return Steps(s[m][order], np.maximum(e[m][order], s[m][order]), int(top))


def _kernel_busy(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """Union of the GPU work outside graphs (kernels without a graph id, copies, memsets)."""
    parts_s, parts_e = [], []
    for name in ("kernels", "memcpy", "memset"):
        f = frame_of(trace, name)
        if not len(f):
            continue
        m = i64(f, "graph_id", -1) < 0 if name == "kernels" else np.ones(len(f), bool)
        parts_s.append(i64(f, "start_ns", 0)[m])
        parts_e.append(i64(f, "end_ns", 0)[m])
    if not parts_s:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return intervals.union(np.concatenate(parts_s), np.concatenate(parts_e))


def _prefill(us: np.ndarray, ue: np.ndarray, before_ns: int, after_ns: int, max_gap_ns: float) -> tuple[int, int]:
    """(busy ns, start ns) of the dense burst of GPU work ending by ``before_ns`` and starting after ``after_ns``."""
    i = int(np.searchsorted(ue, before_ns, side="right"))  # unions ending by the step's start
    busy, start = 0, before_ns
    j = i - 1
    edge = before_ns
    while j >= 0 and us[j] > after_ns and edge - ue[j] <= max_gap_ns:
        busy += int(ue[j] - us[j])
        start = int(us[j])
        edge = int(us[j])
        j -= 1
    return busy, start


def find(trace: Any, capture_start_ns: int = 0, *, min_steps: int = MIN_DECODE_STEPS, request_gap_steps: float = REQUEST_GAP_STEPS,
         min_prefill_steps: float = MIN_PREFILL_STEPS, prefill_max_gap_ms: float = PREFILL_MAX_GAP_MS,
         window: int = DRIFT_WINDOW_STEPS, drift_min_share: float = DRIFT_MIN_SHARE) -> dict[str, Any] | None:
    """The ``generation`` entry (see the module docs), or None when the capture holds no decode loop."""
    steps = graph_steps(trace)
    if steps is None or len(steps.start_ns) < min_steps:
        return None
    s, e = steps.start_ns, steps.end_ns
    dur = (e - s).astype(np.float64)
    period = float(np.median(np.diff(s))) if len(s) > 1 else 0.0
    step_ns = float(np.median(dur))
    if period <= 0 or step_ns <= 0:
        return None
    gaps = s[1:] - e[:-1]
    us, ue = _kernel_busy(trace)
    requests: list[list[int]] = []  # [first step index, end index, prefill busy ns, prefill start ns]
    first = 0
    bounds = [int(i) + 1 for i in np.flatnonzero(gaps > request_gap_steps * period)] + [len(s)]
    prev_end = int(np.iinfo(np.int64).min)
    for b in bounds:
        busy, pstart = _prefill(us, ue, int(s[first]), prev_end, prefill_max_gap_ms * 1e6)
        if busy < min_prefill_steps * step_ns and requests:
            requests[-1][1] = b  # a pause without a prefill: the same request goes on
        else:
            requests.append([first, b, busy, pstart])
        prev_end, first = int(e[b - 1]), b
    # a request is decode only after its prefill and with enough steps
    decode = [tuple(r) for r in requests if r[1] - r[0] >= min_steps and r[2] >= min_prefill_steps * step_ns]
    if not decode:
        return None
    out = _entry(steps, decode, dur, window, drift_min_share, capture_start_ns)
    out["clocks"] = clocks_note(trace)
    return out


def clocks_note(trace: Any) -> dict[str, Any]:
    """Whether the export holds GPU clock samples (nsys ``--gpu-metrics-devices``), and what that means."""
    recorded = (getattr(trace, "meta", None) or {}).get("gpu_metrics")
    if recorded:
        return {"recorded": True, "note": "the export holds GPU metrics (GPU_METRICS): compare the GPC clock over "
                                          "the slow steps in Nsight Systems; trtprof does not read them yet"}
    return {"recorded": False if recorded is False else None,
            "note": "no GPU clock samples in this export: record them with nsys profile --gpu-metrics-devices=all, "
                    "or watch nvidia-smi -q -d PERFORMANCE,CLOCK (throttle reasons) during the run"}


def _entry(steps: Steps, reqs: list[tuple[int, int, int, int]], dur: np.ndarray, window: int,
           drift_min_share: float, capture_start_ns: int) -> dict[str, Any]:
    s, e = steps.start_ns, steps.end_ns
    idx = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs])
    periods = np.concatenate([np.diff(s[a:b]) for a, b, _, _ in reqs if b - a > 1]).astype(np.float64)
    decode_ns = float(sum(int(e[b - 1] - s[a]) for a, b, _, _ in reqs))
    n_steps = int(len(idx))
    return {
        "graph": steps.graph, "requests": len(reqs),
        "prefill_ms": stats.summarize(np.array([p for _, _, p, _ in reqs], dtype=np.float64) / 1e6),
        "per_request": [{"prefill_start_ms": (int(ps) - capture_start_ns) / 1e6, "prefill_ms": p / 1e6, "decode_steps": int(b - a),
                         "decode_ms": int(e[b - 1] - s[a]) / 1e6, "first_step": int(a)} for a, b, p, ps in reqs],
        "decode_steps": n_steps,
        "ms_per_token": stats.summarize(periods / 1e6),
        "step_gpu_ms": stats.summarize(dur[idx] / 1e6),
        "tokens_per_s": n_steps / (decode_ns / 1e9) if decode_ns > 0 else None,
        "drift": drift(dur[idx], window, drift_min_share),
    }


def drift(step_ns: np.ndarray, window: int = DRIFT_WINDOW_STEPS, min_share: float = DRIFT_MIN_SHARE
          ) -> dict[str, Any]:
    """The trend of the step time over the steps in order (see the module docs); ``start_step`` None: none."""
    ms = np.asarray(step_ns, dtype=np.float64) / 1e6
    n = len(ms)
    w = max(1, min(window, n))
    base = float(np.median(ms[:w]))
    rolling = pd.Series(ms).rolling(w).median().to_numpy()[w - 1:]
    over = np.flatnonzero(rolling > base * (1 + min_share))
    start = int(over[0]) if len(over) else None  # the first window that is slower: it starts at that step
    slope = float(np.polyfit(np.arange(n), ms, 1)[0]) if n > 2 else 0.0
    out = {"baseline_ms": base, "peak_ms": float(rolling.max()), "last_ms": float(rolling[-1]),
           "change_pct": 100.0 * (float(rolling.max()) - base) / base if base > 0 else None,
           "start_step": start, "slope_ms_per_100_steps": 100 * slope, "window_steps": w,
           "slow_steps": int((ms > base * (1 + min_share)).sum()),
           "excess_ms": float(np.maximum(ms - base, 0.0)[start:].sum()) if start is not None else 0.0,
           "pattern": None}
    if start is not None:
        after = ms[start:]
        fast = float((after <= base * (1 + min_share)).mean())
        out["pattern"] = "intermittent" if fast >= INTERMITTENT_FAST_SHARE else "sustained"
        out["fast_share_after_start"] = fast
    return out


__all__ = ["DRIFT_MIN_SHARE", "DRIFT_WINDOW_STEPS", "MIN_DECODE_STEPS", "MIN_PREFILL_STEPS", "REQUEST_GAP_STEPS",
           "Steps", "drift", "find", "graph_steps"]
