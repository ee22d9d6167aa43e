"""Progress for long phases: no silent stretch longer than a few seconds.

    with phase(say, "  fp16-s1: localizing the error against fp32"):
        ...   # prints "... 3 s", "... 6 s" while it runs, then "... done in 7.2 s"

Nothing is printed for a phase that ends within ``quiet_s``; the ticker is a daemon thread, so an
interrupt or an exception leaves nothing running.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

Say = Callable[[str], None]


@contextlib.contextmanager
def phase(say: Say, what: str, *, every_s: float = 3.0, quiet_s: float = 1.0,
          clock: Callable[[], float] = time.monotonic,
          wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> Iterator[None]:
    """Announce ``what`` every ``every_s`` seconds while the block runs, and how long it took if that
    was more than ``quiet_s`` seconds. ``clock`` and ``wait`` (True once the block has ended) are the
    ticker's time, injected by tests."""
    start = clock()
    stop = threading.Event()

    def tick() -> None:
        while not wait(stop, every_s):
            say(f"{what}... {clock() - start:.0f} s")

    ticker = threading.Thread(target=tick, name="trtprof-progress", daemon=True)
    ticker.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        ticker.join(timeout=1.0)
        took = clock() - start
        if ok and took > quiet_s:
            say(f"{what}: done in {took:.1f} s")


def trtexec_line(stats: dict | None) -> str:
    """Latency statistics the way trtexec prints them: min, max, mean, median, percentiles, CoV."""
    if not isinstance(stats, dict):
        return "Latency: not measured"

    def ms(key: str) -> str:
        v = stats.get(key)
        return f"{v:.5g} ms" if isinstance(v, (int, float)) and v == v else "-"

    cov = stats.get("cov_pct")
    cov_text = f"{cov:.3g}%" if isinstance(cov, (int, float)) and cov == cov else "-"
    return (f"Latency: min = {ms('min')}, max = {ms('max')}, mean = {ms('mean')}, median = {ms('median')}, "
            f"percentile(90%) = {ms('p90')}, percentile(99%) = {ms('p99')}, CoV = {cov_text}")
