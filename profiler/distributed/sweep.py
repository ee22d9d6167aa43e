"""A sweep's variants spread over GPUs (one process per GPU) or over a Dask cluster, merged into one run.

    from profiler.distributed.sweep import DeviceRunner, run_parallel
    summary = run_parallel(Sweep(config, store=store), DeviceRunner(["0", "1"]))

The coordinator (this process) plans the run and stores it; each variant is a task that a worker runs alone
on its GPU (one process per GPU here, or a Dask worker started with ``--resources GPU=1``): it prepares the
same sweep (model, inputs, FP32 reference), measures that one variant as the serial sweep does, writes it
to the store and returns its record. A variant whose worker dies is stored as failed with the reason and
``lost: true``; the run ends ``interrupted`` and ``--resume`` runs those variants again.

Each record carries ``device``: the host, the GPU (index, name, UUID, clocks where ``nvidia-smi`` answers)
and when the task ran; ``sweep.devices_differ`` flags variants whose GPUs differ in model or clocks.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from profiler.findings import Finding
from profiler.pipeline import runners

RESOURCE = "GPU"  # the Dask worker resource a variant asks for (dask worker --resources "GPU=1")
LOST_NOTE = "--resume RUN measures it again"
COMPARED = ("name", "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
            "clocks.applications.memory", "power.limit")  # what must match for variants to be comparable


# -- runners --------------------------------------------------------------------------------------------
class DeviceRunner(runners.DeviceRunner):
    """Local processes, one per GPU (``--devices 0,1``), started (and their backend warmed) at once."""

    def __init__(self, devices: list[str], backend: str | None = None):
        from profiler.pipeline.measure import warm_backend

        super().__init__(devices, warm=(warm_backend, backend) if backend else None)


class DaskRunner(runners.DaskRunner):
    """The Dask cluster at ``address``; each variant asks for one ``GPU`` resource of a worker, so a worker
    started with ``--resources GPU=1`` measures one variant at a time."""

    def __init__(self, address: str):
        from profiler.errors import UsageError

        super().__init__(address, resources={RESOURCE: 1},
                         key=lambda t: f"trtprof-variant-{t.run_id}-{t.key}-{os.getpid()}")
        workers = self.workers()
        if not workers:
            self.client.close()
            raise UsageError(f"no worker of the Dask cluster at {address} offers the {RESOURCE} resource: start "
                             f"one worker per GPU with --resources \"{RESOURCE}=1\" (and CUDA_VISIBLE_DEVICES set "
                             "to that GPU) so that each measures one variant at a time")
        self.describe = f"Dask cluster {address}: {len(workers)} worker(s) with {RESOURCE}=1"


# -- coordinator ---------------------------------------------------------------------------------------
def run_parallel(sweep: Any, runner: runners.Runner, *, store_url: str | None = None) -> dict[str, Any]:
    """Run a new or resumed ``Sweep``'s remaining variants through ``runner`` (the pipeline's measure task in
    each of its processes, merged into the sweep as they finish) and finish the run here."""
    import json

    from profiler.pipeline.measure import MeasureRequest, measure, prime
    from profiler.sweep import VariantOutcome
    from profiler.sweep.records import variant_record

    config_json = json.dumps(sweep.config.to_dict(), sort_keys=True)
    lost = 0
    finished = False
    try:
        if hasattr(runner, "each"):
            runner.each(prime, config_json)  # the workers prepare while this process plans and stores the run
        prep = sweep.prepare()
        sweep.say(f"variants run on {runner.describe}")
        tasks = []
        for p in prep.todo:
            if p.skip_reason:
                sweep.merge(VariantOutcome(variant_record(p.spec, prep.backend.name, "skipped", p.skip_reason)))
                continue
            tasks.append(MeasureRequest(config_json, p.spec.key, sweep.run_id, store_url))
        specs = {p.spec.key: p.spec for p in prep.plan}
        ahead = convert_ahead(sweep.config, prep, [specs[t.key].precision for t in tasks])
        for task, outcome in runner.map(measure, tasks):
            if outcome.lost is None:
                sweep.merge(outcome.value)
                rec = outcome.value.record
                where = _device_label(rec.get("device") or {})
                sweep.say(f"[{where}] " + (_ok_line(rec) if rec["status"] == "ok"
                                            else f"{rec['key']}: {rec['status']}: {rec.get('error')}"))
                continue
            lost += 1
            reason = f"lost with its worker ({outcome.where or 'unknown'}): {outcome.lost}; {LOST_NOTE}"
            sweep.say(f"  {task.key}: {reason}")
            sweep.merge(VariantOutcome(variant_record(specs[task.key], prep.backend.name, "failed", reason, lost=True,
                                                      device={"worker": outcome.where})))
        finished = True
        ahead.join()
    except KeyboardInterrupt:
        runner.close(abort=True)
        finished = None  # closed
        sweep.interrupted()
        raise
    finally:
        if finished is not None:
            runner.close(abort=not finished)  # an error here ends the workers' unfinished variants
    table = devices_table(sweep.variants)
    sweep.environment = {**(sweep.environment or {}), "devices": table}
    note = concurrency_note(table)
    if note and note not in sweep.notes:
        sweep.notes.append(note)
    sweep.extra_findings = device_findings(sweep.variants)
    return sweep.finish("interrupted" if lost else None)


def convert_ahead(config: Any, prep: Any, precisions: list[str]) -> threading.Thread:
    """Convert the model to each lower precision the tasks need (fp16, int8), in a thread of this process,
    into the variants cache the GPU workers read. The tasks go out in plan order (fp32 first), so by the
    time a worker reaches its first fp16 variant the conversion is usually there; without this every
    worker converts the same model itself. A conversion that fails here is left to the worker's own
    prepare step, which reports it on its variant."""
    from profiler.sweep.steps import precision_model

    wanted = list(dict.fromkeys(p for p in precisions if p != "fp32"))

    def work() -> None:
        for precision in wanted:
            try:
                precision_model(config, prep.model_path, precision, prep.shapes)
            except Exception:  # noqa: BLE001 - the worker's prepare step says what is wrong, on its variant
                pass

    thread = threading.Thread(target=work, name="trtprof-convert-ahead", daemon=True)
    thread.start()
    return thread


def concurrency_note(table: list[dict[str, Any]]) -> str | None:
    """What a reader of the latencies must know when several processes of one host timed variants at once
    (``table``: :func:`devices_table`'s rows), else None."""
    if len(table) < 2 or len({r["host"] for r in table}) != 1:
        return None
    if not any(r.get("gpu") for r in table):
        return ("the variants were timed concurrently by processes sharing one host's CPU, not alone: compare "
                "their latencies with care")
    return ("the variants were timed one per GPU, concurrently, by processes sharing one host's CPU: a GPU-bound "
            "variant measures as it would alone, an enqueue-bound one (the host launching as long as the GPU "
            "computes) can measure slower; time those alone before trusting a small difference")


def _ok_line(rec: dict[str, Any]) -> str:
    from profiler.sweep import variant_line

    return variant_line(rec).strip()


def _device_label(dev: dict[str, Any]) -> str:
    where = dev.get("index") or dev.get("cuda_visible_devices") or dev.get("worker") or dev.get("pid")
    return f"GPU {where}" if dev.get("index") is not None else str(where)


def _row_label(r: dict[str, Any]) -> str:
    if r.get("gpu"):
        return f"GPU {r.get('index') if r.get('index') is not None else r.get('cuda_visible_devices')}"
    if r.get("worker"):
        return str(r["worker"])
    return f"device {r.get('cuda_visible_devices') or '?'}"


def devices_table(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Which device ran which variants: one row per (host, GPU uuid or index, worker)."""
    rows: dict[tuple, dict[str, Any]] = {}
    for v in variants:
        dev = v.get("device") or {}
        if not dev:
            continue
        ident = (dev.get("host"), dev.get("uuid") or dev.get("index") or dev.get("cuda_visible_devices"),
                 dev.get("worker") if not dev.get("uuid") else None)
        row = rows.setdefault(ident, {**{k: dev.get(k) for k in ("host", "worker", "gpu", "index", "uuid", "pci.bus_id",
                                                                  "cuda_visible_devices", *COMPARED)},
                                      "variants": []})
        row["variants"].append(v["key"])
    return list(rows.values())


def device_findings(variants: list[dict[str, Any]]) -> list[Finding]:
    """Which device ran what (info), and a warning when the variants ran on GPUs that differ in model or
    clock settings: their latencies then compare hardware as well as engines."""
    rows = devices_table(variants)
    if not rows:
        return []
    where = {f"{r.get('host')}/{_row_label(r)}": {"name": r.get("name"), "variants": r["variants"]} for r in rows}
    out = [Finding(
        rule="sweep.devices", scope="sweep", severity="info",
        title=f"{len(rows)} device(s) measured the variants concurrently, one variant at a time each: "
              + "; ".join(f"{k} ({v['name']}): {', '.join(v['variants'])}" for k, v in where.items()),
        evidence={"devices": where})]
    table = [r for r in rows if any(r.get(k) for k in COMPARED)]
    differ = {k: sorted({str(r.get(k)) for r in table}) for k in COMPARED}
    differ = {k: vals for k, vals in differ.items() if len(vals) > 1}
    if not differ:
        return out
    groups = {f"{r.get('host')}/{_row_label(r)}": {k: r.get(k) for k in differ} | {"variants": r["variants"]}
              for r in table}
    what = ", ".join(f"{k} ({' vs '.join(v)})" for k, v in differ.items())
    return out + [Finding(
        rule="sweep.devices_differ", scope="sweep", severity="medium",
        title=f"Variants ran on GPUs that differ in {what}: their latencies compare the GPUs as well as the engines",
        evidence={"devices": groups}, threshold={"must_match": list(COMPARED)},
        recommendation="Run the sweep on identical GPUs with the same clock settings (nvidia-smi -lgc / -ac on "
                       "every GPU), or compare only variants that ran on the same GPU.")]


__all__ = ["DaskRunner", "DeviceRunner", "device_findings", "devices_table", "run_parallel"]
