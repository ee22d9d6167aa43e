#!/usr/bin/env python3
"""Is the per-layer table linear in the number of layers? The vectorised table against the per-layer one.

Builds TensorRT-shaped captures in memory (``tests.capture_builders.many_layers``: one enqueue range per
inference, ``--layers`` distinct layer ranges in each, 1-3 kernels per layer), builds each one's series
table and unit once, then times, alternating in the same process and taking the best of ``--rounds``:

- new: ``profiler.capture.layer_table.layer_table`` (one grouping of every layer's rows and kernels);
- old: ``tests.layer_table_reference.layer_table_per_layer`` (the pandas aggregate per layer it replaced).

Checks that both give the same JSON text, and prints one row per size: layers, old s, new s, old/new, and
each one's time per layer (flat per-layer time = linear). Use ``--no-old`` for sizes where the old table
takes too long. Times on a loaded machine move; the ratio, measured side by side, is the figure to quote.

    python3 benchmarks/bench_layer_table.py                     # 1,000 and 10,000 layers
    python3 benchmarks/bench_layer_table.py --layers 100 1000 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def inputs(n_layers: int, inferences: int):
    """(series table, unit, kernel names) of a synthetic capture with ``n_layers`` layers."""
    from profiler.capture import series as S
    from profiler.capture import unit as U
    from tests.capture_builders import many_layers

    trace = many_layers(n_layers, inferences)
    table = S.build_series(trace)
    return table, U.build_unit(table), S.factor(trace.kernels, "name", small=True)


def best_of(fn, rounds: int) -> tuple[float, object]:
    """(fastest wall time in s, the last result) of ``rounds`` calls of ``fn``."""
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1000, 10000], help="distinct layer ranges per capture")
    ap.add_argument("--inferences", type=int, default=3, help="enqueue ranges per capture (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each table per size; the fastest counts")
    ap.add_argument("--no-old", action="store_true", help="time only the vectorised table")
    args = ap.parse_args()
    if min(args.layers) < 1 or args.inferences < 2 or args.rounds < 1:
        ap.error("--layers >= 1, --inferences >= 2 and --rounds >= 1")
    from profiler.capture import series as S
    from profiler.capture.layer_table import layer_table
    from tests.layer_table_reference import layer_table_per_layer

    print(f"{'layers':>8} {'kernels':>8} {'old s':>9} {'new s':>9} {'old/new':>8} {'old us/layer':>13} "
          f"{'new us/layer':>13}  same")
    for n in args.layers:
        table, unit, names = inputs(n, args.inferences)
        kernels = int((table.activity.kind == S.KERNEL).sum())
        new_s, new = best_of(lambda: layer_table(table, unit, names), args.rounds)
        if args.no_old:
            print(f"{n:>8} {kernels:>8} {'-':>9} {new_s:>9.3f} {'-':>8} {'-':>13} {new_s / n * 1e6:>13.1f}  -")
            continue
        old_s, old = best_of(lambda: layer_table_per_layer(table, unit, names), args.rounds)
        same = json.dumps(new) == json.dumps(old)
        print(f"{n:>8} {kernels:>8} {old_s:>9.3f} {new_s:>9.3f} {old_s / new_s:>8.1f} {old_s / n * 1e6:>13.1f} "
              f"{new_s / n * 1e6:>13.1f}  {'yes' if same else 'NO'}", flush=True)
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
