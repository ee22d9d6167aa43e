#!/usr/bin/env python3
"""The harness's own cost per query on a GPU, against bare loops doing the same GPU work.

For each model (the bundled default and, with --models-dir, the rapidocr ones), on one stream:

  bare launch      cudaGraphLaunch(exec) + cudaStreamSynchronize, nothing else (the same graph the backend
                   captured; launched through cuda-python)
  bare query       H2D copies + cudaGraphLaunch + D2H copies + sync (what a query does, without timing)
  harness graph    profiler.harness.run_queries over the cuda backend's context with its CUDA graph
                   (events around H2D/compute/D2H, host clock, QueryTiming per query)
  bare enqueue     the compiled steps enqueued eagerly + sync (no copies, no timing)
  harness eager    run_queries over the context without a graph

and with transfers off (ctx.set_transfers(False), trtexec's --noDataTransfers):

  harness graph nt run_queries over a graph context with no copies (compute events inside the graph),
                   against the bare launch loop (launch + sync per iteration)
  harness eager nt run_queries over an eager context with no copies, against the bare enqueue loop

Each loop runs --iterations queries after a warm-up; the loops alternate and repeat --repeats times;
medians of the per-iteration wall time are reported. Targets: harness graph within 3% of the bare
graph-launch loop, and under 2 us of harness cost per query (harness graph - bare query; with transfers
off, harness graph nt - bare launch).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    from profiler import cuda
    from profiler.backends.base import VariantSpec
    from profiler.backends.cuda_torch import CudaTorchBackend
    from profiler.harness.runner import HarnessConfig, run_queries

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_gpu_path import _model_list

    be = CudaTorchBackend(node_ranges="off")
    results = []
    rt = cuda.runtime()
    for path, shapes in _model_list(args.models_dir):
        if "det" in Path(path).name:
            continue  # GPU-bound at 640x640: overhead is invisible there
        spec = VariantSpec("fp32", None, 1, False, tuple((k, tuple(v)) for k, v in shapes.items()))
        eng = be.build(path, spec)
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in eng.inputs}
        eager_ctx = eng.create_context(0)
        eager_ctx.set_inputs(feeds)
        graph_ctx = eng.create_context(0)
        graph_ctx.set_inputs(feeds)
        reason = graph_ctx.enable_cuda_graph()
        be.graph_events = False  # a second context timing the graph with host-side event records
        host_ev_ctx = eng.create_context(0)
        host_ev_ctx.set_inputs(feeds)
        reason = reason or host_ev_ctx.enable_cuda_graph()
        be.graph_events = True
        graph_nt_ctx = eng.create_context(0)
        graph_nt_ctx.set_transfers(False)
        graph_nt_ctx.set_inputs(feeds)
        reason = reason or graph_nt_ctx.enable_cuda_graph()
        eager_nt_ctx = eng.create_context(0)
        eager_nt_ctx.set_transfers(False)
        eager_nt_ctx.set_inputs(feeds)
        if reason:
            print(Path(path).name, "graph fallback:", reason)
            continue
        s = graph_ctx.stream.handle
        ex = graph_ctx._graph_execs[0]
        launch, sync = rt.cudaGraphLaunch, rt.cudaStreamSynchronize
        n = args.iterations

        def bare_launch(n: int) -> float:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                launch(ex, s)
                sync(s)
            return (time.perf_counter_ns() - t0) / n / 1e3

        ns = graph_nt_ctx.stream.handle
        ex0, ex4 = graph_nt_ctx._graph_execs[0], graph_nt_ctx._graph_execs[4]

        def bare_launch_ev(n: int) -> float:
            """The harness's own two graphs (event-record nodes inside), alternating, + sync: no timing."""
            t0 = time.perf_counter_ns()
            for _ in range(n // 2):
                launch(ex0, ns)
                sync(ns)
                launch(ex4, ns)
                sync(ns)
            return (time.perf_counter_ns() - t0) / (n // 2 * 2) / 1e3

        def bare_query(n: int) -> float:
            h2d, d2h = graph_ctx._h2d, graph_ctx._d2h
            t0 = time.perf_counter_ns()
            for _ in range(n):
                h2d()
                launch(ex, s)
                d2h()
                sync(s)
            return (time.perf_counter_ns() - t0) / n / 1e3

        def harness(ctx, n: int) -> tuple[float, float]:
            m = run_queries([ctx], HarnessConfig(iterations=n, duration_s=0.0, warmup_ms=0.0))
            ts = m.timings
            wall = (ts[-1].end_ns - ts[0].start_ns) / len(ts) / 1e3
            return wall, statistics.median(t.compute_ms for t in ts) * 1e3

        es = eager_ctx.stream.handle
        ext = eager_ctx.ext
        prog = eng.program
        plan = prog.plan(None)

        def bare_enqueue(n: int) -> float:
            ins = eager_ctx.dev_inputs
            t0 = time.perf_counter_ns()
            with torch.cuda.stream(ext):
                for _ in range(n):
                    prog.forward(ins, plan)
                    sync(es)
            return (time.perf_counter_ns() - t0) / n / 1e3

        for f in (bare_launch, bare_launch_ev, bare_query, bare_enqueue):
            f(50)
        harness(host_ev_ctx, 50)
        harness(graph_ctx, 50)
        harness(eager_ctx, 20)
        harness(graph_nt_ctx, 50)
        harness(eager_nt_ctx, 20)
        # the no-transfer contexts compute what the full ones do
        ref = eager_ctx.outputs()
        for ctx in (graph_nt_ctx, eager_nt_ctx):
            got = ctx.outputs()
            worst = max(float(np.max(np.abs(got[k] - ref[k]))) for k in ref)
            assert worst < 1e-3, f"transfers-off outputs differ from the full query's by {worst}"
        acc: dict[str, list[float]] = {k: [] for k in ("bare_launch", "bare_query", "harness_graph", "graph_compute",
                                                       "harness_graph_host_events",
                                                       "bare_enqueue", "harness_eager", "eager_compute",
                                                       "harness_graph_nt", "graph_nt_compute", "harness_eager_nt",
                                                       "bare_launch_ev")}
        ne = max(n // 20, 50)
        for _ in range(args.repeats):
            acc["bare_launch"].append(bare_launch(n))
            w, c = harness(graph_ctx, n)
            acc["harness_graph"].append(w)
            acc["graph_compute"].append(c)
            acc["bare_query"].append(bare_query(n))
            acc["harness_graph_host_events"].append(harness(host_ev_ctx, n)[0])
            acc["bare_enqueue"].append(bare_enqueue(ne))
            w, c = harness(eager_ctx, ne)
            acc["harness_eager"].append(w)
            acc["eager_compute"].append(c)
            w, c = harness(graph_nt_ctx, n)
            acc["harness_graph_nt"].append(w)
            acc["graph_nt_compute"].append(c)
            acc["harness_eager_nt"].append(harness(eager_nt_ctx, ne)[0])
            acc["bare_launch_ev"].append(bare_launch_ev(n))
        med = {k: statistics.median(v) for k, v in acc.items()}
        spread = {k: (min(v), max(v)) for k, v in acc.items()}
        rec = {"model": Path(path).name, "steps": eng.info["steps"], "graph_nodes": None, "median_us": med,
               "min_max_us": spread,
               "harness_vs_bare_launch_pct": 100.0 * (med["harness_graph"] / med["bare_launch"] - 1),
               "harness_cost_us": med["harness_graph"] - med["bare_query"],
               "eager_harness_cost_us": med["harness_eager"] - med["bare_enqueue"],
               "nt_graph_cost_us": med["harness_graph_nt"] - med["bare_launch"],
               "nt_graph_vs_bare_launch_pct": 100.0 * (med["harness_graph_nt"] / med["bare_launch"] - 1),
               "nt_graph_host_cost_us": med["harness_graph_nt"] - med["bare_launch_ev"],
               "nt_eager_cost_us": med["harness_eager_nt"] - med["bare_enqueue"],
               "nt_eager_vs_bare_enqueue_pct": 100.0 * (med["harness_eager_nt"] / med["bare_enqueue"] - 1)}
        results.append(rec)
        eager_ctx.close()
        graph_ctx.close()
        host_ev_ctx.close()
        graph_nt_ctx.close()
        eager_nt_ctx.close()
        eng.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"{'model':<36} {'steps':>5} {'bare_launch':>11} {'bare_query':>10} {'harness_g':>9} {'g_compute':>9} "
          f"{'vs_launch%':>10} {'cost_us':>7} {'host_ev':>8} | {'bare_enq':>9} {'harness_e':>9} {'e_cost_us':>9}")
    for r in results:
        m = r["median_us"]
        print(f"{r['model'][:36]:<36} {r['steps']:>5} {m['bare_launch']:>11.2f} {m['bare_query']:>10.2f} "
              f"{m['harness_graph']:>9.2f} {m['graph_compute']:>9.2f} {r['harness_vs_bare_launch_pct']:>10.2f} "
              f"{r['harness_cost_us']:>7.2f} {m['harness_graph_host_events']:>8.2f} | {m['bare_enqueue']:>9.1f} {m['harness_eager']:>9.1f} "
              f"{r['eager_harness_cost_us']:>9.1f}")
    print("(us per iteration, medians of", args.repeats, "alternating repeats)")
    print()
    print("transfers off (set_transfers(False), like trtexec --noDataTransfers): harness vs the bare loops")
    print(f"{'model':<36} {'bare_launch':>11} {'harness_gnt':>11} {'gnt_compute':>11} {'cost_us':>7} {'vs_launch%':>10} "
          f"{'bare_ev':>8} {'host_us':>7} | {'bare_enq':>9} {'harness_ent':>11} {'cost_us':>7} {'vs_enq%':>7} | "
          f"{'on_cost_us':>10} {'on_vs%':>6}")
    for r in results:
        m = r["median_us"]
        print(f"{r['model'][:36]:<36} {m['bare_launch']:>11.2f} {m['harness_graph_nt']:>11.2f} "
              f"{m['graph_nt_compute']:>11.2f} {r['nt_graph_cost_us']:>7.2f} {r['nt_graph_vs_bare_launch_pct']:>10.2f} "
              f"{m['bare_launch_ev']:>8.2f} {r['nt_graph_host_cost_us']:>7.2f} | "
              f"{m['bare_enqueue']:>9.1f} {m['harness_eager_nt']:>11.1f} {r['nt_eager_cost_us']:>7.1f} "
              f"{r['nt_eager_vs_bare_enqueue_pct']:>7.2f} | {r['harness_cost_us']:>10.2f} {r['harness_vs_bare_launch_pct']:>6.2f}")
    print("(bare_ev: the harness's own two graphs, event-record nodes inside, launched alternately + sync; host_us:"
          " harness_gnt - bare_ev, the host work alone. on_cost_us / on_vs%: transfers on, harness graph - bare query"
          " and harness graph vs bare launch)")


if __name__ == "__main__":
    main()
