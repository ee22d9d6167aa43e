"""The GPU work (kernels, copies, memsets, graph launches) and the host calls (CUDA API, OS runtime) of a
trace as parallel arrays: the trace's own columns where they need no fixing, launches marked, calls
nested in another call of their thread marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.capture.frames import (
    API_CATEGORIES, COPY_KINDS, GRAPH, KERNEL, MEMCPY, MEMSET, ApiCategory, codes_in, factor, frame_of, i64,
    is_value, not_before,
)
from profiler.capture.blockwise import Reach
from profiler.capture.keys import ROW_CHUNK, Sorted, ThreadKeys, blocks

@dataclass
class Activity:
    """GPU work (kernels, memcpy, memset, graph launches) as parallel arrays, kernels first."""

    kind: np.ndarray  # int8 index into KIND_NAMES
    start_ns: np.ndarray
    end_ns: np.ndarray
    device_id: np.ndarray
    stream_id: np.ndarray
    api_tid: np.ndarray
    api_start_ns: np.ndarray  # INT64_MIN where the launching call is not in the capture
    bytes: np.ndarray
    copy_kind: np.ndarray  # int8 index into COPY_KINDS
    pageable: np.ndarray  # bool: a host side in pageable memory
    is_launch: np.ndarray  # bool: first activity of a kernel / graph launch call
    row: np.ndarray  # row number in the trace frame of its kind
    sorted_by_start: bool | None = None  # True: rows in start order (build_activity's); None: not known

    def __len__(self) -> int:
        return len(self.kind)


def _first_of_launch(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """True for the first activity of each (process, correlation id); unknown ids (< 0) always count."""
    out = np.ones(len(corr), dtype=bool)
    if len(corr) < 2 or _distinct_ids(pid, corr):
        return out
    known = np.flatnonzero(corr >= 0)
    if len(known) < 2:
        return out
    order = known[np.lexsort((known, corr[known], pid[known]))]
    dup = (corr[order][1:] == corr[order][:-1]) & (pid[order][1:] == pid[order][:-1])
    out[order[1:][dup]] = False
    return out


def _distinct_ids(pid: np.ndarray, corr: np.ndarray) -> bool:
    """Whether no two rows share a (process, correlation id), seen without a sort: one process (a
    constant column) whose ids rise row after row, as one stream's launches do."""
    if not (pid.strides == (0,) or (pid == pid[0]).all()):
        return False
    for sl in blocks(len(corr) - 1, ROW_CHUNK):  # each row below the next, a block of rows at a time
        if not (corr[sl.start + 1:sl.stop + 1] > corr[sl]).all():
            return False
    return True


def build_activity(trace: Any) -> Activity:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in Activity.__dataclass_fields__ if k != "sorted_by_start"}
    int64_min = np.iinfo(np.int64).min
    for code, attr in enumerate(("kernels", "memcpy", "memset", "graphs")):
        df = frame_of(trace, attr)
        n = len(df)
        if n == 0:
            continue
        start = i64(df, "start_ns", 0)
        tid = i64(df, "api_tid", -1)
        parts["kind"].append(np.full(n, code, dtype=np.int8))
        parts["start_ns"].append(start)
        parts["end_ns"].append(not_before(i64(df, "end_ns", 0), start))
        parts["device_id"].append(i64(df, "device_id", -1))
        parts["stream_id"].append(i64(df, "stream_id", -1))
        parts["api_tid"].append(tid)
        # a launch whose call is not in the capture has api_tid -1: its api_start_ns means nothing
        api_start = i64(df, "api_start_ns", int64_min)
        parts["api_start_ns"].append(np.where(tid < 0, int64_min, api_start) if (tid < 0).any() else api_start)
        if code == MEMCPY:
            parts["bytes"].append(np.maximum(i64(df, "bytes", 0), 0))
            parts["copy_kind"].append(codes_in(df, "copy_kind", COPY_KINDS))
            parts["pageable"].append(is_value(df, "src_kind", "pageable") | is_value(df, "dst_kind", "pageable"))
        else:
            parts["bytes"].append(np.maximum(i64(df, "bytes", 0), 0) if code == MEMSET else np.zeros(n, np.int64))
            parts["copy_kind"].append(np.zeros(n, dtype=np.int8))
            parts["pageable"].append(np.zeros(n, dtype=bool))
        if code in (KERNEL, GRAPH):
            # kernels of one graph launch (node-level tracing) share its correlation id: one launch
            parts["is_launch"].append(_first_of_launch(i64(df, "pid", -1), i64(df, "correlation_id", -1)))
        else:
            parts["is_launch"].append(np.zeros(n, dtype=bool))
        parts["row"].append(np.arange(n, dtype=np.int32 if n < 1 << 31 else np.int64))
    if not parts["kind"]:
        empty = {k: np.zeros(0, dtype=np.int64) for k in parts}
        empty["kind"] = empty["copy_kind"] = np.zeros(0, dtype=np.int8)
        empty["pageable"] = empty["is_launch"] = np.zeros(0, dtype=bool)
        return Activity(**empty, sorted_by_start=True)
    act = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in parts.items()}
    start = act["start_ns"]
    if len(start) > 1 and not (start[1:] >= start[:-1]).all():
        # one order by start for every consumer: each union of the activity then needs no sort of its own
        order = np.argsort(start, kind="stable")
        act = {k: v[order] for k, v in act.items()}
    return Activity(**act, sorted_by_start=True)


