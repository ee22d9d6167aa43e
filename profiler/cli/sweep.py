"""`trtprof sweep [MODEL]`: engine variants of an ONNX model, timed like trtexec, checked against FP32.

Writes ``--out/summary.json`` and ``--out/report.html`` and stores the run (unless ``--no-store``).
Exit codes: 0 done, 1 an accuracy threshold was breached (the gate), 2 usage, 3 bad input.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, Callable

import click

from profiler.backends import BACKENDS
from profiler.cli.options import Finite, db_option, db_url, open_store
from profiler.cli.outputs import check_output_dir
from profiler.cli.terminal import lines_of
from profiler.cli.devices import parallel_runner, sweep_options
from profiler.errors import GateFailed, InputError, UsageError
from profiler.harness.hostload import injected_share

# the sweep library (profiler.sweep: numpy, the backends) is imported by the functions that run it, so that
# `trtprof sweep --help` and usage errors stay instant


def _interrupt_once(say: Callable[[str], None]) -> Callable[[int, Any], None]:
    """A SIGINT and SIGTERM handler: the first signal stops the sweep (KeyboardInterrupt, or Terminated for
    SIGTERM); later ones, which would cut short the saving of what was measured, are ignored with a note."""
    from profiler.errors import Terminated

    state = {"count": 0}

    def handler(signum: int, frame: Any) -> None:
        state["count"] += 1
        if state["count"] == 1:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
        say("still saving the finished variants; they are kept once this completes")

    return handler


def _sweep_argv(argv: list[str]) -> list[str]:
    """The arguments after the ``sweep`` subcommand in this process's command line."""
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--db":
            skip = True
            continue
        if a == "sweep":
            return argv[i + 1:]
    return []


def _sweep_under_nsys(ctx: click.Context, out_dir: str, db: str | None, no_store: bool, cdn: bool, say) -> None:
    """``--nsys``: :func:`profiler.harness.nsys.sweep_under_nsys` on this command line, then its table."""
    from profiler.harness.nsys import sweep_under_nsys
    from profiler.store import resolve_url
    from profiler.sweep import gate_failures
    from profiler.sweep.outputs import nsys_table

    out = check_output_dir(out_dir, "--out")
    url = None if no_store else resolve_url(db_url(ctx, db))  # the same store the child will write
    argv = (ctx.find_root().obj or {}).get("argv") or sys.argv[1:]
    done = sweep_under_nsys(_sweep_argv(argv), out, store_url=url, cdn=cdn, say=say)
    if url is None:
        say("nsys: --no-store: the capture's per-variant results are in summary.json (report.html is the "
            "sweep's own)")
    for line in nsys_table(done.summary):
        click.echo(line)
    click.echo(f"capture: {done.capture}")
    if done.run_id is not None:
        click.echo(f"stored run {done.run_id} (capture attached)")
    raise_gate(gate_failures(done.summary.get("findings") or []))


@click.command(name="sweep")
@click.argument("model", required=False)
@click.option("--precision", "precision", default="fp32,fp16", show_default=True,
              help="Precisions to build, comma-separated: fp32, fp16, int8.")
@click.option("--workspace", default="default", show_default=True,
              help="Workspace sizes, comma-separated (64M,256M,1G; 'default' = the backend's).")
@click.option("--streams", default="1", show_default=True, help="Concurrent streams (contexts), e.g. 1,2,4.")
@click.option("--cuda-graph", "cuda_graph", default="off", show_default=True, help="CUDA graph: off, on or off,on.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DIMS",
              help="Concrete shape of a dynamic input, e.g. x:1x3x224x224 or x:[1,3,224,224] (repeatable).")
@click.option("--calib", default=None, metavar="DATA", help="INT8 calibration data: .npz keyed by input name, or a directory.")
@click.option("--calib-method", default="entropy", show_default=True,
              type=click.Choice(["entropy", "minmax", "percentile"]), help="INT8 calibration method.")
@click.option("--inputs", default=None, metavar="DATA", help="Inputs for timing and the accuracy check (.npz or directory).")
@click.option("--iterations", default=10, show_default=True, type=click.IntRange(min=1, max=10**9),
              help="At least this many timed queries per stream (trtexec --iterations).")
@click.option("--duration", default=3.0, show_default=True, type=Finite(0, 86400),
              help="At least this many seconds of timed queries (trtexec --duration).")
@click.option("--warmup", default=200.0, show_default=True, type=Finite(0, 3_600_000),
              help="Warm-up in milliseconds; queries starting inside it are dropped (trtexec --warmUp).")
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", *BACKENDS]), help="Which backend builds and runs.")
@click.option("--out", "out_dir", default="trtprof-sweep", show_default=True, type=click.Path(file_okay=False),
              help="Directory for summary.json and report.html.")
