"""The inference unit of a capture: what one inference is, and what each one cost on the GPU.

The unit is, in this order: the range the user names (``--unit NAME``, a numbered series by its placeholder
name or any member's), the decode steps of an LLM generation (:func:`decode_step_series`; its leading requests
that cost much more per token are warm-up: :func:`_decode_warmup`), TensorRT's ``ExecutionContext::enqueue*`` / ``execute*`` ranges (NVTX domain "TensorRT")
unless a repeated range of the application holds several of them per instance (engines chained: that range,
:func:`enclosing_enqueues`), the user's outermost repeated range that launches a fair share of the GPU work
(numbered names merged first, :mod:`profiler.capture.numbered`; stage ranges repeated as a whole made frames,
:mod:`profiler.capture.stages`), or the whole capture window. ``Unit.chosen`` says which rule took it. A range that occurs
once (``benchmark`` around the timed loop, a sweep's ``sweep/<variant>``) does not hide the loop inside it:
see :func:`outer_instances`. Per instance, the GPU work it launched (kernels, copies, memsets, graph launches,
joined to the launching API call through the correlation id by the loader, attributed by thread and
launch time by :mod:`profiler.capture.series`):

- ``gpu_ns``: the busy union of that work on the GPU timeline (async: it may run after the range);
- ``latency_ns``: first start to last end of that work;
- ``queue_ns``: from the launch call of the first work to its start on the GPU;
- ``host_ns``: the range's own wall time (host enqueue time).

Warm-up: the leading instances that cost much more than the typical one (lazy module loading, first
uploads, allocator growth) are setup, not steady state; a TensorRT context's first enqueue always is
(when there are at least three).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler import stats
from profiler.capture import blockwise
from profiler.capture import series as S
from profiler.capture.numbered import templates
from profiler.capture.summary import launched_inside, pair_chunks
from profiler.errors import UsageError

TENSORRT_DOMAIN = "TensorRT"
TENSORRT_UNIT = re.compile(r"^ExecutionContext::(enqueue|execute)")
"""TensorRT's NVTX range around each inference (enqueue, enqueueV2/V3, execute, executeV2)."""
UNIT_MIN_GPU_SHARE = 0.25
"""A user range is the inference unit only if its instances launch at least this share of the GPU work."""
WARMUP_RATIO = 1.5
"""A leading instance is warm-up when its host + GPU time exceeds this multiple of the typical one."""
SPAN_CANDIDATES = 8
"""When no repeated range launches that share of the whole capture's GPU work, the ones with the most wall
time (at most this many) are held to that share of the GPU work from their first instance on instead."""
WARMUP_MAX_SHARE = 0.25
"""At most this share of the instances is dropped as warm-up (a slowly settling series stays measured)."""
WRAPPED_SHARE = 2 / 3
"""A repeated range inside a one-off range counts as outermost when it makes at least this share of that
range's direct children and its instances wait for the GPU or make all of that range's launches (see
:func:`_loop_child`): a timed or throughput loop's iterations; not the ranged layers or blocks of a single
forward pass."""
PER_THREAD_MIN_ITERATIONS = 20
"""A range that runs once on each of several threads wraps a loop only when that thread's loop inside it has at
least this many iterations (a worker around its loop), not a request's layers or steps (a thread-per-request
server with 12 synchronised layers per request: the requests are the inference)."""
ASYNC_MIN_ITERATIONS = 20
"""Iterations that never wait make a loop (by making every launch of the range around them) from this many."""
ALTERNATING_COUNT_SLACK = 0.05
"""A repeated outermost range beside a user-range unit (neither inside it nor around it) whose instance count
is the unit's within this share (or one instance) alternates with it: a loop of its own (a pageable copy step
beside a pinned one), whose copies are its work, not the inference's input and output copies. TensorRT units
are never given such ranges: their applications make their I/O copies outside the enqueue, often in ranges of
their own. (A user's own "preprocess" range around the input copies of an NVTX unit counts as such a loop too:
its range findings judge its copies.)"""
ALTERNATING_MIN_COUNT = 10
"""... and both repeat at least this many times ..."""
ALTERNATING_MIN_SHARE = 0.9
"""... and their instances take turns: at least this share of the unit's instances are followed by one of the
other range before the unit's next (two loops run one after the other do not alternate)."""
NO_INT = np.iinfo(np.int64).min


