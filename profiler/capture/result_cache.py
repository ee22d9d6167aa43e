"""A cache of analysis results: ``trtprof analyze`` of a capture it has analysed before, with the same
options and the same code, reads the result back instead of loading and analysing the capture.

An entry holds everything the command writes that comes from the capture: the ``--json`` document, its
report timeline, and what the run store keeps per range (statistics and per-instance samples). The
terminal summary, the report and the stored run are then made from it exactly as after a fresh analysis,
so their output is byte-identical (tested on every fixture and sample trace).

The key is everything the result depends on:

- the SHA-256 of the capture's content (:mod:`profiler.capture.fingerprint`, remembered between runs);
- the code: a digest of the source of every module of the ``profiler`` package (the loader, the analysis
  under ``capture/`` and ``rules/``, the findings, statistics and timeline modules they import; a list of
  modules would go stale, the whole package cannot) and of the Python, numpy, pandas and pyarrow versions;
- every analysis option (each field of :class:`~profiler.capture.analyze.AnalysisOptions`: unit,
  include-setup, thresholds, rules, limits), with the ``--layer-info`` file's path *and* content hash.

A hit imports neither the analysis nor pandas (the run store's samples are read only when a store asks),
so it costs the interpreter's start, two small reads of the capture and one JSON file.

The loaded frames (:mod:`profiler.capture.cache`) are kept from a capture's second analysis on (another
option, a new version): an exact repeat is answered by this cache, and writing the frames would cost the
first analysis a third more (measured in ``benchmarks/bench_trace_cache.py``).

Entries are written to a temporary folder and renamed into place (a reader never sees half of one;
concurrent writers of one key leave one whole copy); a damaged entry is a miss and is removed, as is one
evicted while it was read. With the frames, the folder shares the size cap of
:mod:`profiler.capture.caches`: after a write the least recently used entries are evicted (never the ones
this analysis wrote); a hit marks its entry used. The folder
is ``$TRTPROF_CACHE_DIR/analyses``; ``--no-cache`` or ``TRTPROF_TRACE_CACHE=0`` bypasses it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = 2  # 2: the samples as a .npy file with its SHA-256 (1: Parquet, which needed pandas to store a hit)
_code_version: str | None = None


def default_result_cache_dir() -> Path:
    """:func:`profiler.cache_dir.cache_root` + ``/analyses``."""
    from profiler.cache_dir import cache_root

    return cache_root() / "analyses"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def code_version() -> str:
    """A digest of every module of the ``profiler`` package and of the libraries that compute the result."""
    global _code_version
    if _code_version is None:
        root = Path(__file__).resolve().parents[1]
        libs = "|".join(f"{p}={_version(p)}" for p in ("numpy", "pandas", "pyarrow"))
        h = hashlib.sha256(f"{FORMAT}|{sys.version_info[:3]}|{libs}".encode())
        for p in sorted(root.rglob("*.py")):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
        _code_version = h.hexdigest()[:16]
    return _code_version


def options_key(options: Any) -> dict[str, Any]:
    """Every field of the analysis options, the layer-info file by path and content."""
    from profiler.hashing import file_sha256

    out = dataclasses.asdict(options)
    if options.layer_info:
        out["layer_info"] = {"path": str(options.layer_info), "sha256": file_sha256(options.layer_info)}
    return out


def result_key(content_sha256: str, options: Any) -> str:
    text = json.dumps({"content": content_sha256, "code": code_version(), "options": options_key(options)},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


class CachedAnalysis:
    """An analysis read back from the cache: what :class:`~profiler.capture.analyze.AnalysisResult` gives
    the command (``to_json``, ``findings``, ``timeline_json``, ``range_records``, ``trace``), without
    the frames (``context`` is None)."""

    cache = "hit"
    context = None

    def __init__(self, document: dict[str, Any], timeline: dict[str, Any], variants: list[dict[str, Any]],
                 samples_path: Path, samples_sha256: str, source_sha256: str, options: Any = None):
        from profiler.findings import Finding

        self.document = document
        self.capture, self.ranges = document["capture"], document["ranges"]
        self.findings = [Finding.from_dict(f) for f in document["findings"]]
        self.extra = {k: v for k, v in document.items() if k not in ("kind", "capture", "ranges", "findings")}
        self.timeline = timeline
        self.source_sha256 = source_sha256
        self._variants, self._samples_path, self._options = variants, samples_path, options
        self._samples_sha256 = samples_sha256
        self._records: list[Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.document)

    def timeline_json(self, data: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.timeline

    def range_records(self) -> list[Any]:
        """The run store's rows per range (``profiler.store.rows.VariantRows``; the samples read from the
        entry on first use)."""
        if self._records is None:
            try:
                from profiler.store.rows import VariantRows

                samples = read_samples(self._samples_path, len(self._variants), self._samples_sha256)
                self._records = [VariantRows(v, samples=s) for v, s in zip(self._variants, samples)]
            except Exception:  # damaged or evicted after the entry's checks: analyse again, forget the entry
                from profiler.capture.analyze import analyze_path
                from profiler.capture.caches import discard

                discard(self._samples_path.parent)
                self._records = analyze_path(self.capture["source_path"], self._options).range_records()
        return self._records

    def trace(self) -> Any:
        """The capture's frames (``--trace`` needs them): loaded again, through the trace cache."""
        from profiler.capture.analyze import ANALYSIS_COLUMNS
        from profiler.capture.cache import load_trace_cached
        from profiler.capture.trace import FRAMES

        return load_trace_cached(self.capture["source_path"], tables=[f for f in FRAMES if f != "sync"],
                                 columns=ANALYSIS_COLUMNS, sha256=self.source_sha256)


