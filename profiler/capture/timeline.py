"""The timeline's data: what each host thread and each GPU stream did during one time window.

Built from the Trace frames (:mod:`profiler.capture.trace`) over a given window, so any window works:
today the median and the worst instance of the top NVTX series (:func:`instance_windows`); later the
inference instances of the capture. Plain data (:func:`window_events`, :func:`build_timeline`, stored in
the analysis JSON under ``timeline``); the report draws it (:mod:`profiler.report.timeline`).

Lanes: per thread its NVTX ranges (one lane per nesting depth), CUDA API calls and OS runtime calls;
per GPU stream its kernels, copies, memsets and graph launches; per device the idle gaps, each with
the host call that overlapped it most (its likely cause).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

MAX_EVENTS = 3000  # per window: the page stays small and plotly stays fast
MIN_GAP_US = 5.0  # shorter GPU idle gaps are not marked
MAX_GAPS = 300  # per window, the longest
PAD_FRACTION = 0.05  # of the window's length, on each side
API_CATEGORY_NAMES = {"launch": "launch", "graph_launch": "graph launch", "sync": "sync", "memcpy": "memcpy call",
                      "memset": "other CUDA API", "other": "other CUDA API"}


@dataclass
class Window:
    """A time window on the capture's clock (ns), with what it is."""

    label: str
    start_ns: int
    end_ns: int


def _tid(global_tid: np.ndarray) -> np.ndarray:
    """The OS thread id inside nsys's global thread id (its low 24 bits)."""
    return np.asarray(global_tid, dtype=np.int64) & 0xFFFFFF


def _overlapping(df: pd.DataFrame, start_ns: int, end_ns: int) -> pd.DataFrame:
    if df is None or len(df) == 0:
        return df.iloc[0:0] if df is not None else pd.DataFrame()
    s = df["start_ns"].to_numpy()
    end = df["end_ns"]
    # an unclosed NVTX range runs on; the large frames' int64 ends are compared as they are (no copy)
    e = end.to_numpy() if end.dtype == np.int64 else end.to_numpy(dtype="float64", na_value=float(end_ns))
    return df[(s < end_ns) & (e > start_ns)]


