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
import socket
import subprocess
import threading
import time
from typing import Any, Iterator

from profiler.findings import Finding, json_safe

RESOURCE = "GPU"  # the Dask worker resource a variant asks for (dask worker --resources "GPU=1")
LOST_NOTE = "--resume RUN measures it again"
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "clocks.max.sm", "clocks.max.mem",
              "clocks.applications.graphics", "clocks.applications.memory", "power.limit")
COMPARED = ("name", "clocks.max.sm", "clocks.max.mem", "clocks.applications.graphics",
            "clocks.applications.memory", "power.limit")  # what must match for variants to be comparable


# -- worker side --------------------------------------------------------------------------------------
_PREPARED: dict[str, Any] = {}  # per worker process: the prepared sweep of the run it last served


def run_variant_task(task: dict[str, Any]) -> dict[str, Any]:
    """Measure one variant of a run, in a worker process: returns {record, samples_ms, layers, accuracy_checks}
    (the checks as measured, judged by the coordinator's rules with the run's findings).
    The variant is stored by this process (when the run has a store)."""
    from profiler.nvtx import ranges, variant_range_name

    started = time.time()
    sweep, prep, reference = _prepared(task["config_json"])
    planned = next(p for p in prep.plan if p.spec.key == task["key"])
    before = len(sweep.accuracy_checks)
    with ranges().range(variant_range_name(planned.spec.key)):
        rec, samples, layers = sweep._run_variant(planned.spec, prep.backend, prep.model_path, prep.shapes,
                                                  prep.feeds, reference(planned.spec.precision))
    rec["device"] = {**worker_device(prep.backend), "started_at": started, "finished_at": time.time()}
    rec = json_safe(rec)
    if task.get("store_url") and task.get("run_id") is not None:
        from profiler.store import Store

        store = Store.open(task["store_url"], upgrade=False)
        try:
            store.delete_variants(task["run_id"], [rec["key"]])  # a task run twice still stores one row
            sweep.store, sweep.run_id = store, task["run_id"]
            sweep._store_variant(rec, samples, layers)
        finally:
            sweep.store, sweep.run_id = None, None
            store.close()
    return {"record": rec, "samples_ms": [s["latency_ms"] for s in samples], "layers": json_safe(layers),
            "accuracy_checks": sweep.accuracy_checks[before:]}


def prime_worker(config_json: str) -> None:
    """Prepare a sweep (model, inputs, backend, FP32 reference) in a device process before its first
    variant arrives, while the coordinator prepares the run."""
    _sweep, prep, reference = _prepared(config_json)
    if any(p.skip_reason is None and p.spec.precision != "fp32" for p in prep.plan):
        reference("fp16")


def _prepared(config_json: str):
    """(Sweep, Prepared, reference(precision)) of a sweep configuration, prepared once per worker process."""
    import json

    from profiler.sweep import Sweep, SweepConfig

    if _PREPARED.get("config") != config_json:
        _PREPARED.clear()
        sweep = Sweep(SweepConfig.from_dict(json.loads(config_json)))
        prep = sweep.prepare(create_run=False)
        cache: dict[str, Any] = {}

        def reference(precision: str):
            if precision == "fp32":
                return None
            if "ref" not in cache:
                cache["ref"] = sweep._reference(prep.backend, prep.model_path, prep.shapes, prep.feeds, prep.plan)
            return cache["ref"]

        _PREPARED.update(config=config_json, value=(sweep, prep, reference))
    return _PREPARED["value"]


def worker_device(backend: Any) -> dict[str, Any]:
    """Where this process measures: host, worker, and the GPU it sees (nvidia-smi's view of it)."""
    d: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                         "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        from distributed import get_worker  # only inside a Dask worker; absent on a base install

        d["worker"] = get_worker().address
    except Exception:
        pass
    desc = backend.describe() if backend is not None else {}
    d["name"] = desc.get("device")
    uses_gpu = backend is not None and backend.is_gpu
    d["gpu"] = bool(uses_gpu)
    if uses_gpu:
        visible = (d["cuda_visible_devices"] or "0").split(",")[0].strip()
        d.update(gpu_query(visible))
    return d


