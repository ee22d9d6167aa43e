"""Nsight Systems in the loop: run a sweep under ``nsys profile``, export SQLite, attach what it shows.

:func:`sweep_under_nsys` is ``trtprof sweep ... --nsys`` as a library call (the CLI only prints its
result); it takes three steps:

    cmd = sweep_command(strip_nsys_args(argv, keep=("--no-store",)), OUT)  # the same sweep, as a child
    capture = profile(cmd, OUT / "sweep", ok_codes=(0, 1))                  # nsys profile + export -> .sqlite
    attach_capture(summary, capture)                                        # per-variant GPU time, findings

The child stores the run (unless --no-store) and writes summary.json into OUT as any sweep does; the
parent then attaches the capture to the summary, the stored run and the report. The harness wraps every
timed query in an NVTX range ``<variant key>/iter`` (domain ``trtprof``), so the capture analysis
(``profiler.capture``) sees one series per variant; :func:`attach_capture` puts that series' projected GPU
busy time, wall time, launch count and findings under ``variant["nsys"]``. Without nsys,
:func:`require_nsys` raises one clear ``InputError``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from profiler.capture.nsysrep import export_sqlite, find_nsys
from profiler.errors import InputError

DEFAULT_TRACE = "cuda,nvtx,osrt"
#: how long a Ctrl-C'd nsys gets to write its report before it is killed
INTERRUPT_GRACE_S = 120


def require_nsys() -> str:
    nsys = find_nsys()
    if nsys is None:
        raise InputError("--nsys needs Nsight Systems' nsys command, which was not found on PATH (install "
                         "Nsight Systems or set TRTPROF_NSYS to the nsys binary)")
    return nsys


def profile_args(output_base: str | os.PathLike, *, trace: str = DEFAULT_TRACE,
                 cuda_graph_trace: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The ``nsys profile`` options trtprof uses: CUDA, NVTX and OS runtime tracing, no sampling."""
    args = ["profile", "-t", trace, "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true",
            "-o", str(output_base)]
    if cuda_graph_trace:
        args += [f"--cuda-graph-trace={cuda_graph_trace}"]
    return args + list(extra)


def profile(command: Sequence[str], output_base: str | os.PathLike, *, trace: str = DEFAULT_TRACE,
            cuda_graph_trace: str | None = None, extra: Sequence[str] = (), env: dict[str, str] | None = None,
            timeout_s: float | None = None, ok_codes: Sequence[int] = (0,)) -> Path:
    """Run ``command`` under ``nsys profile`` and export the report to SQLite; returns the .sqlite path.

    The child's own exit code is checked: a code outside ``ok_codes`` is an error here too (a sweep
    whose accuracy gate failed exits 1 and still measured everything: pass ``ok_codes=(0, 1)``).
    """
    nsys = require_nsys()
    base = Path(output_base)
    base.parent.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env["TRTPROF_UNDER_NSYS"] = "1"  # a child sweep must not start nsys again
    proc = subprocess.Popen([nsys, *profile_args(base, trace=trace, cuda_graph_trace=cuda_graph_trace, extra=extra),
                             *command], env=child_env)
    try:
        returncode = proc.wait(timeout=timeout_s)
    except KeyboardInterrupt:
        # the terminal's Ctrl-C reached nsys and the sweep too: let them finish writing (the sweep
        # stores what it measured, nsys writes its report) instead of killing them
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        rep = base.with_name(base.name + ".nsys-rep")
        kept = f"; the capture so far is in {rep}" if rep.exists() else ""
        print(f"interrupted{kept}", file=sys.stderr)
        raise
    rep = base.with_name(base.name + ".nsys-rep")
    if returncode not in ok_codes:
        raise InputError(f"the command profiled by nsys failed with exit code {returncode}")
    if not rep.exists():
        raise InputError(f"nsys profile wrote no report at {rep}")
    return export_sqlite(rep, rep.with_suffix(".sqlite"))


def sweep_command(argv: Sequence[str], out_dir: str | os.PathLike) -> list[str]:
    """The child command: ``trtprof sweep`` with the caller's arguments (``--nsys``, ``--out`` and ``--db``
    already removed by :func:`strip_nsys_args`), writing summary.json into ``out_dir``. The caller
    appends ``--db URL`` so the child stores into the caller's database, or keeps ``--no-store``."""
    return [sys.executable, "-m", "profiler", "sweep", *argv, "--out", str(out_dir)]


