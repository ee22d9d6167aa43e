"""Column files: a capture too large for memory keeps its columns in files mapped into the process.

An export of 100 M events holds about 2.5 GB of columns once loaded (times, ids, name codes). Held in
the process' own memory, that alone passes a 2 GB budget before the analysis has made anything. Above
``TRTPROF_SPILL_ROWS`` event rows (kernels, API calls, copies, NVTX, OS runtime calls; default
:data:`DEFAULT_SPILL_ROWS`) the loader writes its large columns into files instead: each column is
a file in the cache's ``tmp`` folder, mapped shared into the process, unlinked at once (nothing is
left behind, whatever happens to the process) and unmapped when the last array using it goes.

The arrays are ordinary numpy arrays over those mappings, so every stage of the analysis reads them as
before and the results are the same bit for bit. Their pages live in the kernel's page cache: the kernel
may write them to the file and reclaim them under memory pressure, which anonymous memory (there is no
swap on most servers) cannot do. So that the process' resident set says so too, a watchdog thread drops
the mapped pages from the process (``madvise(MADV_DONTNEED)``; the data stays in the page cache and in
the file, and the next access maps it again) whenever more than :data:`RESIDENT_BUDGET_BYTES` of them
are resident. What stays resident is the analysis' own memory plus that budget, plus what one step maps
between two looks of the watchdog: a read fault maps up to 16 neighbouring cached pages (the kernel's
fault-around), so 24 k scattered reads map a whole 400 MB column in a few milliseconds (seen on the H200 at
the end of the analysis: +0.79 GB for an instant).

The analysis' own large arrays that it keeps (the device gaps) go to the same files while it analyses such
a capture (:func:`using`, :func:`empty`); its temporaries stay in memory.

Only on Linux (``madvise`` and ``/proc/self/statm``); elsewhere, and when the folder cannot hold a
column (:func:`os.posix_fallocate` reserves the blocks first, so a full disk never faults a write),
arrays are ordinary memory. ``TRTPROF_SPILL_ROWS=0`` turns the files off.
"""

from __future__ import annotations

import contextlib
import contextvars
import mmap
import os
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Iterator

import numpy as np

DEFAULT_SPILL_ROWS = 25_000_000
"""Event rows from which a capture's columns go to files (a 1.3 GB export; in memory it would peak near
1.2 GB)."""
MIN_SPILL_BYTES = 8 << 20
"""Arrays smaller than this stay in memory: a file per small array would cost more than it saves."""
RESIDENT_BUDGET_BYTES = 192 << 20
"""Mapped column pages the process may hold before the watchdog drops them."""
WATCH_INTERVAL_S = 0.01