def _depths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval among those before it (intervals sorted by start)."""
    depth = np.zeros(len(starts), dtype=np.int64)
    open_ends: list[float] = []
    for i, (s, e) in enumerate(zip(starts, ends)):
        while open_ends and open_ends[-1] <= s:
            open_ends.pop()
        depth[i] = len(open_ends)
        open_ends.append(e)
        open_ends.sort(reverse=True)
    return depth


def events_in(trace: Any, start_ns: int, end_ns: int) -> pd.DataFrame:
    """Every event overlapping ``[start_ns, end_ns)`` as one frame: lane, category, name, start_ns, end_ns,
    pid, tid (a stream id for GPU lanes), gpu (bool); times clipped to the window."""
    parts = []

    def add(df: pd.DataFrame, lane: Sequence[str], category: Sequence[str], name: Sequence[str],
            tid: np.ndarray, gpu: bool) -> None:
        if len(df) == 0:
            return
        ends = df["end_ns"].astype("float64").fillna(float(end_ns)).to_numpy()
        parts.append(pd.DataFrame({
            "lane": list(lane), "category": list(category), "name": [str(n) for n in name],
            "start_ns": np.maximum(df["start_ns"].to_numpy(dtype=np.int64), start_ns),
            "end_ns": np.minimum(ends, end_ns).astype(np.int64),
            "pid": df["pid"].to_numpy(dtype=np.int64) if "pid" in df else -1, "tid": tid, "gpu": gpu}))

    nv = _overlapping(trace.nvtx, start_ns, end_ns)
    nv = nv[nv["event_type"].astype(str) != "mark"] if len(nv) else nv
    if len(nv):
        nv = nv.sort_values("start_ns", kind="stable")
        tids = _tid(nv["global_tid"].to_numpy())
        depth = np.zeros(len(nv), dtype=np.int64)
        ends = nv["end_ns"].astype("float64").fillna(float(end_ns)).to_numpy()
        for t in np.unique(tids):
            m = tids == t
            depth[m] = _depths(nv["start_ns"].to_numpy()[m], ends[m])
        names = [f"{d}:{n}" if d not in ("", "nan", "None") else str(n)
                 for d, n in zip(nv["domain"].astype(str), nv["name"].astype(str))]
        add(nv, [f"thread {t} · NVTX" + (f" {d + 1}" if d else "") for t, d in zip(tids, depth)],
            ["NVTX range"] * len(nv), names, tids, False)
    api = _overlapping(trace.api, start_ns, end_ns)
    if len(api):
        tids = _tid(api["global_tid"].to_numpy())
        add(api, [f"thread {t} · CUDA API" for t in tids],
            [API_CATEGORY_NAMES.get(c, "other CUDA API") for c in api["category"].astype(str)],
            api["name"].astype(str), tids, False)
    os_ = _overlapping(trace.osrt, start_ns, end_ns)
    busy = set(_tid(nv["global_tid"].to_numpy())) | set(_tid(api["global_tid"].to_numpy())) if len(nv) or len(api) \
        else set()
    if len(os_):  # only threads that use NVTX or CUDA here: helper threads' polling is noise
        os_ = os_[np.isin(_tid(os_["global_tid"].to_numpy()), list(busy))]
    if len(os_):
        tids = _tid(os_["global_tid"].to_numpy())
        add(os_, [f"thread {t} · OS runtime" for t in tids], ["OS runtime"] * len(os_), os_["name"].astype(str),
            tids, False)
    for frame, category in (("kernels", "kernel"), ("memcpy", "memcpy"), ("memset", "memset"), ("graphs", "graph")):
        df = _overlapping(getattr(trace, frame), start_ns, end_ns)
        if not len(df):
            continue
        if frame == "kernels":
            short = df["short_name"].astype(str)
            names = np.where(short.isin(["", "nan"]), df["name"].astype(str), short)
        elif frame == "memcpy":
            names = [f"memcpy {k} {int(b):,} B" for k, b in zip(df["copy_kind"].astype(str), df["bytes"])]
        elif frame == "memset":
            names = ["memset"] * len(df)
        else:
            names = [f"graph {g}" for g in df["graph_id"].astype(str)]
        streams = df["stream_id"].to_numpy(dtype=np.int64)
        add(df, [f"GPU {d} · stream {s}" for d, s in zip(df["device_id"], streams)], [category] * len(df), names,
            streams, True)
    if not parts:
        return pd.DataFrame(columns=["lane", "category", "name", "start_ns", "end_ns", "pid", "tid", "gpu"])
    return pd.concat(parts, ignore_index=True)


def idle_gaps(events: pd.DataFrame, start_ns: int, end_ns: int, min_gap_us: float = MIN_GAP_US,
              max_gaps: int = MAX_GAPS) -> list[dict[str, Any]]:
    """GPU idle gaps per device inside the window (between its first and last GPU activity; the longest
    ``max_gaps``), each with the host call that overlapped it most on a thread that calls CUDA (its likely
    cause; a helper thread's poll is not one): ``[{"device", "start_ns", "end_ns", "cause",
    "cause_overlap_fraction"}]``."""
    if not len(events):
        return []
    gpu = events[events["gpu"]]
    cuda_threads = set(events.loc[events["lane"].str.endswith("· CUDA API"), "tid"])
    host = events[(~events["gpu"]) & events["tid"].isin(cuda_threads)
                  & events["lane"].str.contains("CUDA API|OS runtime", regex=True)]
    hs, he, hname = host["start_ns"].to_numpy(), host["end_ns"].to_numpy(), host["name"].to_numpy()
    found: list[tuple[str, int, int]] = []
    devices = gpu["lane"].str.split(" · ").str[0]
    for dev in sorted(set(devices)):
        g = gpu[devices == dev].sort_values("start_ns")
        s, e = g["start_ns"].to_numpy(), np.maximum.accumulate(g["end_ns"].to_numpy())
        gs, ge = e[:-1], s[1:]
        big = np.flatnonzero(ge - gs >= min_gap_us * 1000)
        found += [(dev, int(gs[i]), int(ge[i])) for i in big]
    found.sort(key=lambda x: x[1] - x[2])
    out = []
    for dev, gs, ge in sorted(found[:max_gaps], key=lambda x: x[1]):
        cause, frac = "", 0.0
        if len(hs):
            ov = np.minimum(he, ge) - np.maximum(hs, gs)
            j = int(np.argmax(ov))
            if ov[j] > 0:
                cause, frac = str(hname[j]), float(ov[j]) / (ge - gs)
        out.append({"device": dev, "start_ns": gs, "end_ns": ge, "cause": cause, "cause_overlap_fraction": frac})
    return out


def window_events(trace: Any, window: Window, *, max_events: int = MAX_EVENTS,
                  min_gap_us: float = MIN_GAP_US) -> dict[str, Any]:
    """One window as plain data: lanes in display order, the events (the longest ``max_events`` when
    there are more), the idle gaps; times in ms from the window's start."""
    pad = int((window.end_ns - window.start_ns) * PAD_FRACTION)
    lo, hi = window.start_ns - pad, window.end_ns + pad
    ev = events_in(trace, lo, hi)
    total = len(ev)
    gaps = idle_gaps(ev, lo, hi, min_gap_us)
    if total > max_events:  # keep the longest; NVTX ranges and GPU work before host calls
        order = np.lexsort((-(ev["end_ns"] - ev["start_ns"]).to_numpy(), ev["category"].isin(
            ["OS runtime", "other CUDA API"]).to_numpy()))
        ev = ev.iloc[np.sort(order[:max_events])]
    lanes = sorted(set(ev["lane"]), key=_lane_order) if len(ev) else []
    t0 = lo
    return {
        "label": window.label, "start_ns": int(window.start_ns), "end_ns": int(window.end_ns),
        "span_ms": (hi - lo) / 1e6, "lanes": lanes, "shown": int(len(ev)), "total": int(total),
        "events": {"lane": ev["lane"].tolist(), "category": ev["category"].tolist(), "name": ev["name"].tolist(),
                   "start_ms": np.round((ev["start_ns"].to_numpy() - t0) / 1e6, 6).tolist(),
                   "dur_ms": np.round((ev["end_ns"].to_numpy() - ev["start_ns"].to_numpy()) / 1e6, 6).tolist()},
        "gaps": [{"device": g["device"], "start_ms": round((g["start_ns"] - t0) / 1e6, 6),
                  "dur_ms": round((g["end_ns"] - g["start_ns"]) / 1e6, 6), "cause": g["cause"],
                  "cause_overlap_fraction": round(g["cause_overlap_fraction"], 3)} for g in gaps],
        "window_start_ms": round((window.start_ns - t0) / 1e6, 6),
        "window_end_ms": round((window.end_ns - t0) / 1e6, 6),
    }


