"""Per-layer rules (layer frames of ``profiler.layers``) and trtexec's warnings from imported timing data.

Each rule (scope ``layers``) judges one engine, a :class:`profiler.rules.context.LayerContext`;
:func:`run_layer_rules` runs them over every engine of an import. ``launch_overhead``,
``transfer_bound`` and ``jitter`` are trtexec's warnings, the ids the sweep and the capture analysis
use for the same diagnosis made from their data.

Thresholds (each rule's defaults, severity bands included):
- ``layer_hotspot``: one layer above 10 % of the summed per-layer time (medium above 25 %).
- ``unfused_reformat``: reformat / stand-alone Q/DQ layers that cost time (any). Those that convert a
  network input or output binding (the layer info's ``Bindings``) are told apart: no Q/DQ placement removes
  them, only feeding/taking the binding in the engine's format (trtexec ``--inputIOFormats`` /
  ``--outputIOFormats``, the conversion moved into pre-/post-processing), and their advice says so.
  Severity: the share Q/DQ placement can remove is high from 10 % of layer time, medium from 3 %; the
  I/O share one band lower (medium from 10 %, else low); the finding takes the higher of the two.
- ``precision_fallback``: non-reformat layers computing in a higher precision than the build asked
  for (fp16 build: fp32 layers; int8 build: fp16/fp32 layers).
- ``tiny_layers``: at least 10 layers, and at least 30 % of the timed layers, under 10 us each.
- ``no_tensor_cores``: convolution/GEMM layers whose tactic name shows no Tensor Core kernel.
  The tactic names are read by the one table of kernel names (:mod:`profiler.kernel_math`): Tensor Core
  kernels name an MMA shape or instruction (cuDNN's ``h1688``/``h16816``/``i8816``, XMMA ``tensor16x8x16``,
  HMMA/IMMA) or a reduced-precision math type in an sm70+ XMMA kernel; not Tensor Core: single-precision
  cuDNN (``scudnn``), dp4a int8 (``int8x4`` cuDNN kernels), ``sgemm``/``gemv``, ``simt``/``ffma`` kernels,
  ``sm50``/``sm60`` XMMA kernels and XMMA kernels with FP32 math (``f32f32_f32f32``). Layers without a
  tactic name, or whose name says neither (Myelin), are "unknown" and not reported.
- ``channel_alignment``: conv/GEMM input or output channels (per group) not multiples of 8 (fp16) or
  32 (int8); image inputs with at most 4 channels are expected and left out.
- ``launch_overhead``: median enqueue > 0.8 x median GPU compute (trtexec's enqueue-bound warning).
- ``transfer_bound``: median H2D or D2H >= median GPU compute.
- ``jitter``: GPU compute CoV > 1.0 % for TensorRT 8.6 to 10.13, > 2.5 % for 10.14 and later
  (:func:`profiler.rules._trtexec.jitter_cov_limit`: before 8.6 trtexec printed no CoV, and 8.6's 1.0 %
  is used, saying so; an unknown version gets the current trtexec's); medium above 4x the limit.

Enqueue medians come from trtexec's printed summary when it is present: exported timestamps carry
only six significant digits (0.01 ms at 3 s), too coarse for a 5 us enqueue.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from profiler.findings import SEVERITIES, Finding, sort_findings
from profiler.kernel_math import uses_tensor_cores
from profiler.layers import frame as lf
from profiler.rules import Overrides, Thresholds, rule, run_rules
from profiler.rules._trtexec import (ENQUEUE_BOUND_RATIO, JITTER_MEDIUM_OVER_LIMIT, TRANSFER_BOUND_RATIO,
                                     jitter_cov_limit)
from profiler.rules.context import LayerContext


_GEMM_TYPES = re.compile(r"conv|gemm|matmul|matrixmultiply|fullyconnected", re.I)
_QUANTISED = {"int8", "uint8", "fp8", "int4", "fp4"}
# TensorRT's tensor format strings -> trtexec layouts; first match wins; None: a layout trtexec's
# --inputIOFormats/--outputIOFormats cannot name. The descriptions are TensorRT 8-10's; the enum-style names
# (kHWC8, LINEAR) are for the separate ``Format`` field of TensorRT 11's inspector (no such export here to check)
_LAYOUTS = ((r"\btwo wide|\bk?chw2\b", "chw2"), (r"\bfour wide|\bk?chw4\b", "chw4"),
            (r"\bsixteen wide|\bk?chw16\b", "chw16"), (r"thirty-two wide|\bk?chw32\b", "chw32"),
            (r"channel % 8 ==|\bk?hwc8\b", "hwc8"), (r"channel % 16 ==|\bk?hwc16\b", "hwc16"),
            (r"channel % \d+ ==", None), (r"channel major|\bk?hwc\b", "hwc"), (r"row major|\bk?linear\b", "chw"))
_PLACEMENT_ADVICE = ("Reformats convert layouts/precisions between layers that disagree. For QAT models put Q/DQ "
                     "pairs on every input of a convolution and of residual adds so TensorRT fuses them; keep "
                     "adjacent layers in one precision and channel counts aligned.")


def _layer_ev(r: dict, digits: int = 2) -> dict[str, Any]:
    return {"name": r["name"], "type": r.get("type"), "time_ms": r.get("time_avg_ms"),
            "share_pct": round((_num(r.get("share_pct")) or 0.0), digits),
            "precision": lf.compute_precision(r), "tactic": r.get("tactic")}


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def _timed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["time_avg_ms"].fillna(0) > 0]


# -- layer rules ------------------------------------------------------------------------------------
@rule("layer_hotspot", scope="layers", defaults={"share_pct": 10.0, "medium_share_pct": 25.0})
def layer_hotspot(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Layers above ``share_pct`` of the summed per-layer time."""
    share_pct = t["share_pct"]
    hot = v.layers[v.layers["share_pct"].fillna(0) > share_pct].sort_values("share_pct", ascending=False)
    if hot.empty:
        return []
    top = hot.iloc[0]
    recs = [_layer_ev(r) for r in hot.to_dict("records")]
    return [Finding(
        rule="layer_hotspot", severity="medium" if top["share_pct"] > t["medium_share_pct"] else "low", variant=v.key,
        range=top["name"],
        title=f"{v.key}: {len(hot)} layer(s) over {share_pct:g}% of layer time; '{top['name']}' takes "
              f"{top['share_pct']:.1f}% ({top['time_avg_ms']:.4f} ms)",
        evidence={"layers": recs, "top_share_pct": float(top["share_pct"])},
        threshold={"share_pct": share_pct},
        recommendation=_hotspot_advice(top.to_dict()))]


