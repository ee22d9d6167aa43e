"""Indexes for the history views: newest run of a label, and the run list ordered by time.

``ix_runs_label_created`` (label, created_at) answers "the newest run labelled X" from the index
alone, however many runs share the label (a nightly job adds one a day); it replaces the plain
``ix_runs_label``, whose lookups it also serves. ``ix_runs_created`` lets ``trtprof runs`` read the
newest N runs without sorting the whole history. benchmarks/bench_store.py measures both.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_label_created", "runs", ["label", "created_at"])
    op.create_index("ix_runs_created", "runs", ["created_at"])
    op.drop_index("ix_runs_label", table_name="runs")


def downgrade() -> None:
    op.create_index("ix_runs_label", "runs", ["label"])
    op.drop_index("ix_runs_created", table_name="runs")
    op.drop_index("ix_runs_label_created", table_name="runs")
