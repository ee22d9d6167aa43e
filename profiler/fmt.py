"""Text formatting for tables and findings: numbers with units, chosen by the key's unit suffix.

Pure functions; the report's figures keep raw numbers, tables show these strings.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

DASH = "—"


def is_number(value: Any) -> bool:
    """True for a finite int or float (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        np = sys.modules.get("numpy")  # a numpy scalar needs numpy loaded: no import for a None or a str
        if np is not None and isinstance(value, np.generic) and not isinstance(value, np.bool_):
            value = value.item()
        else:
            return False
    return isinstance(value, int) or math.isfinite(value)


def fmt_num(value: Any, digits: int = 4) -> str:
    """An int with thousands separators, a float with ``digits`` significant digits, else a dash."""
    if value is None:
        return DASH
    if not is_number(value):
        if isinstance(value, float):  # NaN / inf
            return DASH if math.isnan(value) else ("∞" if value > 0 else "-∞")
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1e4:
        return f"{int(value):,}"
    value = float(value)
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def fmt_ms(value: Any) -> str:
    return DASH if fmt_num(value) == DASH else f"{fmt_num(value)} ms"


def fmt_us(value: Any) -> str:
    return DASH if fmt_num(value) == DASH else f"{fmt_num(value)} µs"


def fmt_pct(value: Any, digits: int = 3) -> str:
    return DASH if not is_number(value) else f"{fmt_num(value, digits)}%"


def fmt_bytes(value: Any) -> str:
    """Bytes in binary units: 1536 -> '1.5 KiB'."""
    if not is_number(value):
        return DASH if value is None else str(value)
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"  # pragma: no cover


def fmt_ratio_pct(ratio: Any) -> str:
    """A ratio as a signed change: 1.123 -> '+12.3%'."""
    if not is_number(ratio):
        return DASH
    return f"{(float(ratio) - 1) * 100:+.3g}%"


def fmt_value(key: str, value: Any) -> str:
    """Format a value by the unit its key names (``_ms``, ``_us``, ``_ns``, ``_bytes``, ``_pct``, ``fraction``)."""
    k = key.lower()
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, dict)):
        if isinstance(value, (list, tuple)) and all(not isinstance(v, (list, dict)) for v in value):
            text = ", ".join(fmt_value(key, v) if is_number(v) else str(v) for v in value)
        else:
            text = json.dumps(value, default=str, separators=(", ", ": "))
        return text if len(text) <= 400 else text[:397] + "..."
    if not is_number(value):
        return fmt_num(value) if isinstance(value, float) else str(value)
    if k.endswith("_bytes") or k == "bytes":
        return fmt_bytes(value)
    if k.endswith("_ms"):
        return fmt_ms(value)
    if k.endswith("_us"):
        return fmt_us(value)
    if k.endswith("_ns"):
        return f"{fmt_num(value)} ns"
    if k.endswith("_s"):
        return f"{fmt_num(value)} s"
    if k.endswith("_pct") or k.endswith("percent"):
        return fmt_pct(value)
    if k.endswith("fraction"):
        return f"{fmt_num(float(value), 4)} ({fmt_pct(float(value) * 100)})"
    return fmt_num(value)


def plural(n: int, one: str, many: str | None = None) -> str:
    """``one`` for a count of one, else ``many`` (``one`` with an s unless given: 'activity', 'activities')."""
    return one if n == 1 else many or one + "s"


UNIT_SUFFIXES = ("_bytes", "_ms", "_us", "_ns", "_s", "_pct")


def humanize_key(key: str, strip_unit: bool = False) -> str:
    """'gpu_busy_fraction' -> 'gpu busy fraction'; with ``strip_unit`` 'workspace_bytes' -> 'workspace'
    (for places where :func:`fmt_value` already prints the unit)."""
    key = str(key)
    if strip_unit:
        for suffix in UNIT_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key = key[: -len(suffix)]
                break
    return key.replace("_", " ")
