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

The other direction races too: a device-to-host or device-to-device copy (:data:`OUTPUT_COPY_KINDS`) that starts on
stream B before a kernel of the same instance on stream A ends, launched after it by the same thread with no joining
call between the two launches, copies an output that may be half-written. A copy whose stream the thread made wait
on an event since its previous launch there is ordered by events (the previous inference's output copied behind
this one's compute) and makes no pair. A program that orders such a copy only by a host synchronisation made before
the current inference's kernels were launched looks the same in the API calls: the capture holds no addresses.

Across threads (:func:`find_thread_races`) a consumer thread that never copies to the device (whatever it reads
there another thread put there) launches copies or kernels on its stream while the kernels of a producer thread
(one that copies inputs to the device) run on another; the n-th item of each (their own NVTX ranges, in start
order) are paired. A pair is unordered when neither thread made a joining call that orders it: no call of the
consumer from the kernel's launch to its own, no call of the producer that started after the kernel's launch and
returned before the consumer's launch.

Pipelining done right (the next inference's copy overlapping this one's compute, streams joined by events) makes no
pair. The pairs' overlap is GPU time the streams' overlap statistics must not count as a saving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture.blockwise import blocks
from profiler.capture.frames import GRAPH, KERNEL, MEMCPY, CopyKind
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

OUTPUT_COPY_KINDS = (int(CopyKind.DtoH), int(CopyKind.DtoD))
"""Copies that read device memory a kernel may still be writing: the consumers of an output-copy race."""

FEEDING_COPY_KIND = int(CopyKind.HtoD)
"""The copy that makes a thread a producer across threads (it feeds the GPU itself); a thread that launched none
is a consumer: what it reads on the device another thread put there. Threads that both feed (independent workers,
each with its own input) are never paired."""
ITEM_DEPTH = 0
"""NVTX nesting depth of a thread's items (its top-level ranges; of its most numerous series): a producer's item n
is paired with a consumer's item n by their index in their series."""

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
    output_pairs: int = 0  # pairs whose consumer is a device-to-host / device-to-device copy
    threads: dict[tuple[int, int], int] = field(default_factory=dict)  # (producer tid, consumer tid) -> pairs
    streams: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (device, A, B) -> pairs
    output_streams: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (device, kernel's, copy's)
    examples: list[dict[str, Any]] = field(default_factory=list)
    spans: tuple[np.ndarray, ...] = ()  # (device, overlap start, overlap end, copy involved) per pair

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
        waited = _waited(act, rows, waits)
        for part, late in zip(np.split(rows, np.flatnonzero(np.diff(k)) + 1),
                              np.split(waited, np.flatnonzero(np.diff(k)) + 1)):
            if len(part) < 2:
                continue
            found = [f for f in (_pairs_of(act, part, joins), _output_pairs_of(act, part[~late], joins))
                     if f is not None]
            if found:
                out.racing_instances += 1
                pieces.extend(found)
    if pieces:
        _tally(out, act, pieces)
    return out


def _waited(act: Any, rows: np.ndarray, waits: np.ndarray) -> np.ndarray:
    """Whether the thread made a stream wait between its previous launch on each row's stream and the row's
    launch: a copy so joined is ordered by events, whatever it copies."""
    if not len(waits) or not len(rows):
        return np.zeros(len(rows), dtype=bool)
    launch, stream = act.api_start_ns[rows], act.stream_id[rows]
    order = np.lexsort((launch, stream))
    prev = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
    same = stream[order][1:] == stream[order][:-1]
    prev[order[1:][same]] = launch[order][:-1][same]
    return np.searchsorted(waits, launch, "left") > np.searchsorted(waits, prev, "right")


def _output_pairs_of(act: Any, rows: np.ndarray, joins: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(kernel rows, copy rows, overlap start, overlap end) of one instance's output-copy races: a device-reading
    copy launched after a kernel of another stream, no joining call between, starting before the kernel ends."""
    copies = rows[(act.kind[rows] == MEMCPY) & np.isin(act.copy_kind[rows], OUTPUT_COPY_KINDS)]
    kerns = rows[act.kind[rows] == KERNEL]
    if not len(copies) or not len(kerns):
        return None
    pa, pb = [], []
    for c in copies.tolist():
        k = kerns[(act.api_start_ns[kerns] < act.api_start_ns[c]) & (act.stream_id[kerns] != act.stream_id[c])
                  & (act.device_id[kerns] == act.device_id[c]) & (act.start_ns[c] < act.end_ns[kerns])]
        lo = np.searchsorted(joins, act.api_start_ns[k], "left")
        k = k[np.searchsorted(joins, act.api_start_ns[c], "left") <= lo]
        pa.extend(k.tolist())
        pb.extend([c] * len(k))
    return _spans(act, pa, pb)


def _spans(act: Any, pa: list[int], pb: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(producer rows, consumer rows, overlap start, overlap end) of pairs; the overlap is empty (start = end)
    where the consumer ran before the producer started."""
    if not pa:
        return None
    a, b = np.array(pa, np.int64), np.array(pb, np.int64)
    s = np.maximum(act.start_ns[a], act.start_ns[b])
    return a, b, s, np.maximum(s, np.minimum(act.end_ns[a], act.end_ns[b]))


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
    out.pairs, out.copy_producers = len(a), int((act.kind[a] != KERNEL).sum())
    out.output_pairs = int((act.kind[b] != KERNEL).sum())
    copy = (act.kind[a] != KERNEL) | (act.kind[b] != KERNEL)
    out.spans = (act.device_id[a], s, e, copy)
    out.overlap_ns = overlap_of([out])[0]
    for d, sa, sb, o in zip(act.device_id[a].tolist(), act.stream_id[a].tolist(), act.stream_id[b].tolist(),
                            (act.kind[b] != KERNEL).tolist()):
        into = out.output_streams if o else out.streams
        into[d, sa, sb] = into.get((d, sa, sb), 0) + 1
    for i in range(min(MAX_EXAMPLES, len(a))):
        ex = {"producer": _what(act, a[i]), "producer_stream": int(act.stream_id[a[i]]),
              "kernel_stream": int(act.stream_id[b[i]]), "kernel_start_ns": int(act.start_ns[b[i]]),
              "overlap_us": float(e[i] - s[i]) / 1e3}
        if act.kind[b[i]] != KERNEL:  # an output copy: the consumer is the copy, the producer a kernel
            ex = {"producer": "kernel", "producer_stream": int(act.stream_id[a[i]]),
                  "consumer": _what(act, b[i]), "consumer_stream": int(act.stream_id[b[i]]),
                  "consumer_start_ns": int(act.start_ns[b[i]]), "producer_end_ns": int(act.end_ns[a[i]]),
                  "overlap_us": float(e[i] - s[i]) / 1e3}
        out.examples.append(ex)


def _what(act: Any, row: int) -> str:
    k = int(act.kind[row])
    return "kernel" if k == KERNEL else "copy" if k == MEMCPY else "memset"


def _items(table: Any, tid: int) -> np.ndarray:
    """(start, end, index) of thread ``tid``'s items: its top-level NVTX ranges of its most numerous series, in
    start order, with their index in the series over the whole capture (shape (n, 3); empty without ranges)."""
    inst = table.instances
    mine = inst[(inst["tid"].to_numpy() == tid) & (inst["depth"].to_numpy() == ITEM_DEPTH)]
    if not len(mine):
        return np.zeros((0, 3), np.int64)
    sid = mine["series_id"].to_numpy()
    ids, counts = np.unique(sid, return_counts=True)
    pick = mine[sid == ids[np.argmax(counts)]]
    return np.stack([pick["start_ns"].to_numpy(), pick["end_ns"].to_numpy(), pick["idx"].to_numpy()],
                    axis=1).astype(np.int64)


def _roles(act: Any) -> tuple[list[int], list[int]]:
    """(producer threads: they copy host-to-device, consumer threads: they never do) among the threads that
    launched GPU work."""
    known = act.api_start_ns > np.iinfo(np.int64).min
    tids = np.unique(act.api_tid[known])
    feeds = set(np.unique(act.api_tid[known & (act.kind == MEMCPY) & (act.copy_kind == FEEDING_COPY_KIND)]).tolist())
    return [t for t in tids.tolist() if t in feeds], [t for t in tids.tolist() if t not in feeds]


def _join_spans(api: Any, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of thread ``tid``'s joining calls, in start order."""
    if not len(api):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    joins = np.array([base_api_name(str(n)) in JOIN_CALLS for n in api.names], dtype=bool)
    rows = np.flatnonzero(joins[api.name_code] & (api.tid == tid))
    order = np.argsort(api.start_ns[rows], kind="stable")
    return api.start_ns[rows][order], api.end_ns[rows][order]


def find_thread_races(table: Any) -> Races:
    """The unordered producer/consumer pairs across threads of one process (see the module docstring): the
    instances are the consumers' items paired with a producer's."""
    out = Races()
    act = table.activity
    if table.window or not len(act) or act.stream_id.min() == act.stream_id.max():
        return out
    producers, consumers = _roles(act)
    pieces = []
    for t2 in consumers:
        items2 = _items(table, t2)
        for t1 in producers:
            if (t1 >> 24) != (t2 >> 24) or not len(items2):
                continue
            items1 = _items(table, t1)
            n = len(np.intersect1d(items1[:, 2], items2[:, 2]))
            if not n:
                continue
            out.instances += n
            found = _thread_pairs(act, table.api, t1, t2, items1, items2)
            out.racing_instances += len(found)
            pieces.extend(found)
            for p in found:
                out.threads[t1 & 0xFFFFFF, t2 & 0xFFFFFF] = out.threads.get((t1 & 0xFFFFFF, t2 & 0xFFFFFF), 0) + len(p[0])
    if pieces:
        _tally(out, act, pieces)
    return out


def _thread_pairs(act: Any, api: Any, t1: int, t2: int, items1: np.ndarray, items2: np.ndarray) -> list:
    """The racing pairs (as :func:`_spans`) of each paired item that holds one: the producer's kernels launched in
    its item of index n, the consumer's copies and kernels launched in its item of index n."""
    rows1, rows2 = _launched_by(act, t1), _launched_by(act, t2)
    rows1 = rows1[act.kind[rows1] == KERNEL]
    cons = (act.kind[rows2] == KERNEL) | ((act.kind[rows2] == MEMCPY) & np.isin(act.copy_kind[rows2], OUTPUT_COPY_KINDS))
    rows2 = rows2[cons]
    if not len(rows1) or not len(rows2):
        return []
    j1s, j1e = _join_spans(api, t1)
    j2s, _ = _join_spans(api, t2)
    n1, n2 = _item_of(items1, act.api_start_ns[rows1]), _item_of(items2, act.api_start_ns[rows2])
    n1 = np.where(n1 >= 0, items1[np.maximum(n1, 0), 2], -1)  # the item's index in its series
    n2 = np.where(n2 >= 0, items2[np.maximum(n2, 0), 2], -1)
    found = []
    for i in np.intersect1d(n1[n1 >= 0], n2[n2 >= 0]).tolist():
        pa, pb = [], []
        ks = rows1[n1 == i]
        for c in rows2[n2 == i].tolist():
            tc = act.api_start_ns[c]
            k = ks[(act.api_start_ns[ks] < tc) & (act.stream_id[ks] != act.stream_id[c])
                   & (act.device_id[ks] == act.device_id[c]) & (act.start_ns[c] < act.end_ns[ks])]
            if not len(k):
                continue
            tk = act.api_start_ns[k]
            by_t2 = np.searchsorted(j2s, tc, "left") > np.searchsorted(j2s, tk, "left")  # a consumer call between
            nxt = np.searchsorted(j1s, tk, "left")  # the producer's first joining call after the launch
            by_t1 = (nxt < len(j1s)) & (j1e[np.minimum(nxt, len(j1s) - 1)] <= tc)
            k = k[~by_t2 & ~by_t1]
            pa.extend(k.tolist())
            pb.extend([c] * len(k))
        got = _spans(act, pa, pb)
        if got is not None:
            found.append(got)
    return found


def _item_of(items: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The item (index into ``items``) holding each time in ``t`` (its start <= t <= its end); -1 for none."""
    k = np.searchsorted(items[:, 0], t, "right") - 1
    ok = (k >= 0) & (t <= items[np.maximum(k, 0), 1])
    return np.where(ok, k, -1)


def overlap_of(found: list[Races]) -> tuple[int, int]:
    """(union of the pairs' overlaps, its part where a copy is involved) in ns over several finders' races,
    summed over devices."""
    parts = [r.spans for r in found if r.spans]
    if not parts:
        return 0, 0
    dev, s, e, copy = (np.concatenate([p[i] for p in parts]) for i in range(4))
    total = part = 0
    for d in np.unique(dev).tolist():
        on = dev == d
        total += int(intervals.union_length(s[on], e[on]))
        part += int(intervals.union_length(s[on & copy], e[on & copy]))
    return total, part
