#!/usr/bin/env python3
"""trtprof's GPU path on a real GPU: the cuda backend on real models, a sweep, and the sweep under nsys.

Subcommands (each prints a short table last and writes JSON under --out):

  models     every model: FP32/FP16 outputs on the GPU against ONNX Runtime (CPU), CUDA-graph capture
             (None or the fallback reason), eager vs graph median latency and the speedup
  sweep      one model swept over precision x streams x CUDA graph with the cuda backend
             (profiler.sweep); writes summary.json and the HTML report
  nsys-sweep the same sweep as a child process under ``nsys profile -t cuda,nvtx,osrt``; the export is
             analysed (profiler.capture) and attached per variant (profiler.harness.nsys); adds the
             stream overlap the capture shows and the graph speedup measured vs captured

Models come from --models-dir (the rapidocr ONNX files) and the bundled default model.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {  # file name -> input shapes
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": {"x": (1, 3, 48, 192)},
    "ch_PP-OCRv4_rec_infer.onnx": {"x": (1, 3, 48, 320)},
    "ch_PP-OCRv4_det_infer.onnx": {"x": (1, 3, 640, 640)},
}


def _model_list(models_dir: str | None) -> list[tuple[str, dict]]:
    from profiler.models import default_model_path

    out = [(str(default_model_path()), {})]
    if models_dir:
        for name, shapes in MODELS.items():
            p = Path(models_dir) / name
            if p.exists():
                out.append((str(p), shapes))
    return out


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na and nb else float("nan")


def cmd_models(args: argparse.Namespace) -> None:
    import onnxruntime as ort

    from profiler.backends.base import VariantSpec
    from profiler.backends.cuda_ref import CudaTorchBackend
    from profiler.harness.runner import HarnessConfig, run_queries, summarize_timings
    from profiler.variants import prepare

    be = CudaTorchBackend()
    rows, res = [], []
    for path, shapes in _model_list(args.models_dir):
        name = Path(path).name
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for prec in ("fp32", "fp16"):
            spec = VariantSpec(prec, None, 1, False, tuple((k, tuple(v)) for k, v in shapes.items()))
            rec: dict[str, Any] = {"model": name, "precision": prec}
            try:
                mp = path
                if prec == "fp16":
                    mp = str(prepare(path, "fp16", shapes=shapes or None, cache_dir=args.out + "/variants").path)
                eng = be.build(mp, spec)
                feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in eng.inputs}
                ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
                ctx = eng.create_context(0)
                ctx.set_inputs(feeds)
                ctx.query()
                out = ctx.outputs()
                k = eng.outputs[0].name
                rec.update(cosine=_cos(out[k], ref[k]), max_abs=float(np.abs(out[k].astype(np.float64) - ref[k]).max()),
                           nan=bool(np.isnan(out[k]).any()), steps=eng.info["steps"], nodes=eng.info["nodes"],
                           mem_used_by_build_mb=eng.info["device_memory"]["used_by_build_bytes"] / 2**20)
                cfg = HarnessConfig(iterations=50, duration_s=0.3, warmup_ms=100)
                eager = summarize_timings(run_queries([ctx], cfg, key=f"{name}-{prec}").timings)
                reason = ctx.enable_cuda_graph()
                rec["graph_fallback"] = reason
                if reason is None:
                    ctx.query()
                    out_g = ctx.outputs()
                    rec["graph_vs_eager_cos"] = _cos(out_g[k], out[k])
                    graph = summarize_timings(run_queries([ctx], cfg, key=f"{name}-{prec}-graph").timings)
                    rec["graph_compute_ms"] = graph["compute_ms"]["median"]
                    rec["graph_enqueue_ms"] = graph["enqueue_ms"]["median"]
                    rec["graph_latency_ms"] = graph["latency_ms"]["median"]
                rec["eager_compute_ms"] = eager["compute_ms"]["median"]
                rec["eager_enqueue_ms"] = eager["enqueue_ms"]["median"]
                rec["eager_latency_ms"] = eager["latency_ms"]["median"]
                ctx.close()
                eng.close()
            except Exception as exc:  # report and go on
                rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
            res.append(rec)
            sp = (rec.get("eager_latency_ms") or 0) / rec["graph_latency_ms"] if rec.get("graph_latency_ms") else None
            rows.append(f"{name[:34]:<34} {prec:<5} cos={rec.get('cosine', float('nan')):.6f} "
                        f"maxabs={rec.get('max_abs', float('nan')):.2e} steps={rec.get('steps')} "
                        f"eager={rec.get('eager_latency_ms', float('nan')):.3f}ms "
                        f"graph={rec.get('graph_latency_ms', float('nan')):.3f}ms "
                        f"x{(sp or float('nan')):.2f} fallback={rec.get('graph_fallback')} {rec.get('error', '')}")
    Path(args.out, "models.json").write_text(json.dumps(res, indent=2, default=str))
    print("\n".join(rows))


def _sweep_config(args: argparse.Namespace) -> Any:
    from profiler.sweep import SweepConfig

    model = args.model
    shapes = {}
    for name, s in MODELS.items():
        if model and Path(model).name == name:
            shapes = {k: list(v) for k, v in s.items()}
    return SweepConfig(model=model, precisions=args.precisions.split(","),
                       streams=[int(x) for x in args.streams.split(",")],
                       cuda_graph=[g == "on" for g in args.graphs.split(",")],
                       shapes=shapes, iterations=args.iterations, duration_s=args.duration, warmup_ms=100,
                       backend="cuda", layers=True, layer_iterations=5, cache_dir=args.out + "/cache",
                       label=args.label)


def cmd_sweep(args: argparse.Namespace) -> None:
    from profiler.report import write_sweep_report
    from profiler.sweep import Sweep

    sw = Sweep(_sweep_config(args), progress=lambda m: print(m, flush=True))
    summary = sw.run()
    Path(args.summary).write_text(json.dumps(summary, indent=2, default=str))
    data, layers = sw.report_data(summary)
    if args.report:
        write_sweep_report(data, args.report, layers=layers)
    _print_sweep(summary)


def _print_sweep(summary: dict) -> None:
    print(f"{'variant':<22} {'status':<8} {'lat_med_ms':>10} {'compute_ms':>10} {'enq_ms':>8} {'qps':>9} "
          f"{'nsys_busy_ms':>12} {'rules'}")
    for v in summary["variants"]:
        ns = v.get("nsys") or {}
        busy = (ns.get("gpu_busy_ms") or {}).get("median") if isinstance(ns.get("gpu_busy_ms"), dict) else None
        lat = (v.get("latency_ms") or {}).get("median") if isinstance(v.get("latency_ms"), dict) else None
        comp = (v.get("compute_ms") or {}).get("median") if isinstance(v.get("compute_ms"), dict) else None
        enq = (v.get("enqueue_ms") or {}).get("median") if isinstance(v.get("enqueue_ms"), dict) else None
        f = lambda x, w, p: f"{x:>{w}.{p}f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"  # noqa: E731
        print(f"{v['key']:<22} {v['status']:<8} {f(lat, 10, 3)} {f(comp, 10, 3)} {f(enq, 8, 3)} "
              f"{f(v.get('throughput_qps'), 9, 1)} {f(busy, 12, 3)} {','.join(ns.get('rules') or [])} "
              f"{(v.get('error') or '')[:80]} {v.get('cuda_graph_fallback') or ''}")
    print("findings:", [(x["rule"], x.get("range") or x.get("variant")) for x in summary.get("findings", [])][:20])


def stream_overlap(sqlite_path: str, keys: list[str]) -> dict[str, Any]:
    """Per variant: summed GPU activity vs its union inside the variant's ``sweep/<key>`` range."""
    from profiler.capture.intervals import union_length

    con = sqlite3.connect(sqlite_path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    acts: list[tuple[int, int, int]] = []
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        if t in tables:
            acts += con.execute(f"SELECT start, end, streamId FROM {t}").fetchall()
    acts.sort()
    starts = np.array([a[0] for a in acts], dtype=np.int64)
    out = {}
    rng = con.execute("SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                      "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL").fetchall()
    for key in keys:
        win = [(s, e) for s, e, t in rng if t == f"sweep/{key}"]
        its = [(s, e) for s, e, t in rng if t == f"{key}/iter"]
        if not win or not its:
            continue
        lo, hi = min(s for s, _ in its), max(e for _, e in its)
        i0, i1 = np.searchsorted(starts, lo), np.searchsorted(starts, hi)
        sel = [(a[0], min(a[1], hi)) for a in acts[i0:i1]]
        streams = sorted({a[2] for a in acts[i0:i1]})
        total = sum(e - s for s, e in sel)
        union = union_length([a for a, _ in sel], [b for _, b in sel])
        out[key] = {"streams_seen": len(streams), "activity_sum_ms": total / 1e6, "union_ms": union / 1e6,
                    "overlap_factor": total / union if union else None, "window_ms": (hi - lo) / 1e6,
                    "busy_fraction": union / (hi - lo) if hi > lo else None}
    return out


def cmd_nsys_sweep(args: argparse.Namespace) -> None:
    from profiler.harness import nsys

    out = Path(args.out)
    child = [sys.executable, str(Path(__file__).resolve()), "sweep", "--out", str(out), "--summary",
             str(out / "summary_child.json"), "--iterations", str(args.iterations), "--duration", str(args.duration),
             "--label", args.label or "nsys", "--precisions", args.precisions, "--streams", args.streams,
             "--graphs", args.graphs]
    if args.model:
        child += ["--model", args.model]
    if args.report:
        child += ["--report", args.report]
    t0 = time.time()
    cap = nsys.profile(child, out / args.capture_name)
    t1 = time.time()
    summary = json.loads((out / "summary_child.json").read_text())
    nsys.attach_capture(summary, cap)
    t2 = time.time()
    keys = [v["key"] for v in summary["variants"]]
    summary["stream_overlap"] = stream_overlap(str(cap), keys)
    # graph speedup: measured by the harness vs shown by the capture (range wall medians)
    speed = {}
    for v in summary["variants"]:
        if v.get("cuda_graph") or v["status"] != "ok":
            continue
        g = next((w for w in summary["variants"] if w["key"] == v["key"] + "-graph" and w["status"] == "ok"), None)
        if not g:
            continue
        med = lambda d, k: (d.get(k) or {}).get("median") if isinstance(d.get(k), dict) else None  # noqa: E731
        ns_e, ns_g = v.get("nsys") or {}, g.get("nsys") or {}
        speed[v["key"]] = {
            "harness_latency_speedup": med(v, "latency_ms") / med(g, "latency_ms"),
            "capture_wall_speedup": (med(ns_e, "wall_ms") / med(ns_g, "wall_ms")) if med(ns_g, "wall_ms") else None,
            "eager_rules": ns_e.get("rules"), "graph_rules": ns_g.get("rules")}
    summary["graph_speedup"] = speed
    summary["timing_s"] = {"profiled_sweep": t1 - t0, "ingest_attach": t2 - t1}
    (out / "summary_nsys.json").write_text(json.dumps(summary, indent=2, default=str))
    _print_sweep(summary)
    print("capture", cap, f"{os.path.getsize(cap) / 2**20:.1f} MiB", "profiled sweep %.1fs, ingest+attach %.1fs" % (t1 - t0, t2 - t1))
    for k, o in summary["stream_overlap"].items():
        print(f"overlap {k:<20} streams={o['streams_seen']} sum={o['activity_sum_ms']:.2f}ms "
              f"union={o['union_ms']:.2f}ms factor={o['overlap_factor'] or 0:.2f} busy={o['busy_fraction'] or 0:.2f}")
    for k, s in speed.items():
        print(f"graph speedup {k:<14} harness x{s['harness_latency_speedup']:.2f} capture x{(s['capture_wall_speedup'] or 0):.2f} "
              f"rules eager={s['eager_rules']} graph={s['graph_rules']}")
    for v in summary["variants"]:
        c = (v.get("nsys") or {}).get("compute_vs_gpu_busy")
        if c:
            print(f"compute vs nsys busy {v['key']:<20} harness {c['harness_compute_median_ms']:.4f} ms "
                  f"nsys {c['nsys_gpu_busy_median_ms']:.4f} ms ratio {c['ratio']:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["models", "sweep", "nsys-sweep"])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/trtprof-gpu"))
    ap.add_argument("--models-dir")
    ap.add_argument("--model")
    ap.add_argument("--summary")
    ap.add_argument("--report")
    ap.add_argument("--label")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--streams", default="1,2")
    ap.add_argument("--graphs", default="off,on")
    ap.add_argument("--capture-name", default="sweep_capture")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--duration", type=float, default=0.5)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.summary is None:
        args.summary = str(Path(args.out) / "summary.json")
    {"models": cmd_models, "sweep": cmd_sweep, "nsys-sweep": cmd_nsys_sweep}[args.command](args)


if __name__ == "__main__":
    main()
