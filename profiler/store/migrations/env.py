"""Alembic environment for the run store.

Runs only programmatically: :func:`profiler.store.migrate.upgrade` hands over an open connection
(``config.attributes["connection"]``) that already holds the migration lock and a transaction, so
everything here happens inside the caller's transaction. Offline mode (``--sql``) renders the DDL
for a URL given as ``sqlalchemy.url``.
"""

from __future__ import annotations

from alembic import context

from profiler.store.models import Base

target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=context.config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:  # pragma: no cover - the store always passes one
        raise RuntimeError("run store migrations need a connection: use profiler.store.migrate.upgrade()")
    is_sqlite = connection.dialect.name == "sqlite"
    # SQLite can run DDL inside a transaction (the store emits BEGIN itself), so the whole upgrade is
    # atomic there too; render_as_batch lets later revisions alter SQLite tables by copy-and-move.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=is_sqlite,
                      transactional_ddl=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
