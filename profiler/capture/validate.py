"""Validation of an nsys export at the boundary, before any analysis sees it.

Real exports are sometimes damaged (a flipped byte, a truncated copy, a tool that wrote text into an
integer column) and some are hostile. Rather than letting a bad value become an impossible number
deep in the analysis, the loader:

- checks that each table it reads has the columns it needs, by name (:func:`require_columns`: one
  sentence naming the table and the missing column);
- reads integer columns through :func:`int_sql`, so text, BLOB or real values arrive as NULL;
- decodes text with replacement (:func:`decode_all`) and counts what it replaced;
- drops rows whose times are missing, reversed or outside the capture (:class:`TimeBounds`), and
  activities on an impossible device id, and says how many it dropped and why (:func:`clean_frame`).

The sizes read at most: :data:`MAX_FILE_BYTES` and :data:`MAX_TABLE_ROWS` for the SQLite export and the
folders of Parquet or Arrow tables alike, and for those folders (whose files a reader decodes, so a small
file can stand for a huge table) :data:`MAX_TABLE_BYTES`, :data:`MAX_TEXT_BYTES`, :data:`MAX_COLUMNS` and
:data:`MAX_NAME_CHARS` too (:mod:`profiler.capture.columnar`). Past one the export is refused in one
sentence (exit 3) before its rows are loaded. Each is far above real exports (a 4.5 GB export holds 49 M
CUDA API calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from profiler.errors import InputError

NULL_INT = -(2**63)
MAX_DEVICE_ID = 1 << 16
#: The largest copy or memset one record can describe: 256 TiB, past any GPU's or host's memory; a larger
#: count is damage, and a few of them summed would overflow int64 into negative bytes per inference.
MAX_COPY_BYTES = 1 << 48
#: The largest file read: a SQLite export, or one table file of a Parquet/Arrow export (256 GiB, some
#: fifty times the largest exports seen; a larger one is refused before it is opened or hashed).
MAX_FILE_BYTES = 1 << 38
#: The most rows one table may hold (an export with 49 M CUDA API calls is 4.5 GB; this is ten times
#: as many rows as a 45 GB export): a table of more is refused before any row is loaded.
MAX_TABLE_ROWS = 500_000_000
#: The most bytes one table of a Parquet/Arrow export may take once decoded (64 GiB).
MAX_TABLE_BYTES = 1 << 36
#: The longest text value of a Parquet/Arrow export (1 MiB; a demangled C++ kernel name is a few KiB).
MAX_TEXT_BYTES = 1 << 20
#: The most columns one table of a Parquet/Arrow export may have (nsys's widest has about 60).
MAX_COLUMNS = 1000
#: The longest column name of a Parquet/Arrow export; a longer name is no nsys column and is left out.
MAX_NAME_CHARS = 256
PLAUSIBLE_SPAN_NS = 1 << 53  # 104 days: no capture is longer, and float64 still holds it exactly
_SLACK_NS = 1_000_000_000

# the columns read from each table without a fallback (optional ones are probed and defaulted)
REQUIRED: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "bytes"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "bytes"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end"),
    "NVTX_EVENTS": ("start", "eventType"),
    "OSRT_API": ("start", "end"),
    "StringIds": ("id", "value"),
}


def require_columns(path: Any, table: str, columns: Iterable[str]) -> None:
    """InputError naming the first column of ``REQUIRED[table]`` that the table lacks."""
    have = set(columns)
    for col in REQUIRED.get(table, ()):
        if col not in have:
            shown = ", ".join(sorted(have)[:12]) + (", ..." if len(have) > 12 else "")
            raise InputError(f"{path}: table {table} has no column '{col}' (it has: {shown or 'none'}), so it "
                             f"is not an nsys export layout this version reads; export the capture again")


def int_sql(column: str) -> str:
    """SQL for an integer column that turns text, BLOB and real values into NULL (typeof is per value)."""
    return f"iif(typeof({column}) = 'integer', {column}, NULL)"


def decode(value: Any, counter: list[int]) -> Any:
    """``bytes`` -> str decoded as UTF-8 with replacement (``counter[0]`` counts the values that
    needed it); other values unchanged."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = raw.decode("utf-8", "replace")
        if "\ufffd" in text and "\ufffd".encode() not in raw:
            counter[0] += 1
        return text
    return value


def decode_all(values: Iterable[Any], counter: list[int]) -> np.ndarray:
    """Strings of an Arrow binary column's values (NULL -> '')."""
    return np.asarray(["" if v is None else decode(v, counter) for v in values], dtype=object)


