"""The capture caches' size cap: least-recently-used eviction after a write, the entries just written kept,
a hit refreshing recency, an entry evicted under a reader being a miss, and `trtprof cache`."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from profiler.capture import cache as C
from profiler.capture import caches, fingerprint
from profiler.capture.cache import TraceCache, load_trace_cached
from profiler.capture.loader import load_trace
from profiler.capture.options import AnalysisOptions
from profiler.capture.trace import FRAMES
from profiler.capture.result_cache import AnalysisCache, analyze_path_cached
from profiler.cli import main
from profiler.errors import UsageError
from tests.conftest import SAMPLE_TRACES

T0_NS = 1_700_000_000 * 10**9


def _entry(folder: Path, name: str, size_bytes: int, used_s: int) -> Path:
    """A fake entry of ``size_bytes`` in two files, last used ``used_s`` seconds after T0."""
    e = folder / name
    e.mkdir(parents=True)
    (e / "a.bin").write_bytes(b"x" * (size_bytes // 2))
    (e / "b.bin").write_bytes(b"y" * (size_bytes - size_bytes // 2))
    t = T0_NS + used_s * 10**9
    os.utime(e, ns=(t, t))
    return e


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_eviction_removes_the_least_recently_used_across_both_caches_until_the_cap(tmp_path):
    a, t = tmp_path / "analyses", tmp_path / "traces"
    _entry(t, "t1", 4000, used_s=10)
    _entry(a, "a1", 1000, used_s=20)
    _entry(t, "t2", 3000, used_s=30)
    _entry(a, "a2", 1000, used_s=40)
    new = _entry(a, "new", 500, used_s=50)
    removed = caches.trim([new], cap=5000)
    # total 9500 > 5000: t1 (oldest, 4000) then a1 (1000) go, leaving 4500; t2 stays though older than a2
    assert [e.path.name for e in removed] == ["t1", "a1"]
    assert [e.size_bytes for e in removed] == [4000, 1000]
    assert (_names(a), _names(t)) == (["a2", "new"], ["t2"])
    assert sum(e.size_bytes for f in (a, t) for e in caches.entries(f)) == 4500


def test_the_cap_holds_after_each_of_many_writes(tmp_path):
    a = tmp_path / "analyses"
    cap = 3500
    for i in range(12):
        new = _entry(a, f"e{i:02d}", 1000 + 100 * (i % 3), used_s=i)
        caches.trim([new], cap=cap)
        sizes = [e.size_bytes for e in caches.entries(a)]
        assert sum(sizes) <= cap
        assert f"e{i:02d}" in _names(a)
    # the last three written fit (1100 + 1200 + 1000 = 3300; a fourth would pass 3500)
    assert _names(a) == ["e09", "e10", "e11"]


def test_the_entries_just_written_stay_even_above_the_cap(tmp_path):
    a, t = tmp_path / "analyses", tmp_path / "traces"
    _entry(a, "old", 100, used_s=1)
    frames = _entry(t, "frames", 6000, used_s=0)  # written by the same analysis, before its result
    result = _entry(a, "result", 2000, used_s=2)
    removed = caches.trim([result, frames], cap=1000)
    assert [e.path.name for e in removed] == ["old"]
    assert (_names(a), _names(t)) == (["result"], ["frames"])


def test_a_folder_outside_analyses_and_traces_is_capped_alone(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "traces"
    _entry(other, "big", 9000, used_s=0)
    _entry(mine, "old", 900, used_s=1)
    new = _entry(mine, "new", 900, used_s=2)
    assert [e.path.name for e in caches.trim([new], cap=1000)] == ["old"]
    assert _names(other) == ["big"]


def test_stale_hidden_folders_are_removed_and_fresh_ones_kept(tmp_path):
    a = tmp_path / "analyses"
    stale = _entry(a, ".key.killed-writer", 50, used_s=0)  # T0: long ago
    fresh = a / ".key.writing-now"
    fresh.mkdir()
    new = _entry(a, "new", 10, used_s=1)
    caches.trim([new], cap=10**9)
    assert not stale.exists() and fresh.is_dir() and new.is_dir()


@pytest.mark.parametrize("text,expected", [("", 5 * 10**9), ("0.5", 500_000_000), (" 2 ", 2 * 10**9), ("0", 0)])
def test_the_cap_comes_from_the_environment(monkeypatch, text, expected):
    monkeypatch.setenv("TRTPROF_CACHE_MAX_GB", text)
    assert caches.cap_bytes() == expected


@pytest.mark.parametrize("text", ["5GB", "-1", "nan", "inf", "lots"])
def test_a_bad_cap_is_one_sentence(monkeypatch, text):
    monkeypatch.setenv("TRTPROF_CACHE_MAX_GB", text)
    with pytest.raises(UsageError, match=f"TRTPROF_CACHE_MAX_GB='{text}' is not a size in gigabytes"):
        caches.cap_bytes()


# ----------------------------------------------------------------------------- on real captures

def _copy(name: str, tmp_path: Path) -> Path:
    src = SAMPLE_TRACES / f"{name}.sqlite"
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    dst = tmp_path / f"{name}.sqlite"
    shutil.copyfile(src, dst)
    return dst


def _age(entry: Path, seconds_ago: float) -> None:
    t = time.time_ns() - int(seconds_ago * 1e9)
    os.utime(entry, ns=(t, t))


def test_a_hit_refreshes_recency_so_the_other_entry_is_evicted(tmp_path):
    results = AnalysisCache(tmp_path / "analyses")
    caps = [_copy(n, tmp_path) for n in ("multistream", "host_stall", "sync_heavy")]
    for p in caps[:2]:
        assert analyze_path_cached(p, results=results, cache=TraceCache(tmp_path / "traces")).cache == "stored"
    first, second = sorted(caches.entries(results.root), key=lambda e: e.used_ns)
    _age(first.path, 100)
    _age(second.path, 50)
    # a hit on the older entry (the first capture) makes it the most recent
    hit = analyze_path_cached(caps[0], results=results, cache=TraceCache(tmp_path / "traces"))
    assert hit.cache == "hit"
    used = {e.path.name: e.used_ns for e in caches.entries(results.root)}
    assert used[first.path.name] > time.time_ns() - 10 * 10**9 > used[second.path.name]
    # a third capture with room for two entries: the second capture's entry goes, the hit one stays
    os.environ["TRTPROF_CACHE_MAX_GB"] = str((first.size_bytes + second.size_bytes + 1) / 1e9)
    try:
        assert analyze_path_cached(caps[2], results=results, cache=TraceCache(tmp_path / "traces")).cache == "stored"
    finally:
        del os.environ["TRTPROF_CACHE_MAX_GB"]
    names = {e.path.name for e in caches.entries(results.root)}
    assert first.path.name in names and second.path.name not in names and len(names) == 2


def test_a_frames_entry_evicted_while_read_is_a_miss_not_a_crash(tmp_path, monkeypatch):
    capture = _copy("multistream", tmp_path)
    store = TraceCache(tmp_path / "traces")
    assert load_trace_cached(capture, cache=store).meta["cache"] == "stored"
    (entry,) = caches.entries(store.root)
    real_read, calls = C._read_frame, []

    def read_then_evict(path, *args):  # another process evicts the entry after our first frame
        frame = real_read(path, *args)
        if not calls:
            calls.append(path)
            assert caches.remove(entry.path)
        return frame

    monkeypatch.setattr(C, "_read_frame", read_then_evict)
    again = load_trace_cached(capture, cache=store)
    assert again.meta["cache"] == "stored" and len(calls) == 1  # read from the export, stored anew
    pd.testing.assert_frame_equal(again.kernels, load_trace(capture).kernels)
    assert [e.path.name for e in caches.entries(store.root)] == [entry.path.name]


def test_a_frames_entry_missing_one_frame_is_a_miss(tmp_path):
    capture = _copy("multistream", tmp_path)
    store = TraceCache(tmp_path / "traces")
    load_trace_cached(capture, cache=store)
    (entry,) = caches.entries(store.root)
    (entry.path / "kernels.parquet").unlink()  # never served as a capture without kernels
    again = load_trace_cached(capture, cache=store)
    assert again.meta["cache"] == "stored"
    assert len(again.kernels) == len(load_trace(capture).kernels) > 0


def test_an_analysis_evicted_before_its_samples_are_read_is_analysed_again(tmp_path):
    capture = _copy("multistream", tmp_path)
    results, frames = AnalysisCache(tmp_path / "analyses"), TraceCache(tmp_path / "traces")
    stored = analyze_path_cached(capture, results=results, cache=frames)
    want = [(r.variant["key"], len(r.samples), float(r.samples["latency_ms"].sum())) for r in stored.range_records()]
    hit = analyze_path_cached(capture, results=results, cache=frames)
    assert hit.cache == "hit"
    for e in caches.entries(results.root):  # evicted by another process between the hit and the store
        caches.remove(e.path)
    got = [(r.variant["key"], len(r.samples), float(r.samples["latency_ms"].sum())) for r in hit.range_records()]
    assert got == want and len(want) >= 2 and want[0][1] > 0


def test_an_analysis_writes_its_frames_and_result_and_keeps_both_under_a_zero_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_MAX_GB", "0")
    a, t = tmp_path / "analyses", tmp_path / "traces"
    capture, other = _copy("multistream", tmp_path), _copy("host_stall", tmp_path)
    analyze_path_cached(capture, results=AnalysisCache(a), cache=TraceCache(t))
    assert (len(caches.entries(a)), len(caches.entries(t))) == (1, 0)  # a first analysis keeps no frames
    # a second analysis with other options: frames and result written, both kept, the first result evicted
    again = analyze_path_cached(capture, AnalysisOptions(min_gap_us=10), results=AnalysisCache(a), cache=TraceCache(t))
    assert again.cache == "stored"
    assert (len(caches.entries(a)), len(caches.entries(t))) == (1, 1)
    analyze_path_cached(other, results=AnalysisCache(a), cache=TraceCache(t))
    assert (len(caches.entries(a)), len(caches.entries(t))) == (1, 0)


# ----------------------------------------------------------------------------- trtprof cache

def _run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _row(out: str, name: str) -> list[str]:
    (line,) = [x for x in out.splitlines() if x.startswith(name + " ")]
    return line.split()


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TRTPROF_CACHE_MAX_GB", "2.5")
    monkeypatch.setattr(fingerprint, "RACY_NS", 0)  # the copies were just written: remember their hashes
    caps = [_copy(n, tmp_path) for n in ("multistream", "host_stall")]
    for p in caps:
        assert _run(["analyze", str(p), "--no-store"], capsys)[0] == 0
    assert _run(["analyze", str(caps[0]), "--no-store", "--min-gap-us", "10"], capsys)[0] == 0  # + frames
    code, out, err = _run(["cache"], capsys)
    assert code == 0 and err == ""
    a_bytes = caches._folder_bytes(tmp_path / "c" / "analyses")
    t_bytes = caches._folder_bytes(tmp_path / "c" / "traces")
    assert a_bytes > 1000 and t_bytes > 1000
    assert _row(out, "analyses")[:2] == ["analyses", "3"]
    assert " ".join(_row(out, "analyses")[2:4]) == f"{a_bytes / 1e3:.1f} kB"
    assert _row(out, "traces")[:2] == ["traces", "1"]
    assert _row(out, "hashes")[:2] == ["hashes", "2"]
    assert f"total of analyses and traces: {(a_bytes + t_bytes) / 1e3:.1f} kB of the 2.5 GB cap" in out
    assert out.splitlines()[0] == f"cache folder: {tmp_path / 'c'} (TRTPROF_CACHE_DIR)"
    assert _run(["cache", "info"], capsys)[1] == out

    code, out, _ = _run(["cache", "clear", "traces"], capsys)
    assert code == 0 and f"traces: removed 1 entry ({t_bytes / 1e3:.1f} kB)" in out and "analyses" not in out
    assert _names(tmp_path / "c" / "traces") == [] and len(caches.entries(tmp_path / "c" / "analyses")) == 3
    code, out, _ = _run(["cache", "clear"], capsys)
    assert code == 0 and "analyses: removed 3 entries" in out and "hashes: removed 2 entries" in out
    assert [_row(_run(["cache"], capsys)[1], n)[1] for n in ("analyses", "traces", "hashes")] == ["0", "0", "0"]
    assert _run(["analyze", str(caps[0]), "--no-store"], capsys)[0] == 0  # the cache refills
    assert len(caches.entries(tmp_path / "c" / "analyses")) == 1


def test_cache_command_mistakes_are_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "c"))
    code, _, err = _run(["cache", "clear", "frames"], capsys)
    assert code == 2 and "'frames' is not one of 'analyses', 'traces', 'hashes', 'all'" in err
    monkeypatch.setenv("TRTPROF_CACHE_MAX_GB", "5GB")
    code, _, err = _run(["cache"], capsys)
    assert code == 2 and err.count("\n") == 1 and "TRTPROF_CACHE_MAX_GB='5GB' is not a size in gigabytes" in err
    capture = _copy("multistream", tmp_path)
    code, out, err = _run(["analyze", str(capture), "--no-store"], capsys)  # fails before the analysis
    assert code == 2 and out == "" and "TRTPROF_CACHE_MAX_GB" in err
    code, out, err = _run(["analyze", str(capture), str(capture), "--no-store"], capsys)  # a batch too
    assert code == 2 and out == "" and "TRTPROF_CACHE_MAX_GB='5GB'" in err
    assert _run(["analyze", str(capture), "--no-store", "--no-cache"], capsys)[0] == 0  # no cache, no cap
    monkeypatch.delenv("TRTPROF_CACHE_MAX_GB")
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "file"))
    for args in (["cache"], ["cache", "clear"]):
        code, _, err = _run(args, capsys)
        assert code == 3 and f"the cache folder {tmp_path / 'file'} is a file, not a folder" in err


def test_reads_while_another_thread_evicts_are_whole_or_misses(tmp_path):
    """Timing decides which reads hit, miss or lose their entry mid-read (the deterministic case is above):
    whichever happens, nothing escapes and every Trace is the export's."""
    capture = _copy("multistream", tmp_path)
    store = TraceCache(tmp_path / "traces")
    want = load_trace(capture)
    stop, errors, got = threading.Event(), [], []
    pause_s = iter(random.Random(7).uniform(0.0, 0.3) for _ in range(10**6))

    def evict() -> None:  # another process with a zero cap, at odd moments
        while not stop.wait(next(pause_s)):
            for e in caches.entries(store.root):
                caches.remove(e.path)

    t = threading.Thread(target=evict)
    t.start()
    try:
        for _ in range(8):
            try:
                got.append(load_trace_cached(capture, cache=store))
            except Exception as exc:  # noqa: BLE001 - the test is that nothing escapes
                errors.append(exc)
    finally:
        stop.set()
        t.join()
    assert errors == [] and len(got) == 8 and got[0].meta["cache"] in ("stored", "off")
    for trace in got:
        assert trace.meta["cache"] in ("hit", "stored", "off")  # off: stored, then evicted at once
        for name in FRAMES:
            pd.testing.assert_frame_equal(getattr(trace, name), getattr(want, name))
