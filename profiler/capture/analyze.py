"""Diagnose a capture: the inference unit and its layers, setup vs steady state, streams, series
statistics, GPU busy projection, idle gaps, then the capture rules with each finding's impact.

    from profiler.capture.analyze import analyze, analyze_path
    result = analyze_path("capture.sqlite")          # or analyze(trace) on a loaded Trace
    result.findings                                  # profiler.findings.Finding objects
    json.dump(result.to_json(), open("out.json", "w"))

``AnalysisResult.to_json()`` is the ``trtprof analyze --json`` document::

    {"kind": "analyze",
     "integrity": {complete, problems: [{kind, what, evidence, lost}], trusted, untrusted, rules_not_run, notes,
                   parts, thresholds},   # checked first: profiler.capture.integrity
     "capture": {source_path, nsys_version, schema_version, gpus, processes, capture_start_ns,
                 duration_ms, counts: {kernels, memcpy, ...}, missing: [...], warnings: [...]},
     "ranges": [{"name", "domain", "count", "wall_ms": {min, mean, median, p90, p95, p99, max, cov_pct},
                 "gpu_busy_ms": {...}, "gpu_busy_fraction", "outliers": [{index, wall_ms, excess_ms,
                 cause, detail}], "outlier_count", per-instance host figures (api_ms_per_instance,
                 launches_per_instance, sync_calls_per_instance, compute_ms_per_instance,
                 copy_ms_per_instance, osrt_ms_per_instance, total_wall_ms, ...),
                 "instances": {"start_ms", "wall_ms", "gpu_busy_ms", "number" (numbered series)}, made_from (a
                 range made from CUDA calls or a frame of stage ranges, not an NVTX range), numbered: {numbers,
                 first, last} (names that differ only by a number, profiler.capture.numbered)}, ...],
                 # biggest total wall first
     "findings": [{rule, scope: "capture", severity, title, range, evidence, threshold, recommendation,
                   impact: {ms_per_instance, share}}, ...],       # costliest first
     "inference": {series, source: "tensorrt"|"nvtx"|"window", count, steady_count, warmup_count,
                   gpu_ms, gpu_latency_ms, queue_ms, host_ms (statistics like wall_ms), graph_launches,
                   bound_by: "host"|"compute"|"HtoD"|"DtoH"|..., graph_replays: true when each inference is
                   a cudaGraphLaunch of TensorRT's captured enqueue (profiler.capture.replays), chosen: why this
                   unit, in words (absent for a window),
                   copies_outside_per_inference: {ms, count}, io_bytes_per_inference: {HtoD, DtoH} (all of
                   the steady state's copies per inference), alternates_with: [ranges taking turns with it],
                   throughput: {inferences, duration_ms, per_s, per_thread: [{tid, count, per_s}],
                   per_stream: [{device, stream, count, per_s}]} (steady state; null without an inference)},
     "concurrency": {contexts: [{device, context, kernels, threads, streams, busy_ms, busy_share}],
                     context_overlap_ms: {device: ms, for devices with several contexts}, threads: [{tid,
                     kernels, inferences, gpu_busy_ms, lock_wait_ms, lock_wait_share, lock_waits}],
                     lock_wait_overlap_ms, thread_gpu_overlap_ms, lock_wait_calls}   # judged period
                     (profiler.capture.concurrency),
     "generation": {graph, requests, prefill_ms, per_request: [{prefill_start_ms, prefill_ms, decode_steps,
                    decode_ms, first_step, warmup}], decode_steps, ms_per_token, step_gpu_ms, tokens_per_s,
                    steps_from ("graph replays", "NVTX range NAME", "a repeated group of N kernels"),
                    warmup_requests (when some are),
                    drift: {baseline_ms, peak_ms, last_ms, peak_over_baseline, start_step (among the steps
                    after the warm-up requests), slope_ms_per_100_steps, ..., cause_seen, cause},
                    clocks: {recorded, note, baseline/slow/decode: {samples, clock_mhz, clock_min_mhz,
                    gr_active_pct}, verdict}} or null: an LLM decode loop (profiler.capture.generation,
                    profiler.capture.clocks); its decode steps are then the inference unit and
                    phases.prefill {requests, wall_ms, steps_inside, gpu_busy_ms, in_steady_state} its prefills,
     "layers": [{name, parent, count, gpu_ms (per inference), share, kernels: [{name, count, total_ms,
                 tensor_cores}], tensor_cores, engine (with --layer-info)}],   # most GPU time first
     "layer_total": {layers_gpu_ms, inference_gpu_ms (means per inference), difference_ms, note,
                     gpu_tensor_cores (false on GPUs of compute capability below 7.0, null unknown)},
     "phases": {setup: {start_ms, end_ms, duration_ms, what}, steady: {start_ms, end_ms, duration_ms,
                gpu_busy_ms, gpu_busy_fraction, gpu_ms_by_kind}, time_to_first_inference_ms (null when
                the capture does not hold the CUDA start-up), startup_in_capture, included_in_statistics,
                teardown: {start_ms, end_ms, duration_ms, calls, cuda_call_ms, release_ms, module_unloading_ms,
                frees_ms, context_destruction_ms} (only when release calls dominate the capture's last CUDA calls)},
     "streams": [{device, stream, busy_ms, kernels, graph_launches, copies, copy_ms}], "gpu_concurrency",
     "overlap_saved_ms", "copy_compute_overlap": {overlap_ms, copy_ms, compute_ms, share_of_copy},
     "top_kernels": [{name, short_name, count, total_ms, mean_ms, median_ms, min_ms, max_ms, share_pct}],
     "gap_histogram": [{device, edges_us, counts, active_ms, busy_ms, idle_ms, busy_fraction,
                        gap_count, gaps_over_threshold, min_gap_us}],
     "sync_summary": [{name, count, total_ms, max_ms}],
     "thresholds": {rule id: {threshold: value}},
     "heuristics": {module: {NAME: value}}}   # the capture model's, in force (profiler.capture.heuristics)

``ranges`` (and the rules) cover the steady state unless ``AnalysisOptions.include_setup``; each range
has ``parent`` (the enclosing series' 'domain:name', or null) and ``depth``; ``gpu_busy_fraction`` is
busy time over the longer of the wall time and the span of the range's GPU work, so it is in [0, 1].
``inference.bound_by`` is 'host' when the GPU waits on the host longer than the host waits on the GPU:
the GPU idles at least a tenth of the steady state and longer than the host's threads block in CUDA
synchronisation and copy calls while it works, or it is busy under half of the steady state; otherwise
the kind of GPU work with the most steady-state time (``phases.steady.gpu_ms_by_kind``).
``launches_per_instance`` counts the kernel and graph launches of the GPU work a range holds, by whichever
thread launched it (the cross-thread attribution note in ``capture.warnings`` says when threads without
ranges count in).
``instances.start_ms`` is relative to the capture start; ``idx`` numbers stay those of the whole capture. Per-instance arrays are limited to
``AnalysisOptions.max_instances`` per series (``instances_truncated`` says when).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import heuristics as H
from profiler.capture import series as S
from profiler.capture import summary as SM
from profiler.capture.keys import ROW_CHUNK, blocks
from profiler.capture.options import AnalysisOptions  # noqa: F401 - defined apart: the cache's key needs no pandas
from profiler.capture.unit import is_graph_replay, label_of
from profiler.capture.waits import host_waits_on_gpu_ms
from profiler.findings import Finding, json_safe
from profiler.capture.context import CaptureContext

GAP_EDGES_US = (0.0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000,
                float("inf"))


@dataclass
class AnalysisResult:
    """The analysis of one capture (``to_json()`` is the ``--json`` document)."""

    capture: dict[str, Any]
    ranges: list[dict[str, Any]]
    findings: list[Finding]
    extra: dict[str, Any]
    context: CaptureContext | None = None
    cache: str = "off"
    """``"stored"`` in the analysis cache or ``"off"`` (a hit is a
    :class:`~profiler.capture.result_cache.CachedAnalysis`)."""
    source_sha256: str | None = None
    """The capture's content hash when the analysis cache computed it (the run store reuses it)."""
    timeline: dict[str, Any] | None = None
    """The ``timeline`` entry (:func:`profiler.capture.timeline.build_timeline`) once built or read back."""
    records: list[Any] | None = None
    """What the run store keeps per range (:func:`range_records`) once built."""

    def to_json(self) -> dict[str, Any]:
        return json_safe({"kind": "analyze", "capture": self.capture, "ranges": self.ranges,
                          "findings": [f.to_dict() for f in self.findings], **self.extra})

    def timeline_json(self, data: dict[str, Any] | None = None) -> dict[str, Any]:
        """The report's timeline of this analysis (``data``: ``to_json()`` when the caller has it)."""
        if self.timeline is None:
            from profiler.capture.timeline import build_timeline

            self.timeline = build_timeline(self.trace(), self.to_json() if data is None else data)
        return self.timeline

    def range_records(self) -> list[Any]:
        """:func:`range_records` of the context (``profiler.store.rows.VariantRows``), kept."""
        if self.records is None:
            self.records = range_records(self.context) if self.context is not None else []
        return self.records

    def trace(self) -> Any:
        """The analysed Trace."""
        return self.context.trace if self.context is not None else None


