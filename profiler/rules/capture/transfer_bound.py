"""transfer_bound: ranges (and the steady state as a whole) whose copies take as long as their compute."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from profiler.capture import intervals
from profiler.capture import series as S
from profiler.capture.phases import bounding_copy_directions, steady_breakdown
from profiler.capture.unit import NO_INT
from profiler.findings import Finding
from profiler.fmt import fmt_num
from profiler.rules import Thresholds, rule
from profiler.rules.capture._common import MAX_FINDINGS_PER_RULE, band, member_rows, milder, outermost, ranges_of
from profiler.capture.context import CaptureContext

TRANSFER_MIN_COPY_TO_COMPUTE = 1.0
"""Fire when a range's copy time is at least this multiple of its compute time ..."""
TRANSFER_MIN_COPY_FRACTION = 0.10
"""... and copies take at least this share of its span (per instance the longer of its wall time and the span
of the GPU work it launched)."""
TRANSFER_HIGH_COPY_TO_COMPUTE, TRANSFER_HIGH_COPY_FRACTION = 2.0, 0.5
TRANSFER_MEDIUM_COPY_TO_COMPUTE, TRANSFER_MEDIUM_COPY_FRACTION = 1.0, 0.25
"""Severity bands of a range: high when both its ratio and its share reach the high band, medium the medium."""
DIRECTION_CODES = {"HtoD": [S.CopyKind.HtoD], "DtoH": [S.CopyKind.DtoH], "DtoD": [S.CopyKind.DtoD],
                   "other_copy": [S.CopyKind.other, S.CopyKind.HtoH, S.CopyKind.PtoP]}
"""The ``Activity.copy_kind`` codes of each direction of :func:`~profiler.capture.phases.steady_breakdown`."""
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
    loops = _alternating(ctx)
    out = [] if loops else _inference_transfer_bound(ctx, t)
    if out:
        cands = [c for c in cands if ctx.label(c[1]["series_id"]) != out[0].range]
    found = [_range_finding(ctx, r, ev, t) for _, r, ev in outermost(ctx, cands, int(t["max_findings"]))]
    return out + (found if out or loops or not found else _with_steady_copies(ctx, found, t))


def _alternating(ctx: CaptureContext) -> bool:
    """Whether loops alternate with the inference (``Unit.alternating``): each then copies for itself, so the
    steady state's copies are no one inference's; each range's finding prices its own copies."""
    unit = getattr(ctx, "unit", None)
    return bool(unit is not None and getattr(unit, "alternating", ()))


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
                         codes: Iterable[int], owners: np.ndarray | None = None) -> dict[str, dict[str, float | None]]:
    """Per copy direction among ``codes`` (``Activity.copy_kind`` codes, in that order) that the copies
    ``rows`` (each counted ``times`` times) hold: copies, bytes and GPU time (ms) per instance (of
    ``instances``) and the rate (GB/s: bytes per ns; None without GPU time). With ``owners`` (the instance
    each copy belongs to, :func:`_copy_owners`), per instance that owns a copy of the direction, and how many do."""
    kind = act.copy_kind[rows]
    out = {}
    for code in codes:
        sel = kind == code
        if not sel.any():
            continue
        rr, w = rows[sel], times[sel]
        ns = float(((act.end_ns[rr] - act.start_ns[rr]) * w).sum())
        b = float((act.bytes[rr] * w).sum())
        own = None if owners is None else _owners_of(owners, kind, [code])
        n = instances if own is None else len(own)
        out[S.COPY_KINDS[code]] = {"copies_per_instance": int(w.sum()) / n, "bytes_per_instance": b / n,
                                   "gpu_ms_per_instance": ns / 1e6 / n, "gbps": b / ns if ns > 0 else None}
        if owners is not None:
            out[S.COPY_KINDS[code]]["instances"] = n
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


def _with_steady_copies(ctx: CaptureContext, found: list[Finding], t: Thresholds) -> list[Finding]:
    """Range findings where no inference owns the steady state's copies (a training step's parameter
    uploads): the ranges hold only the copies launched inside them, not those launched elsewhere or by threads
    the capture does not show. When the steady state's copies on all GPUs bound it, the range finding with the
    most copy time (``found[0]``) is priced by their exposed time on all GPUs and says how much of it its
    range holds; the other range findings, parts of that cost, are named in its evidence."""
    ph, act = ctx.phases, ctx.table.activity
    if ph is None or ctx.table.window or ctx.steady_ns <= 0:
        return found
    m = (act.start_ns >= ctx.judged_start_ns) & (act.start_ns <= ph.steady_end_ns)
    gpu = _per_gpu_ms(act, m)
    gpus = len(np.unique(act.device_id[m]))
    if gpu["copy"] <= 0 or gpu["compute"] <= 0 or gpu["copy"] < t["min_copy_to_compute"] * gpu["compute"] \
            or gpu["copy"] < t["min_copy_fraction"] * ctx.steady_ns / 1e6 * gpus:
        return found
    f = found[0]
    ev = f.evidence
    unknown = m & (act.kind == S.MEMCPY) & (act.api_start_ns == NO_INT)
    ev["steady_state"] = {
        "bound_by": " + ".join(bounding_copy_directions({k: gpu[k] for k in ("compute", *DIRECTION_CODES)})),
        "gpus": gpus, "gpu_ms_by_kind": {k: gpu[k] for k in ("compute", *DIRECTION_CODES)},
        "copy_ms": gpu["copy"], "overlap_ms": gpu["overlap"], "copy_to_compute": gpu["copy"] / gpu["compute"],
        "copy_fraction_of_gpu_time": gpu["copy"] / (ctx.steady_ns / 1e6 * gpus),
        "unknown_launch_copy_ms": _per_gpu_ms(act, unknown)["copy"],
        "range_exposed_copy_ms_total": ev["exposed_copy_ms_total"], "other_ranges": [g.range for g in found[1:]]}
    ev["exposed_copy_ms_total"] = max(gpu["copy"] - gpu["overlap"], 0.0)
    f.title = _steady_copies_title(ev, f.range)
    return [f]


