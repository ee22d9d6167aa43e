"""Read-only queries over many runs at once, in a few SQL statements (the history of 10,000 runs loads in
seconds); plain rows out, so their readers (``profiler.history``) never touch the SQLAlchemy models.

Each query takes the same selection: runs that finished ``ok`` or ``interrupted``, with ``label`` (exact)
and ``model`` (a substring, taken literally) when given.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable

from sqlalchemy import Integer, case, func, select

from profiler.store import models as m
from profiler.store.api import Store, iso_utc


def _selected(q: Any, label: str | None, model: str | None) -> Any:
    r = m.Run.__table__
    q = q.where(r.c.status.in_(("ok", "interrupted")))
    if label:
        q = q.where(r.c.label == label)
    if model:
        q = q.where(r.c.model.contains(model, autoescape=True))
    return q


def selected_runs(store: Store, columns: Iterable[str], *, label: str | None = None,
                  model: str | None = None) -> dict[int, dict[str, Any]]:
    """{run id: the run's id, created_at (ISO, UTC), label, kind, model, source, ``columns``, environment and
    ``report`` (its first report artifact, when it has one)}."""
    r, a = m.Run.__table__, m.Artifact.__table__
    cols = [r.c.id, r.c.created_at, r.c.label, r.c.kind, r.c.model, r.c.source, *[r.c[c] for c in columns],
            r.c.environment]
    with store.engine.connect() as c:
        runs = {row.id: dict(row._mapping) for row in c.execute(_selected(select(*cols), label, model))}
        q = _selected(select(a.c.run_id, a.c.kind, a.c.path).join(r, r.c.id == a.c.run_id), label, model)
        for rid, kind, path in c.execute(q.where(a.c.kind == "report")):
            runs[rid].setdefault("report", path)
    for run in runs.values():  # in UTC, whatever the database session's time zone: the strings sort in time order
        created = run["created_at"]
        if isinstance(created, dt.datetime) and created.tzinfo is not None:
            created = created.astimezone(dt.timezone.utc)
        run["created_at"] = iso_utc(created)
    return runs


def accuracy_by_variant(store: Store, *, label: str | None = None,
                        model: str | None = None) -> dict[int, tuple[Any, Any, int]]:
    """{variant id: (lowest cosine, largest max_abs, outputs failed)} over the selected runs' variants."""
    acc, v, r = m.Accuracy.__table__, m.Variant.__table__, m.Run.__table__
    failed = func.sum(case((acc.c.passed.is_(False), 1), else_=0)).cast(Integer)
    q = (select(acc.c.variant_id, func.min(acc.c.cosine), func.max(acc.c.max_abs), failed)
         .join(v, v.c.id == acc.c.variant_id).join(r, r.c.id == v.c.run_id).group_by(acc.c.variant_id))
    with store.engine.connect() as c:
        return {vid: (cos, mx, int(bad or 0)) for vid, cos, mx, bad in c.execute(_selected(q, label, model))}


def ok_variant_figures(store: Store, latency_keys: Iterable[str], metric_paths: Iterable[tuple[str, ...]], *,
                       label: str | None = None, model: str | None = None) -> list[tuple]:
    """One row per ``ok`` variant of the selected runs: (variant id, run id, kind, key, domain, backend, each of
    ``latency_keys`` of its ``latency_ms``, each of ``metric_paths`` into its metrics, its repeats' medians as
    JSON text). The figures are extracted in SQL (a sweep's metrics hold much more): no JSON parsed here."""
    v, r = m.Variant.__table__, m.Run.__table__
    lat = [v.c.latency_ms[k].as_float() for k in latency_keys]
    mem = [v.c.metrics[path].as_float() for path in metric_paths]
    cols = [v.c.id, v.c.run_id, v.c.kind, v.c.key, v.c.domain, v.c.backend, *lat, *mem,
            v.c.metrics[("repeats", "medians_ms")].as_string()]
    q = _selected(select(*cols).join(r, r.c.id == v.c.run_id).where(v.c.status == "ok"), label, model)
    with store.engine.connect() as c:
        return [tuple(row) for row in c.execute(q).all()]


def runs_stamp(store: Store) -> tuple[Any, Any, Any]:
    """(how many runs, the newest id, the latest finish): changes whenever a run is added or finishes."""
    with store.engine.connect() as c:
        return tuple(c.execute(select(func.count(m.Run.id), func.max(m.Run.id), func.max(m.Run.finished_at))).one())
