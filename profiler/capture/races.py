"""Unsynchronised streams: GPU work one stream still runs when a kernel of the same inference starts on another,
with nothing in the capture's API calls that orders the two.

A kernel on stream B that starts while a copy (or kernel) on stream A is still running overlaps it: fine when the
two are independent, a race when the kernel reads what the copy writes. The capture cannot see memory addresses, so
a pair counts as racing only when the program gave the GPU no way to order them and the producer's own stream has
no consumer:

- both were launched by one thread within one inference instance, the producer first (an instance owns the launches
  from the end of the thread's previous instance to its own end: the input copy issued just before TensorRT's
  enqueue range belongs to that inference, and the next inference's copy issued after it does not);
- between the producer's launch call and the kernel's, that thread made no joining call (:data:`JOIN_CALLS`: a
  cudaStreamWaitEvent, a stream, event, context or device synchronisation);
- no kernel was launched on the producer's stream after it within the instance (work that its own stream consumes,
  as independent chains on several streams do, is not handed to another stream);
- the thread made no stream wait (:data:`STREAM_WAITS`) from the producer's launch until its next launch on the
  producer's stream (the end of the capture for the last): a program that joins its copy stream into its compute
  stream with events is pipelining, its copy meant for a later kernel (the next batch's input, copied before this
  batch's kernels are launched);
- the kernel is on the same device and starts before the producer ends.

Pipelining done right (the next inference's copy overlapping this one's compute, streams joined by events) makes no
pair. The pairs' overlap is GPU time the streams' overlap statistics must not count as a saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture.blockwise import blocks
from profiler.capture.frames import GRAPH, KERNEL, MEMCPY
from profiler.capture.nsys_names import base_api_name

JOIN_CALLS = frozenset({
    "cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaStreamSynchronize", "cuStreamSynchronize",
    "cudaEventSynchronize", "cuEventSynchronize", "cudaDeviceSynchronize", "cuCtxSynchronize",
    "cudaThreadSynchronize", "cuStreamWaitValue32", "cuStreamWaitValue64", "cuStreamBatchMemOp",
    "cudaStreamQuery", "cuStreamQuery", "cudaEventQuery", "cuEventQuery"})
"""CUDA API calls (base names) that order work on two streams, or let the host wait for one before launching on
the other (a query loop polls until the work is done): one of them between two launches makes them no race."""

STREAM_WAITS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent", "cuStreamWaitValue32", "cuStreamWaitValue64"})
"""Joining calls that make one stream wait for another on the GPU: the program orders its streams with them."""

MAX_EXAMPLES = 5
"""Racing pairs listed in the evidence (the first ones)."""


@dataclass
class Races:
    """What :func:`find_races` found over the instances it checked."""

    instances: int = 0  # instances checked
    racing_instances: int = 0  # instances holding at least one racing pair
    pairs: int = 0
    copy_producers: int = 0  # pairs whose producer is a copy or memset
    overlap_ns: int = 0  # union of the pairs' overlaps, summed over devices
    copy_overlap_ns: int = 0  # the same, of the pairs whose producer is a copy
    streams: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (device, A, B) -> pairs
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.racing_instances / self.instances if self.instances else 0.0


def _launched_by(act: Any, tid: int) -> np.ndarray:
    """Rows of the activity thread ``tid`` launched (its launch call in the capture), a block at a time."""
    none = np.iinfo(np.int64).min
    parts = [sl.start + np.flatnonzero((act.api_tid[sl] == tid) & (act.api_start_ns[sl] > none))
             for sl in blocks(len(act))]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _join_times(api: Any, tid: int, names: frozenset[str] = JOIN_CALLS) -> np.ndarray:
    """Sorted start times (ns) of thread ``tid``'s calls named ``names`` (base names)."""
    if not len(api):
        return np.zeros(0, np.int64)
    joins = np.array([base_api_name(str(n)) in names for n in api.names], dtype=bool)
    if not joins.any():
        return np.zeros(0, np.int64)
    rows = np.concatenate([sl.start + np.flatnonzero(joins[api.name_code[sl]] & (api.tid[sl] == tid))
                           for sl in blocks(len(api))])
    return np.sort(api.start_ns[rows])


def find_races(table: Any, series_id: int | None) -> Races:
    """The racing pairs of the instances of ``series_id`` in ``table`` (none without an NVTX unit: the capture's
    one window is no inference)."""
    out = Races()
    if series_id is None or table.window:
        return out
    act = table.activity
    inst = table.instances_of(series_id)
    out.instances = len(inst)
    if not len(act) or act.stream_id.min() == act.stream_id.max():  # one stream orders everything itself
        return out
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for tid in np.unique(inst["tid"].to_numpy()).tolist():
        mine = inst[inst["tid"].to_numpy() == tid]
        ends = np.sort(mine["end_ns"].to_numpy().astype(np.int64))
        rows = _launched_by(act, tid)
        if not len(rows):
            continue
        launch = act.api_start_ns[rows]
        if len(np.unique(act.stream_id[rows])) < 2:
            continue
        k = np.searchsorted(ends, launch, "left")  # the instance owning each launch: (end before, own end]
        ok = k < len(ends)
        rows, k = rows[ok], k[ok]
        waits = _join_times(table.api, tid, STREAM_WAITS)
        rows, k = _unjoined(act, rows, k, waits)
        order = np.argsort(k, kind="stable")
        rows, k = rows[order], k[order]
        joins = _join_times(table.api, tid)
        for part in np.split(rows, np.flatnonzero(np.diff(k)) + 1):
            found = _pairs_of(act, part, joins) if len(part) > 1 else None
            if found is not None:
                out.racing_instances += 1
                pieces.append(found)
    if pieces:
        _tally(out, act, pieces)
    return out


