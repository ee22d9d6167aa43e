"""The Trace: an Nsight Systems capture as pandas frames, one per kind of event.

Every frame always has the columns listed in ``SCHEMAS`` with those dtypes (an empty frame when the
capture lacks that kind of event), so analyses and notebooks never test for a column's presence.
Conventions:

- Times are int64 nanoseconds on the capture's own clock (they can be negative). ``nvtx.end_ns`` is
  nullable (``Int64``): marks and ranges that were never closed have no end.
- ``pid`` and ``tid`` are the operating-system ids decoded from nsys's global ids;
  ``global_tid``/``api_tid`` keep the raw nsys global thread id (it also encodes the process), so a
  kernel's ``api_tid`` can be compared with ``nvtx.global_tid`` and ``api.global_tid`` directly.
- GPU activities (kernels, copies, memsets, graph launches) carry the API call that launched them
  (``api_tid``, ``api_start_ns``, ``api_end_ns``; -1 when the call is not in the capture), joined on
  correlation id *and* process.
- Rows keep the export's order, which is not always start order (``osrt`` rows, and ``api`` rows of
  multi-threaded captures, are not): sort where order matters.
- Repeating strings (kernel, API, NVTX names) are pandas categoricals; small enumerations
  (``copy_kind``, ``sync_type``, ``event_type``, ...) are categoricals with a fixed vocabulary.

Build one from an export with :func:`profiler.capture.load_trace`, or directly from frames (missing
frames and columns are filled with empty/default values), e.g. ``Trace(kernels=df)`` in a test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from profiler.capture.keys import blocks

COPY_KINDS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")
MEMORY_KINDS = ("pageable", "pinned", "device", "array", "managed", "unknown")
SYNC_TYPES = ("event", "stream_wait", "stream", "context", "unknown")
NVTX_EVENT_TYPES = ("push_pop", "start_end", "mark")
API_KINDS = ("runtime", "driver")
API_CATEGORIES = ("launch", "graph_launch", "sync", "memcpy", "memset", "other")
GPU_ACTIVITY_KINDS = ("kernel", "memcpy", "memset", "graph")

_ENUMS: dict[str, tuple[str, ...]] = {
    "copy_kind": COPY_KINDS,
    "src_kind": MEMORY_KINDS,
    "dst_kind": MEMORY_KINDS,
    "sync_type": SYNC_TYPES,
    "event_type": NVTX_EVENT_TYPES,
    "api": API_KINDS,
    "category": API_CATEGORIES,
    "kind": GPU_ACTIVITY_KINDS,
}


def enum_dtype(column: str) -> pd.CategoricalDtype:
    """The fixed categorical dtype of an enumeration column (same categories in every Trace)."""
    return pd.CategoricalDtype(list(_ENUMS[column]))


# Column -> dtype. "category" is a free-vocabulary string categorical; "enum" a fixed one (_ENUMS).
_API_LINK = {"api_tid": "int64", "api_start_ns": "int64", "api_end_ns": "int64"}
SCHEMAS: dict[str, dict[str, str]] = {
    "kernels": {
        "start_ns": "int64", "end_ns": "int64", "device_id": "int32", "stream_id": "int64",
        "context_id": "int64", "correlation_id": "int64", "pid": "int32",
        "name": "category", "short_name": "category",
        "grid_x": "int32", "grid_y": "int32", "grid_z": "int32",
        "block_x": "int32", "block_y": "int32", "block_z": "int32",
        "registers_per_thread": "int32", "graph_node_id": "Int64", "graph_id": "Int64",
        **_API_LINK,
    },
    "memcpy": {
        "start_ns": "int64", "end_ns": "int64", "device_id": "int32", "stream_id": "int64",
        "correlation_id": "int64", "pid": "int32", "bytes": "int64",
        "copy_kind": "enum", "src_kind": "enum", "dst_kind": "enum",
        **_API_LINK, "api_name": "category",
    },
    "memset": {
        "start_ns": "int64", "end_ns": "int64", "device_id": "int32", "stream_id": "int64",
        "correlation_id": "int64", "pid": "int32", "bytes": "int64", **_API_LINK,
    },
    "graphs": {
        "start_ns": "int64", "end_ns": "int64", "device_id": "int32", "stream_id": "int64",
        "correlation_id": "int64", "pid": "int32", "graph_id": "Int64", "graph_exec_id": "Int64",
        **_API_LINK,
    },
    "api": {
        "start_ns": "int64", "end_ns": "int64", "pid": "int32", "tid": "int32", "global_tid": "int64",
        "correlation_id": "int64", "name": "category", "api": "enum", "category": "enum",
    },
    "sync": {
        "start_ns": "int64", "end_ns": "int64", "pid": "int32", "correlation_id": "int64",
        "sync_type": "enum", "device_id": "int32", "stream_id": "int64", **_API_LINK,
        "api_name": "category",
    },
    "nvtx": {
        "start_ns": "int64", "end_ns": "Int64", "name": "category", "domain": "category",
        "event_type": "enum", "pid": "int32", "tid": "int32", "global_tid": "int64",
        "end_global_tid": "int64",
    },
    "osrt": {
        "start_ns": "int64", "end_ns": "int64", "name": "category", "pid": "int32", "tid": "int32",
        "global_tid": "int64",
    },
}
FRAMES: tuple[str, ...] = tuple(SCHEMAS)


def _dtype(frame: str, column: str, spec: str):
    if spec == "enum":
        return enum_dtype(column)
    if spec == "category":
        return pd.CategoricalDtype(pd.Index([], dtype="str"))
    return spec


def _default_column(frame: str, column: str, spec: str, n: int):
    """The value a column takes when a frame is built without it (unknown ids are -1)."""
    if spec == "enum":
        fill = "unknown" if "unknown" in _ENUMS[column] else ("other" if "other" in _ENUMS[column] else None)
        return pd.Categorical([fill] * n, dtype=enum_dtype(column))
    if spec == "category":
        return pd.Categorical([""] * n, categories=pd.Index([""] if n else [], dtype="str"))
    if spec == "Int64":
        return pd.array([pd.NA] * n, dtype="Int64")
    return np.full(n, -1, dtype=spec)


def empty_frame(frame: str) -> pd.DataFrame:
    """A zero-row frame with the columns and dtypes of ``SCHEMAS[frame]``."""
    return pd.DataFrame({c: pd.Series([], dtype=_dtype(frame, c, s)) for c, s in SCHEMAS[frame].items()})


def conform(frame: str, df: pd.DataFrame | None) -> pd.DataFrame:
    """Give ``df`` every contract column of ``frame`` (defaults for the missing ones).

    Existing columns are kept as they are except times and ids, which are cast to their integer
    dtype when they are not already; extra columns are kept. Used for frames built by hand.
    """
    if df is None:
        return empty_frame(frame)
    schema = SCHEMAS[frame]
    missing = [c for c in schema if c not in df.columns]
    casts = {c: s for c, s in schema.items()
             if c in df.columns and s in ("int64", "int32") and df[c].dtype != s}
    enums = {c: enum_dtype(c) for c, s in schema.items()
             if c in df.columns and s == "enum" and df[c].dtype != enum_dtype(c)}
    if not missing and not casts and not enums:
        return df
    df = df.copy()
    n = len(df)
    for c in missing:
        df[c] = _default_column(frame, c, schema[c], n)
    for c, s in casts.items():
        df[c] = df[c].astype(s)
    for c, dt in enums.items():
        df[c] = df[c].astype(dt)
    return df


@dataclass
class Trace:
    """An nsys capture as frames (see the module docstring for conventions and ``SCHEMAS``).

    ``meta`` holds: ``nsys_version``, ``schema_version``, ``gpus`` (list of dicts), ``capture_start_ns``,
    ``capture_end_ns``, ``processes`` (list of {pid, name}), ``source_path``, ``missing`` (sentences
    naming what the export lacked, for a degraded analysis), ``warnings`` and ``correlation`` (share of
    each activity joined to its API call).
    """

    kernels: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    memcpy: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    memset: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    graphs: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    api: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    sync: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    nvtx: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    osrt: pd.DataFrame = field(default=None)  # type: ignore[assignment]
    meta: dict[str, Any] = field(default_factory=dict)
    column_files: Any = field(default=None, repr=False, compare=False)
    """The :class:`~profiler.capture.spill.ColumnFiles` holding a large capture's columns (None: memory);
    the analysis puts its own large arrays there too."""

    def __post_init__(self) -> None:
        for name in FRAMES:
            setattr(self, name, conform(name, getattr(self, name)))
        meta = dict(self.meta or {})
        meta.setdefault("nsys_version", None)
        meta.setdefault("schema_version", None)
        meta.setdefault("gpus", [])
        meta.setdefault("processes", [])
        meta.setdefault("source_path", None)
        meta.setdefault("missing", [])
        meta.setdefault("warnings", [])
        if meta.get("capture_start_ns") is None or meta.get("capture_end_ns") is None:
            lo, hi = self.event_span()
            meta.setdefault("capture_start_ns", lo)
            meta.setdefault("capture_end_ns", hi)
            if meta["capture_start_ns"] is None:
                meta["capture_start_ns"] = lo
            if meta["capture_end_ns"] is None:
                meta["capture_end_ns"] = hi
        self.meta = meta

    @classmethod
    def from_frames(cls, meta: dict[str, Any] | None = None, **frames: pd.DataFrame) -> "Trace":
        """A Trace from any subset of frames; the others are empty."""
        unknown = set(frames) - set(FRAMES)
        if unknown:
            raise TypeError(f"unknown Trace frames: {sorted(unknown)} (known: {list(FRAMES)})")
        return cls(meta=meta or {}, **frames)

    def frames(self) -> dict[str, pd.DataFrame]:
        """Frame name -> frame, in ``FRAMES`` order."""
        return {name: getattr(self, name) for name in FRAMES}

    def event_span(self) -> tuple[int | None, int | None]:
        """(first start, last end) over every event of every frame, or (None, None) when empty."""
        lo: int | None = None
        hi: int | None = None
        for name in FRAMES:
            df = getattr(self, name)
            if len(df) == 0:
                continue
            s = int(df["start_ns"].min())
            ends = df["end_ns"].dropna() if df["end_ns"].dtype == "Int64" else df["end_ns"]
            e = int(ends.max()) if len(ends) else int(df["start_ns"].max())
            e = max(e, int(df["start_ns"].max()))
            lo = s if lo is None else min(lo, s)
            hi = e if hi is None else max(hi, e)
        return lo, hi

    @property
    def has_cuda(self) -> bool:
        """Whether the capture holds any GPU activity or CUDA API call."""
        return any(len(getattr(self, n)) for n in ("kernels", "memcpy", "memset", "graphs", "api"))

    def gpu_activity(self) -> pd.DataFrame:
        """Kernels, copies, memsets and graph launches as one frame, sorted by start.

        Columns: kind ('kernel', 'memcpy', 'memset', 'graph'), start_ns, end_ns, device_id, stream_id,
        pid, api_tid, api_start_ns, correlation_id, name (kernel name; ``[memcpy HtoD]``,
        ``[memset]``, ``[graph N]`` for the others). GPU busy time is the union of these intervals:
        under CUDA graphs the graph's kernels are absent from ``kernels`` and only ``graphs`` shows them.
        """
        from pandas.api.types import union_categoricals

        cols = ["start_ns", "end_ns", "device_id", "stream_id", "pid", "api_tid", "api_start_ns",
                "correlation_id"]
        parts = []
        names: list[pd.Categorical] = []
        kinds: list[np.ndarray] = []
        for kind, df in (("kernel", self.kernels), ("memcpy", self.memcpy), ("memset", self.memset),
                         ("graph", self.graphs)):
            if len(df) == 0:
                continue
            parts.append(df[cols])
            kinds.append(np.full(len(df), GPU_ACTIVITY_KINDS.index(kind), dtype=np.int8))
            if kind == "kernel":
                label = pd.Categorical(df["name"])
            elif kind == "memcpy":
                label = pd.Categorical(df["copy_kind"]).rename_categories(lambda c: f"[memcpy {c}]")
            elif kind == "memset":
                label = pd.Categorical.from_codes(np.zeros(len(df), np.int8), categories=["[memset]"])
            else:
                gid = pd.Categorical(df["graph_id"].astype("Int64").astype(str).replace("<NA>", "?"))
                label = gid.rename_categories(lambda c: f"[graph {c}]")
            names.append(label.astype(pd.CategoricalDtype(pd.Index(label.categories.astype(str), dtype="str")))
                         if label.categories.dtype != "str" else label)
        if not parts:
            out = pd.DataFrame({c: pd.Series([], dtype=SCHEMAS["kernels"][c]) for c in cols})
            out.insert(0, "kind", pd.Categorical([], dtype=enum_dtype("kind")))
            out["name"] = pd.Categorical([], categories=pd.Index([], dtype="str"))
            return out
        out = pd.concat(parts, ignore_index=True)
        out.insert(0, "kind", pd.Categorical.from_codes(np.concatenate(kinds), dtype=enum_dtype("kind")))
        out["name"] = union_categoricals(names, ignore_order=True)
        order = np.argsort(out["start_ns"].to_numpy(), kind="stable")
        return out.take(order).reset_index(drop=True)

    def summary(self) -> dict[str, Any]:
        """Row counts per frame plus versions: a quick look in a notebook."""
        return {
            "nsys_version": self.meta.get("nsys_version"),
            "schema_version": self.meta.get("schema_version"),
            **{name: len(getattr(self, name)) for name in FRAMES},
            "missing": list(self.meta.get("missing", [])),
        }

    def __repr__(self) -> str:
        counts = ", ".join(f"{n}={len(getattr(self, n))}" for n in FRAMES)
        return f"Trace({counts}, nsys={self.meta.get('nsys_version')})"


def decode_global_tid(global_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) from nsys global thread ids: pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF.

    Decoded ``_DECODE_ROWS`` at a time into the int32 results (no int64 temporaries the size of the
    column: a capture can hold tens of millions of OS runtime calls); a zero-stride (constant) column
    gives zero-stride results."""
    g = np.asarray(global_tid, dtype=np.int64)
    if g.ndim == 1 and len(g) and g.strides == (0,):
        pid, tid = decode_global_tid(g[:1].copy())
        return np.broadcast_to(pid, g.shape), np.broadcast_to(tid, g.shape)
    pid, tid = np.empty(len(g), np.int32), np.empty(len(g), np.int32)
    for sl in blocks(len(g), _DECODE_ROWS):
        part = g[sl]
        pid[sl] = (part >> 24) & 0xFFFFFF
        tid[sl] = part & 0xFFFFFF
    return pid, tid


_DECODE_ROWS = 1 << 18

