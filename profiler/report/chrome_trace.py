"""``trtprof analyze --trace FILE.json``: the analysed capture in the Chrome Trace Event format.

Perfetto UI (ui.perfetto.dev) and chrome://tracing open the file. Host threads are one process per OS
process with a track per thread (NVTX ranges, CUDA API calls, OS runtime calls); each GPU is one
process with a track per stream (kernels, copies, memsets, graph launches). Findings become global
instant events ("i", scope "g") named after their rule, with the title, evidence and recommendation in
``args``, placed at the instance or gap they point to when the evidence says (else at the start).

Large captures are bounded: at most ``max_events`` events, the earliest ones, so the file shows a
complete stretch of time; ``otherData`` says how many were kept and where the cut is.

Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from profiler.capture.timeline import events_in

MAX_EVENTS = 200_000  # about 30 MB of JSON; Perfetto and chrome://tracing stay responsive
GPU_PID_BASE = 1_000_000  # GPU "processes" get pids above any OS pid


def _us(ns: Any, t0: int) -> float:
    return round((int(ns) - t0) / 1e3, 3)


def chrome_trace(trace: Any, findings: Iterable[Any] = (), *, max_events: int = MAX_EVENTS,
                 result: dict[str, Any] | None = None) -> dict[str, Any]:
    """The capture (up to ``max_events`` events, earliest first) and the findings as a Trace Event dict."""
    meta = getattr(trace, "meta", None) or {}
    lo, hi = trace.event_span()
    t0 = int(meta.get("capture_start_ns") if meta.get("capture_start_ns") is not None else (lo or 0))
    if lo is None:
        ev = events_in(trace, 0, 0)
    else:
        ev = events_in(trace, int(lo), _cut_end(trace, int(hi) + 1, max_events))
    total = len(ev)
    ev = ev.sort_values("start_ns", kind="stable")
    cut_ns = None
    if total > max_events:
        ev = ev.iloc[:max_events]
        cut_ns = int(ev["start_ns"].iloc[-1])
    out: list[dict[str, Any]] = []
    named: set[tuple[int, int]] = set()
    procs: set[int] = set()
    for lane, cat, name, s, e, pid, tid, gpu in zip(ev["lane"], ev["category"], ev["name"], ev["start_ns"],
                                                     ev["end_ns"], ev["pid"], ev["tid"], ev["gpu"]):
        if gpu:
            dev = int(lane.split(" · ")[0].split(" ")[1]) if lane.startswith("GPU ") else 0
            p, t = GPU_PID_BASE + dev, int(tid)
            pname, tname = f"GPU {dev}", f"stream {tid}"
        else:
            p = int(pid) if int(pid) >= 0 else 0
            what = lane.split(" · ", 1)[1] if " · " in lane else lane
            # one track per thread and kind, so nested NVTX ranges stack and API calls do not interleave
            kind = 0 if what.startswith("NVTX") else 1 if what == "CUDA API" else 2
            t = int(tid) * 4 + kind
            pname, tname = f"process {p}", f"thread {tid} · {what.split(' ')[0] if kind == 0 else what}"
        if p not in procs:
            procs.add(p)
            out.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": pname}})
        if (p, t) not in named:
            named.add((p, t))
            out.append({"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": tname}})
        out.append({"ph": "X", "name": str(name), "cat": str(cat), "pid": p, "tid": t, "ts": _us(s, t0),
                    "dur": round(max(int(e) - int(s), 0) / 1e3, 3)})
    out += finding_events(findings, t0, result or {})
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"generator": "trtprof analyze --trace", "source": str(meta.get("source_path") or ""),
                          "events_total": int(total), "events_kept": int(len(ev)),
                          "truncated_at_us": _us(cut_ns, t0) if cut_ns is not None else None,
                          "clock": "microseconds from the capture's start"}}


def _cut_end(trace: Any, end_ns: int, max_events: int) -> int:
    """An end time before which about ``max_events`` events start (``end_ns`` when the capture is smaller),
    so a huge capture is never turned into rows beyond what is kept."""
    starts = [getattr(trace, n)["start_ns"].to_numpy(dtype=np.int64)  # OS runtime calls are mostly left out
              for n in ("nvtx", "api", "kernels", "memcpy", "memset", "graphs") if len(getattr(trace, n))]
    if not starts:
        return end_ns
    allstarts = np.concatenate(starts)
    if len(allstarts) <= max_events:
        return end_ns
    return int(np.partition(allstarts, max_events)[max_events]) + 1


def _finding_time_ns(f: dict[str, Any], t0: int, result: dict[str, Any]) -> int:
    """Where a finding points: its first top gap, else the worst outlier instance of its range, else t0."""
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    gaps = ev.get("top_gaps")
    if isinstance(gaps, list) and gaps and isinstance(gaps[0], dict) and isinstance(gaps[0].get("start_ms"), (int, float)):
        return t0 + int(gaps[0]["start_ms"] * 1e6)
    outl = ev.get("outliers")
    rng = next((r for r in result.get("ranges") or [] if isinstance(r, dict) and r.get("name") is not None
                and f.get("range") in (r.get("name"), f"{r.get('domain')}:{r.get('name')}")), None)
    if isinstance(outl, list) and outl and rng is not None:
        starts = (rng.get("instances") or {}).get("start_ms") or []
        idx = outl[0].get("index") if isinstance(outl[0], dict) else None
        if isinstance(idx, int) and 0 <= idx < len(starts) and starts[idx] is not None:
            return t0 + int(starts[idx] * 1e6)
    return t0


def finding_events(findings: Iterable[Any], t0: int, result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for f in findings or []:
        f = f.to_dict() if hasattr(f, "to_dict") else f
        if not isinstance(f, dict):
            continue
        out.append({"ph": "i", "s": "g", "pid": 0, "tid": 0, "cat": "finding",
                    "name": f"{str(f.get('severity') or 'info').upper()} {f.get('rule')}",
                    "ts": _us(_finding_time_ns(f, t0, result), t0),
                    "args": {"title": f.get("title"), "range": f.get("range"),
                             "recommendation": f.get("recommendation"),
                             "evidence": {k: v for k, v in (f.get("evidence") or {}).items()
                                          if not isinstance(v, (list, dict))}}})
    return out


def validate(doc: Any) -> list[str]:
    """Structural problems of a Trace Event document (empty when it is well formed)."""
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the document is not an object with a traceEvents list"]
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") not in ("X", "i", "M"):
            problems.append(f"event {i}: unknown phase {e.get('ph') if isinstance(e, dict) else e!r}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int) or not isinstance(e.get("name"), str):
            problems.append(f"event {i}: pid and tid must be integers and name a string")
        if e["ph"] == "X" and not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
                                   and e["dur"] >= 0):
            problems.append(f"event {i}: a complete event needs ts and a non-negative dur")
        if e["ph"] == "i" and (not isinstance(e.get("ts"), (int, float)) or e.get("s") not in ("g", "p", "t")):
            problems.append(f"event {i}: an instant event needs ts and scope g, p or t")
        if len(problems) > 20:
            break
    return problems


def write_chrome_trace(doc: dict[str, Any], path: str | os.PathLike, option: str = "--trace") -> Path:
    """Write the document as compact JSON (atomically: a reader never sees half a file; a device or a
    FIFO is written in place, see :func:`profiler.files.atomic_write_bytes`)."""
    from profiler.files import atomic_write_bytes

    out = Path(path)
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False, default=_plain)
    atomic_write_bytes(out, text.encode("utf-8"), option)
    return out


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return str(x)
