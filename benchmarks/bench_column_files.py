#!/usr/bin/env python3
"""Column files against memory: ``trtprof analyze`` of a large export with its columns in memory and in
mapped files (``profiler/capture/spill.py``), side by side in one run.

For each size (``--reps``, repetitions of the default sample trace as ``bench_analyze.py`` scales it) it runs
``python -m profiler analyze FILE --json OUT --no-store --no-cache`` with ``TRTPROF_SPILL_ROWS=0`` (memory)
and ``TRTPROF_SPILL_ROWS=1`` (files), alternating for ``--rounds`` rounds, each in a fresh process whose
peak RSS is its own (``bench_analyze.measured``). It prints one row per size and mode (median wall and CPU
time, median peak RSS, their ranges), the files/memory ratios, the time per million rows across sizes, and
whether the two modes wrote the same JSON byte for byte.

    python3 benchmarks/bench_column_files.py --reps 239 2390          # the #17 sizes (x2390 = 103 M rows, 5.2 GB)
    python3 benchmarks/bench_column_files.py --reps 24 240 --rounds 3 # a quick run
"""

from __future__ import annotations

import argparse
import filecmp
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import counts, default_source, measured, scaled  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODES = (("memory", "0"), ("files", "1"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, nargs="+", default=[239, 2390], help="sizes, in repetitions of the capture")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per size")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "trtprof-bench")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"{'size':<7} {'mode':<7} {'rows':>11} {'MB':>6} {'rounds':>6} {'wall s':>8} {'cpu s':>8} {'peak MB':>8}"
          f"  ranges (wall s; peak MB)")
    per_row: dict[str, list[tuple[int, float]]] = {m: [] for m, _ in MODES}
    for reps in args.reps:
        path = scaled(default_source(), reps, args.workdir)
        c = counts(path)
        rows = sum(v for k, v in c.items() if k in ("kernels", "api", "nvtx", "osrt"))
        got: dict[str, list[dict]] = {m: [] for m, _ in MODES}
        for i in range(args.rounds):
            for mode, rows_env in (MODES if i % 2 == 0 else MODES[::-1]):
                out = args.workdir / f"x{reps}.{mode}.json"
                print(f"# x{reps} {mode}, round {i + 1} of {args.rounds} ...", file=sys.stderr, flush=True)
                m = measured([sys.executable, "-m", "profiler", "analyze", str(path), "--json", str(out),
                              "--no-store", "--no-cache"], args.timeout, cwd=ROOT, env={"TRTPROF_SPILL_ROWS": rows_env})
                if m.get("rc") or m.get("error"):
                    print(f"# x{reps} {mode} failed: {m.get('error') or m.get('stderr')}", file=sys.stderr)
                    continue
                got[mode].append(m)
        med = {}
        for mode, ms in got.items():
            if not ms:
                print(f"x{reps:<6} {mode:<7} every round failed")
                continue
            w, cpu, r = ([x[k] for x in ms] for k in ("wall_s", "cpu_s", "peak_rss_mb"))
            med[mode] = (statistics.median(w), statistics.median(cpu), statistics.median(r))
            per_row[mode].append((rows, med[mode][0]))
            print(f"x{reps:<6} {mode:<7} {rows:>11} {path.stat().st_size / 1e6:>6.0f} {len(ms):>6} {med[mode][0]:>8.2f} "
                  f"{med[mode][1]:>8.2f} {med[mode][2]:>8.0f}  {min(w):.2f}-{max(w):.2f}; {min(r):.0f}-{max(r):.0f}")
        if len(med) == 2:
            same = filecmp.cmp(args.workdir / f"x{reps}.memory.json", args.workdir / f"x{reps}.files.json", shallow=False)
            (mw, mc, mr), (fw, fc, fr) = med["memory"], med["files"]
            print(f"x{reps:<6} files / memory: {fw / mw:.2f}x the wall time, {fc / mc:.2f}x the CPU time, "
                  f"{fr / mr:.2f}x the peak RSS; JSON {'byte-identical' if same else 'DIFFERENT'}", flush=True)
    for mode, pts in per_row.items():
        if len(pts) >= 2:
            (r0, w0), (r1, w1) = pts[0], pts[-1]
            print(f"{mode}: {r1 / r0:.1f}x the rows in {w1 / w0:.1f}x the wall time "
                  f"({w0 / r0 * 1e6:.2f} -> {w1 / r1 * 1e6:.2f} s per million rows)")


if __name__ == "__main__":
    main()
