"""pageable_memcpy: copies from or to pageable host memory, against pinned copies of the same size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import series as S
from profiler.findings import Finding
from profiler.fmt import fmt_num
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import band
from profiler.capture.context import CaptureContext

PAGEABLE_MIN_TOTAL_US = 50.0
"""Ignore captures whose pageable copies add up to less GPU time than this."""
PAGEABLE_STAGED_MIN_BYTES = 64 * 1024
"""Copies at least this large are staged through the driver's pinned buffer (their host time is the cost)."""
PAGEABLE_HIGH_SHARE = 0.10
"""High severity when pageable copies take this share of the active GPU window ..."""
PAGEABLE_HIGH_PINNED_SPEEDUP = 2.0
"""... or pinned copies of the same size run this many times faster; ..."""
PAGEABLE_MEDIUM_SHARE = 0.01
"""... medium from this share."""
PAGEABLE_ADVICE = (
    "Allocate host buffers as pinned memory (cudaHostAlloc / cudaMallocHost, tensor.pin_memory(), "
    "cudaHostRegister for existing buffers) and copy with cudaMemcpyAsync on a stream: pageable copies are "
    "staged through a driver buffer, run slower and block the host even when asynchronous.")


@rule("pageable_memcpy", scope="capture", defaults={
    "min_total_us": PAGEABLE_MIN_TOTAL_US, "high_share": PAGEABLE_HIGH_SHARE,
    "high_pinned_speedup": PAGEABLE_HIGH_PINNED_SPEEDUP, "medium_share": PAGEABLE_MEDIUM_SHARE,
    "staged_min_bytes": PAGEABLE_STAGED_MIN_BYTES})
