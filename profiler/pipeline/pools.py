"""The machinery under the runners (:mod:`profiler.pipeline.runners`): local process pools
(``concurrent.futures``) and a Dask distributed cluster.

Each map yields ``(item, Outcome)`` pairs as tasks finish, in completion order. A task's own exceptions
are the task function's business (they return a record saying what failed); an ``Outcome`` with
``lost`` set means the process or worker running it died or could not be reached, and says why.
"""

from __future__ import annotations

import os
import resource
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator


@dataclass
class Outcome:
    """What came back from one task: its return value, or why it was lost."""

    value: Any = None
    lost: str | None = None
    where: str | None = None  # the device or worker that ran (or lost) it


def _ignore_interrupt() -> None:
    """Ctrl-C reaches every process of the terminal's group; the parent handles it (and ends the workers)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """End a pool's processes now (after Ctrl-C): what they were running is not finished."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _limit_memory(limit_bytes: int | None) -> None:
    """Process initializer: cap the heap (RLIMIT_DATA: brk and private writable mappings) so one capture
    that needs more than its share fails alone with MemoryError instead of taking the host down."""
    _ignore_interrupt()
    if limit_bytes:
        resource.setrlimit(resource.RLIMIT_DATA, (int(limit_bytes), int(limit_bytes)))


def _pool(workers: int, initializer: Callable | None = None, initargs: tuple = (),
          preload: tuple[str, ...] = ()) -> ProcessPoolExecutor:
    """A process pool whose children inherit nothing of this process: no CUDA context, no open store
    connection, no threads. With ``preload`` (module names), each task gets a fresh process forked from a
    server that imported those modules once (forkserver), so a new process per task costs milliseconds."""
    import multiprocessing

    kwargs: dict[str, Any] = {}
    if preload and sys.version_info >= (3, 11) and "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        kwargs["max_tasks_per_child"] = 1
    else:
        ctx = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=initializer, initargs=initargs,
                               **kwargs)


def local_map(fn: Callable[[Any], Any], items: Iterable[Any], *, jobs: int, memory_limit_bytes: int | None = None,
              preload: tuple[str, ...] = ()) -> Iterator[tuple[Any, Outcome]]:
    """Run ``fn(item)`` for every item in ``jobs`` local processes, each item in a fresh process (Python 3.11+;
    on 3.10 the processes are reused), each process's heap capped at ``memory_limit_bytes``.

    When a process dies (killed, out of memory, a crash in native code) the pool breaks and every task in
    it fails at once; those tasks are then run again one at a time, so only the one that kills its process
    is reported lost.
    """
    items = list(items)
    suspects: list[Any] = []
    pool = _pool(jobs, _limit_memory, (memory_limit_bytes,), preload)
    try:
        futures = {pool.submit(fn, it): it for it in items}
        for fut in _as_done(futures):
            it = futures[fut]
            try:
                yield it, Outcome(value=fut.result(), where="local")
            except BrokenProcessPool:
                suspects.append(it)
        pool.shutdown()
        for it in suspects:  # one at a time: a second death convicts this item alone
            pool = _pool(1, _limit_memory, (memory_limit_bytes,), preload)
            try:
                yield it, Outcome(value=pool.submit(fn, it).result(), where="local")
            except BrokenProcessPool as exc:
                yield it, Outcome(lost=f"its worker process died ({exc})", where="local")
            pool.shutdown()
    finally:  # Ctrl-C (or the caller stopping early): the running captures are abandoned
        _terminate(pool)


def _as_done(futures: dict[Future, Any]) -> Iterator[Future]:
    pending = set(futures)
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        yield from done


def _set_visible_device(device: str) -> None:
    """Process initializer: this process sees one GPU; indices count in nvidia-smi's (PCI bus) order."""
    _ignore_interrupt()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ["CUDA_VISIBLE_DEVICES"] = device