def strip_nsys_args(argv: Sequence[str], keep: Sequence[str] = ()) -> list[str]:
    """``argv`` without the options the parent handles itself: --nsys, --out DIR, --db URL, --no-store
    (except those named in ``keep``)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        flag = a.split("=", 1)[0]
        if flag in keep:
            out.append(a)
            continue
        if a in ("--nsys", "--no-store"):
            continue
        if a in ("--out", "--db"):
            skip = True
            continue
        if a.startswith(("--out=", "--db=")):
            continue
        out.append(a)
    return out


def under_nsys() -> bool:
    """True inside a process that :func:`profile` started (so it does not profile itself again)."""
    return os.environ.get("TRTPROF_UNDER_NSYS") == "1"


def variant_series_name(key: str) -> str:
    from profiler.nvtx import iteration_range_name

    return iteration_range_name(key)


def analyze_iterations(capture_path: str | os.PathLike, options: Any = None) -> Any:
    """The capture analysis with the sweep's variant ranges (``sweep/<key>``) left out: the analyse task
    (:mod:`profiler.pipeline.analyse`) writing nothing.

    A variant range spans build, warm-up, graph capture, the accuracy pass and the per-layer pass;
    the capture rules report a range that encloses a qualifying one instead of it, so with the
    variant ranges present a finding would land on the variant (and an eager per-layer pass would
    flag a CUDA-graph variant). Without them each timed query's ``<key>/iter`` range is what the rules
    judge, which is the question the sweep asks.
    """
    from profiler.capture.options import AnalysisOptions
    from profiler.nvtx import variant_range_name
    from profiler.pipeline.analyse import AnalyseRequest, analyse

    if options is None:  # the variants' own iteration ranges are what the sweep judges: no setup cut
        options = AnalysisOptions(include_setup=True)
    prefix = variant_range_name("")  # "sweep/": the per-variant ranges
    return analyse(AnalyseRequest(str(capture_path), options, leave_out_ranges=prefix)).result


#: Variants whose median query the sweep report draws, and the events kept per drawing.
TIMELINE_VARIANTS = 6
TIMELINE_EVENTS = 2000


def sweep_timeline(trace: Any, summary: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The sweep report's ``timeline``: the median timed query (``<key>/iter``) of each variant the capture
    holds, fastest first (at most TIMELINE_VARIANTS), as :func:`profiler.capture.timeline.build_timeline`
    draws an analysis's."""
    from profiler.capture.timeline import build_timeline, series_windows

    start = int((getattr(trace, "meta", None) or {}).get("capture_start_ns") or 0)
    by_label = {(f"{r['domain']}:{r['name']}" if r.get("domain") else r.get("name")): r
                for r in doc.get("ranges") or [] if isinstance(r, dict)}
    found = [v for v in summary.get("variants") or [] if (v.get("nsys") or {}).get("found")]
    found.sort(key=lambda v: ((v.get("nsys") or {}).get("wall_ms") or {}).get("median") or float("inf"))
    windows = []
    for v in found[:TIMELINE_VARIANTS]:
        r = by_label.get(v["nsys"]["series"])
        if r is not None:
            windows += series_windows(r, start, worst=False, name=v["key"])
    tl = build_timeline(trace, doc, windows, max_events=TIMELINE_EVENTS)
    tl["variants_drawn"] = len(windows)
    tl["variants_found"] = len(found)
    return tl


