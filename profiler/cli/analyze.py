"""`trtprof analyze CAPTURE`: diagnose an Nsight Systems capture, print a summary, store the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from profiler.cli.options import Finite, db_option, db_url, open_store
from profiler.cli.terminal import lines_of
from profiler.cli.outputs import check_output_file, check_outputs, store_file
from profiler.cli.batch import analyze_batch, analyze_options, is_batch
from profiler.errors import GateFailed, InputError, UsageError
from profiler.files import check_input_file

LAYER_INFO = "trtexec's --exportLayerInfo JSON"  # what --layer-info names, in its errors
MAX_RANGES_SHOWN = 15
MAX_LAYERS_SHOWN = 10
MAIN_STREAM_SHARE = 0.01
"""Streams with more than this share of the streams' GPU time are counted apart (the rest are stragglers)."""
LATE_SETUP_MAX_MS = 100.0
"""A capture without start-up calls is said to start after the process's CUDA start-up only when its setup is
shorter than this (a long setup beside that claim would contradict it)."""


def _fmt(v: Any, spec: str = ".3f") -> str:
    if not (isinstance(v, (int, float)) and v == v):
        return "-"
    text = format(v, spec)
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # never "-0.000"


def summary_lines(data: dict[str, Any], max_ranges: int = MAX_RANGES_SHOWN) -> list[str]:
    """The terminal summary: the verdict with the top findings first (merged by rule and cause, ranked by
    impact), then the inference, top layers, phases and streams, the capture line, what was missing and
    the ranges (children under their parent)."""
    from profiler.report.verdict import TOP_ITEMS, analysis_verdict, merge_findings, terminal_lines

    lines = terminal_lines(analysis_verdict(data))
    more = len(merge_findings(data["findings"])) - TOP_ITEMS
    if more > 0:
        lines.append(f"  ... {more} more finding(s) in --json and the report")
    lines.append("")
    lines += inference_lines(data)  # what the verdict is about: the inference, its layers, phases, streams
    cap = data["capture"]
    gpus = ", ".join(sorted({str(g.get("name")) for g in cap.get("gpus") or []
                             if isinstance(g, dict) and g.get("name")})) or "unknown"
    counts = cap.get("counts") or {}
    lines.append(f"capture: {cap.get('source_path')}  (nsys {cap.get('nsys_version') or '?'}, GPUs: {gpus}, "
                 f"{counts.get('kernels', 0)} kernels, {counts.get('graphs', 0)} graph launches, "
                 f"{counts.get('memcpy', 0)} copies)")
    for m in cap.get("missing") or []:
        lines.append(f"missing: {m}")
    for w in cap.get("warnings") or []:
        lines.append(f"warning: {w}")
    ranges = tree_order(data["ranges"])
    if ranges:
        name_w = min(max(len(_shown(r)) + 2 * (r.get("depth") or 0) for r in ranges[:max_ranges]), 48)
        lines.append("")
        lines.append(f"{'range':<{name_w}} {'count':>7} {'median ms':>10} {'p99 ms':>10} {'CoV %':>7} "
                     f"{'GPU busy':>8} {'launches':>8} {'outliers':>8}")
        for r in ranges[:max_ranges]:
            w = r["wall_ms"]
            frac = r.get("gpu_busy_fraction")
            name = "  " * min(int(r.get("depth") or 0), 4) + _shown(r)
            lines.append(f"{name[:name_w]:<{name_w}} {r['count']:>7} {_fmt(w.get('median')):>10} "
                         f"{_fmt(w.get('p99')):>10} {_fmt(w.get('cov_pct'), '.1f'):>7} "
                         f"{_fmt(frac * 100 if isinstance(frac, (int, float)) else None, '.1f') + '%':>8} "
                         f"{_fmt(r.get('launches_per_instance'), '.1f'):>8} {r.get('outlier_count', 0):>8}")
        if len(ranges) > max_ranges:
            lines.append(f"... {len(ranges) - max_ranges} more range series (by total wall time) in --json")
        lines.append("(GPU busy: GPU busy time of the work a range launched, over the longer of its wall time and "
                     "the span of that work; launches: the kernel and graph launches of that work per instance)")
    return lines_of(lines)


