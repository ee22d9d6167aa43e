"""A sweep's options as a person types them (``"64M,1G"``, ``"off,on"``, ``"fp16.cosine_min=0.999"``) into
a :class:`~profiler.sweep.config.SweepConfig`; what is wrong with one is a UsageError naming the option.

    from profiler.sweep.options import config_from_options
    config = config_from_options(model="model.onnx", precision="fp32,fp16", streams="1,2",
                                 thresholds=("fp16.rel_l2_max=0.02", "jitter.cov_pct=3"))
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Iterable

from profiler.errors import UsageError
from profiler.sweep.config import SweepConfig

MAX_STREAMS = 64  # each stream is a session or context with its own buffers


def split_list(text: str, option: str) -> list[str]:
    """``"a, b,"`` -> ``["a", "b"]``; an empty list is a UsageError naming ``option``."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"{option} needs at least one value")
    return items


def parse_workspaces(text: str) -> list[int | None]:
    """'64M,256M,1G' -> bytes; 'default' -> None (the backend's own default)."""
    from profiler.backends.base import parse_bytes

    out: list[int | None] = []
    for item in split_list(text, "--workspace"):
        if item.lower() == "default":
            out.append(None)
            continue
        try:
            out.append(parse_bytes(item))
        except ValueError as exc:
            raise UsageError(f"--workspace: {exc}") from None
    return out


