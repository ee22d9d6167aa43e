"""From ids to values: the export's string table, pandas categoricals built from codes, stand-ins for
columns not read, enumerations, and the (process, correlation id) join of activities to their API calls."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from profiler.capture.export import NULL_INT, Columns, Export
from profiler.capture.keys import ROW_CHUNK, blocks, row_index
from profiler.capture.trace import SCHEMAS, enum_dtype
from profiler.capture.validate import MAX_TEXT_BYTES, decode_all, require_columns

PID_MASK = -16777216  # 0xFFFFFFFFFF000000 as a signed int64: the process part of a globalTid

def clipped_text(export: Export, table: str, column: str) -> str:
    """SQL for a text column as bytes, cut at :data:`~profiler.capture.validate.MAX_TEXT_BYTES` when the table
    holds a longer value: a name a thousand times longer than any real one (a 50 MB NVTX name on every
    instance) is read as its first MiB, never whole (whole, a hundred of them overran the SQLite reader's
    string buffers). Tables without one are read as they are (an empty value stays empty, not NULL)."""
    whole = f"CAST({column} AS BLOB)"
    if int(export.scalar(f"SELECT coalesce(max(length({whole})), 0) FROM {table}") or 0) <= MAX_TEXT_BYTES:
        return whole
    return f"substr({whole}, 1, {MAX_TEXT_BYTES})"


class Strings:
    """``StringIds`` as a lookup from id to string, producing categoricals without per-row Python."""

    def __init__(self, export: Export):
        if export.has("StringIds"):
            require_columns(export.path, "StringIds", export.columns("StringIds"))
            tbl = export.arrow(f"SELECT id, {clipped_text(export, 'StringIds', 'value')} AS value FROM StringIds "
                               "WHERE typeof(id) = 'integer'")
            self.ids = tbl.column("id").to_numpy(zero_copy_only=False).astype(np.int64)
            raw = tbl.column("value")
            self.null_values = int(raw.null_count)
            self.values = decode_all(raw.to_pylist(), export.bad_text)
            self.clipped = sum(len(v) >= MAX_TEXT_BYTES for v in raw.to_pylist() if v is not None)
        else:
            self.ids = np.empty(0, np.int64)
            self.values = np.empty(0, dtype=object)
            self.null_values = 0
            self.clipped = 0
        order = np.argsort(self.ids, kind="stable")
        self.ids, self.values = self.ids[order], self.values[order]
        self.unresolved = 0

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Strings for a (small) array of ids; -1 (no id) gives '', an unknown id ``<string N>``."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=object)
        pos = np.searchsorted(self.ids, ids)
        pos_c = np.minimum(pos, max(len(self.ids) - 1, 0))
        found = (len(self.ids) > 0) & (self.ids[pos_c] == ids) if len(self.ids) else np.zeros(len(ids), bool)
        out[:] = ""
        out[found] = self.values[pos_c[found]]
        unknown = ~found & (ids >= 0)
        if unknown.any():
            self.unresolved += int(unknown.sum())
            out[unknown] = [f"<string {i}>" for i in ids[unknown]]
        return out

    def categorical(self, ids: np.ndarray, transform: Callable[[str], str] | None = None) -> pd.Categorical:
        codes, uniq = factorize_ids(np.asarray(ids, dtype=np.int64))
        names = self.lookup(uniq)
        if transform is not None:
            names = np.asarray([transform(n) for n in names], dtype=object)
        return categorical_from_codes(codes, names)


def factorize_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pandas.factorize`` of integer ids (codes in order of first appearance) with int32 codes, made
    ``ROW_CHUNK`` rows at a time: pandas sizes its hash table by the input, so one call over millions of
    rows holds a table and int64 codes several times the size of the result."""
    if len(ids) <= ROW_CHUNK:
        codes, uniq = pd.factorize(ids)
        return codes.astype(np.int32 if len(uniq) < 1 << 31 else np.int64), uniq
    chunks = blocks(len(ids), ROW_CHUNK)
    uniq = pd.unique(np.concatenate([pd.unique(ids[sl]) for sl in chunks]))  # first appearances
    by_value = np.argsort(uniq, kind="stable")
    sorted_uniq = uniq[by_value]
    codes = np.empty(len(ids), dtype=np.int32 if len(uniq) < 1 << 31 else np.int64)
    for sl in chunks:
        codes[sl] = by_value[np.searchsorted(sorted_uniq, ids[sl])]
    return codes, uniq


def categorical_from_codes(codes: np.ndarray, names: np.ndarray) -> pd.Categorical:
    """Categorical of ``names[codes]`` with duplicate names folded into one category."""
    if len(names) == 0:
        return pd.Categorical(np.full(len(codes), "", dtype=object) if len(codes) else [],
                              categories=pd.Index([""] if len(codes) else [], dtype="str"))
    c2, uniq2 = pd.factorize(np.asarray(names, dtype=object))
    final = c2.astype(np.int32)[codes] if len(codes) else np.empty(0, np.int32)
    return pd.Categorical.from_codes(final, categories=pd.Index(uniq2, dtype="str"))