def samples_array(records: list[Any]) -> Any:
    """The per-instance samples of every range in one numpy structured array, with a ``variant`` column
    (the range's position); numeric columns only, so the file needs neither pickle nor pandas to read."""
    import numpy as np

    frames = [r.samples for r in records]
    names = list(frames[0].columns) if frames else []
    columns = {"variant": np.concatenate([np.full(len(f), i, np.int64) for i, f in enumerate(frames)] or
                                         [np.empty(0, np.int64)])}
    for name in names:
        columns[name] = np.concatenate([f[name].to_numpy() for f in frames])
        if columns[name].dtype.kind not in "iufb":
            raise ValueError(f"sample column {name} is not numeric")
    out = np.empty(len(columns["variant"]), dtype=[(n, c.dtype) for n, c in columns.items()])
    for n, c in columns.items():
        out[n] = c
    return out


def read_samples(path: Path, n_variants: int, sha256: str) -> list[dict[str, Any]]:
    """The per-range samples of an entry, checked against their SHA-256 and split by their ``variant``
    column: per range, a dict of numpy columns (what the run store inserts). numpy alone reads them:
    importing pandas would cost a stored cache hit more than everything else it does."""
    import io

    import numpy as np

    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise ValueError(f"{path} is not the file that was written")
    arr = np.load(io.BytesIO(raw), allow_pickle=False)
    bounds = np.searchsorted(arr["variant"], np.arange(n_variants + 1))
    names = [n for n in arr.dtype.names if n != "variant"]
    return [{n: arr[n][a:b] for n in names} for a, b in zip(bounds[:-1], bounds[1:])]


def _whole_npy(path: Path, size: int) -> bool:
    """The file has the size it was written with and starts as a .npy file does (its content is checked
    against its hash when it is read)."""
    with open(path, "rb") as fh:
        return fh.read(6) == b"\x93NUMPY" and os.fstat(fh.fileno()).st_size == size


