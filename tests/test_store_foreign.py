"""--db pointing at a SQLite file that is not a run store is refused before anything writes to it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

import pytest

from profiler.errors import InputError
from profiler.store import Store
from tests.conftest import SAMPLE_TRACES


def _md5(p):
    return hashlib.md5(p.read_bytes()).hexdigest()


def test_an_nsys_export_as_db_is_refused_and_left_untouched(tmp_path):
    src = SAMPLE_TRACES / "sync_heavy.sqlite"
    if not src.exists():
        pytest.skip("sample trace missing")
    cap = tmp_path / "cap.sqlite"
    shutil.copy(src, cap)
    before = _md5(cap)
    r = subprocess.run([sys.executable, "-m", "profiler", "runs", "--db", str(cap)], capture_output=True, text=True)
    assert r.returncode == 3 and "not a trtprof run store" in r.stderr
    assert _md5(cap) == before and not (tmp_path / "cap.sqlite-wal").exists()


def test_garbage_and_empty_files(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database at all" * 50)
    with pytest.raises(InputError, match="is not a SQLite database"):
        Store.open(str(bad))
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    store = Store.open(str(empty))  # an empty file becomes a new store
    assert store.list_runs() == []
    store.close()