BOUND_WORDS = {"host": "the host (the GPU waits on it longer than it waits on the GPU)", "compute": "compute"}


def _busy_text(steady: dict[str, Any]) -> str:
    """'34.6%', or per GPU with several ('80.3% / 84.9% on GPUs 0 / 1, 89.8% any GPU')."""
    if steady.get("gpu_busy_fraction") is None:
        return "unknown"
    any_gpu = f"{_fmt(steady['gpu_busy_fraction'] * 100, '.1f')}%"
    per = steady.get("gpu_busy_fraction_by_device") or {}
    if len(per) < 2:
        return any_gpu
    shares = " / ".join(f"{_fmt(v * 100, '.1f')}%" for v in per.values())
    return f"{shares} on GPUs {' / '.join(per)}, {any_gpu} any GPU"


def _outside(inf: dict[str, Any]) -> str:
    """Copies the application issues outside the unit, per inference (they are not in its GPU time)."""
    c = inf.get("copies_outside_per_inference") or {}
    if not c.get("ms"):
        return ""
    return f"; plus {_fmt(c['ms'])} ms of copies per inference issued outside it ({c['count']:.3g} copies)"


def _behind(inf: dict[str, Any]) -> str:
    """Why the queueing delay is long when the host runs ahead: how many inferences each waits behind."""
    q = inf.get("queued_behind") or {}
    if (q.get("max") or 0) < 2:
        return ""
    return (f" (the host runs ahead: each inference queues behind {q['median']:g} earlier ones, "
            f"up to {q['max']})")


