#!/usr/bin/env python3
"""What the columnar trace cache costs on a first analysis and saves on the next ones.

Scales a real capture the way ``bench_analyze.py`` does (rows of every event table replicated with
shifted timestamps), then times, each in its own subprocess (wall time and peak RSS):

- cold, no cache:   ``trtprof analyze --no-cache`` (the export read from SQLite);
- cold, storing:    ``trtprof analyze`` with an empty cache (read, analyse, and write the entry);
- warm:             ``trtprof analyze`` again (the entry read back instead of the export);

and checks that the three JSON documents are byte-identical. Prints one table.

    python3 benchmarks/bench_trace_cache.py --kernels 250000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import bench_analyze as ba  # noqa: E402  (the scaler and the measured-subprocess helper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path, default=None)
    ap.add_argument("--kernels", type=int, default=250_000, help="scale the capture to about this many kernels")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each step (the median is shown)")
    args = ap.parse_args()
    src = args.capture or ba.default_source()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = ba.counts(src)["kernels"] or 1
        path = ba.scaled(src, max(1, round(args.kernels / base)), work)
        size_mb = path.stat().st_size / 1e6
        cache = work / "cache"
        rows, digests = [], {}
        for step, extra, clear in (("cold, no cache", ["--no-cache"], False), ("cold, storing", [], True),
                                   ("warm (cache hit)", [], False)):
            runs = []
            for i in range(args.repeats):
                if clear:
                    shutil.rmtree(cache, ignore_errors=True)
                out = work / f"{step[:4]}{i}.json"
                cmd = [sys.executable, "-m", "profiler", "analyze", str(path), "--no-store", "--json", str(out), *extra]
                os.environ["TRTPROF_CACHE_DIR"] = str(cache)
                res = ba.measured(cmd, None)
                if res.get("rc") != 0:
                    sys.exit(f"{step}: trtprof analyze failed: {res.get('stderr') or res.get('error')}")
                runs.append(res)
                digests.setdefault(step, set()).add(hashlib.sha256(out.read_bytes()).hexdigest())
            runs.sort(key=lambda r: r["wall_s"])
            med = runs[len(runs) // 2]
            rows.append((step, med["wall_s"], med["peak_rss_mb"]))
        cold = rows[0][1]
        print(f"capture: {path.name} {size_mb:.0f} MB, {ba.counts(path)['kernels']:,} kernels; "
              f"median of {args.repeats} runs each")
        print(f"{'step':<20} {'wall s':>8} {'x cold':>7} {'peak RSS MB':>12}")
        for step, wall, rss in rows:
            print(f"{step:<20} {wall:8.2f} {wall / cold:7.2f} {rss:12.0f}")
        same = len(set().union(*digests.values())) == 1
        print(f"JSON byte-identical across the three paths: {'yes' if same else 'NO'}")
        print()
        print("in this process (no interpreter start-up or imports), median of the repeats:")
        for step, seconds in in_process(path, work / "cache-inproc", args.repeats):
            print(f"  {step:<34} {seconds:6.2f} s")


def in_process(path: Path, cache_dir: Path, repeats: int) -> list[tuple[str, float]]:
    import time

    from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze
    from profiler.capture.cache import TraceCache, cache_key, file_sha256
    from profiler.capture.loader import load_trace
    from profiler.capture.trace import FRAMES

    tables = [f for f in FRAMES if f != "sync"]
    store = TraceCache(cache_dir)
    times: dict[str, list[float]] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        value = fn()
        times.setdefault(name, []).append(time.perf_counter() - t0)
        return value

    for _ in range(repeats):
        trace = timed("load_trace (SQLite)", lambda: load_trace(path, tables=tables, columns=ANALYSIS_COLUMNS))
        digest = timed("content hash (SHA-256)", lambda: file_sha256(path))
        key = cache_key(digest, tables, ANALYSIS_COLUMNS)
        shutil.rmtree(cache_dir, ignore_errors=True)
        timed("cache write (Parquet, zstd)", lambda: store.put(key, trace))
        timed("cache read", lambda: store.get(key, path))
        timed("analyze (frames -> findings)", lambda: analyze(trace))
    return [(k, sorted(v)[len(v) // 2]) for k, v in times.items()]


if __name__ == "__main__":
    main()
