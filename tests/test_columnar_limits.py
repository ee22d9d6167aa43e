"""The limits on what an export may hold (profiler/capture/validate.py, columnar.py), each tested with a small
monkeypatched limit on a real export rather than a huge file; and the checks of a Parquet/Arrow folder's
files, schemas and values at the boundary (one sentence naming the file, table and column, or a warning and
the rest of the analysis)."""

from __future__ import annotations

import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from profiler.capture import cache, columnar, validate  # cache first: it binds content_sha256 when imported
from profiler.capture.loader import load_trace
from profiler.errors import InputError
from tests.conftest import SAMPLE_TRACES
from tests.fuzz.columnar import PARQUET_BASE, edit_table, export_copy, write_table

SQLITE = SAMPLE_TRACES / "columnar" / "transfer_bound.sqlite"
K, API = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"

pytestmark = pytest.mark.skipif(not PARQUET_BASE.is_dir(), reason="sample_traces/columnar is absent")


@pytest.fixture(params=["parquet", "arrow"])
def export(request, tmp_path):
    return export_copy(tmp_path, request.param)


def _rewrite(folder, table: str, edit) -> None:
    fmt = folder.suffix[1:-3]
    write_table(edit(pq.read_table(PARQUET_BASE / f"{table}.parquet")), folder / f"{table}.{fmt}")


def _decoded_ratio(path) -> float:
    t = columnar.TableFile(path.stem, path)
    for _ in t.batches():
        pass
    return t.decoded / t.size


def test_real_tables_decode_to_far_less_than_a_bomb():
    """MAX_EXPANSION's margin: every table of the real Parquet export decodes to under 10 times its file."""
    ratios = {f.stem: _decoded_ratio(f) for f in PARQUET_BASE.iterdir()}
    assert 1 < max(ratios.values()) < 10 < columnar.MAX_EXPANSION / 10, ratios


def test_the_limits_are_far_above_real_exports():
    assert validate.MAX_TABLE_ROWS >= 10 * 49_000_000  # a 4.5 GB export holds 49 M CUDA API calls
    assert validate.MAX_FILE_BYTES >= 50 * 4_500_000_000
    assert validate.MAX_TEXT_BYTES >= 1 << 20 and validate.MAX_COLUMNS >= 10 * 60


def test_a_table_of_more_rows_is_refused_from_the_parquet_footer_before_a_row_is_read(tmp_path, monkeypatch):
    folder = export_copy(tmp_path, "parquet")
    monkeypatch.setattr(validate, "MAX_TABLE_ROWS", 82)  # the export has 83 kernels, its first table read
    monkeypatch.setattr(columnar.TableFile, "_checked", lambda self, b: pytest.fail("a batch was read"))
    with pytest.raises(InputError, match=f"{K}.parquet: table {K} has 83 rows, more than the 82 this version"):
        load_trace(folder)


def test_an_arrow_stream_of_more_rows_is_refused_as_it_is_read(tmp_path, monkeypatch):
    folder = export_copy(tmp_path, "arrow")
    monkeypatch.setattr(validate, "MAX_TABLE_ROWS", 82)
    with pytest.raises(InputError, match=f"{K}.arrow: table {K} has 83 rows, more than the 82"):
        load_trace(folder)
    monkeypatch.setattr(validate, "MAX_TABLE_ROWS", 10_897)  # the largest table read: OSRT_API
    assert len(load_trace(folder).kernels) == 83


def test_a_sqlite_table_of_more_rows_is_refused_before_loading(monkeypatch):
    monkeypatch.setattr(validate, "MAX_TABLE_ROWS", 10896)  # OSRT_API has 10,897 rows
    monkeypatch.setattr("profiler.capture.loader._Loader.read_api", lambda self: pytest.fail("loading began"))
    with pytest.raises(InputError, match="table OSRT_API has 10,897 rows, more than the 10,896 this version"):
        load_trace(SQLITE)


