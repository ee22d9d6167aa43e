"""Schema creation and upgrades. (Placeholder until the Alembic migrations land: creates all tables.)"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from profiler.store.models import Base


def upgrade(engine: Engine) -> None:
    Base.metadata.create_all(engine)
