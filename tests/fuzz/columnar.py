"""Issue 33's family of hostile Parquet/Arrow exports (``nsys export --type parquetdir`` / ``arrowdir``),
generated from the real Parquet export in ``sample_traces/columnar``: every table the loader reads x every
column of the kinds a defect applies to x each defect x both formats, a seeded sample of each defect's
product (so a new table, column or defect is fuzzed without a new line here).

Defects: a column retyped to a type nsys never writes (list, struct, decimal, timestamp, map), an integer
column made unsigned with values past 2^63 - 1, a duplicated column name (the same or another case), an extra
column of an over-long name, a text value past ``MAX_TEXT_BYTES``, a table without columns, a decompression
bomb (the first row repeated until the decoded table passes ``EXPANSION_FLOOR_BYTES`` twice), and table files
that are not one (a FIFO, a symlink to ``/dev/zero``, a dangling symlink, a directory, truncated or foreign
bytes). What a correct trtprof does follows from the limits the code declares: a required column or a value
it cannot hold is exit 3; a column it does not need is left out with a warning; a file that is not a table
is exit 3.
"""

from __future__ import annotations

import decimal
import os
import random
import shutil
from pathlib import Path
from typing import Callable

from tests.conftest import SAMPLE_TRACES
from tests.fuzz.hostile import Case

PARQUET_BASE = SAMPLE_TRACES / "columnar" / "transfer_bound.parquetdir"

#: defect -> (which columns it applies to, its edit of a pyarrow Table's column)
RETYPES = ("list", "struct", "decimal", "timestamp", "map")
FILE_DEFECTS = ("fifo", "dev-zero", "dangling-symlink", "directory", "truncated", "foreign-bytes")
TABLE_DEFECTS = ("zero-columns", "bomb")
COLUMN_DEFECTS = RETYPES + ("uint64-past-int64", "duplicate", "duplicate-case", "long-name", "long-text")
FORMATS = ("parquet", "arrow")


def _retyped(kind: str, n: int):
    import pyarrow as pa

    if kind == "list":
        return pa.array([[i] for i in range(n)])
    if kind == "struct":
        return pa.StructArray.from_arrays([pa.array(range(n))], names=["v"])
    if kind == "decimal":
        return pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal128(20, 0))
    if kind == "timestamp":
        return pa.array(range(n), pa.timestamp("ns"))
    return pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64()))


def _bomb(table, fmt: str):
    """The first row repeated until the table decodes to twice ``EXPANSION_FLOOR_BYTES``. In Parquet the
    repeats cost nothing (run-length encoding); an Arrow stream's compression holds them at about a hundredth,
    so its bomb adds a dictionary column whose one 4 KiB value every row repeats."""
    import pyarrow as pa

    from profiler.capture import columnar

    width = sum(8 if not pa.types.is_integer(f.type) else f.type.bit_width // 8 for f in table.schema)
    value = 4096 if fmt == "arrow" else 0
    rows = 2 * columnar.EXPANSION_FLOOR_BYTES // (value or max(width, 1)) + 1
    out = table.take(pa.array([0] * rows, pa.int32()))
    if value:
        text = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["b" * value]))
        out = out.append_column("comment", text)
    return out


def edit_table(table, defect: str, column: str | None, fmt: str = "parquet"):
    """The table with ``defect`` applied to ``column`` (or to the whole table) for a file of format ``fmt``."""
    import pyarrow as pa

    from profiler.capture import validate

    if defect == "zero-columns":
        return pa.table({})
    if defect == "bomb":
        return _bomb(table, fmt)
    i = table.schema.get_field_index(column)
    n = table.num_rows
    if defect in RETYPES:
        return table.set_column(i, column, _retyped(defect, n))
    if defect == "uint64-past-int64":
        top = [2**64 - 1000 + k for k in range(min(n, 3))]
        values = top + [abs(v or 0) for v in table[column].to_pylist()[len(top):]]
        return table.set_column(i, column, pa.array(values, pa.uint64()))
    if defect == "duplicate":
        return table.append_column(column, table[column])
    if defect == "duplicate-case":
        return table.append_column(column.upper() if column.upper() != column else column.lower(), table[column])
    if defect == "long-name":
        return table.append_column("n" * (validate.MAX_NAME_CHARS + 1), table[column])
    # long-text: one value past the limit
    values = table[column].to_pylist()
    values[0] = "x" * (validate.MAX_TEXT_BYTES + 1)
    return table.set_column(i, column, pa.array(values, table.schema.field(i).type))