def _hotspot_advice(top: dict) -> str:
    """Where to start: the hottest layer's precision and tactic, unless it is a reformat or Q/DQ layer
    (unfused_reformat says how to remove it: Q/DQ placement, or I/O formats for a network input/output)."""
    if lf.is_reformat(top["name"], top.get("type")):
        io = _io_binding(top)
        where = f" of network {io[0]} '{io[1]}'" if io else ""
        return (f"The hottest layer is a reformat or Q/DQ layer{where}, not a computation: see the "
                "unfused_reformat finding for how to remove it.")
    return ("Start optimising here: check its precision and tactic, and whether its channel counts let Tensor "
            "Core kernels run.")


def _listed(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple, np.ndarray)) else []


def _first(x: Any) -> Any:
    xs = _listed(x)
    return xs[0] if xs else None


def _io_binding(r: dict) -> tuple[str, str] | None:
    """('input' | 'output', binding) of a reformat/Q layer that converts a network input or output (the
    format changes on the way: a same-format copy onto a binding is no I/O-format matter)."""
    if _first(r.get("formats_in")) == _first(r.get("formats_out")):
        return None
    for direction, key in (("input", "network_inputs"), ("output", "network_outputs")):
        if _listed(r.get(key)):
            return direction, str(_listed(r.get(key))[0])
    return None


