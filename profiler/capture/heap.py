"""glibc's heap and column-sized arrays: freed arrays should leave the process, or the peak RSS of an
analysis exceeds its live data by the arrays it has already let go.

By default glibc raises its mmap threshold to the size of each large block freed (up to 32 MB); after
that, column-sized temporaries come from the heap (or a reader thread's arena) and their pages stay with
the process when freed. Measured on CPU here, launch_bound x120 export (256 MB): the analysis peaked at
547 MB with the default and 466-475 MB with a fixed threshold; 4 MB cost no measurable system time,
256 KB cost 0.8 s over the whole analysis. The parallel read's batches and per-partition columns
(about 2.5 MB each with 8 threads) fall under 4 MB and stay in the threads' arenas: with 8 threads the
read of 105 MB of API columns peaked at +273 MB with 4 MB, +167 MB with 256 KB (1 thread: +130 MB).
Every call is a no-op where the C library is not glibc.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

ANALYSIS_MMAP_THRESHOLD_BYTES = 4 << 20
"""From this size up, allocations are mapped and unmapped on their own during the analysis."""
READ_MMAP_THRESHOLD_BYTES = 256 << 10
"""The same during a parallel read (few, large allocations: the system time is negligible there)."""
_M_MMAP_THRESHOLD = -3
_mallopt: Any = None


def _set_threshold(n_bytes: int) -> None:
    global _mallopt
    if _mallopt is None:
        try:
            import ctypes

            _mallopt = ctypes.CDLL("libc.so.6").mallopt
        except (OSError, AttributeError):
            _mallopt = False
    if _mallopt:
        _mallopt(_M_MMAP_THRESHOLD, n_bytes)


_bounded = False


def bound_heap() -> None:
    """Fix the mmap threshold at ``ANALYSIS_MMAP_THRESHOLD_BYTES`` (once per process)."""
    global _bounded
    if not _bounded:
        _bounded = True
        _set_threshold(ANALYSIS_MMAP_THRESHOLD_BYTES)


@contextlib.contextmanager
def read_heap() -> Iterator[None]:
    """Within: ``READ_MMAP_THRESHOLD_BYTES``, so the reader threads' batches and columns are returned
    when freed; after: the analysis threshold."""
    _set_threshold(READ_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        global _bounded
        _bounded = True
        _set_threshold(ANALYSIS_MMAP_THRESHOLD_BYTES)
