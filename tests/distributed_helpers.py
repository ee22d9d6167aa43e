"""Task functions for tests/test_distributed.py: importable by the worker processes the tests start."""

from __future__ import annotations

import os
import signal
import time


def double_or_die(item):
    """2 * item; the item "die" kills its own process, as a crash in native code would."""
    if item == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * item


def probe_device(item):
    """Where and when an item ran: (item, CUDA_VISIBLE_DEVICES, pid, start, end); "die" kills its process."""
    start = time.monotonic()
    if item == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    return item, os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid(), start, time.monotonic()


def kill_worker_on_variant(key: str | None) -> None:
    """Run in every Dask worker (client.run): the worker process that starts measuring variant ``key``
    dies on the spot (SIGKILL); ``None`` removes the trap."""
    from profiler.sweep import Sweep

    original = getattr(Sweep, "_untrapped_run_variant", Sweep._run_variant)
    Sweep._untrapped_run_variant = original
    if key is None:
        Sweep._run_variant = original
        return

    def trapped(self, spec, *args, **kwargs):
        if spec.key == key:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, spec, *args, **kwargs)

    Sweep._run_variant = trapped
