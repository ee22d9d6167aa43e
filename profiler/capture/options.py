"""The options of a capture analysis (a module of its own: the analysis cache keys by them without
importing the analysis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AnalysisOptions:
    """What ``analyze`` computes and the thresholds the rules use.

    ``thresholds`` maps a rule id to threshold overrides (see each rule's defaults in
    ``profiler.rules.capture``); ``min_gap_us`` is a shortcut for ``gpu_idle.min_gap_us``.
    """

    min_gap_us: float | None = None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: list[str] | None = None
    max_outliers: int = 50
    max_instances: int = 20_000
    top_kernels: int = 50
    unit: str | None = None
    """The NVTX range that is one inference ('domain:name' or name); default: TensorRT's enqueue, else the
    outermost repeated range, else the whole capture."""
    include_setup: bool = False
    """Run the statistics and rules over the whole capture instead of the steady state."""
    layer_info: str | None = None
    """trtexec ``--exportLayerInfo`` JSON to join to the capture's layers (precision, formats, tactic)."""
    heuristics: dict[str, Any] = field(default_factory=dict)
    """Overrides of the capture model's heuristics, NAME -> value (:mod:`profiler.capture.heuristics`)."""

    def rule_overrides(self) -> dict[str, dict[str, Any]]:
        out = {k: dict(v) for k, v in (self.thresholds or {}).items()}
        if self.min_gap_us is not None:
            out.setdefault("gpu_idle", {})["min_gap_us"] = float(self.min_gap_us)
        return out
