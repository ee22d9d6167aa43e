#!/usr/bin/env python3
"""What the caches cost on a first analysis and save on the next ones.

Scales a real capture the way ``bench_analyze.py`` does (rows of every event table replicated with
shifted timestamps), then times, each in its own subprocess (wall time and peak RSS):

- cold, no cache:   ``trtprof analyze --no-cache`` (the export read from SQLite and analysed);
- cold, storing:    ``trtprof analyze`` with an empty cache (read, analyse, store the analysis);
- second, storing frames: the analysis entry removed, the capture known (read, analyse, store the
                    frames and the analysis: what a second analysis with other options costs);
- frames cached:    the analysis entry removed again (cached frames read and analysed again);
- analysis cached:  ``trtprof analyze`` again (the analysis read back: no loading, no analysis);
- imports only:     ``python -c 'import profiler.cli.analyze'``, the floor of any run;

and checks that every JSON document is byte-identical. Prints one table.

Then a cache hit with the run store on (``trtprof analyze``'s default: the run, its ranges' samples and
findings are still recorded) beside the same hit with ``--no-store``; with ``--baseline DIR`` (another
checkout of trtprof, e.g. ``git archive main | tar -x -C DIR``) the stored hit is also timed with that
code, the two alternating run by run, so the ratio is measured side by side.

    python3 benchmarks/bench_trace_cache.py --kernels 250000
    python3 benchmarks/bench_trace_cache.py --kernels 250000 --baseline /tmp/trtprof-main
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

def _clear(cache: Path, what: str | None) -> None:
    """Before a run: "all" of the cache, the "analyses" entries (keeping which captures were seen, so the
    frames are written and then read), or nothing."""
    if what == "all":
        shutil.rmtree(cache, ignore_errors=True)
    elif what == "analyses" and (cache / "analyses").is_dir():
        for entry in (cache / "analyses").iterdir():
            if entry.name != "seen":
                shutil.rmtree(entry, ignore_errors=True)


STEPS = (  # (name, extra arguments, what is removed from the cache before each run)
    ("cold, no cache", ["--no-cache"], None),
    ("cold, storing", [], "all"),            # stores the analysis (a first analysis keeps no frames)
    ("second, storing frames", [], "analyses"),  # a capture seen before: its frames are written too
    ("frames cached", [], "analyses"),       # the frames read back, analysed again
    ("analysis cached", [], None),           # the analysis read back
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path, default=None)
    ap.add_argument("--kernels", type=int, default=250_000, help="scale the capture to about this many kernels")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each step (the median is shown)")
    ap.add_argument("--store", action="store_true", help="also record each run in a run store (the default "
                    "of trtprof analyze; the benchmark passes --no-store otherwise)")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="another trtprof checkout: time its stored cache hit beside this one's")
    args = ap.parse_args()
    src = args.capture or ba.default_source()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = ba.counts(src)["kernels"] or 1
        path = ba.scaled(src, max(1, round(args.kernels / base)), work)
        size_mb = path.stat().st_size / 1e6
        cache = work / "cache"
        os.environ["TRTPROF_CACHE_DIR"] = str(cache)
        store = ["--db", str(work / "runs.db")] if args.store else ["--no-store"]
        rows, digests = [], {}
        for step, extra, clear in STEPS:
            runs = []
            for i in range(args.repeats):
                _clear(cache, clear)
                if step.startswith("second"):
                    shutil.rmtree(cache / "traces", ignore_errors=True)
                out = work / f"{step[:4]}{i}.json"
                res = ba.measured([sys.executable, "-m", "profiler", "analyze", str(path), *store,
                                   "--json", str(out), *extra], None)
                if res.get("rc") != 0:
                    sys.exit(f"{step}: trtprof analyze failed: {res.get('stderr') or res.get('error')}")
                runs.append(res)
                digests.setdefault(step, set()).add(hashlib.sha256(out.read_bytes()).hexdigest())
            runs.sort(key=lambda r: r["wall_s"])
            med = runs[len(runs) // 2]
            rows.append((step, med["wall_s"], med["peak_rss_mb"]))
        floor = sorted((ba.measured([sys.executable, "-c", "import profiler.cli.analyze"], None)
                        for _ in range(args.repeats)), key=lambda r: r["wall_s"])[args.repeats // 2]
        rows.append(("imports only", floor["wall_s"], floor["peak_rss_mb"]))
        cold = rows[0][1]
        print(f"capture: {path.name} {size_mb:.0f} MB, {ba.counts(path)['kernels']:,} kernels; "
              f"{'stored in a run store' if args.store else '--no-store'}, --json; median of {args.repeats} runs each")
        print(f"{'step':<24} {'wall s':>8} {'x cold':>7} {'peak RSS MB':>12}")
        for step, wall, rss in rows:
            print(f"{step:<24} {wall:8.2f} {wall / cold:7.2f} {rss:12.0f}")
        same = len(set().union(*digests.values())) == 1
        print(f"JSON byte-identical across the {len(STEPS)} paths: {'yes' if same else 'NO'}")
        print()
        stored_hits(path, work, args.baseline, args.repeats)
        print()
        print("in this process (no interpreter start-up or imports), median of the repeats:")
        for step, seconds in in_process(path, work / "cache-inproc", args.repeats):
            print(f"  {step:<34} {seconds:6.2f} s")


def stored_hits(path: Path, work: Path, baseline: Path | None, repeats: int) -> None:
    """A cache hit recorded in a run store, beside the same hit with --no-store (and, given a baseline
    checkout, its stored hit), the commands alternating run by run; one line each, medians."""
    db = work / "hits.db"
    runs = [("hit, --no-store", ROOT, ["--no-store"]), ("hit, stored in a run store", ROOT, ["--db", str(db)])]
    if baseline is not None:
        runs.append(("hit, stored (baseline code)", baseline.resolve(), ["--db", str(work / "hits-base.db")]))
    for _, code, _ in runs:  # each code stores its own entry first (its key holds a digest of its source)
        res = ba.measured([sys.executable, "-m", "profiler", "analyze", str(path), "--no-store"], None, cwd=code)
        if res.get("rc") != 0:
            sys.exit(f"priming {code}: trtprof analyze failed: {res.get('stderr') or res.get('error')}")
    got: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
    for i in range(repeats):
        for name, code, extra in (runs if i % 2 == 0 else runs[::-1]):
            res = ba.measured([sys.executable, "-m", "profiler", "analyze", str(path), *extra,
                               "--json", str(work / "hit.json")], None, cwd=code)
            if res.get("rc") != 0:
                sys.exit(f"{name}: trtprof analyze failed: {res.get('stderr') or res.get('error')}")
            got[name].append(res)
    med = {name: sorted(rs, key=lambda r: r["wall_s"])[len(rs) // 2] for name, rs in got.items()}
    ref = med["hit, --no-store"]["wall_s"]
    print(f"cache hits, alternating, median of {repeats} runs each:")
    print(f"{'step':<30} {'wall s':>8} {'x no-store':>10} {'peak RSS MB':>12}")
    for name, m in med.items():
        print(f"{name:<30} {m['wall_s']:8.2f} {m['wall_s'] / ref:10.2f} {m['peak_rss_mb']:12.0f}")
    if baseline is not None:
        ours, base = med["hit, stored in a run store"]["wall_s"], med["hit, stored (baseline code)"]["wall_s"]
        print(f"stored hit: this code {ours:.2f} s, baseline {base:.2f} s: {base / ours:.2f}x faster")


def in_process(path: Path, cache_dir: Path, repeats: int) -> list[tuple[str, float]]:
    import time

    from profiler.capture.analyze import ANALYSIS_COLUMNS, analyze
    from profiler.capture import fingerprint
    from profiler.capture.cache import TraceCache, cache_key, file_sha256
    from profiler.capture.fingerprint import content_sha256
    from profiler.capture.result_cache import AnalysisCache

    fingerprint.RACY_NS = 0  # the scaled copy was just written: remember its hash at once
    from profiler.capture.loader import load_trace
    from profiler.capture.trace import FRAMES

    tables = [f for f in FRAMES if f != "sync"]
    store = TraceCache(cache_dir)
    results = AnalysisCache(cache_dir / "a")
    times: dict[str, list[float]] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        value = fn()
        times.setdefault(name, []).append(time.perf_counter() - t0)
        return value

    content_sha256(path)  # the memo, as every run after the first finds it
    for _ in range(repeats):
        trace = timed("load_trace (SQLite)", lambda: load_trace(path, tables=tables, columns=ANALYSIS_COLUMNS))
        digest = timed("content hash (SHA-256)", lambda: file_sha256(path))
        timed("content hash (remembered)", lambda: content_sha256(path))
        key = cache_key(digest, tables, ANALYSIS_COLUMNS)
        shutil.rmtree(cache_dir, ignore_errors=True)
        timed("trace cache write (Parquet, zstd)", lambda: store.put(key, trace))
        timed("trace cache read", lambda: store.get(key, path))
        result = timed("analyze (frames -> findings)", lambda: analyze(trace))
        doc = result.to_json()
        timed("timeline (for --json, --report)", lambda: result.timeline_json(doc))
        records = result.range_records()
        shutil.rmtree(cache_dir / "a", ignore_errors=True)
        timed("analysis cache write", lambda: results.put("k", doc, result.timeline, records))
        timed("analysis cache read", lambda: results.get("k", path, digest))
    return [(k, sorted(v)[len(v) // 2]) for k, v in times.items()]


if __name__ == "__main__":
    main()
