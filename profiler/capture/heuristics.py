"""The capture model's heuristics, declared in one set: each a module constant (with its docstring) of the
module that uses it, named here with its unit and the range an override must stay in.

These numbers decide what a user is told (which range is the inference, which instances are warm-up, what
is a decode step, a wait, an outlier, a phase), as the rules' thresholds decide the findings. The analysis
JSON reports their values beside ``thresholds`` (key ``heuristics``: module -> name -> value), and
``trtprof analyze --heuristic NAME=VALUE`` overrides one for one analysis (:attr:`AnalysisOptions.heuristics
<profiler.capture.options.AnalysisOptions.heuristics>`; the analysis cache keys by it).

How an override works: the functions read their module's globals when they run, so :func:`overriding` sets
the owning module's attribute for the length of one analysis and restores it after, leaving the modules as
they are written. Where a value was bound before the analysis ran, it is set there too for that time: a
copy imported by another module (``from profiler.capture.unit import WARMUP_RATIO``) and a function's
default argument (``def warmup_count(..., ratio=WARMUP_RATIO)``), both found in the source. The override is
process-wide while it lasts: analyses that run on threads of one process must share their heuristics.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from profiler.errors import UsageError

#: unit -> (lowest, highest) value an override may take, and whether it must be a whole number
UNITS: dict[str, tuple[float, float, bool]] = {
    "share": (0.0, 1.0, False),  # a part of a whole
    "excess": (0.0, 100.0, False),  # how much more than a baseline, as a share of it
    "factor": (1.0, 1e6, False),  # a multiple of a typical value
    "spreads": (0.0, 1e6, False),  # interquartile ranges
    "steps": (0.0, 1e6, False),  # median steps' GPU time
    "count": (1, 10**9, True),
    "ns": (0, 10**12, True),
    "ms": (0.0, 1e7, False),
}


@dataclass(frozen=True)
class Heuristic:
    """One declared heuristic: the constant ``name`` of ``profiler.capture.<module>``."""

    module: str
    name: str
    unit: str

    @property
    def owner(self) -> str:
        return f"profiler.capture.{self.module}"

    @property
    def value(self) -> Any:
        """The value in force now (an override's inside :func:`overriding`)."""
        return getattr(importlib.import_module(self.owner), self.name)

    @property
    def doc(self) -> str:
        """The constant's docstring in its module."""
        return _docstrings(self.owner).get(self.name, "")


def _h(module: str, unit: str, *names: str) -> list[Heuristic]:
    return [Heuristic(module, n, unit) for n in names]


HEURISTICS: tuple[Heuristic, ...] = tuple(
    _h("unit", "share", "UNIT_MIN_GPU_SHARE")
    + _h("unit", "factor", "WARMUP_RATIO")
    + _h("unit", "count", "SPAN_CANDIDATES")
    + _h("unit", "share", "WARMUP_MAX_SHARE", "WRAPPED_SHARE")
    + _h("unit", "count", "PER_THREAD_MIN_ITERATIONS", "ASYNC_MIN_ITERATIONS")
    + _h("unit", "share", "ALTERNATING_COUNT_SLACK")
    + _h("unit", "count", "ALTERNATING_MIN_COUNT")
    + _h("unit", "share", "ALTERNATING_MIN_SHARE", "ENCLOSING_MIN_SHARE")
    + _h("unit", "factor", "ENCLOSING_MIN_ENQUEUES")
    + _h("phases", "share", "TEARDOWN_MIN_SHARE")
    + _h("phases", "ms", "TEARDOWN_MIN_MS")
    + _h("phases", "count", "STARTUP_FIRST_CALLS")
    + _h("phases", "ms", "STARTUP_CALL_MIN_MS")
    + _h("phases", "factor", "COMPARABLE_COPY_RATIO")
    + _h("analyze", "count", "UNRECORDED_MIN_LAUNCHES")
    + _h("analyze", "share", "HOST_BOUND_BUSY_FRACTION", "HOST_BOUND_MIN_IDLE_FRACTION")
    + _h("waits", "ns", "POLL_GAP_NS", "POLL_MAX_SLEEP_GAP_NS")
    + _h("waits", "count", "POLL_MIN_CALLS")
    + _h("waits", "share", "FEEDER_MIN_SHARE")
    + _h("concurrency", "count", "MIN_THREAD_KERNELS", "MIN_CONTEXT_KERNELS")
    + _h("generation", "count", "MIN_DECODE_STEPS")
    + _h("generation", "steps", "MIN_PREFILL_STEPS")
    + _h("generation", "ms", "PREFILL_MAX_GAP_MS")
    + _h("generation", "count", "DRIFT_WINDOW_STEPS")
    + _h("generation", "excess", "DRIFT_MIN_SHARE")
    + _h("generation", "share", "INTERMITTENT_FAST_SHARE", "RANGED_LOOP_SHARE", "CONTENTION_MIN_SHARE")
    + _h("generation", "factor", "WARMUP_REQUEST_RATIO", "PREFILL_GAP_PERIODS")
    + _h("generation", "count", "KERNEL_GROUP_MIN_KERNELS", "KERNEL_GROUP_ANCHORS")
    + _h("generation", "share", "PREFILL_MIN_NAME_SHARE")
    + _h("clocks", "share", "CLOCK_DROP_SHARE")
    + _h("clocks", "count", "MIN_SAMPLES")
    + _h("instance_metrics", "factor", "OUTLIER_MEDIAN_RATIO")
    + _h("instance_metrics", "spreads", "OUTLIER_IQR_FENCE")
    + _h("instance_metrics", "count", "OUTLIER_MIN_COUNT")
    + _h("summary", "share", "CAUSE_MIN_SHARE")
    + _h("summary", "factor", "BACKLOG_SLACK")
    + _h("numbered", "count", "NUMBERED_MIN_NUMBERS")
    + _h("numbered", "share", "NUMBERED_MIN_SINGLE_SHARE", "NUMBERED_MIN_DENSITY")
    + _h("numbered", "count", "NUMBERED_LOOP_ITERATIONS")
    + _h("numbered", "share", "NUMBERED_LOOP_SHARE")
    + _h("stages", "count", "FRAME_MIN_STAGES", "FRAME_MIN_REPEATS")
    + _h("stages", "share", "FRAME_MIN_LEVEL_SHARE")
    + _h("stages", "count", "FRAME_SEARCH_LEVELS", "FRAME_MAX_ONE_OFF")
)
_BY_NAME = {h.name: h for h in HEURISTICS}


def values() -> dict[str, dict[str, Any]]:
    """The ``heuristics`` entry of the analysis JSON: module -> name -> the value in force."""
    out: dict[str, dict[str, Any]] = {}
    for h in HEURISTICS:
        out.setdefault(h.module, {})[h.name] = h.value
    return out


def parse_overrides(args: Iterable[str]) -> dict[str, int | float]:
    """``NAME=VALUE`` (or ``module.NAME=VALUE``) arguments -> {NAME: value}; a UsageError (exit 2) for an
    unknown name, a value that is no finite number, out of its unit's range or not whole where it counts."""
    out: dict[str, int | float] = {}
    for arg in args:
        name, sep, text = str(arg).partition("=")
        if not sep:
            raise UsageError(f"--heuristic {arg}: give NAME=VALUE (e.g. WARMUP_RATIO=2)")
        out[_known(name.strip()).name] = check_value(name.strip(), text.strip())
    return out


def _known(name: str) -> Heuristic:
    module, _, bare = name.rpartition(".")
    h = _BY_NAME.get(bare)
    if h is None or (module and module not in (h.module, h.owner)):
        raise UsageError(f"--heuristic {name}: no such heuristic (one of {', '.join(sorted(_BY_NAME))})")
    return h


def check_value(name: str, text: Any) -> int | float:
    """``text`` as the value of heuristic ``name``, checked against its unit's range."""
    h = _known(name)
    lo, hi, whole = UNITS[h.unit]
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"--heuristic {name}={text}: not a number") from None
    if not math.isfinite(value) or not lo <= value <= hi:
        raise UsageError(f"--heuristic {name}={text}: a {h.unit} from {lo:g} to {hi:g} is needed")
    if whole:
        if value != int(value):
            raise UsageError(f"--heuristic {name}={text}: a whole number is needed (a {h.unit})")
        return int(value)
    return value