class DevicePools:
    """One long-lived process per device (``CUDA_VISIBLE_DEVICES`` = that device), started at once.

    ``warm`` (a function and its argument) runs first in each process, while the caller still prepares
    its own work: imports and CUDA initialisation then cost no time later. ``map`` runs one item at a time
    per device, never two on one device at once; a process that dies loses only the item it was running,
    and a fresh process takes its device's next item.
    """

    def __init__(self, devices: list[str], warm: tuple[Callable[[Any], Any], Any] | None = None):
        self.devices = list(devices)
        self.warm = warm
        self.pools = {d: self._start(d) for d in self.devices}

    def _start(self, device: str) -> ProcessPoolExecutor:
        pool = _pool(1, _set_visible_device, (device,))
        if self.warm is not None:
            pool.submit(self.warm[0], self.warm[1])  # failures here resurface in the first real task
        return pool

    def each(self, fn: Callable[[Any], Any], arg: Any) -> None:
        """Queue ``fn(arg)`` in every device's process, ahead of the items ``map`` will give it (its
        result is not waited for; a failure resurfaces in the real task that needs the same work)."""
        for pool in self.pools.values():
            pool.submit(fn, arg)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]:
        queue = list(items)
        running: dict[Future, tuple[str, Any]] = {}

        def feed(device: str) -> None:
            if queue:
                it = queue.pop(0)
                running[self.pools[device].submit(fn, it)] = (device, it)

        for d in self.devices:
            feed(d)
        while running:
            done, _ = wait(set(running), return_when=FIRST_COMPLETED)
            for fut in done:
                device, it = running.pop(fut)
                try:
                    outcome = Outcome(value=fut.result(), where=device)
                except BrokenProcessPool as exc:
                    self.pools[device].shutdown(wait=False, cancel_futures=True)
                    self.pools[device] = self._start(device)
                    outcome = Outcome(lost=f"the worker process of device {device} died while running it ({exc})",
                                      where=device)
                feed(device)  # the device's next item starts before the caller handles this one
                yield it, outcome

    def close(self, abort: bool = False, wait: bool = True) -> None:
        """Wait for the processes to finish; ``abort`` (Ctrl-C) ends them at once. ``wait=False`` returns
        while they exit (a GPU process's teardown takes a second or more): the interpreter still joins
        them before it exits, so the caller's remaining work overlaps their exit."""
        for p in self.pools.values():
            if abort:
                _terminate(p)
            else:
                p.shutdown(wait=wait, cancel_futures=True)


def device_map(fn: Callable[[Any], Any], items: Iterable[Any], *, devices: list[str]) -> Iterator[tuple[Any, Outcome]]:
    """``DevicePools(devices).map(fn, items)``, closed when done."""
    pools = DevicePools(devices)
    done = False
    try:
        yield from pools.map(fn, items)
        done = True
    finally:
        pools.close(abort=not done)


# -- Dask ---------------------------------------------------------------------------------------------
def dask_client(address: str):
    """A Dask distributed client of the scheduler at ``address`` (one clear sentence when it cannot be): the
    server probed first, within a declared timeout (:func:`profiler.pipeline.connect.connect`)."""
    from profiler.pipeline.connect import connect

    return connect(address)


def workers_with(client: Any, resource_name: str) -> list[str]:
    """The addresses of the cluster's workers that offer ``resource_name``."""
    info = client.scheduler_info(n_workers=-1) if _takes_n_workers(client) else client.scheduler_info()
    return [addr for addr, w in (info.get("workers") or {}).items() if (w.get("resources") or {}).get(resource_name)]


def _takes_n_workers(client: Any) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def dask_map(client: Any, fn: Callable[[Any], Any], items: Iterable[Any], *, keys: list[str] | None = None,
             resources: dict[str, float] | None = None,
             in_flight: Callable[[], int] | None = None) -> Iterator[tuple[Any, Outcome]]:
    """Submit ``fn(item)`` per item to the cluster; yield as they finish. A task whose worker died (Dask
    gives up after the scheduler's ``allowed-failures``) or that could not run comes back lost.

    ``in_flight``: how many tasks may be submitted at once (asked again as tasks finish). A sweep submits
    one task per GPU worker, so a worker that dies holds only the variant it was measuring: tasks queued
    on a dead worker count as its victims too and would be lost with it.
    """
    from distributed import as_completed

    queue = list(enumerate(items))
    futures: dict[Any, Any] = {}
    done = as_completed(loop=client.loop)

    def submit_next() -> None:
        i, it = queue.pop(0)
        kw: dict[str, Any] = {"pure": False}
        if keys:
            kw["key"] = keys[i]
        if resources:
            kw["resources"] = resources
        fut = client.submit(fn, it, **kw)
        futures[fut] = it
        done.add(fut)

    limit = max(1, in_flight()) if in_flight else len(queue)
    for _ in range(min(limit, len(queue))):
        submit_next()
    reported: set[Any] = set()
    try:
        for fut in done:
            if fut.key not in reported:
                reported.add(fut.key)
                yield futures[fut], _outcome(client, fut)
            running = sum(1 for f in futures if f.key not in reported)
            while queue and running < (max(1, in_flight()) if in_flight else len(queue) + running):
                submit_next()
                running += 1
        # a result lost with its worker before it was read goes back to pending and may slip past the
        # iterator: wait for every task not reported yet
        for fut, it in futures.items():
            if fut.key not in reported:
                reported.add(fut.key)
                yield it, _outcome(client, fut)
    finally:
        for fut in futures:
            fut.release()


def _outcome(client: Any, fut: Any) -> Outcome:
    """A finished future's result (then released, so that the cluster never recomputes a finished task
    when the worker holding its result dies), or why it was lost."""
    where = _where(client, fut)
    try:
        return Outcome(value=fut.result(), where=where)
    except Exception as exc:  # KilledWorker, CommClosedError, a task that could not be unpickled
        return Outcome(lost=f"{type(exc).__name__}: {exc}", where=where)
    finally:
        fut.release()


def _where(client: Any, fut: Any) -> str | None:
    try:
        who = client.who_has([fut]).get(fut.key) or ()
        return next(iter(who), None)
    except Exception:
        return None
