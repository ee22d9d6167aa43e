"""The harness's own cost per iteration, against a bare loop of the same backend calls, in one run.

    python benchmarks/bench_harness.py [--rounds 7]

Cases:
- ``null``: a context whose query returns a ready-made QueryTiming, so the loop is all harness;
- ``onnxruntime``: the ONNX Runtime CPU backend on a tiny model (one Add of 16 floats), the cheapest
  real query there is, where harness overhead would show most.

Each round times the bare loop (``for _ in range(n): ctx.query()`` keeping the results, which any
measurement must) and the harness (``run_queries`` with warm-up 0, duration 0, n iterations) back
to back; the table gives medians over rounds. Target: harness overhead under 5 us per iteration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

from profiler.backends.base import ExecutionContext, QueryTiming, VariantSpec  # noqa: E402
from profiler.harness import HarnessConfig, run_queries  # noqa: E402


class NullContext(ExecutionContext):
    """Returns one prepared timing: measures the loop around the query, not the query."""

    def __init__(self) -> None:
        self._t = QueryTiming(0, 1, 0.0, 0.001)

    def set_inputs(self, feeds):
        pass

    def outputs(self):
        return {}

    def query(self) -> QueryTiming:
        return self._t


def tiny_model(path: str) -> str:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def bare(ctx: ExecutionContext, n: int) -> float:
    """Seconds for n bare queries (results kept, as a measurement must)."""
    out = []
    append, query = out.append, ctx.query
    t0 = time.perf_counter()
    for _ in range(n):
        append(query())
    return time.perf_counter() - t0


def harness(ctx: ExecutionContext, n: int) -> float:
    cfg = HarnessConfig(iterations=n, duration_s=0.0, warmup_ms=0.0)
    t0 = time.perf_counter()
    m = run_queries([ctx], cfg, key="bench")
    dt = time.perf_counter() - t0
    assert len(m.timings) == n
    return dt


def bare_session(sess, feeds, n: int) -> float:
    """Seconds for n plain InferenceSession.run calls (no timing at all): the backend wrapper's baseline."""
    run = sess.run
    t0 = time.perf_counter()
    for _ in range(n):
        run(None, feeds)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--null-iterations", type=int, default=200_000)
    ap.add_argument("--ort-iterations", type=int, default=20_000)
    args = ap.parse_args()

    from profiler.backends.onnxruntime import OnnxRuntimeBackend, cpu_name

    with tempfile.TemporaryDirectory() as tmp:
        backend = OnnxRuntimeBackend(device="cpu", intra_op_threads=1)
        engine = backend.build(tiny_model(os.path.join(tmp, "add.onnx")), VariantSpec("fp32"))
        ort_ctx = engine.create_context()
        feeds = {"x": np.ones((1, 16), np.float32)}
        ort_ctx.set_inputs(feeds)
        cases = [("null", NullContext(), args.null_iterations), ("onnxruntime", ort_ctx, args.ort_iterations)]
        rows = []
        s: list[float] = []
        sess = ort_ctx.session
        for name, ctx, n in cases:
            bare(ctx, n // 10)  # warm caches and the allocator
            harness(ctx, n // 10)
            b, h = [], []
            for _ in range(args.rounds):  # interleaved, so load changes hit every method alike
                if ctx is ort_ctx:
                    s.append(bare_session(sess, feeds, n) / n * 1e6)
                b.append(bare(ctx, n) / n * 1e6)
                h.append(harness(ctx, n) / n * 1e6)
            rows.append((name, n, statistics.median(b), statistics.median(h),
                         statistics.median([y - x for x, y in zip(b, h)])))
        wrapper_us = statistics.median([x - y for x, y in zip(b, s)])

    print(f"harness overhead per iteration ({cpu_name()}, {os.cpu_count()} cores, Python "
          f"{sys.version.split()[0]}, NVTX off (no tool attached); medians of "
          f"{args.rounds} rounds)")
    print(f"{'case':<12} {'iterations':>10} {'bare us/iter':>13} {'harness us/iter':>16} {'overhead us/iter':>17}")
    for name, n, b, h, d in rows:
        print(f"{name:<12} {n:>10} {b:>13.3f} {h:>16.3f} {d:>17.3f}")
    print(f"\nONNX Runtime session.run alone: {statistics.median(s):.3f} us/iter; the backend's timing wrapper "
          f"(two clock reads and a QueryTiming) adds {wrapper_us:.3f} us/iter")
    worst = max(r[4] for r in rows)
    print(f"target < 5 us per iteration: {'met' if worst < 5 else 'NOT met'} (worst {worst:.3f} us)")


if __name__ == "__main__":
    main()