def gpu_query(device: str) -> dict[str, Any]:
    """nvidia-smi's identity and clock settings of one GPU (index or UUID); {} where it does not answer."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits",
                              "-i", device], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    return {k: (None if v.startswith("[") or v in ("N/A", "") else v) for k, v in zip(SMI_FIELDS, values)}


# -- runners --------------------------------------------------------------------------------------------
class DeviceRunner:
    """Local processes, one per GPU (``--devices 0,1``), started (and their backend warmed) at once."""

    def __init__(self, devices: list[str], backend: str | None = None):
        from profiler.distributed.pools import DevicePools

        self.devices = devices
        self.describe = f"{len(devices)} GPU process(es): {', '.join(devices)}"
        self.pools = DevicePools(devices, warm=(warm_backend, backend) if backend else None)

    def prime(self, config_json: str) -> None:
        self.pools.each(prime_worker, config_json)

    def map(self, tasks: list[dict[str, Any]]) -> Iterator[tuple[dict, Any]]:
        return self.pools.map(run_variant_task, tasks)

    def close(self, abort: bool = False) -> None:
        # every variant's result is in (or the run is abandoned): the processes exit while this one
        # writes the summary and report
        self.pools.close(abort, wait=False)


def warm_backend(name: str) -> None:
    """In a fresh device process: import the backend and initialise it on its GPU (torch, CUDA context)."""
    from profiler.backends import get_backend

    try:
        get_backend(name).describe()
    except Exception:  # the variant task reports what is wrong with the backend, with its context
        pass


class DaskRunner:
    """The Dask cluster at ``address``; each variant asks for one ``GPU`` resource of a worker."""

    def __init__(self, address: str):
        from profiler.distributed.pools import dask_client, workers_with
        from profiler.errors import UsageError

        self.client = dask_client(address)
        workers = workers_with(self.client, RESOURCE)
        if not workers:
            self.client.close()
            raise UsageError(f"no worker of the Dask cluster at {address} offers the {RESOURCE} resource: start "
                             f"one worker per GPU with --resources \"{RESOURCE}=1\" (and CUDA_VISIBLE_DEVICES set "
                             "to that GPU) so that each measures one variant at a time")
        self.describe = f"Dask cluster {address}: {len(workers)} worker(s) with {RESOURCE}=1"

    def prime(self, config_json: str) -> None:
        """One preparation task per GPU worker, pinned to it, ahead of the variants (they queue behind it on
        the worker's GPU resource)."""
        from profiler.distributed.pools import workers_with

        self.primes = [self.client.submit(prime_worker, config_json, workers=[w], allow_other_workers=False,
                                          resources={RESOURCE: 1}, pure=False)
                       for w in workers_with(self.client, RESOURCE)]

    def map(self, tasks: list[dict[str, Any]]) -> Iterator[tuple[dict, Any]]:
        from profiler.distributed.pools import dask_map

        keys = [f"trtprof-variant-{t.get('run_id')}-{t['key']}-{os.getpid()}" for t in tasks]
        from profiler.distributed.pools import workers_with

        return dask_map(self.client, run_variant_task, tasks, keys=keys, resources={RESOURCE: 1},
                        in_flight=lambda: len(workers_with(self.client, RESOURCE)))

    def close(self, abort: bool = False) -> None:
        """Release this run's tasks (after Ctrl-C the cluster drops those not finished) and disconnect."""
        for f in getattr(self, "primes", []):
            f.release()
        self.client.close()


# -- coordinator ---------------------------------------------------------------------------------------
def run_parallel(sweep: Any, runner: Any, *, store_url: str | None = None) -> dict[str, Any]:
    """Run a new or resumed ``Sweep``'s remaining variants through ``runner`` and finish the run there."""
    import json

    from profiler.sweep.records import variant_record

    config_json = json.dumps(sweep.config.to_dict(), sort_keys=True)
    lost = 0
    finished = False
    try:
        if hasattr(runner, "prime"):
            runner.prime(config_json)  # the workers prepare while this process plans and stores the run
        prep = sweep.prepare()
        sweep.say(f"variants run on {runner.describe}")
        tasks = []
        for p in prep.todo:
            if p.skip_reason:
                sweep._store_variant(variant_record(p.spec, prep.backend.name, "skipped", p.skip_reason), [], [])
                continue
            tasks.append({"key": p.spec.key, "run_id": sweep.run_id, "store_url": store_url,
                          "config_json": config_json})
        specs = {p.spec.key: p.spec for p in prep.plan}
        ahead = convert_ahead(sweep.config, prep, [specs[t["key"]].precision for t in tasks])
        for task, outcome in runner.map(tasks):
            if outcome.lost is None:
                _keep(sweep, outcome.value)
                rec = outcome.value["record"]
                where = _device_label(rec.get("device") or {})
                sweep.say(f"[{where}] " + (_ok_line(rec) if rec["status"] == "ok"
                                            else f"{rec['key']}: {rec['status']}: {rec.get('error')}"))
                continue
            lost += 1
            reason = f"lost with its worker ({outcome.where or 'unknown'}): {outcome.lost}; {LOST_NOTE}"
            sweep.say(f"  {task['key']}: {reason}")
            rec = variant_record(specs[task["key"]], prep.backend.name, "failed", reason, lost=True,
                                 device={"worker": outcome.where})
            sweep._store_variant(rec, [], [])
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


def _keep(sweep: Any, value: dict[str, Any]) -> None:
    """A worker's result into the coordinator's run (the worker stored it already)."""
    rec = value["record"]
    sweep.variants.append(rec)
    if value.get("samples_ms"):
        sweep.samples_ms[rec["key"]] = value["samples_ms"]
    if value.get("layers"):
        sweep.layers[rec["key"]] = value["layers"]
    sweep.accuracy_checks.extend(value.get("accuracy_checks") or [])


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


__all__ = ["DaskRunner", "DeviceRunner", "device_findings", "devices_table", "run_parallel",
           "run_variant_task"]
