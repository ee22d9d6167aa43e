"""``trtprof import`` as a library: trtexec export sets -> the import document (variants, layers,
per-layer alignment between precisions, findings) and its stored run. Usable from a notebook; the
command (``profiler.cli.import_``) only parses options, calls these and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profiler.errors import UsageError


def _variant_keys(sets: list, names: tuple[str, ...]) -> list[str]:
    """Variant keys: --variant names in order, else the prefix (its directory when prefixes repeat)."""
    if names:
        if len(names) != len(sets):
            raise UsageError(f"--variant given {len(names)} time(s) but {len(sets)} export set(s) were found: "
                             + ", ".join(str(s.directory / s.prefix) for s in sets))
        return list(names)
    stems = [s.prefix.replace(".onnx.engine", "").replace(".engine", "").replace(".plan", "") for s in sets]
    dirs = [Path(s.directory).resolve().parts for s in sets]
    for depth in range(0, max(len(d) for d in dirs) + 1):
        keys = ["/".join(list(d[len(d) - depth:] if depth else []) + [st]) for d, st in zip(dirs, stems)]
        if len(set(keys)) == len(keys):
            return keys
    return [str(Path(s.directory) / s.prefix) for s in sets]


def build_import(paths: list[str], variant_names: tuple[str, ...] = (), label: str | None = None
                 ) -> tuple[dict[str, Any], list]:
    """Read every export set under ``paths``; returns (the --json dict, the EngineExports)."""
    from profiler.findings import Finding, frame_records
    from profiler.layers import align as al
    from profiler.layers import frame as lf
    from profiler.layers import trtexec as tx
    from profiler.rules.context import LayerContext
    from profiler.rules.layers import run_layer_rules

    sets = tx.find_export_sets(paths)
    keys = _variant_keys(sets, variant_names)
    exports = [tx.load_export(s, k) for s, k in zip(sets, keys)]
    variants, layers, lvars, warnings = [], [], [], []
    for key, e in zip(keys, exports):
        summ = e.summary or {}
        trt = e.trtexec or {}
        lat = summ.get("latency_ms") or trt.get("latency_ms") or {}
        gpu = summ.get("gpu_compute_ms") or trt.get("gpu_compute_ms") or {}
        tot = lf.layer_totals(e.layers)
        if not (len(e.layers) and e.layers["time_avg_ms"].notna().any()):
            tot["layer_sum_ms"] = None  # layer info without a profile: there is no time to sum
        med = gpu.get("median")
        opts = trt.get("inference_options") or {}
        v = {
            "key": key, "kind": "export", "backend": "tensorrt", "precision": e.precision, "model": e.model,
            "status": "ok", "source": str(Path(e.directory) / e.prefix),
            "streams": int(opts["Streams"]) if str(opts.get("Streams", "")).isdigit() else None,
            "cuda_graph": {"Enabled": True, "Disabled": False}.get(opts.get("CUDA Graph")),
            "latency_ms": lat, "gpu_compute_ms": gpu,
            "enqueue_ms": summ.get("enqueue_ms") or trt.get("enqueue_ms") or {},
            "h2d_ms": summ.get("h2d_ms") or trt.get("h2d_ms") or {},
            "d2h_ms": summ.get("d2h_ms") or trt.get("d2h_ms") or {},
            "throughput_qps": summ.get("throughput_qps", trt.get("throughput_qps")),
            "walltime_s": summ.get("walltime_s", trt.get("walltime_s")),
            "queries": summ.get("queries"), "warmup_queries": summ.get("warmup_queries"),
            "timestamp_resolution_ms": summ.get("timestamp_resolution_ms"),
            "layer_count": tot["layers"], "layer_sum_ms": tot["layer_sum_ms"],
            "per_layer_overhead_ms": (tot["layer_sum_ms"] - med) if med is not None and tot["layer_sum_ms"] is not None
            else None,
            "reformat_layers": tot["reformat_layers"], "reformat_ms": tot["reformat_ms"],
            "profiled_iterations": e.profile_count,
            "precision_mix_pct": lf.precision_mix(e.layers),
            "time_by_type": frame_records(lf.time_by_type(e.layers)) if len(e.layers) else [],
            "trtexec_summary": {k: v for k, v in trt.items() if k not in ("source",)},
            "trtexec_match": tx.compare_with_trtexec(summ, trt) if summ and trt else {},
            "tensorrt_version": e.tensorrt_version, "gpu": e.device.get("Selected Device"),
            "files": e.files, "messages": e.messages,
        }
        if tot["layer_sum_ms"] is not None and med is not None:
            v["note"] = (f"Per-layer times sum to {tot['layer_sum_ms']:.4f} ms per iteration against a "
                         f"{med:.4f} ms median GPU compute time: profiling each layer adds event overhead, "
                         "so the layer sum exceeds the end-to-end latency.")
        variants.append(v)
        layers.extend(frame_records(e.layers))
        warnings.extend(f"{key}: {m}" for m in e.messages)
        lvars.append(LayerContext(key=key, layers=e.layers, precision=e.precision, summary=e.summary,
                                   trtexec=trt, tensorrt_version=e.tensorrt_version))
    findings: list[Finding] = run_layer_rules(lvars)
    alignment = []
    by_model: dict[str, list[int]] = {}
    for i, e in enumerate(exports):
        if len(e.layers) and e.layers["time_avg_ms"].notna().any():
            by_model.setdefault(e.model or e.prefix, []).append(i)
    for model, idx in by_model.items():
        idx.sort(key=lambda i: lf.PRECISION_RANK.get(exports[i].precision or "", 99))
        for j in range(1, len(idx)):
            # each lower-precision variant against the closest higher-precision one
            higher = [i for i in idx[:j] if lf.PRECISION_RANK.get(exports[i].precision or "", 99)
                      < lf.PRECISION_RANK.get(exports[idx[j]].precision or "", 99)]
            ia = higher[-1] if higher else idx[j - 1]
            ib = idx[j]
            groups = al.align(exports[ia].layers, exports[ib].layers)
            s = al.summary(groups)
            ga = (variants[ia]["gpu_compute_ms"] or {}).get("median")
            gb = (variants[ib]["gpu_compute_ms"] or {}).get("median")
            if ga is not None and gb is not None:
                s["latency_delta_ms"] = gb - ga
            alignment.append({"model": model, "a": keys[ia], "b": keys[ib], "summary": s,
                              "groups": frame_records(groups)})
    gpus = sorted({v["gpu"] for v in variants if v.get("gpu")})
    versions = sorted({v["tensorrt_version"] for v in variants if v.get("tensorrt_version")})
    models = sorted({v["model"] for v in variants if v.get("model")})
    run = {"kind": "import", "source": " ".join(str(p) for p in paths), "label": label, "backend": "tensorrt",
           "gpu": ", ".join(gpus) or None, "tensorrt_version": ", ".join(versions) or None,
           "model": ", ".join(models) or None, "warnings": warnings,
           "note": "Per-layer times come from a separate profiling pass with an event pair per layer; their "
                   "sum exceeds the end-to-end latency, which comes from the un-profiled timing pass."}
    data = {"kind": "import", "run": run, "variants": variants, "layers": layers, "alignment": alignment,
            "findings": [f.to_dict() for f in findings]}
    from profiler.findings import json_safe

    return json_safe(data), exports


def store_import(store, data: dict[str, Any], exports: list) -> int:
    """Write the import as one run (kind 'import'; rows from :mod:`profiler.store.rows`); returns the run id."""
    from profiler.store import rows

    rid = store.create_run(**rows.import_run(data))
    for v, e in zip(data["variants"], exports):
        store.add_rows(rid, rows.export_rows(v, e))
    store.add_findings(rid, data["findings"])
    store.finish_run(rid, "ok", summary=rows.import_summary(data))
    return rid
