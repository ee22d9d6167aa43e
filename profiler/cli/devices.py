"""``trtprof sweep --devices 0,1`` and ``--scheduler URL``: the options the sweep gains to spread its variants
over GPUs or a Dask cluster, checked, and the parallel run they start
(:func:`profiler.distributed.sweep.run_parallel`).

``trtprof sweep`` calls in here only when one of these options is given: without them no Dask import and
no extra process.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import click

from profiler.cli.options import scheduler_option, worker_store_url
from profiler.errors import UsageError


def sweep_options(func: Callable) -> Callable:
    """``--devices`` and ``--scheduler`` for ``trtprof sweep``."""
    func = scheduler_option("the variants (workers started with --resources \"GPU=1\", one per GPU)")(func)
    return click.option("--devices", default=None, metavar="0,1,...",
                        help="Measure variants concurrently, one process per GPU (nvidia-smi indices or GPU "
                             "UUIDs), each variant alone on its GPU; one run.")(func)


def parse_devices(text: str) -> list[str]:
    """'0,1' -> ['0', '1']; CUDA indices or GPU UUIDs, each once."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError("--devices needs at least one GPU (e.g. --devices 0,1)")
    for d in items:
        if not (d.isdigit() or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z-]+", d)):
            raise UsageError(f"--devices takes CUDA device indices or GPU UUIDs, not {d!r}")
    dup = sorted({d for d in items if items.count(d) > 1})
    if dup:
        raise UsageError(f"--devices names GPU {dup[0]} twice; each GPU measures one variant at a time")
    return items


def parallel_runner(devices: str | None, scheduler: str | None, *, nsys: bool,
                    backend: str | None = None) -> Callable[[], Any] | None:
    """What ``--devices``/``--scheduler`` ask for, checked now: a function that starts the runner (processes,
    a cluster connection) when the sweep is about to run, or None (the serial sweep)."""
    if devices is None and scheduler is None:
        return None
    if devices is not None and scheduler is not None:
        raise UsageError("--devices runs local processes and --scheduler a Dask cluster: give one of them")
    if nsys:
        raise UsageError("--nsys profiles one process; it cannot be combined with --devices or --scheduler")
    from profiler.distributed.sweep import DaskRunner, DeviceRunner

    if devices is not None:
        chosen = parse_devices(devices)
        return lambda: DeviceRunner(chosen, backend)
    return lambda: DaskRunner(scheduler)


def run_sweep(sweep: Any, start_runner: Callable[[], Any], ctx: click.Context, db: str | None,
              no_store: bool) -> dict[str, Any]:
    """The sweep's variants through the runner; workers write to the same store as this process."""
    from profiler.cli.options import db_url
    from profiler.distributed.sweep import run_parallel
    from profiler.store.api import resolve_url

    url = None if no_store else worker_store_url(resolve_url(db_url(ctx, db)))
    return run_parallel(sweep, start_runner(), store_url=url)
