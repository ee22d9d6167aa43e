"""Engines for the run store: SQLite in WAL mode with explicit transactions, or PostgreSQL.

SQLite notes (why the listeners below exist):

- WAL lets readers work while one process writes; ``busy_timeout`` makes a second writer wait for
  the lock instead of failing at once.
- The sqlite3 module's own transaction handling is switched off and the store emits ``BEGIN``
  itself. Write sessions begin with ``BEGIN IMMEDIATE``: they take the write lock up front, so a
  transaction that reads and then writes can never hit the "database is locked" error that a
  deferred transaction gets when another process wrote in between (SQLite does not retry that case).
  It also makes DDL transactional, which lets the first-open migration run atomically under the lock.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine

BUSY_TIMEOUT_MS = 60_000
WRITE = {"trtprof_write": True}  # execution option: begin with BEGIN IMMEDIATE on SQLite


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for a full URL, with the SQLite behaviour above installed."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": BUSY_TIMEOUT_MS / 1000}
    engine = create_engine(url, **kwargs)
    configure(engine)
    return engine


def configure(engine: Engine) -> Engine:
    """Install the SQLite listeners on an engine (idempotent; other dialects are left alone)."""
    if engine.dialect.name != "sqlite" or getattr(engine, "_trtprof_configured", False):
        return engine

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # autocommit at the driver level; we emit BEGIN below
        # a damaged file can hold bytes that are not UTF-8: show them replaced rather than fail the read
        dbapi_conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() not in ("wal", "memory"):  # in-memory databases cannot use WAL
            cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:
        immediate = conn.get_execution_options().get("trtprof_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    engine._trtprof_configured = True  # type: ignore[attr-defined]
    engine.dispose()  # pooled connections made before this would lack the listeners
    return engine
