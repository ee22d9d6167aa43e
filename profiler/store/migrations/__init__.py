"""Alembic migrations of the run store (applied by :func:`profiler.store.migrate.upgrade`)."""