def analyze_path(path: str | os.PathLike, options: AnalysisOptions | None = None, *,
                 cache: Any = None) -> AnalysisResult:
    """Load a capture (.sqlite export or .nsys-rep) and analyse it.

    The loaded frames go through the columnar cache (:mod:`profiler.capture.cache`): ``cache`` is
    None for the default cache, False for none, or a ``TraceCache``. To read back an earlier analysis
    of the same capture and options instead, use
    :func:`profiler.capture.result_cache.analyze_path_cached`.
    """
    from profiler.capture.cache import load_trace_cached
    from profiler.capture.trace import FRAMES

    # the synchronisation activity frame is not used: blocking calls come from the API frame; of the
    # large frames only the columns the analysis reads are loaded (the others are placeholders)
    trace = load_trace_cached(path, tables=[f for f in FRAMES if f != "sync"], columns=ANALYSIS_COLUMNS, cache=cache)
    return analyze(trace, options)


ANALYSIS_COLUMNS = {"kernels": ("name", "short_name", "stream_id", "context_id"), "api": (), "osrt": ()}
"""Columns of the large frames that ``analyze`` reads beyond those always loaded (times, pid,
global_tid, device, correlation and the API link but a kernel's call end, names of API and OS runtime
calls)."""


def analyze(trace: Any, options: AnalysisOptions | None = None) -> AnalysisResult:
    """The inference unit, its layers, phases and streams; series statistics, GPU busy projection, idle
    gaps and the capture rules' findings, over the steady state unless ``options.include_setup``.
    A capture whose columns are in files (:mod:`~profiler.capture.spill`) gets its large arrays there too."""
    from profiler.capture import spill

    with spill.using(getattr(trace, "column_files", None)), H.overriding(options.heuristics if options else None):
        return _analyze(trace, options)