@click.option("--label", default=None, help="A label for the stored run (e.g. nightly, pr-123).")
@db_option
@click.option("--no-store", is_flag=True, help="Do not store the run in the database.")
@click.option("--resume", default=None, metavar="RUN", help="Continue an interrupted sweep (run id or label).")
@click.option("--threshold", "thresholds", multiple=True, metavar="KEY=VALUE",
              help="Accuracy limit (fp16.cosine_min=0.9999, int8.rel_l2_max=0.1) or rule threshold "
                   "(jitter.cov_pct=3); repeatable.")
@click.option("--output-kind", "output_kinds", multiple=True, metavar="NAME:KIND",
              help="What an output holds: classes, logits, boxes or regression (repeatable). Top-1 agreement is "
                   "checked for classes and logits only; undeclared outputs are detected (probability rows = "
                   "classes, integers compared exactly) and the sweep says what it detected.")
@click.option("--output-tolerance", "output_tolerances", multiple=True, metavar="NAME:atol=X,rtol=Y",
              help="Per-output tolerances of the elementwise check |a-b| <= atol + rtol*|ref| (repeatable); "
                   "the precision's defaults otherwise (--threshold fp16.atol=X sets them for all outputs).")
@click.option("--no-layers", is_flag=True, help="Skip the per-layer profiling pass.")
@click.option("--localize/--no-localize", default=True, show_default=True,
              help="When an fp16/int8 variant breaches its accuracy threshold, find the nodes where the error "
                   "starts and measure what keeping them in fp32 buys.")
@click.option("--keep-fp32", "keep_fp32", multiple=True, metavar="NODE[,NODE...]",
              help="Keep these ONNX nodes (names, or op types such as Softmax) in fp32 in the fp16 and int8 "
                   "models: the fp16 converter's block list, the int8 quantizer's exclusions (repeatable). The "
                   "localization of an accuracy breach names the nodes to give here.")
@click.option("--fp16-range-check/--no-fp16-range-check", default=True, show_default=True,
              help="Keep in fp32 the nodes whose activations reach a quarter of float16's range on sample inputs "
                   "(--calib, else seeded random ones) when making the fp16 model; off: the converter's plain "
                   "fp16 model.")
@click.option("--no-transfers", is_flag=True,
              help="Like trtexec --noDataTransfers: no host<->device copies per query; latency = compute.")
@click.option("--no-overlap", is_flag=True,
              help="One query in flight per stream: each is waited for before the next is enqueued (trtexec "
                   "--exposeDMA). By default, as in trtexec, a GPU stream enqueues the next query first.")
@click.option("--repeat", default=0, show_default=True, type=click.IntRange(min=0), metavar="N",
              help="After all variants, time each again in N fresh processes, interleaved across variants: the "
                   "run-to-run spread that `trtprof compare` needs to call a change (3 or more; 5 is a good "
                   "default). Each repeat costs the timed phase of every variant once more.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False),
              help="Cache of transformed models and engines (default $TRTPROF_CACHE_DIR or ~/.cache/trtprof).")
@click.option("--nsys", is_flag=True,
              help="Run the sweep under Nsight Systems (CUDA, NVTX, OS runtime), analyse the capture and attach "
                   "each variant's GPU time and findings to the run; the capture is kept in --out.")
@click.option("--cdn", is_flag=True, help="Load plotly from a CDN instead of embedding it in report.html.")
@sweep_options
@click.pass_context
def command(ctx: click.Context, model: str | None, precision: str, workspace: str, streams: str, cuda_graph: str,
            shapes: tuple[str, ...], calib: str | None, calib_method: str, inputs: str | None, iterations: int,
            duration: float, warmup: float, backend: str, out_dir: str, label: str | None, db: str | None,
            no_store: bool, resume: str | None, thresholds: tuple[str, ...], output_kinds: tuple[str, ...],
            output_tolerances: tuple[str, ...], no_layers: bool, localize: bool, fp16_range_check: bool,
            keep_fp32: tuple[str, ...],
            no_transfers: bool, no_overlap: bool, repeat: int, cache_dir: str | None, nsys: bool, cdn: bool,
            devices: str | None, scheduler: str | None) -> None:
    """Build and time engine variants of MODEL (default: the bundled tiny model on onnxruntime), compare each
    with FP32 on the same inputs, store the run and write summary.json and report.html."""
    from profiler.sweep import Sweep
    from profiler.sweep.options import CONFIG_OPTIONS, config_from_options
    from profiler.sweep.outputs import write_outputs

    say = lambda msg: click.echo(msg, err=True)  # noqa: E731 - progress goes to stderr
    injected_share()  # a wrong TRTPROF_HOST_LOAD is refused before anything is built
    if cache_dir:  # an output folder: a file or a FIFO there is a usage error before anything is built
        check_output_dir(cache_dir, "--cache-dir")
    if repeat and (devices or scheduler):
        raise UsageError("--repeat times its repeats on this machine, one process at a time; it cannot be combined with "
                         "--devices or --scheduler yet")
    start_runner = parallel_runner(devices, scheduler, nsys=nsys, backend=backend)  # --devices/--scheduler
    if nsys:
        from profiler.harness.nsys import under_nsys

        if not under_nsys():
            if resume is not None:
                raise UsageError("--nsys cannot be combined with --resume: capture a new sweep instead")
            _sweep_under_nsys(ctx, out_dir, db, no_store, cdn, say)
            return
    if resume is not None:
        sweep, store, out_dir = _resumed(ctx, resume, no_store, db, out_dir, say)
    else:
        config = config_from_options(**{k: v for k, v in ctx.params.items() if k in CONFIG_OPTIONS})
        store = None if no_store else open_store(ctx, db)
        sweep = Sweep(config, store=store, progress=say)
    out = check_output_dir(out_dir, "--out")
    sweep.config.out_dir = str(out.resolve())
    try:
        summary = _run(ctx, sweep, start_runner, db, no_store, out, cdn, store, say)
        written = write_outputs(sweep, summary, out, cdn, store)
    finally:
        if store is not None:
            store.close()
    _conclude(sweep, summary, written)


