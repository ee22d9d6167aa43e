"""Reading an nsys SQLite export: file checks, table probing and fast column reads.

:class:`Export` answers what a table has (``has``, ``columns``, ``count``) and reads query results
into numpy columns (:meth:`Export.fetch`) through ADBC's Arrow-native SQLite driver when installed,
else Python's ``sqlite3``; large tables are read in rowid ranges by several threads. Integer
columns guarded against mistyped values in SQL are first read without the guards (see
:meth:`Export._fetch_one`). What the columns mean is :mod:`profiler.capture.loader`'s business.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture import validate
from profiler.capture.validate import decode, decode_all
from profiler.errors import InputError

# A sentinel for NULL integers that no real timestamp or id takes.
NULL_INT = -(2**63)
_SQLITE_MAGIC = b"SQLite format 3\x00"
BATCH_ROWS = 65536
PARTITION_MIN_ROWS = 250_000  # tables this large are read by several threads


# --------------------------------------------------------------------------------------------------
# File checks


def check_sqlite_file(path: Path) -> None:
    """Raise InputError unless ``path`` is a complete SQLite file (header and length checked)."""
    if not path.exists():
        raise InputError(f"capture file not found: {path}")
    if not path.is_file():
        raise InputError(f"capture path is not a file: {path}")
    size = path.stat().st_size
    if size > validate.MAX_FILE_BYTES:
        raise InputError(f"{path} is {size:,} bytes, more than the {validate.MAX_FILE_BYTES:,} this version reads")
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise InputError(f"cannot read capture file {path}: {exc.strerror or exc}") from exc
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise InputError(f"{path} is not an SQLite database (expected an nsys export: "
                         f"nsys export --type sqlite)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = header[24:28]
    pages = int.from_bytes(header[28:32], "big")
    valid_for = header[92:96]
    if pages and change_counter == valid_for and size < pages * page_size:
        raise InputError(f"{path} is truncated ({size} of {pages * page_size} bytes): "
                         f"export the capture again")


# --------------------------------------------------------------------------------------------------
# Reading


def _adbc_dbapi():
    if os.environ.get("TRTPROF_SQLITE_READER", "").lower() == "sqlite3":
        return None
    try:
        import adbc_driver_sqlite.dbapi as dbapi
    except ImportError:
        return None
    return dbapi


class Export:
    """An open nsys export: table/column probing and Arrow queries (ADBC or sqlite3)."""

    def __init__(self, path: Path):
        self.path = path
        from urllib.parse import quote

        uri = self.uri = f"file:{quote(path.resolve().as_posix())}?mode=ro"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            rows = self.con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path} is not a readable SQLite database ({exc})") from exc
        self.tables = {r[0] for r in rows}
        # nsys writes tables; a view is computed when read and can expand (a cross join) or never end (a
        # recursive one), so one the analysis would read is refused when it is probed (see has)
        self.views = {r[0] for r in rows if r[1] == "view"}
        self.bad_text = [0]  # strings that were not valid UTF-8 (decoded with replacement)
        self.con.text_factory = lambda raw: decode(raw, self.bad_text)
        self._columns: dict[str, list[str]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._adbc = None
        self.column_files = None  # a spill.ColumnFiles: large columns go to mapped files (set by the loader)
        self.planning: list[tuple] | None = None  # a list while the loader lists its reads (fetch records)
        self._started: dict[tuple, Any] = {}  # read -> its Future (prefetch)
        self._pending: list[tuple] = []  # reads prefetch has yet to start
        self._pool = None
        dbapi = _adbc_dbapi()
        self.reader = "sqlite3"
        if dbapi is not None:
            try:
                self._adbc = dbapi.connect(uri)
                self.reader = "adbc"
            except Exception:  # the driver may be present but unusable; fall back quietly
                self._adbc = None

    def close(self) -> None:
        self.end_prefetch()
        if self._adbc is not None:
            try:
                self._adbc.close()
            except Exception:
                pass
        self.con.close()

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def has(self, table: str) -> bool:
        if table in self.views:
            raise InputError(f"{self.path}: {table} is a view, not a table; nsys exports write tables, so this file "
                             "was made by something else: export the capture again with nsys export --type sqlite")
        return table in self.tables

    def nonempty(self, table: str) -> bool:
        """Whether the table exists and has a row (nsys before 2022.4 created empty tables)."""
        return self.has(table) and self.scalar(f'SELECT 1 FROM "{table}" LIMIT 1') is not None

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            self._columns[table] = [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')]
        return self._columns[table]

    def count(self, table: str, where: str = "") -> int:
        """Row count (cached): the size to preallocate and what the export lacks."""
        if not self.has(table):
            return 0
        key = (table, where)
        if key not in self._counts:
            n = self._counts[key] = int(self.scalar(f'SELECT count(*) FROM "{table}" {where}'))
            if not where and n > validate.MAX_TABLE_ROWS:
                raise InputError(f"{self.path}: table {table} has {n:,} rows, more than the "
                                 f"{validate.MAX_TABLE_ROWS:,} this version reads in one table")
        return self._counts[key]

    def scalar(self, sql: str) -> Any:
        try:
            row = self.con.execute(sql).fetchone()
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, exc) from exc
        return row[0] if row else None

    def rows(self, sql: str) -> list[tuple]:
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, exc) from exc

    def arrow(self, sql: str):
        """Run a query and return a ``pyarrow.Table`` (small queries; big ones use :meth:`fetch`)."""
        import pyarrow as pa

        batches = list(self.batches(sql))
        if not batches:
            return pa.table({})
        return pa.Table.from_batches(batches)

    def batches(self, sql: str, con=None):
        """Yield the result of a query as ``pyarrow.RecordBatch`` es (ADBC when present, else sqlite3).

        An empty result yields one zero-row batch, so the column names are always known.
        """
        import pyarrow as pa

        con = con if con is not None else self._adbc
        if con is not None:
            try:
                cur = con.cursor()
                try:
                    try:
                        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
                    except Exception:
                        pass
                    cur.execute(sql)
                    reader = cur.fetch_record_batch()
                    empty = True
                    for batch in reader:
                        empty = False
                        yield batch
                    if empty:  # keep the column names of an empty result
                        yield pa.RecordBatch.from_pylist([], schema=reader.schema)
                    return
                finally:
                    cur.close()
            except InputError:
                raise
            except Exception as exc:  # ADBC errors carry SQLite's message
                text = str(exc)
                if "malformed" in text or "not a database" in text or "corrupt" in text or "disk I/O" in text:
                    raise _corrupt(self.path, exc) from exc
                raise
        yield from self._sqlite3_batches(sql)

    def _sqlite3_batches(self, sql: str):
        import pyarrow as pa

        try:
            cur = self.con.execute(sql)
            names = [d[0] for d in cur.description]
            empty = True
            while True:
                rows = cur.fetchmany(BATCH_ROWS)
                if not rows:
                    if empty:
                        yield pa.RecordBatch.from_arrays([pa.array([], pa.int64()) for _ in names], names=names)
                    break
                empty = False
                cols = list(zip(*rows))
                yield pa.RecordBatch.from_arrays([pa.array(c) for c in cols], names=names)
        except sqlite3.DatabaseError as exc:
            raise _corrupt(self.path, exc) from exc

    def fetch(self, select: str, table: str, *, where: str | None = None, text: tuple[str, ...] = (),
              small: tuple[str, ...] = ()) -> "Columns":
        """``SELECT ... FROM table [WHERE ...]`` into numpy columns, without holding the Arrow result.

        Integer columns land in int64 arrays (int32 for the ``small`` ones: enums, dimensions)
        preallocated from the table's row count; ``text`` columns are dictionary-encoded batch by
        batch (codes + values). Large tables are read in
        rowid ranges by several threads, each with its own connection (the reader releases the
        GIL), and the parts are joined in rowid order, so the result equals one full scan.
        A read started by :meth:`prefetch` with the same arguments is taken over instead.
        """
        read = (select, table, where, text, small)
        if self.planning is not None:  # the loader is listing its reads (see prefetch)
            self.planning.append(read)
            raise PlannedRead(read)
        started = self._started.pop(read, None)
        if started is not None:
            self._start_next()
            return started.result()
        n_rows = self.count(table)
        return self._read(read, n_rows, self._partitions(table, n_rows), self._adbc)

    def prefetch(self, reads: list[tuple], threads: int) -> int:
        """Read up to ``threads`` of ``reads`` (:meth:`fetch`'s arguments, as listed while ``planning``)
        at once, each on a thread and connection of its own (ADBC and Arrow release the GIL), in their
        order: :meth:`fetch` takes a read's result over and starts the next one, so at most ``threads``
        results wait to be taken. Returns how many reads run so (none with one thread, one read, or
        without ADBC: sqlite3's connection belongs to this thread)."""
        if self._adbc is None or threads <= 1 or len(reads) < 2:
            return 0
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(min(threads, len(reads)), thread_name_prefix="trtprof-table")
        self._pending = list(reads)
        for _ in range(min(threads, len(reads))):
            self._start_next()
        return len(reads)

    def _start_next(self) -> None:
        """Start the next pending read (its count and rowid ranges here: they use this thread's sqlite3
        connection)."""
        if self._pool is None or not self._pending:
            return
        read = self._pending.pop(0)
        n_rows = self.count(read[1])
        self._started[read] = self._pool.submit(self._read_alone, read, n_rows, self._partitions(read[1], n_rows))

    def end_prefetch(self) -> None:
        """Drop the reads nobody took (and their results) and wait for the threads to end."""
        self._pending = []
        if self._pool is not None:
            for started in self._started.values():
                started.cancel()
            self._pool.shutdown(wait=True)
            self._pool = None
        self._started.clear()

    def _read_alone(self, read: tuple, n_rows: int, parts: list[tuple[int, int]]) -> "Columns":
        con = _adbc_dbapi().connect(self.uri) if len(parts) <= 1 else None
        try:
            return self._read(read, n_rows, parts, con)
        finally:
            if con is not None:
                con.close()

    def _read(self, read: tuple, n_rows: int, parts: list[tuple[int, int]], con) -> "Columns":
        select, table, where, text, small = read
        base = f"{select} FROM \"{table}\""
        if len(parts) <= 1:
            return self._fetch_one(base + (f" WHERE {where}" if where else ""), n_rows, text, small, con)
        from concurrent.futures import ThreadPoolExecutor

        def work(bounds: tuple[int, int]) -> Columns:
            lo, hi = bounds
            cond = f"rowid BETWEEN {lo} AND {hi}" + (f" AND ({where})" if where else "")
            con = _adbc_dbapi().connect(self.uri)  # one connection per thread
            try:
                return self._fetch_one(f"{base} WHERE {cond}", min(hi - lo + 1, n_rows), text, small, con)
            finally:
                con.close()

        from profiler.capture.heap import read_heap

        with read_heap(), ThreadPoolExecutor(len(parts)) as pool:
            results = list(pool.map(work, parts))
        return Columns.concat(results, self.empty)

    def _partitions(self, table: str, n_rows: int) -> list[tuple[int, int]]:
        """Rowid ranges for a parallel read, or [] to read the table in one scan."""
        threads = read_threads()
        if self._adbc is None or threads <= 1 or n_rows < 2 * PARTITION_MIN_ROWS:
            return []
        try:
            # two queries: SQLite answers a lone min() or max() of the rowid from the b-tree's ends,
            # but both in one SELECT scan the whole table
            lo = self.con.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
            hi = self.con.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
        except sqlite3.DatabaseError:
            return []  # e.g. a WITHOUT ROWID table
        if lo is None or hi - lo + 1 > 4 * n_rows:  # sparse rowids: ranges would be uneven
            return []
        k = int(min(threads, n_rows // PARTITION_MIN_ROWS))
        edges = np.linspace(lo, hi + 1, k + 1).astype(np.int64)
        return [(int(a), int(b) - 1) for a, b in zip(edges[:-1], edges[1:]) if b > a]

    def empty(self, n: int, dtype) -> np.ndarray:
        """An array for ``n`` rows of a column: in a column file when the loader asked for them."""
        return np.empty(n, dtype) if self.column_files is None else self.column_files.empty(n, dtype)

    def copy(self, arr: np.ndarray) -> np.ndarray:
        out = self.empty(len(arr), arr.dtype)
        out[:] = arr
        return out

    def _fetch_one(self, sql: str, max_rows: int, text: tuple[str, ...], small: tuple[str, ...], con
                   ) -> "Columns":
        """One scan into numpy columns. Integer columns are guarded in SQL (``int_sql``: text, BLOB and
        real values become NULL), which costs SQLite a ``typeof`` per value; the query is first run
        without the guards and kept only if every non-text column arrived as integers, which holds for
        every export nsys writes. Otherwise (a mistyped value) the guarded query runs: the same rows."""
        import pyarrow as pa

        fast = _GUARD.sub(r"\1", sql)
        if fast != sql:
            try:
                return self._scan(fast, max_rows, text, small, con, integers_only=True)
            except _NotIntegers:
                pass
            except pa.ArrowException:  # sqlite3 fallback: a mixed column does not convert
                pass
            except OSError as exc:  # ADBC: a value of another type after the first batch
                if "mismatch" not in str(exc).lower():
                    raise
        return self._scan(sql, max_rows, text, small, con)

    def _scan(self, sql: str, max_rows: int, text: tuple[str, ...], small: tuple[str, ...], con, *,
              integers_only: bool = False) -> "Columns":
        import pyarrow as pa
        import pyarrow.compute as pc

        out: dict[str, np.ndarray] = {}
        chunks: dict[str, list] = {t: [] for t in text}
        pos = 0
        cap = max(int(max_rows), 0)
        for batch in self.batches(sql, con):
            m = batch.num_rows
            if not out:
                out = {n: self.empty(cap, np.int32 if n in small else np.int64)
                       for n in batch.schema.names if n not in text}
            if pos + m > cap:  # more rows than counted: grow (not expected on a read-only file)
                cap = max(2 * cap, pos + m)
                out = {n: np.resize(a, cap) for n, a in out.items()}
            for i, name in enumerate(batch.schema.names):
                col = batch.column(i)
                if name in chunks:
                    chunks[name].append(pc.dictionary_encode(col))
                    continue
                if integers_only and not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
                    raise _NotIntegers(name)
                if col.null_count:
                    col = pc.fill_null(col, NULL_INT)
                out[name][pos:pos + m] = col.to_numpy(zero_copy_only=False)
            pos += m
        result = Columns({n: (a[:pos] if pos * 10 >= len(a) * 9 else self.copy(a[:pos])) for n, a in out.items()}, pos)
        for name, parts in chunks.items():
            if parts:
                unified = pa.chunked_array(parts).unify_dictionaries()
                values = decode_all(unified.chunk(0).dictionary.to_pylist(), self.bad_text)
                codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False).astype(np.int64)
                                        for c in unified.chunks])
            else:
                values, codes = np.empty(0, dtype=object), np.empty(0, np.int64)
            result.text[name] = (codes, values)
        return result


class PlannedRead(Exception):
    """Raised by :meth:`Export.fetch` while ``planning``: the read was listed, not run."""


class _NotIntegers(Exception):
    """An unguarded scan met a column that is not all integers: the guarded query must run."""


#: ``int_sql(name)`` as it appears in a query, to run the query without the guards first.
_GUARD = re.compile(r"iif\(typeof\((\w+)\) = 'integer', \1, NULL\)")


def read_threads() -> int:
    """Threads for reading large tables: TRTPROF_READ_THREADS, else up to 8 of the CPUs we may use."""
    env = os.environ.get("TRTPROF_READ_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


TABLE_THREADS_ENV = "TRTPROF_TABLE_THREADS"
"""Environment variable: how many of a capture's tables are read at once (``auto``: one per table up to the
CPUs we may use; unset or 1: one after another)."""
TABLE_THREADS_DEFAULT = 1
"""Tables read at once by default: one. Measured on the H200 host (16 CPUs), `trtprof analyze` of the
launch_bound x239 export (513 MB), side by side in one run: 9.74 s and 845 MB peak with its 4 tables at once,
9.63 s and 822 MB one after another; the loader's own read was already 2.9 s against the 7.65 s serial ADBC
floor, each large table being split in rowid ranges over :func:`read_threads` threads. On the 2-core machine
neither was faster either, and the peak grew by 125-210 MB (2-4 tables at once)."""


def table_threads(n_tables: int) -> int:
    """Tables read at once: ``TRTPROF_TABLE_THREADS`` (a count, or ``auto`` for one per table up to the CPUs
    we may use), else :data:`TABLE_THREADS_DEFAULT`."""
    env = os.environ.get(TABLE_THREADS_ENV, "").strip().lower()
    if env == "auto":
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
        return max(1, min(cpus, n_tables))
    try:
        return max(1, int(env)) if env else TABLE_THREADS_DEFAULT
    except ValueError:
        return TABLE_THREADS_DEFAULT


class Columns(dict):
    """Numpy columns of one query (int64), plus dictionary-encoded text columns in ``text``."""

    def __init__(self, arrays: dict[str, np.ndarray], n: int):
        super().__init__(arrays)
        self.n = n
        self.text: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @classmethod
    def concat(cls, parts: list["Columns"], empty=np.empty) -> "Columns":
        """Parts of one query in order -> one result (column by column, freeing parts as it goes);
        ``empty(n, dtype)`` makes each joined column."""
        names = list(parts[0])
        out = cls({}, sum(p.n for p in parts))
        for name in names:
            pieces = [p.pop(name) for p in parts]
            out[name] = np.concatenate(pieces, out=empty(out.n, np.result_type(*pieces)))
            del pieces
        for name in list(parts[0].text):
            values = np.concatenate([p.text[name][1] for p in parts])
            merged, uniq = pd.factorize(values) if len(values) else (np.empty(0, np.int64), values)
            codes, offset = [], 0
            for p in parts:
                c, v = p.text.pop(name)
                codes.append(merged[offset:offset + len(v)][c] if len(c) else c)
                offset += len(v)
            out.text[name] = (np.concatenate(codes).astype(np.int64),
                              np.asarray(uniq, dtype=object))
        return out


def _corrupt(path: Path, exc: Exception) -> InputError:
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    if "no such column" in first or "no such table" in first:
        return InputError(f"{path} does not have the layout of an nsys export this version reads ({first})")
    return InputError(f"{path} is corrupt or truncated ({first}): export the capture again")
