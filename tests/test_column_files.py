"""Column files (profiler.capture.spill): large arrays in mapped, unlinked files whose pages the process can
drop without losing a value. The analysis of a capture held this way is checked byte for byte against the
in-memory one in test_capture_paths.py."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from profiler.capture import spill

pytestmark = pytest.mark.skipif(not spill.supported(), reason="column files need Linux (madvise, /proc/self/statm)")

N = (24 << 20) // 8  # 24 MB of int64: above MIN_SPILL_BYTES, below the watchdog's budget


@pytest.fixture(autouse=True)
def on_disk(monkeypatch):
    """The temporary folders count as disk even where /tmp is tmpfs (where no file would be made)."""
    monkeypatch.setattr(spill, "_filesystem", lambda folder: "ext4")


def test_a_large_array_lies_in_a_file_that_is_already_unlinked(tmp_path):
    files = spill.ColumnFiles(tmp_path)
    arr = files.empty(N, np.int64)
    assert spill.is_mapped(arr) and arr.flags.writeable and arr.shape == (N,) and arr.dtype == np.int64
    assert list(tmp_path.iterdir()) == []  # nothing on disk outlives the process, however it ends
    assert files.bytes == N * 8 and files.fallbacks == 0


def test_small_arrays_stay_in_memory(tmp_path):
    files = spill.ColumnFiles(tmp_path)
    small = files.empty(spill.MIN_SPILL_BYTES // 8 - 1, np.int64)
    assert not spill.is_mapped(small) and files.bytes == 0
    assert not spill.is_mapped(files.empty(0, np.int8))


def test_dropping_the_pages_keeps_every_value_and_leaves_the_process(tmp_path):
    files = spill.ColumnFiles(tmp_path)
    arr = files.empty(N, np.int64)
    arr[:] = np.arange(N) * 3 + 7
    before = spill._file_pages()
    spill.release()
    after = spill._file_pages()
    assert before - after >= 0.9 * N * 8 / mmap.PAGESIZE  # the array's pages left the resident set
    assert int(arr.sum()) == 3 * (N * (N - 1) // 2) + 7 * N  # and every value is read back from the file
    assert arr[12345] == 12345 * 3 + 7


def test_keep_copies_only_large_arrays_held_in_memory(tmp_path):
    files = spill.ColumnFiles(tmp_path)
    values = np.arange(N, dtype=np.int64)
    kept = files.keep(values)
    assert spill.is_mapped(kept) and not np.shares_memory(kept, values) and np.array_equal(kept, values)
    assert files.keep(kept) is kept  # already in a file
    small = np.arange(10)
    assert files.keep(small) is small
    constant = np.broadcast_to(np.int64(5), (N,))  # a zero-stride view takes no memory: left alone
    assert files.keep(constant) is constant
    strided = values[::2]
    assert files.keep(strided) is strided


def test_a_folder_that_cannot_hold_the_column_gives_memory_and_counts_it(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    files = spill.ColumnFiles(blocker / "sub")
    arr = files.empty(N, np.int32)
    assert not spill.is_mapped(arr) and arr.shape == (N,) and arr.dtype == np.int32
    assert files.fallbacks == 1 and files.bytes == 0


def test_empty_follows_the_files_in_use(tmp_path):
    assert not spill.is_mapped(spill.empty(N, np.int64))
    files = spill.ColumnFiles(tmp_path)
    with spill.using(files):
        assert spill.is_mapped(spill.empty(N, np.int64))
        with spill.using(None):
            assert not spill.is_mapped(spill.empty(N, np.int64))
        assert spill.is_mapped(spill.empty(N, np.int64))
    assert not spill.is_mapped(spill.empty(N, np.int64))
    assert files.bytes == 2 * N * 8


def test_cut_shrinks_owned_arrays_in_place_and_views_mapped_ones(tmp_path):
    owned = np.arange(100, dtype=np.int64)
    cut = spill.cut(owned, 40)
    assert cut is owned and len(cut) == 40 and cut[-1] == 39
    mapped = spill.ColumnFiles(tmp_path).empty(N, np.int64)
    mapped[:5] = [1, 2, 3, 4, 5]
    view = spill.cut(mapped, 5)
    assert view.tolist() == [1, 2, 3, 4, 5] and np.shares_memory(view, mapped)


@pytest.mark.parametrize("value, want", [("0", 0), ("1000", 1000), (" 25 ", 25), ("-3", 0),
                                         ("many", spill.DEFAULT_SPILL_ROWS), ("", spill.DEFAULT_SPILL_ROWS)])
def test_the_row_threshold_is_read_from_the_environment(monkeypatch, value, want):
    monkeypatch.setenv("TRTPROF_SPILL_ROWS", value)
    assert spill.spill_rows() == want


def test_the_watchdog_drops_pages_past_its_budget(tmp_path, monkeypatch):
    files = spill.ColumnFiles(tmp_path)
    arr = files.empty(N, np.int64)
    monkeypatch.setattr(spill._WATCHDOG, "budget_pages", 1024)  # 4 MB: the 24 MB touched below passes it
    monkeypatch.setattr(spill._WATCHDOG, "baseline_pages", spill._file_pages())
    releases = spill._WATCHDOG.releases
    arr[:] = 1
    for _ in range(200):
        if spill._WATCHDOG.releases > releases:
            break
        os.sched_yield()
        spill.time.sleep(spill.WATCH_INTERVAL_S)
    assert spill._WATCHDOG.releases > releases
    assert int(arr.sum()) == N


def test_a_capture_with_rows_dropped_keeps_them_in_files_and_its_document(tmp_path, monkeypatch):
    """Rows with reversed times are dropped a column at a time, each column back in a file."""
    import shutil
    import sqlite3

    from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze_path
    from profiler.capture.loader import load_trace
    from tests.conftest import SAMPLE_TRACES
    from tests.test_capture_paths import _text

    path = tmp_path / "swapped.sqlite"
    shutil.copy(SAMPLE_TRACES / "launch_bound.sqlite", path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = end, end = start WHERE rowid % 97 = 0")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = end, end = start WHERE rowid % 89 = 0")
        kept = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE end > start").fetchone()[0]
    want = _text(analyze_path(path, cache=False))
    monkeypatch.setenv("TRTPROF_SPILL_ROWS", "1")
    monkeypatch.setattr(spill, "MIN_SPILL_BYTES", 0)
    result = analyze_path(path, cache=False)
    assert _text(result) == want
    assert any("kernel" in w.lower() for w in result.context.trace.meta["warnings"])
    trace = load_trace(path, columns=ANALYSIS_COLUMNS)
    assert 10_000 < len(trace.kernels) == kept
    for frame in (trace.kernels, trace.api):
        assert spill.is_mapped(frame["start_ns"].to_numpy()) and spill.is_mapped(frame["end_ns"].to_numpy())
        assert frame["name"].array.codes.base is not None and spill.is_mapped(frame["name"].array.codes)


def test_a_folder_in_memory_gets_no_files(tmp_path, monkeypatch):
    """A file on tmpfs takes the same memory, only out of the resident set's sight: arrays stay plain memory."""
    monkeypatch.setattr(spill, "_filesystem", lambda folder: "tmpfs")
    files = spill.ColumnFiles(tmp_path)
    assert files.in_memory_fs and not spill.is_mapped(files.empty(N, np.int64)) and files.bytes == 0
    monkeypatch.setattr(spill, "_filesystem", lambda folder: "ext4")
    assert spill.is_mapped(spill.ColumnFiles(tmp_path).empty(N, np.int64))