def _analyze(trace: Any, options: AnalysisOptions | None) -> AnalysisResult:
    from profiler.capture import concurrency, generation, integrity, layer_table, phases, streams, unit as U
    from profiler.capture.heap import release_memory
    from profiler.rules import registry, run_rules
    from profiler.rules.impact import calibrate

    options = options or AnalysisOptions()
    full = S.build_series(trace)
    meta = dict(getattr(trace, "meta", None) or {})
    start_ns = meta.get("capture_start_ns")
    if start_ns is None:
        start_ns = int(full.instances["start_ns"].min()) if len(full.instances) else 0
    unit = U.build_unit(full, options.unit)
    ph = phases.split(full, unit, int(start_ns))
    trt = bool((full.series["domain"] == U.TENSORRT_DOMAIN).any()) if len(full.series) else False
    kernels = getattr(trace, "kernels", None)
    knames = S.factor(kernels, "name", small=True) if kernels is not None and len(kernels) else None
    unrecorded = kernels_not_recorded(full, 0 if kernels is None else len(kernels))
    if unrecorded:  # the GPU's kernels are not in the export: no verdict on GPU time
        meta["missing"] = list(meta.get("missing") or []) + [_unrecorded_sentence(unrecorded)]
    # first: whether the capture holds what nsys traced decides what may be judged (capture/integrity.py)
    integ = integrity.check(trace, full, unit, kernels_unrecorded=unrecorded)
    gpu_lost = "gpu" in integ.lost
    if gpu_lost:  # "captured without CUDA tracing, or no GPU work" is not what happened: nsys lost it
        meta["missing"] = [m for m in meta.get("missing") or [] if not str(m).startswith(NO_GPU_ACTIVITY)]
    # what reads the whole capture's table comes first: the steady-state table then replaces it, so the
    # two copies of the capture's GPU activity and API calls are never held through the rules. (Running
    # the pieces that only read the tables on threads was measured on the 2xH200 host: 1.04x the time and
    # 1.14x the peak memory of this sequential order, so they run in turn.)
    judged_lo = ph.first_event_ns if options.include_setup else ph.steady_start_ns
    gen = generation.find(trace, int(start_ns), detected=full.generation) if full.generation is not None else None
    conc = concurrency.measure(trace, judged_lo, ph.steady_end_ns, unit, full, (ph.steady_start_ns, ph.steady_end_ns))
    whole = {"inference": {**U.unit_json(unit), "copies_outside_per_inference":
                           U.copies_outside(full, unit, ph.steady_start_ns, ph.steady_end_ns),
                           "io_bytes_per_inference": U.io_bytes(full, unit, ph.steady_start_ns, ph.steady_end_ns),
                           "throughput": conc.throughput},
             "concurrency": concurrency.concurrency_json(conc),
             "generation": gen,
             "phases": {**phases.phases_json(ph, full.activity), **(
                 {"prefill": generation.prefill_phase(full.generation, ph.steady_start_ns)} if gen else {})},
             **layer_table.layer_table(full, unit, knames, meta.get("gpus"))}
    trimmed = not options.include_setup and _trims(full, ph)
    table = full.subset(ph.steady_start_ns, ph.steady_end_ns, consume=True) if trimmed else full
    del full
    release_memory()  # between the large stages, freed heap pages leave the process (capture/heap.py)
    summaries = SM.series_summary(table)
    outl = SM.explain_outliers(table)
    devices = SM.device_gaps(table.activity, None if table.window else SM.attributed_activity(table),
                             table.activity.sorted_by_start)
    release_memory()
    ctx = CaptureContext(trace=trace, table=table, ranges=summaries, devices=devices, outliers=outl,
                         capture_start_ns=int(start_ns), unit=unit, phases=ph, tensorrt=trt,
                         include_setup=options.include_setup, concurrency=conc, generation=gen)
    only = options.rules
    not_run = integ.skipped_rules()
    if not_run:  # rules that need the lost data; an explicit list keeps its unknown ids, so run_rules refuses them
        only = [r for r in (only if only is not None else [s.id for s in registry("capture")]) if r not in not_run]
    judged = run_rules("capture", ctx, only=only, overrides=options.rule_overrides())
    release_memory()
    findings = calibrate(ctx, judged.findings)
    capture = _capture_info(trace, meta, table, gpu_lost)
    ranges = _ranges_json(ctx, options)
    extra = {
        **whole,
        **streams.streams_json(table.activity, _racing_ns(ctx, judged.thresholds)),
        "top_kernels": top_kernels(trace, options.top_kernels),
        "gap_histogram": _gap_histograms(ctx, judged.thresholds["gpu_idle"]["min_gap_us"]),
        "sync_summary": sync_summary(table),
        "thresholds": judged.thresholds,
        "heuristics": H.values(),
    }
    if unrecorded:
        capture["kernel_launches_without_records"] = unrecorded
    if gpu_lost:
        _forget_gpu_time(extra, ranges)
    extra = {"integrity": integ.to_json(), **extra}
    extra["inference"]["bound_by"] = None if gpu_lost else _bound_by(
        extra["phases"]["steady"], host_waits_on_gpu_ms(table, ctx.devices, ph.steady_start_ns, ph.steady_end_ns))
    if options.layer_info:
        extra["layer_info"] = layer_table.join_layer_info(extra["layers"], options.layer_info)
    extra["phases"]["included_in_statistics"] = "steady state" if trimmed else "whole capture"
    return AnalysisResult(capture=capture, ranges=ranges, findings=findings, extra=extra, context=ctx)


