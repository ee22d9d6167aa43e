"""Store API over the SQLAlchemy models (see ``profiler.store`` for usage)."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from sqlalchemy import Float, delete, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from profiler.errors import InputError, MissingExtra, UsageError
from profiler.findings import Finding, json_safe
from profiler.store import models as m
from profiler.store.engine import WRITE, make_engine

if TYPE_CHECKING:
    from profiler.store.rows import VariantRows

DEFAULT_DB = "trtprof.db"
INT64_MAX = 2**63 - 1  # the largest id the databases hold

_RUN_FIELDS = {c.name for c in m.Run.__table__.columns} - {"id"}
_VARIANT_FIELDS = {c.name for c in m.Variant.__table__.columns} - {"id", "run_id"}
_SAMPLE_ORDER = [c.name for c in m.Sample.__table__.columns if c.name not in ("id", "variant_id")]
_LAYER_FIELDS = {c.name for c in m.Layer.__table__.columns} - {"id", "variant_id"}
_ACC_FIELDS = {c.name for c in m.Accuracy.__table__.columns} - {"id", "variant_id"}
_FINDING_FIELDS = {c.name for c in m.FindingRow.__table__.columns} - {"id", "run_id"}


def _refuse_foreign_sqlite(full_url: str) -> None:
    """Refuse, before anything writes to it (WAL mode alone changes the file), an existing SQLite file
    that holds other tables and no trtprof store: an nsys export passed as --db, for example."""
    from sqlalchemy.engine import make_url

    u = make_url(full_url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return
    path = Path(u.database)
    if not path.is_file() or path.stat().st_size == 0:
        return
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.text_factory = lambda raw: raw.decode("utf-8", "replace")  # a damaged file is not a bug
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"--db {path} is not a SQLite database ({exc})") from None
    except UnicodeDecodeError:  # SQLite's own message quotes the damaged schema
        raise InputError(f"--db {path} is a damaged SQLite file (its schema is unreadable); restore it from a "
                         "backup or give --db a new file") from None
    if tables and "runs" not in tables:
        listed = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        raise InputError(f"--db {path} already holds other tables ({listed}) and is not a trtprof run store; "
                         "give --db a new file or an existing run store")


def resolve_url(url: str | None) -> str:
    """A SQLAlchemy URL from --db / TRTPROF_DB / the default; a bare path means a SQLite file."""
    url = url or os.environ.get("TRTPROF_DB") or DEFAULT_DB
    if "://" in url:
        for plain in ("postgresql://", "postgres://"):
            if url.startswith(plain):
                url = "postgresql+psycopg://" + url[len(plain):]
        return url
    return f"sqlite:///{Path(url).expanduser()}"


def _split(d: dict[str, Any], fields: set[str], extra_key: str | None = None) -> dict[str, Any]:
    """Keep the known columns; fold unknown keys into ``extra_key`` (a JSON column) when given."""
    out = {k: json_safe(v) for k, v in d.items() if k in fields}
    if extra_key:
        rest = {k: v for k, v in d.items() if k not in fields}
        if rest:
            out[extra_key] = {**(out.get(extra_key) or {}), **json_safe(rest)}
    return out


def _clean(v: Any) -> Any:
    """A plain Python scalar for the driver: numpy scalars unboxed, NaN/inf -> NULL."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (int, float, str, bool)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _sample_table(samples: Any) -> tuple[list[str], list[list]]:
    """Sample rows as (column names, one list of plain Python values per column).

    DataFrames and dicts of columns are converted column by column (numpy finds the NaNs, ``tolist``
    unboxes in C), so a million rows cost a fraction of a second before they reach the driver. Unknown columns are
    ignored; NaN and infinities become NULL.
    """
    import numpy as np

    if isinstance(samples, dict):  # columns: numpy arrays or lists
        cols = [c for c in _SAMPLE_ORDER if c in samples]
        if "idx" not in cols:
            raise ValueError("samples need an 'idx' column (0-based iteration index)")
        return cols, [_column_values(np.asarray(samples[c])) for c in cols]
    if _is_frame(samples):  # a pandas DataFrame
        cols = _frame_columns(samples)
        columns = []
        for c in cols:
            series = samples[c]
            numpy_dtype = isinstance(series.dtype, np.dtype)  # not a nullable extension dtype (Int64, ...)
            if numpy_dtype and series.dtype.kind in "fiub":
                values = _column_values(series.to_numpy())
            else:  # object or nullable extension dtypes
                values = [_clean(x) for x in series.tolist()]
                for i in np.flatnonzero(series.isna().to_numpy()).tolist():
                    values[i] = None
            columns.append(values)
        return cols, columns
    rows = list(samples)
    if not rows:
        return [], []
    present: set[str] = set()
    for r in rows:
        present.update(r.keys())
    cols = [c for c in _SAMPLE_ORDER if c in present]
    if "idx" not in cols:
        raise ValueError("samples need an 'idx' key (0-based iteration index)")
    return cols, [[_clean(r.get(c)) for r in rows] for c in cols]


