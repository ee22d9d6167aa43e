"""LLM generation: a prefill followed by many repeated decode steps, per request.

Decode steps are the replays of one CUDA graph (``generate(cg=True)``, vLLM, TensorRT-LLM decode graphs),
from the graph trace (one record per replay) or, under node-level tracing, the kernels of each graph launch.
Consecutive replays belong to one request; other GPU work between two of them worth at least
:data:`MIN_PREFILL_STEPS` steps' GPU time (the prefill over the next prompt) starts the next, and the first
request's prefill is the dense burst of GPU work just before its first step. Without a prefill the replays are
repeated inferences, not decode. So are replays launched one each inside the instances of a repeated NVTX range
(:func:`ranged_loop`): an application's own iteration loop around a graph replay.

Per capture: ``requests``, ``prefill_ms`` (statistics over requests), ``decode_steps``, ``ms_per_token`` (the
period from one step's start to the next within a request: what a token costs, sampling in between included),
``step_gpu_ms``, ``tokens_per_s`` (decode steps over the requests' decode time) and ``drift``: the trend of the
step time over the capture, in step order across requests: the baseline (median of the first
:data:`DRIFT_WINDOW_STEPS` steps), the rolling median's peak and last value, the step where it starts (the
first slow step of the first window whose median exceeds the baseline by :data:`DRIFT_MIN_SHARE`), the
least-squares slope, and whether the slow steps are
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
MIN_PREFILL_STEPS = 1.0
"""Other GPU work launched by the decoding thread (kernels outside the graph, copies) between two consecutive
steps taking at least this many median steps' GPU time is a prefill: the next request starts. A prefill runs
the whole prompt through the model (a 512-token prompt on an H200: 1.6 steps' worth); sampling between steps
is a small fraction of one (1-3% in the captures tested)."""
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
RANGED_LOOP_SHARE = 0.5
"""Replays launched one each inside the instances of a repeated NVTX range (a benchmark's or a server's
iteration around a CUDA-graph replay: ``trtprof sweep``'s graph variants, a torch benchmark loop) are that
loop's inferences, not decode steps, when at least this share of them are so ranged and the range's name does
not read like generation (:data:`GENERATION_RANGE_WORDS`)."""
GENERATION_RANGE_WORDS = ("decode", "generat", "token", "sampl", "llm")
"""Words (lower case, as substrings) in an NVTX range name that mark it as a generation step."""


@dataclass
class Steps:
    """Decode-step candidates: one graph's replays in start order (ns)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    graph: int
    tids: tuple[int, ...] = ()  # the threads that launch the replays (global tids; empty: unknown)
    launch_ns: np.ndarray | None = None  # each replay's launch call (host time); None: unknown
    launch_tid: np.ndarray | None = None  # the thread of each launch call (global tid, -1 unknown)


def graph_steps(trace: Any) -> Steps | None:
    """The replays of the most replayed CUDA graph (graph trace records, else kernels grouped by launch)."""
    g = frame_of(trace, "graphs")
    if len(g):
        key = i64(g, "graph_exec_id", -1)
        if (key < 0).all():
            key = i64(g, "graph_id", -1)
        s, e = i64(g, "start_ns", 0), i64(g, "end_ns", 0)
        tid, launch = i64(g, "api_tid", -1), i64(g, "api_start_ns", -1)
    else:
        k = frame_of(trace, "kernels")
        gid = i64(k, "graph_id", -1) if len(k) else np.zeros(0, np.int64)
        m = gid >= 0
        if not m.any():
            return None
        df = pd.DataFrame({"g": gid[m], "c": i64(k, "correlation_id", -1)[m], "s": i64(k, "start_ns", 0)[m],
                           "e": i64(k, "end_ns", 0)[m], "t": i64(k, "api_tid", -1)[m],
                           "a": i64(k, "api_start_ns", -1)[m]}).groupby(["g", "c"]).agg(
            s=("s", "min"), e=("e", "max"), t=("t", "first"), a=("a", "first"))
        key, s, e = df.index.get_level_values("g").to_numpy(), df["s"].to_numpy(), df["e"].to_numpy()
        tid, launch = df["t"].to_numpy(), df["a"].to_numpy()
    if not len(key):
        return None
    ids, n = np.unique(key, return_counts=True)
    top = ids[np.argmax(n)]
    m = key == top
    order = np.argsort(s[m], kind="stable")
    tids = tuple(int(t) for t in np.unique(tid[m]) if t >= 0)
    known = bool((launch[m] >= 0).all())
    return Steps(s[m][order], np.maximum(e[m][order], s[m][order]), int(top), tids,
                 launch[m][order] if known else None, tid[m][order])


def ranged_loop(trace: Any, steps: Steps, min_steps: int = MIN_DECODE_STEPS,
                share: float = RANGED_LOOP_SHARE) -> str | None:
    """The name of a repeated NVTX range (not named like generation) whose instances each hold exactly one of
    the replays' launch calls, for at least ``share`` of the replays; None when there is none (or the launch
    times are unknown)."""
    nv = frame_of(trace, "nvtx")
    if steps.launch_ns is None or not len(nv) or "name" not in nv:
        return None
    ok = i64(nv, "end_ns", -1) > i64(nv, "start_ns", 0)
    starts, ends = i64(nv, "start_ns", 0)[ok], i64(nv, "end_ns", -1)[ok]
    tids = (i64(nv, "global_tid", -1) if "global_tid" in nv else np.full(len(nv), -1, np.int64))[ok]
    names = nv["name"].astype(str).to_numpy()[ok]
    uniq, counts = np.unique(names, return_counts=True)
    for name in uniq[counts >= min_steps]:
        if any(w in name.lower() for w in GENERATION_RANGE_WORDS):
            continue
        m = names == name
        if _alone_share(starts[m], ends[m], tids[m], steps) >= share:
            return str(name)
    return None


def _alone_share(rs: np.ndarray, rend: np.ndarray, rt: np.ndarray, steps: Steps) -> float:
    """Share of the replays whose launch lies in an instance of the range (on the launching thread, when both
    are known) that holds no other replay launch."""
    launch = steps.launch_ns if steps.launch_ns is not None else np.zeros(0, np.int64)
    ltid = steps.launch_tid if steps.launch_tid is not None else np.full(len(launch), -1, np.int64)
    alone = 0
    for t in np.unique(rt):
        m = rt == t
        order = np.argsort(rs[m], kind="stable")
        s, e = rs[m][order], rend[m][order]
        x = launch[(ltid == t) | (ltid < 0) | (t < 0)]
        i = np.searchsorted(s, x, "right") - 1
        inside = (i >= 0) & (x < e[np.clip(i, 0, None)])
        held = np.bincount(i[inside], minlength=len(s))
        alone += int((held[i[inside]] == 1).sum())
    return alone / max(1, len(launch))


def _kernel_busy(trace: Any, tids: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Union of the GPU work outside graphs (kernels without a graph id, copies, memsets), of the threads
    ``tids`` only when given."""
    parts_s, parts_e = [], []
    for name in ("kernels", "memcpy", "memset"):
        f = frame_of(trace, name)
        if not len(f):
            continue
        m = i64(f, "graph_id", -1) < 0 if name == "kernels" else np.ones(len(f), bool)
        if tids:
            m &= np.isin(i64(f, "api_tid", -1), tids)
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


def find(trace: Any, capture_start_ns: int = 0, unit_source: str | None = None, *, min_steps: int = MIN_DECODE_STEPS,
         min_prefill_steps: float = MIN_PREFILL_STEPS, prefill_max_gap_ms: float = PREFILL_MAX_GAP_MS,
         window: int = DRIFT_WINDOW_STEPS, drift_min_share: float = DRIFT_MIN_SHARE) -> dict[str, Any] | None:
    """The ``generation`` entry (see the module docs), or None when the capture holds no decode loop. Replays
    of a TensorRT engine's graph (``unit_source`` "tensorrt": trtexec --useCudaGraph, a captured enqueueV3) are
    inferences, not decode steps."""
    if unit_source == "tensorrt":
        return None
    steps = graph_steps(trace)
    if steps is None or len(steps.start_ns) < min_steps or ranged_loop(trace, steps, min_steps) is not None:
        return None
    s, e = steps.start_ns, steps.end_ns
    dur = (e - s).astype(np.float64)
    step_ns = float(np.median(dur))
    if step_ns <= 0:
        return None
    us, ue = _kernel_busy(trace, steps.tids)  # the decoding thread's own work: prefills and sampling
    other_ns = intervals.covered_before(us, ue, s[1:]) - intervals.covered_before(us, ue, e[:-1])
    prefill_ns = min_prefill_steps * step_ns
    # a request ends where the GPU does a prefill's worth of other work before the next step
    bounds = [int(i) + 1 for i in np.flatnonzero(other_ns >= prefill_ns)] + [len(s)]
    first_busy, first_start = _prefill(us, ue, int(s[0]), int(np.iinfo(np.int64).min), prefill_max_gap_ms * 1e6)
    requests: list[tuple[int, int, int, int]] = []  # (first step index, end index, prefill busy ns, its start)
    first = 0
    for b in bounds:
        if first == 0:
            busy, pstart = first_busy, first_start
        else:
            busy, pstart = int(other_ns[first - 1]), int(e[first - 1])
        requests.append((first, b, busy, pstart))
        first = b
    # a request is decode only after its prefill and with enough steps
    decode = [r for r in requests if r[1] - r[0] >= min_steps and r[2] >= prefill_ns]
    if not decode:
        return None
    out = _entry(steps, decode, dur, window, drift_min_share, capture_start_ns)
    _concurrent_work(out["drift"], s, e, decode, *_kernel_busy(trace))
    out["clocks"] = clocks_note(trace)
    return out


def _concurrent_work(d: dict[str, Any], s: np.ndarray, e: np.ndarray, reqs: list[tuple[int, int, int, int]],
                     us: np.ndarray, ue: np.ndarray) -> None:
    """Other GPU work (outside the graph) running during the decode steps, before the drift and after it
    starts (ms per step): contention the capture shows, where clocks would leave no such trace."""
    idx = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs])
    during = (intervals.covered_before(us, ue, e[idx]) - intervals.covered_before(us, ue, s[idx])) / 1e6
    k = d["start_step"] if d["start_step"] is not None else len(idx)
    d["other_gpu_ms_per_step_before"] = float(during[:k].mean()) if k else 0.0
    d["other_gpu_ms_per_step_after"] = float(during[k:].mean()) if k < len(idx) else None
    after = d["other_gpu_ms_per_step_after"]
    d["cause_seen"] = ("other GPU work during the slow steps" if after is not None and
                       after >= CONTENTION_MIN_SHARE * d["peak_ms"] else None)


CONTENTION_MIN_SHARE = 0.1
"""Other GPU work overlapping the steps after the drift starts for at least this share of the slow step time
is contention the capture shows (other streams or threads of the process)."""


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
    start = None
    if len(over):  # the first slow step of the first window whose median is slow
        slow = np.flatnonzero(ms[int(over[0]):] > base * (1 + min_share))
        start = int(over[0]) + int(slow[0]) if len(slow) else int(over[0])
    slope = float(np.polyfit(np.arange(n), ms, 1)[0]) if n > 2 else 0.0
    out = {"baseline_ms": base, "peak_ms": float(rolling.max()), "last_ms": float(rolling[-1]),
           "peak_over_baseline": float(rolling.max()) / base if base > 0 else None,
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


__all__ = ["DRIFT_MIN_SHARE", "DRIFT_WINDOW_STEPS", "MIN_DECODE_STEPS", "MIN_PREFILL_STEPS", "Steps", "drift",
           "find", "graph_steps"]