def test_the_file_system_of_a_folder_is_its_longest_mount_point(monkeypatch):
    monkeypatch.undo()
    assert spill._filesystem(spill.Path("/proc/self")) == "proc"
    assert spill._filesystem(spill.Path("/proc/self/no/such/folder")) == "proc"


@pytest.mark.parametrize("rows_env", ["0", "1"], ids=["memory", "files"])
def test_frames_stored_and_read_in_pieces_give_the_same_document(tmp_path, monkeypatch, rows_env):
    """The trace cache writes a large frame a chunk of rows at a time and reads integer columns a batch at a
    time into their column files: with chunks of 1000 rows the sample trace's frames (21 k API calls) take
    22 chunks, and the document read back equals the cold one, in memory and in files."""
    import pyarrow.parquet as pq

    from profiler.capture import cache
    from profiler.capture.analyze import analyze_path
    from profiler.capture.cache import TraceCache
    from tests.conftest import SAMPLE_TRACES
    from tests.test_capture_paths import _text

    path = SAMPLE_TRACES / "launch_bound.sqlite"
    want = _text(analyze_path(path, cache=False))
    monkeypatch.setattr(cache, "WRITE_CHUNK_ROWS", 1000)
    monkeypatch.setattr(cache, "READ_BATCH_ROWS", 777)
    monkeypatch.setattr(spill, "MIN_SPILL_BYTES", 0)
    monkeypatch.setenv("TRTPROF_SPILL_ROWS", rows_env)
    frames = TraceCache(tmp_path / "traces")
    stored, hit = analyze_path(path, cache=frames), analyze_path(path, cache=frames)
    assert (stored.context.trace.meta["cache"], hit.context.trace.meta["cache"]) == ("stored", "hit")
    (entry,) = (tmp_path / "traces").iterdir()
    api = pq.ParquetFile(entry / "api.parquet")
    assert api.metadata.num_row_groups == -(-api.metadata.num_rows // 1000) >= 20
    assert _text(stored) == want and _text(hit) == want
    assert spill.is_mapped(hit.context.trace.api["start_ns"].to_numpy()) == (rows_env == "1")