def attach_capture(summary: dict[str, Any], capture_path: str | os.PathLike,
                   analysis: Any = None) -> dict[str, Any]:
    """Add to each variant of ``summary`` what the capture shows for its timed queries.

    ``variant["nsys"]``: ``count``, ``wall_ms`` and ``gpu_busy_ms`` statistics of the ``<key>/iter``
    ranges, ``gpu_busy_fraction``, launches, and the capture findings on that series; the harness's
    own compute median beside the capture's GPU busy median (``compute_vs_gpu_busy``). Adds the capture
    to ``summary["artifacts"]`` and the capture-wide findings to ``summary["nsys"]``. Returns summary.
    """
    if analysis is None:
        analysis = analyze_iterations(capture_path)
    doc = analysis.to_json() if hasattr(analysis, "to_json") else analysis
    by_name = {}
    for r in doc.get("ranges", []):
        by_name.setdefault(r.get("name"), []).append(r)
    findings = doc.get("findings", [])
    used_labels: set[str] = set()
    for v in summary.get("variants", []):
        name = variant_series_name(v["key"])
        cands = by_name.get(name) or []
        r = next((c for c in cands if c.get("domain") == "trtprof"), cands[0] if cands else None)
        if r is None:
            v["nsys"] = {"series": name, "found": False}
            continue
        label = f"{r['domain']}:{r['name']}" if r.get("domain") else r["name"]
        used_labels.add(label)
        mine = [f for f in findings if f.get("range") in (label, name)]
        compute = (v.get("compute_ms") or {}).get("median") if isinstance(v.get("compute_ms"), dict) else None
        busy = (r.get("gpu_busy_ms") or {}).get("median") if isinstance(r.get("gpu_busy_ms"), dict) else None
        entry = {
            "series": label, "found": True, "count": r.get("count"), "wall_ms": r.get("wall_ms"),
            "gpu_busy_ms": r.get("gpu_busy_ms"), "gpu_busy_fraction": r.get("gpu_busy_fraction"),
            "launches_per_instance": r.get("launches_per_instance"), "findings": mine,
            "rules": sorted({f.get("rule") for f in mine}),
        }
        if compute is not None and busy:
            entry["compute_vs_gpu_busy"] = {"harness_compute_median_ms": compute, "nsys_gpu_busy_median_ms": busy,
                                            "ratio": compute / busy}
        v["nsys"] = entry
    trace = getattr(getattr(analysis, "context", None), "trace", None)
    if trace is not None:
        summary["timeline"] = sweep_timeline(trace, summary, doc)
    summary.setdefault("artifacts", []).append({"kind": "nsys_capture", "path": str(capture_path)})
    summary["nsys"] = {
        "capture": str(capture_path),
        "capture_info": doc.get("capture"),
        "findings": [f for f in findings if f.get("range") not in used_labels],
    }
    return summary


@dataclass
class NsysSweep:
    """What :func:`sweep_under_nsys` made: the summary with the capture attached, and where it went."""

    summary: dict[str, Any]  # summary.json as rewritten (a profiler.documents.SweepDocument)
    capture: Path  # the exported .sqlite beside sweep.nsys-rep
    run_id: int | None  # the stored run the capture was attached to; None with no store
    report: Path | None  # report.html rewritten with the capture's sections; None with no store


def sweep_under_nsys(sweep_argv: Sequence[str], out_dir: str | os.PathLike, *, store_url: str | None,
                     cdn: bool = False, say: Callable[[str], None] = print) -> NsysSweep:
    """Run ``trtprof sweep SWEEP_ARGV`` as a child process under ``nsys profile``, then attach the
    capture's per-variant analysis to the summary.json it wrote into ``out_dir``, to its stored run (in
    ``store_url``, the store the child writes to; None: the child keeps ``--no-store``) and to the report.
    ``sweep_argv``: the sweep's arguments; --nsys, --out and --db are dropped (``out_dir`` and
    ``store_url`` say them)."""
    from profiler.files import atomic_write_bytes

    require_nsys()
    out = Path(out_dir)
    child = sweep_command(strip_nsys_args(sweep_argv, keep=("--no-store",)), out)
    if store_url is not None:
        child += ["--db", store_url]
    say(f"nsys: profiling the sweep (-t {DEFAULT_TRACE}) into {out / 'sweep.nsys-rep'}")
    capture = profile(child, out / "sweep", ok_codes=(0, 1))
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text())
    say(f"nsys: analysing {capture}")
    summary = attach_capture(summary, capture)
    atomic_write_bytes(summary_path, json.dumps(summary, indent=2).encode("utf-8"), "--out")
    run_id = (summary.get("run") or {}).get("id")
    if store_url is None or run_id is None:
        return NsysSweep(summary, Path(capture), None, None)
    return NsysSweep(summary, Path(capture), run_id, _attach_to_run(store_url, run_id, summary, capture, out, cdn))


def _attach_to_run(store_url: str, run_id: int, summary: dict[str, Any], capture: str | os.PathLike,
                   out: Path, cdn: bool) -> Path:
    """Store the capture's results with the run and rewrite its report from the store (which holds the
    samples and layers summary.json leaves out); returns the report's path."""
    from profiler.findings import Finding
    from profiler.report import write_sweep_report
    from profiler.store import Store

    store = Store.open(store_url)
    try:
        store.update_run(run_id, summary=summary)
        store.add_artifact(run_id, "capture", Path(capture).resolve())
        extra = [{**f, "variant": v["key"]} for v in summary["variants"]
                 for f in ((v.get("nsys") or {}).get("findings") or [])]
        store.add_findings(run_id, [Finding.from_dict(f) for f in
                                    extra + (summary.get("nsys") or {}).get("findings", [])])
        data = store.report_data(run_id)  # the summary plus the stored samples and layers
    finally:
        store.close()
    return Path(write_sweep_report(data, out / "report.html", cdn=cdn, layers=data.get("layers") or None))
