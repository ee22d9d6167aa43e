"""Store API over the SQLAlchemy models (see ``profiler.store`` for usage)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import create_engine, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from profiler.errors import InputError
from profiler.findings import Finding, json_safe
from profiler.store import models as m

DEFAULT_DB = "trtprof.db"

_RUN_FIELDS = {c.name for c in m.Run.__table__.columns} - {"id"}
_VARIANT_FIELDS = {c.name for c in m.Variant.__table__.columns} - {"id", "run_id"}
_SAMPLE_FIELDS = {c.name for c in m.Sample.__table__.columns} - {"id", "variant_id"}
_LAYER_FIELDS = {c.name for c in m.Layer.__table__.columns} - {"id", "variant_id"}
_ACC_FIELDS = {c.name for c in m.Accuracy.__table__.columns} - {"id", "variant_id"}
_FINDING_FIELDS = {c.name for c in m.FindingRow.__table__.columns} - {"id", "run_id"}


def resolve_url(url: str | None) -> str:
    """A SQLAlchemy URL from --db / TRTPROF_DB / the default; a bare path means a SQLite file."""
    url = url or os.environ.get("TRTPROF_DB") or DEFAULT_DB
    if "://" in url:
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
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


class Store:
    """A handle on one database. Cheap to open; safe to use from several processes."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._session = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str | None = None, *, upgrade: bool = True) -> "Store":
        full = resolve_url(url)
        kwargs: dict[str, Any] = {}
        if full.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 60}
        try:
            engine = create_engine(full, **kwargs)
        except Exception as exc:  # bad URL, missing driver
            if "psycopg" in str(exc):
                from profiler.errors import MissingExtra
                raise MissingExtra("psycopg", "postgres", "a PostgreSQL store") from exc
            raise InputError(f"cannot open the run store {url!r}: {exc}") from exc
        if full.startswith("sqlite"):
            @event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.close()
        store = cls(engine)
        if upgrade:
            from profiler.store.migrate import upgrade as _upgrade
            _upgrade(engine)
        return store

    def session(self) -> Session:
        return self._session()

    # -- writing ------------------------------------------------------------------------------
    def create_run(self, *, kind: str, source: str, **fields: Any) -> int:
        row = m.Run(kind=kind, source=str(source), **_split(fields, _RUN_FIELDS - {"kind", "source"}))
        with self.session() as s, s.begin():
            s.add(row)
        return row.id

    def update_run(self, run_id: int, **fields: Any) -> None:
        with self.session() as s, s.begin():
            run = s.get(m.Run, run_id)
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

        ``samples`` may be a list of dicts or a pandas DataFrame with Sample's column names.
        """
        with self.session() as s, s.begin():
            v = m.Variant(run_id=run_id, **_split(variant, _VARIANT_FIELDS, "metrics"))
            s.add(v)
            s.flush()
            vid = v.id
            if samples is not None:
                rows = samples.to_dict("records") if hasattr(samples, "to_dict") else list(samples)
                if rows:
                    s.execute(m.Sample.__table__.insert(),
                              [{**_split(r, _SAMPLE_FIELDS), "variant_id": vid} for r in rows])
            for r in layers or ():
                s.add(m.Layer(variant_id=vid, **_split(r, _LAYER_FIELDS, "extra")))
            for r in accuracy or ():
                s.add(m.Accuracy(variant_id=vid, **_split(r, _ACC_FIELDS)))
        return vid

    def add_findings(self, run_id: int, findings: Iterable[Finding | dict]) -> None:
        with self.session() as s, s.begin():
            for f in findings:
                d = f.to_dict() if isinstance(f, Finding) else dict(f)
                s.add(m.FindingRow(run_id=run_id, **_split(d, _FINDING_FIELDS)))

    def add_artifact(self, run_id: int, kind: str, path: str | os.PathLike) -> None:
        with self.session() as s, s.begin():
            s.add(m.Artifact(run_id=run_id, kind=kind, path=str(path)))

    # -- reading ------------------------------------------------------------------------------
    def resolve_run(self, ref: int | str) -> int:
        """A run id from an id or a label (the newest run with that label); InputError if none."""
        with self.session() as s:
            if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
                if s.get(m.Run, int(ref)) is not None:
                    return int(ref)
            rid = s.execute(select(m.Run.id).where(m.Run.label == str(ref))
                            .order_by(m.Run.created_at.desc(), m.Run.id.desc()).limit(1)).scalar()
        if rid is None:
            raise InputError(f"no run with id or label {ref!r} in the store")
        return rid

    def run_dict(self, ref: int | str, *, with_samples: bool = False) -> dict[str, Any]:
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
        q = select(m.Run).order_by(m.Run.created_at.desc(), m.Run.id.desc()).limit(limit)
        if kind:
            q = q.where(m.Run.kind == kind)
        if label:
            q = q.where(m.Run.label == label)
        if model:
            q = q.where(m.Run.model.contains(model))
        if gpu:
            q = q.where(m.Run.gpu.contains(gpu))
        with self.session() as s:
            return [_row(r) for r in s.execute(q).scalars()]

    def samples_frame(self, variant_id: int):
        import pandas as pd

        with self.engine.connect() as c:
            t = m.Sample.__table__
            return pd.read_sql(select(t).where(t.c.variant_id == variant_id).order_by(t.c.idx), c)


def _row(obj) -> dict[str, Any]:
    d = {c.name: getattr(obj, c.name) for c in obj.__table__.columns}
    for k, v in d.items():
        if isinstance(v, dt.datetime):
            d[k] = v.isoformat()
    return d