@dataclass
class Unit:
    """The inference unit: its series in the table and per-instance arrays (ns), in start order."""

    source: str  # "tensorrt", "nvtx" or "window"
    series_id: int | None
    label: str | None
    rows: np.ndarray  # instance rows of the series in table.instances
    start_ns: np.ndarray
    host_ns: np.ndarray
    gpu_ns: np.ndarray
    latency_ns: np.ndarray  # NaN where the instance launched no GPU work
    queue_ns: np.ndarray
    gpu_end_ns: np.ndarray  # end of the instance's GPU work (its own end when it has none)
    graph_launches: int
    warmup: int
    why: str = ""  # for a window unit: why no series was taken as the inference
    inside: str | None = None  # the one-off range around the unit's instances, if they are nested in one
    others: tuple[str, ...] = ()  # other repeated ranges that could stand for it (label xN), most wall first
    alternating: tuple[int, ...] = ()  # series of the ranges that alternate with it (:func:`alternating_series`)
    alternating_labels: tuple[str, ...] = ()  # their labels
    chosen: str = ""  # why this unit was chosen, in words
    decode: bool = False  # the decode steps of an LLM generation (:func:`decode_step_series`)

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def steady(self) -> slice:
        return slice(self.warmup, self.count)


def label_of(domain: Any, name: Any) -> str:
    return f"{domain}:{name}" if domain else str(name)


def choose_series(table: S.SeriesTable, unit_name: str | None = None) -> tuple[int | None, str]:
    """(series id, source) of the inference unit; (None, 'window') when nothing qualifies."""
    sid, source, _ = choose(table, unit_name)
    return sid, source


def choose(table: S.SeriesTable, unit_name: str | None = None) -> tuple[int | None, str, str]:
    """(series id, source, why it was chosen in words) of the inference unit; (None, 'window', '') when nothing
    qualifies. A TensorRT enqueue is the unit unless a repeated range of the application holds several of them
    per instance (:func:`enclosing_enqueues`)."""
    series = table.series
    if table.window or series.empty:
        if unit_name:
            raise UsageError(f"--unit {unit_name!r}: this capture has no NVTX ranges to choose from")
        return (0 if len(series) else None), "window", ""
    inst = table.instances
    sid = inst["series_id"].to_numpy()
    wall = np.bincount(sid, weights=inst["wall_ns"].to_numpy(dtype=np.float64), minlength=len(series))
    top = np.bincount(sid, weights=outer_instances(table).astype(np.float64), minlength=len(series))
    count = series["count"].to_numpy()
    labels = [label_of(d, n) for d, n in zip(series["domain"], series["name"])]
    if unit_name:
        wanted = [unit_name] + templates(unit_name)  # 'Inference 12' names the series 'Inference #'
        hits = []
        for name in wanted:
            hits = hits or [i for i, lab in enumerate(labels) if name in (lab, series["name"].iat[i])]
        if not hits:
            shown = ", ".join(sorted(labels, key=lambda x: -count[labels.index(x)])[:8])
            raise UsageError(f"--unit {unit_name!r} names no NVTX range of this capture; ranges: {shown}")
        best = max(hits, key=lambda i: (count[i], wall[i]))
        return best, "tensorrt" if _is_trt(series, best) else "nvtx", "named by --unit"
    step = decode_step_series(table)
    if step is not None:
        return step, "nvtx", DECODE_CHOSEN
    trt = [i for i in range(len(series)) if _is_trt(series, i)]
    if trt:
        best = max(trt, key=lambda i: (count[i], wall[i]))
        around = enclosing_enqueues(table, best)
        if around is not None:
            return around[0], "nvtx", (f"holds {around[1]:.3g} TensorRT enqueues per instance (engines chained, or "
                                       "one enqueue per chunk): the range around them is the inference, the enqueues "
                                       "its layers")
        if is_graph_replay(series["domain"].iat[best], series["name"].iat[best]):
            return best, "tensorrt", "each a replay of the CUDA graph TensorRT's enqueue was captured into"
        return best, "tensorrt", "TensorRT's range around each enqueue of an execution context"
    busy = np.bincount(sid, weights=inst["gpu_busy_ns"].to_numpy(dtype=np.float64), minlength=len(series))
    act = table.activity
    total_busy = blockwise.union_length(act.start_ns, act.end_ns, sorted_by_start=act.sorted_by_start) \
        if len(act) else 0
    # a unit launches a fair share of the GPU work: not a host-only helper or a sync point (aten::item)
    # a range around a loop on each worker thread repeats, but each of its instances is a whole loop
    wrappers = wrapped_loops(table)[1]
    repeated = sorted((i for i in range(len(series))
                       if count[i] >= 2 and top[i] >= 0.5 * count[i] and i not in wrappers),
                      key=lambda i: (-wall[i], -count[i]))
    outer = [i for i in repeated if busy[i] >= UNIT_MIN_GPU_SHARE * total_busy]
    why = (f"the repeated outermost range with the most time of those that launch {UNIT_MIN_GPU_SHARE:.0%} or more "
           "of the capture's GPU work")
    # else a few requests after a long warm-up outside any range (first-call autotuning, lazy loading):
    # they launch little of the capture's GPU work but a fair share of the work from their first one on
    if not outer:
        outer = [i for i in repeated[:SPAN_CANDIDATES]
                 if busy[i] > 0 and busy[i] >= UNIT_MIN_GPU_SHARE * _busy_from_first(table, sid, i)]
        why = (f"the repeated outermost range with the most time of those that launch {UNIT_MIN_GPU_SHARE:.0%} or "
               "more of the GPU work from their first instance on")
    if outer:
        return outer[0], "nvtx", why
    return None, "window", ""


