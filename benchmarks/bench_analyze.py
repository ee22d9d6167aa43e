#!/usr/bin/env python3
"""How fast does trtprof read and analyse a large nsys export, against the floor and the peers?

Scales a real capture (rows of every event table replicated with shifted timestamps and correlation
ids) to about ``--kernels`` kernels, then measures, each in its own subprocess (wall time and that
process's peak RSS, from ``os.wait4``):

- floor:        the SELECTs ``trtprof analyze`` issues (the columns it reads), fetched into Arrow by the fastest reader here
                (ADBC's SQLite driver, else sqlite3), nothing else; and the same with every SELECT on a thread
                and connection of its own, all at once (ADBC only);
- read_sql:     ``pandas.read_sql`` of the same SELECTs through sqlite3;
- load_trace:   ``profiler.capture.load_trace`` (frames, names, correlation join);
- analyze:      ``trtprof analyze CAPTURE --json OUT --no-store`` end to end (skipped with a note if
                the subcommand is not available);
- analyze with its tables read at once (``TRTPROF_TABLE_THREADS=auto``), beside the default (one after another);
- analyze with the trace cache: the first default run (reads the export, stores its frames) and a
  second one (reads the cache); the plain ``analyze`` row is ``--no-cache``;
- with ``--baseline-tree DIR``: ``analyze`` from another checkout (a worktree of an older commit) on
  the same files in the same run, the time and memory ratios against it, and whether their JSON is identical;
- the same ``load_trace`` and ``analyze`` on a 10x larger copy, for linearity;
- with ``nsys`` on PATH: ``nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,nvtx_gpu_proj_sum``
  and ``nsys analyze -r gpu_gaps,cuda_api_sync`` on the same file (the work trtprof analyze shares
  with them: kernel, API and NVTX summaries, GPU time projected on NVTX ranges, gaps, syncs), and at
  every size ``nsys stats -r cuda_gpu_kern_sum`` alone (nsys's cheapest report), with one line per size
  setting trtprof analyze's time and peak RSS beside it; without nsys, one line says they were skipped.

Prints one table. Needs only python3, the repository and pyarrow (ADBC optional).

    python3 benchmarks/bench_analyze.py                     # ~2.5 M kernels, 5 M API calls
    python3 benchmarks/bench_analyze.py --scale 0.02        # 2% of that, for a quick run
    python3 benchmarks/bench_analyze.py capture.sqlite --no-10x
    git worktree add /tmp/base eed82bf && python3 benchmarks/bench_analyze.py --scale 0.05 --baseline-tree /tmp/base
    python3 benchmarks/bench_analyze.py --scale 0.5 --no-10x --baseline-tree /tmp/base --rounds 5
    python3 benchmarks/bench_analyze.py --lean --only 10x --baseline-tree /tmp/base   # the targets' rows, 10x alone
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCALED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
                 "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                 "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS", "OSRT_API")
CORRELATED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
DEFAULT_KERNELS = 2_500_000


def default_source() -> Path:
    sample = ROOT / "sample_traces" / "launch_bound.sqlite"
    if sample.is_file():
        return sample
    shared = Path(os.environ.get("TRTPROF_SHARED", ROOT.parent / "shared")) / "fixtures" / "nsys"
    for name in ("v2026.2.1_nsysai_mfu_2gpu_before.sqlite",):
        if (shared / name).is_file():
            return shared / name
    samples = sorted((ROOT / "sample_traces").glob("*.sqlite"))
    if samples:
        return samples[0]
    raise SystemExit("no capture given and no sample trace or fixture found")


# ------------------------------------------------------------------------------------------------
# Scaling


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def scale_export(src: Path, dst: Path, reps: int) -> None:
    """Copy ``src`` to ``dst`` with every event table repeated ``reps`` times end to end in time.

    Repetition k shifts start/end by k x (the capture's span + 1 ms) and correlation ids by
    k x (their count), after renumbering them densely so they stay below 2**32.
    """
    tmp = dst.with_suffix(".tmp")
    if tmp.exists():
        tmp.unlink()
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA temp_store = MEMORY")
    tables = [t for t in SCALED_TABLES if t in _tables(con)]
    lo, hi = None, None
    for t in tables:
        a, b = con.execute(f"SELECT min(start), max(coalesce(end, start)) FROM {t}").fetchone()
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    if lo is None:
        raise SystemExit(f"{src} holds no events to scale")
    shift_ns = (hi - lo) + 1_000_000
    corr_tables = [t for t in CORRELATED if t in tables]
    con.execute("CREATE TEMP TABLE cmap (old INTEGER PRIMARY KEY, new INTEGER)")
    union = " UNION ".join(f"SELECT correlationId FROM {t} WHERE correlationId IS NOT NULL" for t in corr_tables)
    if union:
        con.execute(f"INSERT INTO cmap SELECT correlationId, row_number() OVER (ORDER BY correlationId) "
                    f"FROM ({union})")
    n_corr = con.execute("SELECT count(*) FROM cmap").fetchone()[0] + 1
    for t in tables:
        cols = _columns(con, t)
        con.execute(f"CREATE TEMP TABLE src_{t} AS SELECT * FROM {t} ORDER BY start")
        con.execute(f"DELETE FROM {t}")
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f"{c} + :shift")
            elif c == "correlationId" and t in corr_tables:
                exprs.append("(SELECT new FROM cmap WHERE old = correlationId) + :corr")
            else:
                exprs.append(c)
        sql = f"INSERT INTO {t} ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM temp.src_{t}"
        for k in range(reps):
            con.execute(sql, {"shift": k * shift_ns, "corr": k * n_corr})
        con.execute(f"DROP TABLE temp.src_{t}")
        con.commit()
    if "ANALYSIS_DETAILS" in _tables(con):
        con.execute("UPDATE ANALYSIS_DETAILS SET duration = duration + :d", {"d": (reps - 1) * shift_ns})
    con.commit()
    con.close()
    tmp.replace(dst)


def scaled(src: Path, reps: int, workdir: Path) -> Path:
    dst = workdir / f"{src.stem}_x{reps}.sqlite"
    if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
        t0 = time.perf_counter()
        scale_export(src, dst, reps)
        print(f"# built {dst} ({dst.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return dst


def counts(path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = _tables(con)
        out = {}
        for key, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("api", "CUPTI_ACTIVITY_KIND_RUNTIME"),
                           ("nvtx", "NVTX_EVENTS"), ("osrt", "OSRT_API")):
            out[key] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table in have else 0
        return out
    finally:
        con.close()


# ------------------------------------------------------------------------------------------------
# Steps (each runs in a child process: `bench_analyze.py --step NAME FILE`)


def loader_queries(path: Path) -> list[str]:
    """The SELECTs ``trtprof analyze`` issues on this file (its ``load_trace`` call: the frames and
    columns the analysis reads), recorded by running that load once."""
    from profiler.capture import loader
    from profiler.capture.analyze import ANALYSIS_COLUMNS
    from profiler.capture.trace import FRAMES

    recorded: list[str] = []
    original = loader.Export.batches

    def recording(self, sql, con=None):
        recorded.append(sql)
        return original(self, sql, con)

    loader.Export.batches = recording  # type: ignore[method-assign]
    saved = {k: os.environ.get(k) for k in ("TRTPROF_READ_THREADS", "TRTPROF_TABLE_THREADS")}
    os.environ.update(TRTPROF_READ_THREADS="1", TRTPROF_TABLE_THREADS="1")  # whole tables, one after another
    try:
        loader.load_trace(path, tables=[f for f in FRAMES if f != "sync"], columns=ANALYSIS_COLUMNS)
    finally:
        loader.Export.batches = original  # type: ignore[method-assign]
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return recorded


def step(name: str, path: Path, queries_file: Path | None) -> dict:
    t0 = time.perf_counter()
    info: dict = {}
    if name == "floor":
        queries = json.loads(queries_file.read_text())  # type: ignore[union-attr]
        try:
            import adbc_driver_sqlite.dbapi as dbapi
            con = dbapi.connect(f"file:{path.resolve()}?mode=ro")
            rows = 0
            for q in queries:
                cur = con.cursor()
                cur.execute(q)
                rows += cur.fetch_arrow_table().num_rows
                cur.close()
            con.close()
            info["reader"] = "adbc"
        except ImportError:
            import pyarrow as pa
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            rows = 0
            for q in queries:
                cur = con.execute(q)
                names = [d[0] for d in cur.description]
                data = list(zip(*cur.fetchall()))
                rows += pa.table({n: pa.array(c) for n, c in zip(names, data)} if data else {}).num_rows
            info["reader"] = "sqlite3"
        info["rows"] = rows
    elif name == "floor_at_once":  # the same SELECTs, one thread and connection each, all at once
        import adbc_driver_sqlite.dbapi as dbapi
        from concurrent.futures import ThreadPoolExecutor

        queries = json.loads(queries_file.read_text())  # type: ignore[union-attr]

        def one(q: str) -> int:
            con = dbapi.connect(f"file:{path.resolve()}?mode=ro")
            try:
                cur = con.cursor()
                cur.execute(q)
                return cur.fetch_arrow_table().num_rows
            finally:
                con.close()

        with ThreadPoolExecutor(len(queries)) as pool:
            info["rows"] = sum(pool.map(one, queries))
        info["reader"] = f"adbc, {len(queries)} threads"
    elif name == "read_sql":
        import pandas as pd
        queries = json.loads(queries_file.read_text())  # type: ignore[union-attr]
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        info["rows"] = sum(len(pd.read_sql(q, con)) for q in queries)
    elif name == "load_trace":
        from profiler.capture import load_trace
        tr = load_trace(path)
        info["rows"] = sum(len(df) for df in tr.frames().values())
        info["reader"] = tr.meta.get("reader")
    else:
        raise SystemExit(f"unknown step {name}")
    info["wall_s"] = time.perf_counter() - t0
    return info


def run_child(cmd: list[str], timeout_s: float | None = None, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> dict:
    """Run a command; its wall time and its own peak RSS (os.wait4), plus JSON it prints last."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env={**os.environ, **env} if env else None)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {timeout_s} s"}
    wall = time.perf_counter() - t0
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN only cumulatively, so the
    # children run through the helper below, which reports its own peak
    result: dict = {"wall_s": wall, "rc": proc.returncode, "stderr": err.strip().splitlines()[-3:]}
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                result.update(json.loads(line))
            except json.JSONDecodeError:
                pass
            break
    return result


