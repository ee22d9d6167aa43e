"""transfer_bound: ranges (and the steady state as a whole) whose copies take as long as their compute."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture import series as S
from profiler.capture.phases import bounding_copy_directions, steady_breakdown
from profiler.findings import Finding
from profiler.report.fmt import fmt_num
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import MAX_FINDINGS_PER_RULE, band, member_rows, milder, outermost, ranges_of
from profiler.rules.context import CaptureContext

TRANSFER_MIN_COPY_TO_COMPUTE = 1.0
"""Fire when a range's copy time is at least this multiple of its compute time ..."""
TRANSFER_MIN_COPY_FRACTION = 0.10
"""... and copies take at least this share of its span (per instance the longer of its wall time and the span
of the GPU work it launched)."""
TRANSFER_HIGH_COPY_TO_COMPUTE, TRANSFER_HIGH_COPY_FRACTION = 2.0, 0.5
TRANSFER_MEDIUM_COPY_TO_COMPUTE, TRANSFER_MEDIUM_COPY_FRACTION = 1.0, 0.25
"""Severity bands of a range: high when both its ratio and its share reach the high band, medium the medium."""
TRANSFER_MIN_UNIT_COMPUTE_SHARE = 0.5
"""Share of the steady state's compute the inference unit must have launched for the steady state's
copies to count per inference (TensorRT apps launch all of it inside the enqueue ranges, copies outside)."""


SERIALISED_OVERLAP = 0.05
"""Copies on streams of their own that overlap compute for less than this share of their time are serialised."""
SERIALISED_COPY_ADVICE = (
    "The copies already run on a stream of their own but overlap almost no compute: something serialises them "
    "(a host-side synchronize on the copy stream before the compute is queued). Record an event after each copy "
    "and make the compute stream wait on it (cudaStreamWaitEvent, torch.cuda.Stream.wait_event) instead of "
    "synchronising the host, and queue the next batch's copy before this batch's compute. ")


def transfer_advice(tensorrt: bool, pageable_copies: int, pageable_share: float, directions: list[str]) -> str:
    """What to do about copies that bound the work: pinned memory first only where pageable copies take at
    least half the copy time (``pageable_share``; pinned copies already run at the link's rate and pinning
    cannot speed them up), otherwise fewer bytes first; the overlap advice speaks of the inputs (HtoD), the
    outputs (DtoH) or both."""
    inputs, outputs = "HtoD" in directions, "DtoH" in directions
    overlap = ("overlap each batch's input and output copies with the neighbouring batches' {}" if inputs and outputs
               else "overlap this batch's output copy with the next batch's {}" if outputs
               else "overlap the next batch's input copy with this batch's {}" if inputs
               else "overlap the copies with {}")
    pin = f"pinned host buffers (cudaHostAlloc / cudaMallocHost) for the {pageable_copies} pageable copies"
    if tensorrt:
        fewer = ("shrink I/O (FP16 or INT8 I/O formats, trtexec --inputIOFormats / --outputIOFormats, keep "
                 "pre/post-processing on the GPU)")
        overlap = overlap.format("enqueue") + " (two execution contexts on two streams, double-buffered I/O)"
        tail = " trtexec --noDataTransfers shows the compute-only bound."
        if pageable_copies and pageable_share >= 0.5:
            return f"TensorRT: use {pin} and cudaMemcpyAsync on the inference's stream; {overlap}; {fewer}.{tail}"
        rest = f"; use {pin}" if pageable_copies else ""
        return f"TensorRT: {_pinned_already(pageable_copies)}: {fewer}; {overlap}{rest}.{tail}"
    fewer = ("move fewer bytes: keep tensors on the GPU between steps, send compact inputs (uint8 images, FP16 "
             "or INT8) and decode, normalize and post-process on the GPU")
    overlap = overlap.format("compute") + " on another stream (cudaMemcpyAsync, double buffering)"
    if pageable_copies and pageable_share >= 0.5:
        return f"Use {pin}, then {overlap}; {fewer}; batch to amortise per-copy cost."
    rest = f"; use {pin}" if pageable_copies else ""
    text = f"{_pinned_already(pageable_copies)}: {fewer}; {overlap}{rest}; batch to amortise per-copy cost."
    return text[0].upper() + text[1:]


def _pinned_already(pageable_copies: int) -> str:
    return "most copy time is in pinned copies" if pageable_copies else "the copies are already pinned"


