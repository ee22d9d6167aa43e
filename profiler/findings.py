"""Findings are data: the same object becomes HTML, JSON, a stored row and an exit code."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "low", "info")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    """One diagnosis.

    ``rule`` is the id of the rule that made it and ``scope`` what it judged: ``capture`` (an nsys
    capture), ``layers`` (an engine's per-layer profile and trtexec timing) or ``sweep`` (a sweep's
    variants). Ids are public and stable (users script against them); (scope, rule) is unique, and an id
    found in several scopes is one diagnosis made from different data:

    - capture: ``launch_overhead``, ``gpu_idle``, ``jitter``, ``sync_api``, ``pageable_memcpy``,
      ``transfer_bound``, ``fp32_math``;
    - layers: ``layer_hotspot``, ``unfused_reformat``, ``precision_fallback``, ``tiny_layers``,
      ``no_tensor_cores``, ``channel_alignment``, and trtexec's warnings ``launch_overhead`` (enqueue-bound),
      ``transfer_bound``, ``jitter``;
    - sweep: ``launch_overhead``, ``transfer_bound``, ``jitter``, ``variant_failed``, ``multistream_latency``,
      ``fastest_variant``, ``workspace_limited``, ``stream_scaling``, ``precision_regression`` (fails the
      gate) and ``precision_model_arithmetic`` (the registry's rules), and from a sweep spread over devices
      ``sweep.devices`` and ``sweep.devices_differ``.

    ``evidence`` holds the numbers that prove the finding, with units in their keys (``busy_fraction``,
    ``median_kernel_us``); ``threshold`` holds the limits the rule compared them with.
    """

    rule: str
    severity: str
    title: str
    range: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    threshold: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""
    variant: str | None = None
    impact: dict[str, Any] | None = None
    """What the finding costs: ``{"ms_per_instance", "share"}`` (share of the steady state; capture rules)."""
    scope: str | None = None
    """``capture``, ``layers`` or ``sweep``; None only in documents written before findings carried it."""

    def __post_init__(self) -> None:
        if self.severity not in _RANK:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["impact"] is None:  # only the capture rules measure impact so far
            del d["impact"]
        if d["scope"] is None:
            del d["scope"]
        return json_safe(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        keys = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in keys})


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then by rule id and range, so output order is stable."""
    return sorted(findings, key=lambda f: (_RANK[f.severity], f.rule, f.range or "", f.variant or ""))


def json_safe(value: Any) -> Any:
    """Convert numpy scalars/arrays and non-finite floats into plain JSON values (NaN -> None)."""
    np: Any
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if np is not None:
        if isinstance(value, np.ndarray):
            return [json_safe(v) for v in value.tolist()]
        if isinstance(value, np.generic):
            value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def frame_records(frame: Any) -> list[dict[str, Any]]:
    """A pandas DataFrame's rows as JSON-ready records (NaN -> None, numpy scalars -> Python)."""
    recs = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return [json_safe(r) for r in recs]
