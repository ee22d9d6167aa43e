"""On-disk cache of transformed models (fp16 conversions, int8 calibrations).

Calibration is the slow step of a sweep and its result depends only on the model, the calibration
data, the method and the tool versions, so a transformed model is stored under a key hashed from
exactly those (plus shapes and options). An entry is two files, ``<key>.onnx`` and ``<key>.json``
(the info recorded when it was made); both are written to temporary names and renamed, so a crash
or a concurrent sweep never leaves a half-written entry that later reads as valid.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """:func:`profiler.cache_dir.cache_root` + ``/variants``."""
    from profiler.cache_dir import cache_root

    return cache_root() / "variants"


def cache_key(parts: dict[str, Any]) -> str:
    """Stable 32-hex-digit key from a JSON-serialisable dict (order of keys does not matter)."""
    text = json.dumps({"format": CACHE_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class VariantCache:
    """A directory of transformed models keyed by :func:`cache_key`."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def model_path(self, key: str, precision: str) -> Path:
        return self.root / f"{precision}-{key}.onnx"

    def _meta_path(self, key: str, precision: str) -> Path:
        return self.root / f"{precision}-{key}.json"

    def lookup(self, key: str, precision: str) -> tuple[Path, dict[str, Any]] | None:
        """(model path, stored info) of a complete entry, else None (missing or damaged entries miss)."""
        model, meta = self.model_path(key, precision), self._meta_path(key, precision)
        if not (model.is_file() and meta.is_file()):
            return None
        try:
            stored = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        if stored.get("size_bytes") != model.stat().st_size:
            return None
        return model, stored.get("info", {})

    def new_temp_path(self, precision: str) -> Path:
        """A fresh temporary file in the cache directory, for a transform to write into."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{precision}-", suffix=".onnx.tmp", dir=self.root)
        os.close(fd)
        return Path(name)

    def store(self, key: str, precision: str, written: Path, info: dict[str, Any]) -> Path:
        """Move a finished model into place and record its info; returns the final model path."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.model_path(key, precision)
        os.replace(written, final)
        fd, meta_tmp = tempfile.mkstemp(prefix=f".{precision}-{key}.", suffix=".json.tmp", dir=self.root)
        with os.fdopen(fd, "w") as fh:  # unique per writer: threads of one process never share it
            fh.write(json.dumps({"size_bytes": final.stat().st_size, "info": info},
                                indent=1, sort_keys=True, default=str))
        os.replace(meta_tmp, self._meta_path(key, precision))
        return final