def spill_rows() -> int:
    """``TRTPROF_SPILL_ROWS`` (0: never), else :data:`DEFAULT_SPILL_ROWS`."""
    env = os.environ.get("TRTPROF_SPILL_ROWS", "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            pass
    return DEFAULT_SPILL_ROWS


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(mmap, "MADV_DONTNEED")


class ColumnFiles:
    """Allocates arrays in mapped files under ``folder``; every allocation is tracked for the watchdog."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder if folder is not None else _default_folder()
        self.bytes = 0  # allocated in files, in all
        self.fallbacks = 0  # arrays that stayed in memory because the folder could not hold them
        # a file in memory (tmpfs) costs the same memory, only out of the resident set's sight: none there
        self.in_memory_fs = _filesystem(self.folder) in MEMORY_FILESYSTEMS

    def empty(self, n: int, dtype) -> np.ndarray:
        """An uninitialised array of ``n`` items in a column file (in memory when small or on failure)."""
        dtype = np.dtype(dtype)
        nbytes = int(n) * dtype.itemsize
        if nbytes < max(MIN_SPILL_BYTES, 1) or self.in_memory_fs:
            return np.empty(n, dtype)
        try:
            mm = _mapped_file(self.folder, nbytes)
        except (OSError, ValueError):
            self.fallbacks += 1
            return np.empty(n, dtype)
        self.bytes += nbytes
        _WATCHDOG.track(mm)
        return np.frombuffer(mm, dtype=dtype, count=n)

    def keep(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` copied into a column file when it is a large array in memory, else ``arr`` itself."""
        if (not isinstance(arr, np.ndarray) or arr.ndim != 1 or arr.nbytes < MIN_SPILL_BYTES
                or arr.strides != (arr.itemsize,) or is_mapped(arr)):
            return arr
        out = self.empty(len(arr), arr.dtype)
        out[:] = arr
        return out


    def keep_column(self, values):
        """A frame column (an array, a categorical, a nullable or numpy-backed pandas array) with its
        large arrays in column files; anything else as it is."""
        import pandas as pd

        if isinstance(values, pd.Categorical):
            codes = values.codes
            kept = self.keep(codes)
            return values if kept is codes else pd.Categorical.from_codes(kept, dtype=values.dtype)
        if isinstance(values, pd.arrays.IntegerArray):
            return pd.arrays.IntegerArray(self.keep(values._data), self.keep(values._mask))
        if isinstance(values, pd.arrays.NumpyExtensionArray) and values.dtype.numpy_dtype.kind in "iub":
            return self.keep(values.to_numpy())
        return self.keep(values)


_current: contextvars.ContextVar[ColumnFiles | None] = contextvars.ContextVar("trtprof_column_files", default=None)


@contextlib.contextmanager
def using(files: ColumnFiles | None) -> Iterator[None]:
    """Within: :func:`empty` puts large arrays in ``files`` (None: in memory)."""
    token = _current.set(files)
    try:
        yield
    finally:
        _current.reset(token)


def empty(n: int, dtype) -> np.ndarray:
    """``numpy.empty``, in a column file while the capture being analysed keeps its columns in files."""
    files = _current.get()
    return np.empty(n, dtype) if files is None else files.empty(n, dtype)


def cut(arr: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` items of an array nothing else views: shrunk in place when it owns its memory,
    else a view (a column file's length is fixed)."""
    if arr.flags.owndata:
        arr.resize(n, refcheck=False)
        return arr
    return arr[:n]


def is_mapped(arr: np.ndarray) -> bool:
    """Whether ``arr`` lies in a column file."""
    base = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)


MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})


def _filesystem(folder: Path) -> str | None:
    """The type of the file system ``folder`` (or its nearest existing parent) is on, from /proc/self/mounts."""
    try:
        path = folder.resolve()
        with open("/proc/self/mounts") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return None
    best, kind = -1, None
    for fields in mounts:
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (path == Path(point) or Path(point) in path.parents) and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def _default_folder() -> Path:
    from profiler.cache_dir import cache_root

    return cache_root() / "tmp"


def _mapped_file(folder: Path, nbytes: int) -> mmap.mmap:
    """A shared writable mapping of a new, unlinked file of ``nbytes`` (blocks reserved)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="column.", dir=folder)
    try:
        os.unlink(name)
        os.posix_fallocate(fd, 0, nbytes)
        return mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


class _Watchdog:
    """Drops the column files' pages from the process when more than the budget of them is resident."""

    def __init__(self) -> None:
        self.maps: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.budget_pages = RESIDENT_BUDGET_BYTES // mmap.PAGESIZE
        self.baseline_pages = 0  # file-backed pages resident before the first column file (libraries)
        self.releases = 0

    def track(self, mm: mmap.mmap) -> None:
        with self.lock:
            self.maps.add(mm)
            if self.thread is None:
                self.baseline_pages = _file_pages()
                self.thread = threading.Thread(target=self._run, name="trtprof-column-files", daemon=True)
                self.thread.start()

    def release(self) -> None:
        """Drop every column file's resident pages from the process (they stay in the page cache)."""
        with self.lock:
            maps = list(self.maps)
        for mm in maps:
            try:
                mm.madvise(mmap.MADV_DONTNEED)
            except (ValueError, OSError):  # closed meanwhile
                pass
        self.releases += 1

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            if not len(self.maps):
                continue
            if _file_pages() - self.baseline_pages > self.budget_pages:
                self.release()


def _file_pages() -> int:
    """Resident file-backed and shared pages of this process (``/proc/self/statm``'s third field)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[2])
    except (OSError, IndexError, ValueError):
        return 0


_WATCHDOG = _Watchdog()


def release() -> None:
    """Drop the column files' resident pages now (between stages; the watchdog does it when needed)."""
    if len(_WATCHDOG.maps):
        _WATCHDOG.release()