MEASURE = r"""
import json, os, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
out, err = p.communicate()
status, ru = p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN)  # our only child
wall = time.perf_counter() - t0
sys.stderr.write(err.decode(errors="replace")[-2000:])
last = {}
for line in reversed(out.decode(errors="replace").strip().splitlines()):
    if line.startswith("{"):
        try:
            last = json.loads(line)
        except ValueError:
            pass
        break
print(json.dumps({"outer_wall_s": wall, "rc": status, "peak_rss_mb": ru.ru_maxrss / 1024,
                  "cpu_s": ru.ru_utime + ru.ru_stime, "inner": last}))
"""


def measured(cmd: list[str], timeout_s: float | None, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> dict:
    """``cmd`` run under a fresh Python parent that has no other children, so RUSAGE_CHILDREN's
    ru_maxrss is exactly this command's peak RSS. ``cwd``: where ``python -m profiler`` finds its code."""
    res = run_child([sys.executable, "-c", MEASURE, *cmd], timeout_s, cwd, env)
    inner = res.get("inner") or {}
    return {
        "wall_s": res.get("outer_wall_s"),  # the whole process: interpreter, imports, work
        "inner_s": inner.get("wall_s"),
        "peak_rss_mb": res.get("peak_rss_mb"),
        "cpu_s": res.get("cpu_s"),
        "rc": res.get("rc"),
        "info": inner,
        "stderr": res.get("stderr", []),
        "error": res.get("error"),
    }


def rounds(pair: list[tuple], n: int, timeout_s: float | None, size: str) -> None:
    """The baseline and trtprof analyze commands ``n`` times each, alternating (so both see the same
    drift of a shared host), then one line per command (median wall time and peak RSS, with their
    ranges) and the ratios of the medians."""
    import statistics

    got: dict[str, list[dict]] = {label: [] for label, *_ in pair}
    for i in range(n):
        for label, cmd, _note, opts in (pair if i % 2 == 0 else pair[::-1]):
            print(f"# {size} {label}, round {i + 1} of {n} ...", file=sys.stderr, flush=True)
            m = measured(cmd, timeout_s, **opts)
            if not m.get("rc") and not m.get("error"):
                got[label].append(m)
    med = {}
    for label, ms in got.items():
        if not ms:
            print(f"{size} {label}: every round failed")
            return
        w = [m["wall_s"] for m in ms]
        r = [m["peak_rss_mb"] for m in ms]
        med[label] = (statistics.median(w), statistics.median(r))
        print(f"{size} {label:<17} {len(ms)} rounds: wall median {med[label][0]:.2f} s (range {min(w):.2f}-{max(w):.2f}), "
              f"peak RSS median {med[label][1]:.0f} MB (range {min(r):.0f}-{max(r):.0f})")
    (bw, br), (tw, tr) = med["baseline analyze"], med["trtprof analyze"]
    print(f"{size} trtprof analyze vs the baseline over {n} alternating rounds: {tw / bw:.2f}x the median time, "
          f"{tr / br:.2f}x the median peak memory", flush=True)


KERN_SUM = "nsys stats kern_sum"
AT_ONCE = "floor, tables at once"
TABLES_AT_ONCE = "analyze, tables at once"


def kern_sum_lines(results: list[dict], sizes: list[str]) -> list[str]:
    """Per size: trtprof analyze's wall time and peak RSS beside ``nsys stats -r cuda_gpu_kern_sum``'s on
    the same file, and their ratios (the targets: faster, and peak RSS <= 1 GB at the largest size)."""
    lines = []
    for size in sizes:
        row = {r["what"]: r for r in results if r["size"] == size}
        ours, theirs = row.get("trtprof analyze", {}), row.get(KERN_SUM, {})
        if ours.get("note") or theirs.get("note") or not ours.get("wall_s") or not theirs.get("wall_s"):
            lines.append(f"{size}: trtprof analyze vs {KERN_SUM}: not compared "
                         f"({ours.get('note') or theirs.get('note') or 'a run is missing'})")
            continue
        lines.append(f"{size}: trtprof analyze {ours['wall_s']:.2f} s, peak {ours['peak_rss_mb']:.0f} MB; "
                     f"nsys stats -r cuda_gpu_kern_sum {theirs['wall_s']:.2f} s, peak {theirs['peak_rss_mb']:.0f} MB: "
                     f"{ours['wall_s'] / theirs['wall_s']:.2f}x the time, "
                     f"{ours['peak_rss_mb'] / theirs['peak_rss_mb']:.2f}x the peak memory (target < 1x the time)")
    return lines


def floor_lines(results: list[dict], sizes: list[str]) -> list[str]:
    """Per size: trtprof analyze against the ADBC floors (serial, and every table at once), the same
    analysis with its tables read one after another, and the CPUs this ran on."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    lines = []
    for size in sizes:
        row = {r["what"]: r for r in results if r["size"] == size and r.get("wall_s") and not r.get("note", "").startswith(("exit", "timed"))}
        ours, floor, once = row.get("trtprof analyze"), row.get("floor (Arrow)"), row.get(AT_ONCE)
        if not (ours and floor):
            continue
        line = (f"{size} on {cpus} CPUs: trtprof analyze {ours['wall_s']:.2f} s = {ours['wall_s'] / floor['wall_s']:.2f}x "
                f"the serial ADBC floor ({floor['wall_s']:.2f} s; target <= 1.2x on 16 cores, <= 2.0x on 2)")
        if once:
            line += f", {ours['wall_s'] / once['wall_s']:.2f}x the floor with its tables at once ({once['wall_s']:.2f} s)"
        pool = row.get(TABLES_AT_ONCE)
        if pool:
            line += (f"; with its tables read at once (TRTPROF_TABLE_THREADS=auto) {pool['wall_s']:.2f} s, peak "
                     f"{pool['peak_rss_mb']:.0f} MB against {ours['peak_rss_mb']:.0f} MB one after another")
        lines.append(line)
    return lines


def analyze_available() -> bool:
    try:
        import importlib.util
        return importlib.util.find_spec("profiler.cli.analyze") is not None
    except Exception:
        return False


# ------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("capture", nargs="?", type=Path, help="an nsys SQLite export (default: a sample trace)")
    ap.add_argument("--kernels", type=int, default=DEFAULT_KERNELS, help="target kernel rows at scale 1")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of --kernels (e.g. 0.05 for a quick run)")
    ap.add_argument("--no-10x", action="store_true", help="skip the 10x-size linearity rows")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "trtprof-bench")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measured step")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--queries", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="also write every number here")
    ap.add_argument("--rounds", type=int, default=1, metavar="N",
                    help="with --baseline-tree: run the baseline and trtprof analyze rows N times, alternating, "
                         "and compare their medians (one run of each is noise on a shared host)")
    ap.add_argument("--lean", action="store_true",
                    help="only the rows the targets need: the floors (serial and tables at once), load_trace, the "
                         "baseline, trtprof analyze (tables at once and one after another) and nsys's kern_sum")
    ap.add_argument("--only", choices=("1x", "10x"), help="measure this size alone (the files are still built)")
    ap.add_argument("--skip", action="append", default=[], metavar="ROW", help="leave out this row (its label)")
    ap.add_argument("--first", action="append", default=[], metavar="ROW", help="measure this row first (repeatable)")
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="another checkout of trtprof (e.g. a git worktree of an older commit): its analyze is "
                         "timed on the same files in the same run, and the ratio printed")
    args = ap.parse_args()

    if args.step:
        print(json.dumps(step(args.step, args.capture, args.queries)))
        return

    src = (args.capture or default_source()).resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    base = counts(src)
    if not base["kernels"]:
        raise SystemExit(f"{src} has no kernels to scale")
    target = max(1, int(args.kernels * args.scale))
    reps = max(1, math.ceil(target / base["kernels"]))
    files = {"1x": scaled(src, reps, args.workdir)}
    if not args.no_10x:
        files["10x"] = scaled(src, reps * 10, args.workdir)

    me = [sys.executable, str(Path(__file__).resolve())]
    results: list[dict] = []
    identical: dict[str, str] = {}
    have_analyze = analyze_available()
    nsys = shutil.which("nsys")
    for size, path in files.items():
        if args.only and size != args.only:
            continue
        c = counts(path)
        mb = path.stat().st_size / 1e6
        qfile = args.workdir / f"{path.stem}.queries.json"
        qfile.write_text(json.dumps(loader_queries(files["1x"])))  # the same SELECTs at every size
        plan: list[tuple[str, list[str] | None, str, dict]] = []
        plan += [("floor (Arrow)", me + ["--step", "floor", "--queries", str(qfile), str(path)], "", {}),
                 (AT_ONCE, me + ["--step", "floor_at_once", "--queries", str(qfile), str(path)], "", {})]
        if size == "1x" and not args.lean:
            plan.append(("pandas.read_sql", me + ["--step", "read_sql", "--queries", str(qfile), str(path)], "", {}))
        if size == "1x" or not args.lean:
            plan.append(("load_trace", me + ["--step", "load_trace", str(path)], "", {}))
        if have_analyze:
            out_json = args.workdir / f"{path.stem}.analysis.json"
            base_cmd = [sys.executable, "-m", "profiler", "analyze", str(path), "--json", str(out_json), "--no-store"]
            if args.baseline_tree:  # its own code: python -m profiler from that folder
                base_json = out_json.with_suffix(".baseline.json")
                plan.append(("baseline analyze", [*base_cmd[:-2], str(base_json), "--no-store"], "",
                             {"cwd": args.baseline_tree.resolve(),
                              "env": {"TRTPROF_TRACE_CACHE": "0"}}))
            plan.append(("trtprof analyze", base_cmd + ["--no-cache"], "", {}))
            plan.append((TABLES_AT_ONCE, base_cmd + ["--no-cache"], "", {"env": {"TRTPROF_TABLE_THREADS": "auto"}}))
            # the trace cache, in a folder of its own: the first default run stores, the second reads it
            cache = {"env": {"TRTPROF_CACHE_DIR": tempfile.mkdtemp(prefix="cache-", dir=args.workdir)}}
            if not args.lean:
                plan += [("analyze, storing cache", base_cmd, "", cache), ("analyze, cache hit", base_cmd, "", cache)]
        else:
            plan.append(("trtprof analyze", None, "skipped: profiler.cli.analyze is not in this checkout", {}))
        if nsys and size == "1x" and not args.lean:
            # the flags the sample-trace capture script uses with nsys 2025.3; a fresh output folder
            # each run, so nsys never has to ask about overwriting
            peer_dir = Path(tempfile.mkdtemp(prefix="nsys-peers-", dir=args.workdir))
            plan += [("nsys stats kern+api+nvtx+proj", [nsys, "stats", "-r",
                                                        "cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,nvtx_gpu_proj_sum",
                                                   "--format", "csv", "--force-export", "false", "--output",
                                                   str(peer_dir / "stats"), str(path)], "", {}),
                     ("nsys analyze gaps+sync", [nsys, "analyze", "-r", "gpu_gaps,cuda_api_sync", "--format", "csv",
                                                 "--force-export", "false", "--output", str(peer_dir / "analyze"),
                                                 str(path)], "", {})]
        if nsys:  # the cheapest report nsys has, at every size: the figure trtprof analyze is held to
            kern_dir = Path(tempfile.mkdtemp(prefix="nsys-kern-", dir=args.workdir))
            plan.append((KERN_SUM, [nsys, "stats", "-r", "cuda_gpu_kern_sum", "--format", "csv", "--force-export",
                                    "false", "--output", str(kern_dir / "kern"), str(path)], "", {}))
        plan = [p for p in plan if p[0] not in args.skip]
        if args.first:  # these rows first (the ones that must not be lost to a time limit)
            plan.sort(key=lambda p: args.first.index(p[0]) if p[0] in args.first else len(args.first))
        pair = [p for p in plan if p[0] in ("baseline analyze", "trtprof analyze") and p[1] is not None]
        if args.rounds > 1 and len(pair) == 2:
            rounds(pair, args.rounds, args.timeout, size)
        for label, cmd, note, opts in plan:
            row = {"size": size, "what": label, "file_mb": mb, **c}
            if cmd is None:
                row["note"] = note
            else:
                print(f"# {size} {label} ...", file=sys.stderr, flush=True)
                m = measured(cmd, args.timeout, **opts)
                row.update({k: m[k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "rc")})
                if m.get("error") or m.get("rc"):
                    row["note"] = m.get("error") or f"exit {m['rc']}: {' '.join(m['stderr'])[-160:]}"
                elif m["info"].get("reader"):
                    row["note"] = f"reader={m['info']['reader']}"
            results.append(row)
            print(f"# {size} {label}: {row.get('wall_s') or float('nan'):.2f} s, peak "
                  f"{row.get('peak_rss_mb') or float('nan'):.0f} MB {row.get('note', '')}", file=sys.stderr, flush=True)
        if have_analyze and args.baseline_tree:
            same = (out_json.with_suffix(".baseline.json").read_bytes() == out_json.read_bytes()
                    if out_json.with_suffix(".baseline.json").exists() and out_json.exists() else None)
            identical[size] = "not compared (a run failed)" if same is None else ("identical" if same else "DIFFERENT")

    floor = {r["size"]: r.get("wall_s") for r in results if r["what"] == "floor (Arrow)"}
    rs = next((r.get("wall_s") for r in results if r["what"] == "pandas.read_sql"), None)
    print()
    print(f"source: {src}  replicated x{reps}" + ("" if args.no_10x else f" and x{reps * 10}"))
    print(f"{'size':<5} {'what':<26} {'kernels':>10} {'api':>10} {'nvtx':>9} {'osrt':>9} {'MB':>7} "
          f"{'wall s':>8} {'cpu s':>7} {'x floor':>8} {'read_sql/x':>10} {'peak MB':>8}  note")
    for r in results:
        w = r.get("wall_s")
        xf = f"{w / floor[r['size']]:.2f}" if w and floor.get(r["size"]) else ""
        xr = f"{rs / w:.1f}" if w and rs and r["size"] == "1x" else ""
        print(f"{r['size']:<5} {r['what']:<26} {r['kernels']:>10} {r['api']:>10} {r['nvtx']:>9} {r['osrt']:>9} "
              f"{r['file_mb']:>7.0f} {w if w is not None else float('nan'):>8.2f} "
              f"{r.get('cpu_s') if r.get('cpu_s') is not None else float('nan'):>7.2f} {xf:>8} {xr:>10} "
              f"{r.get('peak_rss_mb') or float('nan'):>8.0f}  {r.get('note', '')}")
    for what in ("load_trace", "trtprof analyze", "floor (Arrow)"):
        one = next((r.get("wall_s") for r in results if r["size"] == "1x" and r["what"] == what), None)
        ten = next((r.get("wall_s") for r in results if r["size"] == "10x" and r["what"] == what), None)
        if one and ten:
            print(f"linearity {what}: 10x rows took {ten / one:.1f}x the time (target <= 11x)")
    peers = [r.get("wall_s") for r in results if r["size"] == "1x" and r["what"].startswith("nsys ")
             and r["what"] != KERN_SUM and not r.get("note")]
    ours = next((r.get("wall_s") for r in results if r["size"] == "1x" and r["what"] == "trtprof analyze"
                 and not r.get("note")), None)
    for size in files:
        mine = next((r.get("wall_s") for r in results if r["size"] == size and r["what"] == "trtprof analyze"), None)
        theirs = [r for r in results if r["size"] == size and r["what"] == "baseline analyze" and r.get("wall_s")]
        if mine and theirs and not theirs[0].get("note"):
            b = theirs[0]
            mrss = next((r.get("peak_rss_mb") for r in results if r["size"] == size and r["what"] == "trtprof analyze"))
            print(f"{size}: trtprof analyze vs the baseline tree ({args.baseline_tree}): {mine / b['wall_s']:.2f}x the "
                  f"time, {(mrss or 0) / (b.get('peak_rss_mb') or float('nan')):.2f}x the peak memory")
    for size, word in identical.items():
        print(f"{size}: the --json of trtprof analyze (its last run) and of the baseline tree: {word}")
    for line in floor_lines(results, list(files)):
        print(line)
    if nsys:
        for line in kern_sum_lines(results, list(files)):
            print(line)
    else:
        print("nsys not on PATH: skipped")
    if len(peers) == 2 and all(peers) and ours:
        print(f"trtprof analyze (everything) {ours:.1f} s vs nsys stats + nsys analyze {sum(peers):.1f} s: "
              f"{sum(peers) / ours:.1f}x (target >= 3x)")
    if args.json:
        args.json.write_text(json.dumps({"source": str(src), "reps": reps, "results": results}, indent=1))


if __name__ == "__main__":
    main()
