"""The analysis-result cache: a second `trtprof analyze` of an unchanged capture reads the result back
(no loading, no analysis) and writes exactly what a fresh analysis writes; any change of the capture,
an option or the code is a miss; the content-hash memo never serves another file's hash."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading

import pytest

from profiler.capture import fingerprint as F
from profiler.capture import result_cache as R
from profiler.capture.analyze import AnalysisOptions, analyze_path
from profiler.capture.result_cache import analyze_path_cached
from profiler.cli import main
from profiler.store import Store
from tests.conftest import SAMPLE_TRACES


@pytest.fixture
def capture(tmp_path):
    src = SAMPLE_TRACES / "trt_eager.sqlite"  # TensorRT-shaped layer ranges, warm-up, copies
    if not src.is_file():
        pytest.skip("sample_traces/trt_eager.sqlite is absent")
    dst = tmp_path / "cap.sqlite"
    shutil.copyfile(src, dst)
    return dst


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(root))
    monkeypatch.delenv("TRTPROF_TRACE_CACHE", raising=False)
    return root


def _cli(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", *args])
    assert exc.value.code == 0, capsys.readouterr()
    return capsys.readouterr().out


def _entries(cache_dir) -> list[str]:
    folder = cache_dir / "analyses"
    return sorted(p.name for p in folder.iterdir() if p.name != "seen") if folder.is_dir() else []


def _no_loading(monkeypatch):
    """Make reading or analysing a capture fail: a hit must do neither."""
    import profiler.capture.analyze as A
    import profiler.capture.loader as L

    def boom(*a, **k):
        raise AssertionError("the capture was read or analysed on a cache hit")

    monkeypatch.setattr(L, "load_trace", boom)
    monkeypatch.setattr(A, "analyze", boom)


def _run(db: str, run_id: int) -> dict:
    """A stored run without what differs between two runs of one analysis (ids, times, file paths)."""
    store = Store.open(db)
    try:
        d = store.run_dict(run_id, with_samples=True)
    finally:
        store.close()

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()
                    if not (k == "id" or k.endswith("_id") or k.endswith("_at") or k in ("path", "label"))}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    return clean(d)


def test_a_hit_writes_the_json_report_terminal_and_stored_run_of_a_fresh_analysis(capture, cache_dir, tmp_path,
                                                                                 capsys, monkeypatch):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    outs = []
    for i, extra in enumerate((["--no-cache"], [], [])):
        if i == 2:
            _no_loading(monkeypatch)
        text = _cli(capsys, str(capture), "--json", str(tmp_path / f"{i}.json"), "--report",
                    str(tmp_path / f"{i}.html"), "--db", db, *extra)
        html = re.sub(rb"\d{4}-\d\d-\d\d \d\d:\d\d UTC", b"WHEN", (tmp_path / f"{i}.html").read_bytes())
        outs.append(((tmp_path / f"{i}.json").read_text(), html, text))  # the report says when it was made
        if i == 0:
            assert _entries(cache_dir) == []  # --no-cache neither reads nor writes the cache
    assert len(_entries(cache_dir)) == 1
    for i in (1, 2):
        assert outs[i][0] == outs[0][0]
        if outs[i][1] != outs[0][1]:  # show where
            a, b = outs[0][1], outs[i][1]
            k = next(k for k in range(min(len(a), len(b))) if a[k] != b[k])
            raise AssertionError(f"report {i} differs at {k}: {a[k - 200:k + 60]!r} vs {b[k - 200:k + 60]!r}")
        assert outs[i][2].replace(f"stored run {i + 1}", "") == outs[0][2].replace("stored run 1", "")
    doc = json.loads(outs[0][0])
    assert doc["findings"] and doc["layers"] and doc["timeline"]["windows"]  # the test compares real content
    runs = [_run(db, i) for i in (1, 2, 3)]
    assert runs[0]["variants"] and runs[0]["variants"][0]["samples"] and runs[0]["findings"]
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.parametrize("change", ["unit", "include_setup", "min_gap_us", "thresholds", "rules", "max_instances"])
def test_every_option_that_changes_the_result_is_part_of_the_key(change, capture, cache_dir):
    base = AnalysisOptions()
    changed = {"unit": AnalysisOptions(unit="TensorRT:conv1 + relu1"),
               "include_setup": AnalysisOptions(include_setup=True),
               "min_gap_us": AnalysisOptions(min_gap_us=7.0),
               "thresholds": AnalysisOptions(thresholds={"jitter": {"max_cov_pct": 0.1}}),
               "rules": AnalysisOptions(rules=["gpu_idle"]),
               "max_instances": AnalysisOptions(max_instances=3)}[change]
    assert analyze_path_cached(capture, base).cache == "stored"
    hit = analyze_path_cached(capture, base)
    miss = analyze_path_cached(capture, changed)
    assert hit.cache == "hit" and miss.cache == "stored" and len(_entries(cache_dir)) == 2
    assert json.dumps(miss.to_json()) == json.dumps(analyze_path(capture, changed, cache=False).to_json())
    assert json.dumps(miss.to_json()) != json.dumps(hit.to_json())  # the option does change the result


def test_the_layer_info_file_is_keyed_by_its_content_not_only_its_path(capture, cache_dir, tmp_path):
    info = tmp_path / "layers.json"
    info.write_text(json.dumps({"Layers": [{"Name": "conv1", "LayerType": "Convolution"}]}))
    opts = AnalysisOptions(layer_info=str(info))
    assert analyze_path_cached(capture, opts).cache == "stored"
    assert analyze_path_cached(capture, opts).cache == "hit"
    info.write_text(json.dumps({"Layers": [{"Name": "conv2", "LayerType": "Pooling"}]}))
    assert analyze_path_cached(capture, opts).cache == "stored"


def test_a_code_change_or_another_capture_is_a_miss(capture, cache_dir, monkeypatch):
    assert analyze_path_cached(capture).cache == "stored"
    monkeypatch.setattr(R, "_code_version", "another-version-of-the-code")
    assert analyze_path_cached(capture).cache == "stored"
    other = capture.with_name("other.sqlite")
    shutil.copyfile(SAMPLE_TRACES / "multistream.sqlite", other)
    assert analyze_path_cached(other).cache == "stored"
    assert len(_entries(cache_dir)) == 3


def test_the_code_version_covers_modules_beyond_capture_and_rules():
    """The timeline, the findings and the statistics shape the result too: they are in the digest."""
    import hashlib
    from pathlib import Path

    root = Path(R.__file__).resolve().parents[1]
    files = sorted(root.rglob("*.py"))
    names = {p.relative_to(root).as_posix() for p in files}
    assert {"capture/analyze.py", "capture/context.py", "capture/timeline.py", "findings.py", "stats.py"} <= names
    assert any(n.startswith("rules/capture") for n in names)
    h = hashlib.sha256(f"{R.FORMAT}|".encode())
    assert R.code_version() != h.hexdigest()[:16] and len(R.code_version()) == 16


def test_the_same_content_at_another_path_is_a_hit_that_names_the_new_path(capture, cache_dir, monkeypatch):
    first = analyze_path_cached(capture)
    moved = capture.with_name("renamed.sqlite")
    shutil.copyfile(capture, moved)
    fresh = analyze_path(moved, cache=False).to_json()
    _no_loading(monkeypatch)
    hit = analyze_path_cached(moved)
    assert first.cache == "stored" and hit.cache == "hit"
    assert hit.to_json()["capture"]["source_path"] == str(moved)
    assert json.dumps(hit.to_json()) == json.dumps(fresh)


def test_a_damaged_entry_is_a_miss_and_is_replaced(capture, cache_dir):
    want = json.dumps(analyze_path_cached(capture).to_json())
    (entry,) = [cache_dir / "analyses" / name for name in _entries(cache_dir)]
    (entry / "samples.npy").write_bytes(b"\x93NUMPY not really")
    again = analyze_path_cached(capture)
    assert again.cache == "stored" and json.dumps(again.to_json()) == want
    (entry,) = [cache_dir / "analyses" / name for name in _entries(cache_dir)]
    (entry / "analysis.json").write_text('{"document": ')
    assert analyze_path_cached(capture).cache == "stored"
    assert analyze_path_cached(capture).cache == "hit"


def test_concurrent_analyses_of_one_capture_leave_one_whole_entry(capture, cache_dir):
    results = []
    threads = [threading.Thread(target=lambda: results.append(analyze_path_cached(capture).cache))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and set(results) <= {"stored", "hit"}
    assert len(_entries(cache_dir)) == 1 and not [p for p in (cache_dir / "analyses").iterdir() if p.name[0] == "."]
    assert analyze_path_cached(capture).cache == "hit"


def test_no_cache_and_the_switch_bypass_it(capture, cache_dir, tmp_path, capsys, monkeypatch):
    _cli(capsys, str(capture), "--no-store", "--no-cache")
    assert not cache_dir.exists()
    monkeypatch.setenv("TRTPROF_TRACE_CACHE", "0")
    _cli(capsys, str(capture), "--no-store")
    assert not cache_dir.exists()
    monkeypatch.delenv("TRTPROF_TRACE_CACHE")
    _cli(capsys, str(capture), "--no-store")
    assert len(_entries(cache_dir)) == 1
    assert analyze_path(capture).cache == "off" and analyze_path(capture).context is not None  # no analysis cache


def test_trace_output_after_a_hit_equals_a_fresh_one(capture, cache_dir, tmp_path, capsys):
    for i, extra in enumerate((["--no-cache"], [], [])):
        _cli(capsys, str(capture), "--no-store", "--trace", str(tmp_path / f"{i}.trace.json"), *extra)
    texts = [(tmp_path / f"{i}.trace.json").read_text() for i in range(3)]
    assert texts[0] == texts[1] == texts[2] and json.loads(texts[0])["traceEvents"]


# ----------------------------------------------------------------------------- the content-hash memo

@pytest.fixture
def memo(cache_dir, monkeypatch):
    """Memos written at once (no racy window) and a count of full hashes."""
    monkeypatch.setattr(F, "RACY_NS", 0)
    calls = []
    real = F.file_sha256

    def counting(*paths, **kw):
        calls.append(paths)
        return real(*paths, **kw)

    monkeypatch.setattr(F, "file_sha256", counting)
    return calls


def test_the_memo_saves_the_full_hash_of_an_unchanged_file(capture, memo):
    want = F.file_sha256(capture)
    memo.clear()
    assert F.content_sha256(capture) == want and len(memo) == 1
    assert F.content_sha256(capture) == want and len(memo) == 1  # remembered


def test_a_file_rewritten_with_the_same_size_and_mtime_is_hashed_again(capture, memo):
    first = F.content_sha256(capture)
    st = capture.stat()
    data = bytearray(capture.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the middle, beyond the sampled ends
    capture.write_bytes(bytes(data))
    os.utime(capture, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert capture.stat().st_size == st.st_size and capture.stat().st_mtime_ns == st.st_mtime_ns
    memo.clear()
    second = F.content_sha256(capture)
    assert len(memo) == 1 and second != first and second == F.file_sha256(capture)


def test_stamps_that_do_not_move_are_caught_by_the_sampled_ends(capture, memo, monkeypatch):
    """A filesystem that keeps no ctime: the stamps are the old ones, the last MiB is not."""
    first = F.content_sha256(capture)
    old = F._stamps(capture.stat())
    data = bytearray(capture.read_bytes())
    data[-10] ^= 0xFF
    capture.write_bytes(bytes(data))
    monkeypatch.setattr(F, "_stamps", lambda st: old)
    memo.clear()
    assert F.content_sha256(capture) != first and len(memo) == 1


def test_a_file_changed_within_the_racy_window_is_not_remembered(capture, memo, monkeypatch):
    monkeypatch.setattr(F, "RACY_NS", 60_000_000_000)  # the copy was written seconds ago
    F.content_sha256(capture)
    F.content_sha256(capture)
    assert len(memo) == 2 and not (F.memo_dir()).exists()


def test_a_rewritten_capture_is_never_served_another_files_analysis(capture, cache_dir, memo):
    first = analyze_path_cached(capture)
    st = capture.stat()
    other = SAMPLE_TRACES / "multistream.sqlite"
    data = bytearray(other.read_bytes())
    data = (data + bytes(max(0, st.st_size - len(data))))[: max(st.st_size, len(data))]
    capture.write_bytes(bytes(data))
    os.utime(capture, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = analyze_path_cached(capture)
    assert second.cache == "stored"
    assert second.to_json()["capture"]["counts"] != first.to_json()["capture"]["counts"]


def test_a_hit_imports_neither_pandas_nor_the_analysis(capture, cache_dir, capsys):
    """What makes a hit cheap: no pandas, numpy, pyarrow or SQLAlchemy (checked in a fresh interpreter)."""
    import subprocess
    import sys

    _cli(capsys, str(capture), "--no-store", "--json", str(capture.with_suffix(".json")))
    probe = ("import runpy, sys\nsys.argv = ['trtprof', 'analyze', sys.argv[1], '--no-store', '--json', sys.argv[2]]\n"
             "try:\n    runpy.run_module('profiler', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code\n"
             "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'sqlalchemy', 'profiler.capture.analyze') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, str(capture), str(capture.with_suffix(".2.json"))],
                         capture_output=True, text=True, env=dict(os.environ), cwd=str(SAMPLE_TRACES.parent),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert capture.with_suffix(".2.json").read_bytes() == capture.with_suffix(".json").read_bytes()


def test_samples_damaged_after_the_checks_are_measured_again(capture, cache_dir, tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    _cli(capsys, str(capture), "--db", db, "--no-cache")
    analyze_path_cached(capture)
    (entry,) = [cache_dir / "analyses" / name for name in _entries(cache_dir)]
    data = bytearray((entry / "samples.npy").read_bytes())
    data[-32:] = bytes(32)  # same size and header, other sample values: caught by the file's hash
    (entry / "samples.npy").write_bytes(bytes(data))
    _cli(capsys, str(capture), "--db", db)
    assert _run(db, 2) == _run(db, 1) and not (cache_dir / "analyses" / entry.name).exists()


def test_frames_are_kept_from_the_second_analysis_of_a_capture_on(capture, cache_dir):
    first = analyze_path_cached(capture)
    assert first.cache == "stored" and first.context.trace.meta["cache"] == "off"
    assert not (cache_dir / "traces").exists()  # a repeat is answered by the analysis cache
    other = analyze_path_cached(capture, AnalysisOptions(include_setup=True))
    assert other.context.trace.meta["cache"] == "stored"
    third = analyze_path_cached(capture, AnalysisOptions(min_gap_us=5.0))
    assert third.cache == "stored" and third.context.trace.meta["cache"] == "hit"
