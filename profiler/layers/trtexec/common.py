"""What every trtexec reader shares: the file suffixes, the bounds on numbers, JSON reading."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from profiler.errors import InputError

DEFAULT_WARMUP_MS = 200.0
DETAILED_HINT = ("rerun trtexec with --profilingVerbosity=detailed --exportLayerInfo=FILE "
                 "to get layer types, precisions and tactics")

# Longest suffixes first: ".profile.metadata.json" must win over ".metadata.json" and ".profile.json".
SUFFIXES: list[tuple[str, str]] = [
    (".profile.metadata.json", "run_meta"), (".build.metadata.json", "build_meta"),
    (".profile.json", "profile"), (".graph.json", "layers"), (".layers.json", "layers"),
    (".layerinfo.json", "layers"), (".layer_info.json", "layers"), (".timing.json", "times"),
    (".times.json", "times"), (".metadata.json", "device"), (".build.log", "log"), (".profile.log", "log"),
    (".log", "log"), (".txt", "log"),
]
MAX_MS = 1e9  # 11.6 days: no trtexec duration or timestamp is longer; beyond it a value is damage
MAX_COUNT = 1e12
#: The largest trtexec file read (JSON or log): a million timed queries take about 200 MB; past it the file is
#: refused in one sentence rather than read into memory.
MAX_FILE_BYTES = 512 * 2**20
_PROFILE_SUFFIX = re.compile(r"^(?P<base>.*?)\s*\[profile (?P<profile>\d+)\]$")


# -- reading ---------------------------------------------------------------------------------------
def read_json(path: str | Path) -> Any:
    """Parse a JSON file; a truncated or malformed file raises InputError naming file and position."""
    p = Path(path)
    text = read_text(p)
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{p} nests JSON arrays or objects too deeply to be a trtexec export") from None
    except json.JSONDecodeError as exc:
        tail = text.rstrip()[-1:]
        what = "truncated" if exc.pos >= len(text.rstrip()) or tail not in ("]", "}") else "invalid"
        raise InputError(f"{p} is not valid JSON ({what} at line {exc.lineno}, column {exc.colno}, "
                         f"character {exc.pos} of {len(text)}: {exc.msg})") from exc
    except ValueError as exc:  # an integer literal of more digits than Python converts (4300)
        raise InputError(f"{p} holds a number no trtexec export has ({str(exc).split(';')[0]})") from None


def read_text(p: Path) -> str:
    """A trtexec file's text (invalid UTF-8 replaced), at most :data:`MAX_FILE_BYTES`; InputError otherwise."""
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(f"{p} is {size / 2**20:.0f} MiB, more than the {MAX_FILE_BYTES // 2**20} MiB a trtexec "
                             "export is read up to")
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except MemoryError:
        raise InputError(f"{p} does not fit in memory") from None


def mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (missing: empty), else InputError naming ``what``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{what} is {type(value).__name__ if isinstance(value, (dict, list)) else _shown(value)}, "
                         "not an object: the export is damaged")
    return value


def options(value: Any, what: str) -> dict[str, Any]:
    """trtexec's printed options (``inference_options``, ``build_options``, ``device_information``): an object of
    plain values (strings, numbers); a nested list or object in it is damage (InputError naming ``what``)."""
    out = mapping(value, what)
    for key, v in out.items():
        if isinstance(v, (dict, list)):
            raise InputError(f"{what} {key!r} is a {type(v).__name__}, not a value: the export is damaged")
    return out


def text_of(value: Any) -> str | None:
    """An option's value as text (trtexec prints strings; a number or a boolean from another writer is shown)."""
    return None if value is None else str(value)


def log_number(text: str, what: str) -> float:
    """A number printed in a trtexec log ('1.25', '3e-05'), else InputError naming ``what``."""
    try:
        x = float(text)
    except (ValueError, OverflowError):
        raise InputError(f"{what} is {text[:40]!r}, not a number: the log is damaged") from None
    if not math.isfinite(x):
        raise InputError(f"{what} is {text[:40]!r}, not a finite number: the log is damaged")
    return x


def number(value: Any, what: str, *, lo: float = 0.0, hi: float = MAX_MS, optional: bool = False
           ) -> float | None:
    """A finite number in [lo, hi] (None allowed when ``optional``), else InputError naming ``what``:
    the boundary check that keeps NaN, strings, negative times and 1e308 out of every statistic."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise InputError(f"{what} is {_shown(value)}, not a number from {lo:g} to {hi:g}: the export is damaged")
    return float(value)


def _shown(value: Any) -> str:
    text = json.dumps(value, allow_nan=True) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _strip_profile(name: str) -> tuple[str, int]:
    m = _PROFILE_SUFFIX.match(name)
    return (m.group("base"), int(m.group("profile"))) if m else (name, 0)