def inference_lines(data: dict[str, Any], max_layers: int = MAX_LAYERS_SHOWN) -> list[str]:
    """The inference line, the top layers, the phases and the streams (empty for an old JSON)."""
    from profiler.fmt import fmt_bytes

    inf = data.get("inference")
    if not isinstance(inf, dict):
        return []
    st = lambda d, k="median": (d or {}).get(k)  # noqa: E731
    what = {"tensorrt": "TensorRT enqueue", "nvtx": "outermost repeated NVTX range"}.get(inf.get("source"), "?")
    if str(inf.get("series") or "").startswith("(frame"):
        what = "stage ranges repeated as a whole, one frame per repetition"
    if inf.get("graph_replays"):
        what = "CUDA graph replays of TensorRT's enqueue, one per cudaGraphLaunch call: its ranges exist only at capture"
    if inf.get("inside"):
        others = inf.get("other_loops") or []
        what = (f"an iteration of a loop inside the range {inf['inside']}"
                + (f"; other loops: {', '.join(others)}, --unit NAME takes one" if others else ""))
    if inf.get("alternates_with"):
        what += (f"; taking turns with {', '.join(inf['alternates_with'])} (a loop of its own: its copies are not"
                 " counted as the inference's, --unit NAME judges it)")
    bound = inf.get("bound_by")
    bound_txt = f"; steady state bound by {BOUND_WORDS.get(bound, str(bound) + ' copies')}" if bound else ""
    if inf.get("source") == "window":  # no inference identified: one window, no per-inference statistics
        lines = [f"inference: none identified ({inf.get('why') or 'no repeated NVTX range'}); the capture's GPU "
                 f"work as one window: "
                 f"GPU busy {_fmt(st(inf['gpu_ms']))} ms over a GPU span of {_fmt(st(inf['gpu_latency_ms']))} ms, "
                 f"host {_fmt(st(inf['host_ms']))} ms{bound_txt}"]
    else:
        n_inst = inf.get("count")
        spread = "" if n_inst == 1 else f" median (p99 {_fmt(st(inf['gpu_ms'], 'p99'))})"  # one value: no spread
        gpu = (f"GPU {_fmt(st(inf['gpu_ms']))} ms{spread}, GPU latency "
               f"{_fmt(st(inf['gpu_latency_ms']))} ms, queue {_fmt(st(inf['queue_ms']))} ms{_behind(inf)}"
               if (inf.get("gpu_latency_ms") or {}).get("count") != 0 else "no GPU work in any instance")
        count = ("the capture holds one inference" if n_inst == 1 else
                 f"{n_inst} instances ({inf.get('steady_count')} steady)")
        lines = [f"inference: {inf.get('series')} ({what}), {count}: {gpu}, host {_fmt(st(inf['host_ms']))} ms"
                 f"{_outside(inf)}{_throughput(inf)}{bound_txt}"]
    if inf.get("chosen") and inf.get("source") != "window":
        lines.append(f"  unit chosen: {inf['chosen']}")
    gen_line = generation_line(data.get("generation"))
    if gen_line:
        lines.append(gen_line)
    layers = data.get("layers") or []
    total = data.get("layer_total") or {}
    if layers:
        lines.append("layers (GPU ms per inference: median / p99, share of inference GPU time):")
        no_tc_gpu = total.get("gpu_tensor_cores") is False
        for r in layers[:max_layers]:
            tc = "" if no_tc_gpu or not r.get("kernels") else {True: "Tensor Cores", False: "no Tensor Cores"}.get(
                r.get("tensor_cores"), "Tensor Cores unknown")
            kern = (r.get("kernels") or [{}])[0].get("name", "")
            lines.append(f"  {r['name'][:60]:<60} {_fmt(st(r['gpu_ms'])):>8} / {_fmt(st(r['gpu_ms'], 'p99')):>8} "
                         f"{_fmt((r.get('share') or 0) * 100, '.1f'):>5}%  {tc}  {kern[:50]}")
        if len(layers) > max_layers:
            lines.append(f"  ... {len(layers) - max_layers} more layers in --json")
        lines.append(f"  sum of layer means {_fmt(total.get('layers_gpu_ms'))} ms vs inference mean "
                     f"{_fmt(total.get('inference_gpu_ms'))} ms of GPU time per inference "
                     f"(difference {_fmt(total.get('difference_ms'))} ms)")
        if no_tc_gpu:
            lines.append(f"  (no Tensor Cores on this GPU: {_no_tensor_core_gpus(data)})")
    if total.get("note"):
        lines.append(f"layers: {total['note']}")
    ph = data.get("phases") or {}
    if ph.get("setup"):
        su, sd = ph["setup"], ph["steady"]
        w = su.get("what") or {}
        up = w.get("uploads") or {}
        ttfi = ph.get("time_to_first_inference_ms")
        ttfi_text = (f"time to first inference {_fmt(ttfi, '.1f')} ms" if ttfi is not None else
                     ("the capture starts after the process's CUDA start-up"
                      if (su.get("duration_ms") or 0) < LATE_SETUP_MAX_MS else "no CUDA start-up call in the capture")
                     if ph.get("startup_in_capture") is False else "no inference unit")
        n_up, n_warm = up.get("count", 0), w.get("warmup_inferences", 0)
        if (data.get("inference") or {}).get("source") == "window":  # no inferences: what came before the work
            calls = [f"{label} {_fmt(w.get(key), '.1f')} ms" for key, label in WINDOW_SETUP_CALLS
                     if (w.get(key) or 0) >= 0.05]  # as printed: 0.0 ms is no call worth naming
            if (w.get("gpu_work_outside_inferences_ms") or 0) >= 0.05:  # GPU work before a late module load
                calls.append(f"GPU work {_fmt(w['gpu_work_outside_inferences_ms'], '.1f')} ms")
            before = f"before the steady state ({', '.join(calls) or 'no context, module or allocation call'})"
        else:
            before = (f"({ttfi_text}; {n_warm} warm-up inference{'' if n_warm == 1 else 's'}, {n_up} "
                      f"upload{'' if n_up == 1 else 's'} of {fmt_bytes(up.get('bytes', 0))}, GPU work outside "
                      f"inferences {_fmt(w.get('gpu_work_outside_inferences_ms'), '.1f')} ms)")
        lines.append(f"setup: {_fmt(su.get('duration_ms'), '.1f')} ms {before}; "
                     f"steady state {_fmt(sd.get('duration_ms'), '.1f')} ms, GPU busy {_busy_text(sd)} "
                     f"(statistics and findings: {ph.get('included_in_statistics', 'steady state')})"
                     f"{_teardown_text(ph.get('teardown'))}")
    streams = [s for s in data.get("streams") or [] if (s.get("busy_ms") or 0) > 0]
    if streams:
        ov = data.get("copy_compute_overlap") or {}
        conc = data.get("gpu_concurrency")
        copies = (f"; copies overlap compute for {_fmt(ov.get('overlap_ms'), '.1f')} of "
                  f"{_fmt(ov.get('copy_ms'), '.1f')} ms of copy time") if (ov.get("copy_ms") or 0) >= 0.05 else ""
        gpus = len({s.get("device") for s in streams})
        where = f" on {gpus} GPUs" if gpus > 1 else ""
        per_gpu = " per GPU" if gpus > 1 else ""
        total_ms = sum(s.get("busy_ms") or 0 for s in streams)
        big = sum(1 for s in streams if (s.get("busy_ms") or 0) > MAIN_STREAM_SHARE * total_ms)
        main = f" ({big} with more than {MAIN_STREAM_SHARE:.0%} of the GPU time)" if big < len(streams) else ""
        racing = (f"; {_fmt(data['racing_overlap_ms'], '.1f')} ms more overlap races (stream_race), no saving"
                  if data.get("racing_overlap_ms") else "")
        lines.append(f"streams: {len(streams)} with GPU work{where}{main}; concurrency{per_gpu} {_fmt(conc, '.2f')}x "
                     f"(overlap saved {_fmt(data.get('overlap_saved_ms'), '.1f')} ms){copies}{racing}")
    return lines


