"""Same-configuration sweeps compared back to back: does `trtprof compare` stay quiet on noise?

    python3 benchmarks/repeat_pairs.py MODEL [--backend onnxruntime|cuda] [--runs 6] [--repeat 3]
        [--precision fp32] [--cuda-graph off] [--shape NAME:DIMS ...]

Runs ``--runs`` identical sweeps (each with ``--repeat`` process-level repeats) into a fresh store and
compares each with the next (``--runs - 1`` back-to-back pairs), then prints one line per pair and
variant: the within-run verdict, the final verdict, and the between-run evidence. A correct gate
reports no regression and no improvement on any pair. Each sweep is a separate process, as in CI.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's profiler, not an installed one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--backend", default="onnxruntime")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--cuda-graph", default="off")
    ap.add_argument("--duration", default="0.3")
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from profiler.compare import compare_runs
    from profiler.store import Store

    work = Path(args.out or tempfile.mkdtemp(prefix="trtprof-pairs-"))
    work.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{work / 'pairs.db'}"
    for i in range(args.runs):
        cmd = [sys.executable, "-m", "profiler", "--db", db, "sweep", args.model, "--backend", args.backend,
               "--precision", args.precision, "--cuda-graph", args.cuda_graph, "--repeat", str(args.repeat),
               "--duration", args.duration, "--warmup", "100", "--no-layers", "--label", f"run{i}",
               "--out", str(work / f"run{i}"), "--cache-dir", str(work / "cache")]
        for s in args.shape:
            cmd += ["--shape", s]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        print(f"run{i}: sweep exit {proc.returncode}" + (f": {proc.stderr.strip().splitlines()[-1]}"
                                                         if proc.returncode else ""), flush=True)
    store = Store.open(db)
    print(f"{'pair':<12} {'variant':<24} {'within run':<12} {'verdict':<12} {'ratio':>7}  between runs")
    changes = 0
    for i in range(args.runs - 1):
        out = compare_runs(store, f"run{i}", f"run{i + 1}")
        for v in out["variants"]:
            within = v.get("verdict_within_run") or v.get("verdict")
            noise = (v.get("noise") or {}).get("summary") or v.get("reason", "")
            ratio = v.get("median_ratio")
            print(f"run{i}->run{i + 1:<4} {v['key'][:24]:<24} {within:<12} {v['verdict']:<12} "
                  f"{ratio if ratio is None else format(ratio, '.3f'):>7}  {noise}")
            changes += v["verdict"] in ("regression", "improvement")
    print(f"{changes} change(s) called on {args.runs - 1} same-configuration pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
