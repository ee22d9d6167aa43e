"""glibc's heap and column-sized arrays: freed arrays should leave the process, or the peak RSS of an
analysis exceeds its live data by the arrays it has already let go.

By default glibc raises its mmap threshold to the size of each large block freed (up to 32 MB); after
that, column-sized temporaries come from the heap (or a reader thread's arena) and their pages stay with
the process when freed. A fixed threshold returns them, at the price of page faults on every fresh
mapping. Measured on CPU here, `trtprof analyze` of the launch_bound x120 export (256 MB), 2 runs each:

| threshold | peak RSS MB | user s | system s |
| --- | --- | --- | --- |
| glibc's default | 498-501 | 8.3-8.8 | 0.95-1.12 |
| 4 MB | 446-447 | 8.3-8.8 | 1.92-2.06 |
| 8 MB | 446-447 | 8.8 | 1.59-1.60 |
| **16 MB** (the analysis') | 459 | 8.5-8.8 | 1.16-1.19 |
| 32 MB | 471-473 | 8.8-9.1 | 1.17-1.64 |

The parallel read's batches and per-partition columns (about 2.5 MB each with 8 threads) would stay in
the threads' arenas: with 8 threads the read of 105 MB of API columns peaked at +273 MB over its start
with 4 MB, +167 MB with 256 KB (1 thread: +130 MB), so the read runs under 256 KB (few, large
allocations: no measurable system time there).
The command line sets them (:func:`bound_heap`); a library user's process is left as it is.
Every call is a no-op where the C library is not glibc.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

ANALYSIS_MMAP_THRESHOLD_BYTES = 16 << 20
"""From this size up, allocations are mapped and unmapped on their own during the analysis."""
READ_MMAP_THRESHOLD_BYTES = 256 << 10
"""The same during a parallel read (few, large allocations: the system time is negligible there)."""
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc(name: str) -> Any:
    """The C library's function ``name``, or None where it is not glibc."""
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def _set_threshold(n_bytes: int) -> None:
    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, n_bytes)


def release_memory() -> None:
    """Hand freed heap memory back to the OS now (``malloc_trim``): the loader calls it between frames and
    the analysis after the steady-state cut, the device gaps and the rules, which also helps a process
    whose mmap threshold glibc still adjusts itself. On the H200, `trtprof analyze` of the 10x export
    (103 M rows) peaked at 4.03 GB with a trim after each of eight stages (those three among them) against
    4.28 GB without, 50-53 s either way; with these three and the session's other changes it peaked at
    4.13 GB."""
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)


_bounded = False


def bound_heap() -> None:
    """Fix the mmap threshold at ``ANALYSIS_MMAP_THRESHOLD_BYTES`` for this process, for good (glibc
    cannot go back to its own adjustment). The command line calls it: a program that imports trtprof
    as a library keeps its allocator as it was, unless it calls this itself."""
    global _bounded
    if not _bounded:
        _bounded = True
        _set_threshold(ANALYSIS_MMAP_THRESHOLD_BYTES)


@contextlib.contextmanager
def read_heap() -> Iterator[None]:
    """Within: ``READ_MMAP_THRESHOLD_BYTES``, so the reader threads' batches and columns are returned
    when freed; after: the analysis threshold. Only in a process that called :func:`bound_heap`; two
    reads at once may end one under the other's threshold, which costs memory, never a result."""
    if not _bounded:
        yield
        return
    _set_threshold(READ_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        _set_threshold(ANALYSIS_MMAP_THRESHOLD_BYTES)
