"""nsys exports as folders of Parquet or Arrow files (``nsys export --type parquetdir`` / ``arrowdir``).

Each file is one table of the SQLite export, with the same name, columns and rows in the same order
(``StringIds.parquet``, ``CUPTI_ACTIVITY_KIND_KERNEL.arrow``, ...; the Arrow files are IPC streams).
They are read by copying the tables the loader reads (:data:`profiler.capture.loader.TABLES`) into a
temporary SQLite file, batch by batch through ADBC's bulk ingest, then loading that file like any export:
the frames and the analysis are those of the SQLite export of the same capture by construction (tested
byte for byte on a real export of each kind). Unsigned 64-bit columns are stored as SQLite stores them
(two's complement: nsys's ``globalPid`` of a diagnostic event can exceed 2^63).

Every file is checked before its rows are read (:func:`check_folder`, :class:`TableFile`): a regular file
(a symlink is followed; a device or FIFO is refused) of at most ``MAX_FILE_BYTES``; its schema (a Parquet
footer or the Arrow stream's first message) of at most ``MAX_COLUMNS`` columns with distinct names, of the
types nsys writes (integers, floats, booleans, text, binary); a Parquet file's row count and decoded size from
its footer. Then each batch, before it is written: rows and decoded bytes so far (text columns are read
dictionary-encoded, so a repeated long value is measured before it is expanded), text values of at most
``MAX_TEXT_BYTES``, and no unsigned time or size past 2^63 - 1 (:data:`UNSIGNED_QUANTITIES`). A column of
another type, or with an over-long name, is left out with a warning (the loader then reads it as absent,
as for an older nsys) unless the analysis requires it; a table without columns is read as absent. Any other
problem is one sentence naming the file and column (exit 3). An Arrow stream says its rows only batch by
batch, so its limits are checked as each batch is read: a compressed batch is decoded before it is measured
(its compression bounds that at about a hundred times its bytes).

The copy costs the time to write the tables once; the trace and analysis caches (keyed by the folder's
content) make it a first-run cost. A reader of the columns themselves, without the copy, is the next step.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from profiler.capture import validate
from profiler.errors import InputError

SUFFIXES = {".parquet": "parquetdir", ".arrow": "arrowdir"}
BATCH_ROWS = 65536

#: Unsigned columns that hold a time or a size, so a value past 2^63 - 1 has no int64 (SQLite INTEGER) value
#: and is damage: refused, naming the column. Other unsigned columns hold ids kept as bit patterns, as nsys's
#: own SQLite export stores them (a diagnostic event's ``globalPid`` exceeds 2^63 in real exports).
UNSIGNED_QUANTITIES = frozenset({"start", "end", "timestamp", "duration", "startTime", "stopTime", "utcEpochNs",
                                 "bytes", "totalMemory", "memoryBandwidth", "l2CacheSize", "clockRate"})
#: How many times its file's size a table may take once decoded. Real tables decode to at most about ten
#: times (distinct timestamps compress little; the sample export's largest ratio is under 10, see
#: tests/test_columnar_limits.py); a table decoding to more, past ``EXPANSION_FLOOR_BYTES``, is a
#: decompression bomb (a constant column of a billion rows fits in kilobytes) and is refused before it is read.
MAX_EXPANSION = 256
#: Tables that decode to less than this (64 MiB) are never refused for their ratio (small tables of constants).
EXPANSION_FLOOR_BYTES = 1 << 26


def columnar_kind(path: str | os.PathLike) -> str | None:
    """``"parquetdir"`` or ``"arrowdir"`` when ``path`` is a folder of one export's tables, else None."""
    p = Path(path)
    if not p.is_dir():
        return None
    for suffix, kind in SUFFIXES.items():
        if any(os.path.lexists(p / f"{name}{suffix}") for name in ("StringIds", "META_DATA_EXPORT")):
            return kind
    return None


