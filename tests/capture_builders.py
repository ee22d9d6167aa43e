"""Shared by the capture tests: synthetic frame builders (times in ns) and each real capture analysed once.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze_path

_CACHE: dict[Path, object] = {}


def result_of(path: Path):
    """``analyze_path`` of a real capture with every instance (setup included, as SQL sees it), once."""
    if path not in _CACHE:
        _CACHE[path] = analyze_path(path, AnalysisOptions(include_setup=True))  # every instance, as SQL sees it
    return _CACHE[path]


T = 1_000  # one microsecond in ns


def kernels(*rows, **common) -> pd.DataFrame:
    """rows: (start, end, api_tid, api_start[, correlation_id]) in ns."""
    out = []
    for i, r in enumerate(rows):
        start, end, tid, api_start = r[:4]
        out.append({"start_ns": start, "end_ns": end, "api_tid": tid, "api_start_ns": api_start,
                    "api_end_ns": api_start + 2 * T, "correlation_id": r[4] if len(r) > 4 else i + 1,
                    "device_id": 0, "stream_id": 7, "pid": 1, "name": "k", "short_name": "k", **common})
    return pd.DataFrame(out)


def ranges(*rows) -> pd.DataFrame:
    """rows: (name, start, end or None, global_tid[, domain[, event_type[, end_tid]]])."""
    out = []
    for r in rows:
        name, start, end, tid = r[:4]
        out.append({"name": name, "start_ns": start, "end_ns": end, "global_tid": tid,
                    "domain": r[4] if len(r) > 4 else "", "event_type": r[5] if len(r) > 5 else "push_pop",
                    "end_global_tid": r[6] if len(r) > 6 else tid, "pid": 1, "tid": tid})
    df = pd.DataFrame(out)
    df["end_ns"] = df["end_ns"].astype("Int64")
    return df


def api(*rows) -> pd.DataFrame:
    """rows: (name, start, end, global_tid, category)."""
    return pd.DataFrame([{"name": n, "start_ns": s, "end_ns": e, "global_tid": t, "category": c, "pid": 1,
                          "tid": t, "api": "runtime", "correlation_id": i + 1000}
                         for i, (n, s, e, t, c) in enumerate(rows)])


def capture_or_skip(path: Path) -> Path:
    """``path`` when the capture is there, else skip the test saying which is missing."""
    if not Path(path).is_file():
        pytest.skip(f"{path} not found")
    return Path(path)


def two_threads(*, same_context: bool, overlap: bool, waits: str | None):
    """Two threads, 20 inferences each of one 400 us kernel; contexts 1 and 2 (or one), kernels one after the
    other (or at once); each thread waits ``waits`` ('alternate' or 'together') 450 us per iteration."""
    from profiler.capture.trace import Trace

    ks, rs, os_rows = [], [], []
    for i in range(20):
        for th in (1, 2):
            t0 = 1_000_000 + i * 1000 * T + (0 if overlap or th == 1 else 500 * T)
            rs.append(("infer", t0, t0 + 450 * T, th))
            ks.append((t0 + 20 * T, t0 + 420 * T, th, t0 + 5 * T, 1 + 2 * (i * 2 + th)))
            if waits:  # alternate: each waits while the other runs
                base = 1_000_000 + i * 1000 * T
                w0 = base + (500 * T if th == 1 or waits == "together" else 0)
                os_rows.append({"start_ns": w0, "end_ns": w0 + 450 * T, "name": "sem_wait", "pid": 1, "tid": th,
                                "global_tid": th})
    frame = kernels(*ks)
    frame["context_id"] = [1 if same_context else r[2] for r in ks]
    frame["stream_id"] = [10 + r[2] for r in ks]
    gpus = [{"device_id": 0, "name": "GPU", "compute_major": 8, "compute_minor": 0}]
    osrt = pd.DataFrame(os_rows) if os_rows else None
    return Trace.from_frames(meta={"gpus": gpus}, kernels=frame, nvtx=ranges(*rs),
                             **({"osrt": osrt} if osrt is not None else {}))