def test_a_file_past_the_largest_is_refused_before_it_is_opened_or_hashed(tmp_path, monkeypatch):
    from profiler.capture.result_cache import analyze_cached  # imports what it hashes with before the patch below

    folder = export_copy(tmp_path, "parquet")
    size = (folder / f"{K}.parquet").stat().st_size
    monkeypatch.setattr(validate, "MAX_FILE_BYTES", size - 1)
    monkeypatch.setenv("TRTPROF_TRACE_CACHE", "1")
    monkeypatch.setattr("profiler.capture.fingerprint.content_sha256", lambda p: pytest.fail("hashed"))
    monkeypatch.setattr(cache, "content_sha256", lambda p: pytest.fail("hashed"))
    with pytest.raises(InputError, match=f"{K}.parquet is {size:,} bytes, more than the {size - 1:,}"):
        analyze_cached(folder, None)
    with pytest.raises(InputError, match=f"{K}.parquet is {size:,} bytes"):
        cache.load_trace_cached(folder)
    monkeypatch.setattr(validate, "MAX_FILE_BYTES", SQLITE.stat().st_size - 1)
    with pytest.raises(InputError, match="transfer_bound.sqlite is .* bytes, more than the"):
        load_trace(SQLITE)


def test_text_past_the_longest_is_refused_naming_the_column(export, monkeypatch):
    monkeypatch.setattr(validate, "MAX_TEXT_BYTES", 64)  # demangled kernel names are longer
    with pytest.raises(InputError, match=r"table StringIds, column 'value', holds a value of \d+ bytes, more than "
                                         "the 64 this version reads"):
        load_trace(export)


def test_a_repeated_long_text_is_measured_before_it_is_expanded(tmp_path, monkeypatch):
    """One 4 KiB name on 100,000 rows of a dictionary-encoded Parquet column: 400 MB decoded from a 650 KB
    file is refused from the dictionary's lengths and the row's indices (its footer counts the value once)."""
    folder = export_copy(tmp_path, "parquet")
    n = 100_000
    names = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array(["k" * 4096]))
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()), "value": names}), folder / "StringIds.parquet")
    monkeypatch.setattr(columnar, "EXPANSION_FLOOR_BYTES", 1 << 20)
    with pytest.raises(InputError, match="StringIds takes .* bytes once decoded, more than 256 times its"):
        load_trace(folder)


def test_a_table_past_the_largest_decoded_size_is_refused(export, monkeypatch):
    monkeypatch.setattr(validate, "MAX_TABLE_BYTES", 100_000)  # OSRT_API decodes to some 400 kB
    with pytest.raises(InputError, match=r"table OSRT_API takes [\d,]+ bytes once decoded.*, more than the 100,000"):
        load_trace(export)


def test_a_table_of_too_many_columns_is_refused(export, monkeypatch):
    monkeypatch.setattr(validate, "MAX_COLUMNS", 27)  # the kernel table has 28
    with pytest.raises(InputError, match=f"table {K} has 28 columns, more than the 27 this version reads"):
        load_trace(export)


def test_an_unsigned_time_past_int64_is_refused_naming_table_and_column(export):
    """The wrap found: 2^64 - 1000 read as -1000 ns made the GPU time 3861 ms instead of 1.24 ms."""
    _rewrite(export, K, lambda t: edit_table(t, "uint64-past-int64", "start"))
    with pytest.raises(InputError, match=f"table {K}, column 'start', holds {2**64 - 998}, past 2.63 - 1"):
        load_trace(export)


def test_an_unsigned_id_past_int64_keeps_its_bits_as_the_sqlite_export_does(export):
    _rewrite(export, API, lambda t: edit_table(t, "uint64-past-int64", "globalTid"))
    api = load_trace(export).api
    assert sorted(api["global_tid"])[:3] == [-1000, -999, -998]


def test_a_column_of_another_type_is_left_out_with_a_warning_and_the_rest_is_the_same(export):
    healthy = load_trace(export)
    _rewrite(export, K, lambda t: edit_table(t, "list", "registersPerThread"))
    trace = load_trace(export)
    warning = trace.meta["warnings"][0]
    assert re.fullmatch(f"{K}.{export.suffix[1:-3]}: column 'registersPerThread' of {K} has type "
                        r"'list<(item|element): int64>', which no nsys export writes; it was left out\.", warning)
    assert "registersPerThread" in trace.meta["absent_columns"][K]
    assert (trace.kernels["registers_per_thread"] == -1).all() and (healthy.kernels["registers_per_thread"] > 0).all()
    for frame in ("api", "memcpy", "nvtx", "osrt"):
        assert getattr(trace, frame).equals(getattr(healthy, frame))
    assert trace.kernels["start_ns"].equals(healthy.kernels["start_ns"])


