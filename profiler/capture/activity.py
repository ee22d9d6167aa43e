"""The GPU work (kernels, copies, memsets, graph launches) and the host calls (CUDA API, OS runtime) of a
trace as parallel arrays: the trace's own columns where they need no fixing, launches marked, calls
nested in another call of their thread marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture.frames import (
    API_CATEGORIES, COPY_KINDS, GRAPH, KERNEL, KIND_NAMES, MEMCPY, MEMSET, ApiCategory, codes_in, factor, frame_of,
    i64, is_value, not_before,
)
from profiler.capture.blockwise import Reach
from profiler.capture.keys import ROW_CHUNK, Sorted, ThreadKeys, blocks, row_index


class SparseInts:
    """An integer column that is zero on most rows, held as its nonzero rows and their values only: the bytes
    of GPU work, which only copies and memsets move (a kernel's row costs nothing).

    Indexing it with non-negative row positions, a mask or a slice gives the int64 values of those rows, as
    the dense column would; :meth:`take` gives the rows as another sparse column."""

    def __init__(self, rows: np.ndarray, values: np.ndarray, n: int):
        self.rows = rows  # increasing positions of the nonzero rows
        self.values = np.asarray(values, dtype=np.int64)
        self.n = int(n)

    @classmethod
    def from_dense(cls, values: np.ndarray) -> "SparseInts":
        rows = np.flatnonzero(values)
        return cls(row_index(rows), values[rows], len(values))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: slice | np.ndarray) -> np.ndarray:
        if isinstance(index, slice) and index.indices(self.n)[2] == 1:
            lo, hi, _ = index.indices(self.n)
            out = np.zeros(max(hi - lo, 0), dtype=np.int64)
            a, b = np.searchsorted(self.rows, [lo, hi])
            out[self.rows[a:b] - lo] = self.values[a:b]
            return out
        index = self._positions(index)
        out = np.zeros(index.shape, dtype=np.int64)
        if len(self.rows) and index.size:
            k = np.minimum(np.searchsorted(self.rows, index), len(self.rows) - 1)
            hit = self.rows[k] == index
            out[hit] = self.values[k[hit]]
        return out

    def take(self, index: slice | np.ndarray) -> "SparseInts":
        """The column of the rows ``index`` (a slice, a mask, or positions in the order wanted), sparse."""
        if isinstance(index, slice) and index.indices(self.n)[2] == 1:
            lo, hi, _ = index.indices(self.n)
            a, b = np.searchsorted(self.rows, [lo, hi])
            return SparseInts(self.rows[a:b] - lo, self.values[a:b], max(hi - lo, 0))
        index = self._positions(index)
        if not len(self.rows):
            return SparseInts(self.rows[:0], self.values[:0], len(index))
        listed = np.zeros(self.n, dtype=bool)
        listed[self.rows] = True
        pos = np.flatnonzero(listed[index])
        return SparseInts(row_index(pos), self[index[pos]], len(index))

    def _positions(self, index: slice | np.ndarray) -> np.ndarray:
        if isinstance(index, slice):
            return np.arange(*index.indices(self.n))
        index = np.asarray(index)
        return np.flatnonzero(index) if index.dtype == bool else index


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
    bytes: np.ndarray | SparseInts  # int64 per row; build_activity's holds the copies' and memsets' only
    copy_kind: np.ndarray  # int8 index into COPY_KINDS
    pageable: np.ndarray  # bool: a host side in pageable memory
    is_launch: np.ndarray  # bool: first activity of a kernel / graph launch call
    row: np.ndarray | None  # row number in the trace frame of its kind; None: see ``row_base``
    row_base: np.ndarray | None = None  # with ``row`` None: frame row = position - row_base[kind]
    sorted_by_start: bool | None = None  # True: rows in start order (build_activity's); None: not known

    def __len__(self) -> int:
        return len(self.kind)

    def frame_rows(self, rows: np.ndarray) -> np.ndarray:
        """The row numbers in the trace frame of their kind of the activity rows at positions ``rows``."""
        if self.row is not None:
            return self.row[rows]
        assert self.row_base is not None
        return rows - self.row_base[self.kind[rows]]

    def select(self, rows: slice | np.ndarray) -> "Activity":
        """The activity of ``rows``: a slice (the arrays are views) or a mask (the rows keep their order)."""
        fields = {k: getattr(self, k)[rows] for k in _ROW_ARRAYS}
        row, base = self.row, self.row_base
        if row is not None:
            row = row[rows]
        elif isinstance(rows, slice):
            assert base is not None
            base = base - rows.indices(len(self))[0]
        else:
            row, base = row_index(self.frame_rows(np.flatnonzero(rows))), None
        kept = self.bytes.take(rows) if isinstance(self.bytes, SparseInts) else self.bytes[rows]
        return Activity(**fields, bytes=kept, row=row, row_base=base, sorted_by_start=self.sorted_by_start)


_ROW_ARRAYS = ("kind", "start_ns", "end_ns", "device_id", "stream_id", "api_tid", "api_start_ns", "copy_kind",
               "pageable", "is_launch")
"""The Activity fields that are plain arrays with one value per row."""


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
    """The trace's GPU work, kinds in ``KIND_NAMES`` order, then in start order when they are not already."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _ROW_ARRAYS}
    byte_rows: list[np.ndarray] = []
    byte_values: list[np.ndarray] = []
    first = np.zeros(len(KIND_NAMES), dtype=np.int64)  # position of each kind's first row
    n_rows = 0
    for code, attr in enumerate(("kernels", "memcpy", "memset", "graphs")):
        df = frame_of(trace, attr)
        first[code] = n_rows
        if len(df) == 0:
            continue
        for k, v in _kind_columns(df, code).items():
            parts[k].append(v)
        if code in (MEMCPY, MEMSET):
            b = np.maximum(i64(df, "bytes", 0), 0)
            nonzero = np.flatnonzero(b)
            byte_rows.append(nonzero + n_rows)
            byte_values.append(b[nonzero])
        n_rows += len(df)
    none = [np.zeros(0, dtype=np.int64)]
    nbytes = SparseInts(row_index(np.concatenate(byte_rows or none)), np.concatenate(byte_values or none), n_rows)
    if not n_rows:
        empty = {k: np.zeros(0, dtype=np.int64) for k in parts}
        empty["kind"] = empty["copy_kind"] = np.zeros(0, dtype=np.int8)
        empty["pageable"] = empty["is_launch"] = np.zeros(0, dtype=bool)
        return Activity(**empty, bytes=nbytes, row=None, row_base=first, sorted_by_start=True)
    act = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in parts.items()}
    start = act["start_ns"]
    if len(start) > 1 and not (start[1:] >= start[:-1]).all():
        # one order by start for every consumer: each union of the activity then needs no sort of its own
        order = np.argsort(start, kind="stable")
        act = {k: v[order] for k, v in act.items()}
        row = row_index(order - first[act["kind"]])  # the frame row each sorted position came from
        return Activity(**act, bytes=nbytes.take(order), row=row, sorted_by_start=True)
    return Activity(**act, bytes=nbytes, row=None, row_base=first, sorted_by_start=True)