def trtexec_format(fmt: str | None, dims: Any = None) -> str | None:
    """trtexec's I/O format spec ('int8:chw4') for a TensorRT tensor format string; None for a layout
    trtexec cannot request (``channel % 4`` ones are TensorRT's own)."""
    prec = lf.precision_from_format(fmt)
    layout = next((name for pat, name in _LAYOUTS if re.search(pat, str(fmt or ""), re.I)), None)
    if len(_listed(dims)) == 5 and layout:
        layout = {"hwc8": "dhwc8", "chw32": "cdhw32", "hwc": "dhwc"}.get(layout, layout)
    return f"{prec}:{layout}" if prec and layout else None


def _io_flag(direction: str, fmt: str | None, dims: Any) -> tuple[str, str]:
    """(trtexec flag, caveat): the spec of ``fmt``, else its precision in linear layout and why."""
    spec = trtexec_format(fmt, dims)
    caveat = ""
    if spec is None:
        prec = lf.precision_from_format(fmt) or "fp32"
        spec = f"{prec}:chw"
        caveat = (f" '{fmt}' is TensorRT's own layout, which trtexec cannot request: a cheaper {prec.upper()} "
                  "reformat may stay.")
    return f"--{direction}IOFormats={spec}", caveat


def _io_layer(r: dict, direction: str, binding: str) -> dict[str, Any]:
    """Evidence of one reformat/Q layer at a binding, with the trtexec flag that would remove it."""
    fmt_in, fmt_out = _first(r.get("formats_in")), _first(r.get("formats_out"))
    engine_fmt, engine_dims = (fmt_out, r.get("dims_out")) if direction == "input" else (fmt_in, r.get("dims_in"))
    flag, caveat = _io_flag(direction, engine_fmt, _first(engine_dims))
    return {**_layer_ev(r), "direction": direction, "binding": binding, "format_from": fmt_in,
            "format_to": fmt_out, "trtexec_flag": flag, "caveat": caveat}


def _io_remedy(x: dict, flag: str) -> str:
    """The change outside the engine that removes one I/O conversion (``x``: :func:`_io_layer`)."""
    p_from, p_to = lf.precision_from_format(x["format_from"]), lf.precision_from_format(x["format_to"])
    if x["direction"] == "input" and p_to in _QUANTISED and p_from not in _QUANTISED:
        return (f"Quantise in pre-processing instead, fused with normalisation: drop this QuantizeLinear from "
                f"the model so its DequantizeLinear reads an {p_to.upper()} input, apply its scale when preparing "
                f"the input, and build with trtexec {flag}")
    if x["direction"] == "output" and p_from in _QUANTISED and p_to not in _QUANTISED:
        return (f"Dequantise in post-processing instead: drop this DequantizeLinear from the model so it outputs "
                f"{p_from.upper()}, apply its scale after the copy, and build with trtexec {flag}")
    engine = p_to if x["direction"] == "input" else p_from
    stage = "pre-processing" if x["direction"] == "input" else "post-processing"
    as_ = f"as {engine.upper()}" if engine else "in the engine's format"
    return f"Pass '{x['binding']}' {as_}, converted in {stage}: trtexec {flag}"


VECTORISED = re.compile(r"vectori[sz]ed|channel\s*%|hwc\d|chw\d", re.IGNORECASE)
"""Tensor formats that pad the channels to a vector width (TensorRT's chw4/chw32, hwc8/hwc16 ...)."""


def _io_advice(x: dict, inputs: int) -> str:
    """Why Q/DQ placement cannot remove one I/O conversion, what can, and the copy it also shrinks."""
    flag = x["trtexec_flag"] + (" (one spec per input, in binding order)" if x["direction"] == "input"
                                and inputs > 1 else "")
    b_from, b_to = (lf.bytes_per_element(lf.precision_from_format(x[k])) for k in ("format_from", "format_to"))
    copy = "host-to-device" if x["direction"] == "input" else "device-to-host"
    smaller = b_from and b_to and (b_from / b_to if x["direction"] == "input" else b_to / b_from)
    engine_format = x["format_to"] if x["direction"] == "input" else x["format_from"]
    # a vectorised layout pads the channels to its vector width (3 image channels to 4 or 8): the copy's
    # size then depends on the channel count, and may even grow, so no ratio is claimed
    padded = VECTORISED.search(str(engine_format)) is not None
    gain = f" (the {copy} copy also shrinks {smaller:g}x)" if smaller and smaller > 1 and not padded else ""
    return (f"'{x['name']}' converts network {x['direction']} '{x['binding']}' ({x['format_from']} to "
            f"{x['format_to']}); no Q/DQ placement removes it. {_io_remedy(x, flag)}{gain}; or accept the "
            f"cost.{x['caveat']}")