TEARDOWN_WORDS = (("module_unloading_ms", "module unloading"), ("frees_ms", "frees"),
                  ("context_destruction_ms", "context, stream and graph destruction"))


def _teardown_text(td: Any) -> str:
    """'; teardown 277.5 ms after it, 2.3 ms of it in release calls (module unloading 2.1 ms, ...)': the window
    from the first release call after the steady state's last GPU work to the capture's last CUDA call."""
    if not isinstance(td, dict):
        return ""
    parts = [f"{label} {_fmt(td.get(key), '.1f')} ms" for key, label in TEARDOWN_WORDS if (td.get(key) or 0) >= 0.05]
    return (f"; teardown {_fmt(td.get('duration_ms'), '.1f')} ms after it, {_fmt(td.get('release_ms'), '.1f')} ms "
            f"of it in release calls ({', '.join(parts) or 'none over 0.05 ms'})")


WINDOW_SETUP_CALLS = (("context_creation_ms", "context creation"), ("module_loading_ms", "module loading"),
                      ("allocation_ms", "allocations"))
"""The setup's one-time CUDA calls the setup line names for a capture without inferences (no NVTX)."""


def generation_line(gen: Any) -> str:
    """'generation: 4 requests (prefill 810 ms median), 394 decode steps, 13.47 ms/token, 73.9 tokens/s; ...'."""
    if not isinstance(gen, dict):
        return ""
    d = gen.get("drift") or {}
    drift = (f"; step time rises {_fmt(d.get('peak_over_baseline'), '.2f')}x ({_fmt(d.get('baseline_ms'), '.1f')} -> "
             f"{_fmt(d.get('peak_ms'), '.1f')} ms) from step {d['start_step']} ({d.get('pattern')})"
             if d.get("start_step") is not None else "; step time flat")
    return (f"generation (LLM decode, steps from {gen.get('steps_from') or 'graph replays'}): {gen.get('requests')} "
            f"request(s) (prefill "
            f"{_fmt((gen.get('prefill_ms') or {}).get('median'), '.1f')} ms median), {gen.get('decode_steps')} decode "
            f"steps, {_fmt((gen.get('ms_per_token') or {}).get('median'), '.2f')} ms/token median, "
            f"{_fmt(gen.get('tokens_per_s'), '.1f')} tokens/s{drift}")


