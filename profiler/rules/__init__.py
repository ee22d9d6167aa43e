"""Diagnosis rules: pure functions ``rule(ctx) -> list[Finding]`` in one registry.

A rule module registers each rule with :func:`rule`, giving its public id, the *scope* it applies
to (``capture`` for nsys capture analysis; other scopes such as ``sweep`` or ``layers`` live in their
own modules here) and its default thresholds. The caller builds a context object for that scope and
runs every rule of it::

    from profiler.rules import run_rules
    findings = run_rules("capture", ctx, overrides={"gpu_idle": {"min_gap_us": 20}})

Inside a rule, :func:`thresholds` gives the defaults merged with the caller's overrides, so each
finding can report the exact limits it was held to. Adding a rule is one decorated function in a
module of this package; modules are discovered, so no list elsewhere needs editing.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from profiler.errors import UsageError
from profiler.findings import Finding, sort_findings

RuleFunc = Callable[[Any], list[Finding]]


@dataclass(frozen=True)
class RuleSpec:
    """One registered rule: public id, scope, default thresholds and the function."""

    id: str
    scope: str
    func: RuleFunc
    defaults: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


_REGISTRY: dict[str, RuleSpec] = {}
_LOADED = False


def rule(rule_id: str, *, scope: str, defaults: dict[str, Any] | None = None) -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as rule ``rule_id`` of ``scope`` with its default thresholds."""

    def register(func: RuleFunc) -> RuleFunc:
        existing = _REGISTRY.get(rule_id)
        if existing is not None and existing.func.__qualname__ != func.__qualname__:
            raise ValueError(f"rule id {rule_id!r} is registered twice")
        doc = (func.__doc__ or "").strip().splitlines()
        _REGISTRY[rule_id] = RuleSpec(rule_id, scope, func, dict(defaults or {}), doc[0] if doc else "")
        return func

    return register


def _load_all() -> None:
    """Import every rule module of this package once (they register themselves)."""
    global _LOADED
    if _LOADED:
        return
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    _LOADED = True


def registry(scope: str | None = None) -> list[RuleSpec]:
    """Registered rules (of one scope), in id order."""
    _load_all()
    return sorted((s for s in _REGISTRY.values() if scope is None or s.scope == scope), key=lambda s: s.id)


def get_rule(rule_id: str) -> RuleSpec:
    _load_all()
    try:
        return _REGISTRY[rule_id]
    except KeyError:
        raise UsageError(f"unknown rule {rule_id!r}; known rules: {', '.join(sorted(_REGISTRY))}") from None


def resolve_thresholds(scope: str, overrides: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Defaults of every rule of ``scope`` merged with ``overrides``; unknown names are a UsageError."""
    specs = {s.id: s for s in registry(scope)}
    out = {rid: dict(s.defaults) for rid, s in specs.items()}
    for rid, values in (overrides or {}).items():
        if rid not in specs:
            raise UsageError(f"thresholds given for unknown {scope} rule {rid!r}")
        for key, value in (values or {}).items():
            if key not in specs[rid].defaults:
                raise UsageError(f"rule {rid!r} has no threshold {key!r}; it has {', '.join(specs[rid].defaults)}")
            out[rid][key] = value
    return out


def thresholds(ctx: Any, rule_id: str) -> dict[str, Any]:
    """The thresholds ``rule_id`` runs with: its defaults merged with ``ctx.thresholds[rule_id]``."""
    spec = get_rule(rule_id)
    merged = dict(spec.defaults)
    merged.update((getattr(ctx, "thresholds", None) or {}).get(rule_id, {}))
    return merged


def run_rules(scope: str, ctx: Any, *, only: list[str] | None = None,
              overrides: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """Run the rules of ``scope`` (or just ``only``) over ``ctx``; findings most severe first.

    ``overrides`` (rule id -> threshold -> value) are validated and stored on ``ctx.thresholds``.
    """
    specs = registry(scope)
    if only is not None:
        known = {s.id for s in specs}
        unknown = [r for r in only if r not in known]
        if unknown:
            raise UsageError(f"unknown {scope} rule(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        specs = [s for s in specs if s.id in only]
    ctx.thresholds = resolve_thresholds(scope, overrides)
    findings: list[Finding] = []
    for spec in specs:
        findings.extend(spec.func(ctx))
    return sort_findings(findings)


__all__ = ["RuleSpec", "rule", "registry", "get_rule", "resolve_thresholds", "thresholds", "run_rules"]
