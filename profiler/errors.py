"""Errors that reach the user as one sentence and an exit code.

Exit codes are part of the public interface: 0 success, 1 a gate failed (regression, threshold),
2 usage error, 3 unreadable or invalid input, 4 an internal error (a bug in trtprof, never the input's
fault: it asks for a report and prints the traceback only with ``--debug``).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_BUG = 4


class TrtprofError(Exception):
    """Base class: ``str(err)`` is the one sentence shown on stderr."""

    exit_code = EXIT_INPUT


class InputError(TrtprofError):
    """The input is unreadable or invalid (corrupt capture, bad model, wrong calibration data)."""

    exit_code = EXIT_INPUT


class UsageError(TrtprofError):
    """The command line asks for something inconsistent (a dynamic input without --shape, ...)."""

    exit_code = EXIT_USAGE


class GateFailed(TrtprofError):
    """A regression or threshold gate failed; the run itself completed."""

    exit_code = EXIT_GATE


class MissingExtra(TrtprofError):
    """An optional dependency is not installed; names the extra that provides it."""

    exit_code = EXIT_INPUT

    def __init__(self, module: str, extra: str, purpose: str = ""):
        self.module, self.extra = module, extra
        what = f" for {purpose}" if purpose else ""
        super().__init__(
            f"'{module}' is needed{what} but is not installed: pip install 'trtprof[{extra}]'"
        )


def require(module: str, extra: str, purpose: str = ""):
    """Import an optional dependency or raise :class:`MissingExtra` naming its extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
        raise MissingExtra(module, extra, purpose) from exc


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``docker stop``, Slurm, Kubernetes) during a sweep: handled as Ctrl-C is (the run
    marked interrupted, its lease released, the partial summary written), then exit 143 (128 + SIGTERM)."""

    exit_code = 143