def _resumed(ctx: click.Context, resume: str, no_store: bool, db: str | None, out_dir: str,
             say: Callable[[str], None]) -> tuple[Any, Any, str]:
    """(the Sweep continuing stored run ``resume``, its store, the --out to write to)."""
    from profiler.sweep import open_resume
    from profiler.sweep.outputs import stored_out_dir

    if no_store:
        raise UsageError("--resume continues a stored run; it cannot be combined with --no-store")
    store = open_store(ctx, db)
    sweep = open_resume(store, resume, progress=say)
    say(f"resuming run {sweep.run_id}: {len(sweep.variants)} variant(s) already stored "
        "(MODEL and axis options come from the stored run)")
    if ctx.get_parameter_source("out_dir") is click.core.ParameterSource.DEFAULT:
        out_dir = stored_out_dir(store, sweep) or out_dir
        say(f"writing to the run's own --out {out_dir}")
    return sweep, store, out_dir


def _run(ctx: click.Context, sweep: Any, start_runner: Any, db: str | None, no_store: bool, out: Path, cdn: bool,
         store: Any, say: Callable[[str], None]) -> dict[str, Any]:
    """The sweep's summary; on Ctrl-C what was measured is written and the resume command said."""
    from profiler.sweep.outputs import resume_command, write_outputs

    handler = _interrupt_once(say)
    previous = _install(handler)
    try:
        if start_runner is None:
            return sweep.run()
        from profiler.cli.devices import run_sweep

        return run_sweep(sweep, start_runner, ctx, db, no_store)
    except KeyboardInterrupt:
        if sweep.variants:
            write_outputs(sweep, sweep.summary(), out, cdn, store)
            say(f"partial results written to {out}")
        if sweep.run_id is not None:
            say(f"continue with: {resume_command(sweep.run_id, db_url(ctx, db), out)}")
        raise
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _install(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """``handler`` for SIGINT and SIGTERM where Python's defaults hold (not where an embedding program set
    its own, nor off the main thread); returns the handlers it replaced."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    replaced: dict[int, Any] = {}
    for signum, default in defaults.items():
        try:
            if signal.getsignal(signum) is default:
                signal.signal(signum, handler)
                replaced[signum] = default
        except ValueError:  # not the main thread
            pass
    return replaced


def _conclude(sweep: Any, summary: dict[str, Any], written: list[Path]) -> None:
    """The verdict, the table and where things went; exit 3 when nothing was measured, 1 on the gate."""
    from profiler.report.verdict import sweep_verdict, terminal_lines
    from profiler.sweep import gate_failures
    from profiler.sweep.outputs import format_table

    for line in terminal_lines(sweep_verdict(summary), top=8):
        click.echo(line)
    click.echo("")
    click.echo("\n".join(lines_of(format_table(summary).splitlines())))
    click.echo("")
    for p in written:
        click.echo(f"wrote {p}")
    if sweep.run_id is not None:
        click.echo(f"stored run {sweep.run_id}")
    ran = [v for v in summary["variants"] if v["status"] != "skipped"]
    if ran and all(v["status"] == "failed" for v in ran):
        first = next((v for v in ran if v.get("error")), ran[0])
        raise InputError(f"every variant failed, nothing was measured ({first['key']}: {first.get('error')})")
    if summary["variants"] and not ran:
        first = summary["variants"][0]
        raise InputError(f"every variant was skipped, nothing was measured ({first['key']}: {first.get('error')})")
    raise_gate(gate_failures(summary["findings"]))


def raise_gate(failed: list[dict]) -> None:
    """GateFailed (exit 1) naming the failed variants and the variants whose outputs breach their thresholds."""
    from profiler.sweep.outputs import gate_message

    message = gate_message(failed)
    if message:
        raise GateFailed(message)
