"""NVTX ranges in the ``trtprof`` domain, so an nsys capture of a sweep reads like the sweep.

Uses the ``nvtx`` package when it is installed and a tool (nsys, Nsight Compute) is attached; otherwise
every call is a no-op. The hot loop asks :attr:`Ranges.enabled` once and, when it is False, never calls
into this module at all, so a run without a profiler pays nothing per iteration.

Range names carry the variant key: the variant range is ``sweep/<key>``, each of its steps (and the
warm-up) ``sweep/<key>/<step>``, and each timed iteration ``<key>/iter``; ``trtprof analyze`` groups an
nsys capture by these names.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

DOMAIN = "trtprof"


def variant_range_name(key: str) -> str:
    """``sweep/fp16-ws1G-s2``: the range around everything one variant does."""
    return f"sweep/{key}"


def step_range_name(key: str, step: str) -> str:
    """``sweep/fp16-ws1G-s2/time``: the range around one step of a variant (build, warm-up, timing, the
    per-layer pass), so each loop of timed queries sits in a range of its own that holds nothing else and
    ``trtprof analyze`` finds it there."""
    return f"sweep/{key}/{step}"


def iteration_range_name(key: str) -> str:
    """``fp16-ws1G-s2/iter``: the range around one timed query."""
    return f"{key}/iter"


def noop(*_args: Any) -> None:
    return None


class Ranges:
    """Push/pop ranges in one NVTX domain; a zero-cost stand-in when NVTX is not live."""

    def __init__(self, domain: str = DOMAIN):
        self.domain_name = domain
        self._domain: Any = None
        self.enabled = False
        try:
            import nvtx
            from nvtx._lib import DummyDomain
        except Exception:  # nvtx not installed, or an unexpected layout: stay disabled
            return
        try:
            if not nvtx.enabled():
                return
            dom = nvtx.get_domain(domain)
        except Exception:
            return
        if isinstance(dom, DummyDomain):  # no tool attached: nvtx hands out a dummy domain
            return
        self._domain = dom
        self.enabled = True

    def attributes(self, name: str, color: str = "green") -> Any:
        """Pre-built event attributes for ``name`` (registered once, reused every iteration)."""
        if not self.enabled:
            return None
        return self._domain.get_event_attributes(message=name, color=color)

    def pusher(self, name: str, color: str = "green") -> tuple[Callable[[], None], Callable[[], None]]:
        """(push, pop) callables for one fixed range name; both are no-ops when disabled."""
        if not self.enabled:
            return noop, noop
        attrs = self.attributes(name, color)
        dom = self._domain
        return (lambda: dom.push_range(attrs)), dom.pop_range

    @contextlib.contextmanager
    def range(self, name: str, color: str = "blue") -> Iterator[None]:
        """``with ranges.range("sweep/fp32-wsdefault-s1"): ...``"""
        if not self.enabled:
            yield
            return
        self._domain.push_range(self.attributes(name, color))
        try:
            yield
        finally:
            self._domain.pop_range()


_DEFAULT: Ranges | None = None


def ranges() -> Ranges:
    """The process-wide ``trtprof`` domain (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Ranges(DOMAIN)
    return _DEFAULT
