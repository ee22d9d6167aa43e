"""A columnar cache of loaded captures: a second analysis of the same export skips SQLite.

``load_trace`` turns an nsys export into a :class:`~profiler.capture.trace.Trace` (frames of kernels,
copies, API calls, NVTX ranges...). That takes seconds on a large export, and an engineer re-runs
``trtprof analyze`` on one capture many times (other options, another ``--unit``, a report after a
JSON). The cache keeps each loaded Trace as Parquet files, one per frame, plus its ``meta`` as JSON.

The key is what makes the answer right, never a guess about the file:

- the SHA-256 of the export's *content* (not its name, size or mtime: a file rewritten in place, or
  another capture copied over it, never gets the old frames), remembered between runs by
  :mod:`profiler.capture.fingerprint`;
- the loader's version: a digest of the source of the modules that build a Trace (so any change to
  the loader invalidates every entry without anyone remembering to bump a number), and of the pandas
  and pyarrow versions that wrote the files;
- the frames and columns asked for.

An entry is written to a temporary folder and renamed into place, so a reader never sees half an
entry and concurrent writers of one key leave one whole copy. A damaged entry is a miss and is
removed, as is one evicted while it was read. The folder shares the size cap of
:mod:`profiler.capture.caches` (least recently used entries evicted after a write; a hit marks its entry
used). ``TRTPROF_TRACE_CACHE=0`` turns the cache off; the folder is ``$TRTPROF_CACHE_DIR/traces``
(default ``~/.cache/trtprof/traces``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from profiler.capture.fingerprint import content_sha256
from profiler.hashing import file_sha256  # noqa: F401 - the full hash, without the memo

FORMAT = 1
_LOADER_MODULES = ("loader.py", "export.py", "validate.py", "trace.py", "nsysrep.py", "columnar.py", "cache.py")


def default_trace_cache_dir() -> Path:
    """:func:`profiler.cache_dir.cache_root` + ``/traces``."""
    from profiler.cache_dir import cache_root

    return cache_root() / "traces"


def cache_enabled() -> bool:
    return os.environ.get("TRTPROF_TRACE_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


_loader_version: str | None = None


def loader_version() -> str:
    """A digest of the loader's source and of the libraries that write and read the entries."""
    global _loader_version
    if _loader_version is None:
        import pandas as pd
        import pyarrow

        h = hashlib.sha256(f"{FORMAT}|{pd.__version__}|{pyarrow.__version__}".encode())
        here = Path(__file__).parent
        for name in _LOADER_MODULES:
            p = here / name
            h.update(name.encode() + (p.read_bytes() if p.is_file() else b"-"))
        _loader_version = h.hexdigest()[:16]
    return _loader_version