def _column_values(arr: Any) -> list:
    """One numpy column as plain Python values, NaN and infinities as None."""
    import numpy as np

    if arr.dtype.kind == "f":
        values = arr.tolist()
        for i in np.flatnonzero(~np.isfinite(arr)).tolist():
            values[i] = None
        return values
    if arr.dtype.kind in "iub":
        return arr.tolist()
    return [None if x is None or (isinstance(x, float) and not math.isfinite(x)) else _clean(x) for x in arr.tolist()]


def _is_frame(samples: Any) -> bool:
    return hasattr(samples, "columns") and hasattr(samples, "to_dict")


def _frame_columns(df: Any) -> list[str]:
    cols = [c for c in _SAMPLE_ORDER if c in df.columns]
    if "idx" not in cols:
        raise ValueError("samples need an 'idx' column (0-based iteration index)")
    return cols


def _copy_frame(session: Session, variant_id: int, df: Any, cols: list[str]) -> None:
    """PostgreSQL: COPY a DataFrame's sample columns as CSV written by Arrow (C++, shortest
    round-trip float text, so values come back bit-identical); NaN/inf and NA become NULL."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    arrays = {"variant_id": pa.array(np.full(len(df), variant_id, dtype=np.int64))}
    for c in cols:
        series = df[c]
        if isinstance(series.dtype, np.dtype) and series.dtype.kind == "f":
            values = series.to_numpy(dtype=np.float64, copy=True)
            values[~np.isfinite(values)] = np.nan
            arrays[c] = pa.array(values, from_pandas=True)  # NaN -> null
        else:
            arrays[c] = pa.array(series, from_pandas=True)
    sink = pa.BufferOutputStream()
    pacsv.write_csv(pa.table(arrays), sink, pacsv.WriteOptions(include_header=False))
    raw = session.connection().connection.driver_connection
    with raw.cursor() as cur:
        with cur.copy(f"COPY samples ({', '.join(arrays)}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(memoryview(sink.getvalue()))


def _insert_samples(session: Session, variant_id: int, cols: list[str], columns: list[list]) -> None:
    """Bulk-insert sample columns: COPY on PostgreSQL, executemany on SQLite (same transaction)."""
    conn = session.connection()
    names = ["variant_id", *cols]
    n = len(columns[0])
    if conn.dialect.name == "postgresql":
        raw = conn.connection.driver_connection  # the psycopg connection inside our transaction
        with raw.cursor() as cur:
            with cur.copy(f"COPY samples ({', '.join(names)}) FROM STDIN") as copy:
                for row in zip(itertools.repeat(variant_id, n), *columns):
                    copy.write_row(row)
        return
    sql = f"INSERT INTO samples ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    raw_cur = conn.connection.driver_connection.cursor()
    try:  # a generator: the driver pulls rows one by one, no second copy of the data
        raw_cur.executemany(sql, zip(itertools.repeat(variant_id, n), *columns))
    finally:
        raw_cur.close()


def _with_defaults(model, row: dict[str, Any]) -> dict[str, Any]:
    """Every column of ``model`` present in ``row`` (executemany needs the same keys in each row)."""
    out = {}
    for c in model.__table__.columns:
        if c.name == "id":
            continue
        if c.name in row:
            out[c.name] = row[c.name]
        elif c.default is not None and c.default.is_callable:
            out[c.name] = c.default.arg(None)
        elif c.default is not None:
            out[c.name] = c.default.arg
        else:
            out[c.name] = None
    return out


def _open_error(url: str | None, full: str, exc: BaseException) -> Exception:
    """Map a driver/URL failure to MissingExtra or one-sentence InputError."""
    text = str(exc)
    if isinstance(exc, ImportError) and "psycopg" in text:
        return MissingExtra("psycopg", "postgres", "a PostgreSQL run store")
    shown = url or full
    if isinstance(exc, sa_exc.ArgumentError) and "parse" in text:  # the URL itself, not the database
        return UsageError(f"--db {shown!r} is not a database URL: give a SQLite path or a URL such as "
                          "postgresql://user@host/trtprof")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if first.startswith("(") and ")" in first:  # "(sqlite3.OperationalError) unable to open ..."
        first = first.split(")", 1)[1].strip()
    if full.startswith("sqlite:///") and "unable to open" in first:  # say why: usually a missing folder
        folder = Path(full[len("sqlite:///"):]).parent
        if not folder.is_dir():
            first += f" (its directory {folder} does not exist)"
    return InputError(f"cannot open the run store {shown!r}: {first}")


@contextlib.contextmanager
def connection_errors(url: str | None) -> Iterator[None]:
    """Turn "cannot connect / no such database / not a database" driver errors into one InputError."""
    try:
        yield
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.ProgrammingError,
            sa_exc.DatabaseError) as exc:
        raise _open_error(url, resolve_url(url), exc) from exc


def run_outcome(run: dict[str, Any]) -> str:
    """What a run came to, as ``trtprof runs`` shows it: its stored status, except that a finished run some
    of whose variants failed is ``partial`` and one all of whose variants failed is ``failed`` (a sweep
    stores ``ok`` once it finishes, whatever its variants did)."""
    status = str(run.get("status") or "")
    failed, total = int(run.get("failed_variant_count") or 0), int(run.get("variant_count") or 0)
    if status != "ok" or not failed:
        return status
    return "failed" if failed >= total else "partial"


class Store:
    """A handle on one database. Cheap to open; safe to use from several processes."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._session = sessionmaker(engine, expire_on_commit=False)
        self._write_session = sessionmaker(engine.execution_options(**WRITE), expire_on_commit=False)

    @classmethod
    def open(cls, url: str | None = None, *, upgrade: bool = True) -> "Store":
        """Open (and by default create or upgrade) the store at ``url`` (None -> TRTPROF_DB / ./trtprof.db)."""
        full = resolve_url(url)
        try:
            _refuse_foreign_sqlite(full)
            engine = make_engine(full)
        except (ImportError, sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ValueError) as exc:
            raise _open_error(url, full, exc) from exc
        store = cls(engine)
        if upgrade:
            from profiler.store.migrate import upgrade as _upgrade

            try:
                with connection_errors(url):
                    _upgrade(engine)
            except InputError:
                engine.dispose()
                raise
        return store

    def session(self) -> Session:
        """A read session (writes through it work but take SQLite's lock only when they start)."""
        return self._session()

    def write_session(self) -> Session:
        """A session for writing: on SQLite it takes the write lock at BEGIN (see profiler.store.engine)."""
        return self._write_session()

    def close(self) -> None:
        self.engine.dispose()

    # -- writing ------------------------------------------------------------------------------
    def create_run(self, *, kind: str, source: str, **fields: Any) -> int:
        row = m.Run(kind=kind, source=str(source), **_split(fields, _RUN_FIELDS - {"kind", "source"}))
        with self.write_session() as s, s.begin():
            s.add(row)
        return row.id

    def update_run(self, run_id: int, **fields: Any) -> None:
        with self.write_session() as s, s.begin():
            run = s.get(m.Run, run_id)
            if run is None:
                raise InputError(f"no run with id {run_id} in the store")
            for k, v in _split(fields, _RUN_FIELDS).items():
                setattr(run, k, v)

    def finish_run(self, run_id: int, status: str = "ok", summary: dict | None = None) -> None:
        fields: dict[str, Any] = {"status": status, "finished_at": dt.datetime.now(dt.timezone.utc)}
        if summary is not None:
            fields["summary"] = summary
        self.update_run(run_id, **fields)

    def add_variant(self, run_id: int, variant: dict[str, Any], *, samples: Iterable[dict] | Any = None,
                    layers: Iterable[dict] | None = None, accuracy: Iterable[dict] | None = None) -> int:
        """Store one variant with its samples, layers and accuracy rows in one transaction.

        ``samples`` may be a list of dicts, a dict of columns (numpy arrays or lists) or a pandas DataFrame
        with Sample's column names (``idx`` required; NaN and infinities stored as NULL). They are bulk-inserted: COPY on PostgreSQL
        (a DataFrame as Arrow-written CSV), one streamed executemany on SQLite.
        """
        copy_frame = self.engine.dialect.name == "postgresql" and samples is not None and _is_frame(samples)
        if copy_frame:
            cols, columns = _frame_columns(samples), []
        else:
            cols, columns = _sample_table(samples) if samples is not None else ([], [])
        layer_rows = [_split(r, _LAYER_FIELDS, "extra") for r in layers or ()]
        acc_rows = [_split(r, _ACC_FIELDS) for r in accuracy or ()]
        # Core inserts rather than ORM objects: a sweep or a big capture writes many variants, and
        # the unit of work costs several times more per row than the statement itself.
        with self.write_session() as s, s.begin():
            vid = s.execute(m.Variant.__table__.insert().returning(m.Variant.id),
                            {**_split(variant, _VARIANT_FIELDS, "metrics"), "run_id": run_id}).scalar_one()
            if copy_frame:
                if len(samples):
                    _copy_frame(s, vid, samples, cols)
            elif cols and columns[0]:
                _insert_samples(s, vid, cols, columns)
            if layer_rows:
                s.execute(m.Layer.__table__.insert(), [_with_defaults(m.Layer, {**r, "variant_id": vid})
                                                       for r in layer_rows])
            if acc_rows:
                s.execute(m.Accuracy.__table__.insert(), [_with_defaults(m.Accuracy, {**r, "variant_id": vid})
                                                          for r in acc_rows])
        return vid

    def add_rows(self, run_id: int, rows: "VariantRows") -> int:
        """Store one variant built by :mod:`profiler.store.rows` (with its samples, layers and accuracy)."""
        return self.add_variant(run_id, rows.variant, samples=rows.samples, layers=rows.layers,
                                accuracy=rows.accuracy)

    def replace_variant(self, run_id: int, rows: "VariantRows") -> int:
        """Store one variant in place of any stored row of the same key (a task that ran twice, a variant
        measured again): the run keeps one row per variant."""
        self.delete_variants(run_id, [rows.variant["key"]])
        return self.add_rows(run_id, rows)

    def delete_variants(self, run_id: int, keys: Iterable[str]) -> None:
        """Delete a run's stored variants of these keys (their samples, layers and accuracy rows cascade)."""
        with self.write_session() as s, s.begin():
            s.execute(delete(m.Variant).where(m.Variant.run_id == run_id, m.Variant.key.in_(list(keys))))

    def update_variant_metrics(self, run_id: int, key: str, metrics: dict[str, Any]) -> None:
        """Merge ``metrics`` into the stored metrics of the run's variant ``key`` (e.g. the process-level
        repeats that a sweep measures after all its variants)."""
        with self.write_session() as s, s.begin():
            row = s.execute(select(m.Variant).where(m.Variant.run_id == run_id, m.Variant.key == key)).scalars().first()
            if row is None:
                raise InputError(f"run {run_id} has no variant {key!r}")
            row.metrics = {**(row.metrics or {}), **metrics}

    def add_findings(self, run_id: int, findings: Iterable[Finding | dict]) -> None:
        with self.write_session() as s, s.begin():
            for f in findings:
                d = f.to_dict() if isinstance(f, Finding) else dict(f)
                s.add(m.FindingRow(run_id=run_id, **_split(d, _FINDING_FIELDS)))

    def add_artifact(self, run_id: int, kind: str, path: str | os.PathLike) -> None:
        """Record a file of the run; recording the same (kind, path) again is a no-op (a resumed sweep
        rewrites its summary and report in place)."""
        a = m.Artifact.__table__
        with self.write_session() as s, s.begin():
            exists = s.execute(select(a.c.id).where(a.c.run_id == run_id, a.c.kind == kind,
                                                    a.c.path == str(path)).limit(1)).first()
            if exists is None:
                s.add(m.Artifact(run_id=run_id, kind=kind, path=str(path)))

    # -- reading ------------------------------------------------------------------------------
    def resolve_run(self, ref: int | str) -> int:
        """A run id from an id or a label (the newest run with that label); InputError if none."""
        with self.session() as s:
            if isinstance(ref, int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit()):
                if 0 < int(ref) <= INT64_MAX and s.get(m.Run, int(ref)) is not None:
                    return int(ref)
            rid = s.execute(select(m.Run.id).where(m.Run.label == str(ref))
                            .order_by(m.Run.created_at.desc(), m.Run.id.desc()).limit(1)).scalar()
        if rid is None:
            raise InputError(f"no run with id or label {str(ref)!r} in the store")
        return rid

    def run_dict(self, ref: int | str, *, with_samples: bool = False) -> dict[str, Any]:
        """Everything about one run as a JSON-able dict (samples only on request: they can be large)."""
        rid = self.resolve_run(ref)
        with self.session() as s:
            run = s.get(m.Run, rid)
            out = _row(run)
            out["variants"] = []
            for v in run.variants:
                vd = _row(v)
                vd["layers"] = [_row(x) for x in v.layers]
                vd["accuracy"] = [_row(x) for x in v.accuracy]
                if with_samples:
                    vd["samples"] = [_row(x) for x in v.samples]
                out["variants"].append(vd)
            out["findings"] = [_row(f) for f in run.findings]
            out["artifacts"] = [_row(a) for a in run.artifacts]
        return out

    def list_runs(self, *, kind: str | None = None, label: str | None = None, model: str | None = None,
                  gpu: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Newest first; each run's columns plus ``variant_count``."""
        runs = m.Run.__table__
        q = select(runs).order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)
        if kind:
            q = q.where(runs.c.kind == kind)
        if label:
            q = q.where(runs.c.label == label)
        if model:
            q = q.where(runs.c.model.contains(model, autoescape=True))
        if gpu:
            q = q.where(runs.c.gpu.contains(gpu, autoescape=True))
        newest = q.subquery()  # count variants of the selected runs only, not of the whole history
        variants = m.Variant.__table__
        n = (select(func.count()).select_from(variants)
             .where(variants.c.run_id == newest.c.id).scalar_subquery())
        n_failed = (select(func.count()).select_from(variants)
                    .where(variants.c.run_id == newest.c.id, variants.c.status == "failed").scalar_subquery())
        outer = (select(newest, n.label("variant_count"), n_failed.label("failed_variant_count"))
                 .order_by(newest.c.created_at.desc(), newest.c.id.desc()))
        with self.engine.connect() as c:
            rows = [{k: iso_utc(v) for k, v in row._mapping.items()} for row in c.execute(outer)]
        for r in rows:
            r["outcome"] = run_outcome(r)
        return rows

    def report_data(self, ref: int | str) -> dict[str, Any]:
        """A stored run's JSON output (``Run.summary``) with what summary.json leaves out added back for
        its report: each variant's per-iteration latencies (``samples_ms``) and the per-layer records
        (``layers``, tagged by variant). Empty dict when the run stored no output."""
        stored = self.run_dict(ref)
        data = dict(stored.get("summary") or {})
        if not data:
            return {}
        data.setdefault("kind", stored.get("kind"))
        by_key = {v["key"]: v for v in stored["variants"]}
        if data.get("variants"):
            variants = []
            for v in data["variants"]:
                row = by_key.get(v.get("key")) if isinstance(v, dict) else None
                if row is not None and not v.get("samples_ms"):
                    lat = self.samples_frame(row["id"])["latency_ms"].dropna()
                    if len(lat):
                        v = {**v, "samples_ms": [float(x) for x in lat]}
                variants.append(v)
            data["variants"] = variants
        if not data.get("layers"):
            layers = [{"variant": v["key"], **layer} for v in stored["variants"] for layer in v.get("layers", [])]
            if layers:
                data["layers"] = layers
        return data

    def samples_frame(self, variant_id: int):
        """The samples of one variant as a DataFrame ordered by ``idx``."""
        import pandas as pd

        t = m.Sample.__table__
        with self.engine.connect() as c:
            df = pd.read_sql(select(t).where(t.c.variant_id == variant_id).order_by(t.c.idx), c)
        for col in t.columns:  # all-NULL columns come back as object; keep the schema's dtypes
            if col.name in df.columns and isinstance(col.type, Float):
                df[col.name] = df[col.name].astype("float64")
            elif col.name == "stream":
                df[col.name] = df[col.name].astype("Int64")
        return df

    # -- history queries (comparison and trend views) -----------------------------------------
    def latest_run_id(self, label: str) -> int | None:
        """The newest run with ``label`` (None if there is none)."""
        with self.session() as s:
            return s.execute(select(m.Run.id).where(m.Run.label == label)
                             .order_by(m.Run.created_at.desc(), m.Run.id.desc()).limit(1)).scalar()

    def fingerprint_history(self, fingerprint: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Variants with this fingerprint across runs, oldest run first (the trend's x axis).

        Each item: run_id, created_at, label, gpu, driver/cuda/tensorrt versions, variant_id, key,
        status, latency_ms (the stored summary), throughput_qps, host_others_share (the share of the host's
        CPU other processes took while it was timed; None when not recorded).
        """
        r, v = m.Run, m.Variant
        q = (select(r.id, r.created_at, r.label, r.gpu, r.driver_version, r.cuda_version, r.tensorrt_version,
                    v.id, v.key, v.status, v.latency_ms, v.throughput_qps, v.metrics)
             .join(v, v.run_id == r.id).where(v.fingerprint == fingerprint)
             .order_by(r.created_at, r.id, v.id))
        if limit:
            q = q.limit(limit)
        keys = ("run_id", "created_at", "label", "gpu", "driver_version", "cuda_version", "tensorrt_version",
                "variant_id", "key", "status", "latency_ms", "throughput_qps", "metrics")
        with self.session() as s:
            rows = [dict(zip(keys, row)) for row in s.execute(q)]
        for d in rows:
            d["created_at"] = iso_utc(d["created_at"])
            metrics = d.pop("metrics")
            share = metrics.get("host_others_share") if isinstance(metrics, dict) else None
            d["host_others_share"] = share if isinstance(share, (int, float)) else None
        return rows

    def fingerprint_sample_medians(self, fingerprint: str) -> list[dict[str, Any]]:
        """Median sample latency (ms) of every variant with this fingerprint, computed from the samples,
        oldest run first: [{run_id, created_at, variant_id, count, median_ms}].

        PostgreSQL computes the medians in the server (percentile_cont); SQLite has no median
        aggregate, so its samples are fetched once and reduced with numpy.
        """
        r, v, smp = m.Run, m.Variant, m.Sample
        if self.engine.dialect.name == "postgresql":
            med = func.percentile_cont(0.5).within_group(smp.latency_ms)
            q = (select(r.id, r.created_at, v.id, func.count(smp.latency_ms), med)
                 .join(v, v.run_id == r.id).join(smp, smp.variant_id == v.id)
                 .where(v.fingerprint == fingerprint)
                 .group_by(r.id, r.created_at, v.id).order_by(r.created_at, r.id, v.id))
            with self.session() as s:
                return [{"run_id": a, "created_at": iso_utc(b), "variant_id": c, "count": int(n),
                         "median_ms": None if x is None else float(x)} for a, b, c, n, x in s.execute(q)]
        import numpy as np

        heads = (select(r.id, r.created_at, v.id).join(v, v.run_id == r.id)
                 .where(v.fingerprint == fingerprint).order_by(r.created_at, r.id, v.id))
        with self.session() as s:
            variants = list(s.execute(heads))
            ids = [vid for _, _, vid in variants]
            by_variant: dict[int, list[float]] = {vid: [] for vid in ids}
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                q = select(smp.variant_id, smp.latency_ms).where(smp.variant_id.in_(chunk),
                                                                  smp.latency_ms.is_not(None))
                for vid, lat in s.execute(q):
                    by_variant[vid].append(lat)
        out = []
        for rid, created, vid in variants:
            xs = by_variant[vid]
            out.append({"run_id": rid, "created_at": iso_utc(created), "variant_id": vid, "count": len(xs),
                        "median_ms": float(np.median(xs)) if xs else None})
        return out


def iso_utc(v: Any) -> Any:
    """ISO 8601 with the UTC offset (SQLite hands back naive datetimes; the store writes UTC)."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v.isoformat()
    return v


def _row(obj) -> dict[str, Any]:
    return {c.name: iso_utc(getattr(obj, c.name)) for c in obj.__table__.columns}