def table_files(folder: Path) -> dict[str, Path]:
    """Table name -> file, for every entry of the export's one kind (whatever its file type)."""
    kind = columnar_kind(folder)
    suffix = next(s for s, k in SUFFIXES.items() if k == kind)
    return {f.name[: -len(suffix)]: f for f in sorted(folder.iterdir()) if f.name.endswith(suffix)}


def _file_kind(mode: int) -> str | None:
    """What a non-regular file is, None for a regular one."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_file(path: Path) -> int:
    """The size of a table file: InputError unless it is a regular file (through its symlinks) of at most
    ``MAX_FILE_BYTES``."""
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror or exc}): export the capture again") from None
    kind = _file_kind(st.st_mode)
    if kind is not None:
        raise InputError(f"{path} is {kind}, not a table file (nsys writes each table as a regular file): "
                         "export the capture again")
    if st.st_size > validate.MAX_FILE_BYTES:
        raise InputError(f"{path} is {st.st_size:,} bytes, more than the {validate.MAX_FILE_BYTES:,} this version "
                         "reads in one table file")
    return st.st_size


def check_folder(folder: str | os.PathLike, tables: tuple[str, ...] | None = None
                 ) -> tuple[dict[str, Path], list[str]]:
    """The files of ``tables`` (default: every table the loader reads) that the folder has, each checked
    (:func:`check_file`), and warnings: a file of another table that is not a regular file is left out (the
    analysis does not read it). Every table file's size is checked, since the caches read each one to key the
    folder by its content (they call this first)."""
    if tables is None:
        from profiler.capture.nsys_names import TABLES as tables
    files, warnings = {}, []
    for name, path in table_files(Path(folder)).items():
        if name in tables:
            check_file(path)
            files[name] = path
            continue
        try:
            st = path.stat()
        except OSError:
            st = None
        if st is None or _file_kind(st.st_mode) is not None:
            warnings.append(f"{path.name} is not a regular file; it was ignored (the analysis does not read "
                            f"{name}).")
        elif st.st_size > validate.MAX_FILE_BYTES:
            check_file(path)
    return files, warnings


def _shown(name: str) -> str:
    """A column name for a message: quoted and escaped, long ones cut."""
    return repr(name if len(name) <= 60 else name[:60] + "...")


def _supported(t) -> bool:
    """Whether nsys writes columns of Arrow type ``t`` (a dictionary of them too)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _supported(t.value_type)
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or _is_text(t))


def _is_text(t) -> bool:
    import pyarrow as pa

    return any(f(t) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                              pa.types.is_large_binary, pa.types.is_string_view, pa.types.is_binary_view))


