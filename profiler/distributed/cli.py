"""The command-line side of scale-out: the options ``analyze`` and ``sweep`` gain, and what they do.

``trtprof analyze`` and ``trtprof sweep`` call in here only when one of these options is given (or, for
analyze, more than one capture), so without them nothing changes: no Dask import, no extra process.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

import click

from profiler.errors import InputError, UsageError

DEFAULT_OUT = "trtprof-analyze"


def _scheduler_option(what: str) -> Callable:
    from profiler.distributed.connect import check_option

    return click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", callback=check_option,
                        help=f"Send {what} to this Dask distributed scheduler (pip install 'trtprof[dask]').")


def analyze_options(func: Callable) -> Callable:
    """``--jobs``, ``--scheduler``, ``--out`` and ``--memory-limit`` for ``trtprof analyze``."""
    func = click.option("--memory-limit", default=None, metavar="SIZE",
                        help="With --jobs: the most memory one capture's process may take (e.g. 8G); a capture "
                             "that needs more fails alone. Default: the machine's memory divided by --jobs.")(func)
    func = click.option("--out", "batch_out", default=None, type=click.Path(file_okay=False),
                        help=f"With several captures: the folder for index.html, index.json and one report per "
                             f"capture (default {DEFAULT_OUT}).")(func)
    func = _scheduler_option("the captures (one task each)")(func)
    return click.option("--jobs", type=click.IntRange(min=1, max=4096), default=None,
                        help="Analyse the captures in this many local processes at once.")(func)


def sweep_options(func: Callable) -> Callable:
    """``--devices`` and ``--scheduler`` for ``trtprof sweep``."""
    func = _scheduler_option("the variants (workers started with --resources \"GPU=1\", one per GPU)")(func)
    return click.option("--devices", default=None, metavar="0,1,...",
                        help="Measure variants concurrently, one process per GPU (nvidia-smi indices or GPU "
                             "UUIDs), each variant alone on its GPU; one run.")(func)


def worker_store_url(url: str | None) -> str | None:
    """The store URL as workers in other folders (or hosts) must see it: a SQLite path made absolute."""
    if url is None or not url.startswith("sqlite:///"):
        return url
    path = url[len("sqlite:///"):]
    return url if path in ("", ":memory:") or os.path.isabs(path) else f"sqlite:///{os.path.abspath(path)}"


# -- analyze -----------------------------------------------------------------------------------------
def is_batch(captures: tuple[str, ...], jobs: int | None, scheduler: str | None, out: str | None) -> bool:
    return len(captures) > 1 or jobs is not None or scheduler is not None or out is not None


def analyze_batch(ctx: click.Context, captures: tuple[str, ...], *, jobs: int | None, scheduler: str | None,
                  out: str | None, memory_limit: str | None, json_path: str | None, report_path: str | None,
                  no_store: bool, label: str | None, db: str | None, min_gap_us: float | None, cdn: bool,
                  no_cache: bool = False, analysis: dict[str, Any] | None = None) -> None:
    """``trtprof analyze A B ... [--jobs N | --scheduler URL]``: analyse all, write the index, exit 3 naming
    the captures that failed (after finishing the rest)."""
    from profiler.cli.options import db_url, open_store
    from profiler.cli.outputs import check_output_dir
    from profiler.distributed.captures import analyze_many
    from profiler.store.api import resolve_url

    if json_path or report_path:
        raise UsageError("with several captures (or --jobs/--scheduler/--out) each capture's report and JSON go "
                         f"into --out (default {DEFAULT_OUT}) beside index.html and index.json; drop --json/--report")
    if jobs is not None and scheduler is not None:
        raise UsageError("--jobs runs local processes and --scheduler a Dask cluster: give one of them")
    if memory_limit is not None and scheduler is not None:
        raise UsageError("--memory-limit applies to --jobs; a Dask worker's limit is set where it starts "
                         "(dask worker --memory-limit)")
    layer_info = (analysis or {}).get("layer_info")
    if layer_info:
        if not Path(layer_info).is_file():
            raise InputError(f"--layer-info {layer_info}: no such file (give trtexec's --exportLayerInfo JSON)")
        analysis = {**(analysis or {}), "layer_info": os.path.abspath(layer_info)}
    limit = _memory_limit(memory_limit, jobs or 1)
    out_dir = check_output_dir(out or DEFAULT_OUT, "--out")
    url = None
    if not no_store:
        url = worker_store_url(resolve_url(db_url(ctx, db)))
        if url.startswith("sqlite:///") and any(_same(url[len("sqlite:///"):], c) for c in captures):
            raise UsageError("--db names one of the captures; the run store must be another file "
                             "(default ./trtprof.db)")
        open_store(ctx, url).close()  # created or upgraded once, here, before the workers write to it
    say = lambda msg: click.echo(msg, err=True)  # noqa: E731 - progress goes to stderr
    index = analyze_many(captures, out_dir, jobs=jobs or (None if scheduler else 1), scheduler=scheduler,
                         store_url=url, label=label, min_gap_us=min_gap_us, cdn=cdn, memory_limit_bytes=limit,
                         trace_cache=not no_cache, options=analysis, progress=say)
    for line in index_lines(index):
        click.echo(line)
    click.echo(f"wrote {out_dir / 'index.html'} and {out_dir / 'index.json'}")
    failed = index["failed"]
    if failed:
        names = ", ".join(Path(f["capture"]).name for f in failed[:5]) + (" ..." if len(failed) > 5 else "")
        done = "analysed and in the index" if no_store else "analysed, stored and in the index"
        raise InputError(f"{len(failed)} of {index['counts']['total']} capture(s) could not be analysed ({names}); "
                         f"the others are {done}")


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _memory_limit(text: str | None, jobs: int) -> int | None:
    from profiler.backends.base import parse_bytes

    if text is not None:
        try:
            value = parse_bytes(text)
        except ValueError as exc:
            raise UsageError(f"--memory-limit: {exc}") from None
        if value < (512 << 20):
            raise UsageError(f"--memory-limit {text} is below 512M, too little to load any capture")
        return value
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(1 << 30, int(total * 0.9) // max(1, jobs))


INDEX_NOTE = (
    "GPU latency: median per inference, from its first GPU work starting to its last ending, as 'trtprof analyze'",
    "  reports it ('-': no inference unit identified). host wall: median wall time of the unit's range on the host;",
    "  for an asynchronous loop only the time to enqueue the work; with no inference unit, that of the biggest",
    "  repeated range or of the whole capture. vs peers: GPU latency over the median of the captures that run the",
    "  same network (the same unit and layer names, else heaviest kernels; {min_peers} or more).")


def _cell(value: Any, spec: str, suffix: str = "") -> str:
    return format(value, spec) + suffix if isinstance(value, (int, float)) else "-"


def index_lines(index: dict[str, Any]) -> list[str]:
    """The terminal table of an index: one line per capture, then what its columns are."""
    rows = index["captures"]
    w = min(max([len(r["name"]) for r in rows] + [7]), 40)
    lines = [f"{'capture':<{w}} {'status':<6} {'GPU latency ms':>14} {'host wall ms':>12} {'vs peers':>8} "
             f"{'findings H/M/L':>14}"]
    for r in rows:
        c = r.get("finding_counts") or {}
        lines.append(f"{r['name'][:w]:<{w}} {('ok' if r['status'] == 'ok' else 'FAILED'):<6} "
                     f"{_cell(r.get('unit_gpu_latency_ms'), '.3f'):>14} {_cell(r.get('unit_wall_ms'), '.3f'):>12} "
                     f"{_cell(r.get('vs_peers'), '.2f', 'x'):>8} "
                     f"{'/'.join(str(c.get(s, 0)) for s in ('high', 'medium', 'low')) if c else '-':>14}")
    if any(r["status"] == "ok" for r in rows):
        lines += [line.format(min_peers=index.get("min_peers")) for line in INDEX_NOTE]
    for f in index["failed"]:
        lines.append(f"failed: {f['capture']}: {f['error']}")
    return lines


# -- sweep -------------------------------------------------------------------------------------------
def parse_devices(text: str) -> list[str]:
    """'0,1' -> ['0', '1']; CUDA indices or GPU UUIDs, each once."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError("--devices needs at least one GPU (e.g. --devices 0,1)")
    for d in items:
        if not (d.isdigit() or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z-]+", d)):
            raise UsageError(f"--devices takes CUDA device indices or GPU UUIDs, not {d!r}")
    dup = sorted({d for d in items if items.count(d) > 1})
    if dup:
        raise UsageError(f"--devices names GPU {dup[0]} twice; each GPU measures one variant at a time")
    return items


