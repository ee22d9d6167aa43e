"""Example report inputs shared by the report tests (numbers chosen so the page data can be checked),
and helpers to read a written report back. Test modules import these from here, never from one another.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>alert(1)</script> & void foo<int>"
EVIL_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; void foo&lt;int&gt;"


# ----------------------------------------------------------------------------- example inputs

def _stats(samples) -> dict:
    a = np.sort(np.asarray(samples, dtype=float))
    return {"min": float(a[0]), "mean": float(a.mean()), "median": float(np.median(a)),
            "p90": float(np.percentile(a, 90)), "p95": float(np.percentile(a, 95)),
            "p99": float(np.percentile(a, 99)), "max": float(a[-1]), "cov_pct": float(a.std() / a.mean() * 100)}


def analysis_example(n: int = 200, name: str = "infer") -> dict:
    rng = random.Random(7)
    wall = [round(2.0 + rng.random() * 0.2, 4) for _ in range(n)]
    wall[13], wall[150] = 9.5, 7.25
    busy = [round(w * 0.25, 4) for w in wall]
    return {
        "kind": "analyze",
        "capture": {"source_path": "/data/service.sqlite", "nsys_version": "2025.3.1",
                    "gpus": [{"name": "NVIDIA H200", "memory_bytes": 150_000_000_000}], "duration_ms": 512.5},
        "ranges": [
            {"name": name, "domain": "trtprof", "count": n, "wall_ms": _stats(wall), "gpu_busy_ms": _stats(busy),
             "gpu_busy_fraction": 0.25, "outliers": [13, {"index": 150, "cause": "clock_nanosleep", "wall_ms": 7.25}],
             "instances": {"wall_ms": wall, "gpu_busy_ms": busy}},
            {"name": "preprocess", "domain": None, "count": 3,
             "wall_ms": {"min": 0.1, "median": 0.2, "mean": 0.2, "p99": 0.3, "max": 0.3, "cov_pct": 40.0},
             "gpu_busy_ms": {"median": 0.05}, "gpu_busy_fraction": 0.2, "outliers": []},
        ],
        "findings": [
            {"rule": "jitter", "severity": "medium", "title": f"{name} latency is unstable", "range": name,
             "evidence": {"cov_pct": 35.2, "outlier_indices": [13, 150]}, "threshold": {"cov_pct": 10},
             "recommendation": "Look at host-side stalls inside the range."},
            {"rule": "launch_overhead", "severity": "high", "title": "launch-bound", "range": name,
             "evidence": {"busy_fraction": 0.25, "launches_per_instance": 120}, "threshold": {"busy_fraction": 0.5},
             "recommendation": "Capture the loop as a CUDA graph."},
        ],
        "top_kernels": [
            {"name": "void gemm<float>(float const*)", "count": 400, "total_ns": 8_000_000, "mean_ns": 20_000},
            {"name": "relu_kernel", "count": 400, "total_ms": 1.5, "mean_ms": 0.00375},
        ],
        "gap_histogram": [{"device": "GPU 0", "edges_us": [0, 1, 10, 100, 1000], "counts": [50, 20, 5, 1],
                           "idle_ms": 3.2}],
    }


def sweep_example(n_variants: int = 6, n_samples: int = 300, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    variants, layers = [], []
    combos = [(p, ws, s, g) for ws in (64 << 20, 1 << 30) for s in (1, 2, 4) for g in (False, True)
              for p in ("fp32", "fp16", "int8")]
    for i in range(n_variants):
        p, ws, s, g = combos[i % len(combos)]
        base = {"fp32": 4.0, "fp16": 2.0, "int8": 1.4}[p] * (1.1 if ws == 64 << 20 else 1.0)
        samples = (base * (1 + 0.03 * rng.standard_normal(n_samples))).round(5).tolist()
        key = f"{p}-ws{'64M' if ws == 64 << 20 else '1G'}-s{s}-{'graph' if g else 'nograph'}"
        acc = {} if p == "fp32" else {"logits": {"max_abs": 0.01 if p == "fp16" else 0.2, "mean_abs": 0.001,
                                                 "rel_l2": 0.002 if p == "fp16" else 0.05, "cosine": 0.9999,
                                                 "top1_agreement": 0.99, "nan_count": 0, "inf_count": 0,
                                                 "passed": p == "fp16"}}
        variants.append({
            "key": key, "precision": p, "workspace_bytes": ws, "streams": s, "cuda_graph": g,
            "backend": "onnxruntime", "status": "ok", "error": None, "latency_ms": _stats(samples),
            "enqueue_ms": {"median": 0.02}, "throughput_qps": 1000.0 / base * s * 0.8, "accuracy": acc,
            "checklist": {"parsed": {"status": "ok", "warnings": []},
                          "optimized": {"status": "ok", "workspace_bytes": ws, "build_s": 1.5},
                          "serialized": {"ok": True, "plan_bytes": 1_234_567, "fingerprint": "abc123"}},
            "memory": {"engine_bytes": 5_000_000, "activation_bytes": 1_000_000 * s},
            "samples_ms": samples,
        })
        for j, typ in enumerate(("Convolution", "Activation", "Pooling", "Reformat")):
            layers.append({"variant": key, "name": f"layer{j}", "type": typ, "time_total_ms": 10.0 * (j + 1),
                           "share_pct": 10.0 * (j + 1), "precision_out": p})
    variants.append({"key": "int8-ws64M-s8-graph", "precision": "int8", "status": "skipped",
                     "error": "onnxruntime cannot capture CUDA graphs on CPU"})
    variants.append({"key": "fp16-ws1G-s1-bad", "precision": "fp16", "status": "failed",
                     "error": "unsupported op GridSample"})
    return {"run": {"model": "tiny_convnet.onnx", "backend": "onnxruntime", "host": "ci"}, "variants": variants,
            "findings": [{"rule": "fastest_variant", "severity": "info", "title": "int8 is fastest",
                          "evidence": {"median_ms": 1.4}}], "layers": layers}


def layers_example() -> dict:
    return {
        "kind": "import",
        "run": {"source": "resnet.onnx.engine"},
        "variants": [{"key": "fp16", "latency_ms": {"median": 4.0}, "gpu_compute_ms": {"median": 3.8},
                      "enqueue_ms": {"median": 0.01}, "throughput_qps": 250.0},
                     {"key": "int8", "latency_ms": {"median": 2.0}, "gpu_compute_ms": {"median": 2.0}}],
        "layers": [
            {"variant": "fp16", "name": "conv1 + relu", "type": "Convolution", "precision_in": "FP16",
             "precision_out": "FP16", "time_avg_ms": 3.0, "time_total_ms": 300.0, "share_pct": 75.0},
            {"variant": "fp16", "name": "Reformatting CopyNode <in>", "type": "Reformat", "precision_in": "Float",
             "precision_out": "Half", "time_avg_ms": 0.5, "time_total_ms": 50.0, "share_pct": 12.5},
            {"variant": "fp16", "name": "softmax", "type": "SoftMax", "precision_out": "float",
             "time_avg_ms": 0.5, "time_total_ms": 50.0, "share_pct": 12.5},
            {"variant": "int8", "name": "conv1 + relu", "type": "Convolution", "precision_out": "Int8",
             "time_avg_ms": 1.5, "time_total_ms": 150.0},
            {"variant": "int8", "name": "softmax", "type": "SoftMax", "precision_out": "fp32",
             "time_avg_ms": 0.9, "time_total_ms": 90.0},
        ],
        "alignment": [{"a": "fp16", "b": "int8", "groups": [
            {"group": 0, "nodes": ["conv1", "relu"], "layers_a": ["conv1 + relu"], "layers_b": ["conv1 + relu"],
             "time_a_ms": 3.0, "time_b_ms": 1.5, "delta_ms": -1.5, "precision_a": "fp16", "precision_b": "int8"},
            {"group": 1, "nodes": ["softmax"], "layers_a": ["softmax"], "layers_b": ["softmax"],
             "time_a_ms": 0.5, "time_b_ms": 0.9, "delta_ms": 0.4}]}],
        "findings": [{"rule": "layer_hotspot", "severity": "medium", "title": "conv1 takes 75% of the time",
                      "variant": "fp16", "evidence": {"share_pct": 75.0}}],
    }


def compare_example(seed: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    b = (2.0 + 0.05 * rng.standard_normal(400)).tolist()
    c = (2.3 + 0.05 * rng.standard_normal(400)).tolist()
    same = (1.0 + 0.02 * rng.standard_normal(300)).tolist()
    return {
        "kind": "compare",
        "baseline": {"id": 1, "label": "trt10.3", "gpu": "NVIDIA H200", "tensorrt_version": "10.3"},
        "candidate": {"id": 2, "label": "trt10.5", "gpu": "NVIDIA H200", "tensorrt_version": "10.5"},
        "variants": [
            {"key": "fp16-ws1G-s1", "verdict": "regression", "median_ratio": 1.15, "ci_low": 1.13, "ci_high": 1.17,
             "p_value": 3.2e-40, "baseline_samples_ms": b, "candidate_samples_ms": c,
             "layer_deltas": [{"name": "conv1", "baseline_ms": 1.0, "candidate_ms": 1.3},
                              {"name": "fc", "baseline_ms": 0.5, "candidate_ms": 0.45},
                              {"name": "relu", "baseline_ms": 0.1, "candidate_ms": 0.1}]},
            {"key": "fp32-ws1G-s1", "verdict": "no_change", "median_ratio": 1.001, "ci_low": 0.99, "ci_high": 1.01,
             "p_value": 0.61, "baseline_samples_ms": same, "candidate_samples_ms": same[::-1]},
            {"key": "int8-ws1G-s1", "verdict": "missing"},
        ],
        "environment_changes": [{"field": "tensorrt_version", "baseline": "10.3", "candidate": "10.5"}],
        "findings_appeared": [{"rule": "jitter", "severity": "low", "title": "new jitter"}],
        "findings_disappeared": [],
        "trend": {"variant": "fp16-ws1G-s1", "change_index": 3,
                  "points": [{"label": f"r{i}", "median_ms": 2.0 if i < 3 else 2.3} for i in range(6)]},
    }


def figures_of(html: str) -> dict:
    """The page's figure JSON, parsed strictly (NaN or Infinity would be a JavaScript error)."""
    m = re.search(r'<script type="application/json" id="trtprof-figures">(.*?)</script>', html, re.S)
    assert m, "figure block missing"
    def no_constants(name):
        raise AssertionError(f"non-JSON constant {name} in the figure data")
    return json.loads(m.group(1), parse_constant=no_constants)


def chart_ids(html: str) -> list[str]:
    return re.findall(r'<div class="chart" id="([^"]+)"', html)


def evil_everywhere() -> list[tuple[str, dict]]:
    a = analysis_example(name=EVIL)
    a["top_kernels"][0]["name"] = EVIL
    a["findings"][0]["evidence"]["kernel"] = EVIL
    s = sweep_example()
    s["variants"][0]["key"] = EVIL
    s["layers"][0]["name"] = EVIL
    s["layers"][0]["variant"] = EVIL
    s["run"]["model"] = EVIL
    lay = layers_example()
    lay["layers"][0]["name"] = EVIL
    lay["layers"][0]["type"] = EVIL
    c = compare_example()
    c["variants"][0]["layer_deltas"][0]["name"] = EVIL
    c["variants"][0]["key"] = EVIL
    c["baseline"]["label"] = EVIL
    return [("analysis", a), ("sweep", s), ("layers", lay), ("compare", c)]
