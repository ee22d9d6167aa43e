"""What the rules of each scope look at: one typed context per scope, read and never written by the rules.

- :class:`~profiler.capture.context.CaptureContext` (scope ``capture``): one nsys capture's series table,
  range summaries, device gaps and outliers, built by :func:`profiler.capture.analyze.analyze` (it lives in
  the capture package, which builds it);
- :class:`LayerContext` (scope ``layers``): one engine's per-layer frame and trtexec timing, built by
  :mod:`profiler.layers.importer`;
- :class:`SweepContext` (scope ``sweep``): a sweep's variant records, its backend, and its accuracy checks
  (:class:`AccuracyCheck`) with the accuracy limits they are judged by, built by :mod:`profiler.sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class LayerContext:
    """What the layer rules see: one engine's per-layer frame (:mod:`profiler.layers.frame`) and timing."""

    key: str  # the engine's (variant's) name, each finding's ``variant``
    layers: pd.DataFrame
    precision: str | None = None  # lowest precision the build allowed (fp32 | fp16 | int8 ...)
    summary: dict[str, Any] | None = None  # profiler.layers.trtexec.timing_summary()
    trtexec: dict[str, Any] = field(default_factory=dict)  # trtexec's printed summary
    tensorrt_version: str | None = None


Variant = dict[str, Any]
"""One variant record of a sweep's summary.json: ``key``, ``status``, ``precision``, ``streams``,
``workspace_bytes``, ``cuda_graph``, ``latency_ms``/``enqueue_ms``/``compute_ms``/``h2d_ms``/``d2h_ms``
(:func:`profiler.stats.summarize` dicts in ms), ``throughput_qps``, ``accuracy`` ..."""


@dataclass(frozen=True)
class AccuracyCheck:
    """One variant's outputs compared with FP32's (:func:`profiler.accuracy.compare_batches`), as measured.

    ``engine`` says what produced the compared outputs: ``"timed"``, the engine that was timed (judged by
    ``precision_regression``, which fails the gate), or ``"model_arithmetic"``, the model's own arithmetic
    shown beside it where the timed engine is not faithful to the precision (``precision_model_arithmetic``).
    """

    variant: str  # the variant's key, each finding's ``variant``
    precision: str
    outputs: Mapping[str, Mapping[str, Any]]  # output name -> its metrics
    engine: str = "timed"  # or "model_arithmetic"
    calibration_meaningless: bool = False  # int8 calibrated on random inputs: the numbers mean nothing


@dataclass
class SweepContext:
    """What the sweep rules see: the variant records, the backend's ``describe()``, and the accuracy checks
    with the per-precision limits they are judged by (``accuracy_limits``: precision -> ``<metric>_min`` /
    ``<metric>_max`` / ``atol`` / ``rtol``; None: :data:`profiler.accuracy.DEFAULT_THRESHOLDS`)."""

    variants: list[Variant]
    environment: dict[str, Any] = field(default_factory=dict)
    accuracy_checks: list[AccuracyCheck] = field(default_factory=list)
    accuracy_limits: Mapping[str, Mapping[str, float]] | None = None

    def limits_of(self, precision: str) -> dict[str, float]:
        """The accuracy limits of ``precision`` (none for a precision the table lacks)."""
        from profiler.accuracy import limits_for

        return limits_for(precision, None if self.accuracy_limits is None else dict(self.accuracy_limits))


__all__ = ["AccuracyCheck", "LayerContext", "SweepContext", "Variant"]