@contextlib.contextmanager
def overriding(overrides: Mapping[str, Any] | None) -> Iterator[None]:
    """Within the block, the heuristics of ``overrides`` (NAME -> value, as :func:`parse_overrides` makes
    them; checked again here) have those values wherever the analysis reads them; restored after."""
    if not overrides:
        yield
        return
    undo: list[tuple[Any, str, Any]] = []
    try:
        for name, raw in overrides.items():
            value = check_value(name, raw)
            for target, key in _bindings(_known(name)):
                undo.append((target, key, _swap(target, key, value)))
        yield
    finally:
        for target, key, old in reversed(undo):
            _swap(target, key, old)


def _swap(target: Any, key: Any, value: Any) -> Any:
    """Set one binding (a module attribute, or a function's default: ``key`` an index or a keyword name);
    returns what it held."""
    if isinstance(key, str) and not inspect.isfunction(target):
        old = getattr(target, key)
        setattr(target, key, value)
        return old
    if isinstance(key, int):
        defaults = list(target.__defaults__)
        old, defaults[key] = defaults[key], value
        target.__defaults__ = tuple(defaults)
        return old
    old = target.__kwdefaults__[key]
    target.__kwdefaults__[key] = value
    return old


def _bindings(h: Heuristic) -> list[tuple[Any, Any]]:
    """Every place that holds ``h``'s value when the analysis runs: the owning module's attribute, the
    copies other modules imported, and the defaults of functions that name it."""
    out: list[tuple[Any, Any]] = []
    for modname in (h.owner, *_importers(h)):
        module = importlib.import_module(modname)
        if modname == h.owner or getattr(module, h.name, None) is getattr(sys.modules[h.owner], h.name):
            out.append((module, h.name))
        out.extend(_default_slots(module, modname, h.name))
    return out


