"""Schema migrations of the run store, run programmatically with Alembic (no alembic.ini needed).

``upgrade(engine)`` applies whatever revisions are pending, under a lock, in one transaction:
two processes opening a fresh database at the same moment do not collide (SQLite: ``BEGIN
IMMEDIATE`` serialises them; PostgreSQL: a transaction-scoped advisory lock). The second one finds
the schema already at head and does nothing.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from profiler.errors import InputError

MIGRATIONS_DIR = Path(__file__).resolve().with_name("migrations")
#: the newest revision under migrations/versions (a test holds it equal to Alembic's head): a store already
#: there is opened without importing Alembic, which costs more than a whole cached analysis
HEAD = "0003"
_PG_LOCK_KEY = 0x7472_7470_726F_66  # "trtprof", an arbitrary 64-bit advisory lock key


def _config(connection: Connection | None = None):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this version of trtprof knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _stamped_revision(engine: Engine) -> str | None:
    """The revision in the store's ``alembic_version`` table, read with one query (None when there is no
    such table or it cannot be read: the full check that follows says why)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except Exception:
        return None
    return rows[0][0] if len(rows) == 1 else None


def _lock(conn: Connection) -> None:
    """Serialise concurrent upgrades (SQLite holds its write lock already via BEGIN IMMEDIATE)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Apply pending migrations up to ``revision``; returns the revision the database is at after.

    Raises InputError when the database was made by a newer trtprof (a revision this one does not
    know). A database whose tables were created before it had a revision table (same schema as
    revision 0001) is stamped 0001 and then upgraded.
    """
    from profiler.store.engine import WRITE, configure

    configure(engine)
    if revision == "head" and _stamped_revision(engine) == HEAD:  # the common case: nothing to do
        return HEAD
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = head_revision()
    if revision == "head" and current_revision(engine) == head:  # the common case: nothing to do
        return head
    cfg = _config()
    known = {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}
    with engine.connect().execution_options(**WRITE) as conn, conn.begin():
        _lock(conn)
        current = MigrationContext.configure(conn).get_current_revision()
        if current is not None and current not in known:
            raise InputError(f"the run store is at schema revision {current}, which this trtprof "
                             f"(newest revision {head}) does not know: upgrade trtprof to use it")
        if current is None and "runs" in inspect(conn).get_table_names():
            cfg.attributes["connection"] = conn
            command.stamp(cfg, "0001")  # an unversioned store from before migrations existed
            current = "0001"
        if current != head or revision != "head":
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        return MigrationContext.configure(conn).get_current_revision()