class TableFile:
    """One table file opened for the copy: its schema and (Parquet) footer checked when opened, its batches
    checked as they are read (:meth:`batches`, which keeps the first problem in ``error``: the bulk ingest
    that pulls them wraps an exception raised there). ``warnings``: the columns left out."""

    def __init__(self, table: str, path: Path):
        self.table, self.path = table, path
        self.size = check_file(path)
        self.warnings: list[str] = []
        self.error: InputError | None = None
        self.rows = self.decoded = 0
        self._open()

    def where(self, column: str | None = None) -> str:
        return f"{self.path}: table {self.table}" + (f", column {_shown(column)}," if column is not None else "")

    def _open(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.path.suffix == ".parquet":
            pf = pq.ParquetFile(self.path)
            schema = pf.schema_arrow
            self.keep = self._check_schema(schema)
            self.schema_names = [schema.field(i).name for i in self.keep]
            if self.keep:
                self._check_footer(pf.metadata)
                text = [schema.field(i).name for i in self.keep if _is_text(schema.field(i).type)]
                pf = pq.ParquetFile(self.path, read_dictionary=text)  # a repeated value is read once
                self._source = pf.iter_batches(batch_size=BATCH_ROWS, columns=self.schema_names)
        else:
            reader = pa.ipc.open_stream(pa.OSFile(str(self.path), "rb"))
            schema = reader.schema
            self.keep = self._check_schema(schema)
            self.schema_names = [schema.field(i).name for i in self.keep]
            self._source = (b.select(self.keep) for b in reader)
        self.schema = pa.schema([_target(schema.field(i)) for i in self.keep])

    def _check_schema(self, schema) -> list[int]:
        """The indices of the columns to copy; InputError for a schema no export has."""
        if len(schema) > validate.MAX_COLUMNS:
            raise InputError(f"{self.where()} has {len(schema):,} columns, more than the {validate.MAX_COLUMNS:,} "
                             "this version reads")
        seen: dict[str, str] = {}
        for name in schema.names:
            other = seen.get(name.lower())
            seen.setdefault(name.lower(), name)
            if other is not None:
                named = (f"named {_shown(name)}" if other == name else
                         f"named {_shown(other)} and {_shown(name)} (to SQLite, the same name)")
                raise InputError(f"{self.where()} has two columns {named}, so which one to read is unknown: export "
                                 "the capture again")
        required = validate.REQUIRED.get(self.table, ())
        keep = []
        for i, field in enumerate(schema):
            if len(field.name) > validate.MAX_NAME_CHARS:
                why = f"a name of {len(field.name):,} characters (at most {validate.MAX_NAME_CHARS})"
            elif not _supported(field.type):
                why = f"type {_shown(str(field.type))}, which no nsys export writes"
            else:
                keep.append(i)
                continue
            if field.name in required:
                raise InputError(f"{self.where(field.name)} has {why}; the analysis needs that column: export the "
                                 "capture again")
            self.warnings.append(f"{self.path.name}: column {_shown(field.name)} of {self.table} has {why}; "
                                 "it was left out.")
        if not len(schema):
            self.warnings.append(f"{self.path.name} has no columns; table {self.table} was read as absent.")
        return keep

    def _check_footer(self, meta) -> None:
        """Rows and decoded size from the Parquet footer, before any page is read: fixed-width columns by
        their width, text by its pages' uncompressed size (a repeated value is measured again per batch)."""
        self._check_rows(meta.num_rows)
        kept = set(self.schema_names)
        size = 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if col.path_in_schema in kept:
                    width = _WIDTHS.get(col.physical_type, 0) or meta.schema.column(c).length or 0
                    size += rg.num_rows * width if width else col.total_uncompressed_size
        self._check_decoded(size, "once decoded (by its footer)")

    def _check_rows(self, rows: int) -> None:
        if rows > validate.MAX_TABLE_ROWS:
            raise InputError(f"{self.where()} has {rows:,} rows, more than the {validate.MAX_TABLE_ROWS:,} this "
                             "version reads in one table")

    def _check_decoded(self, size: int, how: str) -> None:
        if size > validate.MAX_TABLE_BYTES:
            raise InputError(f"{self.where()} takes {size:,} bytes {how}, more than the "
                             f"{validate.MAX_TABLE_BYTES:,} this version reads in one table")
        if size > EXPANSION_FLOOR_BYTES and size > MAX_EXPANSION * self.size:
            raise InputError(f"{self.where()} takes {size:,} bytes {how}, more than {MAX_EXPANSION} times its "
                             f"{self.size:,}-byte file: a decompression bomb, not an nsys export")

    def batches(self) -> Iterator:
        """The table's batches as SQLite takes them, each checked first; the first problem is kept in
        ``error`` and raised."""
        import pyarrow as pa

        try:
            for batch in self._source:
                yield self._checked(batch)
        except InputError as exc:
            self.error = exc
            raise
        except (OSError, pa.ArrowException) as exc:
            self.error = _unreadable(self.path, exc)
            raise self.error from None

    def _checked(self, batch):
        """One batch: rows and decoded bytes so far, text lengths, unsigned quantities; then its dictionary
        columns decoded and unsigned 64-bit ones cast bit for bit to int64 (what SQLite's INTEGER holds)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        self._check_rows(self.rows)
        cols = []
        for name, col in zip(batch.schema.names, batch.columns):
            if pa.types.is_dictionary(col.type):
                lengths = _lengths(col.dictionary)
                self._check_text(name, lengths)
                self.decoded += int(pc.sum(pc.take(lengths, col.indices)).as_py() or 0) + 8 * len(col)
                self._check_decoded(self.decoded, "once decoded")
                col = col.dictionary_decode()
            else:
                if _is_text(col.type):
                    self._check_text(name, _lengths(col))
                self.decoded += col.nbytes
            if pa.types.is_uint64(col.type):
                if name in UNSIGNED_QUANTITIES:
                    self._check_unsigned(name, col)
                col = pc.cast(col, pa.int64(), safe=False)
            cols.append(col)
        self._check_decoded(self.decoded, "once decoded")
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def _check_text(self, name: str, lengths) -> None:
        import pyarrow.compute as pc

        longest = pc.max(lengths).as_py() if len(lengths) else None
        if longest is not None and longest > validate.MAX_TEXT_BYTES:
            raise InputError(f"{self.where(name)} holds a value of {longest:,} bytes, more than the "
                             f"{validate.MAX_TEXT_BYTES:,} this version reads in one name or text")

    def _check_unsigned(self, name: str, col) -> None:
        import pyarrow.compute as pc

        top = pc.max(col).as_py() if len(col) else None
        if top is not None and top > 2**63 - 1:
            raise InputError(f"{self.where(name)} holds {top}, past 2^63 - 1: no time or size of a capture is that "
                             "large, and as a signed integer it would read as a negative one; export the capture "
                             "again")


#: bytes per value of Parquet's fixed-width physical types (FIXED_LEN_BYTE_ARRAY: the column's length)
_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def _lengths(values):
    """Byte lengths of a text or binary array (0 for NULL)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_string_view(values.type) or pa.types.is_binary_view(values.type):
        values = values.cast(pa.large_binary())
    return pc.fill_null(pc.binary_length(values), 0)


def _target(field):
    """The field as SQLite takes it: dictionaries decoded, unsigned 64-bit as int64."""
    import pyarrow as pa

    if pa.types.is_dictionary(field.type):
        field = field.with_type(field.type.value_type)
    return pa.field(field.name, pa.int64()) if pa.types.is_uint64(field.type) else field


def to_sqlite(folder: str | os.PathLike, dst: Path, tables: tuple[str, ...]) -> list[str]:
    """Copy ``tables`` (those the folder has) of a Parquet/Arrow export into a new SQLite file ``dst``; the
    warnings of what was left out."""
    import adbc_driver_sqlite.dbapi as dbapi

    files, warnings = check_folder(folder, tables)
    con = dbapi.connect(str(dst))
    try:
        with con.cursor() as cur:
            for name in tables:
                if name in files:
                    warnings += _copy_table(cur, name, files[name])
        con.commit()
    finally:
        con.close()
    return warnings


def _copy_table(cur, name: str, path: Path) -> list[str]:
    """Write one table through ADBC's bulk ingest; its warnings. Any failure names the file."""
    import adbc_driver_sqlite.dbapi as dbapi
    import pyarrow as pa

    table = None
    try:
        table = TableFile(name, path)
        if table.keep:
            cur.adbc_ingest(name, pa.RecordBatchReader.from_batches(table.schema, table.batches()), mode="create")
    except (OSError, pa.ArrowException, dbapi.Error) as exc:
        if table is not None and table.error is not None:
            raise table.error from None
        raise _unreadable(path, exc) from None
    return table.warnings


def _unreadable(path: Path, exc: BaseException) -> InputError:
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return InputError(f"{path} cannot be read ({first}): export the capture again")


class AsSqlite:
    """``with AsSqlite(folder, tables) as path:`` a temporary SQLite copy of the export's tables, removed after;
    ``warnings``: what the copy left out."""

    def __init__(self, folder: str | os.PathLike, tables: tuple[str, ...]):
        self.folder, self.tables = Path(folder), tables
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.warnings: list[str] = []

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
            self.warnings = to_sqlite(self.folder, dst, self.tables)
        except BaseException:
            self._tmp.cleanup()
            raise
        return dst

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
