"""Reading a trace's frames: the vocabularies of GPU work and CUDA calls (small integer codes used by
name), integer columns with their missing values filled, and string columns as codes (never one Python
string per row)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np
import pandas as pd

KIND_NAMES = ("kernel", "memcpy", "memset", "graph")
KERNEL, MEMCPY, MEMSET, GRAPH = range(4)
class CopyKind(IntEnum):
    """``Activity.copy_kind`` codes (0 for anything not a known copy direction)."""

    other = 0
    HtoD = 1
    DtoH = 2
    DtoD = 3
    HtoH = 4
    PtoP = 5


class ApiCategory(IntEnum):
    """``HostCalls.category`` codes (0 for OS runtime calls and unclassified API calls)."""

    other = 0
    launch = 1
    graph_launch = 2
    sync = 3
    memcpy = 4
    memset = 5


#: The names of the codes, in code order (the trace's string vocabularies map onto them by name).
COPY_KINDS = tuple(k.name for k in CopyKind)
API_CATEGORIES = tuple(c.name for c in ApiCategory)
DEVICE_SYNC_NAMES = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize"})


def frame_of(trace: Any, attr: str) -> pd.DataFrame:
    df = getattr(trace, attr, None)
    return df if isinstance(df, pd.DataFrame) else pd.DataFrame()


def i64(df: pd.DataFrame, col: str, fill: int = -1) -> np.ndarray:
    """A column as int64 with missing values (absent column, NA, NaN) replaced by ``fill``."""
    if col not in df.columns:
        return np.full(len(df), fill, dtype=np.int64)
    s = df[col]
    if s.dtype == np.int64:
        return s.to_numpy()
    if isinstance(s.dtype, np.dtype) and s.dtype.kind == "i":
        values = s.to_numpy()
        if values.strides == (0,) and len(values):  # a constant column stays zero-stride
            return np.broadcast_to(values[:1].astype(np.int64), values.shape)
    try:
        return s.to_numpy(dtype=np.int64, na_value=fill)
    except (TypeError, ValueError):
        return pd.to_numeric(s, errors="coerce").fillna(fill).to_numpy(dtype=np.int64)


def not_before(end: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``end`` raised to ``start`` where it lies before it (a corrupt row counts as empty); the array
    itself, not a copy, when every row is in order (the usual case: the trace frame's own column)."""
    return end if (end >= start).all() else np.maximum(end, start)


def factor(df: pd.DataFrame, col: str, fill: str = "", *, small: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) of a string column without materialising one Python string per row.

    Categorical columns use their codes; others are factorised. Missing values get the code of
    ``fill`` (appended to ``values``), so ``values[codes]`` is always a valid string. Codes are int64,
    or with ``small`` the narrowest integer type that holds them (a categorical's own codes, no row-length
    int64 copy): for codes that are only looked up, never combined arithmetically with other columns.
    """
    if col not in df.columns or len(df) == 0:
        return np.zeros(len(df), dtype=np.int8 if small else np.int64), np.array([fill], dtype=object)
    s = df[col]
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy()
        values = np.asarray(s.cat.categories.astype(object), dtype=object)
    else:
        codes, uniq = pd.factorize(s, use_na_sentinel=True)
        values = np.asarray(pd.Index(uniq).astype(object), dtype=object)
    values = np.array([str(v) for v in values] + [fill], dtype=object)
    if not small:
        codes = codes.astype(np.int64)
        return np.where(codes < 0, len(values) - 1, codes), values
    codes = codes.astype(_code_type(len(values)), copy=False)
    missing = codes < 0
    if missing.any():
        codes = np.where(missing, codes.dtype.type(len(values) - 1), codes)
    return codes, values


def _code_type(n_values: int) -> type:
    """The narrowest signed integer type holding the codes 0 .. n_values - 1."""
    for kind in (np.int8, np.int16, np.int32):
        if n_values <= np.iinfo(kind).max + 1:
            return kind
    return np.int64


def codes_in(df: pd.DataFrame, col: str, vocabulary: tuple[str, ...]) -> np.ndarray:
    """Small-integer codes of a string column's values in ``vocabulary`` (unknown or missing -> 0)."""
    codes, values = factor(df, col, small=True)
    lookup = {v: i for i, v in enumerate(vocabulary)}
    table = np.array([lookup.get(v, 0) for v in values], dtype=np.int8)
    return table[codes]


def is_value(df: pd.DataFrame, col: str, value: str) -> np.ndarray:
    """Boolean mask of rows whose ``col`` equals ``value`` (False where the column is absent)."""
    if col not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return (df[col] == value).to_numpy(dtype=bool, na_value=False)
