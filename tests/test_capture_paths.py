"""Every path to an analysis gives the same document, byte for byte, on every fixture and sample trace:
read from the export, from the cached frames, stored in and read back from the analysis cache."""

from __future__ import annotations

import json
import warnings

import pytest

from profiler.capture import spill
from profiler.capture.analyze import analyze_path
from profiler.capture.cache import TraceCache
from profiler.capture.result_cache import AnalysisCache, analyze_path_cached
from tests import golden
from tests.conftest import SAMPLE_TRACES

CAPTURES = golden.captures()


def _text(result) -> str:
    """What ``trtprof analyze --json`` writes: the document with its timeline."""
    data = result.to_json()
    data["timeline"] = result.timeline_json(data)
    return json.dumps(data, indent=1, allow_nan=False)


@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_cold_cached_frames_and_cached_analysis_give_one_document(path, tmp_path):
    frames, results = TraceCache(tmp_path / "traces"), AnalysisCache(tmp_path / "analyses")
    cold = analyze_path(path, cache=False)
    frames_stored = analyze_path(path, cache=frames)
    stored = analyze_path_cached(path, cache=frames, results=results)  # analysed from the cached frames
    hit = analyze_path_cached(path, cache=frames, results=results)
    assert (frames_stored.context.trace.meta["cache"], stored.context.trace.meta["cache"]) == ("stored", "hit")
    assert (stored.cache, hit.cache) == ("stored", "hit")
    want = _text(cold)
    assert _text(frames_stored) == want
    assert _text(stored) == want
    assert _text(hit) == want
    assert [f.to_dict() for f in hit.findings] == [f.to_dict() for f in cold.findings]
    other = golden.same_libraries()
    if other is None:  # the golden guard: the document is the one committed (tests/golden.py)
        assert golden.mismatch(path, want) is None, golden.mismatch(path, want)
    else:
        warnings.warn(other)


@pytest.mark.skipif(not spill.supported(), reason="column files need Linux")
@pytest.mark.parametrize("path", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_columns_in_files_give_the_same_document(path, tmp_path, monkeypatch):
    """A capture past TRTPROF_SPILL_ROWS keeps its columns (and the analysis its large arrays) in column
    files: here every capture and every array of any size, read cold and from the cached frames."""
    want = _text(analyze_path(path, cache=False))
    monkeypatch.setenv("TRTPROF_SPILL_ROWS", "1")
    monkeypatch.setattr(spill, "MIN_SPILL_BYTES", 0)
    monkeypatch.setattr(spill, "_filesystem", lambda folder: "ext4")  # files even where /tmp is tmpfs
    frames = TraceCache(tmp_path / "traces")
    for result in (analyze_path(path, cache=False), analyze_path(path, cache=frames),
                   analyze_path(path, cache=frames)):
        trace = result.context.trace
        assert trace.column_files is not None and trace.column_files.fallbacks == 0
        assert spill.is_mapped(trace.api["start_ns"].to_numpy()) == (len(trace.api) > 0)
        assert _text(result) == want
    assert trace.meta["cache"] == "hit"


def test_the_list_holds_the_sample_traces():
    assert len([p for p in CAPTURES if p.parent == SAMPLE_TRACES]) >= 10


def test_the_parquet_export_takes_every_path_to_the_sqlite_exports_document(tmp_path):
    pair = SAMPLE_TRACES / "columnar"
    sqlite, parquet = pair / "transfer_bound.sqlite", pair / "transfer_bound.parquetdir"
    if not (sqlite.is_file() and parquet.is_dir()):
        pytest.skip("sample_traces/columnar is absent")
    frames, results = TraceCache(tmp_path / "traces"), AnalysisCache(tmp_path / "analyses")
    want = _text(analyze_path(sqlite, cache=False)).replace(json.dumps(str(sqlite)), '"CAPTURE"')
    for result in (analyze_path(parquet, cache=False), analyze_path_cached(parquet, cache=frames, results=results),
                   analyze_path(parquet, cache=frames), analyze_path_cached(parquet, cache=frames, results=results)):
        assert _text(result).replace(json.dumps(str(parquet)), '"CAPTURE"') == want
    assert result.cache == "hit"