class AnalysisCache:
    """A folder of analysis results, one sub-folder per key: ``analysis.json`` (the document, the
    timeline and the stored ranges' statistics) and ``samples.npy`` (their per-instance samples)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_result_cache_dir()

    def entry(self, key: str) -> Path:
        return self.root / key

    def seen(self, content_sha256: str) -> bool:
        """Whether a capture of this content was analysed (and stored) before."""
        return (self.root / "seen" / content_sha256).is_file()

    def mark_seen(self, content_sha256: str) -> None:
        try:
            (self.root / "seen").mkdir(parents=True, exist_ok=True)
            (self.root / "seen" / content_sha256).touch()
        except OSError:
            pass

    def get(self, key: str, source_path: str | os.PathLike, source_sha256: str,
            options: Any = None) -> CachedAnalysis | None:
        """The cached analysis for ``key`` (its capture named ``source_path``), else None. The samples file
        is checked by its size and magic bytes, and by its hash when it is read (only when a store asks)."""
        from profiler.capture.caches import discard, touch

        folder = self.entry(key)
        if not (folder / "analysis.json").is_file():
            return None
        try:
            entry = json.loads((folder / "analysis.json").read_text())
            doc = entry["document"]
            doc["capture"] = {**doc["capture"], "source_path": str(source_path)}  # the content may have moved
            if not isinstance(entry["timeline"], dict) or not _whole_npy(folder / "samples.npy",
                                                                         entry["samples_bytes"]):
                raise ValueError("incomplete entry")
            found = CachedAnalysis(doc, entry["timeline"], entry["variants"], folder / "samples.npy",
                                   entry["samples_sha256"], source_sha256, options)
        except Exception:  # damaged (disk full while another tool wrote, a user's edit) or evicted: a miss
            discard(folder)
            return None
        touch(folder)  # recency for the size cap's least-recently-used eviction
        return found

    def put(self, key: str, document: dict[str, Any], timeline: dict[str, Any], records: list[Any]) -> bool:
        """Store one result (``records``: its ``VariantRows`` per range); False (and nothing left behind)
        when it cannot be written."""
        import io

        import numpy as np

        from profiler.files import write_folder_atomically
        from profiler.findings import json_safe

        def fill(tmp: Path) -> None:
            variants = [r.variant for r in records]
            buf = io.BytesIO()
            np.save(buf, samples_array(records), allow_pickle=False)
            raw = buf.getvalue()
            (tmp / "samples.npy").write_bytes(raw)
            text = json.dumps({"document": document, "timeline": timeline, "variants": json_safe(variants),
                               "samples_bytes": len(raw), "samples_sha256": hashlib.sha256(raw).hexdigest()},
                              allow_nan=False)
            (tmp / "analysis.json").write_text(text)

        return write_folder_atomically(self.entry(key), "analysis.json", fill)


def analyze_path_cached(path: str | os.PathLike, options: Any = None, *, cache: Any = None,
                        results: Any = True) -> Any:
    """:func:`~profiler.capture.analyze.analyze_path` through the analysis cache: a
    :class:`CachedAnalysis` when this capture was analysed before with the same options and code, else
    the fresh :class:`~profiler.capture.analyze.AnalysisResult` (stored: ``cache == "stored"``).

    ``results``: an :class:`AnalysisCache`, True for the default one, False for none; ``cache``: the
    trace cache as in ``analyze_path`` (False turns both off, as does ``TRTPROF_TRACE_CACHE=0``).
    """
    from profiler.capture.options import AnalysisOptions

    options = options or AnalysisOptions()
    if results is not False and results is not None:
        found = analyze_cached(path, options, results=results, trace_cache=cache)
        if found is not None:
            return found
    from profiler.capture.analyze import analyze_path

    return analyze_path(path, options, cache=cache)


def analyze_cached(path: str | os.PathLike, options: Any, *, results: Any = True, trace_cache: Any = None) -> Any:
    """A :class:`CachedAnalysis` on a hit; on a miss the fresh analysis, stored; None where the cache does
    not apply (turned off, or the capture is not a file), for the caller to analyse plainly."""
    from profiler.capture import caches
    from profiler.capture.cache import TraceCache, cache_enabled, cache_key
    from profiler.capture.fingerprint import content_sha256

    p = Path(path)
    folder = p.is_dir()
    if folder:  # (the columnar checks import pandas: only for a folder, so a file's hit imports neither)
        from profiler.capture.columnar import check_folder, columnar_kind
    if trace_cache is False or not cache_enabled() or not (p.is_file() or (folder and columnar_kind(p))):
        return None
    cap = caches.cap_bytes()  # a bad TRTPROF_CACHE_MAX_GB fails before the analysis, not after it
    if folder:
        check_folder(p)  # a table file that is a device or too large, before the content hash reads it
    store = results if isinstance(results, AnalysisCache) else AnalysisCache()
    sha = content_sha256(p)
    key = result_key(sha, options)
    hit = store.get(key, p, sha, options)
    if hit is not None:
        return hit
    from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze
    from profiler.capture.cache import load_trace_cached
    from profiler.capture.trace import FRAMES

    # the frames are kept from the second analysis of a capture on (other options, other code): a
    # repeat of the first is answered here, and writing them costs a third of a first analysis
    tables = [f for f in FRAMES if f != "sync"]
    trace = load_trace_cached(p, tables=tables, columns=ANALYSIS_COLUMNS, cache=trace_cache, sha256=sha,
                              write=store.seen(sha), trim=False)
    result = analyze(trace, options)
    result.source_sha256 = sha
    doc = result.to_json()
    result.cache = "stored" if store.put(key, doc, result.timeline_json(doc), result.range_records()) else "off"
    written = [store.entry(key)] if result.cache == "stored" else []
    if trace.meta.get("cache") == "stored":  # the frames written above: kept with the result
        frames = trace_cache if isinstance(trace_cache, TraceCache) else TraceCache()
        written.append(frames.entry(cache_key(sha, tables, ANALYSIS_COLUMNS)))
    if result.cache == "stored":
        store.mark_seen(sha)
    caches.trim(written, cap)
    return result
