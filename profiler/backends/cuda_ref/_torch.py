"""PyTorch, loaded on first use and handed to the modules of this package as the globals ``torch``, ``F``.

The op closures run once per step per query, so they look ``torch`` and ``F`` up as module globals (a
closure's fastest lookup besides a local). A module calls :func:`bind` with its ``globals()`` at import;
:func:`load_torch` fills every bound module when PyTorch is first needed, so importing the package never
imports PyTorch.
"""

from __future__ import annotations

from typing import Any

torch: Any = None
F: Any = None
_namespaces: list[dict[str, Any]] = []


def bind(namespace: dict[str, Any]) -> None:
    """Give the module whose ``globals()`` this is the names ``torch`` and ``F`` (now, or once loaded)."""
    _namespaces.append(namespace)
    if torch is not None:
        namespace.update(torch=torch, F=F)


def load_torch() -> Any:
    """The ``torch`` module; raises MissingExtra naming the ``torch`` extra when it is not installed."""
    global torch, F
    if torch is None:
        from profiler.errors import require

        loaded = require("torch", "torch", "the cuda backend")
        import torch.nn.functional as functional

        torch, F = loaded, functional
        for namespace in _namespaces:
            namespace.update(torch=torch, F=F)
    return torch
