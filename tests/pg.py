"""Make a throw-away database on the test PostgreSQL server."""

from __future__ import annotations

import uuid


def fresh_database(base_url: str) -> str:
    import psycopg

    name = "trtprof_test_" + uuid.uuid4().hex[:12]
    plain = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = plain.rpartition("/")
    return f"{head}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)