def pageable_memcpy(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Copies from or to pageable host memory, against pinned copies of the same size."""
    act = ctx.table.activity
    copies = np.flatnonzero(act.kind == S.MEMCPY)
    pg = copies[act.pageable[copies]]
    total_ns = float((act.end_ns[pg] - act.start_ns[pg]).sum())
    if not len(pg) or total_ns < t["min_total_us"] * 1e3:
        return []
    memcpy = getattr(ctx.trace, "memcpy", None)
    by_dir, compare, saving_ns = _against_pinned(_copy_frame(act, memcpy, copies))
    share = total_ns / (sum(d.active_ns for d in ctx.devices) or 1)
    api_ms, big_api_ms, n_async = _host_cost(act, memcpy, pg, t["staged_min_bytes"])
    per_range, top_range = _holding_ranges(ctx, len(pg))
    evidence = {
        "copies": len(pg), "bytes": int(act.bytes[pg].sum()), "gpu_ms": total_ns / 1e6,
        "share_of_active_gpu_time": share, "by_direction": by_dir, "api_ms": api_ms,
        "async_calls_made_synchronous": n_async, "ranges": per_range,
        "pinned_comparison": compare[:10],
        "estimated_saving_ms": saving_ns / 1e6 if compare else None,
        # without a pinned twin the saving is unknown; it cannot exceed the copies plus the host time they block
        # (small copies cost their API call whatever the memory: only large ones' host time counts)
        "cost_upper_bound_ms": total_ns / 1e6 + big_api_ms,
    }
    return [Finding(
        rule="pageable_memcpy", severity=_severity(share, compare, t), range=top_range,
        title=_title(len(pg), total_ns, compare),
        evidence=evidence,
        threshold=t.pick("min_total_us", "high_share"),
        recommendation=PAGEABLE_ADVICE,
    )]


def _copy_frame(act: S.Activity, memcpy: pd.DataFrame | None, copies: np.ndarray) -> pd.DataFrame:
    """One row per copy (the activity rows ``copies``): direction, bytes, duration (ns), whether it touches
    pageable memory (pg), and whether it is pinned on its host side without touching pageable memory (pin)."""
    pageable = act.pageable[copies]
    pinned_side = np.zeros(len(copies), dtype=bool)
    if memcpy is not None and len(memcpy):
        pin = S.is_value(memcpy, "src_kind", "pinned") | S.is_value(memcpy, "dst_kind", "pinned")
        pinned_side = pin[act.frame_rows(copies)]
    return pd.DataFrame({"dir": np.asarray(S.COPY_KINDS, dtype=object)[act.copy_kind[copies]],
                         "bytes": act.bytes[copies], "ns": act.end_ns[copies] - act.start_ns[copies],
                         "pg": pageable, "pin": pinned_side & ~pageable})


def _severity(share: float, compare: list[dict], t: Thresholds) -> str:
    """By the pageable copies' share of the active GPU window, high too when pinned copies of some size
    run ``high_pinned_speedup`` times faster (no pinned copy of a size to compare with says nothing)."""
    slow = max((c["pinned_speedup"] for c in compare), default=float("nan"))
    if slow >= t["high_pinned_speedup"] and np.isfinite(slow):
        return "high"
    return band(share, t["high_share"], t["medium_share"])


def _title(copies: int, total_ns: float, compare: list[dict]) -> str:
    """The finding's title: how many copies, their GPU time, and the rates of the size moving most data."""
    if compare:
        c = compare[0]
        cmp = (f"; {c['bytes']:,} B {c['direction']} copies run at {c['pageable_gbps']:.1f} GB/s from pageable "
               f"memory against {c['pinned_gbps']:.1f} GB/s pinned")
    else:
        cmp = "; no pinned copy of the same size in the capture to compare with"
    return f"{copies} copies touch pageable host memory ({fmt_num(total_ns / 1e6, 3)} ms of GPU copy time){cmp}"


def _against_pinned(df: pd.DataFrame) -> tuple[dict[str, dict], list[dict], float]:
    """Per direction, the pageable copies' totals; per (direction, size) with pinned copies of the same
    size, both rates (most data first); and the GPU time (ns) pinned copies would have saved."""
    by_dir = {}
    compare = []
    saving_ns = 0.0
    for direction, g in df[df["pg"]].groupby("dir"):
        by_dir[direction] = {"count": int(len(g)), "bytes": int(g["bytes"].sum()), "gpu_ms": float(g["ns"].sum()) / 1e6,
                             "gbps": float(g["bytes"].sum() / max(g["ns"].sum(), 1))}
        pin = df[df["pin"] & (df["dir"] == direction)]
        for size, gs in g.groupby("bytes"):
            same = pin[pin["bytes"] == size]
            if not len(same) or size <= 0:
                continue
            pg_bw = size / max(float(gs["ns"].median()), 1.0)
            pin_bw = size / max(float(same["ns"].median()), 1.0)
            extra = float(gs["ns"].sum()) - len(gs) * float(same["ns"].median())
            saving_ns += max(extra, 0.0)
            compare.append({"direction": direction, "bytes": int(size), "pageable_count": int(len(gs)),
                            "pinned_count": int(len(same)), "pageable_gbps": pg_bw, "pinned_gbps": pin_bw,
                            "pinned_speedup": pin_bw / pg_bw if pg_bw > 0 else float("nan"),
                            "pageable_median_us": float(gs["ns"].median()) / 1e3,
                            "pinned_median_us": float(same["ns"].median()) / 1e3})
    compare.sort(key=lambda c: -c["pageable_count"] * c["bytes"])
    return by_dir, compare, saving_ns


def _host_cost(act: Any, memcpy: pd.DataFrame | None, pg: np.ndarray, staged_min_bytes: int,
               ) -> tuple[float | None, float, int | None]:
    """(API time of the pageable copies ``pg`` (activity rows) in ms, None without API times; that of the
    copies large enough to be staged through the driver's buffer; how many were asynchronous calls made
    synchronous): async copies from pageable memory block the host."""
    api_ms = None
    big_api_ms = 0.0
    n_async = None
    if memcpy is not None and len(memcpy) and "api_start_ns" in memcpy.columns:
        rows = act.frame_rows(pg)
        a0 = S.i64(memcpy, "api_start_ns", -1)[rows]
        a1 = S.i64(memcpy, "api_end_ns", -1)[rows]
        ok = (a0 >= 0) & (a1 >= a0) & (S.i64(memcpy, "api_tid", -1)[rows] >= 0)
        api_ms = float((a1 - a0)[ok].sum()) / 1e6 if ok.any() else None
        big = ok & (act.bytes[pg] >= staged_min_bytes)
        big_api_ms = float((a1 - a0)[big].sum()) / 1e6
        if "api_name" in memcpy.columns:
            codes, names = S.factor(memcpy, "api_name")
            is_async = np.array(["Async" in str(n) for n in names], dtype=bool)
            n_async = int(is_async[codes[rows]].sum())
    return api_ms, big_api_ms, n_async


def _holding_ranges(ctx: CaptureContext, copies: int) -> tuple[dict[str, int], str | None]:
    """The ranges holding the most pageable copies (label -> count), and the finding's range: the first,
    when it holds at least half of the ``copies``."""
    inst = ctx.table.instances
    per_range = {}
    if not ctx.table.window and len(inst):
        s = inst.groupby("series_id")["pageable_copies"].sum()
        for sid, n in s[s > 0].sort_values(ascending=False).head(5).items():
            per_range[ctx.label(int(sid))] = int(n)
    top_range = None
    if per_range:
        first = next(iter(per_range))
        if per_range[first] * 2 >= copies:
            top_range = first
    return per_range, top_range