def take_column(cols: Columns, name: str, dtype=None) -> np.ndarray:
    """Take a column out of ``cols`` (freeing it there), in ``dtype`` when given."""
    arr = cols.pop(name)
    return arr if dtype is None or arr.dtype == dtype else arr.astype(dtype)


def placeholder(frame: str, column: str, n: int) -> Any:
    """A constant stand-in for a contract column that was not read: -1 (ids), NA (nullable ids), ''
    (names) or the enumeration's fallback. Integer ones are read-only zero-stride views, so they take
    no memory per row; categoricals take one byte per row."""
    spec = SCHEMAS[frame][column]
    if spec in ("int64", "int32"):
        return np.broadcast_to(np.array(-1, dtype=spec), (n,))
    if spec == "Int64":
        return pd.arrays.IntegerArray(np.broadcast_to(np.int64(0), (n,)), np.broadcast_to(np.True_, (n,)))
    if spec == "category":
        return pd.Categorical.from_codes(np.zeros(n, np.int8), categories=pd.Index([""], dtype="str"))
    cats = list(enum_dtype(column).categories)
    fill = "unknown" if "unknown" in cats else ("other" if "other" in cats else cats[0])
    return pd.Categorical.from_codes(np.full(n, cats.index(fill), np.int8), dtype=enum_dtype(column))


CONSTANT_ID_COLUMNS = frozenset({"pid", "tid", "global_tid", "api_tid", "device_id", "stream_id", "context_id"})
"""Id columns that are often one value for the whole capture (one process, one GPU, one thread)."""


def compact_constant(column: str, values: Any) -> Any:
    """A constant id column as a read-only zero-stride view of its value (no memory per row), else
    ``values`` itself: most captures hold one process and one GPU, many one stream or one thread."""
    if (column not in CONSTANT_ID_COLUMNS or not isinstance(values, np.ndarray) or values.dtype.kind != "i"
            or len(values) < 2 or values.strides == (0,)):
        return values
    first = values[0]
    if (values == first).all():
        return np.broadcast_to(first, values.shape)
    return values


def nullable(arr: np.ndarray) -> pd.arrays.IntegerArray:
    """Int64 with NA where the SQL side put the NULL sentinel."""
    return pd.arrays.IntegerArray(np.where(arr == NULL_INT, 0, arr), arr == NULL_INT)


def enum_column(values: np.ndarray, mapping: dict[int, str], column: str, fallback: str) -> pd.Categorical:
    dtype = enum_dtype(column)
    cats = list(dtype.categories)
    lut_keys = np.array(sorted(mapping), dtype=np.int64)
    lut_vals = np.array([cats.index(mapping[k]) for k in lut_keys], dtype=np.int8)
    codes = np.full(len(values), cats.index(fallback), dtype=np.int8)
    if len(lut_keys) and len(values):
        pos = np.clip(np.searchsorted(lut_keys, values), 0, len(lut_keys) - 1)
        hit = lut_keys[pos] == values
        codes[hit] = lut_vals[pos[hit]]
    return pd.Categorical.from_codes(codes, dtype=dtype)


# --------------------------------------------------------------------------------------------------
# Correlation join


class ApiIndex:
    """(process, correlation id) -> row of the API frame, searched with sorted keys."""

    def __init__(self, global_tid: np.ndarray, correlation_id: np.ndarray, empty=np.empty):
        """``empty(n, dtype)`` makes the array of keys (a column file for a large capture)."""
        self.procs = np.unique(pd.unique(global_tid) & PID_MASK)  # distinct threads first: few
        keys = self._keys(global_tid, correlation_id, invalid=-1, empty=empty)
        self.order: np.ndarray | None = None
        if len(keys) > 1 and not (keys[1:] >= keys[:-1]).all():
            self.order = row_index(np.argsort(keys, kind="stable"))
            keys = keys[self.order]
        self.sorted = keys

    def _keys(self, global_id: np.ndarray, corr: np.ndarray, invalid: int, empty=np.empty) -> np.ndarray:
        """(process, correlation id) keys of the rows, ``invalid`` where either is unknown; made
        ``ROW_CHUNK`` rows at a time, so the temporaries stay small beside the result."""
        out = empty(len(global_id), np.int64)
        out.fill(invalid)
        if len(self.procs) == 0:
            return out
        for sl in blocks(len(out), ROW_CHUNK):
            proc = global_id[sl] & PID_MASK
            c = corr[sl]
            p = np.minimum(np.searchsorted(self.procs, proc), len(self.procs) - 1)
            ok = (self.procs[p] == proc) & (c >= 0) & (c < 2**32)
            part = out[sl]
            part[ok] = (p[ok].astype(np.int64) << 32) | c[ok]
        return out

    def find(self, global_pid: np.ndarray, correlation_id: np.ndarray) -> np.ndarray:
        """API row per activity, -1 where the activity's call is not in the capture."""
        if len(self.sorted) == 0 or len(global_pid) == 0:
            return np.full(len(global_pid), -1, dtype=np.int64)
        k = self._keys(global_pid, correlation_id, invalid=-2)
        pos = np.minimum(np.searchsorted(self.sorted, k), len(self.sorted) - 1)
        hit = self.sorted[pos] == k
        rows = pos if self.order is None else self.order[pos]
        return np.where(hit, rows, -1)
