"""Many captures at once: each analysed, reported and stored in a task of its own, then one index.

    from profiler.distributed.captures import analyze_many
    index = analyze_many(["host1.sqlite", "host2.sqlite"], "out", jobs=4, store_url="sqlite:///trtprof.db")
    index["failed"]                   # the captures that could not be analysed, each with the reason

Each task is the same work as ``trtprof analyze CAPTURE --json ... --report ...`` (and its store): a capture
that fails (unreadable, out of memory, its process killed) is reported with the reason and the others go on.
``out`` receives ``index.html`` (a sortable table of every capture), ``index.json`` and one folder per capture
with its ``report.html`` and ``analysis.json``.
"""

from __future__ import annotations

import json
import os
import resource
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from profiler.errors import TrtprofError

if TYPE_CHECKING:
    from profiler.pipeline.runners import Runner

#: modules a capture task imports, loaded once by the local process server (see pools.local_map)
PRELOAD = ("numpy", "pandas", "pyarrow", "profiler.capture.analyze", "profiler.capture.loader", "profiler.capture.cache",
           "profiler.capture.result_cache", "profiler.rules.capture", "profiler.store.api", "profiler.report.analysis",
           "profiler.pipeline.analyse")
TOP_FINDINGS = 3


def task_names(paths: list[Path]) -> list[str]:
    """A short, unique folder name per capture: its stem, prefixed by its folder's name where stems repeat
    (``host1/report.sqlite``, ``host2/report.sqlite`` -> ``host1_report``, ``host2_report``), numbered last."""
    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "capture"

    stems = [p.stem for p in paths]
    names: list[str] = []
    for p in paths:
        name = slug(p.stem if stems.count(p.stem) == 1 else f"{p.parent.name}_{p.stem}")
        base, n = name, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def analyze_capture(task: dict[str, Any]) -> dict[str, Any]:
    """One capture, in whatever process runs it: analyse, write its report and JSON, store the run.
    Returns its index row; a failure becomes ``status: failed`` with the reason, never an exception."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {"capture": task["path"], "name": task["name"], "status": "failed", "error": None,
                           "run_id": None, "report": None, "json": None, "pid": os.getpid()}
    try:
        row.update(_analyze_and_write(task))
        row["status"] = "ok"
    except MemoryError:
        limit = task.get("memory_limit_bytes")
        row["error"] = ("ran out of memory" + (f", over its memory limit of {limit / 2**20:,.0f} MiB" if limit else "")
                        + ": give fewer --jobs or a larger --memory-limit")
    except TrtprofError as exc:
        row["error"] = str(exc)
    except Exception as exc:  # a bug in the analysis of this capture: reported, the others go on
        row["error"] = f"internal error: {type(exc).__name__}: {exc}"
    row["analysis_s"] = round(time.perf_counter() - t0, 3)
    row["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return row


def _analyze_and_write(task: dict[str, Any]) -> dict[str, Any]:
    """The analyse task (:mod:`profiler.pipeline.analyse`) on one capture of the batch, into its folder."""
    from profiler.capture.columnar import columnar_kind
    from profiler.capture.options import AnalysisOptions
    from profiler.pipeline.analyse import AnalyseRequest, analyse

    path = task["path"]
    if not os.path.isfile(path) and columnar_kind(path) is None:
        from profiler.errors import InputError

        import socket

        raise InputError(("no such file" if not os.path.exists(path) else "not a file") + f" on {socket.gethostname()}")
    folder = Path(task["out_dir"]) / task["name"]
    folder.mkdir(parents=True, exist_ok=True)
    done = analyse(AnalyseRequest(
        path, AnalysisOptions(min_gap_us=task.get("min_gap_us"), **(task.get("options") or {})),
        json_path=str(folder / "analysis.json"), report_path=str(folder / "report.html"),
        store_url=task.get("store_url"), label=task.get("label"), cdn=bool(task.get("cdn")),
        cache=bool(task.get("trace_cache", True))))  # --no-cache bypasses the analysis and trace caches
    out: dict[str, Any] = {"json": done.json_path}
    if done.report_path is not None:
        out["report"] = done.report_path
    if done.run_id is not None:
        out["run_id"] = done.run_id
    out.update(index_fields(done.data))
    return out


def top_series(ranges: list[dict[str, Any]]) -> dict[str, Any]:
    """The series that stands for the capture's time per iteration when the analysis found no inference
    unit: of the series that repeat (a range seen once wraps the run), the one with the most total wall
    time; else the biggest one (``ranges`` come biggest total wall first)."""
    repeated = [r for r in ranges if (r.get("count") or 0) >= 2]
    return (repeated or ranges or [{}])[0]


def _label(r: dict[str, Any]) -> str | None:
    return (f"{r['domain']}:{r['name']}" if r.get("domain") else r.get("name")) if r else None


def unit_series(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the range that is one inference, where that choice came from): the analysis' inference unit
    (TensorRT's enqueue, --unit, the outermost repeated range) when it names a series, else ``top_series``."""
    inference = data.get("inference") or {}
    ranges = data.get("ranges") or []
    name = inference.get("series")
    match = next((r for r in ranges if name and name in (_label(r), r.get("name"))), None)
    if match is not None:
        return match, str(inference.get("source") or "unit")
    return top_series(ranges), "top series"


