"""Nsight Systems captures -> :class:`Trace` (pandas frames of kernels, copies, graphs, API calls,
synchronisation, NVTX ranges and OS runtime calls), plus the interval arithmetic analyses use.

    from profiler.capture import load_trace
    trace = load_trace("capture.sqlite")      # or a .nsys-rep when nsys is on PATH
    trace.kernels.groupby("name", observed=True)["end_ns"].count()
"""

from profiler.capture.trace import FRAMES, SCHEMAS, Trace, empty_frame


def load_trace(path, *, tables=None, columns=None) -> Trace:
    """Load an nsys export into a :class:`Trace` (see :func:`profiler.capture.loader.load_trace`)."""
    from profiler.capture.loader import load_trace as _load

    return _load(path, tables=tables, columns=columns)


__all__ = ["FRAMES", "SCHEMAS", "Trace", "empty_frame", "load_trace"]
