"""What the capture rules look at: one nsys capture's series table, range summaries, device gaps and
outliers, built by :func:`profiler.capture.analyze.analyze` and read, never written, by the rules of scope
``capture`` (:mod:`profiler.rules.context` holds the other scopes' contexts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from profiler.capture.phases import Phases
    from profiler.capture.series import SeriesTable
    from profiler.capture.summary import DeviceGaps
    from profiler.capture.unit import Unit


@dataclass
class CaptureContext:
    """What the capture rules see: the trace, its series table, range summaries and device gaps."""

    trace: Any  # profiler.capture.trace.Trace
    table: SeriesTable
    ranges: list[dict[str, Any]]  # series_summary() rows, indexed by series_id
    devices: list[DeviceGaps]
    outliers: pd.DataFrame  # explain_outliers() rows
    capture_start_ns: int
    unit: Unit | None = None  # over the full capture's table
    phases: Phases | None = None
    tensorrt: bool = False  # the capture holds TensorRT's NVTX ranges
    include_setup: bool = False
    concurrency: Any = None  # profiler.capture.concurrency.Concurrency over the judged period, once measured
    generation: dict[str, Any] | None = None  # profiler.capture.generation.find(): the decode loop, if any

    @property
    def judged_start_ns(self) -> int:
        """Where what the rules judge starts: the steady state's start, or with setup the capture's first
        event (not the session start: a capture begun late would count the time before it)."""
        ph = self.phases
        return 0 if ph is None else ph.first_event_ns if self.include_setup else ph.steady_start_ns

    @property
    def steady_ns(self) -> int:
        """Duration of what the rules judge: the steady state (or the whole capture with setup)."""
        ph = self.phases
        return 0 if ph is None else max(int(ph.steady_end_ns - self.judged_start_ns), 0)

    @property
    def steady_instances(self) -> int:
        u = self.unit
        return max(u.count - (0 if self.include_setup else u.warmup), 1) if u is not None else 1

    def label(self, series_id: int) -> str | None:
        """A finding's ``range``: 'domain:name' (just the name in the default domain); None for the
        whole-capture window of a capture without NVTX ranges."""
        if self.table.window:
            return None
        r = self.ranges[series_id]
        return f"{r['domain']}:{r['name']}" if r["domain"] else r["name"]

    def gpu_names(self) -> dict[int, str]:
        gpus = (getattr(self.trace, "meta", None) or {}).get("gpus") or []
        out = {}
        for i, g in enumerate(gpus):
            if isinstance(g, dict):
                dev = g.get("device_id", g.get("id", i))
                out[int(dev) if isinstance(dev, (int, np.integer)) else i] = str(g.get("name") or "")  # None: unknown
        return out