def _per_gpu_ms(act: S.Activity, rows: np.ndarray) -> dict[str, float]:
    """GPU time (ms) of the activity ``rows`` (a mask): compute, each copy direction, all copies and the
    copies' overlap with compute, each the busy union on one GPU summed over the GPUs."""
    out = dict.fromkeys(("compute", *DIRECTION_CODES, "copy", "overlap"), 0.0)
    for dev in np.unique(act.device_id[rows]):
        on = rows & (act.device_id == dev)
        copy, compute = on & (act.kind == S.MEMCPY), on & (act.kind != S.MEMCPY)
        for key, sel in (("compute", compute), ("copy", copy),
                         *((d, copy & np.isin(act.copy_kind, codes)) for d, codes in DIRECTION_CODES.items())):
            out[key] += intervals.union_length(act.start_ns[sel], act.end_ns[sel]) / 1e6
        out["overlap"] += intervals.overlap_length(act.start_ns[copy], act.end_ns[copy],
                                                   act.start_ns[compute], act.end_ns[compute]) / 1e6
    return out


def _steady_copies_title(ev: dict[str, Any], label: str | None) -> str:
    """'HtoD-bound steady state: copies take 1875 ms of the 1939 ms of GPU time on 2 GPUs (96.7%), 41.8x the
    44.9 ms of compute; 0% of copy time overlaps compute. aten::to holds 1041 ms of the copies (...); 815 ms
    were launched by threads the capture does not show'."""
    st = ev["steady_state"]
    gpus = f"{st['gpus']} GPUs" if st["gpus"] > 1 else "the GPU"
    gpu_time_ms = st["copy_ms"] / st["copy_fraction_of_gpu_time"]
    unknown = st["unknown_launch_copy_ms"]
    rest = f"; {fmt_num(unknown, 4)} ms were launched by threads the capture does not show" if unknown > 0 else ""
    return (f"{st['bound_by']}-bound steady state: copies take {fmt_num(st['copy_ms'], 4)} ms of the "
            f"{fmt_num(gpu_time_ms, 4)} ms of GPU time on {gpus} ({100 * st['copy_fraction_of_gpu_time']:.1f}%), "
            f"{st['copy_to_compute']:.1f}x the "
            f"{fmt_num(st['gpu_ms_by_kind']['compute'], 3)} ms of compute; "
            f"{100 * st['overlap_ms'] / st['copy_ms']:.0f}% of copy time overlaps compute. {label} holds "
            f"{fmt_num(st['range_exposed_copy_ms_total'], 4)} ms of the copies "
            f"({fmt_num(ev['copy_ms_per_instance'], 3)} ms per instance, {ev['copy_to_compute']:.0f}x its "
            f"{fmt_num(ev['compute_ms_per_instance'], 3)} ms of compute){rest}")


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
    """The steady state's copy numbers per inference that copies: ``rows`` are its copies, ``by_kind`` the GPU
    time (ms) of each copy direction, the rest as :func:`_overlap_with_compute` and ``bound`` the directions
    that bound it. The exposed copy time is the whole steady state's."""
    act, n, unit = ctx.table.activity, ctx.steady_instances, ctx.unit
    once = np.ones(len(rows), dtype=np.int64)
    owners = _copy_owners(ctx, rows)
    copying = _owners_of(owners, act.copy_kind[rows], [c for d in bound for c in DIRECTION_CODES[d]])
    k = n if copying is None else len(copying)
    copying_compute_ms = _compute_of_copying_ms(ctx, copying, compute_ms, n)
    bound_ms = sum(by_kind[d] for d in bound)
    codes = (S.CopyKind.HtoD, S.CopyKind.DtoH, S.CopyKind.DtoD)
    return {
        "bound_by": " + ".join(bound), "gpu_ms_by_kind": {"compute": compute_ms, **by_kind},
        "copy_ms_per_instance": copy_ms / k, "compute_ms_per_instance": copying_compute_ms / k,
        "copy_to_compute": bound_ms / copying_compute_ms,
        "copy_fraction_of_steady_state": copy_ms / (ctx.steady_ns / 1e6),
        "overlap_ms_per_instance": overlap_ms / k, "exposed_copy_ms_total": max(copy_ms - overlap_ms, 0.0),
        "by_direction": _copies_by_direction(act, rows, once, n, codes, owners),
        "instances": n, "instances_with_copies": k, "pageable_copies": int(act.pageable[rows].sum()),
        "pageable_share_of_copy_time": _pageable_share(act, rows, once),
        "copies_on_own_streams": own_stream,
        "wall_ms_median": float(np.median(unit.host_ns[unit.steady])) / 1e6 if unit.count > unit.warmup else None,
    }


