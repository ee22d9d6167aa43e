"""Process-level repeats of the timed phase: ``trtprof sweep --repeat N``.

Why processes: per-iteration samples of one process share its state (CPU frequency and which cores
its threads landed on, co-tenants, the allocator's layout, the host's enqueue speed), so they cannot
measure how much a second run of the same configuration would differ. pyperf answers this by running
every benchmark in many worker processes; so does this module.

What one repeat is: a fresh Python process (``python -m profiler.harness.repeat JOB OUT``) that loads
each measured variant's prepared model, builds its engine (from the engine cache where the backend has
one, as a deployment restarting would), binds the first input sample, and times it with the sweep's
own harness settings (warm-up, iterations, duration, streams, transfers). It records that process's
median latency per variant. Repeats are interleaved across variants (repeat r times every variant,
starting at variant r mod V), so a slow drift of the machine spreads over all variants instead of
landing on one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

#: How long one worker may take beyond its variants' timed phases (import, engine load, warm-up).
WORKER_OVERHEAD_S = 120.0


def _spec(d: dict[str, Any]):
    from profiler.backends.base import VariantSpec

    shapes = tuple(sorted((k, tuple(int(x) for x in v)) for k, v in (d.get("shapes") or {}).items()))
    return VariantSpec(d["precision"], d.get("workspace_bytes"), int(d.get("streams") or 1),
                       bool(d.get("cuda_graph")), shapes)


def time_variants(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Inside a worker: each variant of ``job`` built and timed once; {key: {median_ms, count} | {error}}."""
    from profiler.backends import get_backend
    from profiler.harness.runner import HarnessConfig, run_queries, summarize_timings

    backend = get_backend(job["backend"], **(job.get("backend_options") or {}))
    feeds = dict(np.load(job["inputs"], allow_pickle=False))
    harness = HarnessConfig(**job["harness"])
    out: dict[str, dict[str, Any]] = {}
    for v in job["variants"]:
        engine, contexts = None, []
        try:
            spec = _spec(v)
            engine = backend.build(v["model_path"], spec, job.get("cache_dir"))
            contexts = [engine.create_context(i) for i in range(spec.streams)]
            for ctx in contexts:
                ctx.set_transfers(bool(job.get("transfers", True)))
                ctx.set_inputs(feeds)
                if spec.cuda_graph:
                    ctx.enable_cuda_graph()
            m = run_queries(contexts, harness, key=v["key"])
            timing = summarize_timings(m.timings)
            lat = timing["latency_ms"] or {}
            out[v["key"]] = {"median_ms": lat.get("median"), "count": timing.get("count"),
                             "cov_pct": lat.get("cov_pct"), "host_others_share": m.host_others_share}
        except Exception as exc:  # one variant failing in a repeat is recorded; the others go on
            out[v["key"]] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for ctx in contexts:
                ctx.close()
            if engine is not None:
                engine.close()
    return out


def run_repeats(variants: Sequence[dict[str, Any]], *, backend: str, backend_options: dict[str, Any] | None,
                harness: dict[str, Any], transfers: bool, feeds: dict[str, np.ndarray], cache_dir: str | None,
                repeats: int, progress: Callable[[str], None] = lambda _m: None) -> dict[str, dict[str, Any]]:
    """Run ``repeats`` worker processes over ``variants`` (summary records with ``model_path``).

    Returns {key: {"medians_ms": [...], "counts": [...], "host_others_shares": [...], "errors": [...],
    "processes": N}}; ``host_others_shares`` holds, per repeat, the share of the host's CPU other
    processes took while it was timed (None where unmeasurable).
    """
    todo = [{"key": v["key"], "model_path": v["model_path"], "precision": v["precision"],
             "workspace_bytes": v.get("workspace_bytes"), "streams": v.get("streams") or 1,
             "cuda_graph": bool(v.get("cuda_graph")), "shapes": v.get("shapes") or {}} for v in variants]
    result = {v["key"]: {"medians_ms": [], "counts": [], "host_others_shares": [], "errors": [], "processes": repeats}
              for v in todo}
    if not todo:
        return result
    per_worker_s = WORKER_OVERHEAD_S + len(todo) * (float(harness.get("duration_s", 3.0)) * 4 + 10)
    with tempfile.TemporaryDirectory(prefix="trtprof-repeat-") as tmp:
        inputs = Path(tmp) / "inputs.npz"
        np.savez(inputs, **feeds)
        for r in range(repeats):
            order = todo[r % len(todo):] + todo[:r % len(todo)]
            job = {"backend": backend, "backend_options": backend_options or {}, "harness": harness,
                   "transfers": transfers, "inputs": str(inputs), "cache_dir": cache_dir, "variants": order}
            job_path, out_path = Path(tmp) / f"job{r}.json", Path(tmp) / f"out{r}.json"
            job_path.write_text(json.dumps(job))
            progress(f"repeat {r + 1}/{repeats}: a new process times {len(order)} variant(s)")
            try:
                proc = subprocess.run([sys.executable, "-m", "profiler.harness.repeat", str(job_path), str(out_path)],
                                      capture_output=True, text=True, timeout=per_worker_s)
                got = json.loads(out_path.read_text()) if proc.returncode == 0 and out_path.exists() else None
                failure = None if got is not None else (proc.stderr.strip().splitlines() or ["no output"])[-1]
            except subprocess.TimeoutExpired:
                got, failure = None, f"timed out after {per_worker_s:.0f} s"
            for v in todo:
                rec = result[v["key"]]
                res = (got or {}).get(v["key"]) or {"error": f"repeat process failed: {failure}"}
                if res.get("median_ms") is not None:
                    rec["medians_ms"].append(float(res["median_ms"]))
                    rec["counts"].append(res.get("count"))
                    rec["host_others_shares"].append(res.get("host_others_share"))
                else:
                    rec["errors"].append(str(res.get("error")))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    job = json.loads(Path(args[0]).read_text())
    Path(args[1]).write_text(json.dumps(time_variants(job)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