@dataclass
class HostCalls:
    """Host-side intervals of one kind (CUDA API calls or OS runtime calls)."""

    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_code: np.ndarray  # index into ``names``
    names: np.ndarray  # object array of distinct names
    category: np.ndarray  # index into API_CATEGORIES (0 for OS runtime)
    top_level: np.ndarray  # bool: not nested inside another call of the same thread
    _blocking: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tid)

    def name_of(self, rows: np.ndarray) -> np.ndarray:
        return self.names[self.name_code[rows]]

    @property
    def blocking_sync(self) -> np.ndarray:
        """Synchronisation calls that block the host (``*Synchronize``); ``cudaStreamWaitEvent`` and
        queries are GPU-side dependencies or polls, not host waits."""
        if self._blocking is None:
            names = self.sync_names()
            self._blocking = (self.category == ApiCategory.sync) & (names[self.name_code] if len(self.name_code) else
                                                     np.zeros(0, dtype=bool))
        return self._blocking

    def sync_names(self) -> np.ndarray:
        """Per distinct name (``names``), whether a sync-category call of that name blocks the host."""
        return np.array(["Synchronize" in str(n) for n in self.names], dtype=bool)

    def named_prefix(self, prefixes: tuple[str, ...]) -> np.ndarray:
        """Boolean mask of the calls whose name starts with one of ``prefixes``."""
        wanted = np.array([str(n).startswith(prefixes) for n in self.names], dtype=bool)
        return wanted[self.name_code] if len(self.name_code) else np.zeros(0, dtype=bool)


def build_host_calls(trace: Any, attr: str) -> HostCalls:
    df = frame_of(trace, attr)
    tid = i64(df, "global_tid", -1)
    if "global_tid" not in df.columns and "tid" in df.columns:
        tid = i64(df, "tid", -1)
    start = i64(df, "start_ns", 0)
    end = not_before(i64(df, "end_ns", 0), start)
    cat = codes_in(df, "category", API_CATEGORIES)
    code, names = factor(df, "name", small=True)  # the narrowest codes: one byte a call for most captures
    return HostCalls(tid=tid, start_ns=start, end_ns=end, name_code=code, names=names, category=cat,
                     top_level=np.ones(len(df), dtype=bool))


def mark_top_level(calls: HostCalls, srt: Sorted, keys: ThreadKeys) -> None:
    """Flag calls nested inside an earlier call of the same thread (a runtime call's driver calls).

    A call is nested when its end key is not past the furthest end key of the calls sorted before it (their
    :class:`~profiler.capture.blockwise.Reach`); the sorted rows are walked ``ROW_CHUNK`` at a time, so no
    full-length gather of the calls' times is made."""
    if len(calls) == 0:
        return
    top = np.ones(len(calls), dtype=bool)
    reach = Reach()
    for sl in blocks(len(srt), ROW_CHUNK):
        end_key = keys.shifted(srt.key[sl], srt.part(calls.start_ns, sl.start, sl.stop),
                               srt.part(calls.end_ns, sl.start, sl.stop))
        top[srt.rows(sl.start + np.flatnonzero(end_key <= reach.before_each(end_key)))] = False
    calls.top_level = top
