"""Where trtprof keeps its caches (transformed models, engines, loaded captures)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$TRTPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/trtprof``, else ``~/.cache/trtprof``."""
    root = os.environ.get("TRTPROF_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "trtprof"