def _importers(h: Heuristic) -> list[str]:
    return [m for m, names in _imported_names().items() if (h.owner, h.name) in names]


@functools.lru_cache(maxsize=None)
def _imported_names() -> dict[str, frozenset[tuple[str, str]]]:
    """profiler module -> the (module, name) pairs it imports with ``from module import name``."""
    root = Path(__file__).resolve().parents[1]
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        modname = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        pairs = {(n.module, a.name) for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.ImportFrom) and n.module and not n.level for a in n.names}
        if pairs:
            out[modname] = frozenset(pairs)
    return out


def _default_slots(module: Any, modname: str, name: str) -> list[tuple[Any, Any]]:
    """(function, default index or keyword) of each module-level function or method whose default is
    exactly the constant ``name``."""
    out: list[tuple[Any, Any]] = []
    for qual, args in _defaults_naming(modname, name):
        fn: Any = module
        for part in qual.split("."):
            fn = getattr(fn, part)
        fn = inspect.unwrap(fn)
        out.extend((fn, a) for a in args)
    return out


@functools.lru_cache(maxsize=None)
def _defaults_naming(modname: str, name: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    tree = ast.parse(Path(importlib.import_module(modname).__file__ or "").read_text())
    found = []
    scopes = [("", tree.body)] + [(c.name + ".", c.body) for c in tree.body if isinstance(c, ast.ClassDef)]
    for prefix, body in scopes:
        for fn in body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                slots: list[Any] = [i for i, d in enumerate(fn.args.defaults) if _names(d, name)]
                slots += [a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d and _names(d, name)]
                if slots:
                    found.append((prefix + fn.name, tuple(slots)))
    return tuple(found)


def _names(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


@functools.lru_cache(maxsize=None)
def _docstrings(modname: str) -> dict[str, str]:
    tree = ast.parse(Path(importlib.import_module(modname).__file__ or "").read_text())
    out = {}
    for a, b in zip(tree.body, tree.body[1:]):
        if (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)):
            out[a.targets[0].id] = inspect.cleandoc(b.value.value)
    return out


def table() -> list[dict[str, Any]]:
    """Every heuristic with its module, name, value in force, unit, range and docstring."""
    return [{"module": h.owner, "name": h.name, "value": h.value, "unit": h.unit,
             "range": list(UNITS[h.unit][:2]), "doc": h.doc} for h in HEURISTICS]