def write_table(table, path: Path, compression: str | None = None) -> None:
    """``table`` as a Parquet file or an Arrow IPC stream (``compression``: the stream's, e.g. zstd)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pq.write_table(table, path)
        return
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema, options=options) as w:
        w.write_table(table, max_chunksize=65536)


def export_copy(tmp: Path, fmt: str) -> Path:
    """The sample Parquet export in ``fmt`` (Arrow: the tables as IPC streams, as nsys writes arrowdir)."""
    import pyarrow.parquet as pq

    dst = tmp / f"cap.{fmt}dir"
    if fmt == "parquet":
        shutil.copytree(PARQUET_BASE, dst)
        return dst
    dst.mkdir()
    for f in sorted(PARQUET_BASE.iterdir()):
        write_table(pq.read_table(f), dst / f"{f.stem}.arrow")
    return dst


def _file_defect(path: Path, defect: str) -> None:
    data = path.read_bytes()
    path.unlink()
    if defect == "fifo":
        os.mkfifo(path)
    elif defect == "dev-zero":
        path.symlink_to("/dev/zero")
    elif defect == "dangling-symlink":
        path.symlink_to(path.parent / "nowhere.bin")
    elif defect == "directory":
        path.mkdir()
    elif defect == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:  # foreign-bytes: the right size, no table
        path.write_bytes(random.Random(path.name).randbytes(len(data)))


def _build(fmt: str, table: str, defect: str, column: str | None) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        import pyarrow.parquet as pq

        folder = export_copy(tmp, fmt)
        path = folder / f"{table}.{fmt}"
        if defect in FILE_DEFECTS:
            _file_defect(path, defect)
        else:
            edited = edit_table(pq.read_table(PARQUET_BASE / f"{table}.parquet"), defect, column, fmt)
            write_table(edited, path, "zstd" if defect == "bomb" else None)  # a plain stream is as large as its data
        return ["analyze", str(folder), "--no-store", "--no-cache", "--json", str(tmp / "out.json")]
    return build


def _expect(table: str, defect: str, column: str | None) -> tuple[tuple[int, ...] | None, bool]:
    """(exit codes, whether a warning is due) of a correct trtprof, from the limits the code declares."""
    from profiler.capture import columnar, validate
    from profiler.capture.nsys_names import T_SYNC

    required = column in validate.REQUIRED.get(table, ())
    if table == T_SYNC:  # the analysis does not read synchronisation records: its file may be anything
        return None, False
    if defect in FILE_DEFECTS or defect in ("duplicate", "duplicate-case", "long-text", "bomb"):
        return (3,), False
    if defect in RETYPES:
        return ((3,), False) if required else ((0, 1), True)
    if defect == "long-name":
        return (0, 1), True
    if defect == "uint64-past-int64":
        return ((3,), False) if column in columnar.UNSIGNED_QUANTITIES else (None, False)
    return None, False  # zero-columns: the table reads as absent (a required one: exit 3 naming it)


def _products() -> dict[str, list[tuple[str, str | None]]]:
    """defect -> every (table, column) it applies to in the sample export."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from profiler.capture.nsys_names import TABLES

    out: dict[str, list[tuple[str, str | None]]] = {d: [] for d in COLUMN_DEFECTS + TABLE_DEFECTS + FILE_DEFECTS}
    for table in TABLES:
        path = PARQUET_BASE / f"{table}.parquet"
        if not path.is_file():
            continue
        schema = pq.read_schema(path)
        rows = pq.ParquetFile(path).metadata.num_rows
        for d in TABLE_DEFECTS + FILE_DEFECTS:
            if d != "bomb" or (rows and len(schema) >= 8):  # narrow tables take the same checks, more slowly
                out[d].append((table, None))
        for f in schema:
            for d in COLUMN_DEFECTS:
                if d == "uint64-past-int64" and not pa.types.is_integer(f.type):
                    continue
                if d == "long-text" and not (pa.types.is_large_string(f.type) or pa.types.is_string(f.type)):
                    continue
                if d == "long-text" and not rows:
                    continue
                out[d].append((table, f.name))
    return out


def columnar_cases(per_defect: int = 3) -> list[Case]:
    """A seeded sample of ``per_defect`` (format, table, column) of each defect's product; unsigned quantities
    (times, sizes) are always among the uint64 ones, as the wrap they would take is the one found."""
    if not PARQUET_BASE.is_dir():
        return []
    from profiler.capture import columnar

    cases: list[Case] = []
    for defect, pairs in _products().items():
        product = [(fmt, t, c) for fmt in FORMATS for t, c in pairs]
        rng = random.Random(f"columnar-{defect}")
        picked = rng.sample(product, min(per_defect, len(product)))
        if defect == "uint64-past-int64":
            quantities = [p for p in product if p[2] in columnar.UNSIGNED_QUANTITIES and p not in picked]
            picked += rng.sample(quantities, min(per_defect, len(quantities)))
        for fmt, table, column in picked:
            expect, warns = _expect(table, defect, column)
            name = f"{fmt}-{table}" + (f".{column}" if column else "") + f"-{defect}"
            cases.append(Case("columnar", name, _build(fmt, table, defect, column), PARQUET_BASE,
                              expect=expect, warns=warns))
    return cases
