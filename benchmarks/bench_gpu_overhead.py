#!/usr/bin/env python3
"""The harness's own cost per query on a GPU, against bare cuda-python loops doing the same GPU work.

For each model (the bundled default and, with --models-dir, the rapidocr cls/rec ones), on one stream.
Bare loops (no timing at all), one query in flight:

  bare_plain    cudaGraphLaunch(plain) + cudaStreamSynchronize; ``plain`` is the model's graph with
                nothing added
  bare_nodes    the same with the graph that also holds two event-record nodes (one exec)
  bare_alt      the two event-node graphs the harness alternates between, launched alternately
  bare_query    H2D copies + launch(plain) + D2H copies + sync: a query's work with transfers on
  bare_enqueue  the compiled steps enqueued eagerly + sync

and two in flight (trtexec's default, and the harness's): each iteration enqueues, records a
non-timing event, then waits for the previous iteration's event: bare_pipe (the plain graph),
bare_query_pipe, bare_enqueue_pipe; bare_stream launches the plain graph back to back and waits once;
bare_pipe_timed is bare_pipe plus the two timing events the harness records around each launch
(recorded, never read): the harness's GPU work without the harness.

The harness (``run_queries``; per query: host clock, events, a QueryTiming), each context one query in
flight and two ("+ov"):

  nodes_nt      transfers off, compute timed by the event nodes inside the graph (two graphs alternate)
  rec_nt        transfers off, compute timed by two host-side event records around one graph
  nodes_on      transfers on (H2D/D2H events recorded on the stream), event nodes for the compute
  rec_on        transfers on, host-side records around the compute
  perquery_nt   nodes_nt through the generic loop over ``ctx.query()`` (the path before ``run_loop``)
  eager, eager_nt  without a graph

Each row runs blocks of --iterations queries; a round runs one block of every row (order rotated each
round) and --rounds rounds are made, so slow drift of the GPU clock falls on every row alike. Reported:
the median over rounds of each row's wall time per query, the median of the per-round paired
differences against the matching bare loop (cost_us), ratios against bare_plain and bare_stream, and
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
    from profiler.backends.cuda_ref import CudaTorchBackend
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
            be.graph_events = False
            if why:
                raise SystemExit(f"{Path(path).name}: graph fallback: {why}")
            assert c.timed.events_in_enqueue == nodes
        return c

    ctx = {"nodes_nt": context(True, True, False), "rec_nt": context(True, False, False),
           "nodes_on": context(True, True, True), "rec_on": context(True, False, True),
           "perquery_nt": context(True, True, False),
           "eager": context(False), "eager_nt": context(False, transfers=False)}
    perq = ctx["perquery_nt"]
    perq.run_loop = lambda *a: ExecutionContext.run_loop(perq, *a)  # the generic loop over query()

    rt = cuda.runtime()
    launch, sync, rec, wait = rt.cudaGraphLaunch, rt.cudaStreamSynchronize, rt.cudaEventRecord, rt.cudaEventSynchronize
    # Each bare loop runs the very graph instance (and stream) of the harness rows it is compared with:
    # two captures of one model can differ by a few microseconds (their activation buffers differ).
    plain_ctx = ctx["rec_nt"]  # one graph without event nodes
    plain, ps = plain_ctx._graphs[0].exec_handle, plain_ctx.stream.handle
    q_ctx = ctx["rec_on"]  # the same, with its copies
    qplain, qs = q_ctx._graphs[0].exec_handle, q_ctx.stream.handle
    nodes_ctx = ctx["nodes_nt"]
    ex0, ex4, ns = nodes_ctx._graphs[0].exec_handle, nodes_ctx._graphs[1].exec_handle, nodes_ctx.stream.handle
    assert ex0 != ex4 and plain_ctx._graphs[1].exec_handle == plain and q_ctx._graphs[1].exec_handle == qplain
    marks = [cuda.Event(timing=False) for _ in range(2)]  # what the bare two-in-flight loops wait on
    mk = (marks[0].handle, marks[1].handle)

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

    def bare_stream(n: int) -> None:
        for _ in range(n):
            launch(plain, ps)
        sync(ps)

    def two_in_flight(enqueue, s, ends, n: int) -> None:
        """Iteration i: enqueue(i % 2), record ends[i % 2], wait for ends[(i - 1) % 2]; then the last."""
        k = 0
        enqueue(0)
        rec(ends[0], s)
        for _ in range(n - 1):
            k ^= 1
            enqueue(k)
            rec(ends[k], s)
            wait(ends[k ^ 1])
        wait(ends[k])

    def bare_pipe(n: int) -> None:
        two_in_flight(lambda k: launch(plain, ps), ps, mk, n)

    timers = [cuda.Event() for _ in range(4)]  # two timing events per iteration, alternating pairs
    starts, ends = (timers[0].handle, timers[2].handle), (timers[1].handle, timers[3].handle)

    def bare_pipe_timed(n: int) -> None:
        """bare_pipe with the harness's GPU work: two timing events around each launch (never read)."""
        def enqueue(k: int) -> None:
            rec(starts[k], ps)
            launch(plain, ps)

        two_in_flight(enqueue, ps, ends, n)

    cp = rt.cudaMemcpyAsync
    h2d = [(d, h, nb, q_ctx.timed.h2d_kind, qs) for d, h, nb in q_ctx.timed.h2d]
    d2h = [(h, d, nb, q_ctx.timed.d2h_kind, qs) for h, d, nb in q_ctx._graphs[0].copies_out]

    def one_query() -> None:
        for a in h2d:
            cp(*a)
        launch(qplain, qs)
        for a in d2h:
            cp(*a)

    def bare_query(n: int) -> None:
        for _ in range(n):
            one_query()
            sync(qs)

    def bare_query_pipe(n: int) -> None:
        two_in_flight(lambda k: one_query(), qs, mk, n)

    eager_ctx = ctx["eager_nt"]
    es, ext, prog = eager_ctx.stream.handle, eager_ctx.ext, eng.program
    plan = prog.plan(None)

    def bare_enqueue(n: int) -> None:
        ins = eager_ctx.dev_inputs
        with torch.cuda.stream(ext):
            for _ in range(n):
                prog.forward(ins, plan)
                sync(es)

    def bare_enqueue_pipe(n: int) -> None:
        ins = eager_ctx.dev_inputs
        with torch.cuda.stream(ext):
            two_in_flight(lambda k: prog.forward(ins, plan), es, mk, n)

    bare = {"bare_plain": bare_plain, "bare_nodes": bare_nodes, "bare_alt": bare_alt, "bare_stream": bare_stream,
            "bare_pipe": bare_pipe, "bare_pipe_timed": bare_pipe_timed, "bare_query": bare_query,
            "bare_query_pipe": bare_query_pipe,
            "bare_enqueue": bare_enqueue, "bare_enqueue_pipe": bare_enqueue_pipe}
    # harness rows: a context, one query in flight or two ("+ov", the default)
    harness = {name: (name, False) for name in ctx}
    harness.update({f"{name}+ov": (name, True) for name in ctx if name != "perquery_nt"})
    match = {}
    for row, (name, ov) in harness.items():
        base = "bare_enqueue" if name.startswith("eager") else "bare_query" if name.endswith("_on") else "bare_plain"
        if ov:
            base = {"bare_plain": "bare_pipe", "bare_query": "bare_query_pipe",
                    "bare_enqueue": "bare_enqueue_pipe"}[base]
        match[row] = base
    eager_rows = {r for r in [*bare, *harness] if "enqueue" in r or r.startswith("eager")}
    n = args.iterations
    ne = max(n // 20, 10)
    rows = list(bare) + list(harness)
    walls: dict[str, list[float]] = {r: [] for r in rows}
    gaps: dict[str, list[float]] = {r: [] for r in harness}
    compute: dict[str, list[float]] = {r: [] for r in harness}
    in_flight: dict[str, int] = {}

    def run_row(r: str) -> None:
        k = ne if r in eager_rows else n
        if r in bare:
            walls[r].append(timed(bare[r], k))
            return
        name, ov = harness[r]
        m = run_queries([ctx[name]], HarnessConfig(iterations=k, duration_s=0.0, warmup_ms=0.0, overlap=ov))
        ts = m.timings
        assert len(ts) == k, (r, len(ts))
        in_flight[r] = m.in_flight
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
    graph_rows = [r for r in harness if not r.startswith("eager")]
    rec = {"model": Path(path).name, "steps": eng.info["steps"], "iterations": n, "rounds": args.rounds,
           "median_us": med, "spread_us": {r: (min(v), max(v)) for r, v in walls.items()},
           "match": match, "in_flight": in_flight,
           "gap_us": {r: statistics.median(v) for r, v in gaps.items()},
           "compute_us": {r: statistics.median(v) for r, v in compute.items()},
           "cost_us": {r: paired(r, b) for r, b in match.items()},
           "vs_match_pct": {r: ratio(r, b) for r, b in match.items()},
           "vs_plain_pct": {r: ratio(r, "bare_plain") for r in graph_rows + ["bare_nodes", "bare_alt", "bare_pipe",
                                                                           "bare_stream", "bare_query"]},
           "vs_stream_pct": {r: ratio(r, "bare_stream") for r in graph_rows + ["bare_pipe"]},
           "event_nodes_us": paired("bare_nodes", "bare_plain"), "alternation_us": paired("bare_alt", "bare_nodes"),
           "timing_events_us": paired("bare_pipe_timed", "bare_pipe"),
           "harness_vs_timed_us": paired("rec_nt+ov", "bare_pipe_timed"),
           "harness_vs_timed_pct": ratio("rec_nt+ov", "bare_pipe_timed")}
    for c in ctx.values():
        c.close()
    for e in marks + timers:
        e.destroy()
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
        m, c, g, cu = r["median_us"], r["cost_us"], r["gap_us"], r["compute_us"]
        p, st = r["vs_plain_pct"], r["vs_stream_pct"]
        print(f"{r['model']}  ({r['steps']} steps; {r['rounds']} rounds of {r['iterations']} queries; us per query)")
        print(f"  bare, one in flight: plain {m['bare_plain']:.2f}  nodes {m['bare_nodes']:.2f} "
              f"({r['event_nodes_us']:+.2f} for two event nodes)  alt {m['bare_alt']:.2f} ({r['alternation_us']:+.2f} "
              f"alternating)  query {m['bare_query']:.2f}  enqueue {m['bare_enqueue']:.1f}")
        print(f"  bare, two in flight: pipe {m['bare_pipe']:.2f}  stream (launch only) {m['bare_stream']:.2f}  "
              f"query {m['bare_query_pipe']:.2f}  enqueue {m['bare_enqueue_pipe']:.1f}")
        print(f"  two timing events per query (bare_pipe_timed {m['bare_pipe_timed']:.2f}): "
              f"{r['timing_events_us']:+.2f} us against bare_pipe; the harness (rec_nt+ov) against that loop: "
              f"{r['harness_vs_timed_us']:+.2f} us ({r['harness_vs_timed_pct']:+.2f}%)")
        print(f"  {'harness row':<15} {'wall':>9} {'vs matching bare':>24} {'cost_us':>8} {'vs_plain%':>9} "
              f"{'vs_stream%':>10} {'gap_us':>7} {'compute':>9}")
        for row in r["match"]:
            vp = f"{p[row]:9.2f}" if row in p else f"{'':9}"
            vs = f"{st[row]:10.2f}" if row in st else f"{'':10}"
            print(f"  {row:<15} {m[row]:9.2f} {r['match'][row]:>17}{r['vs_match_pct'][row]:+6.2f}% "
                  f"{c[row]:8.2f} {vp} {vs} "
                  f"{g[row]:7.2f} {cu[row]:9.2f}")
    print("(wall: median over rounds; '+ov': two queries in flight (the default), against the bare two-in-flight"
          " loops; cost_us: median of per-round differences against the matching bare loop; vs_plain%: against"
          " bare_plain (launch + sync); vs_stream%: against launching back to back with one sync at the end;"
          " gap_us: host time between one query's end and the next's start (negative with two in flight);"
          " compute: the harness's event-timed compute)")


if __name__ == "__main__":
    main()
