"""`trtprof sweep [MODEL]`: engine variants of an ONNX model, timed like trtexec, checked against FP32.

Writes ``--out/summary.json`` and ``--out/report.html`` and stores the run (unless ``--no-store``).
Exit codes: 0 done, 1 an accuracy threshold was breached (the gate), 2 usage, 3 bad input.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import click

from profiler.backends import BACKENDS, latency_notes
from profiler.cli.options import Finite, db_option, db_url, open_store
from profiler.cli.outputs import check_output_dir, write_text
from profiler.distributed.cli import parallel_runner, sweep_options
from profiler.errors import GateFailed, InputError, UsageError


def _interrupt_once(say: Callable[[str], None]) -> Callable[[int, Any], None]:
    """A SIGINT handler: the first Ctrl-C stops the sweep (KeyboardInterrupt); later ones, which would
    cut short the saving of what was measured, are ignored with a note."""
    state = {"count": 0}

    def handler(signum: int, frame: Any) -> None:
        state["count"] += 1
        if state["count"] == 1:
            raise KeyboardInterrupt
        say("still saving the finished variants; they are kept once this completes")

    return handler


def _split_list(text: str, option: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"{option} needs at least one value")
    return items


def parse_workspaces(text: str) -> list[int | None]:
    """'64M,256M,1G' -> bytes; 'default' -> None (the backend's own default)."""
    from profiler.backends.base import parse_bytes

    out: list[int | None] = []
    for item in _split_list(text, "--workspace"):
        if item.lower() == "default":
            out.append(None)
            continue
        try:
            out.append(parse_bytes(item))
        except ValueError as exc:
            raise UsageError(f"--workspace: {exc}") from None
    return out


MAX_STREAMS = 64  # each stream is a session or context with its own buffers


def parse_streams(text: str) -> list[int]:
    out = []
    for item in _split_list(text, "--streams"):
        if not item.isdigit() or int(item) < 1:
            raise UsageError(f"--streams values are positive integers, not {item!r}")
        if int(item) > MAX_STREAMS:
            raise UsageError(f"--streams {item} is more than {MAX_STREAMS} concurrent streams; each one holds its "
                             "own session and buffers")
        out.append(int(item))
    return out


def parse_cuda_graph(text: str) -> list[bool]:
    table = {"off": False, "on": True, "false": False, "true": True, "0": False, "1": True}
    out = []
    for item in _split_list(text, "--cuda-graph"):
        if item.lower() not in table:
            raise UsageError(f"--cuda-graph values are off and on, not {item!r}")
        out.append(table[item.lower()])
    return out


def parse_thresholds(args: tuple[str, ...]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """Split --threshold values into accuracy limits (``fp16.cosine_min=0.9999``) and rule thresholds
    (``jitter.cov_pct=3``, ``launch_overhead.enqueue_over_compute=0.5``)."""
    from profiler.accuracy import parse_threshold_args
    from profiler.backends.base import PRECISIONS
    from profiler.rules import registry

    accuracy_args, rules_out = [], {}
    sweep_rules = {s.id: s for s in registry("sweep")}
    for raw in args:
        key, sep, value = raw.partition("=")
        head, dot, name = key.strip().partition(".")
        if head in PRECISIONS:
            accuracy_args.append(raw)
            continue
        rid = head
        if not sep or not dot or rid not in sweep_rules:
            raise UsageError(f"--threshold {raw!r} is neither PRECISION.METRIC_min/max=X (e.g. fp16.cosine_min=0.999) "
                             f"nor RULE.NAME=X for a sweep rule with thresholds "
                             f"({', '.join(sorted(r for r, spec in sweep_rules.items() if spec.defaults))})")
        if name not in sweep_rules[rid].defaults:
            have = ", ".join(sweep_rules[rid].defaults) or "none"
            raise UsageError(f"--threshold {raw!r}: rule {head!r} has no threshold {name!r} (it has: {have})")
        try:
            rules_out.setdefault(rid, {})[name] = float(value)
        except ValueError:
            raise UsageError(f"--threshold {raw!r}: {value!r} is not a number") from None
    return parse_threshold_args(accuracy_args), rules_out


def _fmt(x: Any, digits: int = 3) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def format_table(summary: dict[str, Any]) -> str:
    """One line per variant: status, median/p99 latency, throughput, accuracy verdict."""
    header = ("variant", "status", "median ms", "p99 ms", "qps", "accuracy")
    rows = []
    for v in summary["variants"]:
        lat = v.get("latency_ms") or {}
        acc = v.get("accuracy") or {}
        flags = [m.get("passed") for m in acc.values()]
        verdict = "-" if not flags else ("ok" if all(flags) else "BREACH")
        status = v["status"]
        if status != "ok" and v.get("error"):
            err = str(v["error"])
            status = f"{status}: {err[:40]}" + ("..." if len(err) > 40 else "")
        rows.append((v["key"], status, _fmt(lat.get("median")), _fmt(lat.get("p99")),
                     _fmt(v.get("throughput_qps"), 1), verdict))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += [f"note: {text}" for text in latency_notes(v.get("backend") for v in summary["variants"])]
    failed = [v for v in summary["variants"] if v["status"] == "failed" and v.get("error")]
    if failed:
        lines.append("")
        lines += [f"{v['key']} failed: {v['error']}" for v in failed]
    return "\n".join(lines)


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

    out = check_output_dir(out_dir, "--out")
    url = None if no_store else resolve_url(db_url(ctx, db))  # the same store the child will write
    argv = (ctx.find_root().obj or {}).get("argv") or sys.argv[1:]
    done = sweep_under_nsys(_sweep_argv(argv), out, store_url=url, cdn=cdn, say=say)
    if url is None:
        say("nsys: --no-store: the capture's per-variant results are in summary.json (report.html is the "
            "sweep's own)")
    click.echo(f"{'variant':<28} {'harness compute ms':>18} {'nsys GPU busy ms':>17} {'nsys rules'}")
    for v in done.summary["variants"]:
        n = v.get("nsys") or {}
        cmp = n.get("compute_vs_gpu_busy") or {}
        click.echo(f"{v['key']:<28} {_fmt(cmp.get('harness_compute_median_ms')):>18} "
                   f"{_fmt(cmp.get('nsys_gpu_busy_median_ms')):>17} {', '.join(n.get('rules') or []) or '-'}")
    click.echo(f"capture: {done.capture}")
    if done.run_id is not None:
        click.echo(f"stored run {done.run_id} (capture attached)")
    raise_gate(gate_failures_from(done.summary))


def resume_command(run_id: Any, db: str | None, out: Path) -> str:
    """A command that continues the run when pasted: the store and the output folder spelled out."""
    import shlex

    from profiler.store import resolve_url

    url = resolve_url(db)
    where = str(Path(url[len("sqlite:///"):]).resolve()) if url.startswith("sqlite:///") else url
    return (f"trtprof sweep --resume {run_id} --db {shlex.quote(where)} "
            f"--out {shlex.quote(str(Path(out).resolve()))}")


def _stored_out_dir(store: Any, sweep: Any) -> str | None:
    """The --out the run was started with: its config, else the folder of its stored summary.json."""
    if sweep.config.out_dir:
        return sweep.config.out_dir
    try:
        run = store.run_dict(sweep.run_id)
    except Exception:  # an old store without artifacts: the default --out then
        return None
    for a in run.get("artifacts") or []:
        if a.get("kind") == "summary" and a.get("path"):
            return str(Path(a["path"]).parent)
    return None


def gate_failures_from(summary: dict[str, Any]) -> list[dict]:
    from profiler.sweep import gate_failures

    return gate_failures(summary.get("findings") or [])


def write_outputs(sweep: Any, summary: dict[str, Any], out_dir: Path, cdn: bool, store: Any) -> list[Path]:
    """summary.json always; report.html when the report package is available."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    path = out_dir / "summary.json"
    write_text(str(path), json.dumps(summary, indent=2, sort_keys=False), "--out")
    written.append(path)
    try:
        from profiler.report import write_sweep_report
    except ImportError:
        write_sweep_report = None
    if write_sweep_report is not None:
        data, layers = sweep.report_data(summary)
        report = Path(write_sweep_report(data, out_dir / "report.html", cdn=cdn, layers=layers))
        written.append(report)
    if store is not None and sweep.run_id is not None:
        for p in written:
            store.add_artifact(sweep.run_id, "report" if p.suffix == ".html" else "summary", p.resolve())
    return written


@click.command(name="sweep")
@click.argument("model", required=False)
@click.option("--precision", "precision", default="fp32,fp16", show_default=True,
              help="Precisions to build, comma-separated: fp32, fp16, int8.")
@click.option("--workspace", default="default", show_default=True,
              help="Workspace sizes, comma-separated (64M,256M,1G; 'default' = the backend's).")
@click.option("--streams", default="1", show_default=True, help="Concurrent streams (contexts), e.g. 1,2,4.")
@click.option("--cuda-graph", "cuda_graph", default="off", show_default=True, help="CUDA graph: off, on or off,on.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DIMS",
              help="Concrete shape of a dynamic input, e.g. x:1x3x224x224 (repeatable).")
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
            no_transfers: bool, no_overlap: bool, repeat: int, cache_dir: str | None, nsys: bool, cdn: bool,
            devices: str | None, scheduler: str | None) -> None:
    """Build and time engine variants of MODEL (default: the bundled tiny model on onnxruntime), compare each
    with FP32 on the same inputs, store the run and write summary.json and report.html."""
    from profiler.sweep import Sweep

    say = lambda msg: click.echo(msg, err=True)  # noqa: E731 - progress goes to stderr
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
        config = _new_config(ctx.params)
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

    if no_store:
        raise UsageError("--resume continues a stored run; it cannot be combined with --no-store")
    store = open_store(ctx, db)
    sweep = open_resume(store, resume, progress=say)
    say(f"resuming run {sweep.run_id}: {len(sweep.variants)} variant(s) already stored "
        "(MODEL and axis options come from the stored run)")
    if ctx.get_parameter_source("out_dir") is click.core.ParameterSource.DEFAULT:
        out_dir = _stored_out_dir(store, sweep) or out_dir
        say(f"writing to the run's own --out {out_dir}")
    return sweep, store, out_dir


def _new_config(p: dict[str, Any]) -> Any:
    """The SweepConfig of a new sweep from the command's options (``ctx.params``)."""
    from profiler.accuracy import parse_output_options
    from profiler.models import parse_shape_args
    from profiler.sweep import SweepConfig

    acc_limits, rule_limits = parse_thresholds(p["thresholds"])
    kinds, tols = parse_output_options(p["output_kinds"], p["output_tolerances"])
    return SweepConfig(
        model=p["model"], precisions=_split_list(p["precision"], "--precision"),
        workspaces=parse_workspaces(p["workspace"]), streams=parse_streams(p["streams"]),
        cuda_graph=parse_cuda_graph(p["cuda_graph"]),
        shapes={k: list(v) for k, v in parse_shape_args(p["shapes"]).items()}, calib=p["calib"],
        calib_method=p["calib_method"], inputs=p["inputs"], iterations=p["iterations"], duration_s=p["duration"],
        warmup_ms=p["warmup"], backend=p["backend"], label=p["label"], thresholds=acc_limits,
        rule_thresholds=rule_limits, layers=not p["no_layers"], cache_dir=p["cache_dir"], localize=p["localize"],
        fp16_range_check=p["fp16_range_check"], transfers=not p["no_transfers"], overlap=not p["no_overlap"],
        out_dir=str(Path(p["out_dir"]).resolve()), repeat=p["repeat"], output_kinds=kinds, output_tolerances=tols)


def _run(ctx: click.Context, sweep: Any, start_runner: Any, db: str | None, no_store: bool, out: Path, cdn: bool,
         store: Any, say: Callable[[str], None]) -> dict[str, Any]:
    """The sweep's summary; on Ctrl-C what was measured is written and the resume command said."""
    previous_handler = signal.getsignal(signal.SIGINT)
    if previous_handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt_once(say))
    try:
        if start_runner is None:
            return sweep.run()
        from profiler.distributed.cli import run_sweep

        return run_sweep(sweep, start_runner, ctx, db, no_store)
    except KeyboardInterrupt:
        if sweep.variants:
            write_outputs(sweep, sweep.summary(), out, cdn, store)
            say(f"partial results written to {out}")
        if sweep.run_id is not None:
            say(f"continue with: {resume_command(sweep.run_id, db_url(ctx, db), out)}")
        raise
    finally:
        if previous_handler is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_handler)


def _conclude(sweep: Any, summary: dict[str, Any], written: list[Path]) -> None:
    """The verdict, the table and where things went; exit 3 when nothing was measured, 1 on the gate."""
    from profiler.report.verdict import sweep_verdict, terminal_lines
    from profiler.sweep import gate_failures

    for line in terminal_lines(sweep_verdict(summary), top=8):
        click.echo(line)
    click.echo("")
    click.echo(format_table(summary))
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
    """GateFailed naming the failed variants and the variants whose outputs breach their thresholds."""
    broken = sorted({f.get("variant") or "?" for f in failed if f.get("rule") == "variant_failed"})
    breached = [f for f in failed if f.get("rule") == "precision_regression"]
    parts = []
    if broken:
        parts.append(f"{len(broken)} variant(s) failed ({', '.join(broken)})")
    if breached:
        parts.append(f"accuracy gate: {len(breached)} output(s) breach their FP32 thresholds "
                     f"({', '.join(sorted({f.get('variant') or '?' for f in breached}))})")
    if parts:
        raise GateFailed("; ".join(parts))