def test_a_required_column_of_another_type_is_refused(export):
    _rewrite(export, K, lambda t: edit_table(t, "struct", "deviceId"))
    with pytest.raises(InputError, match=f"table {K}, column 'deviceId', has type 'struct<v: int64>', which no nsys "
                                         "export writes; the analysis needs that column"):
        load_trace(export)


@pytest.mark.parametrize("defect, named", [("duplicate", "named 'end'"),
                                           ("duplicate-case", "named 'end' and 'END' (to SQLite, the same name)")])
def test_two_columns_of_one_name_are_refused(export, defect, named):
    _rewrite(export, API, lambda t: edit_table(t, defect, "end"))
    with pytest.raises(InputError, match=rf"table {API} has two columns {named.replace('(', '.').replace(')', '.')}"):
        load_trace(export)


def test_a_table_without_columns_reads_as_absent_with_a_warning(export):
    _rewrite(export, "PROCESSES", lambda t: pa.table({}))
    trace = load_trace(export)
    assert f"PROCESSES.{export.suffix[1:-3]} has no columns; table PROCESSES was read as absent." in trace.meta["warnings"]
    assert [p["name"] for p in trace.meta["processes"]] == [None] * len(trace.meta["processes"])


def test_a_table_file_that_is_a_device_fifo_or_directory_is_refused(export):
    path = export / f"NVTX_EVENTS.{export.suffix[1:-3]}"
    path.unlink()
    path.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="NVTX_EVENTS.* is a device, not a table file"):
        load_trace(export)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputError, match="NVTX_EVENTS.* is a FIFO, not a table file"):
        load_trace(export)


def test_a_table_the_analysis_does_not_read_may_be_anything_and_is_named(tmp_path):
    folder = export_copy(tmp_path, "parquet")
    (folder / "OSRT_CALLCHAINS.parquet").unlink()
    os.mkfifo(folder / "OSRT_CALLCHAINS.parquet")
    trace = load_trace(folder)
    assert trace.meta["warnings"] == ["OSRT_CALLCHAINS.parquet is not a regular file; it was ignored (the analysis "
                                      "does not read OSRT_CALLCHAINS)."]
    assert len(trace.kernels) == 83


def test_a_symlink_to_a_table_file_is_read(tmp_path):
    folder = export_copy(tmp_path, "parquet")
    moved = tmp_path / "elsewhere.parquet"
    shutil.move(folder / f"{K}.parquet", moved)
    (folder / f"{K}.parquet").symlink_to(moved)
    assert len(load_trace(folder).kernels) == 83


def test_two_columns_of_a_one_letter_name_are_refused(tmp_path):
    """CPython keeps one object per one-letter string: the check compares names, not objects."""
    folder = export_copy(tmp_path, "parquet")
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    pq.write_table(table, folder / "PROCESSES.parquet")
    with pytest.raises(InputError, match="table PROCESSES has two columns named 'a', so which one to read"):
        load_trace(folder)


def test_a_name_past_the_longest_text_is_read_as_its_first_mib_with_a_warning(tmp_path):
    import sqlite3

    path = tmp_path / "long_names.sqlite"
    shutil.copy(SAMPLE_TRACES / "graph.sqlite", path)
    long = "r" * (validate.MAX_TEXT_BYTES + 12345)
    with sqlite3.connect(path) as db:  # three instances of the repeated range get a name past the limit
        rows = db.execute("SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL LIMIT 3").fetchall()
        db.executemany("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", [(long, r) for (r,) in rows])
    trace = load_trace(path)
    names = set(trace.nvtx["name"].astype(str))
    assert "r" * validate.MAX_TEXT_BYTES in names and long not in names  # cut at the limit, never whole
    assert any(re.search(r"1 name\(s\) are longer than 1 MiB; each is shown as its first MiB", w)
               for w in trace.meta["warnings"])
    assert not any("longer than" in w for w in load_trace(SAMPLE_TRACES / "graph.sqlite").meta["warnings"])