def _kind_columns(df: pd.DataFrame, code: int) -> dict[str, np.ndarray]:
    """The per-row arrays (``_ROW_ARRAYS``) of one kind's trace frame ``df``: ``code`` in ``KIND_NAMES``."""
    n = len(df)
    int64_min = np.iinfo(np.int64).min
    start = i64(df, "start_ns", 0)
    tid = i64(df, "api_tid", -1)
    # a launch whose call is not in the capture has api_tid -1: its api_start_ns means nothing
    api_start = i64(df, "api_start_ns", int64_min)
    out = {"kind": np.full(n, code, dtype=np.int8), "start_ns": start,
           "end_ns": not_before(i64(df, "end_ns", 0), start), "device_id": i64(df, "device_id", -1),
           "stream_id": i64(df, "stream_id", -1), "api_tid": tid,
           "api_start_ns": np.where(tid < 0, int64_min, api_start) if (tid < 0).any() else api_start}
    if code == MEMCPY:
        out["copy_kind"] = codes_in(df, "copy_kind", COPY_KINDS)
        out["pageable"] = is_value(df, "src_kind", "pageable") | is_value(df, "dst_kind", "pageable")
    else:
        out["copy_kind"] = np.zeros(n, dtype=np.int8)
        out["pageable"] = np.zeros(n, dtype=bool)
    if code in (KERNEL, GRAPH):
        # kernels of one graph launch (node-level tracing) share its correlation id: one launch
        out["is_launch"] = _first_of_launch(i64(df, "pid", -1), i64(df, "correlation_id", -1))
    else:
        out["is_launch"] = np.zeros(n, dtype=bool)
    return out


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