def cache_key(content_sha256: str, tables: Iterable[str] | None, columns: dict[str, Iterable[str]] | None) -> str:
    request = {"tables": None if tables is None else sorted(tables),
               "columns": {f: sorted(c) for f, c in sorted((columns or {}).items())}}
    text = json.dumps({"content": content_sha256, "loader": loader_version(), "request": request}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _release_arrow_memory() -> None:
    """Hand the pages Arrow's allocator keeps after a write or read back to the system: otherwise the
    analysis that follows (numpy, another allocator) cannot reuse them and the peak grows by them."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # an old pyarrow without it: only the peak suffers
        pass


def _read_frame(path: Path, compact: bool = False, files: Any = None) -> Any:
    """One frame of an entry; ``files``: a :class:`~profiler.capture.spill.ColumnFiles` its large columns
    go to (integer columns read a row group at a time straight into their file, the others copied there
    once read), as the loader does for a large capture."""
    import pandas as pd
    import pyarrow.parquet as pq

    from profiler.capture.ids import CONSTANT_ID_COLUMNS, compact_constant

    # one column at a time, single-threaded: the decoded pages of one column are the only transient
    # beside the frame (a whole-table read holds every column's pages at once: +30% peak on a large frame)
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    if not names:
        return pd.DataFrame(index=pd.RangeIndex(pf.metadata.num_rows))
    plain = _plain_integer_columns(pf) if files is not None else {}
    cols = {}
    for name in names:
        col = _read_into(files, pf, name, plain[name]) if name in plain else None
        if col is None:
            part = pf.read(columns=[name], use_threads=False, use_pandas_metadata=True)
            col = part.to_pandas(self_destruct=True, use_threads=False)[name]
            del part
        cols[name] = compact_constant(name, _values(col)) if compact and name in CONSTANT_ID_COLUMNS else col
        if compact:
            cols[name] = _no_values(cols[name])
        if files is not None:
            col = cols[name]
            cols[name] = files.keep_column(col.array if isinstance(col, pd.Series) else col)
        del col
        _release_arrow_memory()
    df = pd.DataFrame(cols, copy=False)
    for col in df.columns:  # Parquet keeps no dtype for the categories of an empty categorical
        dtype = df[col].dtype
        if isinstance(dtype, pd.CategoricalDtype) and len(dtype.categories) == 0 and dtype.categories.dtype == object:
            df[col] = df[col].cat.set_categories(pd.Index([], dtype="str"))
    return df


def _no_values(col: Any) -> Any:
    """A column without a value (one the restricted read left out: all NA, or all -1) as the loader gives
    it, a read-only zero-stride column that takes no memory per row; any other column as it is."""
    import numpy as np
    import pandas as pd

    values = col.array if isinstance(col, pd.Series) else col
    n = len(values)
    if isinstance(values, pd.arrays.IntegerArray) and n and values._mask.all():
        return pd.arrays.IntegerArray(np.broadcast_to(np.zeros(1, values._data.dtype), (n,)),
                                      np.broadcast_to(np.True_, (n,)))
    data = values.to_numpy() if isinstance(values, pd.arrays.NumpyExtensionArray) else values
    if isinstance(data, np.ndarray) and data.dtype.kind == "i" and n and data.strides != (0,) and (data == -1).all():
        return np.broadcast_to(np.array(-1, dtype=data.dtype), (n,))
    return col


def _values(col: Any) -> Any:
    return col.to_numpy() if hasattr(col, "to_numpy") else col


def _plain_integer_columns(pf: Any) -> dict[str, str]:
    """Column -> numpy dtype name, for the columns pandas wrote as plain numpy integers (not nullable)."""
    meta = pf.schema_arrow.pandas_metadata or {}
    return {c["name"]: c["numpy_type"] for c in meta.get("columns", [])
            if c.get("pandas_type", "").startswith(("int", "uint")) and c.get("numpy_type", "").startswith(("int", "uint"))}


def _read_into(files: Any, pf: Any, name: str, dtype: str) -> Any:
    """Column ``name`` read a row group at a time into a column file; None when a value is missing (then
    the column is read whole, as pandas types it)."""
    import numpy as np

    out = files.empty(pf.metadata.num_rows, np.dtype(dtype))
    pos = 0
    for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=[name], use_threads=False):
        col = batch.column(0)
        if col.null_count:
            return None
        out[pos:pos + len(col)] = col.to_numpy(zero_copy_only=False)
        pos += len(col)
    return out if pos == len(out) else None


def _column_files(folder: Path) -> Any:
    """A :class:`~profiler.capture.spill.ColumnFiles` for an entry of at least ``spill_rows()`` rows, else None."""
    import pyarrow.parquet as pq

    from profiler.capture import spill
    from profiler.capture.trace import FRAMES

    limit = spill.spill_rows()
    if not spill.supported() or limit <= 0:
        return None
    rows = sum(pq.ParquetFile(folder / f"{name}.parquet").metadata.num_rows for name in FRAMES)
    return spill.ColumnFiles() if rows >= limit else None


READ_BATCH_ROWS = 1 << 20
WRITE_CHUNK_ROWS = 1 << 20
"""Rows converted to Arrow at a time when a frame is stored: a frame of 50 M rows is never held twice."""


def _write_frame(df: Any, path: Path) -> None:
    """``df`` as one Parquet file (zstd, no index), converted and written ``WRITE_CHUNK_ROWS`` rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(df) <= WRITE_CHUNK_ROWS:
        df.to_parquet(path, index=False, compression="zstd")
        return
    first = pa.Table.from_pandas(df.iloc[:WRITE_CHUNK_ROWS], preserve_index=False)
    with pq.ParquetWriter(path, first.schema, compression="zstd") as writer:
        writer.write_table(first)
        del first
        for lo in range(WRITE_CHUNK_ROWS, len(df), WRITE_CHUNK_ROWS):
            writer.write_table(pa.Table.from_pandas(df.iloc[lo:lo + WRITE_CHUNK_ROWS], schema=writer.schema,
                                                    preserve_index=False))
            _release_arrow_memory()


class TraceCache:
    """A folder of loaded Traces, one sub-folder per key (``meta.json`` + ``<frame>.parquet``)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_trace_cache_dir()

    def entry(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str, source_path: str | os.PathLike, *, compact: bool = False) -> Any | None:
        """The cached Trace for ``key`` (its ``source_path`` set to this file), else None; ``compact``:
        constant id columns as read-only zero-stride views, as a restricted read gives them."""
        from profiler.capture.trace import FRAMES, Trace

        from profiler.capture.caches import discard, touch

        folder = self.entry(key)
        meta_file = folder / "meta.json"
        if not meta_file.is_file():
            return None
        try:  # every frame was written: one missing means a damaged entry, or one evicted while we read
            meta = json.loads(meta_file.read_text())
            files = _column_files(folder)
            frames = {name: _read_frame(folder / f"{name}.parquet", compact, files) for name in FRAMES}
        except Exception:  # damaged (disk full while another tool wrote, a user's edit) or evicted: a miss
            discard(folder)
            return None
        touch(folder)  # recency for the size cap's least-recently-used eviction
        meta["source_path"] = str(source_path)
        return Trace(meta=meta, column_files=files, **frames)  # the stored meta is complete: nothing is recomputed

    def put(self, key: str, trace: Any) -> bool:
        """Store ``trace`` under ``key``; False (and nothing left behind) when it cannot be written."""
        from profiler.capture.trace import FRAMES
        from profiler.files import write_folder_atomically

        def fill(tmp: Path) -> None:
            for name in FRAMES:
                _write_frame(getattr(trace, name), tmp / f"{name}.parquet")
                _release_arrow_memory()
            (tmp / "meta.json").write_text(json.dumps(trace.meta, default=str))

        return write_folder_atomically(self.entry(key), "meta.json", fill)


def load_trace_cached(path: str | os.PathLike, *, tables: Iterable[str] | None = None,
                      columns: dict[str, Iterable[str]] | None = None,
                      cache: TraceCache | None | bool = None, sha256: str | None = None,
                      write: bool = True, trim: bool = True) -> Any:
    """:func:`~profiler.capture.loader.load_trace` through the columnar cache.

    ``cache``: a :class:`TraceCache`, None for the default one (unless ``TRTPROF_TRACE_CACHE=0``), or
    False for none. ``sha256``: the file's content hash when the caller has it
    (:func:`~profiler.capture.fingerprint.content_sha256`). ``write``: store the frames on a miss.
    ``trim``: then evict least recently used entries down to the cap (:mod:`profiler.capture.caches`;
    False when the caller trims after writing more). ``trace.meta['cache']`` says ``"hit"``, ``"stored"``
    or ``"off"``.
    """
    from profiler.capture import caches
    from profiler.capture.columnar import check_folder, columnar_kind
    from profiler.capture.loader import check_sqlite_file, load_trace

    p = Path(path)
    if cache is False or (cache is None and not cache_enabled()) or not (p.is_file() or columnar_kind(p)):
        trace = load_trace(p, tables=tables, columns=columns)
        trace.meta["cache"] = "off"
        return trace
    if p.suffix not in (".nsys-rep", ".qdrep") and p.is_file():
        check_sqlite_file(p)  # a missing or non-SQLite file is reported as the loader reports it
    elif p.is_dir():
        check_folder(p)  # a table file that is a device or too large, before the content hash reads it
    cap = caches.cap_bytes()  # a bad TRTPROF_CACHE_MAX_GB fails before the work, not after it
    store = cache if isinstance(cache, TraceCache) else TraceCache()
    key = cache_key(sha256 or content_sha256(p), tables, columns)
    trace = store.get(key, p, compact=bool(columns))  # as the loader gives a restricted read
    if trace is not None:
        trace.meta["cache"] = "hit"
        return trace
    trace = load_trace(p, tables=tables, columns=columns)
    trace.meta["cache"] = "stored" if write and store.put(key, trace) else "off"
    if trace.meta["cache"] == "stored" and trim:
        caches.trim([store.entry(key)], cap)
    return trace
