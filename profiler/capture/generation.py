"""LLM generation: a prefill followed by many repeated decode steps, per request.

Decode steps are the replays of one CUDA graph (``generate(cg=True)``, vLLM, TensorRT-LLM decode graphs),
from the graph trace (one record per replay) or, under node-level tracing, the kernels of each graph launch.
Consecutive replays belong to one request; other GPU work between two of them worth at least
:data:`MIN_PREFILL_STEPS` steps' GPU time (the prefill over the next prompt) starts the next, and the first
request's prefill is the dense burst of GPU work just before its first step. Without a prefill the replays are
repeated inferences, not decode. So are replays launched one each inside the instances of a repeated NVTX range
(:func:`ranged_loop`): an application's own iteration loop around a graph replay.

Without CUDA graphs (eager decode) the steps are the instances of a repeated NVTX range named like a decode
step (:data:`GENERATION_RANGE_WORDS`: ``decode_step``, ``generate_token``) or, in a capture with no NVTX range at
all, a repeated kernel group (:func:`kernel_group_steps`): the same kernel-name sequence launched once per
token by one thread, each request's run of them after a prefill burst that runs the step's kernels over the
prompt (:data:`PREFILL_MIN_NAME_SHARE`). A step's GPU time is then the span of its kernels, its busy time
their sum. A repeated inference loop (the same forward over a fixed batch) has no such burst before its runs.

The decode steps are the capture's inference (:func:`decode_ranges`): each step becomes a range
``generation:decode step`` (from its launch to the next step's; the request's last one to its GPU end) and each
request's prefill a range ``generation:prefill`` (from its first launch to its first step's), so the rules and
the per-inference statistics judge decode steps, and the prefill is a phase of its own, never an outlier of
them. A capture whose step ranges are NVTX ranges of the application keeps them as they are.

Per capture: ``requests``, ``prefill_ms`` (statistics over requests), ``decode_steps``, ``ms_per_token`` (the
period from one step's start to the next within a request: what a token costs, sampling in between included),
``step_gpu_ms``, ``tokens_per_s`` (decode steps over the requests' decode time; ``ms_per_token`` and it leave out
leading warm-up requests, ``per_request`` marks them) and ``drift``: the trend of the
step time over the capture, in step order across requests: the baseline (median of the first
:data:`DRIFT_WINDOW_STEPS` steps), the rolling median's peak and last value, the step where it starts (the
first slow step of the first window whose median exceeds the baseline by :data:`DRIFT_MIN_SHARE`), the
least-squares slope, and whether the slow steps are
``sustained`` or ``intermittent`` (fast steps between slow ones: contention from other work rather than
clocks, which change smoothly). Clocks: the export's GPU metrics, when nsys recorded them (:mod:`profiler.capture.clocks`: the clock over the baseline steps against the slow ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import clocks, intervals
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
PREFILL_GAP_PERIODS = 2.0
"""For eager steps, the first request's prefill burst also ends at a GPU pause of this many median step periods
(a warm-up's steps 5 ms before the prefill, 1 ms a token, are not part of it); graph replays keep
:data:`PREFILL_MAX_GAP_MS` (a first prefill's lazy module loading pauses it)."""
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
WARMUP_REQUEST_RATIO = 1.5
"""A leading request whose median time per token exceeds this multiple of the later requests' median is warm-up
(lazy module loading, a library building its plans for each new sequence length: the first request after
start-up). Its steps are the unit's warm-up and left out of the drift; the last request never is."""
PREFILL_MIN_NAME_SHARE = 0.4
"""A burst of GPU work before a run of repeated kernel groups is a prefill only when at least this share of the
step's distinct kernel names run in it too (the model over the prompt: layer norms, the attention, the head;
4000-token and 512-token prompts run 5 of the 11 names of a 2-layer transformer's step): weight
initialisation, uploads or another model before a repeated inference loop do not."""
KERNEL_GROUP_ANCHORS = 8
"""Kernel names tried as the first kernel of a step (the ones with the fewest launches of those launched at
least :data:`MIN_DECODE_STEPS` times: a step's once-per-token kernels, the embedding or the head)."""
KERNEL_GROUP_MIN_KERNELS = 8
"""Kernels a repeated group needs before it can be a decode step: a step runs a whole model (embedding, every
layer's norms, projections and attention, the head, the sampling: 32 kernels for two layers); a solver's or a
filter's few repeated kernels (a CFD code's one-kernel loop) are no token."""
KERNEL_GROUP_MAX_KERNELS = 2_000_000
"""Repeated kernel groups are looked for only on a thread that launches at most this many kernels."""
GENERATION_DOMAIN = "generation"
"""The domain of the ranges made for decode steps and prefills (:func:`decode_ranges`)."""
DECODE_STEP = "decode step"
PREFILL = "prefill"


@dataclass
class Steps:
    """Decode-step candidates: one graph's replays in start order (ns)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    graph: int
    tids: tuple[int, ...] = ()  # the threads that launch the replays (global tids; empty: unknown)
    launch_ns: np.ndarray | None = None  # each replay's launch call (host time); None: unknown
    launch_tid: np.ndarray | None = None  # the thread of each launch call (global tid, -1 unknown)
    busy_ns: np.ndarray | None = None  # each step's GPU busy time (None: its span, a graph replay)
    kind: str = "graph"  # "graph" (replays), "nvtx" (ranges named like a step) or "kernels" (a repeated group)
    range_name: str | None = None  # the NVTX range of the steps ("nvtx")
    group_kernels: int = 0  # kernels per step ("kernels")

    def busy(self) -> np.ndarray:
        return (self.end_ns - self.start_ns) if self.busy_ns is None else self.busy_ns


@dataclass
class Detected:
    """The decode loop: its steps and its requests (first step, end index, prefill busy ns, prefill GPU
    start ns, prefill's first launch ns)."""

    steps: Steps
    requests: list[tuple[int, int, int, int, int]]
    other_ns: np.ndarray  # the decoding thread's other GPU work between consecutive steps
    warmup_requests: int = 0  # leading requests that are warm-up (:data:`WARMUP_REQUEST_RATIO`)

    def first_steady_launch(self) -> int | None:
        """The launch (host ns) of the first step of the first request after the warm-up ones; None without
        warm-up requests."""
        if not self.warmup_requests:
            return None
        launch = self.steps.launch_ns if self.steps.launch_ns is not None else self.steps.start_ns
        return int(launch[self.requests[self.warmup_requests][0]])


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


def detect(trace: Any, unit_source: str | None = None, *, min_steps: int = MIN_DECODE_STEPS,
           min_prefill_steps: float = MIN_PREFILL_STEPS, prefill_max_gap_ms: float = PREFILL_MAX_GAP_MS
           ) -> Detected | None:
    """The decode loop (see the module docs), or None: CUDA-graph replays first, else NVTX ranges named like a
    decode step, else (no NVTX range at all) a repeated kernel group. Replays of a TensorRT engine's graph
    (``unit_source`` "tensorrt": trtexec --useCudaGraph, a captured enqueueV3) are inferences, not decode."""
    if unit_source == "tensorrt":
        return None
    steps = graph_steps(trace)
    if steps is not None and (len(steps.start_ns) < min_steps or ranged_loop(trace, steps, min_steps) is not None):
        return None
    found = _requests(trace, steps, min_steps, min_prefill_steps, prefill_max_gap_ms) if steps is not None else None
    if found is None and steps is None:
        steps = ranged_steps(trace, min_steps)
        if steps is None and not len(frame_of(trace, "nvtx")):
            steps = kernel_group_steps(trace, min_steps)
        found = _requests(trace, steps, min_steps, min_prefill_steps, prefill_max_gap_ms) if steps else None
    return found


def find(trace: Any, capture_start_ns: int = 0, unit_source: str | None = None, *, min_steps: int = MIN_DECODE_STEPS,
         min_prefill_steps: float = MIN_PREFILL_STEPS, prefill_max_gap_ms: float = PREFILL_MAX_GAP_MS,
         window: int = DRIFT_WINDOW_STEPS, drift_min_share: float = DRIFT_MIN_SHARE,
         detected: Detected | None = None) -> dict[str, Any] | None:
    """The ``generation`` entry (see the module docs), or None when the capture holds no decode loop
    (``detected``: what :func:`detect` found, when the caller has it)."""
    det = detected if detected is not None else detect(
        trace, unit_source, min_steps=min_steps, min_prefill_steps=min_prefill_steps,
        prefill_max_gap_ms=prefill_max_gap_ms)
    if det is None:
        return None
    steps, decode = det.steps, [r[:4] for r in det.requests]
    dur = (steps.end_ns - steps.start_ns).astype(np.float64)
    out = _entry(steps, decode, dur, window, drift_min_share, capture_start_ns, det.warmup_requests)
    out["steps_from"] = {"graph": "graph replays", "nvtx": f"NVTX range {steps.range_name}",
                         "kernels": f"a repeated group of {steps.group_kernels} kernels"}[steps.kind]
    own = steps.busy() if steps.kind != "graph" else None  # eager steps' own kernels are no contention
    _concurrent_work(out["drift"], steps.start_ns, steps.end_ns, decode[det.warmup_requests:],
                     *_kernel_busy(trace), own)
    if steps.kind != "graph":
        _host_cause(out["drift"], trace, steps, decode[det.warmup_requests:], drift_min_share)
    out["clocks"] = clocks.evidence(trace, steps, decode[det.warmup_requests:], out["drift"])
    return out


def _requests(trace: Any, steps: Steps, min_steps: int, min_prefill_steps: float,
              prefill_max_gap_ms: float) -> Detected | None:
    """The requests of ``steps``: split where the decoding thread does a prefill's worth of other GPU work
    between two steps; decode only after a prefill and with ``min_steps`` steps."""
    s, e = steps.start_ns, steps.end_ns
    step_ns = float(np.median(steps.busy()))
    if step_ns <= 0:
        return None
    us, ue = _kernel_busy(trace, steps.tids)  # the decoding thread's own work: prefills and sampling
    if steps.kind != "graph":  # eager steps' kernels are outside graphs too: the work between the steps' spans
        us, ue = _outside(us, ue, s, e)
    other_ns = intervals.covered_before(us, ue, s[1:]) - intervals.covered_before(us, ue, e[:-1])
    prefill_ns = min_prefill_steps * step_ns
    # a request ends where the GPU does a prefill's worth of other work before the next step
    bounds = [int(i) + 1 for i in np.flatnonzero(other_ns >= prefill_ns)] + [len(s)]
    max_gap = prefill_max_gap_ms * 1e6
    if steps.kind != "graph" and len(s) > 1:  # eager: a pause of a few tokens before the prefill ends the burst
        max_gap = min(max_gap, PREFILL_GAP_PERIODS * float(np.median(np.diff(s))))
    first_busy, first_start = _prefill(us, ue, int(s[0]), int(np.iinfo(np.int64).min), max_gap)
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
    if steps.kind == "kernels":  # a burst before a repeated kernel group is a prefill when it runs the step's kernels
        decode = [r for r in decode if _runs_step_kernels(trace, steps, r)]
    if not decode:
        return None
    return Detected(steps, [(*r, _first_launch(trace, steps, r)) for r in decode], other_ns,
                    warmup_requests(steps, decode))


def warmup_requests(steps: Steps, reqs: list[tuple[int, int, int, int]], ratio: float = WARMUP_REQUEST_RATIO) -> int:
    """How many leading requests are warm-up: each costs more than ``ratio`` x the median time per token of the
    requests after it (step start to step start), up to all but the last."""
    per = [float(np.median(np.diff(steps.start_ns[a:b]))) for a, b, *_ in reqs]
    k = 0
    while k < len(per) - 1 and per[k] > ratio * float(np.median(per[k + 1:])):
        k += 1
    return k


def _outside(us: np.ndarray, ue: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union ``[us, ue)`` less the steps' spans ``[s, e)``."""
    if not len(us):
        return us, ue
    gs, ge = intervals.union(s, e)
    pts = np.unique(np.concatenate([us, ue, gs, ge]))
    lo, hi = pts[:-1], pts[1:]
    mid = lo + (hi - lo) // 2
    inside_busy = (np.searchsorted(us, mid, "right") - 1 >= 0) & (mid < ue[np.maximum(np.searchsorted(us, mid, "right") - 1, 0)])
    k = np.searchsorted(gs, mid, "right") - 1
    in_step = (k >= 0) & (mid < ge[np.maximum(k, 0)])
    keep = inside_busy & ~in_step & (hi > lo)
    return intervals.union(lo[keep], hi[keep])


def _first_launch(trace: Any, steps: Steps, r: tuple[int, int, int, int]) -> int:
    """The host time of the first launch of a request's prefill: the earliest launch call of the decoding
    thread's GPU work that starts between the prefill's start and the request's first step (the GPU start when
    the launches are unknown)."""
    lo, hi = r[3], int(steps.start_ns[r[0]])
    first = lo
    for name in ("kernels", "memcpy", "memset"):
        f = frame_of(trace, name)
        if not len(f):
            continue
        st, launch = i64(f, "start_ns", 0), i64(f, "api_start_ns", -1)
        m = (st >= lo) & (st < hi) & (launch >= 0)
        if steps.tids:
            m &= np.isin(i64(f, "api_tid", -1), steps.tids)
        if m.any():
            first = min(first, int(launch[m].min()))
    return first


def _runs_step_kernels(trace: Any, steps: Steps, r: tuple[int, int, int, int],
                       share: float = PREFILL_MIN_NAME_SHARE) -> bool:
    """Whether at least ``share`` of the step's distinct kernel names run in the request's prefill burst."""
    k = frame_of(trace, "kernels")
    names = k["short_name" if "short_name" in k else "name"].astype(str).to_numpy()
    st, tid = i64(k, "start_ns", 0), i64(k, "api_tid", -1)
    mine = np.isin(tid, steps.tids) if steps.tids else np.ones(len(k), bool)
    a = int(steps.start_ns[r[0]])
    step = set(names[mine & (st >= a) & (st < int(steps.end_ns[r[0]]) + 1)])
    burst = set(names[mine & (st >= r[3]) & (st < a)])
    return bool(step) and len(step & burst) >= share * len(step)


def ranged_steps(trace: Any, min_steps: int = MIN_DECODE_STEPS) -> Steps | None:
    """Eager decode steps from NVTX ranges: the most repeated range named like a generation step
    (:data:`GENERATION_RANGE_WORDS`) with at least ``min_steps`` instances launching GPU work; per instance
    the span of the kernels, copies and memsets its thread launched inside it."""
    nv = frame_of(trace, "nvtx")
    if not len(nv) or "name" not in nv:
        return None
    ok = i64(nv, "end_ns", -1) > i64(nv, "start_ns", 0)
    names = nv["name"].astype(str).to_numpy()[ok]
    uniq, counts = np.unique(names, return_counts=True)
    gen = [(int(c), str(n)) for n, c in zip(uniq, counts)
           if c >= min_steps and any(w in n.lower() for w in GENERATION_RANGE_WORDS)]
    if not gen:
        return None
    name = max(gen)[1]
    m = names == name
    rs, re_ = i64(nv, "start_ns", 0)[ok][m], i64(nv, "end_ns", -1)[ok][m]
    rt = (i64(nv, "global_tid", -1) if "global_tid" in nv else np.full(len(nv), -1, np.int64))[ok][m]
    order = np.argsort(rs, kind="stable")
    rs, re_, rt = rs[order], re_[order], rt[order]
    work = _launched(trace)
    if work is None:
        return None
    ws, we, wl, wt = work
    lo = np.full(len(rs), np.iinfo(np.int64).max, np.int64)
    hi = np.full(len(rs), np.iinfo(np.int64).min, np.int64)
    busy = np.zeros(len(rs), np.int64)
    for t in np.unique(rt):
        q = np.flatnonzero(rt == t)
        w = np.flatnonzero((wt == t) | (t < 0))
        i = np.searchsorted(rs[q], wl[w], "right") - 1
        inside = (i >= 0) & (wl[w] <= re_[q][np.maximum(i, 0)])
        who, w = q[i[inside]], w[inside]
        np.minimum.at(lo, who, ws[w])
        np.maximum.at(hi, who, we[w])
        np.add.at(busy, who, we[w] - ws[w])
    has = hi > np.iinfo(np.int64).min
    if int(has.sum()) < min_steps:
        return None
    tids = tuple(int(t) for t in np.unique(rt[has]) if t >= 0)
    return Steps(lo[has], np.maximum(hi[has], lo[has]), -1, tids, rs[has], rt[has], busy[has], "nvtx", name)


def _launched(trace: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end, launch call start, launching thread) of the kernels outside graphs, copies and memsets
    whose launch call is known."""
    parts = []
    for name in ("kernels", "memcpy", "memset"):
        f = frame_of(trace, name)
        if not len(f):
            continue
        m = i64(f, "api_start_ns", -1) >= 0
        if name == "kernels":
            m &= i64(f, "graph_id", -1) < 0
        parts.append([i64(f, c, -1)[m] for c in ("start_ns", "end_ns", "api_start_ns", "api_tid")])
    if not parts:
        return None
    return tuple(np.concatenate([p[j] for p in parts]) for j in range(4))  # type: ignore[return-value]


def kernel_group_steps(trace: Any, min_steps: int = MIN_DECODE_STEPS, anchors: int = KERNEL_GROUP_ANCHORS,
                       max_kernels: int = KERNEL_GROUP_MAX_KERNELS) -> Steps | None:
    """Eager decode steps from the kernels alone: on the thread that launches the most kernels (outside
    graphs), in launch order, the kernel sequence is cut before each launch of an anchor name
    (:data:`KERNEL_GROUP_ANCHORS` candidates); the groups of the most common name sequence are the steps, for the
    anchor whose steps hold the most kernels (a layer's group, repeated per layer, holds fewer than a token's).
    At least ``min_steps`` such groups; None otherwise."""
    k = frame_of(trace, "kernels")
    if not len(k) or "name" not in k:
        return None
    m = (i64(k, "graph_id", -1) < 0) & (i64(k, "api_start_ns", -1) >= 0)
    tid = i64(k, "api_tid", -1)
    if not m.any():
        return None
    ts, tn = np.unique(tid[m], return_counts=True)
    top = int(ts[np.argmax(tn)])
    rows = np.flatnonzero(m & (tid == top))
    if len(rows) > max_kernels or len(rows) < 2 * min_steps:
        return None
    rows = rows[np.lexsort((i64(k, "correlation_id", 0)[rows], i64(k, "api_start_ns", 0)[rows]))]
    codes = pd.factorize(k["short_name" if "short_name" in k else "name"].astype(str).to_numpy()[rows])[0]
    count = np.bincount(codes)
    cand = [int(c) for c in np.argsort(count, kind="stable") if count[c] >= min_steps][:anchors]
    best: tuple[int, np.ndarray, np.ndarray] | None = None  # (kernels covered, group starts, group ends)
    for a in cand:
        got = _groups(codes, a, min_steps)
        if got is not None and got[2][0] - got[1][0] >= KERNEL_GROUP_MIN_KERNELS and (best is None or got[0] > best[0]):
            best = got
    if best is None:
        return None
    _, gs, ge = best
    st, en, launch = i64(k, "start_ns", 0)[rows], i64(k, "end_ns", 0)[rows], i64(k, "api_start_ns", 0)[rows]
    gs, ge = _rotate(codes, launch, gs, ge, _reads(trace, top))
    n = ge - gs
    heads = np.cumsum(n) - n
    flat = np.arange(int(n.sum())) - np.repeat(heads, n) + np.repeat(gs, n)  # the groups' kernels, group by group
    lo = np.minimum.reduceat(st[flat], heads)
    hi = np.maximum.reduceat(en[flat], heads)
    busy = np.add.reduceat((en - st)[flat], heads)
    return Steps(lo, np.maximum(hi, lo), -1, (top,), launch[gs], np.full(len(gs), top, np.int64), busy, "kernels",
                 None, int(n[0]))


def _rotate(codes: np.ndarray, launch: np.ndarray, gs: np.ndarray, ge: np.ndarray,
            reads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The groups (one name sequence, cut before an anchor kernel) shifted to begin at the kernel launched first
    after the token's read-back (a device-to-host copy call of the thread, ``reads``: launch times, sorted) in
    most groups: a token begins once the host has the last one, whichever kernel the anchor was. Groups whose
    shifted kernels are not the same sequence (the last of a run, followed by other work) keep their place;
    without read-backs between a group's kernels, every group does."""
    n = int(ge[0] - gs[0])
    if not len(reads) or n < 2:
        return gs, ge
    idx = gs[:, None] + np.arange(n)[None, :]
    before = np.searchsorted(reads, launch[idx], "left")  # read-backs launched before each kernel
    after_read = np.diff(before, axis=1) > 0  # a read-back between kernel j-1 and kernel j
    share = after_read.mean(axis=0)
    if not len(share) or share.max() < 0.5:
        return gs, ge
    j = 1 + int(np.argmax(share))
    shifted = gs + j
    ok = shifted + n <= len(codes)
    seq = codes[gs[0]:gs[0] + n]
    want = np.concatenate([seq[j:], seq[:j]])
    good = np.zeros(len(gs), bool)
    good[ok] = (codes[shifted[ok][:, None] + np.arange(n)[None, :]] == want[None, :]).all(axis=1)
    return np.where(good, shifted, gs), np.where(good, shifted + n, ge)


def _reads(trace: Any, tid: int) -> np.ndarray:
    """Launch times (sorted) of the device-to-host copies of thread ``tid``."""
    m = frame_of(trace, "memcpy")
    if not len(m):
        return np.zeros(0, np.int64)
    kind = m["copy_kind"].astype(str).to_numpy() if "copy_kind" in m else np.full(len(m), "", object)
    sel = (i64(m, "api_tid", -1) == tid) & (i64(m, "api_start_ns", -1) >= 0) & np.char.find(
        kind.astype(str), "DtoH") >= 0
    return np.sort(i64(m, "api_start_ns", -1)[sel])


def _groups(codes: np.ndarray, anchor: int, min_steps: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(kernels covered, starts, ends) of the groups, cut before each ``anchor``, whose name sequence is the most
    common one (keyed by length and two weighted sums of the codes); None with fewer than ``min_steps``."""
    starts = np.flatnonzero(codes == anchor)
    ends = np.append(starts[1:], len(codes))
    if not len(starts):
        return None
    pos = np.arange(starts[0], len(codes)) - np.repeat(starts, ends - starts)
    tail = codes[starts[0]:].astype(np.int64)
    rel = starts - starts[0]
    k1 = np.add.reduceat(tail, rel)
    k2 = np.add.reduceat(tail * (pos + 1) % 1_000_003 * (tail + 7), rel)
    keys = pd.DataFrame({"n": ends - starts, "a": k1, "b": k2})
    key_id = keys.groupby(["n", "a", "b"], sort=False).ngroup().to_numpy()
    freq = np.bincount(key_id)
    modal = int(np.argmax(freq * keys["n"].groupby(key_id).first().reindex(range(len(freq))).to_numpy()))
    pick = key_id == modal
    if int(pick.sum()) < min_steps:
        return None
    return int(pick.sum() * (ends - starts)[pick][0]), starts[pick], ends[pick]


STEP_MADE_FROM = {"graph": "CUDA-graph replays", "kernels": "a repeated kernel group"}


def decode_ranges(ranges: Any, trace: Any, domain_names: Any) -> tuple[Any, Detected | None]:
    """``ranges`` (:class:`~profiler.capture.series.Ranges`) with a range per decode step and per prefill of
    the generation :func:`detect` finds (see the module docs) and what it found; ``ranges`` itself (and the
    detection) when the steps are NVTX ranges of the application or their launch calls are unknown; (ranges,
    None) without a generation. ``domain_names``: ``ranges.domains`` as strings, to leave TensorRT captures
    alone (their graph replays are inferences)."""
    from dataclasses import replace

    from profiler.capture.unit import GRAPH_REPLAY, TENSORRT_DOMAIN, TENSORRT_UNIT

    rf = ranges.frame
    if len(rf):
        trt = np.asarray(domain_names, dtype=object)[rf["domain"].to_numpy()] == TENSORRT_DOMAIN
        names = np.asarray(ranges.names, dtype=object)[rf["name"].to_numpy()[trt]]
        if any(n == GRAPH_REPLAY or TENSORRT_UNIT.match(str(n)) for n in set(names)):
            return ranges, None
    det = detect(trace)
    if det is None or det.steps.kind == "nvtx" or det.steps.launch_ns is None:
        return ranges, det
    rows = step_and_prefill_ranges(det)
    names = np.append(np.asarray(ranges.names, dtype=object), [DECODE_STEP, PREFILL])
    domains = np.append(np.asarray(ranges.domains, dtype=object), GENERATION_DOMAIN)
    kind = np.array([r[0] for r in rows], np.int64)
    added = pd.DataFrame({"domain": np.full(len(rows), len(domains) - 1, np.int64),
                          "name": len(names) - 2 + kind, "raw_name": np.full(len(rows), -1, np.int64),
                          "start_ns": np.array([r[1] for r in rows], np.int64),
                          "end_ns": np.array([r[2] for r in rows], np.int64),
                          "tid": np.array([r[3] for r in rows], np.int64)})
    made = dict(getattr(ranges, "made_from", {}) or {})
    what = STEP_MADE_FROM[det.steps.kind]
    made[f"{GENERATION_DOMAIN}:{DECODE_STEP}"] = (f"decode steps of an LLM generation ({what}), one range each from "
                                                  "its launch to the next step's")
    made[f"{GENERATION_DOMAIN}:{PREFILL}"] = ("the prefill of each request of an LLM generation, from its first "
                                             "launch to its first decode step")
    return replace(ranges, frame=pd.concat([rf, added], ignore_index=True), names=names, domains=domains,
                   made_from=made), det


def step_and_prefill_ranges(det: Detected) -> list[tuple[int, int, int, int]]:
    """(0 step / 1 prefill, start ns, end ns, thread) of the host ranges :func:`decode_ranges` makes: a prefill
    from its first launch to the launch of its request's first step launched once the GPU decodes
    (:func:`_decoding_from`), a step from its launch to the next step's (the request's last one to its GPU end,
    at most one median launch period on, and before the next prefill's first launch)."""
    st = det.steps
    launch = st.launch_ns if st.launch_ns is not None else st.start_ns
    tids = st.launch_tid if st.launch_tid is not None else np.full(len(launch), -1, np.int64)
    out: list[tuple[int, int, int, int]] = []
    wins = prefill_windows(det)
    for j, (a, b, _, _, _) in enumerate(det.requests):
        nxt = wins[j + 1][0] if j + 1 < len(wins) else np.iinfo(np.int64).max
        k = _decoding_from(st, a, b)
        pstart = max(wins[j][0], out[-1][2] + 1 if out else wins[j][0])
        out.append((1, min(pstart, int(launch[k]) - 1), int(launch[k]) - 1, int(tids[a])))
        period = int(np.median(np.diff(launch[k:b]))) if b - k > 1 else int(st.end_ns[b - 1] - launch[b - 1])
        for i in range(k, b):  # a range holds what is launched at its end: it ends just before the next launch
            # the last step: at its GPU end, or one period on when the host ran ahead of the GPU
            end = int(launch[i + 1]) - 1 if i + 1 < b else min(int(st.end_ns[i]), int(launch[i]) + period, int(nxt) - 1)
            out.append((0, int(launch[i]), max(end, int(launch[i]) + 1), int(tids[i])))
    return out


def _decoding_from(st: Steps, a: int, b: int) -> int:
    """The first step of the request ``[a, b)`` launched once the GPU runs its first step: the host time of the
    steps launched before (queued behind the prefill, their launch or sampling waiting for it: 7 steps of
    mamba's generate, 90-100 ms each, against 13.4 ms) is the prefill's, not theirs. ``a`` when every step was."""
    launch = st.launch_ns if st.launch_ns is not None else st.start_ns
    k = a + int(np.searchsorted(launch[a:b], st.start_ns[a], "left"))
    return k if k < b else a


def prefill_windows(det: Detected) -> list[tuple[int, int]]:
    """(first launch, end) of each request's prefill phase, host time (ns): up to the launch of the first step
    launched once the GPU decodes (:func:`_decoding_from`)."""
    st = det.steps
    launch = st.launch_ns if st.launch_ns is not None else st.start_ns
    out = []
    for a, b, *_, first in det.requests:
        end = int(launch[_decoding_from(st, a, b)])
        out.append((min(int(first), end), end))
    return out


def queued_steps(det: Detected) -> int:
    """Decode steps launched before the GPU ran their request's first step (their host time is the prefill's)."""
    return sum(_decoding_from(det.steps, a, b) - a for a, b, *_ in det.requests)


def prefill_phase(det: Detected, steady_start_ns: int) -> dict[str, Any]:
    """The ``phases.prefill`` entry: the requests' prefills as a phase of their own (host wall from the first
    launch to the first step launched once the GPU decodes, the steps launched before that, the prefills' GPU
    busy time), and how many lie in the steady state."""
    win = prefill_windows(det)
    return {"requests": len(win), "wall_ms": sum(b - a for a, b in win) / 1e6, "steps_inside": queued_steps(det),
            "gpu_busy_ms": sum(r[2] for r in det.requests) / 1e6,
            "in_steady_state": int(sum(a >= steady_start_ns for a, _ in win))}


def _concurrent_work(d: dict[str, Any], s: np.ndarray, e: np.ndarray, reqs: list[tuple[int, int, int, int]],
                     us: np.ndarray, ue: np.ndarray, own: np.ndarray | None = None) -> None:
    """Other GPU work (outside the graph) running during the decode steps, before the drift and after it
    starts (ms per step): contention the capture shows, where clocks would leave no such trace. ``own``: each
    step's own busy time, taken out (eager steps' kernels are outside graphs too)."""
    idx = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs])
    during = (intervals.covered_before(us, ue, e[idx]) - intervals.covered_before(us, ue, s[idx])) / 1e6
    if own is not None:
        during = np.maximum(during - own[idx] / 1e6, 0.0)
    k = d["start_step"] if d["start_step"] is not None else len(idx)
    d["other_gpu_ms_per_step_before"] = float(during[:k].mean()) if k else 0.0
    d["other_gpu_ms_per_step_after"] = float(during[k:].mean()) if k < len(idx) else None
    after = d["other_gpu_ms_per_step_after"]
    d["cause_seen"] = ("other GPU work during the slow steps" if after is not None and
                       after >= CONTENTION_MIN_SHARE * d["peak_ms"] else None)


MODULE_LOAD_CALLS = ("cuLibraryLoad", "cuModuleLoad", "cuKernelSetAttribute", "cuFuncSetAttribute")
"""CUDA calls that load code or set up kernels: made during decode steps, the host is loading modules or a
library is building plans (cuDNN's SDPA builds one per new sequence length), not running the step."""


def _host_cause(d: dict[str, Any], trace: Any, steps: Steps, reqs: list[tuple[int, int, int, int]],
                min_share: float) -> None:
    """For eager steps (their GPU time is the span of their kernels, host gaps included): the steps' GPU busy
    time over the baseline and over the slow steps, and when it did not grow, the host as the cause seen, with
    the module-loading calls made during the slow steps."""
    if d["start_step"] is None:
        return
    idx = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs])
    busy = steps.busy()[idx] / 1e6
    w, k = int(d["window_steps"]), int(d["start_step"])
    base, slow = float(np.median(busy[:w])), float(np.median(busy[k:]))
    d["step_busy_ms_baseline"], d["step_busy_ms_slow"] = base, slow
    launch = steps.launch_ns if steps.launch_ns is not None else steps.start_ns
    lo, hi = int(launch[idx[k]]), int(steps.end_ns[idx[-1]])
    api = frame_of(trace, "api")
    loads = 0
    if len(api) and "name" in api:
        st = i64(api, "start_ns", 0)
        m = (st >= lo) & (st <= hi)
        loads = int(api["name"].astype(str)[m].str.startswith(MODULE_LOAD_CALLS).sum()) if m.any() else 0
    d["module_load_calls_after_start"] = loads
    if d.get("cause_seen") is None and slow <= base * (1 + min_share):
        d["cause_seen"] = (f"the host: the slow steps run the same GPU work ({slow:.3f} ms busy) with longer gaps "
                           "between their kernels" + (f", and {loads} module-loading calls" if loads else ""))
        d["cause"] = "host"


CONTENTION_MIN_SHARE = 0.1
"""Other GPU work overlapping the steps after the drift starts for at least this share of the slow step time
is contention the capture shows (other streams or threads of the process)."""


def _entry(steps: Steps, reqs: list[tuple[int, int, int, int]], dur: np.ndarray, window: int,
           drift_min_share: float, capture_start_ns: int, warmup: int = 0) -> dict[str, Any]:
    s, e = steps.start_ns, steps.end_ns
    judged = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs[warmup:]])
    idx = np.concatenate([np.arange(a, b) for a, b, _, _ in reqs])
    steady = reqs[warmup:]  # a warm-up request's tokens say what the first generate cost, not what a token costs
    periods = np.concatenate([np.diff(s[a:b]) for a, b, _, _ in steady if b - a > 1] or [np.zeros(0)]
                             ).astype(np.float64)
    decode_ns = float(sum(int(e[b - 1] - s[a]) for a, b, _, _ in steady))
    n_steps = int(len(idx))
    return {
        "graph": steps.graph, "requests": len(reqs),
        "prefill_ms": stats.summarize(np.array([p for _, _, p, _ in reqs], dtype=np.float64) / 1e6),
        "per_request": [{"prefill_start_ms": (int(ps) - capture_start_ns) / 1e6, "prefill_ms": p / 1e6, "decode_steps": int(b - a),
                         "decode_ms": int(e[b - 1] - s[a]) / 1e6, "first_step": int(a),
                         **({"warmup": j < warmup} if warmup else {})} for j, (a, b, p, ps) in enumerate(reqs)],
        "decode_steps": n_steps,
        "ms_per_token": stats.summarize(periods / 1e6),
        "step_gpu_ms": stats.summarize(dur[idx] / 1e6),
        "tokens_per_s": int(len(judged)) / (decode_ns / 1e9) if decode_ns > 0 else None,
        "drift": drift(dur[judged], window, drift_min_share),
        **({"warmup_requests": warmup} if warmup else {}),
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


__all__ = ["DECODE_STEP", "DRIFT_MIN_SHARE", "DRIFT_WINDOW_STEPS", "GENERATION_DOMAIN", "MIN_DECODE_STEPS",
           "MIN_PREFILL_STEPS", "PREFILL", "Detected", "Steps", "decode_ranges", "detect", "drift", "find",
           "graph_steps", "kernel_group_steps", "prefill_phase", "prefill_windows", "ranged_steps"]
