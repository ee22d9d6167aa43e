"""How much of the host's CPU other processes took while a timed phase ran.

A query whose latency follows the host (a CPU backend, an enqueue-bound GPU query) slows down when
other processes share the machine: a second test worker, a build, a noisy neighbour's steal time on a
VM. Two runs of one configuration made minutes apart on a shared host can then differ by 20% with
every process-level repeat of one run on the same side, because the repeats of one run are taken
back to back, under the same load. ``trtprof compare`` needs to know that load to not call it a change.

Measured from Linux's ``/proc/stat`` (all CPUs: busy and steal time, in clock ticks) and this
process's own CPU time (``os.times``, all its threads): the others' share is (busy + steal - own) / all, over the
window. ``None`` where ``/proc/stat`` is not readable (macOS, Windows, a sandbox hiding it).

``TRTPROF_HOST_LOAD`` replaces the probe for every timed phase of the process and of the repeat
processes it starts: a share from 0 to 1 is reported as measured, ``unknown`` reports nothing. Tests
use it so that a verdict does not follow the load of the machine they happen to run on; a user can
use it where ``/proc/stat`` misleads (a container that sees the whole host's counters).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from profiler.errors import UsageError

#: Ticks per second of /proc/stat's counters.
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: The environment variable that fixes the share every timed phase reports (a number 0-1, or "unknown").
OVERRIDE_ENV = "TRTPROF_HOST_LOAD"


def injected_share(environ: dict[str, str] | None = None) -> tuple[bool, float | None]:
    """(injected, share) from ``TRTPROF_HOST_LOAD``: (False, None) when it is unset or empty.

    A value that is neither a share from 0 to 1 nor ``unknown`` is a usage error (exit 2).
    """
    raw = (os.environ if environ is None else environ).get(OVERRIDE_ENV, "").strip()
    if not raw:
        return False, None
    if raw.lower() == "unknown":
        return True, None
    try:
        share = float(raw)
    except ValueError:
        share = math.nan
    if not 0.0 <= share <= 1.0:  # NaN fails both comparisons
        raise UsageError(f"{OVERRIDE_ENV}={raw!r} is neither a share of the host's CPU from 0 to 1 nor 'unknown'")
    return True, share


def read_proc_stat(path: str | Path = "/proc/stat") -> tuple[int, int] | None:
    """(busy ticks incl. steal, all ticks) summed over every CPU; None when unreadable.

    Fields of the ``cpu`` line: user nice system idle iowait irq softirq steal [guest guest_nice].
    guest time is already inside user, so it is not added again; idle and iowait are the free time.
    """
    try:
        with open(path, encoding="ascii") as fh:
            line = fh.readline()
    except OSError:
        return None
    parts = line.split()
    if not parts or parts[0] != "cpu" or len(parts) < 5:
        return None
    try:
        ticks = [int(x) for x in parts[1:9]]
    except ValueError:
        return None
    total = sum(ticks)
    free = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return total - free, total


def own_cpu_s() -> float:
    """This process's CPU time (all threads, user + system), in seconds."""
    t = os.times()
    return t.user + t.system


def others_share(before: tuple[int, int], after: tuple[int, int], own_s: float,
                 clk_tck: float = _CLK_TCK) -> float | None:
    """Share (0-1) of all CPU time in the window that went to other processes (or was stolen)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    if total <= 0:
        return None
    others = busy - own_s * clk_tck
    return min(1.0, max(0.0, others / total))


@dataclass
class HostLoad:
    """Context manager: ``with HostLoad() as load: ...`` then ``load.others_share`` (None when unknown)."""

    stat: Callable[[], tuple[int, int] | None] = read_proc_stat
    own: Callable[[], float] = own_cpu_s
    others_share: float | None = None

    def __enter__(self) -> "HostLoad":
        self._injected, self._share = injected_share()
        if not self._injected:
            self._before, self._own0 = self.stat(), self.own()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._injected:
            self.others_share = self._share
            return
        after, own1 = self.stat(), self.own()
        if self._before is not None and after is not None:
            self.others_share = others_share(self._before, after, own1 - self._own0)
