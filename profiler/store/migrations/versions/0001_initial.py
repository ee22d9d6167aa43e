"""The initial run store schema: runs, variants, samples, layers, accuracy, findings, artifacts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=True),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("host", sa.String(length=200), nullable=True),
        sa.Column("gpu", sa.String(length=200), nullable=True),
        sa.Column("driver_version", sa.String(length=64), nullable=True),
        sa.Column("cuda_version", sa.String(length=64), nullable=True),
        sa.Column("tensorrt_version", sa.String(length=64), nullable=True),
        sa.Column("nsys_version", sa.String(length=64), nullable=True),
        sa.Column("backend", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=400), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_runs_kind_created", "runs", ["kind", "created_at"])
    op.create_index("ix_runs_label", "runs", ["label"])
    op.create_index("ix_runs_model", "runs", ["model"])

    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_artifacts_run_id", "artifacts", ["run_id"])

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("variant", sa.String(length=400), nullable=True),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=8), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("range", sa.Text(), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("threshold", sa.JSON(), nullable=False),
        sa.Column("recommendation", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_findings_rule", "findings", ["rule"])
    op.create_index("ix_findings_run_id", "findings", ["run_id"])

    op.create_table(
        "variants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("domain", sa.String(length=200), nullable=True),
        sa.Column("precision", sa.String(length=16), nullable=True),
        sa.Column("workspace_bytes", sa.BigInteger(), nullable=True),
        sa.Column("streams", sa.Integer(), nullable=True),
        sa.Column("cuda_graph", sa.Boolean(), nullable=True),
        sa.Column("backend", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("latency_ms", sa.JSON(), nullable=False),
        sa.Column("throughput_qps", sa.Float(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_variants_fingerprint", "variants", ["fingerprint"])
    op.create_index("ix_variants_run_id", "variants", ["run_id"])
    op.create_index("ix_variants_run_key", "variants", ["run_id", "key"])

    op.create_table(
        "accuracy",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("output", sa.String(length=400), nullable=False),
        sa.Column("max_abs", sa.Float(), nullable=True),
        sa.Column("mean_abs", sa.Float(), nullable=True),
        sa.Column("rel_l2", sa.Float(), nullable=True),
        sa.Column("cosine", sa.Float(), nullable=True),
        sa.Column("top1_agreement", sa.Float(), nullable=True),
        sa.Column("nan_count", sa.Integer(), nullable=True),
        sa.Column("inf_count", sa.Integer(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("threshold", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_accuracy_variant_id", "accuracy", ["variant_id"])

    op.create_table(
        "layers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("type", sa.String(length=100), nullable=True),
        sa.Column("precision_in", sa.String(length=32), nullable=True),
        sa.Column("precision_out", sa.String(length=32), nullable=True),
        sa.Column("tactic", sa.Text(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=True),
        sa.Column("time_total_ms", sa.Float(), nullable=True),
        sa.Column("time_avg_ms", sa.Float(), nullable=True),
        sa.Column("time_median_ms", sa.Float(), nullable=True),
        sa.Column("share_pct", sa.Float(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_layers_variant_id", "layers", ["variant_id"])

    op.create_table(
        "samples",
        # 64-bit ids on PostgreSQL (millions of samples per database); SQLite's rowid is 64-bit already.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("start_ms", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("enqueue_ms", sa.Float(), nullable=True),
        sa.Column("h2d_ms", sa.Float(), nullable=True),
        sa.Column("compute_ms", sa.Float(), nullable=True),
        sa.Column("d2h_ms", sa.Float(), nullable=True),
        sa.Column("gpu_busy_ms", sa.Float(), nullable=True),
        sa.Column("stream", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_samples_variant_idx", "samples", ["variant_id", "idx"])


def downgrade() -> None:
    for table in ("samples", "layers", "accuracy", "variants", "findings", "artifacts", "runs"):
        op.drop_table(table)