def _racing_ns(ctx: CaptureContext, thresholds: dict[str, Any]) -> tuple[int, int]:
    """(racing overlap, its part behind copies) in ns where stream_race's thresholds call the races frequent
    (the streams' overlap statistics leave it out); (0, 0) otherwise."""
    from profiler.capture.races import overlap_of
    from profiler.rules.capture.stream_race import fires, races_of, thread_races_of

    found = [r for r in (races_of(ctx), thread_races_of(ctx)) if r.pairs and fires(r, thresholds["stream_race"])]
    return overlap_of(found)


GPU_TIME_RULES = ("gpu_idle", "launch_overhead", "transfer_bound")
"""Capture rules whose verdict rests on the GPU's busy time, which an export without its kernels lacks."""
UNRECORDED_MIN_LAUNCHES = 10
"""Kernel launch calls that must be in an export with no kernel record before the kernels count as lost."""
CAPTURE_BEGIN_PREFIXES = ("cudaStreamBeginCapture", "cuStreamBeginCapture")


def _unrecorded_sentence(launches: int) -> str:
    return (f"The export has {launches:,} kernel launch calls but no kernel records (CUPTI_ACTIVITY_KIND_KERNEL): "
            "nsys did not collect the GPU's kernels (a capture started late, with --delay or a capture range, "
            "can miss them), so GPU busy time and idle gaps are unknown and the rules that judge them "
            f"({', '.join(GPU_TIME_RULES)}) did not run")


def _forget_gpu_time(extra: dict[str, Any], ranges: list[dict[str, Any]]) -> None:
    """GPU time read off the copies and memsets of an export without its kernels is no GPU time: unknown."""
    extra["phases"]["steady"]["gpu_busy_fraction"] = None
    extra["phases"]["steady"].pop("gpu_busy_fraction_by_device", None)
    for key in ("gpu_ms", "gpu_latency_ms", "queue_ms"):
        extra["inference"][key] = None
    for r in ranges:
        r["gpu_busy_ms"] = r["gpu_busy_fraction"] = r["total_gpu_busy_ms"] = None
    for h in extra.get("gap_histogram") or []:
        if isinstance(h, dict) and "busy_fraction" in h:
            h["busy_fraction"] = None


