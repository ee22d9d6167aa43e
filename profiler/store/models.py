"""The run store's schema: SQLAlchemy 2.0 typed models.

A *run* is one thing trtprof measured or ingested (an nsys capture analysed, a sweep, a trtexec import).
Its *variants* are what it compares inside: engine variants of a sweep (key ``fp16-ws1G-s2-graph``),
NVTX range series of a capture (key = domain/name, kind ``range``), or a trtexec export. Per-iteration
*samples*, per-layer *layers* and per-output *accuracy* hang off a variant; *findings* and *artifacts*
off the run. Times are stored in milliseconds (``*_ms``), sizes in bytes.

``fingerprint`` defines comparability: two variants with the same fingerprint measured the same
engine recipe (model hash, variant settings, backend) and may be compared across runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator


def fit_text(value: Any, length: int | None) -> Any:
    """Text the column can hold on every backend: NUL characters (PostgreSQL refuses them) shown as
    ``\\x00``, and text longer than ``length`` cut with a note of its full length. SQLite would keep
    any length, PostgreSQL would refuse the whole run; both now store the same value."""
    if not isinstance(value, str):
        return value
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if length is not None and len(value) > length:
        note = f"... [{len(value)} chars]"
        value = value[: max(length - len(note), 0)] + note[: length]
    return value


class Bounded(TypeDecorator):
    """``String(n)`` that fits what it is given (see :func:`fit_text`)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return fit_text(value, self.impl.length)