def unit_latency(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The inference's GPU latency statistics (first GPU start to last GPU end, the latency ``trtprof analyze``
    prints on its inference line), or {} when the unit is no inference (a whole-capture window, the top series)."""
    if source in ("window", "top series"):
        return {}
    return (data.get("inference") or {}).get("gpu_latency_ms") or {}


FINGERPRINT_KERNEL_SHARE = 0.9
"""Without layer ranges, a capture's network is told by the kernels that make this share of its GPU time (by
their names, the heaviest first): two captures of one engine run the same kernels; graph replays traced as
a whole say only that a graph ran, so they are left out."""
_GRAPH_REPLAY_ROW = re.compile(r"^CUDA graph .* \(replays\)$")


FINGERPRINT_IO_DIGITS = 2
"""Bytes copied per inference are compared to this many significant digits: an odd extra copy (a warm-up
upload in the steady state) does not split one engine's captures, a batch of 8 against 1 does."""


def _significant(x: float, digits: int = FINGERPRINT_IO_DIGITS) -> str:
    return f"{x:.{digits}g}"


def network_fingerprint(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(a short hash of what the capture's inference runs, what it was made from): the inference's layer
    names ('layers', TensorRT's per-layer ranges) else its heaviest kernels' names ('kernels',
    ``FINGERPRINT_KERNEL_SHARE``), with the engine's input shapes where the layer information gives them
    ('+shapes'), else the bytes each inference copies in and out ('+io', ``FINGERPRINT_IO_DIGITS``); (None,
    None) when the capture names neither. Captures are peers only with the same one."""
    import hashlib

    layers = [x for x in data.get("layers") or [] if isinstance(x, dict) and x.get("name")]
    if layers:
        parts, source = sorted({str(x["name"]) for x in layers}), "layers"
    else:
        kernels = [k for k in data.get("top_kernels") or [] if isinstance(k, dict) and k.get("name")
                   and not _GRAPH_REPLAY_ROW.match(str(k["name"]))]
        kernels.sort(key=lambda k: -float(k.get("total_ms") or 0.0))
        total = sum(float(k.get("total_ms") or 0.0) for k in kernels)
        parts, held = [], 0.0
        for k in kernels:
            if total > 0 and held >= FINGERPRINT_KERNEL_SHARE * total:
                break
            parts.append(str(k.get("short_name") or k["name"]))
            held += float(k.get("total_ms") or 0.0)
        parts, source = sorted(set(parts)), "kernels"
    if not parts:
        return None, None
    shapes = (layers[0].get("engine") or {}).get("dims_in") if layers else None
    io = ((data.get("inference") or {}).get("io_bytes_per_inference") or {})
    if shapes:
        parts.append("shapes=" + json.dumps(shapes))
        source += "+shapes"
    elif any(io.values()):  # what each inference takes in and gives out stands for its input shapes
        parts.append("io=" + ",".join(f"{d}:{_significant(float(io.get(d) or 0.0))}" for d in ("HtoD", "DtoH")))
        source += "+io"
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:12], source


def index_fields(data: dict[str, Any]) -> dict[str, Any]:
    """What the index shows of one analysis: the capture, its inference unit (``unit_series``) with its
    GPU latency and host wall time per inference, and its most severe findings."""
    cap = data.get("capture") or {}
    gpus = sorted({str(g.get("name")) for g in cap.get("gpus") or [] if isinstance(g, dict) and g.get("name")})
    ranges = data.get("ranges") or []
    top, source = unit_series(data)
    wall = top.get("wall_ms") or {}
    latency = unit_latency(data, source)
    inference = data.get("inference") or {}
    findings = data.get("findings") or []
    counts = {s: sum(f.get("severity") == s for f in findings) for s in ("high", "medium", "low", "info")}
    network, network_from = network_fingerprint(data)
    return {
        "gpus": gpus, "nsys_version": cap.get("nsys_version"), "duration_ms": cap.get("duration_ms"),
        "series_count": len(ranges), "unit": _label(top), "unit_source": source, "unit_count": top.get("count"),
        "unit_gpu_latency_ms": latency.get("median"), "unit_gpu_latency_p99_ms": latency.get("p99"),
        "unit_wall_ms": wall.get("median"), "unit_wall_p99_ms": wall.get("p99"), "unit_wall_cov_pct": wall.get("cov_pct"),
        "unit_gpu_busy_fraction": top.get("gpu_busy_fraction"),
        # the GPU busy share the capture's own report gives: its steady state's
        "gpu_busy_fraction": ((data.get("phases") or {}).get("steady") or {}).get("gpu_busy_fraction"),
        "network": network, "network_from": network_from,
        "bound_by": inference.get("bound_by") if source != "top series" else None,
        "finding_counts": counts,
        "top_findings": [{k: f.get(k) for k in ("severity", "rule", "title", "range")}
                         for f in findings[:TOP_FINDINGS]],
    }


def analyze_many(captures: Iterable[str | os.PathLike], out_dir: str | os.PathLike, *, jobs: int | None = None,
                 scheduler: str | None = None, store_url: str | None = None, label: str | None = None,
                 min_gap_us: float | None = None, cdn: bool = False, memory_limit_bytes: int | None = None,
                 trace_cache: bool = True, options: dict[str, Any] | None = None,
                 progress: Callable[[str], None] | None = None, runner: Runner | None = None) -> dict[str, Any]:
    """Analyse every capture (``jobs`` local processes, or the Dask cluster at ``scheduler``, or ``runner``),
    write the index into ``out_dir`` and return it. ``store_url`` must already be created (``Store.open``);
    ``options``: more ``AnalysisOptions`` fields (unit, include_setup, layer_info), the same for every capture."""
    from profiler.distributed.index import build_index, write_index

    say = progress or (lambda _m: None)
    paths = list(dict.fromkeys(Path(os.path.abspath(c)) for c in captures))
    out = Path(os.path.abspath(out_dir))
    tasks = [{"path": str(p), "name": n, "out_dir": str(out), "store_url": store_url, "label": label,
              "min_gap_us": min_gap_us, "cdn": cdn, "memory_limit_bytes": memory_limit_bytes,
              "trace_cache": trace_cache, "options": dict(options or {})}
             for p, n in zip(paths, task_names(paths))]
    t0 = time.perf_counter()
    given = runner
    runner = runner or batch_runner(jobs, scheduler, memory_limit_bytes)
    try:
        say(f"{len(tasks)} capture(s) {'on' if scheduler else 'in'} {runner.describe}")
        results = _collect(runner.map(analyze_capture, tasks), say)
    finally:
        runner.close()
    order = {t["path"]: i for i, t in enumerate(tasks)}
    rows = sorted(results, key=lambda r: order.get(r["capture"], len(order)))
    index = build_index(rows, wall_s=time.perf_counter() - t0,
                        mode=f"dask {scheduler}" if scheduler else f"{jobs} local process(es)" if given is None
                        else given.describe)
    write_index(index, out)
    return index


def batch_runner(jobs: int | None, scheduler: str | None, memory_limit_bytes: int | None = None) -> Runner:
    """The runner (:mod:`profiler.pipeline.runners`) of a batch: the Dask cluster at ``scheduler``, else
    ``jobs`` local processes, a fresh one per capture, each capped at ``memory_limit_bytes``."""
    from profiler.pipeline.runners import DaskRunner, ProcessRunner

    if scheduler:
        return DaskRunner(scheduler, key=lambda t: f"trtprof-analyze-{t['name']}-{os.getpid()}")
    return ProcessRunner(jobs or 1, memory_limit_bytes=memory_limit_bytes, preload=PRELOAD)


def _collect(pairs: Iterable[tuple[dict, Any]], say: Callable[[str], None]) -> list[dict[str, Any]]:
    rows = []
    for task, outcome in pairs:
        if outcome.lost is not None:
            limit = task.get("memory_limit_bytes")
            why = (f"its process died: killed, or over its memory limit of {limit / 2**20:,.0f} MiB (--memory-limit)"
                   if limit else f"lost: {outcome.lost}")
            row = {"capture": task["path"], "name": task["name"], "status": "failed", "error": why,
                   "run_id": None, "report": None, "json": None}
        else:
            row = outcome.value
        rows.append(row)
        mark = "ok" if row["status"] == "ok" else f"FAILED: {row['error']}"
        say(f"[{len(rows)}] {task['name']}: {mark}")
    return rows