def kernels_not_recorded(table: S.SeriesTable, n_kernels: int) -> int:
    """Kernel launch calls of an export that holds no kernel at all (0 when it holds some, or when its launches
    may all have been captured into CUDA graphs instead of running)."""
    if n_kernels or not len(table.api):
        return 0
    launches = int(np.count_nonzero(table.api.category == S.ApiCategory.launch))
    if launches < UNRECORDED_MIN_LAUNCHES or table.api.named_prefix(CAPTURE_BEGIN_PREFIXES).any():
        return 0
    return launches


def _trims(full: S.SeriesTable, ph: Any) -> bool:
    """Whether the steady state leaves anything of the capture out."""
    act, inst = full.activity, full.instances
    starts = [a.min() for a in (act.start_ns, inst["start_ns"].to_numpy(), full.api.start_ns) if len(a)]
    ends = [a.max() for a in (act.start_ns, inst["start_ns"].to_numpy(), full.api.start_ns) if len(a)]
    if not starts:
        return False
    return min(starts) < ph.steady_start_ns or max(ends) > ph.steady_end_ns


HOST_BOUND_BUSY_FRACTION = 0.5
"""Below this GPU busy share of the steady state the GPU waits more than it works: 'host' bounds it whatever
the host waits on (the launch and idle findings say how), not the kind of GPU work with the most time."""
HOST_BOUND_MIN_IDLE_FRACTION = 0.1
"""Above half busy, the GPU must idle at least this share of the steady state (gpu_idle's least idle share)
before the host can bound it: below, the GPU is saturated and its top kind of work bounds the steady state."""


def _bound_by(steady: dict[str, Any], host_wait_ms: float = 0.0) -> str | None:
    """What bounds the steady state: 'host' when the GPU waits on the host longer than the host waits on the
    GPU, else the kind of GPU work with the most time ('compute', 'HtoD', 'DtoH', ...; copy directions within
    1.5x of each other together, 'HtoD + DtoH').

    The GPU waits on the host while it idles (1 - busy share); the host waits on the GPU while it blocks in
    CUDA synchronisation and copy calls, or polls until the work is done, as the GPU works (``host_wait_ms``:
    :func:`profiler.capture.waits.host_waits_on_gpu_ms` over the steady state). A training loop that
    never synchronises and keeps the GPU 61% busy is bound by its host, though compute is the top GPU work;
    a loop that syncs on every step and idles the GPU 30% of the time around occasional host stalls is bound
    by its compute. A GPU busy under half the time is host-bound; one idle under a tenth of it is not."""
    by_kind = steady.get("gpu_ms_by_kind") or {}
    if not by_kind or max(by_kind.values()) <= 0:
        return None
    busy = steady.get("gpu_busy_fraction")
    if busy is not None and busy < HOST_BOUND_BUSY_FRACTION:
        return "host"
    duration_ms = steady.get("duration_ms") or 0.0
    if busy is not None and 1.0 - busy >= HOST_BOUND_MIN_IDLE_FRACTION and duration_ms > 0:
        if 1.0 - busy > host_wait_ms / duration_ms:
            return "host"
    top = max(by_kind, key=by_kind.get)
    if top == "compute":
        return top
    from profiler.capture.phases import bounding_copy_directions

    return " + ".join(bounding_copy_directions(by_kind)) or top  # 'HtoD + DtoH' when both take about as long


# ----------------------------------------------------------------------------- JSON pieces

def _inverted(frame: Any) -> int:
    """Rows of an activity frame whose end precedes their start."""
    if frame is None or len(frame) == 0 or "end_ns" not in frame.columns:
        return 0
    return int(np.count_nonzero(S.i64(frame, "end_ns", 0) < S.i64(frame, "start_ns", 0)))


NO_GPU_ACTIVITY = "The export has no CUDA GPU activity"
"""How the loader's note on an export without GPU activity begins (dropped when the integrity check finds that
nsys lost the GPU's activity: it was traced)."""


