"""TensorRT inferences replayed as CUDA graphs: each replay as a range of its own.

``trtexec --useCudaGraph`` (and any service that captures ``enqueueV3`` into a graph) enqueues through
TensorRT once or twice: once to settle lazy initialisation, once while the stream is captured. Every inference
after that is a ``cudaGraphLaunch`` of its own, with no TensorRT range around it: TensorRT's NVTX ranges exist
only while its work is enqueued. Read as they are, such a capture has an enqueue range of one or two instances,
one of which launched nothing ("1 instance: no GPU work"). Here each graph launch call outside TensorRT's
enqueue ranges becomes a range ``cudaGraphLaunch`` in TensorRT's domain, from the call's start to its end:
the host time of the replay, as an enqueue range holds the host time of the enqueue, with the GPU work it
launched attributed to it. Only replays of the graph an enqueue was captured into count: a PyTorch graph
launched beside an eager TensorRT engine is no TensorRT inference.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture.frames import ApiCategory
from profiler.capture.unit import GRAPH_REPLAY, TENSORRT_DOMAIN, TENSORRT_UNIT


BEGIN_CAPTURE = ("cudaStreamBeginCapture", "cuStreamBeginCapture")
END_CAPTURE = ("cudaStreamEndCapture", "cuStreamEndCapture")


def graph_replays(ranges: Any, api: Any, trace: Any = None) -> Any:
    """``ranges`` (:class:`~profiler.capture.series.Ranges`) with one range per replay of a CUDA graph that
    TensorRT's enqueue was captured into; else ``ranges`` itself. The graph is TensorRT's when an enqueue range
    lies inside a stream capture (between a BeginCapture and an EndCapture call of its thread, else of its
    process); its replays are the graph launch calls outside enqueue ranges that launch the graph first
    launched on that thread after the capture ended and not claimed by an earlier capture (by the graph
    launches' ``graph_exec_id`` in ``trace.graphs``; another thread of the process when that one launches
    none; without graph records, every graph launch of that thread after the capture). At least two, and more than instances of the most frequent enqueue range. Not told apart: another
    graph launched first after the capture on that thread (its replays are taken for TensorRT's), and, under
    node-level tracing, other graphs that thread launches."""
    rf = ranges.frame
    trt = np.flatnonzero(np.asarray(ranges.domains, dtype=object) == TENSORRT_DOMAIN)
    if rf.empty or not len(api) or not len(trt):
        return ranges
    enqueue = np.array([bool(TENSORRT_UNIT.match(str(n))) for n in ranges.names], dtype=bool)
    mine = (rf["domain"].to_numpy() == trt[0]) & enqueue[rf["name"].to_numpy()]
    if not mine.any():
        return ranges
    enq = rf.loc[mine]
    launches = _graph_launches(api)
    if len(launches) < 2:
        return ranges
    captured = _captured(api, enq)  # (thread, end of its capture) of each enqueue made under capture
    if not captured:
        return ranges
    launches = launches[~_inside(api.tid[launches], api.start_ns[launches], enq)]
    launches = _replays_of(api, launches, captured, trace)
    most = int(np.bincount(rf["name"].to_numpy()[mine]).max())
    if len(launches) < 2 or len(launches) <= most:
        return ranges
    names = np.append(np.asarray(ranges.names, dtype=object), GRAPH_REPLAY)
    added = pd.DataFrame({"domain": np.full(len(launches), trt[0], np.int64),
                          "name": np.full(len(launches), len(names) - 1, np.int64),
                          "raw_name": np.full(len(launches), -1, np.int64), "start_ns": api.start_ns[launches],
                          "end_ns": api.end_ns[launches], "tid": api.tid[launches]})
    return replace(ranges, frame=pd.concat([rf, added], ignore_index=True), names=names)


def _graph_launches(api: Any) -> np.ndarray:
    """Rows of the graph launch calls not nested in another one of their thread (a driver call inside the
    runtime's), in (thread, start) order."""
    rows = np.flatnonzero(api.category == ApiCategory.graph_launch)
    rows = rows[np.lexsort((api.start_ns[rows], api.tid[rows]))]
    same = np.concatenate(([False], api.tid[rows][1:] == api.tid[rows][:-1]))
    reach = np.concatenate(([0], api.end_ns[rows][:-1]))
    return rows[~(same & (api.start_ns[rows] < reach))]


def _captured(api: Any, enq: pd.DataFrame) -> list[tuple[int, int]]:
    """(thread, end of the capture) for each enqueue range made under a stream capture: the last capture call
    of its thread (or, when that thread makes none, of its process) before it is a BeginCapture, and an
    EndCapture follows."""
    begin, end = api.named_prefix(BEGIN_CAPTURE), api.named_prefix(END_CAPTURE)
    out = []
    for t, r in enq.groupby("tid"):
        mine = api.tid == t
        if not (begin & mine).any():  # the stream captured by another thread of the process (a loader thread)
            mine = (api.tid >> 24) == (int(t) >> 24)
        b = np.sort(api.start_ns[begin & mine])
        e = np.sort(api.start_ns[end & mine])
        if not len(b) or not len(e):
            continue
        for start in r["start_ns"].to_numpy():
            last_b = b[np.searchsorted(b, start, "right") - 1] if (b <= start).any() else None
            if last_b is None or (e[(e > last_b) & (e <= start)]).size:
                continue  # no capture open at the enqueue
            after = e[e > start]
            if after.size:
                out.append((int(t), int(after[0])))
    return out


def _replays_of(api: Any, launches: np.ndarray, captured: list[tuple[int, int]], trace: Any) -> np.ndarray:
    """The launch calls among ``launches`` that replay the graphs the captures made (see :func:`graph_replays`)."""
    exec_of = _exec_ids(api, launches, trace)
    keep = np.zeros(len(launches), dtype=bool)
    claimed: set[int] = set()  # each capture's graph: the first exec launched after it not another capture's
    for t, ended in sorted(captured, key=lambda c: c[1]):
        later = api.start_ns[launches] > ended
        after = np.flatnonzero(later & (api.tid[launches] == t))
        if not len(after) and exec_of is not None:  # replayed by another thread (a worker) of the process
            after = np.flatnonzero(later & ((api.tid[launches] >> 24) == (t >> 24)))
        if exec_of is None:  # no graph records to tell graphs apart (node-level tracing): that thread's launches
            keep[after] = True
            continue
        known = after[(exec_of[after] >= 0) & ~np.isin(exec_of[after], list(claimed))]
        if len(known):  # the first launch after the capture whose graph record names its exec
            first = int(exec_of[known[np.argmin(api.start_ns[launches][known])]])
            claimed.add(first)
            keep |= exec_of == first
    return launches[keep]


def _exec_ids(api: Any, launches: np.ndarray, trace: Any) -> np.ndarray | None:
    """The ``graph_exec_id`` each launch call launched (-1 where no graph record joins it), None when the
    capture's graph records carry none."""
    graphs = getattr(trace, "graphs", None)
    if graphs is None or not len(graphs) or "graph_exec_id" not in graphs.columns:
        return None
    ids = pd.to_numeric(graphs["graph_exec_id"], errors="coerce")
    if ids.isna().all():
        return None
    link = pd.Series(ids.fillna(-1).to_numpy(np.int64),
                     index=pd.MultiIndex.from_arrays([graphs["api_tid"].to_numpy(np.int64),
                                                      graphs["api_start_ns"].to_numpy(np.int64)]))
    link = link[~link.index.duplicated()]
    keys = pd.MultiIndex.from_arrays([api.tid[launches].astype(np.int64), api.start_ns[launches].astype(np.int64)])
    return link.reindex(keys).fillna(-1).to_numpy(np.int64)


def _inside(tid: np.ndarray, start: np.ndarray, enq: pd.DataFrame) -> np.ndarray:
    """Whether each call (thread, start) lies in one of the enqueue ranges ``enq`` of its thread."""
    out = np.zeros(len(tid), dtype=bool)
    for t, r in enq.groupby("tid"):
        lo, hi = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
        order = np.argsort(lo, kind="stable")
        lo, reach = lo[order], np.maximum.accumulate(hi[order])
        q = np.flatnonzero(tid == t)
        k = np.searchsorted(lo, start[q], "right") - 1
        out[q] = (k >= 0) & (start[q] <= reach[np.maximum(k, 0)])
    return out