def _reformat_severity(placement_pct: float, io_pct: float, t: Thresholds) -> str:
    """Bands over the share Q/DQ placement can remove; the I/O share rates one band lower (medium at
    most): only a change outside the engine removes it, and the conversion moves into pre-/post-processing."""
    placement = ("high" if placement_pct >= t["high_share_pct"] else
                 "medium" if placement_pct >= t["medium_share_pct"] else "low")
    io = "medium" if io_pct >= t["io_medium_share_pct"] else "low"
    return min(placement, io, key=SEVERITIES.index)


def _reformat_title(key: str, costly: pd.DataFrame, io: list[dict], io_pct: float) -> str:
    share = float(costly["share_pct"].sum())
    title = (f"{key}: {len(costly)} reformat/Q-DQ layer(s) cost {costly['time_avg_ms'].sum():.4f} ms "
             f"({share:.1f}% of layer time)")
    if not io:
        return title
    names = ", ".join(dict.fromkeys(x["binding"] for x in io))
    if len(io) == len(costly):
        return f"{title}, all converting network I/O ({names})"
    return (f"{title}; {len(io)} of them ({io_pct:.1f}%) convert{'s' if len(io) == 1 else ''} network I/O "
            f"({names})")


@rule("unfused_reformat", scope="layers", defaults={"time_ms": 0.0, "high_share_pct": 10.0, "medium_share_pct": 3.0,
                                                    "io_medium_share_pct": 10.0})