def _capture_info(trace: Any, meta: dict[str, Any], table: S.SeriesTable, gpu_lost: bool = False) -> dict[str, Any]:
    counts = {name: int(len(getattr(trace, name, None) if getattr(trace, name, None) is not None else []))
              for name in ("kernels", "memcpy", "memset", "graphs", "api", "nvtx", "osrt")}
    counts["nvtx_range_instances"] = 0 if table.window else int(len(table.instances))
    start, end = meta.get("capture_start_ns"), meta.get("capture_end_ns")
    warnings = list(meta.get("warnings") or [])
    if any("never closed" in n for n in table.notes):  # the series note says what the analysis did with them
        warnings = [w for w in warnings if "never closed" not in w]
    warnings += list(table.notes)
    inverted = {name: _inverted(getattr(trace, name, None)) for name in ("kernels", "memcpy", "memset", "graphs")}
    if any(inverted.values()):
        what = ", ".join(f"{n} {name}" for name, n in inverted.items() if n)
        warnings.append(f"{what} row(s) end before they start (corrupt timestamps): counted with zero duration")
    missing = list(meta.get("missing") or [])
    if table.window and counts["nvtx"] == 0:
        if not any("NVTX" in m for m in missing):  # the loader may have said so already
            missing.append("no NVTX ranges: the whole capture is analysed as one window")
    elif table.window:
        missing.append("no closed NVTX ranges: the whole capture is analysed as one window")
    if not any(counts[k] for k in ("kernels", "memcpy", "memset", "graphs")):
        missing.append("no GPU activity (kernels, copies, memsets, graph launches): " +
                       ("nsys lost it (see integrity), GPU busy time is unknown" if gpu_lost else "GPU busy time is zero"))
    return {
        "source_path": meta.get("source_path"),
        "nsys_version": meta.get("nsys_version"),
        "schema_version": meta.get("schema_version"),
        "gpus": meta.get("gpus") or [],
        "processes": meta.get("processes") or [],
        "capture_start_ns": start,
        "capture_end_ns": end,
        "duration_ms": (end - start) / 1e6 if start is not None and end is not None else None,
        "counts": counts,
        "window_only": table.window,
        "missing": missing,
        "warnings": warnings,
    }


def _round(values: np.ndarray) -> list[float]:
    return np.round(np.asarray(values, dtype=np.float64), 6).tolist()


def _ranges_json(ctx: CaptureContext, options: AnalysisOptions) -> list[dict[str, Any]]:
    inst = ctx.table.instances
    start, wall, busy = (inst[c].to_numpy() for c in ("start_ns", "wall_ns", "gpu_busy_ns"))
    number = inst["name_index"].to_numpy() if "name_index" in inst.columns else np.full(len(inst), -1)
    outl = ctx.outliers
    o_sid = outl["series_id"].to_numpy().astype(np.int64)
    o_idx, o_wall, o_exc = (outl[c].to_numpy() for c in ("idx", "wall_ms", "excess_ms"))
    o_cause, o_detail = outl["cause"].to_numpy(dtype=object), outl["detail"].to_numpy(dtype=object)
    bounds = np.searchsorted(o_sid, np.arange(len(ctx.ranges) + 1))  # outliers come in series order
    out = []
    for r in ctx.ranges:
        sid = r["series_id"]
        pos = np.arange(bounds[sid], bounds[sid + 1])
        if len(pos) > options.max_outliers:
            pos = np.sort(pos[np.argsort(-o_exc[pos], kind="stable")[: options.max_outliers]])
        rj = {k: v for k, v in r.items() if k not in ("series_id", "outlier_indices", "parent_id")
              and not k.startswith("_")}
        rj["parent"] = ctx.label(r["parent_id"]) if r["parent_id"] >= 0 else None
        if is_graph_replay(rj["domain"], rj["name"]):  # no NVTX range: made by capture/replays.py
            rj["made_from"] = "cudaGraphLaunch calls outside TensorRT's enqueue ranges, one range each"
        made = ctx.table.made_from.get(label_of(rj["domain"], rj["name"]))
        if made:  # a frame of stage ranges (capture/stages.py)
            rj["made_from"] = made
        rj["outliers"] = [{"index": int(o_idx[i]), "wall_ms": float(o_wall[i]), "excess_ms": float(o_exc[i]),
                           "cause": o_cause[i], "detail": o_detail[i]} for i in pos]
        rj["outlier_count"] = len(r["outlier_indices"])
        sl = ctx.table.rows_of(sid)
        keep = slice(sl.start, min(sl.stop, sl.start + options.max_instances))
        rj["instances"] = {
            "start_ms": _round((start[keep] - ctx.capture_start_ns) / 1e6),
            "wall_ms": _round(wall[keep] / 1e6),
            "gpu_busy_ms": _round(busy[keep] / 1e6),
        }
        numbers = number[sl]
        if (numbers >= 0).any():  # names that differ only by a number (capture/numbered.py)
            distinct = np.unique(numbers[numbers >= 0])
            rj["numbered"] = {"numbers": len(distinct), "first": int(distinct[0]), "last": int(distinct[-1])}
            rj["instances"]["number"] = numbers[keep.start - sl.start:keep.stop - sl.start].tolist()
        if sl.stop > keep.stop:
            rj["instances_truncated"] = True
        out.append(rj)
    out.sort(key=lambda r: (-(r["total_wall_ms"] or 0.0), r["domain"], r["name"]))
    return out


