"""Where a task runs: one interface, three places.

    runner = ProcessRunner(jobs=4)                      # or InlineRunner(), DaskRunner("tcp://host:8786")
    try:
        for item, outcome in runner.map(analyse_row, requests):
            outcome.value if outcome.lost is None else outcome.lost
    finally:
        runner.close()

``map(fn, items)`` yields ``(item, Outcome)`` pairs as tasks finish. A task reports its own failures in
what it returns; ``Outcome.lost`` says why a task never returned (its process or worker died). ``describe``
says where the tasks run, for the progress line. Dask is imported only by :class:`DaskRunner`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol

from profiler.pipeline.pools import Outcome

Task = Callable[[Any], Any]


class Runner(Protocol):
    """What every runner offers."""

    describe: str

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]: ...

    def close(self, abort: bool = False) -> None: ...


class InlineRunner:
    """This process, one task after the other (a notebook, a test, a single capture)."""

    describe = "this process"

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]:
        for item in items:
            yield item, Outcome(value=fn(item), where="inline")

    def close(self, abort: bool = False) -> None:
        pass


class ProcessRunner:
    """``jobs`` local processes, a fresh one per task (``--jobs``), each heap capped at
    ``memory_limit_bytes``; ``preload``: modules the process server imports once."""

    def __init__(self, jobs: int, *, memory_limit_bytes: int | None = None, preload: tuple[str, ...] = ()):
        self.jobs = max(1, int(jobs))
        self.memory_limit_bytes = memory_limit_bytes
        self.preload = preload
        self.describe = f"{self.jobs} local process(es)"

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]:
        from profiler.pipeline.pools import local_map

        return local_map(fn, items, jobs=self.jobs, memory_limit_bytes=self.memory_limit_bytes,
                         preload=self.preload)

    def close(self, abort: bool = False) -> None:
        pass  # each map ends its own processes


class DeviceRunner:
    """One long-lived local process per GPU (``--devices 0,1``), started at once; ``warm``: a function and
    its argument each process runs first (imports, CUDA initialisation)."""

    def __init__(self, devices: list[str], warm: tuple[Task, Any] | None = None):
        from profiler.pipeline.pools import DevicePools

        self.devices = list(devices)
        self.describe = f"{len(devices)} GPU process(es): {', '.join(devices)}"
        self.pools = DevicePools(self.devices, warm=warm)

    def each(self, fn: Task, arg: Any) -> None:
        """Queue ``fn(arg)`` in every device's process ahead of the tasks ``map`` gives it."""
        self.pools.each(fn, arg)

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]:
        return self.pools.map(fn, items)

    def close(self, abort: bool = False) -> None:
        # every result is in (or the work is abandoned): the processes exit while this one goes on
        self.pools.close(abort, wait=False)


class DaskRunner:
    """The Dask cluster at ``address``. ``resources``: what each task asks of a worker (``{"GPU": 1}``);
    with them at most one task per such worker is in flight, so a worker that dies loses only its own.
    ``key``: a task's Dask key from its item."""

    def __init__(self, address: str, *, resources: dict[str, float] | None = None,
                 key: Callable[[Any], str] | None = None):
        from profiler.pipeline.pools import dask_client

        self.address = address
        self.client = dask_client(address)
        self.resources = resources
        self.key = key
        self.describe = f"the Dask cluster at {address}"
        self.held: list[Any] = []  # futures submitted outside map, released on close

    def workers(self) -> list[str]:
        """The workers that offer every resource the tasks ask for."""
        from profiler.pipeline.pools import workers_with

        names = list(self.resources or {})
        if not names:
            return list((self.client.scheduler_info().get("workers") or {}))
        return workers_with(self.client, names[0])

    def each(self, fn: Task, arg: Any) -> None:
        """One ``fn(arg)`` per worker, pinned to it and asking the tasks' resources, ahead of the tasks."""
        self.held += [self.client.submit(fn, arg, workers=[w], allow_other_workers=False,
                                         resources=self.resources, pure=False) for w in self.workers()]

    def map(self, fn: Task, items: Iterable[Any]) -> Iterator[tuple[Any, Outcome]]:
        from profiler.pipeline.pools import dask_map

        items = list(items)
        keys = [self.key(it) for it in items] if self.key else None
        in_flight = (lambda: len(self.workers())) if self.resources else None
        return dask_map(self.client, fn, items, keys=keys, resources=self.resources, in_flight=in_flight)

    def close(self, abort: bool = False) -> None:
        """Release what this runner submitted (the cluster drops unfinished tasks) and disconnect."""
        for f in self.held:
            f.release()
        self.client.close()
