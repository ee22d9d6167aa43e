"""One line per variant of each summary.json given: latency, the label, accuracy vs FP32, memory columns."""
import json
import sys

MEM = ("weights_bytes", "activation_bytes_per_context", "workspace_bytes", "peak_allocated_bytes",
       "extra_context_bytes", "allocated_bytes", "reserved_bytes")


def worst(acc):
    rows = [(k, a.get("cosine"), a.get("rel_l2"), a.get("top1_agreement")) for k, a in (acc or {}).items()
            if isinstance(a, dict) and a.get("cosine") is not None]
    return min(rows, key=lambda r: r[1], default=None)


for path in sys.argv[1:]:
    d = json.load(open(path))
    print(f"== {path}")
    for v in d["variants"]:
        lat = v.get("latency_ms") or {}
        e = v.get("engine") or {}
        line = f"{v['key']:<28} {v['backend']:<11} {v['status']:<7}"
        if v["status"] != "ok":
            print(line, str(v.get("error"))[:200])
            continue
        line += f" median {lat.get('median', float('nan')):.3f} ms p99 {lat.get('p99', float('nan')):.3f}"
        line += f" compute {((v.get('compute_ms') or {}).get('median') or 0):.3f}"
        if v.get("cuda_graph_fallback"):
            line += f" graph-fallback: {v['cuda_graph_fallback']}"
        if e.get("precision_label"):
            line += f" [{e['precision_label']}]"
        w = worst(v.get("accuracy"))
        if w:
            line += f" | worst {w[0][:24]} cos {w[1]:.6f} relL2 {w[2]:.4g} top1 {w[3]}"
        ma = worst((v.get("model_arithmetic_accuracy") or {}).get("outputs"))
        if ma:
            line += f" | Q/DQ arithmetic (ORT, unfused) cos {ma[1]:.6f} relL2 {ma[2]:.4g}"
        print(line)
        m = v.get("memory") or {}
        run = m.get("device_memory_run") or {}
        cols = {k: run.get(k) for k in MEM}
        print("    memory:", {k: m.get(k) for k in ("engine_size_bytes", "activation_bytes_per_context",
                                                  "build_memory_bytes", "rss_before_build_bytes",
                                                  "rss_after_build_bytes", "rss_after_run_bytes")})
        print("    allocator:", cols, {k: run[k] for k in run if k.endswith("_reason") or k == "allocator_error"})
        loc = v.get("localization")
        if loc:
            print("    localization:", (loc.get("conclusion") or loc.get("skipped") or loc.get("error") or "")[:300])
        sk = v.get("skipped")
        if sk:
            print("    skipped:", sk)
