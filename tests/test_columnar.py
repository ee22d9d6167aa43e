"""Parquet and Arrow exports (``nsys export --type parquetdir`` / ``arrowdir``) give the analysis of the
SQLite export of the same capture, byte for byte: a real pair made on the H200 (sample_traces/columnar)."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from profiler.capture import columnar
from profiler.capture.analyze import analyze_path
from profiler.capture.loader import TABLES, load_trace
from profiler.capture.result_cache import AnalysisCache, analyze_path_cached
from profiler.cli import main
from profiler.errors import InputError
from tests.conftest import SAMPLE_TRACES

PAIR = SAMPLE_TRACES / "columnar"
SQLITE, PARQUET = PAIR / "transfer_bound.sqlite", PAIR / "transfer_bound.parquetdir"


@pytest.fixture(scope="module")
def pair():
    if not (SQLITE.is_file() and PARQUET.is_dir()):
        pytest.skip("sample_traces/columnar is absent")
    return SQLITE, PARQUET


def _doc(result) -> str:
    data = result.to_json()
    data["timeline"] = result.timeline_json(data)
    data["capture"] = {**data["capture"], "source_path": "CAPTURE"}
    return json.dumps(data, indent=1, allow_nan=False)


@pytest.fixture(scope="module")
def sqlite_doc(pair):
    return _doc(analyze_path(pair[0], cache=False))


def _arrowdir(src, dst):
    """The parquetdir's tables as Arrow IPC streams, the format nsys writes for arrowdir."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dst.mkdir()
    for f in src.iterdir():
        table = pq.read_table(f)
        with pa.OSFile(str(dst / (f.stem + ".arrow")), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=1000)
    return dst


def test_the_parquet_export_gives_the_sqlite_exports_analysis_byte_for_byte(pair, sqlite_doc):
    result = analyze_path(pair[1], cache=False)
    assert _doc(result) == sqlite_doc
    doc = json.loads(sqlite_doc)
    assert doc["findings"][0]["rule"] == "transfer_bound" and doc["capture"]["counts"]["memcpy"] == 86
    assert result.to_json()["capture"]["source_path"] == str(pair[1])


def test_an_arrow_export_gives_it_too(pair, sqlite_doc, tmp_path):
    arrow = _arrowdir(pair[1], tmp_path / "cap.arrowdir")
    assert columnar.columnar_kind(arrow) == "arrowdir"
    assert _doc(analyze_path(arrow, cache=False)) == sqlite_doc


def test_the_frames_are_the_sqlite_exports(pair):
    import pandas as pd

    a, b = load_trace(pair[0]), load_trace(pair[1])
    for name in ("kernels", "memcpy", "api", "nvtx", "osrt", "sync"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    a.meta.pop("source_path"), b.meta.pop("source_path")
    assert a.meta == b.meta


def test_cached_paths_give_it_too_and_a_changed_table_is_a_miss(pair, sqlite_doc, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cap.parquetdir"
    shutil.copytree(pair[1], folder)
    results = AnalysisCache(tmp_path / "analyses")
    stored = analyze_path_cached(folder, results=results)
    hit = analyze_path_cached(folder, results=results)
    assert (stored.cache, hit.cache) == ("stored", "hit")
    assert _doc(stored) == _doc(hit) == sqlite_doc
    (folder / "OSRT_API.parquet").unlink()  # another export in the same folder
    again = analyze_path_cached(folder, results=results)
    assert again.cache == "stored" and again.to_json()["capture"]["counts"]["osrt"] == 0


def test_the_command_reads_a_folder_and_refuses_one_that_is_not_an_export(pair, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(pair[1]), "--no-store", "--no-cache", "--json", str(tmp_path / "a.json")])
    assert exc.value.code == 0
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(tmp_path / "empty"), "--no-store"])
    assert exc.value.code == 3
    assert "is a directory, not a capture" in capsys.readouterr().err


def test_a_damaged_table_is_bad_input_and_leaves_no_copy_behind(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cap.parquetdir"
    shutil.copytree(pair[1], folder)
    data = (folder / "NVTX_EVENTS.parquet").read_bytes()
    (folder / "NVTX_EVENTS.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="NVTX_EVENTS.parquet cannot be read"):
        load_trace(folder)
    assert not any((tmp_path / "cache" / "tmp").iterdir())


def test_unsigned_ids_are_stored_as_sqlite_stores_them(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "PROCESSES.parquet"
    pq.write_table(pa.table({"globalPid": pa.array([2**64 - 1, 2**63, 5], pa.uint64()), "n": [1, 2, 3]}), path)
    out = next(columnar.TableFile("PROCESSES", path).batches())
    assert out.column(0).to_pylist() == [-1, -(2**63), 5] and out.column(1).to_pylist() == [1, 2, 3]


def test_tables_lists_every_table_the_loader_reads(pair, monkeypatch):
    """Read the SQLite export with an authorizer recording each table SQLite reads: a table missing from
    TABLES would be absent from the copy of a Parquet export, and its analysis would differ."""
    read: set[str] = set()
    real = sqlite3.connect

    def connect(*args, **kwargs):
        con = real(*args, **kwargs)

        def authorizer(action, arg1, arg2, db, source):
            if action == sqlite3.SQLITE_READ and arg1 and not arg1.startswith("sqlite_"):
                read.add(arg1)
            return sqlite3.SQLITE_OK

        con.set_authorizer(authorizer)
        return con

    monkeypatch.setenv("TRTPROF_SQLITE_READER", "sqlite3")  # every query through the sqlite3 module
    monkeypatch.setattr(sqlite3, "connect", connect)
    load_trace(pair[0])
    assert read and read <= set(TABLES), sorted(read - set(TABLES))
