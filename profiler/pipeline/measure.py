"""The measure task: one variant of a sweep run measured in whatever process runs it (a GPU process of
``sweep --devices``, a Dask worker of ``sweep --scheduler``), stored, and returned as a
:class:`profiler.sweep.VariantOutcome` that the coordinator's ``Sweep.merge`` adds to the run.

    outcome = measure(MeasureRequest(config_json, "fp16-wsdefault-s1", run_id=7, store_url=url))
    sweep.merge(outcome)

The process prepares the sweep once (model, inputs, backend, FP32 reference) and reuses it for every
variant of the same run it is given; :func:`prime` does that ahead of the first variant.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "clocks.max.sm", "clocks.max.mem",
              "clocks.applications.graphics", "clocks.applications.memory", "power.limit")
"""What ``nvidia-smi`` is asked of the GPU a variant ran on."""

_PREPARED: dict[str, Any] = {}  # per process: the prepared sweep of the run it last served


@dataclass(frozen=True)
class MeasureRequest:
    """Which variant of which run (the run's configuration as JSON, sorted keys) and where to store it."""

    config_json: str
    key: str
    run_id: int | None = None
    store_url: str | None = None
    """The run store the coordinator created; the variant is stored here when ``run_id`` is given too."""


def measure(request: MeasureRequest) -> Any:
    """Measure and store one variant; returns its ``VariantOutcome`` (``stored`` when it was stored here),
    its record carrying ``device``: where it ran and when."""
    from dataclasses import replace

    from profiler.findings import json_safe

    started = time.time()
    sweep, prep, reference = _prepared(request.config_json)
    planned = next(p for p in prep.plan if p.spec.key == request.key)
    done = sweep.measure(planned, prep, reference(planned.spec.precision))
    rec = json_safe({**done.record,
                     "device": {**worker_device(prep.backend), "started_at": started, "finished_at": time.time()}})
    stored = bool(request.store_url and request.run_id is not None)
    if stored:
        _store(request, rec, done.samples, done.layers)
    return replace(done, record=rec, layers=json_safe(done.layers), stored=stored)


def _store(request: MeasureRequest, rec: dict[str, Any], samples: list[dict], layers: list[dict]) -> None:
    from profiler.store import Store
    from profiler.store.rows import sweep_rows

    store = Store.open(request.store_url, upgrade=False)
    try:
        store.replace_variant(request.run_id, sweep_rows(rec, samples, layers))  # a task run twice: one row
    finally:
        store.close()


def prime(config_json: str) -> None:
    """Prepare a sweep (model, inputs, backend, FP32 reference) in a process before its first variant
    arrives, while the coordinator prepares the run."""
    _sweep, prep, reference = _prepared(config_json)
    if any(p.skip_reason is None and p.spec.precision != "fp32" for p in prep.plan):
        reference("fp16")


def _prepared(config_json: str) -> tuple[Any, Any, Callable[[str], Any]]:
    """(Sweep, Prepared, reference(precision)) of a sweep configuration, prepared once per process."""
    import json

    from profiler.sweep import Sweep, SweepConfig

    if _PREPARED.get("config") != config_json:
        _PREPARED.clear()
        sweep = Sweep(SweepConfig.from_dict(json.loads(config_json)))
        prep = sweep.prepare(create_run=False)
        cache: dict[str, Any] = {}

        def reference(precision: str) -> Any:
            if precision == "fp32":
                return None
            if "ref" not in cache:
                cache["ref"] = sweep.reference_outputs(prep)
            return cache["ref"]

        _PREPARED.update(config=config_json, value=(sweep, prep, reference))
    return _PREPARED["value"]


def warm_backend(name: str) -> None:
    """In a fresh device process: import the backend and initialise it on its GPU (torch, CUDA context)."""
    from profiler.backends import get_backend

    try:
        get_backend(name).describe()
    except Exception:  # the variant task reports what is wrong with the backend, with its context
        pass


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
