"""What a sweep runs: its configuration and the plan (the product of the axes, with skip reasons)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from profiler.backends.base import PRECISIONS, Backend, VariantSpec
from profiler.errors import UsageError
from profiler.findings import json_safe
from profiler.harness.runner import HarnessConfig

ACCURACY_SAMPLES = 4  # seeded random inputs for the accuracy check when no data is given
HOLDOUT_FRACTION = 0.2  # of --calib, kept out of calibration for the accuracy check
#: Other processes taking this share of the host CPU during a timed phase is said (and noted with the variant).
BUSY_HOST_SHARE = 0.25


#: The most --repeat processes a sweep starts per variant: a typo of 10^12 would run until killed.
MAX_REPEAT = 1000


@dataclass
class SweepConfig:
    """Everything a sweep needs; stored with the run so ``--resume`` can continue it."""

    model: str | None = None  # None: the bundled default model
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    workspaces: list[int | None] = field(default_factory=lambda: [None])  # bytes; None = backend default
    streams: list[int] = field(default_factory=lambda: [1])
    cuda_graph: list[bool] = field(default_factory=lambda: [False])
    shapes: dict[str, list[int]] = field(default_factory=dict)
    calib: str | None = None
    calib_method: str = "entropy"
    inputs: str | None = None
    iterations: int = 10
    duration_s: float = 3.0
    warmup_ms: float = 200.0
    backend: str = "auto"
    label: str | None = None
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)  # {"fp16": {"cosine_min": .999}}
    rule_thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"jitter": {"cov_pct": 3}}
    layers: bool = True
    layer_iterations: int = 10
    cache_dir: str | None = None
    seed: int = 0
    localize: bool = True  # on a precision breach, find the nodes where the error starts and verify
    fp16_range_check: bool = True  # keep nodes whose sample activations near float16's range in fp32
    keep_fp32: list[str] = field(default_factory=list)  # node names or op types the fp16/int8 models keep in fp32
    transfers: bool = True  # False: no per-query H2D/D2H (trtexec --noDataTransfers); latency = compute
    overlap: bool = True  # two queries in flight per stream where the backend can (trtexec's default)
    out_dir: str | None = None  # where summary.json and report.html go (--resume writes there again)
    repeat: int = 0  # process-level repeats of the timed phase after all variants (profiler.harness.repeat)
    output_kinds: dict[str, str] = field(default_factory=dict)  # output -> classes|logits|boxes|regression
    output_tolerances: dict[str, dict[str, float]] = field(default_factory=dict)  # output -> {atol, rtol}

    def __post_init__(self) -> None:
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad:
            raise UsageError(f"unknown precision {bad[0]!r}; choose from {', '.join(PRECISIONS)}")
        if not self.precisions or not self.workspaces or not self.streams or not self.cuda_graph:
            raise UsageError("every sweep axis needs at least one value")
        if any(int(s) < 1 for s in self.streams):
            raise UsageError("--streams values must be at least 1")
        if self.iterations < 1:
            raise UsageError("--iterations must be at least 1")
        if self.duration_s < 0 or self.warmup_ms < 0:
            raise UsageError("--duration and --warmup cannot be negative")
        if self.repeat == 1 or self.repeat < 0:
            raise UsageError("--repeat needs at least 2 processes to measure a run-to-run spread "
                             "(trtprof compare uses it from 3 on each side; 5 is a good default)")
        if self.repeat > MAX_REPEAT:
            raise UsageError(f"--repeat {self.repeat} is more than {MAX_REPEAT} processes per variant; the spread "
                             "is known well from 5 (each repeat times every variant once more)")

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepConfig":
        keys = cls.__dataclass_fields__.keys()
        d = {"overlap": False, **d}  # runs stored before the option ran one query at a time
        return cls(**{k: v for k, v in d.items() if k in keys})

    @property
    def harness(self) -> HarnessConfig:
        return HarnessConfig(iterations=int(self.iterations), duration_s=float(self.duration_s),
                             warmup_ms=float(self.warmup_ms), overlap=bool(self.overlap))

    def cache_root(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir)
        from profiler.variants.cache import default_cache_dir

        return default_cache_dir().parent


@dataclass
class PlannedVariant:
    spec: VariantSpec
    skip_reason: str | None = None


def plan_variants(config: SweepConfig, backend: Backend,
                  shapes: dict[str, tuple[int, ...]] | None = None) -> list[PlannedVariant]:
    """The axes' product in a stable order; what the backend cannot run carries its skip reason."""
    shape_items = tuple(sorted((k, tuple(int(d) for d in v)) for k, v in (shapes or {}).items()))
    out: list[PlannedVariant] = []
    first_ws = config.workspaces[0]
    for prec, ws, streams, graph in itertools.product(dict.fromkeys(config.precisions),
                                                      dict.fromkeys(config.workspaces),
                                                      dict.fromkeys(int(s) for s in config.streams),
                                                      dict.fromkeys(bool(g) for g in config.cuda_graph)):
        spec = VariantSpec(prec, ws, streams, graph, shape_items)
        reason = backend.unsupported(spec)
        if reason is None and not backend.uses_workspace and ws != first_ws:
            same = VariantSpec(prec, first_ws, streams, graph, shape_items)
            reason = (f"{backend.name} has no workspace setting: this variant would be the same engine as "
                      f"{same.key}, which is measured")
        out.append(PlannedVariant(spec, reason))
    return out


def plan_order(c: SweepConfig) -> Callable[[dict[str, Any]], tuple]:
    """Sort key putting variant records in the axes' order (precision, workspace, streams, graph)."""
    precs = list(dict.fromkeys(c.precisions))
    wss = list(dict.fromkeys(c.workspaces))
    strs = list(dict.fromkeys(int(s) for s in c.streams))

    def key(v: dict[str, Any]) -> tuple:
        def idx(seq: list, val: Any) -> int:
            return seq.index(val) if val in seq else len(seq)
        return (idx(precs, v.get("precision")), idx(wss, v.get("workspace_bytes")),
                idx(strs, v.get("streams")), bool(v.get("cuda_graph")))

    return key
