"""NVTX range series: the iterations of a capture and what each one cost.

Every NVTX range instance (push/pop or start/end) is one iteration; instances with the same
(domain, normalized name) form a *series*. A capture without NVTX ranges is one window covering all
of its CUDA work. For each instance this module measures, all in integer nanoseconds:

- ``wall_ns``: end - start of the range;
- ``gpu_busy_ns``: the *union* of the GPU intervals (kernels, memcpy, memset, graph launches) whose
  launch API calls were made from inside the instance on its own thread (``api_tid`` equal to the
  range's thread, ``api_start_ns`` within [start, end]). This is not the span from the first to the
  last of them: on a launch-bound loop the span covers nearly the whole iteration while the GPU
  works for a small part of it. ``compute_ns`` (kernels, graphs, memsets) and ``copy_ns`` (memcpy)
  are the same union restricted to one kind of work;
- host side: ``api_ns`` (top-level CUDA API calls on the thread), ``launch_api_ns`` and
  ``launches`` (kernel and graph launches), ``sync_ns`` / ``sync_count``, ``memcpy_api_ns``,
  ``osrt_ns`` (OS runtime calls such as ``clock_nanosleep`` or ``pthread_mutex_lock``).

All joins of ranges with activity are sort-and-sweep per thread: (thread, time) pairs become one
order-preserving int64 key, so a single ``numpy.searchsorted`` attributes millions of rows without a
Python loop over rows or threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterable

import numpy as np
import pandas as pd

from profiler.capture import intervals

WINDOW_NAME = "(capture)"
"""Series name of the single window used when a capture has no NVTX ranges."""

WINDOW_TID = -2
"""Thread id given to the window instance: it owns the work of every thread."""

KIND_NAMES = ("kernel", "memcpy", "memset", "graph")
KERNEL, MEMCPY, MEMSET, GRAPH = range(4)
class CopyKind(IntEnum):
    """``Activity.copy_kind`` codes (0 for anything not a known copy direction)."""

    other = 0
    HtoD = 1
    DtoH = 2
    DtoD = 3
    HtoH = 4
    PtoP = 5


class ApiCategory(IntEnum):
    """``HostCalls.category`` codes (0 for OS runtime calls and unclassified API calls)."""

    other = 0
    launch = 1
    graph_launch = 2
    sync = 3
    memcpy = 4
    memset = 5


#: The names of the codes, in code order (the trace's string vocabularies map onto them by name).
COPY_KINDS = tuple(k.name for k in CopyKind)
API_CATEGORIES = tuple(c.name for c in ApiCategory)
DEVICE_SYNC_NAMES = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize"})

OUTLIER_MEDIAN_RATIO = 1.5
"""An instance is an outlier when its wall time exceeds this multiple of the series median ..."""
OUTLIER_IQR_FENCE = 3.0
"""... and also exceeds Q3 + this many interquartile ranges (so a wide distribution is not all outliers)."""
OUTLIER_MIN_COUNT = 5
"""Series with fewer instances get no outliers: there is no typical instance to compare with."""

# PyTorch's NVTX text carries unique tokens (torch/csrc/profiler: "name, seq = N, op_id = N,
# sizes = [...], input_op_ids = [...]"): without stripping them every op call is its own series.
_PYTORCH_TOKENS = (
    re.compile(r", (?:stashed )?seq = -?\d+"),
    re.compile(r", op_id = \d+"),
    re.compile(r", input_op_ids = \[.*\]$"),
)


def normalize_range_name(name: str) -> str:
    """A range name without per-call unique tokens (PyTorch's ``seq = N``, ``op_id = N``, ...)."""
    if " = " not in name:
        return name
    for pattern in _PYTORCH_TOKENS:
        name = pattern.sub("", name)
    return name


# ----------------------------------------------------------------------------- frame access

def _frame(trace: Any, attr: str) -> pd.DataFrame:
    df = getattr(trace, attr, None)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame()


def i64(df: pd.DataFrame, col: str, fill: int = -1) -> np.ndarray:
    """A column as int64 with missing values (absent column, NA, NaN) replaced by ``fill``."""
    if col not in df.columns:
        return np.full(len(df), fill, dtype=np.int64)
    s = df[col]
    if s.dtype == np.int64:
        return s.to_numpy()
    try:
        return s.to_numpy(dtype=np.int64, na_value=fill)
    except (TypeError, ValueError):
        return pd.to_numeric(s, errors="coerce").fillna(fill).to_numpy(dtype=np.int64)


def not_before(end: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``end`` raised to ``start`` where it lies before it (a corrupt row counts as empty); the array
    itself, not a copy, when every row is in order (the usual case: the trace frame's own column)."""
    return end if (end >= start).all() else np.maximum(end, start)


def factor(df: pd.DataFrame, col: str, fill: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) of a string column without materialising one Python string per row.

    Categorical columns use their codes; others are factorised. Missing values get the code of
    ``fill`` (appended to ``values``), so ``values[codes]`` is always a valid string.
    """
    if col not in df.columns or len(df) == 0:
        return np.zeros(len(df), dtype=np.int64), np.array([fill], dtype=object)
    s = df[col]
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy().astype(np.int64)
        values = np.asarray(s.cat.categories.astype(object), dtype=object)
    else:
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        codes = codes.astype(np.int64)
        values = np.asarray(pd.Index(uniq).astype(object), dtype=object)
    values = np.array([str(v) for v in values] + [fill], dtype=object)
    codes = np.where(codes < 0, len(values) - 1, codes)
    return codes, values


def _codes(df: pd.DataFrame, col: str, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Small-integer codes of a string column's values in ``vocabulary`` (unknown or missing -> 0)."""
    codes, values = factor(df, col)
    lookup = {v: i for i, v in enumerate(vocabulary)}
    table = np.array([lookup.get(v, 0) for v in values], dtype=np.int8)
    return table[codes]


def is_value(df: pd.DataFrame, col: str, value: str) -> np.ndarray:
    """Boolean mask of rows whose ``col`` equals ``value`` (False where the column is absent)."""
    if col not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return (df[col] == value).to_numpy(dtype=bool, na_value=False)


# ----------------------------------------------------------------------------- thread keys

class ThreadKeys:
    """Order-preserving int64 keys for (thread, time) pairs.

    key = thread_code << shift | (time - t0): sorting by key sorts by thread then time, and a
    per-thread search becomes one global ``searchsorted``. When threads x time span would not fit
    in 62 bits, times are replaced by their rank among every time given at construction (so the
    queries must be among them), which keeps the order and the sweep exact.
    """

    def __init__(self, tids: Iterable[np.ndarray], times: Iterable[np.ndarray]):
        tids = [np.asarray(t, dtype=np.int64) for t in tids]
        times = [np.asarray(t, dtype=np.int64) for t in times]
        # distinct threads of each array first (hashing, no sorted copy of millions of ids)
        self.utids = np.unique(np.concatenate([pd.unique(t) for t in tids])) if tids else np.zeros(0, np.int64)
        nonempty = [t for t in times if len(t)]
        self._ranks: np.ndarray | None = None
        if not nonempty:
            self.t0, self.shift = 0, 1
            return
        t0 = min(int(t.min()) for t in nonempty)
        t1 = max(int(t.max()) for t in nonempty)
        shift = max(int(t1 - t0 + 1).bit_length(), 1)
        if shift + max(len(self.utids), 1).bit_length() > 62:
            self._ranks = np.unique(np.concatenate(nonempty))
            t0, shift = 0, max(len(self._ranks).bit_length(), 1)
        self.t0, self.shift = t0, shift

    def code(self, tid: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.utids, np.asarray(tid, dtype=np.int64)).astype(np.int64, copy=False)

    def key(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        key = self.code(tid)
        key <<= self.shift
        if self._ranks is not None:
            key += np.searchsorted(self._ranks, t)
        else:
            key += t
            key -= self.t0
        return key

    def shifted(self, key: np.ndarray, t_from: np.ndarray, t_to: np.ndarray) -> np.ndarray:
        """The keys of (thread, ``t_to``) from those of (thread, ``t_from``), without looking threads up:
        the time is the key's low bits (when times are ranks, they are looked up again)."""
        if self._ranks is not None:
            return (key >> self.shift << self.shift) + np.searchsorted(self._ranks, np.asarray(t_to, dtype=np.int64))
        return key + (np.asarray(t_to, dtype=np.int64) - t_from)


def _index(rows: np.ndarray) -> np.ndarray:
    """Row numbers as int32 when they fit (half the memory of the millions-long permutations)."""
    return rows.astype(np.int32) if len(rows) < 1 << 31 else rows


@dataclass
class Sorted:
    """Rows of one table sorted by (thread, start), with their keys and the permutation used. The keys
    serve while the series table is built (windows, nesting of calls) and are then let go (None)."""

    order: np.ndarray
    key: np.ndarray | None

    def window(self, qkey_lo: np.ndarray, qkey_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions [lo, hi) of the rows whose key lies in [qkey_lo, qkey_hi]."""
        return (np.searchsorted(self.key, qkey_lo, "left"), np.searchsorted(self.key, qkey_hi, "right"))


def expand(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query index, position) pairs for every position in each [lo, hi) window."""
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    q = np.repeat(np.arange(len(lo), dtype=np.int64), n)
    first = np.cumsum(n) - n
    pos = np.arange(total, dtype=np.int64) - np.repeat(first - lo, n)
    return q, pos


# ----------------------------------------------------------------------------- tables

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

    def __len__(self) -> int:
        return len(self.kind)


def _first_of_launch(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """True for the first activity of each (process, correlation id); unknown ids (< 0) always count."""
    out = np.ones(len(corr), dtype=bool)
    known = np.flatnonzero(corr >= 0)
    if len(known) < 2:
        return out
    order = known[np.lexsort((known, corr[known], pid[known]))]
    dup = (corr[order][1:] == corr[order][:-1]) & (pid[order][1:] == pid[order][:-1])
    out[order[1:][dup]] = False
    return out


def build_activity(trace: Any) -> Activity:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in Activity.__dataclass_fields__}
    int64_min = np.iinfo(np.int64).min
    for code, attr in enumerate(("kernels", "memcpy", "memset", "graphs")):
        df = _frame(trace, attr)
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
            parts["copy_kind"].append(_codes(df, "copy_kind", COPY_KINDS))
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
        return Activity(**empty)
    act = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in parts.items()}
    start = act["start_ns"]
    if len(start) > 1 and not (start[1:] >= start[:-1]).all():
        # one order by start for every consumer: each union of the activity then needs no sort of its own
        order = np.argsort(start, kind="stable")
        act = {k: v[order] for k, v in act.items()}
    return Activity(**act)


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
            names = np.array(["Synchronize" in str(n) for n in self.names], dtype=bool)
            self._blocking = (self.category == ApiCategory.sync) & (names[self.name_code] if len(self.name_code) else
                                                     np.zeros(0, dtype=bool))
        return self._blocking

    def named_prefix(self, prefixes: tuple[str, ...]) -> np.ndarray:
        """Boolean mask of the calls whose name starts with one of ``prefixes``."""
        wanted = np.array([str(n).startswith(prefixes) for n in self.names], dtype=bool)
        return wanted[self.name_code] if len(self.name_code) else np.zeros(0, dtype=bool)

    def named(self, names: Iterable[str]) -> np.ndarray:
        """Boolean mask of the calls whose name is in ``names``."""
        wanted = np.isin(self.names, list(names))
        return wanted[self.name_code] if len(self.name_code) else np.zeros(0, dtype=bool)


def build_host_calls(trace: Any, attr: str) -> HostCalls:
    df = _frame(trace, attr)
    tid = i64(df, "global_tid", -1)
    if "global_tid" not in df.columns and "tid" in df.columns:
        tid = i64(df, "tid", -1)
    start = i64(df, "start_ns", 0)
    end = not_before(i64(df, "end_ns", 0), start)
    cat = _codes(df, "category", API_CATEGORIES)
    code, names = factor(df, "name")
    code = code.astype(np.int32) if len(names) < 1 << 31 else code  # half the memory of a row index
    return HostCalls(tid=tid, start_ns=start, end_ns=end, name_code=code, names=names, category=cat,
                     top_level=np.ones(len(df), dtype=bool))


def _mark_top_level(calls: HostCalls, srt: Sorted, keys: ThreadKeys) -> None:
    """Flag calls nested inside an earlier call of the same thread (a runtime call's driver calls)."""
    if len(calls) == 0:
        return
    o = srt.order
    end_key = keys.shifted(srt.key, calls.start_ns[o], calls.end_ns[o])
    prev = np.maximum.accumulate(end_key)
    nested = np.zeros(len(o), dtype=bool)
    nested[1:] = end_key[1:] <= prev[:-1]
    top = np.ones(len(calls), dtype=bool)
    top[o[nested]] = False
    calls.top_level = top


def _sort(keys: ThreadKeys, tid: np.ndarray, t: np.ndarray, tiebreak: np.ndarray | None = None) -> Sorted:
    """Rows sorted by (thread, time); equal keys ordered by ``tiebreak`` (only the tied rows are re-sorted)."""
    key = keys.key(tid, t)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    if tiebreak is not None and len(ks) > 1:
        tie = ks[1:] == ks[:-1]
        if tie.any():
            pos = np.flatnonzero(np.concatenate([tie, [False]]) | np.concatenate([[False], tie]))
            sub = order[pos]
            order[pos] = sub[np.lexsort((tiebreak[sub], key[sub]))]
    return Sorted(order=_index(order), key=ks)


# ----------------------------------------------------------------------------- ranges

@dataclass
class Ranges:
    """Closed NVTX ranges (one row per instance) plus what had to be left out."""

    frame: pd.DataFrame  # domain, name, raw_name (codes), start_ns, end_ns, tid
    never_closed: int = 0
    negative: int = 0
    cross_thread: int = 0
    domains: np.ndarray = field(default_factory=lambda: np.array([""], dtype=object))
    names: np.ndarray = field(default_factory=lambda: np.array([WINDOW_NAME], dtype=object))


def extract_ranges(trace: Any) -> Ranges:
    """Closed push/pop and start/end ranges with normalized names (codes, never per-row strings)."""
    nvtx = _frame(trace, "nvtx")
    cols = ["domain", "name", "start_ns", "end_ns", "tid"]
    if nvtx.empty or "event_type" not in nvtx.columns:
        return Ranges(pd.DataFrame({c: np.zeros(0, np.int64) for c in cols}))
    is_range = (is_value(nvtx, "event_type", "push_pop") | is_value(nvtx, "event_type", "start_end"))
    r = nvtx.loc[is_range]
    end_na = r["end_ns"].isna().to_numpy() if "end_ns" in r.columns else np.ones(len(r), bool)
    start = i64(r, "start_ns", 0)
    end = i64(r, "end_ns", 0)
    negative = (~end_na) & (end < start)
    keep = ~end_na & ~negative
    tid = i64(r, "global_tid", -1)
    end_tid = i64(r, "end_global_tid", -1)
    cross = int(np.count_nonzero(keep & (end_tid >= 0) & (tid >= 0) & (end_tid != tid)))
    dcode, dvalues = factor(r, "domain")
    ncode, nvalues = factor(r, "name")
    norm_codes, norm_values = pd.factorize(pd.Index([normalize_range_name(v) for v in nvalues], dtype=object))
    frame = pd.DataFrame({
        "domain": dcode[keep], "name": norm_codes[ncode[keep]].astype(np.int64),
        "raw_name": ncode[keep], "start_ns": start[keep], "end_ns": end[keep], "tid": tid[keep],
    })
    return Ranges(frame, never_closed=int(end_na.sum()), negative=int(negative.sum()), cross_thread=cross,
                  domains=dvalues, names=np.asarray(norm_values, dtype=object))


# ----------------------------------------------------------------------------- the series table

INSTANCE_METRICS = ("wall_ns", "span_ns", "gpu_busy_ns", "compute_ns", "copy_ns", "kernel_sum_ns", "copy_sum_ns",
                    "copy_bytes", "pageable_copies", "kernels", "launches", "activities", "api_ns",
                    "launch_api_ns", "launch_calls", "sync_ns", "sync_count", "device_sync_count",
                    "memcpy_api_ns", "osrt_ns", "osrt_count")


@dataclass
class SeriesTable:
    """Series (one row each) and their instances (one row each, metrics in ns) for one capture.

    ``instances`` columns: series_id, idx (0-based in start order within the series), tid,
    start_ns, end_ns, the metrics in ``INSTANCE_METRICS``, ``outlier`` (bool), and the [lo, hi)
    windows into the sorted activity / API / OS runtime rows (``act_lo`` ...) that
    :meth:`members` expands.
    """

    series: pd.DataFrame
    instances: pd.DataFrame
    activity: Activity
    api: HostCalls
    osrt: HostCalls
    act_sorted: Sorted
    api_sorted: Sorted
    osrt_sorted: Sorted
    window: bool
    notes: list[str] = field(default_factory=list)

    def rows_of(self, series_id: int) -> slice:
        """Row positions of a series' instances (they are contiguous, in start order)."""
        first = int(self.series["first_row"].iat[series_id])
        return slice(first, first + int(self.series["count"].iat[series_id]))

    def instances_of(self, series_id: int) -> pd.DataFrame:
        return self.instances.iloc[self.rows_of(series_id)]

    def ancestor_share(self, series_id: int) -> dict[int, float]:
        """Other series enclosing this one's instances: series id -> share of its instances inside one."""
        sid = self.instances["series_id"].to_numpy()
        parent = self.instances["parent"].to_numpy()
        rows = np.flatnonzero(sid == series_id)
        if not len(rows):
            return {}
        depth = self.instances["depth"].to_numpy()
        if len(rows) * (int(depth[rows].max()) + 1) > _WALK_MAX_STEPS:  # deep nesting: no parent walk
            shares = _ancestor_share_by_subtrees(self.instances, sid, rows)
            if shares is not None:
                return {a: v for a, v in shares.items() if a != series_id}
        pairs = []
        cur, who = parent[rows], np.arange(len(rows))
        while len(cur):
            ok = cur >= 0
            cur, who = cur[ok], who[ok]
            pairs.append(who * (len(self.series) + 1) + sid[cur])
            cur = parent[cur]
        if not pairs:
            return {}
        uniq = np.unique(np.concatenate(pairs)) % (len(self.series) + 1)
        anc, counts = np.unique(uniq, return_counts=True)
        return {int(a): c / len(rows) for a, c in zip(anc, counts) if a != series_id}

    def subset(self, lo: int, hi: int, *, consume: bool = False) -> "SeriesTable":
        """The table of the events starting in [lo, hi] (the steady state), without re-sorting anything.

        Instances keep their numbers (``idx``) and metrics: an instance's work is launched inside it, so
        all of it is kept when it starts at or after ``lo`` and ``hi`` is past the last GPU end. A window
        instance is cut to what is kept and measured again. ``activity.row`` still indexes the trace.
        ``consume``: this table is not used afterwards; its large arrays are let go as soon as their
        subset is made, so the capture's activity is never held twice.
        """
        act = _filter(self.activity, (self.activity.start_ns >= lo) & (self.activity.start_ns <= hi))
        if consume:
            self.activity = None  # type: ignore[assignment]
        api = _filter(self.api, (self.api.start_ns >= lo) & (self.api.start_ns <= hi))
        if consume:
            self.api = None  # type: ignore[assignment]
        # OS runtime calls (often the largest table) are shared, not copied: they are only read through
        # the instances' windows, and around the steady state's GPU gaps; a window instance owns every row
        osrt = _filter(self.osrt, (self.osrt.start_ns >= lo) & (self.osrt.start_ns <= hi)) if self.window else \
            (self.osrt, np.ones(len(self.osrt), dtype=bool))
        sorted_ = {}
        inst = self.instances
        start = inst["start_ns"].to_numpy()
        keep = (start >= lo) & (start <= hi) | (inst["tid"].to_numpy() == WINDOW_TID)
        new_row = np.cumsum(keep) - 1
        inst = inst[keep].copy()
        for prefix, srt, kept in (("act", self.act_sorted, act[1]), ("api", self.api_sorted, api[1]),
                                  ("osrt", self.osrt_sorted, osrt[1])):
            if kept.all():
                sorted_[prefix] = srt
                continue
            in_order = kept[srt.order]
            remap = np.cumsum(kept) - 1
            sorted_[prefix] = Sorted(order=_index(remap[srt.order[in_order]]), key=None)
            if consume:
                setattr(self, f"{prefix}_sorted", None)
            del remap
            before = np.concatenate(([0], np.cumsum(in_order)))  # kept rows before each sorted position
            inst[f"{prefix}_lo"] = before[inst[f"{prefix}_lo"].to_numpy()]
            inst[f"{prefix}_hi"] = before[inst[f"{prefix}_hi"].to_numpy()]
        parent = inst["parent"].to_numpy()
        inst["parent"] = np.where((parent >= 0) & keep[np.maximum(parent, 0)], new_row[np.maximum(parent, 0)], -1)
        counts = np.bincount(inst["series_id"].to_numpy(), minlength=len(self.series))
        live = np.flatnonzero(counts > 0)
        new_sid = np.full(len(self.series), -1, np.int64)
        new_sid[live] = np.arange(len(live))
        inst["series_id"] = new_sid[inst["series_id"].to_numpy()]
        series = self.series.iloc[live].reset_index(drop=True)
        series["series_id"] = np.arange(len(live), dtype=np.int64)
        series["count"] = counts[live].astype(np.int64)
        series["first_row"] = np.concatenate(([0], np.cumsum(counts[live])[:-1])).astype(np.int64)
        inst = inst.reset_index(drop=True)
        out = SeriesTable(series=series, instances=inst, activity=act[0], api=api[0], osrt=osrt[0],
                          act_sorted=sorted_["act"], api_sorted=sorted_["api"], osrt_sorted=sorted_["osrt"],
                          window=self.window, notes=list(self.notes))
        if self.window and len(inst):
            _remeasure_window(out)
        inst["outlier"] = mark_outliers(inst)
        return out

    def members(self, instances: pd.DataFrame, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(instance row position in ``instances``, row index into the ``table`` arrays) pairs.

        ``table`` is 'activity', 'api' or 'osrt'. The window instance owns every row of every thread
        that starts within it.
        """
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        q, pos = expand(lo, hi)
        return q, srt.order[pos]

    def members_where(self, instances: pd.DataFrame, table: str, keep_rows: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`members` restricted to the rows where ``keep_rows`` (indexed like the table's arrays) is
        true, without forming the pairs of the other rows."""
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        keep = np.asarray(keep_rows, dtype=bool)[srt.order]
        before = np.concatenate([[0], np.cumsum(keep)])  # positions among the kept rows
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        q, pos = expand(before[lo], before[hi])
        return q, srt.order[np.flatnonzero(keep)][pos]

    def member_counts(self, instances: pd.DataFrame, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(row index into the ``table`` arrays, how many of ``instances`` hold it), rows held by one
        or more only: the multiplicities of :meth:`members` in O(rows + instances) memory."""
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        if len(lo) and (lo[1:] >= hi[:-1]).all():  # windows one after another (not nested): each row once
            _, pos = expand(lo, hi)
            return srt.order[pos], np.ones(len(pos), dtype=np.int64)
        counts = intervals.cover_counts(lo, hi, len(srt.order))
        pos = np.flatnonzero(counts)
        return srt.order[pos], counts[pos]


_PREFIX = {"activity": "act", "api": "api", "osrt": "osrt"}
_WALK_MAX_STEPS = 4_000_000
"""ancestor_share walks parent pointers while instances x depth stays below this (cheap, exact)."""


def _ancestor_share_by_subtrees(inst: pd.DataFrame, sid: np.ndarray, rows: np.ndarray) -> dict[int, float] | None:
    """ancestor_share for deep nesting in O(instances log instances) per enclosing series: an instance
    lies under an instance y exactly when its pre-order position falls in y's subtree span (pre-order
    from (thread, start, longest first); subtree sizes summed children first). None if that order
    disagrees with the parents found by :func:`nesting` (then the walk is used)."""
    parent = inst["parent"].to_numpy()
    depth = inst["depth"].to_numpy()
    order = np.lexsort((np.arange(len(inst)), -(inst["end_ns"].to_numpy() - inst["start_ns"].to_numpy()),
                        inst["start_ns"].to_numpy(), inst["tid"].to_numpy()))
    tin = np.empty(len(inst), np.int64)
    tin[order] = np.arange(len(inst))
    by_depth = np.argsort(-depth, kind="stable")  # children before their parents
    size_l, parent_l = [1] * len(inst), parent.tolist()
    for x in by_depth.tolist():
        if parent_l[x] >= 0:
            size_l[parent_l[x]] += size_l[x]
    tout = tin + np.asarray(size_l, dtype=np.int64)  # descendants of y: pre-order positions in (tin[y], tout[y])
    child = np.flatnonzero(parent >= 0)
    if not ((tin[parent[child]] < tin[child]) & (tin[child] < tout[parent[child]])).all():
        return None
    t = np.sort(tin[rows])
    out: dict[int, float] = {}
    enclosing = np.flatnonzero(tout - tin > 1)
    for a in np.unique(sid[enclosing]):
        ys = enclosing[sid[enclosing] == a]
        us, ue = intervals.union(tin[ys] + 1, tout[ys])  # half-open spans of their descendants
        k = np.searchsorted(us, t, side="right") - 1
        inside = (k >= 0) & (t < ue[np.maximum(k, 0)])
        if inside.any():
            out[int(a)] = float(inside.sum()) / len(rows)
    return out


def build_series(trace: Any) -> SeriesTable:
    """Series and per-instance metrics of a trace (see the module docstring)."""
    act = build_activity(trace)
    api = build_host_calls(trace, "api")
    osrt = build_host_calls(trace, "osrt")
    ranges = extract_ranges(trace)
    notes: list[str] = []
    if ranges.never_closed:
        notes.append(f"{ranges.never_closed} NVTX range(s) were never closed (no end): left out of the range series")
    if ranges.negative:
        notes.append(f"{ranges.negative} NVTX range(s) end before they start and are left out")
    if ranges.cross_thread:
        notes.append(f"{ranges.cross_thread} NVTX start/end range(s) end on another thread; "
                     "their GPU work is attributed to the thread that started them")

    rf = ranges.frame
    domains, names = ranges.domains, ranges.names
    window = rf.empty
    if window:
        # No NVTX ranges: one window from the first launch (or activity) to the last activity end.
        known_api = act.api_start_ns[act.api_start_ns > np.iinfo(np.int64).min]
        if len(act):
            w_start = int(min(act.start_ns.min(), known_api.min() if len(known_api) else act.start_ns.min()))
            w_end = int(act.end_ns.max())
        elif len(api):
            w_start, w_end = int(api.start_ns.min()), int(api.end_ns.max())
        else:
            w_start = w_end = 0
        has_work = bool(len(act) or len(api))
        n = 1 if has_work else 0
        domains, names = np.array([""], dtype=object), np.array([WINDOW_NAME], dtype=object)
        rf = pd.DataFrame({"domain": np.zeros(n, np.int64), "name": np.zeros(n, np.int64),
                           "raw_name": np.zeros(n, np.int64), "start_ns": np.full(n, w_start, np.int64),
                           "end_ns": np.full(n, w_end, np.int64), "tid": np.full(n, WINDOW_TID, np.int64)})

    # Series ids in (domain, name) order, instances in start order within each series.
    pair = rf["domain"].to_numpy() * (len(names) + 1) + rf["name"].to_numpy()
    upair, inv = np.unique(pair, return_inverse=True)
    s_dom, s_name = domains[upair // (len(names) + 1)], names[upair % (len(names) + 1)]
    rank = np.lexsort((s_name.astype(str), s_dom.astype(str))) if len(upair) else np.zeros(0, np.int64)
    series_of_pair = np.empty(len(upair), dtype=np.int64)
    series_of_pair[rank] = np.arange(len(upair))
    sid = series_of_pair[inv.reshape(-1)] if len(rf) else np.zeros(0, np.int64)
    order = np.lexsort((rf["end_ns"].to_numpy(), rf["start_ns"].to_numpy(), sid))
    inst = pd.DataFrame({
        "series_id": sid[order],
        "tid": rf["tid"].to_numpy()[order].astype(np.int64),
        "start_ns": rf["start_ns"].to_numpy()[order].astype(np.int64),
        "end_ns": rf["end_ns"].to_numpy()[order].astype(np.int64),
    })
    counts = np.bincount(sid, minlength=len(upair)).astype(np.int64)
    first_of_series = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else np.zeros(0, np.int64)
    inst["idx"] = np.arange(len(inst), dtype=np.int64) - np.repeat(first_of_series, counts)
    inst["wall_ns"] = inst["end_ns"] - inst["start_ns"]
    raw_distinct = pd.DataFrame({"s": sid, "r": rf["raw_name"].to_numpy()}).drop_duplicates()["s"]
    series = pd.DataFrame({
        "series_id": np.arange(len(upair), dtype=np.int64),
        "domain": s_dom[rank].astype(object) if len(upair) else np.zeros(0, dtype=object),
        "name": s_name[rank].astype(object) if len(upair) else np.zeros(0, dtype=object),
        "count": counts,
        "raw_names": np.bincount(raw_distinct.to_numpy(), minlength=len(upair)).astype(np.int64),
        "first_row": first_of_series.astype(np.int64),
    })

    # One key space for every (thread, time) pair the sweeps compare.
    itid = inst["tid"].to_numpy()
    istart, iend = inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy()
    act_t = np.where(act.api_start_ns == np.iinfo(np.int64).min, 0, act.api_start_ns)
    keys = ThreadKeys([act.api_tid, api.tid, osrt.tid, itid],
                      [act_t, api.start_ns, api.end_ns, osrt.start_ns, istart, iend])
    act_sorted = _sort(keys, act.api_tid, act_t)
    api_sorted = _sort(keys, api.tid, api.start_ns, tiebreak=-api.end_ns)
    osrt_sorted = _sort(keys, osrt.tid, osrt.start_ns, tiebreak=-osrt.end_ns)
    _mark_top_level(api, api_sorted, keys)
    _mark_top_level(osrt, osrt_sorted, keys)
    # Activity whose launching thread is unknown can be attributed to the window only.
    unknown = (act.api_tid < 0) | (act.api_start_ns == np.iinfo(np.int64).min)
    if len(act) and unknown.any() and not window:
        notes.append(f"{int(unknown.sum())} GPU activities have no known launching thread and are "
                     "attributed to no NVTX range")

    qlo, qhi = keys.key(itid, istart), keys.key(itid, iend)
    is_window = itid == WINDOW_TID
    for prefix, srt, n in (("act", act_sorted, len(act)), ("api", api_sorted, len(api)),
                           ("osrt", osrt_sorted, len(osrt))):
        lo, hi = srt.window(qlo, qhi)
        lo = np.where(is_window, 0, np.where(itid < 0, 0, lo))
        hi = np.where(is_window, n, np.where(itid < 0, 0, hi))
        inst[f"{prefix}_lo"], inst[f"{prefix}_hi"] = lo.astype(np.int64), hi.astype(np.int64)
        srt.key = None  # the windows are found: the keys are not needed again
    inst["depth"], inst["parent"] = nesting(keys, itid, istart, iend)
    _activity_metrics(inst, act, act_sorted, unknown)
    _host_metrics(inst, api, api_sorted, osrt, osrt_sorted)
    inst["outlier"] = mark_outliers(inst)
    return SeriesTable(series=series, instances=inst, activity=act, api=api, osrt=osrt,
                       act_sorted=act_sorted, api_sorted=api_sorted, osrt_sorted=osrt_sorted,
                       window=window, notes=notes)


def _filter(table: Any, keep: np.ndarray) -> tuple[Any, np.ndarray]:
    """(an Activity or HostCalls with the rows of ``keep``, keep). When the kept rows are one contiguous
    run (rows in start order, a time window), its arrays are views of the original's: no copy."""
    idx = np.flatnonzero(keep)
    rows: Any = keep
    if len(idx) == 0 or idx[-1] - idx[0] + 1 == len(idx):
        rows = slice(int(idx[0]), int(idx[-1]) + 1) if len(idx) else slice(0, 0)
    fields = {}
    for name in table.__dataclass_fields__:
        value = getattr(table, name)
        if name == "names" or name.startswith("_"):
            fields[name] = value if name == "names" else None
        else:
            fields[name] = value[rows]
    return type(table)(**fields), keep


def _remeasure_window(table: SeriesTable) -> None:
    """The window instance of a cut table: from its first launch or activity to its last activity end."""
    act, inst = table.activity, table.instances
    known = act.api_start_ns[act.api_start_ns > np.iinfo(np.int64).min]
    if len(act):
        w_start = int(min(act.start_ns.min(), known.min() if len(known) else act.start_ns.min()))
        w_end = int(act.end_ns.max())
    elif len(table.api):
        w_start, w_end = int(table.api.start_ns.min()), int(table.api.end_ns.max())
    else:
        w_start = w_end = int(inst["start_ns"].iat[0])
    inst["start_ns"], inst["end_ns"], inst["wall_ns"] = w_start, w_end, w_end - w_start
    unknown = (act.api_tid < 0) | (act.api_start_ns == np.iinfo(np.int64).min)
    _activity_metrics(inst, act, table.act_sorted, unknown)
    _host_metrics(inst, table.api, table.api_sorted, table.osrt, table.osrt_sorted)


def nesting(keys: ThreadKeys, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (0 = outermost on its thread) and parent instance (-1 = none) of each range instance.

    NVTX exports do not store nesting; it is rebuilt per thread from start/end by one sweep over
    start/end events (ends before starts at the same time, outer starts before inner ones).
    """
    n = len(tid)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ks, ke = keys.key(tid, start), keys.key(tid, end)
    ev_key = np.concatenate([ks, ke])
    zero = ke == ks
    ev_type = np.concatenate([np.ones(n, np.int64), np.where(zero, 2, 0)])  # 0 end, 1 start, 2 end of empty
    ev_tie = np.concatenate([-(end - start), np.zeros(n, np.int64)])
    ev_inst = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((ev_inst, ev_tie, ev_type, ev_key))
    step = np.where(ev_type[order] == 1, 1, -1)
    before = np.cumsum(step) - step
    is_start = ev_type[order] == 1
    pos = np.flatnonzero(is_start)
    inst_of = ev_inst[order][is_start]
    depth_at = before[is_start]
    depth = np.empty(n, np.int64)
    depth[inst_of] = depth_at
    m = len(order) + 1
    key2 = depth_at * m + pos
    srt = np.argsort(key2, kind="stable")
    j = np.searchsorted(key2[srt], (depth_at - 1) * m + pos) - 1
    ok = (depth_at > 0) & (j >= 0)
    jj = srt[np.clip(j, 0, None)]
    ok &= depth_at[jj] == depth_at - 1
    parent = np.full(n, -1, np.int64)
    parent[inst_of[ok]] = inst_of[jj[ok]]
    return np.maximum(depth, 0), parent


class WindowSums:
    """Sums of per-row values over windows ``[lo, hi)`` of sorted positions (the instances' member rows).

    The windows' distinct edges cut the rows into segments; a metric costs one ``np.add.reduceat``
    over those segments (a read of the column, no full-length prefix sum written), or, for a mask
    that selects few rows, a sum over just those rows. Sums are exact int64.
    """

    _SPARSE = 8
    """A mask selecting under 1/_SPARSE of the rows is summed row by row (flatnonzero and add.at)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, n: int):
        self.n = int(n)
        lo = np.clip(np.asarray(lo, dtype=np.int64), 0, self.n)
        hi = np.clip(np.asarray(hi, dtype=np.int64), 0, self.n)
        edges = np.unique(np.concatenate(([0], lo, hi)))
        self.cut = edges[edges < self.n]  # first row of each segment
        self.ilo, self.ihi = np.searchsorted(edges, lo), np.searchsorted(edges, hi)

    def __call__(self, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Per window: the sum of ``values`` (in sorted order), over the rows where ``mask`` holds if given."""
        seg = np.zeros(len(self.cut), dtype=np.int64)
        if self.n:
            if mask is None:
                seg = np.add.reduceat(values, self.cut, dtype=np.int64)
            elif np.count_nonzero(mask) * self._SPARSE < self.n:
                rows = np.flatnonzero(mask)
                np.add.at(seg, np.searchsorted(self.cut, rows, side="right") - 1, values[rows])
            else:
                seg = np.add.reduceat(np.where(mask, values, 0), self.cut, dtype=np.int64)
        prefix = np.zeros(len(seg) + 1, dtype=np.int64)
        np.cumsum(seg, out=prefix[1:])
        return prefix[self.ihi] - prefix[self.ilo]


_PAIR_CHUNK = 1 << 18


def _activity_metrics(inst: pd.DataFrame, act: Activity, srt: Sorted, unknown: np.ndarray) -> None:
    lo, hi = inst["act_lo"].to_numpy(), inst["act_hi"].to_numpy()
    o = srt.order  # work on arrays permuted once into (thread, launch time) order
    kind, dur = act.kind[o], (act.end_ns - act.start_ns)[o]
    is_kernel, is_copy = kind == KERNEL, kind == MEMCPY
    sums = WindowSums(lo, hi, len(o))
    inst["kernel_sum_ns"] = sums(dur, is_kernel)
    inst["copy_sum_ns"] = sums(dur, is_copy)
    inst["copy_bytes"] = sums(act.bytes[o], is_copy)
    inst["pageable_copies"] = sums(is_copy & act.pageable[o])
    inst["kernels"] = sums(is_kernel)
    inst["launches"] = sums(act.is_launch[o])
    inst["activities"] = hi - lo
    n = len(inst)
    busy = np.zeros(n, np.int64)
    compute = np.zeros(n, np.int64)
    copy = np.zeros(n, np.int64)
    first = np.zeros(n, np.int64)  # first start and last end of the instance's GPU work (0, 0 without)
    last = np.zeros(n, np.int64)
    pairs = int(np.maximum(hi - lo, 0).sum())
    if pairs > _PAIR_CHUNK and pairs > _NESTED_RATIO * (len(o) + n):
        # windows hold the same rows many times over (deeply nested ranges): a sweep, not the pairs
        inst["gpu_busy_ns"], inst["compute_ns"], inst["copy_ns"] = _nested_unions(act, o, lo, hi)
        first = intervals.window_extreme(act.start_ns[o], lo, hi, np.minimum)
        last = intervals.window_extreme(act.end_ns[o], lo, hi, np.maximum)
        inst["span_ns"] = np.maximum(inst["wall_ns"].to_numpy(), last - first)
        return
    # Unions need the member rows themselves: expand windows in chunks of whole instances.
    cum = np.concatenate([[0], np.cumsum(np.maximum(hi - lo, 0))])
    start_i = 0
    while start_i < n:
        stop = int(np.searchsorted(cum, cum[start_i] + _PAIR_CHUNK, "right")) - 1
        stop = min(max(stop, start_i + 1), n)
        q, pos = expand(lo[start_i:stop], hi[start_i:stop])
        rows = srt.order[pos]
        s, e, k = act.start_ns[rows], act.end_ns[rows], act.kind[rows]
        m = stop - start_i
        busy[start_i:stop] = b = intervals.union_length_by_group(q, s, e, m)
        if len(q):
            heads = np.flatnonzero(np.concatenate(([True], q[1:] != q[:-1])))  # q is sorted (expand)
            who = start_i + q[heads]
            first[who] = np.minimum.reduceat(s, heads)
            last[who] = np.maximum.reduceat(e, heads)
        c = k != MEMCPY
        if c.all():
            compute[start_i:stop] = b
        elif not c.any():
            copy[start_i:stop] = b
        else:
            compute[start_i:stop] = intervals.union_length_by_group(q[c], s[c], e[c], m)
            copy[start_i:stop] = intervals.union_length_by_group(q[~c], s[~c], e[~c], m)
        start_i = stop
    inst["gpu_busy_ns"], inst["compute_ns"], inst["copy_ns"] = busy, compute, copy
    # the longer of the range's wall time and the GPU span of its work (first start to last end): an async
    # launch's work runs after the range closes, so busy time over this (never over the wall time alone)
    # is a fraction in [0, 1] that neither counts the host's queueing nor exceeds 1
    inst["span_ns"] = np.maximum(inst["wall_ns"].to_numpy(), last - first)


_NESTED_RATIO = 20
"""Above this many (window, member) pairs per row and window, the unions come from the offline sweep."""


def _nested_unions(act: Activity, o: np.ndarray, lo: np.ndarray, hi: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU busy, compute and copy union per window [lo, hi) of the rows in order ``o``, by
    :func:`intervals.window_union_lengths` (O((rows + windows) log rows), however nested the windows)."""
    s, e, kind = act.start_ns[o], act.end_ns[o], act.kind[o]
    out = [intervals.window_union_lengths(s, e, lo, hi)]
    for keep in (kind != MEMCPY, kind == MEMCPY):
        before = np.concatenate([[0], np.cumsum(keep)])  # positions among the kept rows
        out.append(intervals.window_union_lengths(s[keep], e[keep], before[lo], before[hi]))
    return out[0], out[1], out[2]


def _host_metrics(inst: pd.DataFrame, api: HostCalls, api_srt: Sorted, osrt: HostCalls, osrt_srt: Sorted) -> None:
    lo, hi = inst["api_lo"].to_numpy(), inst["api_hi"].to_numpy()
    o = api_srt.order  # arrays permuted once into (thread, start) order
    top, cat = api.top_level[o], api.category[o]
    dur = np.where(top, (api.end_ns - api.start_ns)[o], 0)
    launch = top & ((cat == ApiCategory.launch) | (cat == ApiCategory.graph_launch))
    sync = top & api.blocking_sync[o]
    device_sync = sync & api.named(DEVICE_SYNC_NAMES)[o]
    sums = WindowSums(lo, hi, len(o))
    inst["api_ns"] = sums(dur)
    inst["launch_api_ns"] = sums(dur, launch)
    inst["launch_calls"] = sums(launch)
    inst["sync_ns"] = sums(dur, sync)
    inst["sync_count"] = sums(sync)
    inst["device_sync_count"] = sums(device_sync)
    inst["memcpy_api_ns"] = sums(dur, top & (cat == ApiCategory.memcpy))
    oo = osrt_srt.order
    otop = osrt.top_level[oo]
    osums = WindowSums(inst["osrt_lo"].to_numpy(), inst["osrt_hi"].to_numpy(), len(oo))
    inst["osrt_ns"] = osums((osrt.end_ns - osrt.start_ns)[oo], otop)
    inst["osrt_count"] = osums(otop)


def mark_outliers(inst: pd.DataFrame, median_ratio: float = OUTLIER_MEDIAN_RATIO,
                  iqr_fence: float = OUTLIER_IQR_FENCE, min_count: int = OUTLIER_MIN_COUNT) -> np.ndarray:
    """Outlier flags: wall time above both median x ``median_ratio`` and Q3 + ``iqr_fence`` x IQR."""
    if inst.empty:
        return np.zeros(0, dtype=bool)
    sid = inst["series_id"].to_numpy()
    g = inst["wall_ns"].astype(np.float64).groupby(sid)
    med = g.median().reindex(sid).to_numpy()
    q1 = g.quantile(0.25).reindex(sid).to_numpy()
    q3 = g.quantile(0.75).reindex(sid).to_numpy()
    n = g.size().reindex(sid).to_numpy()
    limit = np.maximum(med * median_ratio, q3 + iqr_fence * (q3 - q1))
    return (n >= min_count) & (inst["wall_ns"].to_numpy(dtype=float) > limit)
