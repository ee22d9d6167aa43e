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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import intervals
from profiler.capture.activity import Activity, HostCalls, build_activity, build_host_calls, mark_top_level
from profiler.capture.frames import (
    API_CATEGORIES, COPY_KINDS, DEVICE_SYNC_NAMES, GRAPH, KERNEL, KIND_NAMES, MEMCPY, MEMSET, ApiCategory,
    CopyKind, factor, frame_of, i64, is_value,
)
from profiler.capture.instance_metrics import (
    OUTLIER_IQR_FENCE, OUTLIER_MEDIAN_RATIO, OUTLIER_MIN_COUNT, PAIR_CHUNK, activity_metrics, host_metrics,
    mark_outliers,
)
from profiler.capture.keys import Sorted, ThreadKeys, WindowSums, expand, nesting, row_index, sort_by_thread

# The series table's vocabulary and building blocks live in frames, keys, activity and instance_metrics;
# they are named here too, so ``series.X`` (the capture package's one import for them) keeps working.
__all__ = [
    "API_CATEGORIES", "COPY_KINDS", "DEVICE_SYNC_NAMES", "GRAPH", "INSTANCE_METRICS", "KERNEL", "KIND_NAMES",
    "MEMCPY", "MEMSET", "OUTLIER_IQR_FENCE", "OUTLIER_MEDIAN_RATIO", "OUTLIER_MIN_COUNT", "PAIR_CHUNK",
    "WINDOW_NAME", "WINDOW_TID", "Activity", "ApiCategory", "CopyKind", "HostCalls", "Ranges", "SeriesTable",
    "Sorted", "ThreadKeys", "WindowSums", "build_activity", "build_host_calls", "build_series", "expand",
    "extract_ranges", "factor", "i64", "is_value", "mark_outliers", "nesting", "normalize_range_name",
]

WINDOW_NAME = "(capture)"
"""Series name of the single window used when a capture has no NVTX ranges."""

WINDOW_TID = -2
"""Thread id given to the window instance: it owns the work of every thread."""

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
    numbered: int = 0  # series made from numbered names (profiler.capture.numbered)
    made_from: dict[str, str] = field(default_factory=dict)  # label of a series made here -> how


def extract_ranges(trace: Any) -> Ranges:
    """Closed push/pop and start/end ranges with normalized names (codes, never per-row strings)."""
    nvtx = frame_of(trace, "nvtx")
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
    name_code = norm_codes[ncode[keep]].astype(np.int64)
    numbered = _merge_numbered(np.asarray(norm_values, dtype=object), name_code, dcode[keep], dvalues,
                               tid[keep], start[keep], end[keep])
    frame = pd.DataFrame({
        "domain": dcode[keep], "name": numbered.code[name_code],
        "raw_name": ncode[keep], "start_ns": start[keep], "end_ns": end[keep], "tid": tid[keep],
        "number": numbered.number[name_code],
    })
    return Ranges(frame, never_closed=int(end_na.sum()), negative=int(negative.sum()), cross_thread=cross,
                  domains=dvalues, names=numbered.names, numbered=numbered.merged)


