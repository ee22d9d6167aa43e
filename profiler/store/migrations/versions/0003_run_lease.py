"""A lease on a run: one process at a time works on it (``trtprof sweep --resume`` of a run that another
process is still running is refused; a crashed run's lease expires and it can be resumed).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_owner")