def top_kernels(trace: Any, limit: int = 50) -> list[dict[str, Any]]:
    """Kernels grouped by name, most total GPU time first (what ``nsys stats -r cuda_gpu_kern_sum`` lists),
    with CUDA graph replays as rows of their own: traced per graph, a graph's kernels are not in
    ``kernels`` and the replays are where the GPU time went."""
    parts = []  # (per-name statistics, names, short names): grouped on integer codes, named after
    rows_before = 0  # kernels come before graph replays in capture order (ties keep it)
    k = getattr(trace, "kernels", None)
    if k is not None and len(k):
        codes, names = S.factor(k, "name", small=True)
        codes = codes.astype(np.uint16 if len(names) <= 1 << 16 else np.int32)  # radix-sortable
        st = _duration_stats(codes, S.i64(k, "start_ns", 0), S.i64(k, "end_ns", 0))
        del codes
        shorts = np.full(len(names), "", dtype=object)
        shorts[st["code"]] = _short_names(k, st["first_row"])
        parts.append((st, [str(x) for x in names], [str(x) for x in shorts]))
        rows_before = len(k)
    g = getattr(trace, "graphs", None)
    if g is not None and len(g):
        gcodes, gids = pd.factorize(g["graph_id"].astype("Int64"), use_na_sentinel=False)  # no id: its own group
        label = [f"CUDA graph {'?' if pd.isna(x) else x} (replays)" for x in gids]
        st = _duration_stats(gcodes, S.i64(g, "start_ns", 0), S.i64(g, "end_ns", 0))
        st["first_row"] = st["first_row"] + rows_before
        parts.append((st, label, label))
    if not parts:
        return []
    names = [n for p in parts for n in p[1]]
    shorts = [n for p in parts for n in p[2]]
    offsets = np.cumsum([0] + [len(p[1]) for p in parts])
    st = {key: np.concatenate([p[0][key] for p in parts]) for key in parts[0][0]}
    group = np.concatenate([p[0]["code"].astype(np.int64) + off for p, off in zip(parts, offsets)])
    n, tot, lo, hi, mid_lo, mid_hi = (st[key] for key in ("n", "tot", "lo", "hi", "mid_lo", "mid_hi"))
    total_all = float(tot.sum()) or 1.0  # corrupt rows count with zero duration, as in the series
    top = np.lexsort((st["first_row"], -tot))[:limit]  # ties keep capture order
    return [{"name": names[group[i]], "short_name": shorts[group[i]], "count": int(n[i]), "total_ms": tot[i] / 1e6,
             "mean_ms": float(tot[i]) / n[i] / 1e6, "median_ms": (float(mid_lo[i]) + float(mid_hi[i])) / 2 / 1e6,
             "min_ms": lo[i] / 1e6, "max_ms": hi[i] / 1e6, "share_pct": 100.0 * tot[i] / total_all}
            for i in top.tolist()]


SORT_BLOCK_ROWS = ROW_CHUNK
"""Rows per block when sorting durations name by name (a module constant so tests can cross blocks)."""