DECODE_CHOSEN = ("each a decode step of an LLM generation (one token; profiler.capture.generation): the prefill "
                 "of each request is a phase of its own, not an inference")


def decode_step_series(table: S.SeriesTable) -> int | None:
    """The series of the decode steps of the generation the table holds (``SeriesTable.generation``): the ranges
    made for them, or the application's NVTX range they were read from; None without one."""
    det = getattr(table, "generation", None)
    if det is None or table.series.empty:
        return None
    from profiler.capture.generation import DECODE_STEP, GENERATION_DOMAIN

    series = table.series
    if det.steps.kind == "nvtx":
        name = S.normalize_range_name(str(det.steps.range_name))
        hits = [i for i in range(len(series)) if str(series["name"].iat[i]) == name]
    else:
        hits = [i for i in range(len(series)) if series["domain"].iat[i] == GENERATION_DOMAIN
                and series["name"].iat[i] == DECODE_STEP]
    return max(hits, key=lambda i: int(series["count"].iat[i])) if hits else None


def _decode_warmup(table: S.SeriesTable, start_ns: np.ndarray) -> int:
    """The decode steps of the generation's warm-up requests
    (:data:`profiler.capture.generation.WARMUP_REQUEST_RATIO`): those that start before the first steady
    request's first step."""
    first = table.generation.first_steady_launch()
    return 0 if first is None else int(np.searchsorted(start_ns, first, "left"))


ENCLOSING_MIN_SHARE = 0.9
"""A range of the application is the inference instead of TensorRT's enqueue when at least this share of the
enqueues lies inside ranges of the application that hold several per instance (its own, and its warm-up's) ..."""
ENCLOSING_MIN_ENQUEUES = 1.5
"""... and they hold at least this many enqueues per instance on average (8 engines chained per inference, or one
enqueue per chunk of the input): one enqueue is an eighth of the inference, not the inference."""


def enclosing_enqueues(table: S.SeriesTable, trt: int) -> tuple[int, float] | None:
    """(series, enqueues per instance) of the repeated range of the application that holds several TensorRT
    enqueues (series ``trt``) per instance and the most of them (then: the most instances, the innermost); None
    when there is none."""
    series = table.series
    count = series["count"].to_numpy()
    held = {}  # application ranges holding several enqueues per instance: series -> (share, per instance)
    for a, share in table.ancestor_share(trt).items():
        per = share * count[trt] / count[a]
        if series["domain"].iat[a] != TENSORRT_DOMAIN and count[a] >= 2 and per >= ENCLOSING_MIN_ENQUEUES:
            held[int(a)] = (share, float(per))
    # the warm-up's ranges and the timed loop's (Warmup #, Inference #) hold the enqueues together
    if not held or _share_inside(table, trt, set(held)) < ENCLOSING_MIN_SHARE:
        return None
    best = max(held, key=lambda a: (held[a][0], count[a]))  # the one holding the most enqueues
    return best, held[best][1]


def _share_inside(table: S.SeriesTable, sid: int, around: set[int]) -> float:
    """Share of the instances of series ``sid`` nested (at any depth) in an instance of a series of ``around``."""
    inst = table.instances
    series_of, parent = inst["series_id"].to_numpy(), inst["parent"].to_numpy()
    rows = np.flatnonzero(series_of == sid)
    if not len(rows):
        return 0.0
    inside = np.zeros(len(rows), dtype=bool)
    cur, who = parent[rows], np.arange(len(rows))
    while len(cur):
        ok = cur >= 0
        cur, who = cur[ok], who[ok]
        inside[who[np.isin(series_of[cur], list(around))]] = True
        cur = parent[cur]
    return float(inside.mean())


def outer_instances(table: S.SeriesTable) -> np.ndarray:
    """Which range instances count as outermost: those at depth 0 on their thread, and those nested only in
    one-off ranges (each enclosing range occurs once in the capture, or once on each thread it runs on) that
    are one-off themselves or iterations of a loop there (:func:`_loop_child`)."""
    cached = getattr(table, "_outer_instances", None)
    if cached is not None:
        return cached
    table._outer_instances = outer = _outer_instances(table)  # several stages and rules ask
    outer.setflags(write=False)
    return outer