def _throughput(inf: dict[str, Any]) -> str:
    """'; 9.84 inferences/s (2 threads: 4.88 and 4.96/s; 2 streams: ...)' of the steady state; '' without it."""
    tp = inf.get("throughput")
    if not isinstance(tp, dict) or tp.get("per_s") is None:
        return ""
    parts = []
    for key, what in (("per_thread", "threads"), ("per_stream", "streams")):
        rows = tp.get(key) or []
        if len(rows) > 1:
            rates = [_fmt(r.get("per_s"), ".3g") for r in rows[:MAX_RATES_SHOWN]]
            more = f" and {len(rows) - MAX_RATES_SHOWN} more" if len(rows) > MAX_RATES_SHOWN else ""
            parts.append(f"{len(rows)} {what}: {', '.join(rates)}{more}/s")
    return f"; {_fmt(tp['per_s'], '.3g')} inferences/s" + (f" ({'; '.join(parts)})" if parts else "")


MAX_RATES_SHOWN = 4
"""Per-thread or per-stream rates listed on the inference line (the JSON has them all)."""


def _no_tensor_core_gpus(data: dict[str, Any]) -> str:
    """'NVIDIA GeForce GTX 1070, compute capability 6.1' for the capture's GPUs (Tensor Cores need 7.0)."""
    gpus = [g for g in (data.get("capture") or {}).get("gpus") or [] if isinstance(g, dict)]
    named = sorted({f"{g.get('name') or 'GPU'}, compute capability {g.get('compute_major')}.{g.get('compute_minor')}"
                    for g in gpus if g.get("compute_major") is not None})
    return "; ".join(named) or "compute capability below 7.0"