def _merge_numbered(names: np.ndarray, name_code: np.ndarray, dcode: np.ndarray, domains: np.ndarray,
                    tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> Any:
    """:func:`profiler.capture.numbered.merge_numbered` of the ranges' names, each name in the one domain its
    rows use (-1 for a name used in several, never merged)."""
    from profiler.capture.numbered import EXCLUDED_DOMAINS, merge_numbered

    pairs = pd.DataFrame({"n": name_code, "d": dcode}).drop_duplicates()
    per = pairs.groupby("n")["d"]
    domain_of = np.full(len(names), -1, np.int64)
    single = per.nunique()
    single = single[single == 1].index.to_numpy()
    domain_of[single] = per.first().reindex(single).to_numpy()
    excluded = np.zeros(len(names), dtype=bool)
    excluded[domain_of >= 0] = np.isin(np.asarray(domains, dtype=object)[domain_of[domain_of >= 0]],
                                       EXCLUDED_DOMAINS)
    return merge_numbered(names, domain_of, name_code, tid, start, end, excluded)


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
    made_from: dict[str, str] = field(default_factory=dict)
    """Series made here, not NVTX ranges of the capture (frames of stage ranges): label -> what they are."""
    generation: Any = None
    """The LLM decode loop found (:class:`profiler.capture.generation.Detected`), or None."""

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
        instance is cut to what is kept and measured again. ``activity.frame_rows`` still index the trace.
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
        inst = inst.take(np.flatnonzero(keep))  # a new frame: no second copy of it
        for prefix, srt, kept in (("act", self.act_sorted, act[1]), ("api", self.api_sorted, api[1]),
                                  ("osrt", self.osrt_sorted, osrt[1])):
            if kept.all():
                sorted_[prefix] = srt
                continue
            in_order = srt.take(kept)
            sorted_[prefix] = _kept_order(srt, kept, in_order)
            if consume:
                setattr(self, f"{prefix}_sorted", None)
            before = _running_count(in_order)  # kept rows before each sorted position
            inst[f"{prefix}_lo"] = before[inst[f"{prefix}_lo"].to_numpy()].astype(np.int64)
            inst[f"{prefix}_hi"] = before[inst[f"{prefix}_hi"].to_numpy()].astype(np.int64)
            del before
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
                          window=self.window, notes=list(self.notes), made_from=dict(self.made_from),
                          generation=self.generation)
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
        return q, srt.rows(pos)

    def members_where(self, instances: pd.DataFrame, table: str, keep_rows: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`members` restricted to the rows where ``keep_rows`` (indexed like the table's arrays) is
        true, without forming the pairs of the other rows."""
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        keep = srt.take(np.asarray(keep_rows, dtype=bool))
        before = _running_count(keep)  # positions among the kept rows
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        q, pos = expand(before[lo].astype(np.int64), before[hi].astype(np.int64))
        del before
        return q, srt.rows(np.flatnonzero(keep)[pos])

    def member_counts(self, instances: pd.DataFrame, table: str) -> tuple[np.ndarray, np.ndarray]:
        """(row index into the ``table`` arrays, how many of ``instances`` hold it), rows held by one
        or more only: the multiplicities of :meth:`members` in O(rows + instances) memory."""
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        if len(lo) and (lo[1:] >= hi[:-1]).all():  # windows one after another (not nested): each row once
            _, pos = expand(lo, hi)
            return srt.rows(pos), np.ones(len(pos), dtype=np.int64)
        counts = intervals.cover_counts(lo, hi, len(srt))
        pos = np.flatnonzero(counts)
        return srt.rows(pos), counts[pos]

    def member_blocks(self, instances: pd.DataFrame, table: str, block: int
                      ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:meth:`member_counts` in pieces of at most ``block`` rows: (rows, how many of ``instances`` hold
        each). Concatenated, the pieces are member_counts' arrays; no piece is the size of all members (a
        launch-bound capture's one range holds millions of API calls)."""
        srt = {"activity": self.act_sorted, "api": self.api_sorted, "osrt": self.osrt_sorted}[table]
        lo = instances[f"{_PREFIX[table]}_lo"].to_numpy()
        hi = instances[f"{_PREFIX[table]}_hi"].to_numpy()
        if not len(lo):
            return
        if (lo[1:] >= hi[:-1]).all():  # windows one after another (not nested): each row once, in window order
            size = np.maximum(hi - lo, 0)
            ends = np.cumsum(size)
            for first in range(0, int(ends[-1]), block):
                last = min(first + block, int(ends[-1]))  # members [first, last) of all, in windows w0 .. w1 - 1
                w0, w1 = int(np.searchsorted(ends, first, "right")), int(np.searchsorted(ends, last - 1, "right")) + 1
                start, n = lo[w0:w1].copy(), size[w0:w1].copy()
                skip = first - int(ends[w0] - size[w0])
                start[0] += skip
                n[0] -= skip
                n[-1] -= int(ends[w1 - 1]) - last
                _, pos = expand(start, start + n)
                yield srt.rows(pos), np.ones(len(pos), dtype=np.int64)
            return
        for b in range(int(lo.min()), int(hi.max()), block):  # nested: per block of positions, how many cover each
            counts = intervals.cover_counts(lo - b, hi - b, min(block, len(srt) - b))
            pos = np.flatnonzero(counts)
            yield srt.rows(b + pos), counts[pos]


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
    from profiler.capture.replays import graph_replays  # replays reads unit's names, and unit imports this module

    from profiler.capture.stages import stage_frames

    ranges = graph_replays(extract_ranges(trace), api, trace)  # TensorRT inferences replayed as CUDA graphs
    ranges = stage_frames(ranges)  # stage ranges repeated as a whole, no range around them
    from profiler.capture.generation import decode_ranges

    ranges, gen = decode_ranges(ranges, trace, ranges.domains)  # LLM decode steps, prefills: ranges of their own
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
    number = rf["number"].fillna(-1).to_numpy(np.int64) if "number" in rf.columns else np.full(len(rf), -1)
    inst["name_index"] = number[order] if len(rf) else np.zeros(0, np.int64)  # the number a numbered name had
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
    act_tid, helpers = _attribution_threads(act.api_tid, itid, window)
    helper_at = len(notes)  # the note goes here once the launches it names are counted
    keys = ThreadKeys([act_tid, api.tid, osrt.tid, itid],
                      [act_t, api.start_ns, api.end_ns, osrt.start_ns, istart, iend])
    qlo, qhi = keys.key(itid, istart), keys.key(itid, iend)
    # one table at a time: sorted, its calls' nesting marked, the instances' windows found, then its
    # keys let go, so only one table's keys are held
    act_sorted = sort_by_thread(keys, act_tid, act_t)
    act_tid_helper = act_tid != act.api_tid if helpers else None  # launched by a thread without ranges
    del act_tid, act_t
    _windows(inst, "act", act_sorted, qlo, qhi, len(act))
    api_sorted = sort_by_thread(keys, api.tid, api.start_ns, later_first=api.end_ns)
    mark_top_level(api, api_sorted, keys)
    _windows(inst, "api", api_sorted, qlo, qhi, len(api))
    osrt_sorted = sort_by_thread(keys, osrt.tid, osrt.start_ns, later_first=osrt.end_ns)
    mark_top_level(osrt, osrt_sorted, keys)
    _windows(inst, "osrt", osrt_sorted, qlo, qhi, len(osrt))
    # Activity whose launching thread is unknown can be attributed to the window only.
    unknown = (act.api_tid < 0) | (act.api_start_ns == np.iinfo(np.int64).min)
    if len(act) and unknown.any() and not window:
        notes.append(f"{int(unknown.sum())} GPU activities have no known launching thread and are "
                     "attributed to no NVTX range")
    inst["depth"], inst["parent"] = nesting(keys, itid, istart, iend)
    activity_metrics(inst, act, act_sorted, unknown)
    if helpers:
        notes.insert(helper_at, helpers + _helper_launches(inst, series, act, act_sorted, act_tid_helper))
    host_metrics(inst, api, api_sorted, osrt, osrt_sorted)
    inst["outlier"] = mark_outliers(inst)
    return SeriesTable(series=series, instances=inst, activity=act, api=api, osrt=osrt,
                       act_sorted=act_sorted, api_sorted=api_sorted, osrt_sorted=osrt_sorted,
                       window=window, notes=notes, made_from=dict(ranges.made_from), generation=gen)


def _attribution_threads(api_tid: np.ndarray, range_tid: np.ndarray, window: bool) -> tuple[np.ndarray, str]:
    """The thread each GPU activity is attributed through, and a note when that is not its launching thread.

    GPU work is attributed to the NVTX ranges open on the thread that launched it. Work launched by threads
    that open no range themselves (PyTorch's autograd thread runs the backward pass, a server's GPU worker
    serves the request thread's ranges) would then belong to no range: when exactly one thread opens
    ranges and launches GPU work itself, the work its process's other threads launch is attributed as if it
    had launched it, to its ranges open at the launch. With several threads opening ranges the owner is
    ambiguous, and a ranged thread that launches nothing (a data loader's) is no owner: the work stays
    unattributed. Global thread ids carry the process id above bit 24 (nsys's encoding)."""
    owners = np.unique(range_tid)
    if window or len(owners) != 1 or not len(api_tid):
        return api_tid, ""
    owner = int(owners[0])
    if not (api_tid == owner).any():
        return api_tid, ""
    helper = (api_tid >= 0) & (api_tid != owner) & ((api_tid >> 24) == (owner >> 24))
    if not helper.any():
        return api_tid, ""
    n_threads = len(np.unique(api_tid[helper]))
    note = (f"{int(helper.sum())} GPU activities launched by {n_threads} thread(s) that open no NVTX range "
            "(PyTorch's autograd thread, a GPU worker) count in the ranges of the one thread of their process "
            "that opens ranges, where one is open at their launch")
    return np.where(helper, owner, api_tid), note


HELPER_LAUNCH_RANGES = 3
"""The ranges the cross-thread note names with the launches threads without ranges made in them."""


def _helper_launches(inst: pd.DataFrame, series: pd.DataFrame, act: Activity, srt: Sorted,
                     helper: np.ndarray) -> str:
    """What the cross-thread note adds: per range (most first), how many of the launches per instance its
    range table counts (the median instance's; ``launches`` holds every thread's) threads without ranges
    made, so a reader knows how many the range's own thread made."""
    mine = WindowSums(inst["act_lo"].to_numpy(), inst["act_hi"].to_numpy(), len(srt))(
        srt.take(act.is_launch & helper).astype(np.int64))
    frame = pd.DataFrame({"s": inst["series_id"].to_numpy(), "helper": mine, "all": inst["launches"].to_numpy()})
    med = frame.groupby("s")[["helper", "all"]].median()
    med = med[med["helper"] > 0].sort_values("helper", ascending=False, kind="stable")[:HELPER_LAUNCH_RANGES]
    if med.empty:
        return ""
    dom, name = series["domain"].to_numpy(), series["name"].to_numpy()
    parts = [f"{r.helper:g} of {dom[sid] + ':' if dom[sid] else ''}{name[sid]}'s {r.all:g} (its own thread "
             f"{r.all - r.helper:g})" for sid, r in zip(med.index, med.itertuples(index=False))]
    return "; of the launches per instance in the range table they make " + ", ".join(parts) + " in the median instance"


def _windows(inst: pd.DataFrame, prefix: str, srt: Sorted, qlo: np.ndarray, qhi: np.ndarray, n: int) -> None:
    """The instances' [lo, hi) windows into one table's sorted rows (``{prefix}_lo``/``_hi``); a window
    instance holds every row, one of an unknown thread none. The table's keys are then let go."""
    itid = inst["tid"].to_numpy()
    lo, hi = srt.window(qlo, qhi)
    is_window = itid == WINDOW_TID
    lo = np.where(is_window, 0, np.where(itid < 0, 0, lo))
    hi = np.where(is_window, n, np.where(itid < 0, 0, hi))
    inst[f"{prefix}_lo"], inst[f"{prefix}_hi"] = lo.astype(np.int64), hi.astype(np.int64)
    srt.key = None


def _running_count(mask: np.ndarray) -> np.ndarray:
    """``out[i]`` = how many of ``mask[:i]`` hold, for i in 0..len(mask) (int32 while that fits)."""
    out = np.zeros(len(mask) + 1, dtype=np.int32 if len(mask) < 1 << 31 else np.int64)
    np.cumsum(mask, dtype=out.dtype, out=out[1:])
    return out


def _kept_order(srt: Sorted, kept: np.ndarray, in_order: np.ndarray) -> Sorted:
    """The order of the rows ``kept`` (a mask over the table's rows), numbered among themselves;
    ``in_order`` is ``kept`` in sorted order. The kept rows of an identity order are still in order."""
    if srt.identity:
        return Sorted(order=None, key=None, identity=True, n=int(np.count_nonzero(kept)))
    new_number = _running_count(kept)[1:]
    new_number -= 1
    return Sorted(order=row_index(new_number[srt.order[in_order]]), key=None)


def _filter(table: Any, keep: np.ndarray) -> tuple[Any, np.ndarray]:
    """(an Activity or HostCalls with the rows of ``keep``, keep). When the kept rows are one contiguous
    run (rows in start order, a time window), its arrays are views of the original's: no copy."""
    idx = np.flatnonzero(keep)
    rows: Any = keep
    if len(idx) == 0 or idx[-1] - idx[0] + 1 == len(idx):
        rows = slice(int(idx[0]), int(idx[-1]) + 1) if len(idx) else slice(0, 0)
    if isinstance(table, Activity):
        return table.select(rows), keep
    fields = {}
    for name in table.__dataclass_fields__:
        value = getattr(table, name)
        if name == "names" or name.startswith("_"):
            fields[name] = None if name.startswith("_") else value
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
    activity_metrics(inst, act, table.act_sorted, unknown)
    host_metrics(inst, table.api, table.api_sorted, table.osrt, table.osrt_sorted)