def _outer_instances(table: S.SeriesTable) -> np.ndarray:
    inst = table.instances
    depth = inst["depth"].to_numpy()
    outer = depth == 0
    parent = inst["parent"].to_numpy()
    child = np.flatnonzero((depth > 0) & (parent >= 0))  # a subset's cut keeps the depth, not the parent
    if not len(child):
        return outer
    sid = inst["series_id"].to_numpy()
    count = table.series["count"].to_numpy()
    once = count == 1
    waits = (inst["sync_count"].to_numpy()[child] > 0) | (inst["memcpy_api_ns"].to_numpy()[child] > 0)
    loop, iterations = _loop_child(parent[child], sid[child], waits, inst["launch_calls"].to_numpy(), child)
    # a range once on each of its threads (count > 1) wraps only a long loop of that thread: a worker's loop,
    # not a thread-per-request server's one request with its few steps or layers
    per_thread = _once_per_thread(sid, inst["tid"].to_numpy(), count) & ~once
    wraps = once[sid] | (per_thread[sid] & _holds(parent, iterations >= PER_THREAD_MIN_ITERATIONS))
    for level in range(1, int(depth.max()) + 1):  # parents before their children
        rows = child[depth[child] == level]
        p = parent[rows]
        ok = outer[p] & wraps[p] & (once[sid[rows]] | (loop[p] == sid[rows]) | (wraps[rows] & (loop[rows] >= 0)))
        if not ok.any():  # nothing deeper can be nested only in one-off ranges
            break
        outer[rows[ok]] = True
    return outer


def _holds(parent: np.ndarray, long_loop: np.ndarray) -> np.ndarray:
    """Per instance, whether it or a range nested in it holds a long loop (``long_loop`` per instance)."""
    out = long_loop.copy()
    cur = np.flatnonzero(long_loop)
    while len(cur):
        cur = np.unique(parent[cur])
        cur = cur[(cur >= 0) & ~out[np.maximum(cur, 0)]]
        out[cur] = True
    return out