def tree_order(ranges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranges with each child right after its parent (children by total wall time, as given)."""
    labels = {_label(r) for r in ranges}
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for r in ranges:
        p = r.get("parent")
        kids.setdefault(p if p in labels else None, []).append(r)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    stack = list(reversed(kids.get(None, [])))
    while stack:
        r = stack.pop()
        if _label(r) in seen:
            continue
        seen.add(_label(r))
        out.append(r)
        stack.extend(reversed(kids.get(_label(r), [])))
    out += [r for r in ranges if _label(r) not in seen]  # cycles (recursive names): as given
    return out


def _shown(r: dict[str, Any]) -> str:
    """A range's label as the range table shows it: the name may begin the line, where a carriage return
    would pass the terminal guard as a redrawn progress line, so it is written ``\\r``."""
    return _label(r).replace("\r", "\\r")


def _label(r: dict[str, Any]) -> str:
    return f"{r['domain']}:{r['name']}" if r.get("domain") else str(r["name"])


@click.command(name="analyze")
@click.argument("captures", metavar="CAPTURE...", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the analysis (capture, ranges, findings, ...) as JSON here ('-' for stdout).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Write the HTML report here.")
@click.option("--no-store", is_flag=True, help="Do not record the run in the run store.")
@click.option("--label", default=None, help="Label the stored run (to find it later by name).")
@db_option
@click.option("--min-gap-us", type=Finite(0, 3.6e9), default=None,
              help="Smallest GPU idle gap that counts as idleness, in microseconds (default 50).")
@click.option("--heuristic", "heuristics", multiple=True, metavar="NAME=VALUE",
              help="Override one of the capture model's heuristics for this analysis (WARMUP_RATIO=2, "
                   "UNIT_MIN_GPU_SHARE=0.1; each is in the JSON's 'heuristics', documented in "
                   "profiler/capture/heuristics.py). Repeatable.")
@click.option("--unit", default=None, metavar="NAME",
              help="The NVTX range that is one inference ('domain:name' or name). Default: TensorRT's "
                   "ExecutionContext::enqueue/execute ranges, else the outermost repeated range, else the capture.")
@click.option("--include-setup", is_flag=True,
              help="Run statistics and findings over the whole capture, not only the steady state (setup: "
                   "engine deserialisation, context creation, lazy loading, uploads, warm-up inferences).")
@click.option("--layer-info", type=click.Path(), default=None,
              help="trtexec --exportLayerInfo JSON: adds each layer's type, precision, formats and tactic.")
@click.option("--cdn", is_flag=True, help="Reference plotly.js from a CDN in the report instead of embedding it.")
@click.option("--no-cache", is_flag=True,
              help="Read and analyse the export even when its analysis or frames are cached "
                   "($TRTPROF_CACHE_DIR/analyses and /traces).")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Write the capture with the findings as annotations in the Chrome Trace Event format here "
                   "(opens in ui.perfetto.dev and chrome://tracing; at most 200,000 events, the earliest).")
@click.option("--fail-on-incomplete", is_flag=True,
              help="Exit 1 when the capture lacks data nsys traced (the verdict INCOMPLETE CAPTURE), for CI; "
                   "without it an incomplete capture is analysed as far as it can be and exits 0.")
@analyze_options
@click.pass_context
def command(ctx: click.Context, captures: tuple[str, ...], json_path: str | None, report_path: str | None,
            no_store: bool, label: str | None, db: str | None, min_gap_us: float | None,
            heuristics: tuple[str, ...], unit: str | None,
            include_setup: bool, layer_info: str | None, cdn: bool, no_cache: bool, trace_path: str | None,
            fail_on_incomplete: bool, jobs: int | None, scheduler: str | None, batch_out: str | None,
            memory_limit: str | None) -> None:
    """Diagnose CAPTURE, an nsys SQLite export, a .nsys-rep (exported with nsys when it is on PATH), or the
    folder of an 'nsys export --type parquetdir' (or arrowdir).

    Each NVTX range name becomes a series of iterations (without NVTX the whole capture is one window);
    prints the series and the findings of the capture rules (launch_overhead, gpu_idle, jitter,
    sync_api, pageable_memcpy, transfer_bound, fp32_math, time_slicing, serialised_threads,
    decode_drift, stream_race, repeated_setup, host_sleeps) and stores the run unless --no-store.

    Several captures (or --jobs/--scheduler): each is analysed, reported and stored in a task of its own;
    --out gets index.html (a sortable table of every capture with a link to its report) and index.json.
    """
    from profiler.capture.heap import bound_heap
    from profiler.capture.options import AnalysisOptions

    from profiler.capture.heuristics import parse_overrides

    overrides = parse_overrides(heuristics)  # a bad --heuristic is one sentence, exit 2, before any work
    bound_heap()  # this process is ours: freed column-sized arrays leave it (capture/heap.py)
    if not no_cache:
        from profiler.capture.caches import cap_bytes

        cap_bytes()  # a bad TRTPROF_CACHE_MAX_GB is one sentence before any capture is read
    if layer_info:  # an input: a directory or a FIFO here is bad input (exit 3), as for every file read
        check_input_file(layer_info, "--layer-info", LAYER_INFO)
    if is_batch(captures, jobs, scheduler, batch_out):
        if trace_path:
            raise UsageError("--trace writes one capture's trace: give one capture")
        if fail_on_incomplete:
            raise UsageError("--fail-on-incomplete judges one capture: give one capture (index.json says "
                             "which captures of a batch are incomplete)")
        analyze_batch(ctx, captures, jobs=jobs, scheduler=scheduler, out=batch_out, memory_limit=memory_limit,
                      json_path=json_path, report_path=report_path, no_store=no_store, label=label, db=db,
                      min_gap_us=min_gap_us, cdn=cdn, no_cache=no_cache,
                      analysis={"unit": unit, "include_setup": include_setup, "layer_info": layer_info,
                                "heuristics": overrides})
        return
    if memory_limit is not None:
        raise UsageError("--memory-limit applies to --jobs")
    capture = captures[0]
    if Path(capture).is_dir():
        from profiler.capture.columnar import columnar_kind

        if columnar_kind(capture) is None:
            raise InputError(f"{capture} is a directory, not a capture: give the nsys .sqlite export, a .nsys-rep "
                             "file, or the folder of 'nsys export --type parquetdir' (or arrowdir)")
    # everything that can fail cheaply fails before the analysis, not after it
    check_output_file(json_path, "--json")
    check_output_file(report_path, "--report")
    check_output_file(trace_path, "--trace")
    check_outputs([("--json", json_path), ("--report", report_path), ("--trace", trace_path)],
                  [("the capture", capture), ("the --layer-info file", layer_info)],
                  store=None if no_store else store_file(db_url(ctx, db)))
    store = None
    if not no_store:
        from profiler.store.api import resolve_url

        if Path(capture).exists() and _same_file(resolve_url(db_url(ctx, db)), capture):
            raise UsageError(f"--db names the capture {capture} itself; the run store must be another file "
                             "(default ./trtprof.db)")
        store = open_store(ctx, db)
    try:
        options = AnalysisOptions(min_gap_us=min_gap_us, unit=unit, include_setup=include_setup,
                                  layer_info=layer_info, heuristics=overrides)
        data = _analyze(capture, json_path, report_path, store, label, options, cdn,
                        cache=False if no_cache else None, trace_path=trace_path)
    finally:
        if store is not None:
            store.close()
    integ = data.get("integrity") if isinstance(data.get("integrity"), dict) else {}
    if fail_on_incomplete and integ.get("complete") is False:
        kinds = ", ".join(dict.fromkeys(str(p.get("kind")) for p in integ.get("problems") or []))
        raise GateFailed(f"incomplete capture ({kinds}): --fail-on-incomplete")


def _analyze(capture: str, json_path: str | None, report_path: str | None, store, label: str | None,
             options: Any, cdn: bool, cache: bool | None = None, trace_path: str | None = None) -> dict[str, Any]:
    """The analyse task (:mod:`profiler.pipeline.analyse`) on one capture, then what it says on the terminal."""
    from profiler.pipeline.analyse import AnalyseRequest, analyse

    done = analyse(AnalyseRequest(capture, options, json_path=json_path, report_path=report_path,
                                  trace_path=trace_path, label=label, cdn=cdn, cache=cache is not False),
                   store=store)
    if done.trace_info is not None:
        _say_trace(done.trace_info, trace_path)
    if done.json_text is not None:
        click.echo(done.json_text)
    if done.report_missing:
        click.echo("trtprof: the HTML report is not available in this build; use --json and "
                   "'trtprof report' later", err=True)
    data = done.data
    if json_path != "-":
        for line in summary_lines(data):
            click.echo(line)
        if data.get("run_id") is not None:
            click.echo(f"stored run {data['run_id']}")
    return data


def _say_trace(info: dict[str, Any], path: str | None) -> None:
    """What ``--trace`` kept of the capture."""
    cut = (f"; the capture has {info['events_total']:,}, cut at {info['truncated_at_us'] / 1e3:.3f} ms"
           if info["truncated_at_us"] is not None else "")
    click.echo(f"trace: {path} ({info['events_kept']:,} events{cut}; open in ui.perfetto.dev or chrome://tracing)",
               err=True)


def _same_file(url: str, path: str) -> bool:
    """True when the store URL is a SQLite file that is ``path`` (the capture must not become the store)."""
    if not url.startswith("sqlite:///"):
        return False
    try:
        return Path(url[len("sqlite:///"):]).resolve() == Path(path).resolve()
    except OSError:
        return False

