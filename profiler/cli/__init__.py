"""The `trtprof` command: a thin click layer over the library.

Each subcommand lives in its own module (``profiler/cli/<name>.py``) exposing a click command named
``command``; modules are imported only when their subcommand runs, so ``trtprof --help`` stays fast
and works where optional dependencies are missing.
"""

from __future__ import annotations

import importlib
import sys

import click

from profiler.cli.terminal import guarded, one_line
from profiler.errors import EXIT_BUG, EXIT_INPUT, EXIT_USAGE, TrtprofError

# name -> (module, one-line help shown by --help without importing the module)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("profiler.cli.analyze", "Diagnose an Nsight Systems capture (.sqlite or .nsys-rep)."),
    "sweep": ("profiler.cli.sweep", "Build and time engine variants of an ONNX model, check accuracy."),
    "import": ("profiler.cli.import_", "Import trtexec exports (profile, layer info, times, logs)."),
    "report": ("profiler.cli.report", "Write the HTML report of a stored run."),
    "compare": ("profiler.cli.compare", "Compare a run against a baseline; exit 1 on regression."),
    "runs": ("profiler.cli.runs", "List stored runs."),
    "show": ("profiler.cli.show", "Show one stored run."),
    "history": ("profiler.cli.history", "Runs over time as a site: series, change points, environment changes."),
    "db": ("profiler.cli.db", "Database maintenance (db upgrade)."),
    "cache": ("profiler.cli.cache", "Show the capture caches' entries and sizes, or empty them (cache clear)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        if name not in SUBCOMMANDS:
            return None
        module_name, help_text = SUBCOMMANDS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                @click.command(name=name, help=help_text + " (not available in this build)")
                def _missing() -> None:
                    raise TrtprofError(f"'trtprof {name}' is not available in this build")
                return _missing
            raise
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, help_text) in SUBCOMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_url", envvar="TRTPROF_DB", default=None, metavar="URL",
              help="Run store: a SQLAlchemy URL or a SQLite path (default ./trtprof.db; env TRTPROF_DB).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(package_name="trtprof", message="trtprof %(version)s")
@click.pass_context
def cli(ctx: click.Context, db_url: str | None, debug: bool) -> None:
    """trtprof: profile and diagnose GPU inference built with TensorRT and CUDA."""
    ctx.ensure_object(dict)
    ctx.obj.setdefault("argv", sys.argv[1:])  # the command line, for commands that re-run themselves
    ctx.obj["db_url"] = db_url
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps errors to one sentence on stderr and the documented exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    with guarded():  # data-derived text never drives the terminal (escape sequences shown escaped)
        _main(argv, debug)


def _main(argv: list[str] | None, debug: bool) -> None:
    try:
        args = list(argv) if argv is not None else sys.argv[1:]
        code = cli.main(args=args, prog_name="trtprof", standalone_mode=False, obj={"argv": args})
    except TrtprofError as exc:
        if debug:
            raise
        click.echo(f"trtprof: error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        _exit_interrupted(exc, hard=argv is None)
    except click.ClickException as exc:
        if debug:
            raise
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"trtprof: error: {one_line(exc.format_message())}{hint}", err=True)
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        _exit_interrupted(exc, hard=argv is None)
    except Exception as exc:  # a bug, not bad input: its own exit code, one sentence unless --debug
        if debug:
            raise
        full = _out_of_space(exc)
        if full:  # the machine, not trtprof: what was stored before stays stored
            click.echo(f"trtprof: error: {full}", err=True)
            sys.exit(EXIT_INPUT)
        first = (str(exc).splitlines() or [""])[0][:300]
        click.echo(f"trtprof: internal error (a bug in trtprof, exit {EXIT_BUG}): {type(exc).__name__}: {first}; "
                   "please report it with the output of the same command run as 'trtprof --debug ...'", err=True)
        sys.exit(EXIT_BUG)
    sys.exit(code if isinstance(code, int) else 0)


def _out_of_space(exc: BaseException) -> str | None:
    """One sentence when ``exc`` (or what caused it) is a full disk or a full database, else None."""
    import errno

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" writing {exc.filename}" if exc.filename else ""
            return f"no space left on the device{where}; free some space and run the command again"
        text = str(exc)
        if "database or disk is full" in text or "No space left on device" in text \
                or "could not extend file" in text:
            return ("the run store's disk is full (database or disk is full); free some space and run the command "
                    "again: runs stored before are intact")
        exc = exc.__cause__ or exc.__context__
    return None


def _ignore_further_interrupts(terminate_too: bool = False) -> None:
    """An impatient second Ctrl-C while the first one is being reported must not kill the process
    mid-exit (it would die by SIGINT instead of exiting 130 with its message)."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if terminate_too:  # a process of its own: a SIGTERM on the way out is the same impatience
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread (embedded use): nothing to do
        pass


def _exit_interrupted(exc: BaseException, *, hard: bool) -> None:
    """Exit 130 after Ctrl-C, 143 after SIGTERM in a sweep (everything measured is already stored by then).

    The traceback still references the engines and inference sessions of the interrupted work; left to
    interpreter shutdown, a native runtime can be torn down in the wrong order and abort the process
    (seen with ONNX Runtime sessions of a multi-stream run: "terminate called without an active
    exception"). So they are released now, and a command-line process then exits without running the
    rest of the interpreter's teardown."""
    import gc
    import os

    _ignore_further_interrupts(terminate_too=hard)
    cause = exc.__cause__ or exc.__context__  # click turns the KeyboardInterrupt into Abort
    code = getattr(exc, "exit_code", None) or getattr(cause, "exit_code", None) or 130
    click.echo("trtprof: terminated (SIGTERM)" if code == 143 else "trtprof: interrupted", err=True)
    exc.__traceback__ = None
    exc.__context__ = None
    gc.collect()
    if hard:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