def _once_per_thread(sid: np.ndarray, tid: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per series (``count`` instances each), whether no two of its instances ran on one thread: a one-off
    range, or one range per worker thread around that thread's loop."""
    codes, threads = pd.factorize(tid)
    pairs = np.unique(sid.astype(np.int64) * max(len(threads), 1) + codes)
    return np.bincount(pairs // max(len(threads), 1), minlength=len(count)) == count


def wrapped_loops(table: S.SeriesTable) -> tuple[set[int], set[int]]:
    """(loops, wrappers): series of the repeated ranges nested in one-off ranges that :func:`outer_instances`
    counts as outermost, and series of the one-off ranges around them (``benchmark`` around the timed loop,
    and the ranges around that), each instance of which is a whole loop."""
    inst = table.instances
    if inst.empty:
        return set(), set()
    sid, parent = inst["series_id"].to_numpy(), inst["parent"].to_numpy()
    nested = outer_instances(table) & (parent >= 0) & (table.series["count"].to_numpy()[sid] >= 2)
    cur, wrappers = np.unique(parent[nested]), set()
    while len(cur):
        wrappers.update(np.unique(sid[cur]).tolist())
        cur = np.unique(parent[cur])
        cur = cur[cur >= 0]
    return set(np.unique(sid[nested]).tolist()) - wrappers, wrappers


def _loop_child(parent: np.ndarray, sid: np.ndarray, waits: np.ndarray, launch_calls: np.ndarray,
                child: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance, the series of the loop among its direct children (-1 when none) and its iterations there
    (0 when none). A loop is at least ``WRAPPED_SHARE`` of them and two, which either wait for the GPU in most
    iterations (a synchronising call or a copy call inside: a timed loop's iterations do; the ranged blocks of
    one forward pass, queued without waiting, do not, nor does a recursive range's one child) or, at least
    ``ASYNC_MIN_ITERATIONS`` of them, make every launch call of the range around them (a throughput loop
    queues all its work in its iterations; a forward pass launches its embedding and head outside its blocks,
    and a small one with every layer ranged has few). ``parent``, ``sid`` and ``waits`` are of the ``child`` instances; ``launch_calls``
    of every instance (its own thread's kernel and graph launch calls)."""
    out = np.full(len(launch_calls), -1, np.int64)
    iterations = np.zeros(len(launch_calls), np.int64)
    pairs = pd.DataFrame({"p": parent, "s": sid, "w": waits.astype(np.int64),
                          "n": launch_calls[child]}).groupby(["p", "s"])[["w", "n"]]
    count, sums = pairs.size().to_numpy(), pairs.sum()
    p, s = sums.index.get_level_values(0).to_numpy(), sums.index.get_level_values(1).to_numpy()
    share = count / pd.Series(parent).value_counts().reindex(p).to_numpy()
    launched = sums["n"].to_numpy()
    every_launch = (launched > 0) & (launched == launch_calls[p]) & (count >= ASYNC_MIN_ITERATIONS)
    keep = (share >= WRAPPED_SHARE) & (count >= 2) & ((sums["w"].to_numpy() >= 0.5 * count) | every_launch)
    out[p[keep]] = s[keep]
    iterations[p[keep]] = count[keep]
    return out, iterations


def _busy_from_first(table: S.SeriesTable, sid: np.ndarray, i: int) -> int:
    """GPU busy time (ns) of the work its processes launch (or of unknown launch) starting at or after series
    ``i``'s first instance: the warm-up before it left out, the rest of the program after it not (two marked
    iterations of a long loop are no unit), another process's work neither. A loop in one-off ranges of its
    own: up to the end of those ranges (a sweep's next variants are not its program's rest)."""
    inst = table.instances
    lo = int(inst["start_ns"].to_numpy()[sid == i].min())
    pids = np.unique(inst["tid"].to_numpy()[sid == i] >> 24)
    parent = inst["parent"].to_numpy()[sid == i]
    hi = int(inst["end_ns"].to_numpy()[parent].max()) if (parent >= 0).all() else np.iinfo(np.int64).max
    act = table.activity

    def mine(sl: slice) -> np.ndarray:
        tid = act.api_tid[sl]
        return (act.start_ns[sl] >= lo) & (act.start_ns[sl] <= hi) & ((tid < 0) | np.isin(tid >> 24, pids))

    return blockwise.union_length(act.start_ns, act.end_ns, mine, act.sorted_by_start)


def window_reason(table: S.SeriesTable) -> str:
    """Why a capture has no inference unit, in words (for a window unit)."""
    if table.window or table.series.empty:
        return "no NVTX ranges"
    inst = table.instances
    sid = inst["series_id"].to_numpy()
    top = np.bincount(sid, weights=outer_instances(table).astype(np.float64), minlength=len(table.series))
    count = table.series["count"].to_numpy()
    if not ((count >= 2) & (top >= 0.5 * count)).any():
        nested = np.flatnonzero(count >= 2)
        if not len(nested):
            return "no repeated NVTX range"
        depth = pd.Series(inst["depth"].to_numpy()).groupby(sid).min().reindex(range(len(count))).to_numpy()
        busy = np.bincount(sid, weights=inst["gpu_busy_ns"].to_numpy(dtype=np.float64), minlength=len(count))
        i = int(max(nested.tolist(), key=lambda j: (-depth[j], busy[j])))  # the shallowest, then the busiest
        return (f"no repeated outermost NVTX range; nested ones repeat, e.g. "
                f"{label_of(table.series['domain'].iat[i], table.series['name'].iat[i])} x{int(count[i])}: "
                "--unit NAME takes one as the inference")
    return (f"no repeated outermost NVTX range launches {UNIT_MIN_GPU_SHARE:.0%} of the GPU work from its first instance on "
            "(--unit NAME takes one as the inference)")


def _is_trt(series: pd.DataFrame, i: int) -> bool:
    """A TensorRT inference: its enqueue range, or a graph replay of it (:mod:`profiler.capture.replays`)."""
    domain, name = series["domain"].iat[i], str(series["name"].iat[i])
    return (domain == TENSORRT_DOMAIN and bool(TENSORRT_UNIT.match(name))) or is_graph_replay(domain, name)


GRAPH_REPLAY = "cudaGraphLaunch"
"""The name of the range made for each graph replay of a TensorRT inference (:mod:`profiler.capture.replays`),
in TensorRT's domain."""


def is_graph_replay(domain: Any, name: Any) -> bool:
    """Whether a series is the ranges made for TensorRT's graph replays (no NVTX range of the capture)."""
    return domain == TENSORRT_DOMAIN and name == GRAPH_REPLAY


def build_unit(table: S.SeriesTable, unit_name: str | None = None) -> Unit:
    """The unit and its per-instance GPU time, latency, queueing delay and host time."""
    sid, source, chosen = choose(table, unit_name)
    if sid is None:  # NVTX ranges, none repeated: the whole window of GPU work is the unit
        return _window_unit(table)
    rows = np.arange(table.rows_of(sid).start, table.rows_of(sid).stop)
    inst = table.instances.iloc[rows]
    n = len(rows)
    first = np.full(n, NO_INT, np.int64)
    last = inst["end_ns"].to_numpy().copy()
    queue = np.full(n, np.nan)
    latency = np.full(n, np.nan)
    graphs = 0
    for a, b in pair_chunks(inst, "activity"):  # bounded (instance, activity) pairs per step
        q, act_rows = table.members(inst.iloc[a:b], "activity")
        if len(q):
            graphs += _gpu_work(table.activity, q + a, act_rows, first, last, queue, latency)
    label = label_of(table.series["domain"].iat[sid], table.series["name"].iat[sid])
    host = inst["wall_ns"].to_numpy()
    gpu = inst["gpu_busy_ns"].to_numpy()
    inside, others = _wrapped(table, sid, rows, source)
    alt = alternating_series(table, sid, source)
    warm = warmup_count(host, latency, first_is_warmup=source == "tensorrt")
    if chosen == DECODE_CHOSEN:
        warm = max(warm, _decode_warmup(table, inst["start_ns"].to_numpy()))
    return Unit(source=source, series_id=sid, label=label, rows=rows, start_ns=inst["start_ns"].to_numpy(),
                host_ns=host, gpu_ns=gpu, latency_ns=latency, queue_ns=queue, gpu_end_ns=last,
                graph_launches=graphs, warmup=warm,
                why=window_reason(table) if source == "window" else "", inside=inside, others=others,
                alternating=alt, alternating_labels=tuple(
                    label_of(table.series["domain"].iat[j], table.series["name"].iat[j]) for j in alt),
                chosen=_chosen(table, sid, rows, chosen, inside), decode=chosen == DECODE_CHOSEN)


def alternating_series(table: S.SeriesTable, sid: int, source: str) -> tuple[int, ...]:
    """The series that alternate with the unit's series ``sid`` (``ALTERNATING_COUNT_SLACK`` and after):
    repeated about as often, mostly outermost, taking turns with it, neither inside the unit's instances nor
    around them, launching GPU work. None for a TensorRT unit."""
    if source != "nvtx":
        return ()
    series, inst = table.series, table.instances
    count = series["count"].to_numpy()
    n = int(count[sid])
    isid = inst["series_id"].to_numpy()
    top = np.bincount(isid, weights=outer_instances(table).astype(np.float64), minlength=len(series))
    busy = np.bincount(isid, weights=inst["gpu_busy_ns"].to_numpy(dtype=np.float64), minlength=len(series))
    slack = max(1.0, ALTERNATING_COUNT_SLACK * n)
    if n < ALTERNATING_MIN_COUNT:
        return ()
    near = [j for j in range(len(series)) if j != sid and abs(int(count[j]) - n) <= slack
            and top[j] >= 0.5 * count[j] and busy[j] > 0 and _take_turns(table, sid, j)]
    if not near:
        return ()
    around = table.ancestor_share(sid)
    return tuple(j for j in near if around.get(j, 0.0) < 0.5 and table.ancestor_share(j).get(sid, 0.0) < 0.5)


def _take_turns(table: S.SeriesTable, a: int, b: int) -> bool:
    """Whether instances of series ``b`` start between consecutive instances of series ``a`` (by start time)
    for at least ``ALTERNATING_MIN_SHARE`` of them."""
    sa = np.sort(table.instances_of(a)["start_ns"].to_numpy(np.int64))
    sb = np.sort(table.instances_of(b)["start_ns"].to_numpy(np.int64))
    if len(sa) < 2 or not len(sb):
        return False
    between = np.searchsorted(sb, sa[1:], "left") - np.searchsorted(sb, sa[:-1], "right")
    return float(np.mean(between >= 1)) >= ALTERNATING_MIN_SHARE


def _chosen(table: S.SeriesTable, sid: int, rows: np.ndarray, why: str, inside: str | None) -> str:
    """Why the unit was chosen, in words: how its series was made (numbered names, frames of stages) and the
    rule that took it."""
    if inside and why != "named by --unit":
        why = f"iterations of a loop inside the one-off range {inside}"
    label = label_of(table.series["domain"].iat[sid], table.series["name"].iat[sid])
    made = table.made_from.get(label)
    if made and why == DECODE_CHOSEN:
        return f"{made}; {why}"
    if made:
        return f"{made}: each repetition is one frame, its stages the layers; {why}"
    numbers = table.instances["name_index"].to_numpy()[rows] if "name_index" in table.instances else np.zeros(0)
    numbers = numbers[numbers >= 0]
    if len(numbers):
        distinct = np.unique(numbers)
        return (f"ranges whose names differ only by a number ({len(distinct)} numbers, {int(distinct[0])} to "
                f"{int(distinct[-1])}) are one series; {why}")
    return why


def _wrapped(table: S.SeriesTable, sid: int, rows: np.ndarray, source: str,
             limit: int = 3) -> tuple[str | None, tuple[str, ...]]:
    """For a unit that is a loop in one-off ranges (:func:`wrapped_loops`): the label of the range around
    most of its instances, and the other such loops that launch GPU work (label xN, most wall time first, at
    most ``limit``); (None, ()) for any other unit (a TensorRT enqueue inside the user's range)."""
    loops = wrapped_loops(table)[0]
    if source != "nvtx" or sid not in loops:
        return None, ()
    inst, series = table.instances, table.series
    isid = inst["series_id"].to_numpy()
    parents = inst["parent"].to_numpy()[rows]
    wrap, n = np.unique(isid[parents[parents >= 0]], return_counts=True)
    psid = int(wrap[np.argmax(n)])  # the one-off range around most of them (warm-up and timed loops: timed)
    busy = np.bincount(isid, weights=inst["gpu_busy_ns"].to_numpy(dtype=np.float64), minlength=len(series))
    wall = np.bincount(isid, weights=inst["wall_ns"].to_numpy(dtype=np.float64), minlength=len(series))
    others = sorted((i for i in loops - {sid} if busy[i] > 0), key=lambda i: -wall[i])[:limit]
    return (label_of(series["domain"].iat[psid], series["name"].iat[psid]),
            tuple(f"{label_of(series['domain'].iat[i], series['name'].iat[i])} x{int(series['count'].iat[i])}"
                  for i in others))


def _gpu_work(act: S.Activity, q: np.ndarray, act_rows: np.ndarray, first: np.ndarray, last: np.ndarray,
              queue: np.ndarray, latency: np.ndarray) -> int:
    """Fill the instances ``q`` holds (sorted, as :meth:`~SeriesTable.members` gives them) with their GPU
    work's first start, end, queueing delay and latency; returns how many of the rows are graph launches."""
    s, e = act.start_ns[act_rows], act.end_ns[act_rows]
    heads = np.flatnonzero(np.concatenate(([True], q[1:] != q[:-1])))  # per instance: its run of rows
    who = q[heads]
    first[who] = np.minimum.reduceat(s, heads)
    end = np.maximum.reduceat(e, heads)
    # the launch call of the first work: the first row of each run that starts at the run's minimum
    at_min = np.flatnonzero(s == np.repeat(first[who], np.diff(np.append(heads, len(q)))))
    first_at_min = at_min[np.concatenate(([True], q[at_min][1:] != q[at_min][:-1]))]
    api0 = act.api_start_ns[act_rows[first_at_min]]
    queue[who] = np.where(api0 == NO_INT, np.nan, np.maximum(first[who] - api0, 0))
    latency[who] = end - first[who]
    last[who] = np.maximum(last[who], end)
    return int(np.count_nonzero(act.kind[act_rows] == S.GRAPH))


def _window_unit(table: S.SeriesTable) -> Unit:
    act = table.activity
    if len(act):
        lo, hi = int(act.start_ns.min()), int(act.end_ns.max())
        busy = blockwise.union_length(act.start_ns, act.end_ns, sorted_by_start=act.sorted_by_start)
    else:
        lo = hi = busy = 0
    one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
    graphs = int(np.count_nonzero(act.kind == S.GRAPH))
    return Unit(source="window", series_id=0 if table.window else None, label=None,
                rows=np.zeros(1 if len(act) else 0, np.int64), start_ns=np.array([lo]), host_ns=one(hi - lo),
                gpu_ns=one(busy), latency_ns=one(hi - lo), queue_ns=one(np.nan), gpu_end_ns=np.array([hi]),
                graph_launches=graphs, warmup=0, why=window_reason(table))


def warmup_count(host_ns: np.ndarray, latency_ns: np.ndarray, first_is_warmup: bool = False,
                 ratio: float = WARMUP_RATIO, max_share: float = WARMUP_MAX_SHARE) -> int:
    """Leading instances that cost more than ``ratio`` x the typical instance (host + GPU latency; the
    typical one is the median of the second half). ``first_is_warmup``: the first instance is warm-up
    whatever it cost (a TensorRT context's first enqueue initialises it). Needs at least 3 instances."""
    n = len(host_ns)
    if n < 3:
        return 0
    cost = host_ns.astype(np.float64) + np.nan_to_num(latency_ns.astype(np.float64))
    typical = float(np.median(cost[n // 2:]))
    limit = max(1, int(n * max_share))
    k = 1 if first_is_warmup else 0
    while k < limit and cost[k] > ratio * typical:
        k += 1
    return k


def unit_json(unit: Unit) -> dict[str, Any]:
    """The ``inference`` object of the analysis JSON (statistics over the steady-state instances)."""
    st = unit.steady

    def summ(a: np.ndarray) -> dict[str, Any]:
        a = np.asarray(a[st], dtype=np.float64)
        return stats.summarize(a[np.isfinite(a)] / 1e6)

    return {
        "series": unit.label, "source": unit.source, "count": unit.count,
        "steady_count": max(unit.count - unit.warmup, 0), "warmup_count": unit.warmup,
        "gpu_ms": summ(unit.gpu_ns), "gpu_latency_ms": summ(unit.latency_ns), "queue_ms": summ(unit.queue_ns),
        "host_ms": summ(unit.host_ns), "graph_launches": unit.graph_launches,
        "queued_behind": _counts(queued_behind(unit)[st]),
        **({"why": unit.why} if unit.source == "window" else {}),
        **({"chosen": unit.chosen} if unit.chosen else {}),
        **({"graph_replays": True} if unit.series_id is not None and unit.source == "tensorrt"
           and unit.label == label_of(TENSORRT_DOMAIN, GRAPH_REPLAY) else {}),
        **({"inside": unit.inside, "other_loops": list(unit.others)} if unit.inside else {}),
        **({"alternates_with": list(unit.alternating_labels)} if unit.alternating else {}),
    }


def copies_outside(table: S.SeriesTable, unit: Unit, lo: int, hi: int) -> dict[str, float] | None:
    """Copies started in [lo, hi] (the steady state) that no instance of the unit launched, per steady
    inference: an application that issues its input and output copies outside the enqueue (TensorRT's
    samples do) pays them every iteration, and the unit's GPU time alone leaves them out. Copies launched in
    a range alternating with the unit (``Unit.alternating``) are that loop's work and not counted. None
    without a unit or without such copies."""
    if unit.source == "window" or not unit.count:
        return None
    act = table.activity
    copies = np.flatnonzero((act.kind == S.MEMCPY) & (act.start_ns >= lo) & (act.start_ns <= hi))
    if not len(copies):
        return None
    m = copies[~unit_activity(table, unit)[copies]]
    if unit.alternating and len(m):  # a loop beside the unit copies for itself, not for the inference
        other = table.instances[np.isin(table.instances["series_id"].to_numpy(), unit.alternating)]
        m = m[~launched_inside(table, other)[m]]
    steady = max(unit.count - unit.warmup, 1)
    if not len(m):
        return None
    return {"ms": float((act.end_ns[m] - act.start_ns[m]).sum()) / 1e6 / steady, "count": float(len(m)) / steady}


def io_bytes(table: S.SeriesTable, unit: Unit, lo: int, hi: int) -> dict[str, float] | None:
    """Bytes copied host-to-device and device-to-host per steady inference, the copies started in [lo, hi]
    (the steady state) wherever they were launched, but for those of a range alternating with the unit: the
    size of what each inference takes in and gives out, which tells engines of one network at different
    input shapes apart. None without a unit or without such copies."""
    if unit.source == "window" or not unit.count:
        return None
    act = table.activity
    rows = np.flatnonzero((act.kind == S.MEMCPY) & (act.start_ns >= lo) & (act.start_ns <= hi))
    if unit.alternating and len(rows):
        other = table.instances[np.isin(table.instances["series_id"].to_numpy(), unit.alternating)]
        rows = rows[~launched_inside(table, other)[rows]]
    steady = max(unit.count - unit.warmup, 1)
    out = {d: float(act.bytes[rows[act.copy_kind[rows] == S.CopyKind[d]]].sum()) / steady for d in ("HtoD", "DtoH")}
    return out if any(out.values()) else None


def unit_activity(table: S.SeriesTable, unit: Unit) -> np.ndarray:
    """Mask over the activity: the rows some instance of the unit launched."""
    return launched_inside(table, table.instances.iloc[unit.rows])


def _counts(a: np.ndarray) -> dict[str, float] | None:
    return {"median": float(np.median(a)), "max": int(a.max())} if len(a) else None


def queued_behind(unit: Unit) -> np.ndarray:
    """For each instance: how many earlier ones still had GPU work unfinished when it started (the host
    running ahead of the GPU: a queue that grows is what a large queueing delay comes from). An earlier
    instance's GPU work ends after its own start, so those finished are the ends up to this start."""
    if not unit.count:
        return np.zeros(0, np.int64)
    done = np.searchsorted(np.sort(unit.gpu_end_ns), unit.start_ns, side="right")
    return np.maximum(np.arange(unit.count) - done, 0)