class SafeText(TypeDecorator):
    """``Text`` without NUL characters (see :func:`fit_text`)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return fit_text(value, None)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(Bounded(16))  # analyze | sweep | import
    source: Mapped[str] = mapped_column(SafeText)  # capture path, model path, export prefix
    source_hash: Mapped[Optional[str]] = mapped_column(Bounded(64))
    label: Mapped[Optional[str]] = mapped_column(Bounded(200))  # indexed with created_at below
    status: Mapped[str] = mapped_column(Bounded(16), default="running")  # running|ok|failed|interrupted
    # who is running it now (host:pid:token) and until when that claim holds without a heartbeat; a run
    # whose lease expired (its process crashed) may be resumed by another process
    lease_owner: Mapped[Optional[str]] = mapped_column(Bounded(200))
    lease_expires_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]] = mapped_column(DateTime(timezone=True))
    host: Mapped[Optional[str]] = mapped_column(Bounded(200))
    gpu: Mapped[Optional[str]] = mapped_column(Bounded(200))
    driver_version: Mapped[Optional[str]] = mapped_column(Bounded(64))
    cuda_version: Mapped[Optional[str]] = mapped_column(Bounded(64))
    tensorrt_version: Mapped[Optional[str]] = mapped_column(Bounded(64))
    nsys_version: Mapped[Optional[str]] = mapped_column(Bounded(64))
    backend: Mapped[Optional[str]] = mapped_column(Bounded(64))
    model: Mapped[Optional[str]] = mapped_column(Bounded(400), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # options the run used
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # clocks, versions, ...
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the run's JSON output

    variants: Mapped[list["Variant"]] = relationship(back_populates="run", cascade="all, delete-orphan",
                                                     order_by="Variant.id")
    findings: Mapped[list["FindingRow"]] = relationship(back_populates="run", cascade="all, delete-orphan",
                                                        order_by="FindingRow.id")
    artifacts: Mapped[list["Artifact"]] = relationship(back_populates="run", cascade="all, delete-orphan",
                                                       order_by="Artifact.id")

    __table_args__ = (
        Index("ix_runs_kind_created", "kind", "created_at"),
        Index("ix_runs_label_created", "label", "created_at"),  # newest run of a label (revision 0002)
        Index("ix_runs_created", "created_at"),  # the history list, newest first (revision 0002)
    )


class Variant(Base):
    __tablename__ = "variants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(Bounded(16), default="variant")  # variant | range | export
    key: Mapped[str] = mapped_column(Bounded(400))  # fp16-ws1G-s2-graph, or the range name
    domain: Mapped[Optional[str]] = mapped_column(Bounded(200))  # NVTX domain for ranges
    precision: Mapped[Optional[str]] = mapped_column(Bounded(16))
    workspace_bytes: Mapped[Optional[int]] = mapped_column(BigInteger)
    streams: Mapped[Optional[int]] = mapped_column(Integer)
    cuda_graph: Mapped[Optional[bool]] = mapped_column(Boolean)
    backend: Mapped[Optional[str]] = mapped_column(Bounded(64))
    status: Mapped[str] = mapped_column(Bounded(16), default="ok")  # ok | failed | skipped
    error: Mapped[Optional[str]] = mapped_column(SafeText)
    fingerprint: Mapped[Optional[str]] = mapped_column(Bounded(64), index=True)
    latency_ms: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # stats.summarize() output
    throughput_qps: Mapped[Optional[float]] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # enqueue_ms, gpu_busy_ms, memory...

    run: Mapped[Run] = relationship(back_populates="variants")
    samples: Mapped[list["Sample"]] = relationship(back_populates="variant", cascade="all, delete-orphan",
                                                   order_by="Sample.idx")
    layers: Mapped[list["Layer"]] = relationship(back_populates="variant", cascade="all, delete-orphan",
                                                 order_by="Layer.id")
    accuracy: Mapped[list["Accuracy"]] = relationship(back_populates="variant", cascade="all, delete-orphan",
                                                      order_by="Accuracy.id")

    __table_args__ = (Index("ix_variants_run_key", "run_id", "key"),)


class Sample(Base):
    """One iteration (or NVTX range instance) of a variant. NULL where a component was not measured."""

    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id", ondelete="CASCADE"))
    idx: Mapped[int] = mapped_column(Integer)
    start_ms: Mapped[Optional[float]] = mapped_column(Float)
    latency_ms: Mapped[Optional[float]] = mapped_column(Float)  # h2d + compute + d2h, or a range's wall time
    # (its GPU work's latency when that work mostly ends after the range: store.rows.range_latency_ms)
    enqueue_ms: Mapped[Optional[float]] = mapped_column(Float)
    h2d_ms: Mapped[Optional[float]] = mapped_column(Float)
    compute_ms: Mapped[Optional[float]] = mapped_column(Float)
    d2h_ms: Mapped[Optional[float]] = mapped_column(Float)
    gpu_busy_ms: Mapped[Optional[float]] = mapped_column(Float)
    stream: Mapped[Optional[int]] = mapped_column(Integer)

    variant: Mapped[Variant] = relationship(back_populates="samples")

    __table_args__ = (Index("ix_samples_variant_idx", "variant_id", "idx"),)


class Layer(Base):
    """One engine layer (TensorRT), ONNX node (ONNX Runtime) or projected NVTX layer range."""

    __tablename__ = "layers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(SafeText)
    type: Mapped[Optional[str]] = mapped_column(Bounded(100))
    precision_in: Mapped[Optional[str]] = mapped_column(Bounded(32))
    precision_out: Mapped[Optional[str]] = mapped_column(Bounded(32))
    tactic: Mapped[Optional[str]] = mapped_column(SafeText)
    count: Mapped[Optional[int]] = mapped_column(Integer)
    time_total_ms: Mapped[Optional[float]] = mapped_column(Float)
    time_avg_ms: Mapped[Optional[float]] = mapped_column(Float)
    time_median_ms: Mapped[Optional[float]] = mapped_column(Float)
    share_pct: Mapped[Optional[float]] = mapped_column(Float)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # fused nodes, bytes, formats...

    variant: Mapped[Variant] = relationship(back_populates="layers")


class Accuracy(Base):
    """One output of one variant compared with the FP32 reference on the same inputs."""

    __tablename__ = "accuracy"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    variant_id: Mapped[int] = mapped_column(ForeignKey("variants.id", ondelete="CASCADE"), index=True)
    output: Mapped[str] = mapped_column(Bounded(400))
    max_abs: Mapped[Optional[float]] = mapped_column(Float)
    mean_abs: Mapped[Optional[float]] = mapped_column(Float)
    rel_l2: Mapped[Optional[float]] = mapped_column(Float)
    cosine: Mapped[Optional[float]] = mapped_column(Float)
    top1_agreement: Mapped[Optional[float]] = mapped_column(Float)
    nan_count: Mapped[Optional[int]] = mapped_column(Integer)
    inf_count: Mapped[Optional[int]] = mapped_column(Integer)
    passed: Mapped[Optional[bool]] = mapped_column(Boolean)
    threshold: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    variant: Mapped[Variant] = relationship(back_populates="accuracy")


class FindingRow(Base):
    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    variant: Mapped[Optional[str]] = mapped_column(Bounded(400))
    rule: Mapped[str] = mapped_column(Bounded(64), index=True)
    severity: Mapped[str] = mapped_column(Bounded(8))
    title: Mapped[str] = mapped_column(SafeText)
    range: Mapped[Optional[str]] = mapped_column(SafeText)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    threshold: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    recommendation: Mapped[str] = mapped_column(SafeText, default="")

    run: Mapped[Run] = relationship(back_populates="findings")


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(Bounded(32))  # report | capture | summary | engine | export
    path: Mapped[str] = mapped_column(SafeText)

    run: Mapped[Run] = relationship(back_populates="artifacts")
