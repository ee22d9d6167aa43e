"""Nsight Systems captures -> :class:`Trace` (pandas frames of kernels, copies, graphs, API calls,
synchronisation, NVTX ranges and OS runtime calls), plus the interval arithmetic analyses use.

    from profiler.capture import load_trace
    trace = load_trace("capture.sqlite")      # or a .nsys-rep when nsys is on PATH
    trace.kernels.groupby("name", observed=True)["end_ns"].count()

The names below are imported on first use, so that a module of this package that needs no pandas
(the analysis cache's lookup, the options) does not pay for it.
"""

from typing import Any


def load_trace(path, *, tables=None, columns=None) -> Any:
    """Load an nsys export into a :class:`Trace` (see :func:`profiler.capture.loader.load_trace`)."""
    from profiler.capture.loader import load_trace as _load

    return _load(path, tables=tables, columns=columns)


def __getattr__(name: str) -> Any:
    if name in ("FRAMES", "SCHEMAS", "Trace", "empty_frame"):
        from profiler.capture import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'profiler.capture' has no attribute {name!r}")


__all__ = ["FRAMES", "SCHEMAS", "Trace", "empty_frame", "load_trace"]
