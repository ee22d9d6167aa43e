"""Report generation speed and size: a 20-variant sweep with realistic samples (target: < 2 s, < 6 MB).

Synthetic but shaped like a real sweep's summary.json: 20 variants (fp32/fp16/int8 x workspace x
streams x CUDA graph), several thousand per-iteration latency samples each (log-normal body with a
tail), accuracy per output, checklist, memory, and ~120 per-layer records per variant. Also times the
analysis, per-layer and compare reports at comparable sizes. Prints one table.

    python benchmarks/bench_report.py [--samples 3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

LAYER_TYPES = ["Convolution", "Activation", "Pooling", "Reformat", "ElementWise", "Shuffle", "MatrixMultiply",
               "SoftMax", "Normalization", "Resize"]


def _stats(a: np.ndarray) -> dict:
    from profiler.stats import summarize

    s = summarize(a)
    s.pop("count", None)
    return s


def _samples(rng: np.random.Generator, median_ms: float, n: int) -> np.ndarray:
    body = median_ms * rng.lognormal(0.0, 0.03, n)
    tail = rng.random(n) < 0.01
    body[tail] *= rng.uniform(1.5, 4.0, tail.sum())
    return body.round(5)


def sweep_summary(n_variants: int = 20, n_samples: int = 3000, n_layers: int = 120, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    combos = [(p, ws, s, g) for p in ("fp32", "fp16", "int8") for ws in (64 << 20, 256 << 20, 1 << 30)
              for s in (1, 2, 4) for g in (False, True)]
    idx = rng.choice(len(combos), n_variants, replace=False)
    variants, layers = [], []
    for i in sorted(idx):
        p, ws, st, g = combos[i]
        med = {"fp32": 4.1, "fp16": 2.2, "int8": 1.5}[p] * (1.08 if ws == 64 << 20 else 1.0) * (0.9 if g else 1.0)
        lat = _samples(rng, med * (1 + 0.15 * (st - 1)), n_samples)
        key = f"{p}-ws{ws >> 20}M-s{st}-{'graph' if g else 'nograph'}"
        acc = {} if p == "fp32" else {
            out: {"max_abs": float(rng.uniform(1e-3, 0.3)), "mean_abs": float(rng.uniform(1e-4, 1e-2)),
                  "rel_l2": float(rng.uniform(1e-4, 0.05)), "cosine": float(1 - rng.uniform(0, 1e-3)),
                  "top1_agreement": float(rng.uniform(0.97, 1.0)) if out == "logits" else None,
                  "nan_count": 0, "inf_count": 0, "passed": bool(rng.random() > 0.2)}
            for out in ("logits", "features")}
        variants.append({
            "key": key, "precision": p, "workspace_bytes": ws, "streams": st, "cuda_graph": g,
            "backend": "tensorrt", "status": "ok", "error": None, "latency_ms": _stats(lat),
            "enqueue_ms": _stats(lat * 0.02), "throughput_qps": float(1000.0 / med * st * 0.85), "accuracy": acc,
            "checklist": {"parsed": {"status": "ok", "warnings": ["INT64 weights cast to INT32"]},
                          "optimized": {"status": "ok", "workspace_bytes": ws, "build_s": float(rng.uniform(5, 90)),
                                        "shapes": {"input": "1x3x224x224"}, "peak_device_bytes": 2_100_000_000},
                          "calibrated": {"status": "ok", "data": "calib.npz (512 samples)", "cache": "reused"}
                          if p == "int8" else None,
                          "serialized": {"status": "ok", "plan_bytes": int(rng.integers(20e6, 100e6)),
                                         "fingerprint": f"{rng.integers(1 << 62):016x}", "gpu": "NVIDIA H200",
                                         "tensorrt": "10.13"},
                          "executed": {"status": "ok" if not acc or all(a["passed"] for a in acc.values()) else "warn"}},
            "memory": {"engine_bytes": int(rng.integers(20e6, 100e6)), "activation_bytes": int(rng.integers(5e6, 50e6)),
                       "device_used_bytes": int(rng.integers(1e9, 4e9))},
            "samples_ms": lat.tolist(),
        })
        t = rng.dirichlet(np.ones(n_layers)) * med * 1.1
        for j in range(n_layers):
            layers.append({"variant": key, "name": f"/backbone/stage{j // 10}/block{j % 10}/conv + relu",
                           "type": LAYER_TYPES[j % len(LAYER_TYPES)], "time_total_ms": float(t[j] * 100),
                           "time_avg_ms": float(t[j]), "share_pct": float(t[j] / t.sum() * 100),
                           "precision_out": p if j % 7 else "fp32"})
    return {"run": {"model": "resnet50.onnx", "backend": "tensorrt", "gpu": "NVIDIA H200", "host": "bench"},
            "variants": variants, "layers": layers,
            "findings": [{"rule": "fastest_variant", "severity": "info", "title": "int8 with a graph is fastest",
                          "evidence": {"median_ms": 1.35}}]}


def analysis_result(n_ranges: int = 10, n_inst: int = 5000, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    ranges = []
    for r in range(n_ranges):
        wall = _samples(rng, 1.0 + r, n_inst)
        busy = (wall * rng.uniform(0.1, 0.9)).round(5)
        out = np.argsort(wall)[-20:]
        ranges.append({"name": f"range{r}", "domain": "trtprof", "count": n_inst, "wall_ms": _stats(wall),
                       "gpu_busy_ms": _stats(busy), "gpu_busy_fraction": float(busy.sum() / wall.sum()),
                       "outliers": [{"index": int(i), "wall_ms": float(wall[i]), "cause": "osrt: futex"} for i in out],
                       "instances": {"wall_ms": wall.tolist(), "gpu_busy_ms": busy.tolist()}})
    return {"capture": {"source_path": "bench.sqlite", "nsys_version": "2025.3"}, "ranges": ranges, "findings": [],
            "top_kernels": [{"name": f"kernel_{i}<float>", "count": 1000, "total_ms": 100.0 / (i + 1)} for i in range(50)],
            "gap_histogram": [{"device": "GPU 0", "edges_us": [0, 1, 10, 100, 1000, 10000],
                               "counts": [5000, 2000, 300, 20, 1]}]}


def compare_data(n_variants: int = 20, n_samples: int = 3000, seed: int = 2) -> dict:
    rng = np.random.default_rng(seed)
    variants = []
    for i in range(n_variants):
        b = _samples(rng, 2.0, n_samples)
        c = _samples(rng, 2.0 * (1.1 if i % 5 == 0 else 1.0), n_samples)
        variants.append({"key": f"v{i}", "verdict": "regression" if i % 5 == 0 else "no_change",
                         "median_ratio": float(np.median(c) / np.median(b)), "ci_low": 0.99, "ci_high": 1.12,
                         "p_value": 1e-6, "baseline_samples_ms": b.tolist(), "candidate_samples_ms": c.tolist(),
                         "layer_deltas": [{"name": f"layer{j}", "baseline_ms": 0.1, "candidate_ms": 0.1 + j * 1e-3}
                                          for j in range(100)]})
    return {"baseline": {"id": 1}, "candidate": {"id": 2}, "variants": variants, "environment_changes": []}


def layers_data(seed: int = 3) -> dict:
    s = sweep_summary(n_variants=4, n_samples=10, n_layers=300, seed=seed)
    return {"kind": "import", "run": {"source": "bench"}, "variants": s["variants"], "layers": s["layers"],
            "findings": []}


def measure(name: str, build, write, data, repeat: int, out: Path) -> dict:
    from profiler.report.render import render_html

    builds, renders, totals = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        page = build(data)
        t1 = time.perf_counter()
        render_html(page)
        t2 = time.perf_counter()
        write(data, out)
        t3 = time.perf_counter()
        builds.append(t1 - t0)
        renders.append(t2 - t1)
        totals.append(t3 - t2)
    return {"report": name, "build_s": statistics.median(builds), "render_s": statistics.median(renders),
            "write_report_s": statistics.median(totals), "size_mb": out.stat().st_size / 1e6,
            "charts": len(page["figures"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=3000, help="latency samples per variant")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from profiler.report import write_analysis_report, write_compare_report, write_layers_report, write_sweep_report
    from profiler.report.analysis import build_analysis_page
    from profiler.report.compare import build_compare_page
    from profiler.report.layers import build_layers_page
    from profiler.report.render import plotly_js
    from profiler.report.sweep import build_sweep_page

    t = time.perf_counter()
    bundle_mb = len(plotly_js().encode()) / 1e6
    first_read = time.perf_counter() - t
    sweep = sweep_summary(n_samples=args.samples)
    layers = sweep.pop("layers")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        # cold: first report in a fresh process (template compilation, plotly bundle read)
        rows.append(measure("sweep 20 variants (first call)", lambda s: build_sweep_page(s, layers=layers),
                            lambda s, p: write_sweep_report(s, p, layers=layers), sweep, 1, d / "cold.html"))
        rows[-1]["write_report_s"] += first_read
        rows.append(measure(f"sweep 20 variants x {args.samples} samples", lambda s: build_sweep_page(s, layers=layers),
                            lambda s, p: write_sweep_report(s, p, layers=layers), sweep, args.repeat, d / "sweep.html"))
        rows.append(measure("analysis 10 ranges x 5000 instances", build_analysis_page, write_analysis_report,
                            analysis_result(), args.repeat, d / "analysis.html"))
        rows.append(measure("layers 4 variants x 300 layers", build_layers_page, write_layers_report, layers_data(),
                            args.repeat, d / "layers.html"))
        rows.append(measure("compare 20 variants x 2 x 3000 samples", build_compare_page, write_compare_report,
                            compare_data(), args.repeat, d / "compare.html"))
    print(f"plotly.js bundle embedded once: {bundle_mb:.2f} MB; median of {args.repeat} runs "
          "(write_report = build + render + write to disk)")
    head = f"{'report':<40} {'build s':>8} {'render s':>9} {'write_report s':>15} {'HTML MB':>8} {'charts':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['report']:<40} {r['build_s']:>8.3f} {r['render_s']:>9.3f} {r['write_report_s']:>15.3f} "
              f"{r['size_mb']:>8.2f} {r['charts']:>7}")
    s = rows[1]
    ok = s["write_report_s"] < 2.0 and s["size_mb"] < 6.0
    print(f"\n20-variant sweep: {s['write_report_s']:.3f} s (target < 2 s), {s['size_mb']:.2f} MB (target < 6 MB): "
          f"{'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
