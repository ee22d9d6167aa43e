"""nsys exports as folders of Parquet or Arrow files (``nsys export --type parquetdir`` / ``arrowdir``).

Each file is one table of the SQLite export, with the same name, columns and rows in the same order
(``StringIds.parquet``, ``CUPTI_ACTIVITY_KIND_KERNEL.arrow``, ...; the Arrow files are IPC streams).
They are read by copying the tables the loader reads (:data:`profiler.capture.loader.TABLES`) into a
temporary SQLite file, batch by batch through ADBC's bulk ingest, then loading that file like any export:
the frames and the analysis are those of the SQLite export of the same capture by construction (tested
byte for byte on a real export of each kind). Unsigned 64-bit columns are stored as SQLite stores them
(two's complement: nsys's ``globalPid`` of a diagnostic event can exceed 2^63).

The copy costs the time to write the tables once; the trace and analysis caches (keyed by the folder's
content) make it a first-run cost. A reader of the columns themselves, without the copy, is the next step.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterator

from profiler.errors import InputError

SUFFIXES = {".parquet": "parquetdir", ".arrow": "arrowdir"}


def columnar_kind(path: str | os.PathLike) -> str | None:
    """``"parquetdir"`` or ``"arrowdir"`` when ``path`` is a folder of one export's tables, else None."""
    p = Path(path)
    if not p.is_dir():
        return None
    for suffix, kind in SUFFIXES.items():
        if (p / f"StringIds{suffix}").is_file() or (p / f"META_DATA_EXPORT{suffix}").is_file():
            return kind
    return None


def table_files(folder: Path) -> dict[str, Path]:
    """Table name -> file, for the export's files of its one kind."""
    kind = columnar_kind(folder)
    suffix = next(s for s, k in SUFFIXES.items() if k == kind)
    return {f.name[: -len(suffix)]: f for f in sorted(folder.iterdir()) if f.name.endswith(suffix) and f.is_file()}


def _batches(path: Path) -> tuple[object, Iterator]:
    """(Arrow schema, record batches) of one table file, read a batch at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pf = pq.ParquetFile(path)
        return pf.schema_arrow, pf.iter_batches(batch_size=65536)
    reader = pa.ipc.open_stream(pa.OSFile(str(path), "rb"))
    return reader.schema, iter(reader)


def _as_sqlite(schema, batch):
    """Unsigned 64-bit columns as signed ones, bit for bit (what SQLite's INTEGER holds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not any(pa.types.is_uint64(f.type) for f in schema):
        return batch
    cols = [pc.cast(c, pa.int64(), safe=False) if pa.types.is_uint64(c.type) else c for c in batch.columns]
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def to_sqlite(folder: str | os.PathLike, dst: Path, tables: tuple[str, ...]) -> None:
    """Copy ``tables`` (those the folder has) of a Parquet/Arrow export into a new SQLite file ``dst``."""
    import adbc_driver_sqlite.dbapi as dbapi
    import pyarrow as pa

    folder = Path(folder)
    files = table_files(folder)
    con = dbapi.connect(str(dst))
    try:
        with con.cursor() as cur:
            for name in tables:
                if name not in files:
                    continue
                try:
                    schema, batches = _batches(files[name])
                    target = pa.schema([pa.field(f.name, pa.int64()) if pa.types.is_uint64(f.type) else f
                                        for f in schema])
                    reader = pa.RecordBatchReader.from_batches(target, (_as_sqlite(schema, b) for b in batches))
                    cur.adbc_ingest(name, reader, mode="create")
                except (OSError, pa.ArrowException) as exc:
                    first = (str(exc).splitlines() or [type(exc).__name__])[0]
                    raise InputError(f"{files[name]} cannot be read ({first}): export the capture again") from None
        con.commit()
    finally:
        con.close()


class AsSqlite:
    """``with AsSqlite(folder, tables) as path:`` a temporary SQLite copy of the export's tables, removed after."""

    def __init__(self, folder: str | os.PathLike, tables: tuple[str, ...]):
        self.folder, self.tables = Path(folder), tables
        self._tmp: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Path:
        from profiler.cache_dir import cache_root

        root = cache_root() / "tmp"  # on the cache's disk: the copy can be as large as a SQLite export
        try:
            root.mkdir(parents=True, exist_ok=True)
            self._tmp = tempfile.TemporaryDirectory(prefix="columnar.", dir=root)
        except OSError:
            self._tmp = tempfile.TemporaryDirectory(prefix="trtprof-columnar.")
        dst = Path(self._tmp.name) / "export.sqlite"
        try:
            to_sqlite(self.folder, dst, self.tables)
        except BaseException:
            self._tmp.cleanup()
            raise
        return dst

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