def parallel_runner(devices: str | None, scheduler: str | None, *, nsys: bool,
                    backend: str | None = None) -> Callable[[], Any] | None:
    """What ``--devices``/``--scheduler`` ask for, checked now: a function that starts the runner (processes,
    a cluster connection) when the sweep is about to run, or None (the serial sweep)."""
    if devices is None and scheduler is None:
        return None
    if devices is not None and scheduler is not None:
        raise UsageError("--devices runs local processes and --scheduler a Dask cluster: give one of them")
    if nsys:
        raise UsageError("--nsys profiles one process; it cannot be combined with --devices or --scheduler")
    from profiler.distributed.sweep import DaskRunner, DeviceRunner

    if devices is not None:
        chosen = parse_devices(devices)
        return lambda: DeviceRunner(chosen, backend)
    return lambda: DaskRunner(scheduler)


def run_sweep(sweep: Any, start_runner: Callable[[], Any], ctx: click.Context, db: str | None,
              no_store: bool) -> dict[str, Any]:
    """The sweep's variants through the runner; workers write to the same store as this process."""
    from profiler.cli.options import db_url
    from profiler.distributed.sweep import run_parallel
    from profiler.store.api import resolve_url

    url = None if no_store else worker_store_url(resolve_url(db_url(ctx, db)))
    return run_parallel(sweep, start_runner(), store_url=url)