def _lane_order(lane: str) -> tuple:
    """Threads first (NVTX by depth, then CUDA API, then OS runtime), then GPU streams, by number."""
    head, _, what = lane.partition(" · ")
    kind, _, num = head.partition(" ")
    rank = {"NVTX": 0, "CUDA API": 2, "OS runtime": 3}.get(what.split(" ")[0] if what.startswith("NVTX") else what, 1)
    depth = int(what.split(" ")[1]) if what.startswith("NVTX ") else 0
    return (kind != "thread", int(num) if num.lstrip("-").isdigit() else 0, rank, depth,
            int(what.split(" ")[-1]) if what.startswith("stream ") else 0)


def series_windows(r: dict[str, Any], capture_start_ns: int = 0, *, worst: bool = True,
                   name: str | None = None) -> list[Window]:
    """The median instance (and with ``worst`` the slowest one) of one range of the analysis JSON, as
    windows on the capture's clock; [] when the range carries no instance times."""
    inst = r.get("instances") if isinstance(r.get("instances"), dict) else {}
    start, wall = inst.get("start_ms") or [], inst.get("wall_ms") or []
    pairs = [(float(s), float(w)) for s, w in zip(start, wall) if s is not None and w is not None]
    if not pairs:
        return []
    name = name or (r.get("name") if r.get("name") is not None else "(whole capture)")
    order = sorted(range(len(pairs)), key=lambda i: pairs[i][1])
    med, slow = order[len(order) // 2], order[-1]
    picks = [(f"median instance of {name} (#{med})", med)]
    if worst and slow != med:
        picks.append((f"worst instance of {name} (#{slow})", slow))
    return [Window(label, capture_start_ns + int(round(pairs[i][0] * 1e6)),
                   capture_start_ns + int(round((pairs[i][0] + pairs[i][1]) * 1e6))) for label, i in picks]


def instance_windows(result: dict[str, Any], capture_start_ns: int = 0) -> list[Window]:
    """The median and the worst instance of the series with the most total wall time (the analysis
    JSON's first range that has instance times), as windows on the capture's clock."""
    for r in result.get("ranges") or []:
        if isinstance(r, dict):
            found = series_windows(r, capture_start_ns)
            if found:
                return found
    return []


def activity_window(trace: Any, span_ms: float = 2.0) -> list[Window]:
    """Without instances: ``span_ms`` of the capture starting at its median GPU activity."""
    act = trace.gpu_activity()
    if len(act) == 0:
        return []
    s = int(np.median(act["start_ns"].to_numpy()))
    return [Window(f"{span_ms:g} ms from the capture's median GPU activity", s, s + int(span_ms * 1e6))]


def build_timeline(trace: Any, result: dict[str, Any], windows: Sequence[Window] | None = None, *,
                   max_events: int = MAX_EVENTS) -> dict[str, Any]:
    """The ``timeline`` entry of the analysis JSON: each window's lanes, events and gaps."""
    start = int((getattr(trace, "meta", None) or {}).get("capture_start_ns") or 0)
    if windows is None:
        whole = bool((result.get("capture") or {}).get("window_only"))  # one instance: the whole capture
        windows = (None if whole else instance_windows(result, start)) or activity_window(trace)
    return {"windows": [window_events(trace, w, max_events=max_events) for w in windows],
            "max_events": max_events, "min_gap_us": MIN_GAP_US}