def _unjoined(act: Any, rows: np.ndarray, k: np.ndarray, waits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The thread's launches (``rows``, of instances ``k``) less the copies and memsets followed by a stream wait
    before the thread's next launch on their stream: their stream is joined into another with events. Kernels
    stay (they are also the consumers)."""
    if not len(waits):
        return rows, k
    launch, stream = act.api_start_ns[rows], act.stream_id[rows]
    order = np.lexsort((launch, stream))
    nxt = np.full(len(rows), np.iinfo(np.int64).max, dtype=np.int64)
    same = stream[order][1:] == stream[order][:-1]
    nxt[order[:-1][same]] = launch[order][1:][same]
    joined = np.searchsorted(waits, nxt, "left") > np.searchsorted(waits, launch, "right")
    drop = joined & (act.kind[rows] != KERNEL)
    return rows[~drop], k[~drop]


def _pairs_of(act: Any, rows: np.ndarray, joins: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(producer rows, kernel rows, overlap start, overlap end) of one instance's racing pairs; None when none."""
    rows = rows[np.argsort(act.api_start_ns[rows], kind="stable")]
    stream, kind, launch = act.stream_id[rows], act.kind[rows], act.api_start_ns[rows]
    if len(np.unique(stream)) < 2:
        return None
    is_kernel = kind == KERNEL
    # producers: the work after which its own stream gets no kernel in this instance
    last_kernel = {int(s): int(np.flatnonzero(is_kernel & (stream == s)).max(initial=-1)) for s in np.unique(stream)}
    prod = [j for j in range(len(rows)) if kind[j] != GRAPH and j > last_kernel[int(stream[j])]]
    kern = np.flatnonzero(is_kernel)
    if not prod or not len(kern):
        return None
    pa, pb = [], []
    for j in prod:
        a = rows[j]
        cand = kern[(kern > j) & (stream[kern] != stream[j])]
        b = rows[cand]
        hit = (act.device_id[b] == act.device_id[a]) & (act.start_ns[b] >= act.start_ns[a]) & \
            (act.start_ns[b] < act.end_ns[a])
        if not hit.any():
            continue
        b = b[hit]
        # no joining call of the thread from the producer's launch to the kernel's
        lo = np.searchsorted(joins, launch[j], "left")
        hi = np.searchsorted(joins, act.api_start_ns[b], "left")
        b = b[hi <= lo]
        pa.extend([a] * len(b))
        pb.extend(b.tolist())
    if not pa:
        return None
    a_rows, b_rows = np.array(pa, np.int64), np.array(pb, np.int64)
    return a_rows, b_rows, act.start_ns[b_rows], np.minimum(act.end_ns[a_rows], act.end_ns[b_rows])


def _tally(out: Races, act: Any, pieces: list) -> None:
    """Fill ``out``'s counts, overlap unions and examples from the instances' racing pairs."""
    a = np.concatenate([p[0] for p in pieces])
    b = np.concatenate([p[1] for p in pieces])
    s = np.concatenate([p[2] for p in pieces])
    e = np.concatenate([p[3] for p in pieces])
    copy = act.kind[a] != KERNEL
    out.pairs, out.copy_producers = len(a), int(copy.sum())
    for dev in np.unique(act.device_id[a]).tolist():
        on = act.device_id[a] == dev
        out.overlap_ns += int(intervals.union_length(s[on], e[on]))
        out.copy_overlap_ns += int(intervals.union_length(s[on & copy], e[on & copy]))
    for d, sa, sb in zip(act.device_id[a].tolist(), act.stream_id[a].tolist(), act.stream_id[b].tolist()):
        out.streams[d, sa, sb] = out.streams.get((d, sa, sb), 0) + 1
    for i in range(min(MAX_EXAMPLES, len(a))):
        out.examples.append({
            "producer": _what(act, a[i]), "producer_stream": int(act.stream_id[a[i]]),
            "kernel_stream": int(act.stream_id[b[i]]), "kernel_start_ns": int(act.start_ns[b[i]]),
            "overlap_us": float(e[i] - s[i]) / 1e3})


def _what(act: Any, row: int) -> str:
    k = int(act.kind[row])
    return "kernel" if k == KERNEL else "copy" if k == MEMCPY else "memset"