@dataclass
class TimeBounds:
    """The times an event of this capture can plausibly have.

    nsys counts event times from the session start, so with the session's duration (ANALYSIS_DETAILS)
    every event lies in [0, duration]; the bounds allow the duration again on each side plus a second.
    Without a usable duration only absurd values (beyond 2**53 ns, 104 days) are refused.
    """

    lo_ns: int = -PLAUSIBLE_SPAN_NS
    hi_ns: int = PLAUSIBLE_SPAN_NS
    duration_ns: int | None = None

    @classmethod
    def from_duration(cls, duration_ns: Any) -> "TimeBounds":
        if isinstance(duration_ns, (int, np.integer)) and 0 < int(duration_ns) < PLAUSIBLE_SPAN_NS:
            d = int(duration_ns)
            return cls(-(d + _SLACK_NS), 2 * d + _SLACK_NS, d)
        return cls()

    def bad(self, start: np.ndarray, end: np.ndarray | None) -> dict[str, np.ndarray]:
        """Masks of the rows to drop, by reason (``end`` None: no end to check)."""
        start = np.asarray(start, dtype=np.int64)
        out = {"missing": start == NULL_INT}
        far = (start < self.lo_ns) | (start > self.hi_ns)
        if end is not None:
            end = np.asarray(end, dtype=np.int64)
            out["missing"] |= end == NULL_INT
            far |= (end < self.lo_ns) | (end > self.hi_ns)
            out["reversed"] = ~out["missing"] & ~far & (end < start)
        out["outside"] = ~out["missing"] & far
        return out


_REASONS = {
    "missing": "a missing or non-integer start or end",
    "outside": "times outside the capture",
    "reversed": "an end before the start",
    "device": "an impossible device id",
    "thread": "no thread (globalTid missing)",
    "bytes": "an impossible byte count (over 2^48)",
}


def describe(what: str, counts: dict[str, int], total: int) -> str | None:
    """'12 of 500 kernels were ignored: 10 with a missing ..., 2 with ...' or None when none were."""
    parts = [f"{n} with {_REASONS[k]}" for k, n in counts.items() if n]
    if not parts:
        return None
    dropped = sum(counts.values())
    return f"{dropped} of {total} {what} were ignored: " + ", ".join(parts) + "."


def device_ids(raw: np.ndarray) -> np.ndarray:
    """int32 device ids, -1 where the export's value is impossible (negative, NULL, 2**40): a plain
    cast would wrap 2**40 to device 0."""
    raw = np.asarray(raw, dtype=np.int64)
    return np.where((raw < 0) | (raw >= MAX_DEVICE_ID), -1, raw).astype(np.int32)


def drop_mask(bounds: TimeBounds, start: np.ndarray, end: np.ndarray | None,
              device: np.ndarray | None = None, thread: np.ndarray | None = None,
              ) -> tuple[np.ndarray, dict[str, int]]:
    """Rows to keep and the count dropped per reason (each row counted under its first reason)."""
    masks = bounds.bad(start, end)
    if device is not None:
        device = np.asarray(device, dtype=np.int64)
        masks["device"] = (device < 0) | (device >= MAX_DEVICE_ID)
    if thread is not None:
        masks["thread"] = np.asarray(thread, dtype=np.int64) < 0
    drop = np.zeros(len(start), bool)
    counts: dict[str, int] = {}
    for reason, m in masks.items():
        new = m & ~drop
        counts[reason] = int(new.sum())
        drop |= m
    return ~drop, counts


_WHAT = {"kernels": "kernels", "memcpy": "memory copies", "memset": "memsets", "graphs": "graph launches",
         "sync": "synchronisation records", "nvtx": "NVTX events", "osrt": "OS runtime calls",
         "api": "CUDA API calls"}


def clean_frame(name: str, df: pd.DataFrame, bounds: TimeBounds, notes: list[str], *,
                check_thread: bool = True, take: Any = None) -> pd.DataFrame:
    """``df`` without the rows an analysis cannot trust, with a note saying how many went and why.
    ``check_thread``: NVTX events without a thread are dropped (when the export has the column).
    ``take(df, keep)``: the frame of the kept rows (default: ``df.loc[keep]``, renumbered)."""
    if not len(df):
        return df
    start = df["start_ns"].to_numpy()
    if name == "nvtx":  # an NVTX end may be absent (an unclosed range, a mark)
        ends = df["end_ns"]
        end = ends.to_numpy(dtype=np.int64, na_value=0) if ends.dtype == "Int64" else ends.to_numpy()
        end = np.where(ends.isna().to_numpy(), np.maximum(start, 0), end)
        keep, counts = drop_mask(bounds, start, end,
                                 thread=df["global_tid"].to_numpy() if check_thread else None)
    else:
        dev = df["device_id"].to_numpy() if "device_id" in df.columns and name != "sync" else None
        keep, counts = drop_mask(bounds, start, df["end_ns"].to_numpy(), device=dev)
        if name in ("memcpy", "memset") and "bytes" in df.columns:
            b = df["bytes"]
            n = b.to_numpy(dtype=np.int64, na_value=0) if str(b.dtype) == "Int64" else np.asarray(b, np.int64)
            huge = keep & (n > MAX_COPY_BYTES)
            counts["bytes"] = int(huge.sum())
            keep = keep & ~huge
    note = describe(_WHAT.get(name, name), counts, len(df))
    if note is None:
        return df
    notes.append(note)
    return df.loc[keep].reset_index(drop=True) if take is None else take(df, keep)