def _duration_stats(codes: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[str, np.ndarray]:
    """Per code used (ascending ``code``): its ``first_row``, count ``n``, exact int64 total ``tot``, ``lo``
    and ``hi`` (min, max) and the two middle durations ``mid_lo``, ``mid_hi`` (ns; a negative one counts 0).

    One stable sort of the codes, then each name's durations sorted in place: two row-length arrays
    (an index and the durations), where a sort by (name, duration) keeps several."""
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    heads = np.flatnonzero(np.concatenate(([True], c[1:] != c[:-1])))
    first_row = order[heads]  # stable: each code's first row in capture order
    d = np.empty(len(order), dtype=np.int64)
    for sl in blocks(len(order), SORT_BLOCK_ROWS):  # gathered a block at a time: no row-length temporaries
        idx = order[sl]
        np.subtract(end[idx], start[idx], out=d[sl])
    del order
    np.maximum(d, 0, out=d)
    _sort_runs(d, c, heads)
    n = np.diff(np.append(heads, len(c)))
    return {"code": c[heads], "first_row": first_row, "n": n, "tot": np.add.reduceat(d, heads),
            "lo": d[heads], "hi": d[heads + n - 1], "mid_lo": d[heads + (n - 1) // 2], "mid_hi": d[heads + n // 2]}


def _sort_runs(d: np.ndarray, c: np.ndarray, heads: np.ndarray) -> None:
    """Sort ``d`` in place within each run of equal ``c`` (runs start at ``heads``, codes ascending): as many
    whole runs as fit in ``SORT_BLOCK_ROWS`` rows by one sort on (code, value), a longer run alone in place."""
    bounds = np.append(heads, len(d))
    i = 0
    while i < len(heads):
        j = max(int(np.searchsorted(bounds, bounds[i] + SORT_BLOCK_ROWS, "right")) - 1, i + 1)
        a, b = int(bounds[i]), int(bounds[j])
        if j == i + 1:
            d[a:b].sort()
        else:
            d[a:b] = d[a:b][np.lexsort((d[a:b], c[a:b]))]
        i = j


def _short_names(k: Any, rows: np.ndarray) -> list[str]:
    """The short names of the kernel rows ``rows``, without coding the whole column."""
    if "short_name" not in k.columns:
        return [""] * len(rows)
    vals = k["short_name"].to_numpy(dtype=object)[rows] if not isinstance(k["short_name"].dtype, pd.CategoricalDtype) \
        else np.asarray(k["short_name"].array[rows], dtype=object)
    return ["" if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA else str(v) for v in vals]


HISTOGRAM_BLOCK_ROWS = ROW_CHUNK
"""Gaps per block of the histogram (a module constant so tests can cross block boundaries)."""


def _gap_histograms(ctx: CaptureContext, min_gap_us: float) -> list[dict[str, Any]]:
    """Per device: the idle gaps' histogram, and how many are at least ``min_gap_us`` (gpu_idle's threshold)."""
    min_gap_us = float(min_gap_us)
    names = ctx.gpu_names()
    out = []
    for d in ctx.devices:
        gap_ns = d.gap_ns  # computed by the property on each read: once here
        counts = np.zeros(len(GAP_EDGES_US) - 1, dtype=np.int64)
        for sl in blocks(len(gap_ns), HISTOGRAM_BLOCK_ROWS):  # a block at a time: no row-length float copy
            counts += np.histogram(gap_ns[sl] / 1e3, bins=np.array(GAP_EDGES_US))[0]
        edges = list(GAP_EDGES_US[:-1]) + [max(float(gap_ns.max()) / 1e3 * 1.01 if len(gap_ns) else 0.0,
                                               GAP_EDGES_US[-2] * 10)]
        big = gap_ns >= min_gap_us * 1e3
        label = f"GPU {d.device_id}" + (f" ({names[d.device_id]})" if names.get(d.device_id) else "")
        out.append({
            "device": label, "device_id": d.device_id, "edges_us": edges, "counts": counts.tolist(),
            "active_ms": d.active_ns / 1e6, "busy_ms": d.busy_ns / 1e6,
            "active_window": ("from the first to the last GPU work launched inside NVTX ranges" if d.focused
                              else "from the device's first to its last GPU work"),
            "idle_ms": float(gap_ns.sum()) / 1e6,
            "busy_fraction": d.busy_ns / d.active_ns if d.active_ns > 0 else float("nan"),
            "gap_count": int(len(gap_ns)), "gaps_over_threshold": int(np.count_nonzero(big)),
            "idle_over_threshold_ms": float(gap_ns.sum(where=big)) / 1e6, "min_gap_us": min_gap_us,
        })
    return out


def sync_summary(table: S.SeriesTable) -> list[dict[str, Any]]:
    """Blocking synchronisation API calls of the whole capture by name (``nsys analyze cuda_api_sync``'s list)."""
    api = table.api
    m = api.blocking_sync
    if not m.any():
        return []
    rows = np.flatnonzero(m)  # a few calls among millions: no row-length difference
    df = pd.DataFrame({"n": api.name_code[rows], "d": api.end_ns[rows] - api.start_ns[rows]})
    g = df.groupby("n")["d"].agg(["size", "sum", "max"]).sort_values("sum", ascending=False)
    return [{"name": api.names[n], "count": int(r["size"]), "total_ms": r["sum"] / 1e6, "max_ms": r["max"] / 1e6}
            for n, r in g.iterrows()]


# ----------------------------------------------------------------------------- the run store's records

def range_records(ctx: CaptureContext) -> list[Any]:
    """What the run store keeps of each range (:func:`profiler.store.rows.range_rows`: a variant of kind
    'range' and its per-instance samples), in ``ctx.ranges`` order."""
    from profiler.store import rows

    return [rows.range_rows(r, ctx.table.instances.iloc[ctx.table.rows_of(r["series_id"])], ctx.capture_start_ns)
            for r in ctx.ranges]