@rule("transfer_bound", scope="capture", defaults={
    "min_copy_to_compute": TRANSFER_MIN_COPY_TO_COMPUTE, "min_copy_fraction": TRANSFER_MIN_COPY_FRACTION,
    "max_findings": MAX_FINDINGS_PER_RULE, "min_unit_compute_share": TRANSFER_MIN_UNIT_COMPUTE_SHARE,
    "high_copy_to_compute": TRANSFER_HIGH_COPY_TO_COMPUTE, "high_copy_fraction": TRANSFER_HIGH_COPY_FRACTION,
    "medium_copy_to_compute": TRANSFER_MEDIUM_COPY_TO_COMPUTE, "medium_copy_fraction": TRANSFER_MEDIUM_COPY_FRACTION})
def transfer_bound(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """Ranges whose copies take as long as their compute."""
    cands = [c for c in (_candidate(ctx, r, t) for r in ranges_of(ctx)) if c is not None]
    out = _inference_transfer_bound(ctx, t)
    if out:
        cands = [c for c in cands if ctx.label(c[1]["series_id"]) != out[0].range]
    return out + [_range_finding(ctx, r, ev, t) for _, r, ev in outermost(ctx, cands, int(t["max_findings"]))]


def _candidate(ctx: CaptureContext, r: dict[str, Any], t: Thresholds) -> tuple[float, dict, dict] | None:
    """(copy time in ns, range, evidence) for a range whose copies take at least ``min_copy_to_compute`` times
    its compute and ``min_copy_fraction`` of its span; else None."""
    tot = r["_totals"]
    # span: per instance the longer of its wall time and its GPU work's span; async copies run after
    # the range closes, so copy time over the wall time alone is no fraction (6.45 on a 2-GPU capture)
    copy, compute, span = float(tot["copy_ns"]), float(tot["compute_ns"]), float(tot["span_ns"])
    if copy <= 0 or span <= 0 or compute <= 0:
        return None  # a copy-only range (a staging step) has no compute to be bound against
    ratio = copy / compute
    frac = copy / span
    if ratio < t["min_copy_to_compute"] or frac < t["min_copy_fraction"]:
        return None
    table = ctx.table
    inst = table.instances_of(r["series_id"])
    act = table.activity
    rows, times = member_rows(table, inst, "activity", lambda rows: act.kind[rows] == S.MEMCPY)
    busy = float(tot["gpu_busy_ns"])
    return copy, r, {
        "copy_ms_per_instance": copy / 1e6 / len(inst), "compute_ms_per_instance": compute / 1e6 / len(inst),
        "copy_to_compute": ratio, "copy_fraction_of_span": frac,
        "overlap_ms_per_instance": max(copy + compute - busy, 0.0) / 1e6 / len(inst),
        "bytes_per_instance": tot["copy_bytes"] / len(inst),
        "pageable_copies": int(tot["pageable_copies"]),
        "pageable_share_of_copy_time": _pageable_share(act, rows, times),
        "by_direction": _copies_by_direction(act, rows, times, len(inst), np.unique(act.copy_kind[rows])),
        "wall_ms_median": r["wall_ms"]["median"], "instances": r["count"],
    }


def _pageable_share(act: S.Activity, rows: np.ndarray, times: np.ndarray) -> float:
    """The share of the copies' GPU time (the activity ``rows``, each counted ``times`` times) in copies
    that touch pageable memory; 0 without copy time."""
    dur = (act.end_ns[rows] - act.start_ns[rows]) * times
    return float(dur[act.pageable[rows]].sum()) / float(dur.sum()) if dur.sum() > 0 else 0.0


def _copies_by_direction(act: S.Activity, rows: np.ndarray, times: np.ndarray, instances: int,
                         codes: Iterable[int]) -> dict[str, dict[str, float | None]]:
    """Per copy direction among ``codes`` (``Activity.copy_kind`` codes, in that order) that the copies
    ``rows`` (each counted ``times`` times) hold: copies, bytes and GPU time (ms) per instance (of
    ``instances``) and the rate (GB/s: bytes per ns; None without GPU time)."""
    kind = act.copy_kind[rows]
    out = {}
    for code in codes:
        sel = kind == code
        if not sel.any():
            continue
        rr, w = rows[sel], times[sel]
        ns = float(((act.end_ns[rr] - act.start_ns[rr]) * w).sum())
        b = float((act.bytes[rr] * w).sum())
        out[S.COPY_KINDS[code]] = {"copies_per_instance": int(w.sum()) / instances,
                                   "bytes_per_instance": b / instances,
                                   "gpu_ms_per_instance": ns / 1e6 / instances, "gbps": b / ns if ns > 0 else None}
    return out


def _range_finding(ctx: CaptureContext, r: dict[str, Any], ev: dict[str, Any], t: Thresholds) -> Finding:
    """The finding of one transfer-bound range: the milder of its ratio's and its share's severity bands;
    the advice names the directions that bound it."""
    ev["exposed_copy_ms_total"] = max(ev["copy_ms_per_instance"] - ev["overlap_ms_per_instance"], 0.0) * r["count"]
    ratio, frac = ev["copy_to_compute"], ev["copy_fraction_of_span"]
    sev = milder(band(ratio, t["high_copy_to_compute"], t["medium_copy_to_compute"]),
                 band(frac, t["high_copy_fraction"], t["medium_copy_fraction"]))
    directions = bounding_copy_directions({d: v["gpu_ms_per_instance"] for d, v in ev["by_direction"].items()})
    return Finding(
        rule="transfer_bound", severity=sev, range=ctx.label(r["series_id"]),
        title=_range_title(ev, ratio, ctx.table.window),
        evidence=ev,
        threshold=t.pick("min_copy_to_compute", "min_copy_fraction"),
        recommendation=transfer_advice(ctx.tensorrt, ev["pageable_copies"], ev["pageable_share_of_copy_time"],
                                       directions),
    )


def _range_title(ev: dict[str, Any], ratio: float, window: bool) -> str:
    copy, compute = fmt_num(ev["copy_ms_per_instance"], 3), fmt_num(ev["compute_ms_per_instance"], 3)
    if window:  # no NVTX: one window of GPU work, no instances
        return (f"Transfer-bound: copies take {copy} ms, {ratio:.2f}x the {compute} ms of compute, in the "
                f"{fmt_num(ev['wall_ms_median'], 3)} ms window of GPU work")
    return (f"Transfer-bound: copies take {copy} ms per instance, {ratio:.2f}x its {compute} ms of compute "
            f"(median wall {fmt_num(ev['wall_ms_median'], 3)} ms)")


def _copies_text(d: dict[str, Any] | None) -> str:
    """'0.58 copies per inference of 128 MiB at 10.8 GB/s' for one copy direction."""
    if not d or not d["copies_per_instance"]:
        return "no copy of this direction"
    size = d["bytes_per_instance"] / d["copies_per_instance"]
    rate = f" at {d['gbps']:.3g} GB/s" if d.get("gbps") else ""
    n = d["copies_per_instance"]
    return f"{n:.2g} {'copy' if n == 1 else 'copies'} per inference of {size / 2**20:.3g} MiB{rate}"


def _inference_transfer_bound(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
    """The steady state as a whole: copies of one direction take longer than the compute (copies made
    outside the inference ranges, as TensorRT applications make them, count)."""
    unit, ph = ctx.unit, ctx.phases
    if unit is None or ph is None or ctx.steady_ns <= 0 or ctx.table.window:
        return []  # without NVTX ranges there are no inferences: the window's range finding says it
    act = ctx.table.activity
    lo = ctx.judged_start_ns
    m = (act.start_ns >= lo) & (act.start_ns <= ph.steady_end_ns)
    c = m & (act.kind == S.MEMCPY)
    copy_ms = intervals.union_length(act.start_ns[c], act.end_ns[c]) / 1e6
    if copy_ms < t["min_copy_fraction"] * (ctx.steady_ns / 1e6):
        return []  # checked first: the breakdown below unions all of the steady state's kernels
    by_kind = steady_breakdown(act, lo, ph.steady_end_ns)
    compute = by_kind.pop("compute")
    direction = max(by_kind, key=by_kind.get)
    if not _unit_launched_compute(ctx, compute, t) or by_kind[direction] <= 0 or compute <= 0 \
            or by_kind[direction] < t["min_copy_to_compute"] * compute:
        return []
    bound = bounding_copy_directions(by_kind)  # holds ``direction``, the busiest, whose time is above 0
    overlap_ms, own_stream = _overlap_with_compute(act, c, m & (act.kind != S.MEMCPY))
    ev = _steady_evidence(ctx, np.flatnonzero(c), by_kind, compute, copy_ms, overlap_ms, own_stream, bound)
    bound_ms = sum(by_kind[d] for d in bound)
    return [Finding(
        rule="transfer_bound", severity="high", range=unit.label,
        title=_inference_title(ev, bound, bound_ms, 100 * overlap_ms / copy_ms),
        evidence=ev,
        threshold=t.pick("min_copy_to_compute", "min_copy_fraction"),
        recommendation=(SERIALISED_COPY_ADVICE if own_stream and overlap_ms < SERIALISED_OVERLAP * copy_ms else "")
        + transfer_advice(ctx.tensorrt, ev["pageable_copies"], ev["pageable_share_of_copy_time"], bound),
    )]


def _unit_launched_compute(ctx: CaptureContext, compute_ms: float, t: Thresholds) -> bool:
    """Whether the inference unit launched at least ``min_unit_compute_share`` of the steady state's
    ``compute_ms``: its copies are charged to the inferences only when the inferences are its work (a
    training capture whose "unit" is one of many op ranges is not)."""
    if ctx.unit.series_id is None:
        return True
    unit_range = next((r for r in ctx.ranges if r["series_id"] == ctx.unit.series_id), None)
    unit_compute_ms = float(unit_range["_totals"]["compute_ns"]) / 1e6 if unit_range else 0.0
    return unit_compute_ms >= t["min_unit_compute_share"] * compute_ms


def _overlap_with_compute(act: S.Activity, copies: np.ndarray, compute: np.ndarray) -> tuple[float, bool]:
    """(GPU time in ms the ``copies`` overlap the ``compute``, both row masks; whether the copies run only on
    streams no compute runs on: on streams of their own, copies that still overlap no compute are serialised)."""
    overlap_ms = intervals.overlap_length(act.start_ns[copies], act.end_ns[copies],
                                          act.start_ns[compute], act.end_ns[compute]) / 1e6
    own_stream = not np.isin(np.unique(act.stream_id[copies]), np.unique(act.stream_id[compute])).any()
    return overlap_ms, own_stream


def _steady_evidence(ctx: CaptureContext, rows: np.ndarray, by_kind: dict[str, float], compute_ms: float,
                     copy_ms: float, overlap_ms: float, own_stream: bool, bound: list[str]) -> dict[str, Any]:
    """The steady state's copy numbers per inference: ``rows`` are its copies, ``by_kind`` the GPU time (ms)
    of each copy direction, the rest as :func:`_overlap_with_compute` and ``bound`` the directions that bound it."""
    act, n, unit = ctx.table.activity, ctx.steady_instances, ctx.unit
    once = np.ones(len(rows), dtype=np.int64)
    bound_ms = sum(by_kind[d] for d in bound)
    return {
        "bound_by": " + ".join(bound), "gpu_ms_by_kind": {"compute": compute_ms, **by_kind},
        "copy_ms_per_instance": copy_ms / n, "compute_ms_per_instance": compute_ms / n,
        "copy_to_compute": bound_ms / compute_ms, "copy_fraction_of_steady_state": copy_ms / (ctx.steady_ns / 1e6),
        "overlap_ms_per_instance": overlap_ms / n, "exposed_copy_ms_total": max(copy_ms - overlap_ms, 0.0),
        "by_direction": _copies_by_direction(act, rows, once, n, (S.CopyKind.HtoD, S.CopyKind.DtoH, S.CopyKind.DtoD)),
        "instances": n, "pageable_copies": int(act.pageable[rows].sum()),
        "pageable_share_of_copy_time": _pageable_share(act, rows, once),
        "copies_on_own_streams": own_stream,
        "wall_ms_median": float(np.median(unit.host_ns[unit.steady])) / 1e6 if unit.count > unit.warmup else None,
    }


def _inference_title(ev: dict[str, Any], bound: list[str], bound_ms: float, overlap_pct: float) -> str:
    """'HtoD-bound: HtoD copies take 2.1 ms of GPU time per inference on average (...) against 1 ms of
    compute (2.10x); 3% of copy time overlaps compute', each bounding direction's copies in the brackets."""
    names, n, dirs = ev["bound_by"], ev["instances"], ev["by_direction"]
    each = "; ".join(f"{d}: {_copies_text(dirs.get(d))}" for d in bound) if len(bound) > 1 else \
        _copies_text(dirs.get(bound[0]))
    return (f"{names}-bound: {names} copies take {fmt_num(bound_ms / n, 3)} ms of GPU time per inference on average "
            f"({each}) against {fmt_num(ev['compute_ms_per_instance'], 3)} ms of compute "
            f"({ev['copy_to_compute']:.2f}x); {overlap_pct:.0f}% of copy time overlaps compute")
