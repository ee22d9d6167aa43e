"""Nsight Systems SQLite export -> :class:`~profiler.capture.trace.Trace`.

Works across nsys 2022.1 to 2026.2: every table is optional (nsys 2022.4+ creates only non-empty
ones), optional columns are probed with ``PRAGMA table_info`` and replaced by defaults when absent
(and named in ``meta['absent_columns']``). Only the columns the Trace needs are read, through an
Arrow-native SQLite reader (ADBC) when installed, else Python's ``sqlite3``. Nullable integer
columns are coalesced to sentinels inside SQLite so the Arrow reader sees one type per column.
Names stay integer ids until the end and become pandas categoricals resolved through ``StringIds``;
activities are joined to their API calls on (process, correlation id) with a sorted-key search.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from profiler.capture.export import (  # noqa: F401 - re-exported: the loader's readers
    BATCH_ROWS, NULL_INT, PARTITION_MIN_ROWS, Columns, Export, PlannedRead, _adbc_dbapi, _corrupt, check_sqlite_file,
    read_threads, table_threads,
)
from profiler.capture import spill
from profiler.capture.heap import release_memory
from profiler.capture.integrity import read_diagnostics
from profiler.capture.ids import (
    ApiIndex, Strings, categorical_from_codes, clipped_text, compact_constant, enum_column, nullable, placeholder, take_column,
)
from profiler.capture.nsys_names import (  # noqa: F401 - TABLES, api_category, normalize_api_name: the loader's API
    COPY_KIND_IDS, EVENT_CLASS_DRIVER, EVENT_CLASS_RUNTIME, MEM_KIND_IDS, NVTX_DOMAIN_CREATE, NVTX_MARK,
    NVTX_PUSH_POP, NVTX_START_END, NVTX_TYPE_IDS, SYNC_NAMES, SYNC_TYPE_IDS, T_API, T_GRAPH, T_KERNEL, T_MEMCPY,
    T_MEMSET, T_NVTX, T_OSRT, T_SYNC, TABLES, api_category, base_api_name, normalize_api_name,
)
from profiler.capture.trace import (
    FRAMES, SCHEMAS, Trace, decode_global_tid, empty_frame, enum_dtype,
)
from profiler.capture.validate import (
    MAX_TEXT_BYTES, TimeBounds, clean_frame, decode, describe, device_ids, drop_mask, int_sql, require_columns,
)
from profiler.errors import InputError


# required integer columns, read so that a text, BLOB or real value arrives as NULL (then dropped)
_START, _END = f"{int_sql('start')} AS start", f"{int_sql('end')} AS end"
_DEVICE, _STREAM = f"{int_sql('deviceId')} AS deviceId", f"{int_sql('streamId')} AS streamId"
_NSYS_MARKERS = ("StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "CUPTI_ACTIVITY_KIND_RUNTIME",
                 "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "TARGET_INFO_SESSION_START_TIME")

# --------------------------------------------------------------------------------------------------
# The loader


def _clipped(values: Any) -> int:
    """How many of these (distinct, decoded) names were cut at :data:`MAX_TEXT_BYTES` when read."""
    return sum(1 for v in values if isinstance(v, str) and len(v) * 4 >= MAX_TEXT_BYTES
               and len(v.encode("utf-8", "replace")) >= MAX_TEXT_BYTES - 3)


class _Loader:
    def __init__(self, export: Export, wanted: set[str], columns: dict[str, set[str]] | None = None):
        self.x = export
        self.wanted = wanted
        self.columns = columns or {}
        # a restricted read is the analysis' own: its constant id columns become read-only zero-stride
        # views like its placeholders; a full read gives writable columns
        self.compact = bool(columns)
        self.missing: list[str] = []
        self.warnings: list[str] = []
        self.absent_columns: dict[str, list[str]] = {}
        self.strings = Strings(export)
        self.api_raw: dict[str, np.ndarray] | None = None
        self.api_index: ApiIndex | None = None
        self.api_names: pd.Categorical | None = None
        self.correlation: dict[str, float] = {}
        self.bounds = TimeBounds.from_duration(self._duration())

    def _duration(self) -> Any:
        """The session's duration (ns) from ANALYSIS_DETAILS, None without one; an absurd one is noted."""
        if not (self.x.has("ANALYSIS_DETAILS") and "duration" in self.x.columns("ANALYSIS_DETAILS")):
            return None
        d = self.x.scalar(f"SELECT max({int_sql('duration')}) FROM ANALYSIS_DETAILS")
        if d is not None and TimeBounds.from_duration(d).duration_ns is None:
            self.warnings.append(f"The export's session duration ({d} ns) is not plausible; it was ignored.")
            return None
        return d

    # -- helpers
    def need(self, table: str) -> None:
        """InputError naming a column the table must have (a renamed or dropped column)."""
        require_columns(self.x.path, table, self.x.columns(table))

    def want(self, frame: str, column: str) -> bool:
        """Whether ``column`` of ``frame`` is read (else it becomes a placeholder)."""
        keep = self.columns.get(frame)
        return keep is None or column in keep

    def frame(self, frame: str, data: dict[str, Any], n: int) -> pd.DataFrame:
        """The frame in contract column order; columns not in ``data`` become placeholders, and in a
        restricted read constant id columns become zero-stride views (:func:`compact_constant`)."""
        return pd.DataFrame(copy=False, data={
            c: self.kept(self.compacted(c, data[c]) if c in data else placeholder(frame, c, n))
            for c in SCHEMAS[frame]})

    def kept_rows(self, df: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
        """The rows ``keep`` of ``df``, a column at a time, each back in a column file (a constant
        zero-stride column stays one)."""
        n = int(np.count_nonzero(keep))

        def rows(values: Any) -> Any:
            if isinstance(values, np.ndarray) and values.strides == (0,):
                return np.broadcast_to(values[:1], (n,)) if len(values) else values
            return self.kept(values[keep])

        return pd.DataFrame(copy=False, data={
            c: rows(df[c].to_numpy() if isinstance(df[c].dtype, np.dtype) else df[c].array) for c in df.columns})

    def compacted(self, column: str, values: Any) -> Any:
        return compact_constant(column, values) if self.compact else values

    def kept(self, values: Any) -> Any:
        """A large column in a column file when the capture's columns go there (:mod:`spill`)."""
        files = self.x.column_files
        return values if files is None else files.keep_column(values)

    def col(self, table: str, name: str, default: str = "-1", *, null: str | None = None) -> str:
        """SQL for an optional column: coalesced to ``null`` (default: ``default``) or the default."""
        if name in self.x.columns(table):
            return f"coalesce({int_sql(name)}, {null if null is not None else default})"
        self.absent_columns.setdefault(table, []).append(name)
        return default

    def first_col(self, table: str, names: Iterable[str], default: str = "-1") -> str:
        present = [n for n in names if n in self.x.columns(table)]
        if not present:
            return default
        return f"coalesce({', '.join(present)}, {default})"

    # -- API calls (always read when activities are wanted: they carry the launching thread)
    def read_api(self) -> None:
        if not self.x.nonempty(T_API):
            self.api_raw = {k: np.empty(0, np.int64) for k in
                            ("start", "end", "cls", "gtid", "corr", "name")}
        else:
            self.need(T_API)
            cls = self.col(T_API, 'eventClass') if self.want("api", "api") else "0"
            tbl = self.x.fetch(
                f"SELECT {_START}, {_END}, {cls} AS cls, "
                f"{self.col(T_API, 'globalTid')} AS gtid, {self.col(T_API, 'correlationId')} AS corr, "
                f"{self.col(T_API, 'nameId')} AS name", T_API, small=("cls",),
                where=(f"eventClass IN ({EVENT_CLASS_RUNTIME}, {EVENT_CLASS_DRIVER})"
                       if "eventClass" in self.x.columns(T_API) else None))
            self.api_raw = {k: take_column(tbl, k) for k in ("start", "end", "cls", "gtid", "corr", "name")}
            del tbl
            keep, counts = drop_mask(self.bounds, self.api_raw["start"], self.api_raw["end"])
            note = describe("CUDA API calls", counts, len(keep))
            if note:
                self.warnings.append(note)
                self.api_raw = {k: v[keep] for k, v in self.api_raw.items()}
        r = self.api_raw
        self.api_index = ApiIndex(r["gtid"], r["corr"], self.x.empty)
        self.api_names = self.strings.categorical(r.pop("name"), normalize_api_name)
        # what the frame does not keep goes now, not after every activity is joined
        if not self.want("api", "correlation_id"):
            r["corr"] = None
        if self.want("api", "api"):
            r["cls"] = enum_column(r["cls"], {0: "runtime", 1: "driver"}, "api", "runtime")
        else:
            r["cls"] = None
        r["gtid"] = self.compacted("global_tid", r["gtid"])

    def api_frame(self) -> pd.DataFrame:
        r = self.api_raw
        assert r is not None and self.api_names is not None
        pid, tid = decode_global_tid(r["gtid"])
        names = self.api_names
        cats = np.asarray([api_category(n) for n in names.categories], dtype=object)
        cat_dtype = enum_dtype("category")
        cat_codes = np.asarray([list(cat_dtype.categories).index(c) for c in cats], dtype=np.int8)
        category = pd.Categorical.from_codes(
            cat_codes[names.codes] if len(names) else np.empty(0, np.int8), dtype=cat_dtype)
        data = {"start_ns": r["start"], "end_ns": r["end"], "pid": pid, "global_tid": r["gtid"],
                "name": names, "category": category}
        if self.want("api", "tid"):
            data["tid"] = tid
        if self.want("api", "correlation_id"):
            data["correlation_id"] = r["corr"]
        if self.want("api", "api"):
            data["api"] = r["cls"]
        return self.frame("api", data, len(pid))

    def link(self, frame: str, gpid: np.ndarray, corr: np.ndarray, with_name: bool = False) -> dict:
        """api_tid / api_start_ns / api_end_ns (and api_name) columns for activities."""
        assert self.api_index is not None and self.api_raw is not None
        rows = self.api_index.find(gpid, corr)
        hit = rows >= 0
        self.correlation[frame] = float(hit.mean()) if len(rows) else 1.0
        safe = np.where(hit, rows, 0)
        r = self.api_raw
        out: dict[str, Any] = {}
        ends = self.want(frame, "api_end_ns")  # else a placeholder: the analysis reads no kernel's call end
        links = ("api_tid", "api_start_ns", "api_end_ns") if ends else ("api_tid", "api_start_ns")
        if len(r["gtid"]):
            out["api_tid"] = self.compacted("api_tid", np.where(hit, r["gtid"][safe], -1))
            out["api_start_ns"] = np.where(hit, r["start"][safe], -1)
            if ends:
                out["api_end_ns"] = np.where(hit, r["end"][safe], -1)
        else:
            out = {k: np.full(len(rows), -1, np.int64) for k in links}
        if with_name:
            names = self.api_names
            assert names is not None
            cats = np.asarray(names.categories, dtype=object)
            if "" not in set(cats):
                cats = np.append(cats, "")
            empty = int(np.flatnonzero(cats == "")[0])
            codes = np.where(hit, names.codes[safe] if len(names) else 0, empty)
            out["api_name"] = categorical_from_codes(codes, cats)
        return out

    # -- GPU activities
    def kernels(self) -> pd.DataFrame:
        t = T_KERNEL
        if not self.x.nonempty(t):
            return empty_frame("kernels")
        c = self.col
        w = self.want
        opt = [  # (frame column, SQL, alias, int32): read only when wanted
            ("stream_id", "streamId", "streamId", False), ("context_id", c(t, 'contextId'), "contextId", False),
            ("grid_x", c(t, 'gridX'), "gx", True), ("grid_y", c(t, 'gridY'), "gy", True),
            ("grid_z", c(t, 'gridZ'), "gz", True), ("block_x", c(t, 'blockX'), "bx", True),
            ("block_y", c(t, 'blockY'), "by_", True), ("block_z", c(t, 'blockZ'), "bz", True),
            ("registers_per_thread", c(t, 'registersPerThread'), "regs", True),
            ("graph_node_id", c(t, 'graphNodeId', str(NULL_INT)), "gnode", False),
            ("graph_id", c(t, 'graphId', str(NULL_INT)), "gid", False),
        ]
        opt = [o for o in opt if w("kernels", o[0])]
        names = [(col, sql, alias) for col, sql, alias in (
            ("name", self.first_col(t, ('demangledName', 'shortName', 'mangledName')), "name"),
            ("short_name", self.first_col(t, ('shortName', 'demangledName', 'mangledName')), "short"))
            if w("kernels", col)]
        self.need(t)
        tbl = self.x.fetch(
            f"SELECT {_START}, {_END}, {_DEVICE}, "
            f"{c(t, 'correlationId')} AS corr, {c(t, 'globalPid')} AS gpid"
            + "".join(f", {sql} AS {alias}" for _, sql, alias in names)
            + "".join(f", {sql} AS {alias}" for _, sql, alias, _ in opt), t,
            small=tuple(alias for _, _, alias, small in opt if small))
        gpid, corr = take_column(tbl, "gpid"), take_column(tbl, "corr")
        n = len(gpid)
        data: dict[str, Any] = {
            "start_ns": take_column(tbl, "start"), "end_ns": take_column(tbl, "end"),
            "device_id": device_ids(take_column(tbl, "deviceId")), "correlation_id": corr,
            "pid": decode_global_tid(gpid)[0],
        }
        for col, _, alias in names:
            data[col] = self.strings.categorical(take_column(tbl, alias))
        for col, _, alias, small in opt:
            arr = take_column(tbl, alias, np.int32 if small else None)
            data[col] = nullable(arr) if col in ("graph_node_id", "graph_id") else arr
        data.update(self.link("kernels", gpid, corr))
        return self.frame("kernels", data, n)

    def _copies(self, frame: str, table: str,
                extra: tuple[tuple[str, str], ...] = ()) -> tuple[Any, dict[str, Any]] | None:
        """memcpy/memset rows: their common columns and the API link, plus the optional ``extra``
        (column, alias) pairs read as they are; None when the table is empty."""
        if not self.x.nonempty(table):
            return None
        c = self.col
        self.need(table)
        tbl = self.x.fetch(
            f"SELECT {_START}, {_END}, {_DEVICE}, {_STREAM}, {c(table, 'correlationId')} AS corr, "
            f"{c(table, 'globalPid')} AS gpid, {int_sql('bytes')} AS bytes" + "".join(f", {c(table, col)} AS {a}" for col, a in extra),
            table)
        gpid, corr = take_column(tbl, "gpid"), take_column(tbl, "corr")
        return tbl, {
            "start_ns": take_column(tbl, "start"), "end_ns": take_column(tbl, "end"),
            "device_id": device_ids(take_column(tbl, "deviceId")), "stream_id": take_column(tbl, "streamId"),
            "correlation_id": corr, "pid": decode_global_tid(gpid)[0], "bytes": self._bytes(frame, take_column(tbl, "bytes")),
            **self.link(frame, gpid, corr, with_name=frame == "memcpy"),
        }

    def _bytes(self, frame: str, raw: np.ndarray) -> np.ndarray:
        """Byte counts, 0 (with a warning) where the export's is missing, not an integer or negative."""
        bad = raw < 0
        if bad.any():
            self.warnings.append(f"{int(bad.sum())} {'memory copies' if frame == 'memcpy' else 'memsets'} have no "
                                 "valid byte count (missing or negative); they count as 0 bytes.")
            raw = np.where(bad, 0, raw)
        return raw

    def memcpy(self) -> pd.DataFrame:
        got = self._copies("memcpy", T_MEMCPY, (("copyKind", "ck"), ("srcKind", "sk"), ("dstKind", "dk")))
        if got is None:
            return empty_frame("memcpy")
        tbl, data = got
        data.update(copy_kind=enum_column(take_column(tbl, "ck"), COPY_KIND_IDS, "copy_kind", "other"),
                    src_kind=enum_column(take_column(tbl, "sk"), MEM_KIND_IDS, "src_kind", "unknown"),
                    dst_kind=enum_column(take_column(tbl, "dk"), MEM_KIND_IDS, "dst_kind", "unknown"))
        return pd.DataFrame(copy=False, data={col: data[col] for col in SCHEMAS["memcpy"]})

    def memset(self) -> pd.DataFrame:
        got = self._copies("memset", T_MEMSET)
        if got is None:
            return empty_frame("memset")
        return pd.DataFrame(copy=False, data={col: got[1][col] for col in SCHEMAS["memset"]})

    def graphs(self) -> pd.DataFrame:
        t = T_GRAPH
        if not self.x.nonempty(t):
            return empty_frame("graphs")
        c = self.col
        self.need(t)
        tbl = self.x.fetch(
            f"SELECT {_START}, {_END}, {_DEVICE}, {_STREAM}, {c(t, 'correlationId')} AS corr, "
            f"{c(t, 'globalPid')} AS gpid, {c(t, 'graphId', str(NULL_INT))} AS gid, "
            f"{c(t, 'graphExecId', str(NULL_INT))} AS gexec", t)
        gpid, corr = take_column(tbl, "gpid"), take_column(tbl, "corr")
        return pd.DataFrame(copy=False, data={
            "start_ns": take_column(tbl, "start"), "end_ns": take_column(tbl, "end"),
            "device_id": device_ids(take_column(tbl, "deviceId")), "stream_id": take_column(tbl, "streamId"),
            "correlation_id": corr, "pid": decode_global_tid(gpid)[0],
            "graph_id": nullable(take_column(tbl, "gid")), "graph_exec_id": nullable(take_column(tbl, "gexec")),
            **self.link("graphs", gpid, corr),
        })

    def sync(self) -> pd.DataFrame:
        t = T_SYNC
        if not self.x.nonempty(t):
            return empty_frame("sync")
        c = self.col
        self.need(t)
        tbl = self.x.fetch(
            f"SELECT {_START}, {_END}, {c(t, 'deviceId')} AS dev, {c(t, 'streamId')} AS stream, "
            f"{c(t, 'correlationId')} AS corr, {c(t, 'globalPid')} AS gpid, "
            f"{self.first_col(t, ('syncType', 'deprecatedSyncType'), '0')} AS st", t)
        gpid, corr = take_column(tbl, "gpid"), take_column(tbl, "corr")
        link = self.link("sync", gpid, corr, with_name=True)
        # nsys versions disagree on syncType ids (2024.5 records cudaDeviceSynchronize as 1, 2024.6
        # to 2026.1 cudaStreamSynchronize as 2): the correlated API call names the kind reliably.
        raw = enum_column(take_column(tbl, "st"), SYNC_TYPE_IDS, "sync_type", "unknown")
        api_names = link["api_name"]
        by_name = np.asarray([SYNC_NAMES.get(base_api_name(n), "") for n in api_names.categories],
                             dtype=object)
        named = by_name[api_names.codes] if len(api_names) else np.empty(0, dtype=object)
        kinds = np.where(named != "", named, np.asarray(raw, dtype=object))
        return pd.DataFrame(copy=False, data={
            "start_ns": take_column(tbl, "start"), "end_ns": take_column(tbl, "end"), "pid": decode_global_tid(gpid)[0],
            "correlation_id": corr, "sync_type": pd.Categorical(kinds, dtype=enum_dtype("sync_type")),
            "device_id": take_column(tbl, "dev", np.int32), "stream_id": take_column(tbl, "stream"), **link,
        })

    # -- host side
    def nvtx(self) -> pd.DataFrame:
        t = T_NVTX
        if not self.x.nonempty(t):
            return empty_frame("nvtx")
        c = self.col
        self.need(t)
        odd = self.x.scalar(f"SELECT count(*) FROM {t} WHERE typeof(eventType) != 'integer'")
        if odd:
            self.warnings.append(f"{odd} NVTX event(s) have no integer event type; they were ignored.")
        text = f"coalesce({clipped_text(self.x, t, 'text')}, x'')" if "text" in self.x.columns(t) else "x''"
        tbl = self.x.fetch(
            f"SELECT {_START}, coalesce({int_sql('end')}, {NULL_INT}) AS end_, eventType AS et, {text} AS text, "
            f"{c(t, 'textId')} AS tid_, {c(t, 'domainId', '0')} AS dom, {c(t, 'globalTid')} AS gtid, "
            f"{c(t, 'endGlobalTid')} AS egtid", t,
            where=f"eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_MARK})", text=("text",))
        gtid = take_column(tbl, "gtid")
        pid, tid = decode_global_tid(gtid)
        end = take_column(tbl, "end_")
        et = take_column(tbl, "et")
        unclosed = int(((end == NULL_INT) & (et != NVTX_MARK)).sum())
        if unclosed:
            self.warnings.append(f"{unclosed} NVTX range(s) were never closed; they are kept without an end.")
        self.nvtx_unclosed = unclosed
        self.strings.clipped += _clipped(tbl.text["text"][1])
        return pd.DataFrame(copy=False, data={
            "start_ns": take_column(tbl, "start"), "end_ns": nullable(end),
            "name": self._nvtx_names(*tbl.text["text"], take_column(tbl, "tid_")),
            "domain": self._nvtx_domains(pid, take_column(tbl, "dom")),
            "event_type": enum_column(et, NVTX_TYPE_IDS, "event_type", "mark"),
            "pid": pid, "tid": tid, "global_tid": gtid, "end_global_tid": take_column(tbl, "egtid"),
        })

    def _nvtx_names(self, t_codes: np.ndarray, t_vals: np.ndarray, text_id: np.ndarray) -> pd.Categorical:
        """Names of NVTX events: the registered string (textId) where there is one, else the inline text."""
        has_id = text_id >= 0
        if not has_id.any():
            return categorical_from_codes(t_codes, t_vals)
        id_codes, id_uniq = pd.factorize(text_id[has_id])
        codes = t_codes.copy() if len(t_codes) == len(text_id) else np.zeros(len(text_id), np.int64)
        codes[has_id] = id_codes + len(t_vals)
        return categorical_from_codes(codes, np.concatenate([t_vals, self.strings.lookup(id_uniq)]))

    def _nvtx_domains(self, pid: np.ndarray, dom: np.ndarray) -> pd.Categorical:
        names: dict[tuple[int, int], str] = {}
        cols = self.x.columns(T_NVTX)
        if "domainId" not in cols or "globalTid" not in cols:
            return categorical_from_codes(np.zeros(len(dom), np.int64), np.array([""], dtype=object))
        for gtid, dom_id, text, text_id in self.x.rows(
                f"SELECT globalTid, domainId, {'text' if 'text' in self.x.columns(T_NVTX) else 'NULL'}, "
                f"{'textId' if 'textId' in self.x.columns(T_NVTX) else 'NULL'} FROM {T_NVTX} "
                f"WHERE eventType = {NVTX_DOMAIN_CREATE}"):
            if dom_id is None:
                continue
            if text is None and text_id is not None:
                text = self.strings.lookup(np.array([text_id]))[0]
            names[(int((gtid >> 24) & 0xFFFFFF) if gtid is not None else -1, int(dom_id))] = text or ""
        key = (pid.astype(np.int64) << 40) ^ dom
        codes, uniq = pd.factorize(key)
        unnamed: set[int] = set()
        labels = []
        for k in uniq:
            p, d = int(k >> 40), int(k & ((1 << 40) - 1))
            if d == 0:
                labels.append("")
            elif (p, d) in names:
                labels.append(names[(p, d)])
            else:
                same = [v for (pp, dd), v in names.items() if dd == d]
                labels.append(same[0] if len(set(same)) == 1 else f"domain {d}")
                if len(set(same)) != 1:
                    unnamed.add(d)
        if unnamed:
            self.warnings.append(
                f"NVTX domain id(s) {sorted(unnamed)} have no name in the export (no domain-create event); "
                f"they are shown as 'domain N'.")
        return categorical_from_codes(codes, np.asarray(labels, dtype=object))

    def osrt(self) -> pd.DataFrame:
        t = T_OSRT
        if not self.x.nonempty(t):
            return empty_frame("osrt")
        self.need(t)
        tbl = self.x.fetch(f"SELECT {_START}, {_END}, {self.col(t, 'nameId')} AS name, "
                           f"{self.col(t, 'globalTid')} AS gtid", t)
        name = self.strings.categorical(take_column(tbl, "name"))  # first: the raw ids go before the decode
        gtid = take_column(tbl, "gtid")
        pid, tid = decode_global_tid(gtid)
        data = {"start_ns": take_column(tbl, "start"), "end_ns": take_column(tbl, "end"),
                "name": name, "pid": pid, "global_tid": gtid}
        if self.want("osrt", "tid"):
            data["tid"] = tid
        return self.frame("osrt", data, len(gtid))

    # -- metadata
    def versions(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nsys_version": None, "schema_version": None}
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.x.has(table) and {"name", "value"} <= set(self.x.columns(table)):
                kv = dict(self.x.rows(f"SELECT name, value FROM {table} WHERE name IN "
                                      f"('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')"))
                out["nsys_version"] = _text_or_none(kv.get("EXPORT_PRODUCT_VERSION"), self.x.bad_text)
                out["schema_version"] = _text_or_none(kv.get("EXPORT_SCHEMA_VERSION"), self.x.bad_text)
                break
        if out["nsys_version"] is None:
            self.missing.append("The export has no version table (META_DATA_EXPORT / EXPORT_META_DATA): "
                                "the nsys version is unknown.")
        return out

    def gpus(self, device_ids: Iterable[int]) -> list[dict[str, Any]]:
        wanted = {"id": "device_id", "name": "name", "smCount": "sm_count", "totalMemory": "memory_bytes",
                  "busLocation": "bus_location", "cuDevice": "cuda_device", "clockRate": "clock_hz",
                  "memoryBandwidth": "memory_bandwidth_bytes_per_s", "l2CacheSize": "l2_cache_bytes",
                  "computeMajor": "compute_major", "computeMinor": "compute_minor", "uuid": "uuid",
                  "chipName": "chip_name"}
        gpus: list[dict[str, Any]] = []
        if self.x.has("TARGET_INFO_GPU"):
            cols = [c for c in wanted if c in self.x.columns("TARGET_INFO_GPU")]
            order = " ORDER BY id" if "id" in cols else ""
            for row in self.x.rows(f"SELECT {', '.join(cols)} FROM TARGET_INFO_GPU{order}") if cols else []:
                gpus.append({wanted[c]: decode(v, self.x.bad_text) for c, v in zip(cols, row)})
            gpus = self._one_row_per_gpu(gpus)
        elif self.x.has("TARGET_INFO_CUDA_DEVICE"):
            cols = self.x.columns("TARGET_INFO_CUDA_DEVICE")
            if not {"gpuId", "cudaId"} <= set(cols):
                cols = []
            sel = ["gpuId", "cudaId"] + (["numMultiprocessors"] if "numMultiprocessors" in cols else [])
            seen: set[int] = set()
            for row in self.x.rows(f"SELECT {', '.join(sel)} FROM TARGET_INFO_CUDA_DEVICE") if cols else []:
                if row[0] in seen:
                    continue
                seen.add(row[0])
                gpus.append({"device_id": row[0], "name": None, "cuda_device": row[1],
                             "sm_count": row[2] if len(row) > 2 else None, "memory_bytes": None})
        known = {g.get("device_id") for g in gpus}
        extra = sorted(set(int(d) for d in device_ids) - known)
        for d in extra:
            gpus.append({"device_id": d, "name": None, "sm_count": None, "memory_bytes": None})
        if gpus and not self.x.has("TARGET_INFO_GPU"):
            self.missing.append("The export has no GPU description (TARGET_INFO_GPU): GPU names, "
                                "SM counts and memory sizes are unknown.")
        return gpus

    def _one_row_per_gpu(self, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first TARGET_INFO_GPU row of each device id: a repeated id that names another GPU is damage (one
        device cannot be two GPUs), said in a warning; an identical repeat is dropped silently."""
        first: dict[Any, dict[str, Any]] = {}
        for g in gpus:
            kept = first.setdefault(g.get("device_id"), g)
            if kept is not g and kept.get("name") != g.get("name"):
                self.warnings.append(f"TARGET_INFO_GPU names device {g.get('device_id')} twice ({kept.get('name')!r} "
                                     f"and {g.get('name')!r}); the first was kept.")
        return list(first.values())

    def capture_window(self, trace_span: tuple[int | None, int | None]) -> tuple[int | None, int | None]:
        lo, hi = trace_span
        duration = self.bounds.duration_ns  # None when absent or implausible
        if duration is not None:
            # event times count from the session start, so the capture spans [0, duration]
            lo = 0 if lo is None else min(0, lo)
            hi = int(duration) if hi is None else max(int(duration), hi)
        return lo, hi

    def processes(self, pids: set[int]) -> list[dict[str, Any]]:
        names: dict[int, str] = {}
        if self.x.has("PROCESSES") and {"pid", "name"} <= set(self.x.columns("PROCESSES")):
            for pid, name in self.x.rows("SELECT pid, name FROM PROCESSES"):
                if isinstance(pid, int) and name:
                    names[pid] = str(decode(name, self.x.bad_text))
        return [{"pid": p, "name": names.get(p)} for p in sorted(pids)]


def _text_or_none(value: Any, counter: list[int]) -> str | None:
    """A metadata value as text (bytes decoded with replacement), None when absent."""
    return None if value is None else str(decode(value, counter))


def _reads(ld: _Loader, steps: list[Any]) -> list[tuple]:
    """The table reads the loader's ``steps`` will make, in order: each step run up to its read on a copy of
    the loader whose notes are thrown away (the export lists the read instead of running it)."""
    import copy

    reads: list[tuple] = []
    ld.x.planning = reads
    try:
        for step in steps:
            dry = copy.copy(ld)
            dry.warnings, dry.missing, dry.absent_columns, dry.correlation = [], [], {}, {}
            try:
                step(dry)
            except PlannedRead:
                pass
    finally:
        ld.x.planning = None
    return reads


def _graph_nodes(export: Export, ld: _Loader, kernels: pd.DataFrame) -> bool:
    """Whether any kernel ran as a graph node (read from the export when the column was not loaded)."""
    if ld.want("kernels", "graph_node_id"):
        return bool(kernels["graph_node_id"].notna().any())
    if not len(kernels) or "graphNodeId" not in export.columns(T_KERNEL):
        return False
    return export.scalar(f"SELECT 1 FROM {T_KERNEL} WHERE graphNodeId IS NOT NULL LIMIT 1") is not None


_LOADERS = {
    "kernels": "kernels", "memcpy": "memcpy", "memset": "memset", "graphs": "graphs",
    "sync": "sync", "nvtx": "nvtx", "osrt": "osrt",
}
_ACTIVITY = ("kernels", "memcpy", "memset", "graphs", "sync")
_EVENT_TABLES = (T_KERNEL, T_API, T_OSRT, T_NVTX, T_MEMCPY, T_MEMSET, T_GRAPH, T_SYNC)


def load_trace(path: str | os.PathLike, *, tables: Iterable[str] | None = None,
               columns: dict[str, Iterable[str]] | None = None) -> Trace:
    """Load an nsys export (``.sqlite``, or ``.nsys-rep`` exported with nsys) into a :class:`Trace`.

    ``tables`` restricts which frames are read (names from ``FRAMES``); the others stay empty.
    ``columns`` maps a frame (``kernels``, ``api`` or ``osrt``, the large ones) to the contract columns
    to read; its other columns are constant placeholders (:func:`placeholder`: -1, NA, '' or the
    enumeration's fallback, no memory per row). Times, ``pid``, ``global_tid``, the device and the
    API link (``api_tid``, ``api_start_ns``) are always read; a restricted ``kernels`` frame has
    ``api_end_ns`` only when it is listed. A restricted read is for reading: its placeholders and its
    id columns that hold one value (one process, GPU, stream or thread) are read-only zero-stride views. The analysis uses this to read only what it needs.
    Raises :class:`~profiler.errors.InputError` with one sentence for a missing, corrupt or
    non-nsys file. What the export lacks is listed in ``trace.meta['missing']``.
    """
    path = Path(path)
    wanted = set(FRAMES) if tables is None else set(tables)
    unknown = wanted - set(FRAMES)
    if unknown:
        raise ValueError(f"unknown Trace frames {sorted(unknown)}; choose from {list(FRAMES)}")
    cols = {f: set(c) for f, c in (columns or {}).items()}
    bad = {f: sorted(c - set(SCHEMAS[f])) for f, c in cols.items() if f in SCHEMAS and c - set(SCHEMAS[f])}
    if set(cols) - {"kernels", "api", "osrt"} or bad:
        raise ValueError(f"columns can restrict kernels, api and osrt to their contract columns, not {columns!r}")
    if path.is_dir():
        from profiler.capture.columnar import AsSqlite, columnar_kind

        if columnar_kind(path) is None:
            raise InputError(f"{path} is a directory, not a capture: give the nsys .sqlite export, a .nsys-rep, or "
                             "the folder of an 'nsys export --type parquetdir' or 'arrowdir'")
        copied = AsSqlite(path, tuple(t for t in TABLES if t != T_SYNC or "sync" in wanted))
        with copied as copy:
            trace = _load_file(copy, path, wanted, cols)
        trace.meta["warnings"][:0] = copied.warnings  # the columns and files the copy left out
        return trace
    if path.suffix == ".nsys-rep" or path.suffix == ".qdrep":
        from profiler.capture.nsysrep import export_sqlite

        return _load_file(export_sqlite(path), path, wanted, cols)
    return _load_file(path, path, wanted, cols)


def _load_file(path: Path, source: Path, wanted: set[str], cols: dict[str, set[str]]) -> Trace:
    """Load the SQLite export ``path`` (``source``: what the user named: the file, .nsys-rep or folder)."""
    check_sqlite_file(path)
    with Export(path) as export:
        if not any(export.has(t) for t in _NSYS_MARKERS):
            raise InputError(f"{path} is an SQLite database but not an Nsight Systems export "
                             f"(no StringIds, META_DATA_EXPORT or CUPTI tables)")
        _check_usable(export, path)
        for table in TABLES:  # a table of more rows than this version reads is refused before any is loaded
            if table != T_SYNC or "sync" in wanted:
                export.count(table)
        try:
            return _load(export, wanted, source, cols)
        except sqlite3.DatabaseError as exc:
            raise _corrupt(path, exc) from exc


_USABLE_PREFIXES = ("CUPTI_", "NVTX_", "OSRT_", "TARGET_INFO_", "META_DATA", "EXPORT_META", "DIAGNOSTIC_EVENT",
                    "ANALYSIS_DETAILS", "SCHED_", "COMPOSITE_", "SAMPLING_")
"""Tables of a usable export: events, its description or nsys's own messages. An export that nsys failed to
write ('Exportation error') holds only ANALYSIS_FILE, ProcessStreams and StringIds."""


def _check_usable(export: Export, path: Path) -> None:
    """InputError for an export with no event, metadata or diagnostic table at all (nsys's export failed)."""
    names = export.scalar("SELECT group_concat(name, ',') FROM sqlite_master WHERE type IN ('table', 'view')") or ""
    tables = [n for n in str(names).split(",") if n]
    if not any(t.startswith(_USABLE_PREFIXES) for t in tables):
        shown = ", ".join(sorted(t for t in tables if not t.startswith("sqlite_"))[:6]) or "no table"
        raise InputError(f"{path} is not a usable Nsight Systems export: it holds no event table ({shown} only), "
                         "as when nsys's export failed ('Exportation error'); export the .nsys-rep again "
                         "(nsys export --type sqlite)")


def _load(export: Export, wanted: set[str], source: Path, columns: dict[str, set[str]] | None = None) -> Trace:
    if spill.supported() and 0 < spill.spill_rows() <= sum(export.count(t) for t in _EVENT_TABLES):
        export.column_files = spill.ColumnFiles()
    ld = _Loader(export, wanted, columns)
    meta: dict[str, Any] = {"source_path": str(source), "reader": export.reader, **ld.versions()}
    frames: dict[str, pd.DataFrame] = {}
    steps = ([(None, _Loader.read_api)] if wanted & (set(_ACTIVITY) | {"api"}) else []) + [
        (name, getattr(_Loader, _LOADERS[name])) for name in FRAMES if name in wanted and name != "api"]
    reads = _reads(ld, [step for _, step in steps])
    export.prefetch(reads, table_threads(len(reads)))
    for name, step in steps:  # this order whether or not the reads run at once: the same notes, in the same order
        got = step(ld)
        if name is not None:
            frames[name] = got
            release_memory()
    export.end_prefetch()
    for name in list(frames):  # rows with missing, reversed or impossible times or devices go, with a note
        frames[name] = clean_frame(name, frames[name], ld.bounds, ld.warnings,
                                   check_thread=name != "nvtx" or "globalTid" in export.columns(T_NVTX),
                                   take=None if export.column_files is None else ld.kept_rows)
    if "api" in wanted:
        frames["api"] = ld.api_frame()  # last: it takes over the raw arrays the joins used (cleaned there)
    ld.api_raw = ld.api_index = None
    release_memory()

    has_gpu = any(export.count(t) for t in (T_KERNEL, T_MEMCPY, T_MEMSET, T_GRAPH))
    if not has_gpu:
        ld.missing.append("The export has no CUDA GPU activity (no kernel, memcpy, memset or graph-launch "
                          "rows): it was captured without CUDA tracing (nsys profile --trace=cuda) or the "
                          "program did no GPU work.")
    if not export.count(T_API):
        ld.missing.append("The export has no CUDA API calls (CUPTI_ACTIVITY_KIND_RUNTIME): GPU work cannot "
                          "be tied to the threads and NVTX ranges that launched it.")
    if not export.count(T_NVTX):
        ld.missing.append("The export has no NVTX ranges (NVTX_EVENTS): the whole capture is one window.")
    if not export.count(T_OSRT):
        ld.missing.append("The export has no OS runtime calls (OSRT_API; capture with --trace=osrt): "
                          "host-side stalls cannot be named.")
    if "api" in frames and "graphs" in frames and "kernels" in frames:
        graph_launches = int((frames["api"]["category"] == "graph_launch").sum())
        if graph_launches and not len(frames["graphs"]) and not _graph_nodes(export, ld, frames["kernels"]):
            ld.missing.append(f"The capture made {graph_launches} CUDA graph launch(es) but holds no graph "
                              f"activity (graph trace off): GPU work of the graphs is missing.")
    if ld.strings.unresolved:
        ld.warnings.append(f"{ld.strings.unresolved} name id(s) were not found in StringIds.")

    trace = Trace(meta={}, column_files=export.column_files, **frames)
    device_ids: set[int] = set()
    pids: set[int] = set()
    for name in FRAMES:
        df = getattr(trace, name)
        if "device_id" in df.columns and len(df):
            device_ids.update(pd.unique(df["device_id"]).tolist())
        if len(df):
            pids.update(pd.unique(df["pid"]).tolist())
    lo, hi = trace.event_span()
    start, end = ld.capture_window((lo, hi))
    meta.update({
        "gpus": ld.gpus(device_ids),
        "capture_start_ns": start, "capture_end_ns": end,
        "events_start_ns": lo, "events_end_ns": hi,
        "processes": ld.processes({int(p) for p in pids}),
        "missing": ld.missing, "warnings": ld.warnings,
        "absent_columns": ld.absent_columns, "correlation": ld.correlation,
        "nvtx_unclosed": getattr(ld, "nvtx_unclosed", 0),
        "gpu_metrics": bool(export.has("GPU_METRICS")),  # nsys --gpu-metrics-devices: clocks were sampled
        "diagnostics": read_diagnostics(export),
    })
    if export.bad_text[0]:  # after the metadata reads (GPU and process names) that count too
        ld.warnings.append(f"{export.bad_text[0]} name(s) in the export were not valid UTF-8; they are shown "
                           f"with \ufffd where bytes could not be decoded.")
    if ld.strings.null_values:
        ld.warnings.append(f"{ld.strings.null_values} StringIds value(s) are NULL; those names are shown empty.")
    if ld.strings.clipped:
        ld.warnings.append(f"{ld.strings.clipped} name(s) are longer than {MAX_TEXT_BYTES >> 20} MiB; "
                           "each is shown as its first MiB.")
    trace.meta = meta
    Trace.__post_init__(trace)
    return trace
