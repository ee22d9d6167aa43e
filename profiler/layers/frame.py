"""The one per-layer frame every backend lands in (TensorRT profiles, IProfiler records, ONNX Runtime).

One row per engine layer (TensorRT) or graph node (ONNX Runtime). Columns (``COLUMNS``):

- ``name``, ``type``: layer name and type (``CaskConvolution``, ``Reformat``, ``Conv``...)
- ``precision_in`` / ``precision_out``: ``fp32``, ``fp16``, ``int8``... of the first input/output tensor
- ``tactic``: the kernel TensorRT chose (``TacticName``), or the execution provider for ONNX Runtime
- ``fused_nodes``: list of ONNX node names the layer covers (from ``Metadata`` or the layer name)
- ``weights_bytes``: weights + bias; ``activation_bytes``: bytes of the layer's input and output tensors
- ``count``: profiled iterations; ``time_total_ms`` / ``time_avg_ms`` / ``time_median_ms``: layer time
- ``share_pct``: share of the summed per-layer time, in percent; ``variant``: the engine/variant key

Per-layer times are measured with an event pair around every layer, so their sum exceeds the
end-to-end latency of an un-profiled run; :func:`layer_totals` reports both.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

COLUMNS = ("name", "type", "precision_in", "precision_out", "tactic", "fused_nodes", "weights_bytes",
           "activation_bytes", "count", "time_total_ms", "time_avg_ms", "time_median_ms", "share_pct",
           "variant")

# Most bits first: a layer is "in higher precision" than another when its rank is lower.
PRECISION_RANK = {"fp64": 0, "fp32": 1, "tf32": 2, "bf16": 3, "fp16": 3, "fp8": 4, "int8": 4, "uint8": 4,
                  "int4": 5, "fp4": 5}
_BYTES = {"fp64": 8, "int64": 8, "fp32": 4, "int32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1,
          "uint8": 1, "bool": 1, "int4": 0.5, "fp4": 0.5}
_FORMAT_TOKENS = [  # (regex over a TensorRT format string or type name, precision)
    (r"\bbf16\b|bfloat16", "bf16"), (r"\bfp16\b|\bhalf\b|float16", "fp16"), (r"\bfp32\b|\bfloat\b|float32", "fp32"),
    (r"\bfp8\b|e4m3|e5m2", "fp8"), (r"\buint8\b", "uint8"), (r"\bint8\b", "int8"), (r"\bint32\b", "int32"),
    (r"\bint64\b", "int64"), (r"\bbool\b", "bool"), (r"\bint4\b", "int4"), (r"\bfp4\b", "fp4"),
    (r"\bdouble\b|float64|\bfp64\b", "fp64"),
]

REFORMAT_TYPES = {"Reformat", "NoOp", "Quantize", "Dequantize", "QuantizeLinear", "DequantizeLinear"}
_QDQ_NAME = re.compile(r"^(QuantizeLinear|DequantizeLinear|QuantLinearNode|DequantLinearNode)", re.I)


def precision_from_format(fmt: str | None) -> str | None:
    """``fp32``/``fp16``/``int8``... from a TensorRT ``Format/Datatype`` string or a weights type name."""
    if not fmt:
        return None
    low = str(fmt).lower()
    for pattern, name in _FORMAT_TOKENS:
        if re.search(pattern, low):
            return name
    return None


def bytes_per_element(precision: str | None) -> float | None:
    return _BYTES.get(precision or "")


def is_reformat(name: str, layer_type: str | None) -> bool:
    """Reformat, no-op copy and stand-alone Q/DQ layers: data movement, not math."""
    return (layer_type in REFORMAT_TYPES) or name.startswith("Reformatting CopyNode") or bool(_QDQ_NAME.match(name))


def compute_precision(row: Any) -> str | None:
    """The precision a layer computes in: its first input's, else its first output's."""
    p_in = row.get("precision_in") if hasattr(row, "get") else None
    return p_in if isinstance(p_in, str) and p_in else (row.get("precision_out") or None)


def make_frame(records: Iterable[dict] | pd.DataFrame, variant: str | None = None) -> pd.DataFrame:
    """A layer frame with every column of :data:`COLUMNS`, ``share_pct`` recomputed from total time."""
    df = records.copy() if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = None
    if variant is not None:
        df["variant"] = variant
    for col in ("time_total_ms", "time_avg_ms", "time_median_ms", "share_pct", "weights_bytes",
                "activation_bytes"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["count"] = pd.to_numeric(df["count"], errors="coerce").astype("Int64")
    for col in ("name", "type", "precision_in", "precision_out", "tactic", "variant"):
        df[col] = df[col].astype(object).where(df[col].notna(), None)
    df["fused_nodes"] = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else [] for v in df["fused_nodes"]]
    total = df["time_total_ms"].sum(min_count=1)
    if pd.notna(total) and total > 0:
        df["share_pct"] = df["time_total_ms"] / total * 100.0
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[list(COLUMNS) + extra].reset_index(drop=True)


def empty_frame() -> pd.DataFrame:
    return make_frame([])


def layer_totals(frame: pd.DataFrame) -> dict[str, Any]:
    """Sum of per-layer times (per iteration), layer count and reformat overhead of one variant."""
    avg = frame["time_avg_ms"].fillna(0.0)
    reformat = np.array([is_reformat(n, t) for n, t in zip(frame["name"], frame["type"])], dtype=bool)
    return {
        "layers": int(len(frame)),
        "layer_sum_ms": float(avg.sum()),
        "reformat_layers": int(reformat.sum()),
        "reformat_ms": float(avg[reformat].sum()),
    }


def precision_mix(frame: pd.DataFrame) -> dict[str, float]:
    """Share of per-layer time (percent, sums to 100) by compute precision; unknown precision is 'unknown'."""
    t = frame["time_total_ms"].fillna(0.0)
    total = float(t.sum())
    if total <= 0:
        return {}
    keys = [compute_precision(r) or "unknown" for r in frame[["precision_in", "precision_out"]].to_dict("records")]
    out: dict[str, float] = {}
    for k, v in zip(keys, t):
        out[k] = out.get(k, 0.0) + float(v) / total * 100.0
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def time_by_type(frame: pd.DataFrame) -> pd.DataFrame:
    """Per layer type: layer count, summed average time (ms per iteration) and share (percent)."""
    g = frame.assign(t=frame["time_avg_ms"].fillna(0.0)).groupby("type", dropna=False)
    out = g.agg(layers=("name", "size"), time_ms=("t", "sum")).reset_index()
    total = out["time_ms"].sum()
    out["share_pct"] = out["time_ms"] / total * 100.0 if total > 0 else np.nan
    return out.sort_values("time_ms", ascending=False).reset_index(drop=True)