def unfused_reformat(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Reformat, copy and stand-alone Q/DQ layers that cost time; those converting a network input or
    output (removable only by I/O formats) are told apart from those Q/DQ placement can remove."""
    f = v.layers
    mask = [lf.is_reformat(name, kind) for name, kind in zip(f["name"], f["type"])]
    ref = f[pd.Series(mask, index=f.index, dtype=bool)]  # bool even when empty (else it selects columns)
    costly = ref[ref["time_avg_ms"].fillna(0) > t["time_ms"]]
    if costly.empty:
        return []
    recs = costly.sort_values("time_avg_ms", ascending=False).to_dict("records")
    at_io = [(r, b) for r in recs if (b := _io_binding(r))]
    io = [_io_layer(r, *b) for r, b in at_io]
    share = float(costly["share_pct"].sum())
    io_pct = float(sum(_num(r.get("share_pct")) or 0.0 for r, _ in at_io))
    inputs = len({n for x in f.get("network_inputs", []) for n in _listed(x)})
    advice = [_io_advice(x, inputs) for x in io[:3]]
    if len(io) < len(costly):
        advice.insert(0, f"Inside the network ({share - io_pct:.1f}% of layer time): {_PLACEMENT_ADVICE}"
                      if io else _PLACEMENT_ADVICE)
    qdq = int(sum(bool(re.match(r"(Quantize|Dequantize|QuantLinear|DequantLinear)", n)) for n in ref["name"]))
    return [Finding(
        rule="unfused_reformat", severity=_reformat_severity(share - io_pct, io_pct, t), variant=v.key,
        title=_reformat_title(v.key, costly, io, io_pct),
        evidence={"reformat_layers": int(len(ref)), "costly_layers": int(len(costly)), "qdq_layers": qdq,
                  "time_ms": float(costly["time_avg_ms"].sum()), "share_pct": share,
                  "placement_share_pct": share - io_pct, "io_share_pct": io_pct, "io_layers": io,
                  "top": [_layer_ev(r) for r in recs[:5]]},
        threshold=t.pick("time_ms"),
        recommendation=" ".join(advice))]


@rule("precision_fallback", scope="layers", defaults={"medium_share_pct": 10.0})
def precision_fallback(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Layers computing in a higher precision than the variant asked for."""
    want = v.precision
    if want not in lf.PRECISION_RANK or lf.PRECISION_RANK[want] <= lf.PRECISION_RANK["fp32"]:
        return []
    rows = []
    for r in v.layers.to_dict("records"):
        p = lf.compute_precision(r)
        if p in lf.PRECISION_RANK and lf.PRECISION_RANK[p] < lf.PRECISION_RANK[want] \
                and not lf.is_reformat(r["name"], r.get("type")):
            rows.append(r)
    timed = [r for r in rows if (r.get("time_avg_ms") or 0) > 0]
    if not timed:
        return []
    share = sum(_num(r.get("share_pct")) or 0.0 for r in timed)
    by_prec: dict[str, int] = {}
    for r in timed:
        by_prec[lf.compute_precision(r)] = by_prec.get(lf.compute_precision(r), 0) + 1
    timed.sort(key=lambda r: -(r.get("time_avg_ms") or 0))
    return [Finding(
        rule="precision_fallback", severity="medium" if share >= t["medium_share_pct"] else "low", variant=v.key,
        title=f"{v.key}: {len(timed)} layer(s) ({share:.1f}% of layer time) run in higher precision than "
              f"the requested {want}",
        evidence={"requested": want, "layers_by_precision": by_prec, "share_pct": share,
                  "time_ms": float(sum(r.get("time_avg_ms") or 0 for r in timed)),
                  "layers": [_layer_ev(r) for r in timed[:10]]},
        threshold={"precision": want},
        recommendation="TensorRT kept these layers in higher precision (no faster kernel, or missing Q/DQ "
                       "scales). Add Q/DQ around them (int8), check their types are supported in the lower "
                       "precision, or accept them if their share is small.")]


@rule("tiny_layers", scope="layers", defaults={"tiny_ms": 0.010, "min_count": 10, "min_fraction": 0.3})
def tiny_layers(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Many layers under ``tiny_ms``: launch cost dominates, candidates for CUDA graphs or fusion."""
    tiny_ms, min_count, min_fraction = t["tiny_ms"], t["min_count"], t["min_fraction"]
    timed = _timed(v.layers)
    if timed.empty:
        return []
    tiny = timed[timed["time_avg_ms"] < tiny_ms]
    frac = len(tiny) / len(timed)
    if len(tiny) < min_count or frac < min_fraction:
        return []
    return [Finding(
        rule="tiny_layers", severity="low", variant=v.key,
        title=f"{v.key}: {len(tiny)} of {len(timed)} timed layers take under {tiny_ms * 1000:g} us each",
        evidence={"tiny_layers": int(len(tiny)), "timed_layers": int(len(timed)), "fraction": frac,
                  "tiny_time_ms": float(tiny["time_avg_ms"].sum()), "tiny_share_pct": float(tiny["share_pct"].sum()),
                  "median_layer_ms": float(timed["time_avg_ms"].median())},
        threshold=t.pick("tiny_ms", "min_count", "min_fraction"),
        recommendation="Per-kernel launch cost is comparable to the work: run under a CUDA graph "
                       "(--useCudaGraph), batch more work per query, or fuse the small layers.")]


def tensor_core_kind(tactic: str | None) -> str:
    """'tensor-core', 'no-tensor-core' or 'unknown' from a tactic (kernel) name, read by the one table of
    kernel names (:mod:`profiler.kernel_math`)."""
    return {True: "tensor-core", False: "no-tensor-core"}.get(uses_tensor_cores(tactic), "unknown")


def _is_gemm(r: dict) -> bool:
    return bool(_GEMM_TYPES.search(str(r.get("type") or ""))) and not lf.is_reformat(r["name"], r.get("type"))


@rule("no_tensor_cores", scope="layers", defaults={"medium_share_pct": 10.0})
def no_tensor_cores(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Convolution/GEMM layers whose tactics do not use Tensor Cores."""
    rows = [r for r in v.layers.to_dict("records") if _is_gemm(r) and tensor_core_kind(r.get("tactic")) ==
            "no-tensor-core"]
    if not rows:
        return []
    share = sum(_num(r.get("share_pct")) or 0.0 for r in rows)
    rows.sort(key=lambda r: -(_num(r.get("time_avg_ms")) or 0))
    timed = any(_num(r.get("share_pct")) is not None for r in rows)
    where = f"{share:.1f}% of layer time" if timed else "no layer times: a profile is missing"
    return [Finding(
        rule="no_tensor_cores", severity="medium" if share >= t["medium_share_pct"] else "low", variant=v.key,
        title=f"{v.key}: {len(rows)} convolution/GEMM layer(s) ({where}) run kernels "
              "without Tensor Cores",
        evidence={"layers": [_layer_ev(r) for r in rows[:10]], "count": len(rows), "share_pct": share},
        threshold={"heuristic": "the tactic's kernel name says it runs without Tensor Cores (scudnn, int8x4 cuDNN, "
                                "sgemm, simt/ffma, f32f32_f32f32 XMMA, sm50 XMMA; profiler.kernel_math)"},
        recommendation="Tensor Core kernels need fp16/bf16/int8 (or TF32) math and aligned channel counts; "
                       "check the layer's precision and channels, or whether TF32 was disabled.")]


@rule("channel_alignment", scope="layers", defaults={"fp16_multiple": 8, "int8_multiple": 32, "max_image_channels": 4})
def channel_alignment(v: LayerContext, t: Thresholds) -> list[Finding]:
    """Conv/GEMM channel counts not multiples of 8 (fp16, bf16) or 32 (int8)."""
    multiple = {"fp16": t["fp16_multiple"], "bf16": t["fp16_multiple"], "int8": t["int8_multiple"]}
    rows, image = [], 0
    for r in v.layers.to_dict("records"):
        if not _is_gemm(r):
            continue
        need = multiple.get(lf.compute_precision(r) or "")
        dims_in, dims_out = r.get("dims_in"), r.get("dims_out")
        if not need or not isinstance(dims_in, list) or not dims_in or not isinstance(dims_in[0], list):
            continue
        if len(dims_in[0]) < 2:
            continue
        groups = int(_num(r.get("groups")) or 1)
        c_in = int(dims_in[0][1])
        k_out = int(_num(r.get("out_maps")) or (dims_out[0][1] if isinstance(dims_out, list) and dims_out
                                                and len(dims_out[0]) > 1 else 0))
        cg, kg = c_in // max(groups, 1), k_out // max(groups, 1)
        if groups > 1 and cg == 1:
            continue  # depthwise: no Tensor Core path either way
        if c_in <= t["max_image_channels"] and k_out % need == 0:
            image += 1
            continue
        if cg % need or (kg and kg % need):
            rows.append({**_layer_ev(r), "input_channels": c_in, "output_channels": k_out, "groups": groups,
                         "multiple_of": need})
    if not rows:
        return []
    share = sum(float(r["share_pct"] or 0) for r in rows)
    return [Finding(
        rule="channel_alignment", severity="low", variant=v.key,
        title=f"{v.key}: {len(rows)} convolution/GEMM layer(s) have channel counts not aligned for Tensor Cores",
        evidence={"layers": rows[:10], "count": len(rows), "share_pct": share, "image_input_layers_skipped": image},
        threshold=t.pick("fp16_multiple", "int8_multiple"),
        recommendation="Pad channels to a multiple of 8 (fp16) or 32 (int8) in the model; TensorRT otherwise "
                       "pads at run time or falls back to slower kernels.")]


# -- trtexec's warnings from timing data -----------------------------------------------------------------
def _median(v: LayerContext, key: str) -> tuple[float | None, str]:
    """Median of one timing part: trtexec's printed value if present, else ours from the export."""
    t = (v.trtexec.get(key) or {}).get("median") if v.trtexec else None
    if t is not None:
        return float(t), "trtexec summary"
    s = ((v.summary or {}).get(key) or {}).get("median")
    return (float(s), "timing export") if s is not None and s == s else (None, "")


@rule("launch_overhead", scope="layers", defaults={"enqueue_over_compute": ENQUEUE_BOUND_RATIO})
def launch_overhead(v: LayerContext, t: Thresholds) -> list[Finding]:
    """trtexec's enqueue-bound warning: the median enqueue takes more than 0.8 x the median GPU compute."""
    ratio = t["enqueue_over_compute"]
    enq, src = _median(v, "enqueue_ms")
    comp, _ = _median(v, "gpu_compute_ms")
    if enq is None or not comp or enq <= ratio * comp:
        return []
    return [Finding(
        rule="launch_overhead", severity="medium", variant=v.key,
        title=f"{v.key} is enqueue-bound: the host spends {enq:.4f} ms enqueuing {comp:.4f} ms of GPU compute",
        evidence={"median_enqueue_ms": enq, "median_compute_ms": comp, "enqueue_over_compute": enq / comp,
                  "source": src},
        threshold=t.pick("enqueue_over_compute"),
        recommendation="Use CUDA graphs (trtexec --useCudaGraph), batch more work per query, or run several "
                       "streams so launches overlap compute.")]


@rule("transfer_bound", scope="layers", defaults={"transfer_over_compute": TRANSFER_BOUND_RATIO})
def transfer_bound(v: LayerContext, t: Thresholds) -> list[Finding]:
    """trtexec's transfer-bound warning: the median H2D or D2H copy takes at least the median GPU compute."""
    comp, _ = _median(v, "gpu_compute_ms")
    h2d, _ = _median(v, "h2d_ms")
    d2h, _ = _median(v, "d2h_ms")
    if not comp:
        return []
    worst = max(h2d or 0.0, d2h or 0.0)
    if worst < t["transfer_over_compute"] * comp or worst <= 0:
        return []
    which = "H2D" if (h2d or 0.0) >= (d2h or 0.0) else "D2H"
    return [Finding(
        rule="transfer_bound", severity="medium", variant=v.key,
        title=f"{v.key} is transfer-bound: {which} copies take {worst:.4f} ms against {comp:.4f} ms of compute",
        evidence={"median_h2d_ms": h2d, "median_d2h_ms": d2h, "median_compute_ms": comp},
        threshold=t.pick("transfer_over_compute"),
        recommendation="Keep data on the device between queries or overlap copies with compute "
                       "(trtexec --noDataTransfers measures compute alone).")]


@rule("jitter", scope="layers", defaults={"cov_pct": None, "medium_over_limit": JITTER_MEDIUM_OVER_LIMIT})
def jitter(v: LayerContext, t: Thresholds) -> list[Finding]:
    """trtexec's unstable-timing warning: the GPU compute time's CoV above its TensorRT version's limit
    (``cov_pct`` None: trtexec's own, :func:`profiler.rules._trtexec.jitter_cov_limit`)."""
    g = (v.summary or {}).get("gpu_compute_ms") or {}
    cov = v.trtexec.get("gpu_compute_cov_pct") if v.trtexec else None
    cov = cov if cov is not None else g.get("cov_pct")
    given = t["cov_pct"]
    limit, why = jitter_cov_limit(v.tensorrt_version) if given is None else (float(given), "given by the caller")
    if cov is None or cov != cov or cov <= limit:
        return []
    return [Finding(
        rule="jitter", severity="medium" if cov > t["medium_over_limit"] * limit else "low", variant=v.key,
        title=f"{v.key} is unstable: GPU compute time varies by {cov:.2f}% (CoV) across {g.get('count')} queries",
        evidence={"compute_cov_pct": cov, "median_compute_ms": g.get("median"), "p99_compute_ms": g.get("p99"),
                  "max_compute_ms": g.get("max")},
        threshold={"cov_pct": limit, "why": why},
        recommendation="Lock GPU clocks, keep other work off the GPU, run longer (--duration) and compare "
                       "medians rather than means.")]


def run_layer_rules(engines: list[LayerContext], overrides: Overrides | None = None) -> list[Finding]:
    """Every layer rule over every engine (one :class:`LayerContext` each); most severe first."""
    return sort_findings([f for e in engines for f in run_rules("layers", e, overrides=overrides).findings])