def parse_streams(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]: positive, at most MAX_STREAMS."""
    out = []
    for item in split_list(text, "--streams"):
        if not item.isdigit() or int(item) < 1:
            raise UsageError(f"--streams values are positive integers, not {item!r}")
        if int(item) > MAX_STREAMS:
            raise UsageError(f"--streams {item} is more than {MAX_STREAMS} concurrent streams; each one holds its "
                             "own session and buffers")
        out.append(int(item))
    return out


def parse_cuda_graph(text: str) -> list[bool]:
    """'off,on' -> [False, True]."""
    table = {"off": False, "on": True, "false": False, "true": True, "0": False, "1": True}
    out = []
    for item in split_list(text, "--cuda-graph"):
        if item.lower() not in table:
            raise UsageError(f"--cuda-graph values are off and on, not {item!r}")
        out.append(table[item.lower()])
    return out


def parse_thresholds(args: Iterable[str]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """Split --threshold values into accuracy limits (``fp16.cosine_min=0.9999``) and rule thresholds
    (``jitter.cov_pct=3``, ``launch_overhead.enqueue_over_compute=0.5``)."""
    from profiler.accuracy import parse_threshold_args
    from profiler.backends.base import PRECISIONS
    from profiler.rules import registry

    accuracy_args: list[str] = []
    rules_out: dict[str, Any] = {}
    sweep_rules = {s.id: s for s in registry("sweep")}
    for raw in args:
        key, sep, value = raw.partition("=")
        head, dot, name = key.strip().partition(".")
        if head in PRECISIONS:
            accuracy_args.append(raw)
            continue
        rid = head
        if not sep or not dot or rid not in sweep_rules:
            raise UsageError(f"--threshold {raw!r} is neither PRECISION.METRIC_min/max=X (e.g. fp16.cosine_min=0.999) "
                             f"nor RULE.NAME=X for a sweep rule with thresholds "
                             f"({', '.join(sorted(r for r, spec in sweep_rules.items() if spec.defaults))})")
        if name not in sweep_rules[rid].defaults:
            have = ", ".join(sweep_rules[rid].defaults) or "none"
            raise UsageError(f"--threshold {raw!r}: rule {head!r} has no threshold {name!r} (it has: {have})")
        rules_out.setdefault(rid, {})[name] = rule_threshold_value(raw, name, value)
    return parse_threshold_args(accuracy_args), rules_out


def rule_threshold_value(raw: str, name: str, value: str) -> float:
    """A rule threshold's value: a finite number of at least 0 (every declared one is a share, a ratio, a
    percentage or a count), at most 1 for a fraction; nan would switch the rule off without a word."""
    import math

    try:
        x = float(value)
    except ValueError:
        raise UsageError(f"--threshold {raw!r}: {value!r} is not a number") from None
    hi = 1.0 if name.endswith(("_frac", "_fraction")) else math.inf
    if not math.isfinite(x) or not 0 <= x <= hi:
        span = "from 0 to 1" if hi == 1.0 else "of at least 0"
        raise UsageError(f"--threshold {raw!r}: {value!r} is not a finite number {span}")
    return x


def parse_keep_fp32(args: Iterable[str]) -> list[str]:
    """``--keep-fp32 a,b --keep-fp32 Softmax`` -> ['Softmax', 'a', 'b']: node names or op types, comma-separated
    and repeatable, each once; UsageError on an empty name."""
    names: set[str] = set()
    for raw in args:
        parts = [p.strip() for p in str(raw).split(",")]
        if not all(parts):
            raise UsageError(f"--keep-fp32 {raw!r} has an empty node name; give NODE[,NODE...] (node names or op types)")
        names.update(parts)
    return sorted(names)


def check_keep_fp32(model_path: Path, info: Any, keep: Iterable[str]) -> None:
    """UsageError when a ``--keep-fp32`` name is neither a node name nor an op type of the model (a typo would
    otherwise keep nothing in fp32, silently)."""
    keep = list(keep)
    if not keep:
        return
    from profiler.models.inspect import load_model_proto

    graph = load_model_proto(model_path).graph
    known = {n.name for n in graph.node} | set(getattr(info, "op_types", None) or {n.op_type for n in graph.node})
    unknown = [k for k in keep if k not in known]
    if unknown:
        raise UsageError(f"--keep-fp32 names {', '.join(repr(k) for k in unknown)}, neither a node name nor an op "
                         f"type of {Path(model_path).name}")


def config_from_options(*, model: str | None = None, precision: str = "fp32,fp16", workspace: str = "default",
                        streams: str = "1", cuda_graph: str = "off", shapes: Iterable[str] = (),
                        calib: str | None = None, calib_method: str = "entropy", inputs: str | None = None,
                        iterations: int = 10, duration: float = 3.0, warmup: float = 200.0, backend: str = "auto",
                        label: str | None = None, thresholds: Iterable[str] = (), output_kinds: Iterable[str] = (),
                        output_tolerances: Iterable[str] = (), no_layers: bool = False, localize: bool = True,
                        fp16_range_check: bool = True, keep_fp32: Iterable[str] = (),
                        no_transfers: bool = False, no_overlap: bool = False,
                        out_dir: str = "trtprof-sweep", repeat: int = 0,
                        cache_dir: str | None = None) -> SweepConfig:
    """The SweepConfig of a new sweep from ``trtprof sweep``'s options, named, spelt and typed as on the
    command line, with its defaults (:data:`CONFIG_OPTIONS` are their names)."""
    from profiler.accuracy import parse_output_options
    from profiler.models import parse_shape_args

    acc_limits, rule_limits = parse_thresholds(thresholds)
    kinds, tols = parse_output_options(output_kinds, output_tolerances)
    return SweepConfig(
        model=model, precisions=split_list(precision, "--precision"), workspaces=parse_workspaces(workspace),
        streams=parse_streams(streams), cuda_graph=parse_cuda_graph(cuda_graph),
        shapes={k: list(v) for k, v in parse_shape_args(shapes).items()}, calib=calib, calib_method=calib_method,
        inputs=inputs, iterations=iterations, duration_s=duration, warmup_ms=warmup, backend=backend, label=label,
        thresholds=acc_limits, rule_thresholds=rule_limits, layers=not no_layers, cache_dir=cache_dir,
        localize=localize, fp16_range_check=fp16_range_check, keep_fp32=parse_keep_fp32(keep_fp32),
        transfers=not no_transfers, overlap=not no_overlap,
        out_dir=str(Path(out_dir).resolve()), repeat=repeat, output_kinds=kinds, output_tolerances=tols)


#: the ``trtprof sweep`` options that make its SweepConfig (the others say where and how to run it)
CONFIG_OPTIONS = tuple(inspect.signature(config_from_options).parameters)
