"""Diagnosis rules: pure functions ``rule(ctx, t) -> list[Finding]`` in one registry keyed by (scope, id).

A scope is the data the rules look at, each with its typed context (:mod:`profiler.rules.context`):

- ``capture``: one nsys capture (:class:`~profiler.capture.context.CaptureContext`), one module per rule in ``capture/``;
- ``layers``: one engine's per-layer frame and trtexec timing (:class:`LayerContext`), ``layers.py``;
- ``sweep``: a sweep's variant records (:class:`SweepContext`), ``sweep.py``.

A rule is one decorated function in the module of its scope (a module of its own for capture rules);
modules are discovered, so nothing else needs editing::

    @rule("gpu_idle", scope="capture", defaults={"min_gap_us": 50.0, "high_idle_fraction": 0.5})
    def gpu_idle(ctx: CaptureContext, t: Thresholds) -> list[Finding]:
        ...
        return [Finding(rule="gpu_idle", ...)]

``defaults`` hold every number the rule compares with, its severity bands included; ``t`` is them merged
with the caller's overrides, and reading a name the defaults lack is an error. A finding's ``rule`` is
its registry id and its ``scope`` the registry scope (set by :func:`run_rules`); an id is unique within
its scope. The same id in two scopes names the same diagnosis made from different data
(``launch_overhead`` from a capture's launch calls, from trtexec's enqueue times, from a sweep's).

:func:`run_rules` returns the findings and the thresholds it used; it never writes to the context::

    run = run_rules("capture", ctx, overrides={"gpu_idle": {"min_gap_us": 20}})
    run.findings, run.thresholds["gpu_idle"]["min_gap_us"]
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from profiler.errors import UsageError
from profiler.findings import Finding, sort_findings

SCOPES = ("capture", "layers", "sweep")

Overrides = Mapping[str, Mapping[str, Any]]
"""Rule id -> threshold name -> value (``{"jitter": {"max_cov_pct": 5}}``); ``"<scope>.<id>"`` keys, as
sweep configurations stored them before, are read as ``"<id>"``."""


class Thresholds(Mapping[str, Any]):
    """One rule's thresholds, read-only: its defaults merged with the caller's overrides.

    Reading a name missing from the rule's defaults raises ``KeyError`` (``get`` too): every number a
    rule compares with is declared, reported and overridable."""

    def __init__(self, rule_id: str, values: Mapping[str, Any]) -> None:
        self._rule_id = rule_id
        self._values = dict(values)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"rule {self._rule_id!r} reads threshold {name!r}, which its defaults lack") from None

    def get(self, name: str, default: Any = None) -> Any:
        return self[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def pick(self, *names: str) -> dict[str, Any]:
        """The named thresholds as a plain dict (a finding's ``threshold``)."""
        return {n: self[n] for n in names}


RuleFunc = Callable[[Any, Thresholds], list[Finding]]


@dataclass(frozen=True)
class RuleSpec:
    """One registered rule: its id, scope, default thresholds, the function and its one-line summary."""

    id: str
    scope: str
    func: RuleFunc
    defaults: Mapping[str, Any]
    summary: str = ""

    def run(self, ctx: Any, thresholds: Mapping[str, Any] | None = None) -> list[Finding]:
        """The rule's findings over ``ctx`` with ``thresholds`` (default: its defaults), each stamped with
        the scope; a finding whose ``rule`` is not this rule's id is a bug and raises."""
        found = self.func(ctx, Thresholds(self.id, self.defaults if thresholds is None else thresholds))
        for f in found:
            if f.rule != self.id:
                raise AssertionError(f"{self.scope} rule {self.id!r} emitted a finding with rule {f.rule!r}")
            f.scope = self.scope
        return found


@dataclass(frozen=True)
class RuleRun:
    """What :func:`run_rules` returns: the findings (most severe first) and the thresholds of every rule of
    the scope (rule id -> name -> value), overrides applied, as the findings were judged."""

    findings: list[Finding]
    thresholds: dict[str, dict[str, Any]]


_REGISTRY: dict[tuple[str, str], RuleSpec] = {}
_LOADED = False


def rule(rule_id: str, *, scope: str, defaults: Mapping[str, Any] | None = None) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as rule ``rule_id`` of ``scope`` with its default thresholds."""
    if scope not in SCOPES:
        raise ValueError(f"rule {rule_id!r}: scope {scope!r} is not one of {SCOPES}")
    if "." in rule_id:
        raise ValueError(f"rule id {rule_id!r}: ids are bare names; the scope is given apart")

    def register(func: RuleFunc) -> RuleFunc:
        existing = _REGISTRY.get((scope, rule_id))
        if existing is not None and existing.func.__qualname__ != func.__qualname__:
            raise ValueError(f"{scope} rule id {rule_id!r} is registered twice")
        doc = (func.__doc__ or "").strip().splitlines()
        _REGISTRY[scope, rule_id] = RuleSpec(rule_id, scope, func, dict(defaults or {}), doc[0] if doc else "")
        return func

    return register


def _load_all() -> None:
    """Import every rule module of this package and its subpackages once (they register themselves)."""
    global _LOADED
    if _LOADED:
        return
    for mod in pkgutil.walk_packages(__path__, f"{__name__}."):
        parts = mod.name.split(".")[2:]
        if not any(p.startswith("_") for p in parts) and parts != ["context"]:
            importlib.import_module(mod.name)
    _LOADED = True


def registry(scope: str | None = None) -> list[RuleSpec]:
    """Registered rules (of one scope), in (scope, id) order."""
    _load_all()
    return [s for k, s in sorted(_REGISTRY.items()) if scope is None or s.scope == scope]


def get_rule(scope: str, rule_id: str) -> RuleSpec:
    """The rule ``rule_id`` of ``scope``; a UsageError naming the scope's rules when there is none."""
    _load_all()
    try:
        return _REGISTRY[scope, rule_id]
    except KeyError:
        known = ", ".join(s.id for s in registry(scope))
        raise UsageError(f"unknown {scope} rule {rule_id!r}; known: {known}") from None


def _bare(scope: str, rule_id: str) -> str:
    """``rule_id`` without a ``"<scope>."`` prefix (the form sweep configurations once stored)."""
    return rule_id[len(scope) + 1:] if rule_id.startswith(scope + ".") else rule_id


def resolve_thresholds(scope: str, overrides: Overrides | None) -> dict[str, dict[str, Any]]:
    """Defaults of every rule of ``scope`` merged with ``overrides``; unknown names are a UsageError."""
    specs = {s.id: s for s in registry(scope)}
    out = {rid: dict(s.defaults) for rid, s in specs.items()}
    for given, values in (overrides or {}).items():
        rid = _bare(scope, given)
        if rid not in specs:
            raise UsageError(f"thresholds given for unknown {scope} rule {given!r}; known: {', '.join(specs)}")
        for name, value in (values or {}).items():
            if name not in specs[rid].defaults:
                have = ", ".join(specs[rid].defaults) or "none"
                raise UsageError(f"{scope} rule {rid!r} has no threshold {name!r}; it has {have}")
            out[rid][name] = value
    return out


def run_rules(scope: str, ctx: Any, *, only: list[str] | None = None, overrides: Overrides | None = None) -> RuleRun:
    """Run the rules of ``scope`` (or just ``only``) over ``ctx``: findings most severe first, and the
    thresholds of every rule of the scope. ``ctx`` is read, never written."""
    specs = registry(scope)
    if only is not None:
        known = {s.id for s in specs}
        unknown = [r for r in only if r not in known]
        if unknown:
            raise UsageError(f"unknown {scope} rule(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        specs = [s for s in specs if s.id in only]
    used = resolve_thresholds(scope, overrides)
    findings: list[Finding] = []
    for spec in specs:
        findings.extend(spec.run(ctx, used[spec.id]))
    return RuleRun(sort_findings(findings), used)


__all__ = ["SCOPES", "RuleRun", "RuleSpec", "Thresholds", "get_rule", "registry", "resolve_thresholds", "rule",
           "run_rules"]
