"""TensorRT inferences replayed as CUDA graphs: each replay as a range of its own.

``trtexec --useCudaGraph`` (and any service that captures ``enqueueV3`` into a graph) enqueues through
TensorRT once or twice: once to settle lazy initialisation, once while the stream is captured. Every inference
after that is a ``cudaGraphLaunch`` of its own, with no TensorRT range around it: TensorRT's NVTX ranges exist
only while its work is enqueued. Read as they are, such a capture has an enqueue range of one or two instances,
one of which launched nothing ("1 instance: no GPU work"). Here each graph launch call outside TensorRT's
enqueue ranges becomes a range ``cudaGraphLaunch`` in TensorRT's domain, from the call's start to its end:
the host time of the replay, as an enqueue range holds the host time of the enqueue, with the GPU work it
launched attributed to it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture.frames import ApiCategory
from profiler.capture.unit import GRAPH_REPLAY as GRAPH_REPLAY_NAME, TENSORRT_DOMAIN, TENSORRT_UNIT


def graph_replays(ranges: Any, api: Any) -> Any:
    """``ranges`` (:class:`~profiler.capture.series.Ranges`) with one range per graph launch call of ``api``
    outside TensorRT's enqueue ranges, when a TensorRT capture has at least two such calls and more of them
    than instances of its most frequent enqueue range; else ``ranges`` itself."""
    rf = ranges.frame
    trt = np.flatnonzero(np.asarray(ranges.domains, dtype=object) == TENSORRT_DOMAIN)
    if rf.empty or not len(api) or not len(trt):
        return ranges
    enqueue = np.array([bool(TENSORRT_UNIT.match(str(n))) for n in ranges.names], dtype=bool)
    mine = (rf["domain"].to_numpy() == trt[0]) & enqueue[rf["name"].to_numpy()]
    if not mine.any():
        return ranges
    most = int(np.bincount(rf["name"].to_numpy()[mine]).max())
    calls = np.flatnonzero((api.category == ApiCategory.graph_launch) & api.top_level)
    if len(calls) < 2:
        return ranges
    calls = calls[~_inside(api.tid[calls], api.start_ns[calls], rf.loc[mine])]
    if len(calls) < 2 or len(calls) <= most:
        return ranges
    names = np.append(np.asarray(ranges.names, dtype=object), GRAPH_REPLAY_NAME)
    added = pd.DataFrame({"domain": np.full(len(calls), trt[0], np.int64),
                          "name": np.full(len(calls), len(names) - 1, np.int64),
                          "raw_name": np.full(len(calls), -1, np.int64), "start_ns": api.start_ns[calls],
                          "end_ns": api.end_ns[calls], "tid": api.tid[calls]})
    return replace(ranges, frame=pd.concat([rf, added], ignore_index=True), names=names)


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
