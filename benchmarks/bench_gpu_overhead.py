#!/usr/bin/env python3
"""The harness's own cost per query on a GPU, against bare cuda-python loops doing the same GPU work.

For each model (the bundled default and, with --models-dir, the rapidocr cls/rec ones), on one stream.
Bare loops (no timing at all):

  bare_plain    cudaGraphLaunch(plain) + cudaStreamSynchronize; ``plain`` is the model's graph with
                nothing added (the baseline of the 3% target)
  bare_nodes    the same with the graph that also holds two event-record nodes (one exec)
  bare_alt      the two event-node graphs the harness alternates between, launched alternately
  bare_query    H2D copies + launch(plain) + D2H copies + sync: a query's work with transfers on
  bare_enqueue  the compiled steps enqueued eagerly + sync

The harness (``run_queries``; per query: host clock, events, a QueryTiming):

  nodes_nt      transfers off, compute timed by the event nodes inside the graph (two graphs alternate)
  rec_nt        transfers off, compute timed by two host-side event records around one graph
  nodes_on      transfers on (H2D/D2H events recorded on the stream), event nodes for the compute
  rec_on        transfers on, host-side records around the compute
  perquery_nt   nodes_nt through the generic loop over ``ctx.query()`` (the path before ``run_loop``)
  eager, eager_nt  without a graph (the generic loop)

Each row runs blocks of --iterations queries; a round runs one block of every row (order rotated each
round) and --rounds rounds are made, so slow drift of the GPU clock falls on every row alike. Reported:
the median over rounds of each row's wall time per query, the median of the per-round paired
differences against the matching bare loop (cost_us) and ratios against bare_plain (vs_plain%), and
the median host gap between a query's end and the next one's start. Targets (issue): the graph
variant within 3% of the bare graph-launch loop and under 2 us of harness cost per query.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _wall_us(ts) -> float:
    return (ts[-1].end_ns - ts[0].start_ns) / len(ts) / 1e3


def _gap_us(ts) -> float:
    return statistics.median(b.start_ns - a.end_ns for a, b in zip(ts, ts[1:])) / 1e3


def bench_model(path: str, shapes: dict, args: argparse.Namespace) -> dict:
    import torch

    from profiler import cuda
    from profiler.backends.base import ExecutionContext, VariantSpec
    from profiler.backends.cuda_torch import CudaTorchBackend
    from profiler.harness.runner import HarnessConfig, run_queries

    be = CudaTorchBackend(node_ranges="off")
    spec = VariantSpec("fp32", None, 1, False, tuple((k, tuple(v)) for k, v in shapes.items()))
    eng = be.build(path, spec)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in eng.inputs}

    def context(graph: bool, nodes: bool = True, transfers: bool = True):
        c = eng.create_context(0)
        if not transfers:
            c.set_transfers(False)
        c.set_inputs(feeds)
        if graph:
            be.graph_events = nodes
            why = c.enable_cuda_graph()
            be.graph_events = True
            if why:
                raise SystemExit(f"{Path(path).name}: graph fallback: {why}")
            assert c._graph_events == nodes
        return c

    ctx = {"nodes_nt": context(True, True, False), "rec_nt": context(True, False, False),
           "nodes_on": context(True, True, True), "rec_on": context(True, False, True),
           "perquery_nt": context(True, True, False),
           "eager": context(False), "eager_nt": context(False, transfers=False)}
    perq = ctx["perquery_nt"]
    perq.run_loop = lambda *a: ExecutionContext.run_loop(perq, *a)  # the generic loop over query()

    rt = cuda.runtime()
    launch, sync = rt.cudaGraphLaunch, rt.cudaStreamSynchronize
    plain_ctx = ctx["rec_on"]  # one graph without event nodes; its stream, copies and buffers
    plain, ps = plain_ctx._graph_execs[0], plain_ctx.stream.handle
    nodes_ctx = ctx["nodes_nt"]
    ex0, ex4, ns = nodes_ctx._graph_execs[0], nodes_ctx._graph_execs[4], nodes_ctx.stream.handle
    assert ex0 != ex4 and plain_ctx._graph_execs[4] == plain

    def timed(body, n: int) -> float:
        t0 = time.perf_counter_ns()
        body(n)
        return (time.perf_counter_ns() - t0) / n / 1e3

    def bare_plain(n: int) -> None:
        for _ in range(n):
            launch(plain, ps)
            sync(ps)

    def bare_nodes(n: int) -> None:
        for _ in range(n):
            launch(ex0, ns)
            sync(ns)

    def bare_alt(n: int) -> None:
        for _ in range(n // 2):
            launch(ex0, ns)
            sync(ns)
            launch(ex4, ns)
            sync(ns)

    cp = rt.cudaMemcpyAsync
    h2d = [(d, h, nb, plain_ctx._k_h2d, ps) for d, h, nb in plain_ctx._h2d_args]
    d2h = [(h, d, nb, plain_ctx._k_d2h, ps) for h, d, nb in plain_ctx._graph_d2h[0]]

    def bare_query(n: int) -> None:
        for _ in range(n):
            for a in h2d:
                cp(*a)
            launch(plain, ps)
            for a in d2h:
                cp(*a)
            sync(ps)

    eager_ctx = ctx["eager_nt"]
    es, ext, prog = eager_ctx.stream.handle, eager_ctx.ext, eng.program
    plan = prog.plan(None)

    def bare_enqueue(n: int) -> None:
        ins = eager_ctx.dev_inputs
        with torch.cuda.stream(ext):
            for _ in range(n):
                prog.forward(ins, plan)
                sync(es)

    bare = {"bare_plain": bare_plain, "bare_nodes": bare_nodes, "bare_alt": bare_alt, "bare_query": bare_query,
            "bare_enqueue": bare_enqueue}
    eager_rows = {"bare_enqueue", "eager", "eager_nt"}
    n = args.iterations
    ne = max(n // 20, 10)
    rows = list(bare) + list(ctx)
    walls: dict[str, list[float]] = {r: [] for r in rows}
    gaps: dict[str, list[float]] = {r: [] for r in ctx}
    compute: dict[str, list[float]] = {r: [] for r in ctx}

    def run_row(r: str) -> None:
        k = ne if r in eager_rows else n
        if r in bare:
            walls[r].append(timed(bare[r], k))
            return
        ts = run_queries([ctx[r]], HarnessConfig(iterations=k, duration_s=0.0, warmup_ms=0.0)).timings
        assert len(ts) == k, (r, len(ts))
        walls[r].append(_wall_us(ts))
        gaps[r].append(_gap_us(ts))
        compute[r].append(statistics.median(t.compute_ms for t in ts) * 1e3)

    for r in rows:  # warm-up: every path once, then dropped
        run_row(r)
    for v in (*walls.values(), *gaps.values(), *compute.values()):
        v.clear()
    # the outputs of every harness path match the eager query's (the graphs compute what the model does)
    ref = ctx["eager"].outputs()
    for r, c in ctx.items():
        got = c.outputs()
        worst = max(float(np.max(np.abs(got[k] - ref[k]))) for k in ref)
        assert worst < 1e-3, f"{r}: outputs differ from the eager query's by {worst}"
    for i in range(args.rounds):
        for r in rows[i % len(rows):] + rows[:i % len(rows)]:
            run_row(r)

    def paired(a: str, b: str) -> float:
        return statistics.median(x - y for x, y in zip(walls[a], walls[b]))

    def ratio(a: str, b: str) -> float:
        return 100.0 * (statistics.median(x / y for x, y in zip(walls[a], walls[b])) - 1.0)

    med = {r: statistics.median(v) for r, v in walls.items()}
    match = {"nodes_nt": "bare_plain", "rec_nt": "bare_plain", "perquery_nt": "bare_plain",
             "nodes_on": "bare_query", "rec_on": "bare_query", "eager": "bare_enqueue", "eager_nt": "bare_enqueue"}
    rec = {"model": Path(path).name, "steps": eng.info["steps"], "iterations": n, "rounds": args.rounds,
           "median_us": med, "spread_us": {r: (min(v), max(v)) for r, v in walls.items()},
           "gap_us": {r: statistics.median(v) for r, v in gaps.items()},
           "compute_us": {r: statistics.median(v) for r, v in compute.items()},
           "cost_us": {r: paired(r, b) for r, b in match.items()},
           "vs_match_pct": {r: ratio(r, b) for r, b in match.items()},
           "vs_plain_pct": {r: ratio(r, "bare_plain") for r in ("nodes_nt", "rec_nt", "perquery_nt", "nodes_on",
                                                                  "rec_on", "bare_nodes", "bare_alt", "bare_query")},
           "event_nodes_us": paired("bare_nodes", "bare_plain"), "alternation_us": paired("bare_alt", "bare_nodes")}
    for c in ctx.values():
        c.close()
    eng.close()
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir")
    ap.add_argument("--iterations", type=int, default=400, help="queries per block (eager rows: a twentieth)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_gpu_path import _model_list

    results = []
    for path, shapes in _model_list(args.models_dir):
        if "det" in Path(path).name:
            continue  # GPU-bound at 640x640: overhead is invisible there
        results.append(bench_model(path, shapes, args))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    for r in results:
        m, c, p, g, cu = r["median_us"], r["cost_us"], r["vs_plain_pct"], r["gap_us"], r["compute_us"]
        print(f"{r['model']}  ({r['steps']} steps; {r['rounds']} rounds of {r['iterations']} queries; us per query)")
        print(f"  bare: plain {m['bare_plain']:.2f}  nodes {m['bare_nodes']:.2f} (+{r['event_nodes_us']:.2f} for two event"
              f" nodes)  alt {m['bare_alt']:.2f} ({r['alternation_us']:+.2f} alternating)  query {m['bare_query']:.2f}"
              f"  enqueue {m['bare_enqueue']:.1f}")
        print(f"  {'harness row':<12} {'wall':>9} {'vs bare':>12} {'cost_us':>8} {'vs_plain%':>9} {'gap_us':>7} {'compute':>9}")
        for row, base in (("nodes_nt", "plain"), ("rec_nt", "plain"), ("perquery_nt", "plain"), ("nodes_on", "query"),
                          ("rec_on", "query"), ("eager", "enqueue"), ("eager_nt", "enqueue")):
            vp = f"{p[row]:9.2f}" if row in p else f"{'':9}"
            print(f"  {row:<12} {m[row]:9.2f} {base:>7}{r['vs_match_pct'][row]:+5.1f}% {c[row]:8.2f} {vp} "
                  f"{g[row]:7.2f} {cu[row]:9.2f}")
    print("(wall: median over rounds; cost_us: median of per-round differences against the matching bare loop;"
          " vs_plain%: against bare_plain; gap_us: host time between one query's end and the next's start;"
          " compute: the harness's event-timed compute)")


if __name__ == "__main__":
    main()