def _launch_slots(ctx: CaptureContext, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """For the activity ``rows``: the judged inference (its index among them) last started when the launch
    call started (-1 before the first), whether that call ran inside its range, and how many inferences
    are judged. A launch call not in the capture gets -2."""
    unit, act = ctx.unit, ctx.table.activity
    first = 0 if ctx.include_setup else min(unit.warmup, unit.count - 1)
    start_ns = unit.start_ns[first:]
    end_ns = start_ns + unit.host_ns[first:]
    launch_ns = act.api_start_ns[rows]
    prev = np.searchsorted(start_ns, launch_ns, "right") - 1
    inside = (prev >= 0) & (launch_ns <= end_ns[np.maximum(prev, 0)])
    return np.where(launch_ns == NO_INT, -2, prev), inside, len(start_ns)


def _copy_owners(ctx: CaptureContext, rows: np.ndarray) -> np.ndarray:
    """The judged inference each copy of ``rows`` belongs to, by its launch call: inside an inference's
    range, that inference's; outside them an HtoD copy feeds the next inference (its input) and any other
    copy follows the last one (its output). -1 where the launch call is not in the capture."""
    prev, inside, n = _launch_slots(ctx, rows)
    feeds_next = (ctx.table.activity.copy_kind[rows] == S.CopyKind.HtoD) & ~inside
    return np.where(prev == -2, -1, np.clip(prev + feeds_next, 0, n - 1))


def _owners_of(owners: np.ndarray, kinds: np.ndarray, codes: list[int]) -> np.ndarray | None:
    """The judged inferences (sorted indices) that own a copy whose direction code (``kinds``) is among
    ``codes``; None when there is none or one of those copies has no known launch call (which inferences
    copy is then unknown: all of them are taken to)."""
    own = owners[np.isin(kinds, codes)]
    return None if not len(own) or (own < 0).any() else np.unique(own)


def _compute_of_copying_ms(ctx: CaptureContext, copying: np.ndarray | None, compute_ms: float, n: int) -> float:
    """The compute of the judged inferences that copy (``copying``, of ``n``; None: all of them): the steady
    state's ``compute_ms`` times the share of the compute launched inside the inferences that those launched
    (an even share when no compute is launched inside them)."""
    k = n if copying is None else len(copying)
    if k == n:
        return compute_ms
    act = ctx.table.activity
    m = (act.start_ns >= ctx.judged_start_ns) & (act.start_ns <= ctx.phases.steady_end_ns) & (act.kind != S.MEMCPY)
    rows = np.flatnonzero(m)
    prev, inside, _ = _launch_slots(ctx, rows)
    rows, prev = rows[inside], prev[inside]
    all_ns = intervals.union_length(act.start_ns[rows], act.end_ns[rows])
    if all_ns <= 0:
        return compute_ms * k / n
    mine = rows[np.isin(prev, copying)]
    return compute_ms * intervals.union_length(act.start_ns[mine], act.end_ns[mine]) / all_ns


def _inference_title(ev: dict[str, Any], bound: list[str], bound_ms: float, overlap_pct: float) -> str:
    """'HtoD-bound: HtoD copies take 2.1 ms of GPU time per inference on average (...) against 1 ms of
    compute (2.10x); 3% of copy time overlaps compute', each bounding direction's copies in the brackets;
    'per inference in the 60 of 120 inferences that copy' when only some inferences copy."""
    names, n, k, dirs = ev["bound_by"], ev["instances"], ev["instances_with_copies"], ev["by_direction"]
    each = "; ".join(f"{d}: {_copies_text(dirs.get(d))}" for d in bound) if len(bound) > 1 else \
        _copies_text(dirs.get(bound[0]))
    which = "on average" if k == n else f"in the {k} of {n} inferences that copy"
    return (f"{names}-bound: {names} copies take {fmt_num(bound_ms / k, 3)} ms of GPU time per inference {which} "
            f"({each}) against {fmt_num(ev['compute_ms_per_instance'], 3)} ms of compute "
            f"({ev['copy_to_compute']:.2f}x); {overlap_pct:.0f}% of copy time overlaps compute")
