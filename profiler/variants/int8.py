"""INT8 variant: QuantizeLinear/DequantizeLinear pairs inserted by ONNX Runtime's static quantizer.

This is the explicit-quantization model TensorRT's strongly typed builder expects:

- ``quantize_static`` with ``QuantFormat.QDQ``, int8 activations and weights, both symmetric
  (zero point 0; TensorRT supports only symmetric int8), per-channel weight scales;
- Q/DQ on the inputs of the layers where int8 pays off and TensorRT fuses the pairs: Conv,
  ConvTranspose, Gemm, MatMul, plus pooling and Concat/Add so a quantized tensor can flow between
  them without a round trip to float (``QUANTIZED_OP_TYPES``); everything else stays float32;
- a layer kept in float32 (``keep_fp32``) reads the float tensor: the quantizer leaves its weights
  alone but lets it share its siblings' quantized input, which is rewired to the float original;
- activations the quantizer would fold away (Relu, Clip) are kept explicit
  (``QDQKeepRemovableActivations``), so the graph still says what the network computes;
- calibration ``entropy`` | ``minmax`` | ``percentile`` (99.999th) mapped to ONNX Runtime's
  ``CalibrationMethod``. ``entropy`` is TensorRT's: KL divergence over a 2048-bin |x| histogram
  against 128 levels, thresholds computed here (:func:`entropy_threshold`) and handed to
  ``quantize_static`` as a range cache, because its own entropy calibrator uses 128 bins for 128
  levels (no search: it equals minmax) and is slow. Data from ``--calib`` or, without it, seeded
  random inputs, in which case the result is flagged meaningless.

The model is first pre-processed by ONNX Runtime's ``quant_pre_process`` (ONNX shape inference and
basic graph optimisation, e.g. folding BatchNormalization into the preceding Conv, as TensorRT
would). If pre-processing fails the original graph is quantized and a warning says so.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from profiler.errors import InputError

#: bump when the quantization recipe changes, so cached int8 models are remade
RECIPE_VERSION = 7  # 7: tensors with a non-finite or out-of-bound calibrated range stay float
#: Ops that mark a model as quantized already (static Q/DQ or dynamic quantization).
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
                           "MatMulInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLSTM",
                           "DynamicQuantizeMatMul", "MatMulIntegerToFloat"})

QUANTIZED_OP_TYPES: tuple[str, ...] = (
    "Conv", "ConvTranspose", "Gemm", "MatMul",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Add", "Concat",
)

PERCENTILE = 99.999

#: Declared threshold: a tensor whose calibrated range is not finite, or reaches beyond +-this
#: value, is kept in float (its Q/DQ consumers and producer are excluded from quantization). Such a
#: range is an attention mask's additive -1e38/-inf or an overflow, not an activation 255 int8
#: levels can hold: at 1e6 one step is 7,874, and past ~1.7e38 the float32 scale itself is inf.
INT8_MAX_ABS_RANGE = 1e6

#: per-channel DequantizeLinear (its ``axis`` attribute) needs opset 13
MIN_QDQ_OPSET = 13


def _ensure_opset(src: Path, dst: Path, minimum: int) -> str | None:
    """Upgrade ``src`` to ``minimum`` opset into ``dst`` when it is older; returns a note, or None."""
    import onnx
    from onnx import version_converter

    model = onnx.load(str(src))
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), minimum)
    if current >= minimum:
        return None
    try:
        upgraded = version_converter.convert_version(model, minimum)
    except Exception as exc:
        raise InputError(f"int8: {str(src)!r} uses opset {current}; per-channel Q/DQ needs opset {minimum} "
                         f"and the ONNX version converter failed: {type(exc).__name__}: {exc}") from exc
    onnx.save(upgraded, str(dst))
    return f"int8: opset upgraded from {current} to {minimum} (per-channel Q/DQ needs it)"


def quantizer_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def _calibration_method(name: str):
    from onnxruntime.quantization import CalibrationMethod

    return {"entropy": CalibrationMethod.Entropy, "minmax": CalibrationMethod.MinMax,
            "percentile": CalibrationMethod.Percentile}[name]


ENTROPY_BINS = 2048
ENTROPY_QUANTIZED_BINS = 128
#: candidate thresholds are tried every ENTROPY_STRIDE bins (TensorRT tries each; 16 keeps it fast)
ENTROPY_STRIDE = 16


def _supports_range_cache() -> bool:
    """onnxruntime >= 1.24-ish: quantize_static takes a calibration_cache_path of tensor ranges."""
    import inspect

    from onnxruntime.quantization import quantize_static

    return "calibration_cache_path" in inspect.signature(quantize_static).parameters


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, *, quantized_bins: int = ENTROPY_QUANTIZED_BINS,
                      stride: int = ENTROPY_STRIDE) -> float:
    """The |x| clipping threshold minimising KL(P || Q), TensorRT's entropy calibration.

    ``hist`` counts |x| over ``edges`` (bins from 0). For each candidate bin count i (every
    ``stride``-th from ``quantized_bins``), P is the first i bins with the clipped tail added to the
    last one, Q the same bins merged into ``quantized_bins`` levels and spread back over the
    non-empty bins; the threshold is the upper edge of the best i.
    """
    hist = np.asarray(hist, dtype=np.float64)
    n = hist.size
    if n <= quantized_bins or hist.sum() == 0:
        return float(edges[-1])
    best_kl, best_i = np.inf, n
    for i in list(range(quantized_bins, n, stride)) + [n]:
        ref = hist[:i]
        p = ref.copy()
        p[-1] += hist[i:].sum()
        group = (np.arange(i) * quantized_bins) // i
        nonzero = ref > 0
        sums = np.bincount(group, weights=ref, minlength=quantized_bins)
        counts = np.bincount(group, weights=nonzero, minlength=quantized_bins)
        q = np.where(nonzero, sums[group] / np.maximum(counts[group], 1), 0.0)
        p_sum, q_sum = p.sum(), q.sum()
        if p_sum == 0 or q_sum == 0:
            continue
        p, q = p / p_sum, q / q_sum
        mask = p > 0
        if np.any(q[mask] == 0):  # P has mass where Q has none: the clipped tail bin
            q = np.where(mask & (q == 0), 1e-12, q)
        kl = float(np.sum(p[mask] * np.log(p[mask] / q[mask])))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(edges[best_i])


def _entropy_ranges(model: Path, op_types: list[str], reader, out: Path, work_dir: Path) -> None:
    """Collect 2048-bin |x| histograms with ONNX Runtime, pick entropy thresholds, save the ranges."""
    import tempfile

    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data

    with tempfile.TemporaryDirectory(prefix="calib.", dir=work_dir) as tmp:
        # the percentile calibrator's collector builds exactly the symmetric |x| histograms needed
        calibrator = create_calibrator(
            model, op_types, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.Percentile,
            extra_options={"symmetric": True, "num_bins": ENTROPY_BINS})
        calibrator.collect_data(reader)
        ranges = {}
        for name, entry in calibrator.collector.histogram_dict.items():
            hist, edges = entry[0], entry[1]
            t = np.float32(entropy_threshold(hist, edges))
            ranges[name] = TensorData(lowest=np.float32(-t), highest=t)
        save_tensors_data(TensorsData(CalibrationMethod.Entropy, ranges), out)
        del calibrator


def _unquantize_inputs(model, names: set[str], op_types: set[str]) -> None:
    """Point the inputs of excluded nodes back at the float tensors their Q/DQ pairs came from."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.name not in names and node.op_type not in op_types:
            continue
        for k, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                node.input[k] = q.input[0]


def _bad_ranges(ranges_path: Path) -> dict[str, str]:
    """Tensor name -> why its calibrated range cannot be int8 (not finite, or beyond INT8_MAX_ABS_RANGE)."""
    from onnxruntime.quantization.calibrate import load_tensors_data

    bad = {}
    for name, data in load_tensors_data(ranges_path).data.items():
        lo, hi = (float(np.asarray(v).max(initial=-np.inf) if i else np.asarray(v).min(initial=np.inf))
                  for i, v in enumerate(data.range_value))
        if not (np.isfinite(lo) and np.isfinite(hi)):
            bad[name] = f"calibrated range [{lo:g}, {hi:g}] is not finite"
        elif max(abs(lo), abs(hi)) > INT8_MAX_ABS_RANGE:
            bad[name] = f"calibrated range [{lo:g}, {hi:g}] exceeds +-{INT8_MAX_ABS_RANGE:g}"
    return bad


def _nodes_touching(model_path: Path, tensors: dict[str, str], op_types: list[str]) -> list[dict[str, str]]:
    """The quantizable nodes that read or write a tensor of ``tensors``, each with the tensor and the reason."""
    import onnx

    out = []
    for node in onnx.load(str(model_path), load_external_data=False).graph.node:
        if node.op_type not in op_types or not node.name:
            continue
        hit = next((t for t in list(node.input) + list(node.output) if t in tensors), None)
        if hit is not None:
            out.append({"node": node.name, "op_type": node.op_type, "tensor": hit, "reason": tensors[hit]})
    return out


def _make_reader(samples: list[dict], progress: Callable[[str], None] | None, method: str):
    """A CalibrationDataReader over ``samples`` that reports progress as the calibrator consumes it.

    Defined at call time because onnxruntime is imported only when int8 is asked for.
    """
    from onnxruntime.quantization import CalibrationDataReader

    step = max(1, len(samples) // 10)  # about ten progress lines, however many samples

    class SampleReader(CalibrationDataReader):
        def __init__(self) -> None:
            self.index = 0

        def get_next(self) -> dict | None:
            if self.index >= len(samples):
                return None
            self.index += 1
            if progress is not None and (self.index % step == 0 or self.index == len(samples)):
                progress(f"int8: calibrating ({method}) sample {self.index}/{len(samples)}")
            return samples[self.index - 1]

        def rewind(self) -> None:
            self.index = 0

    return SampleReader()


class _LogCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def quantize_int8(src: Path, dst: Path, samples: list[dict], *, method: str,
                  keep_fp32: list[str], work_dir: Path, progress: Callable[[str], None] | None) -> dict[str, Any]:
    """Pre-process, calibrate and quantize ``src`` into ``dst``; return what was done."""
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quant_pre_process, quantize_static

    from profiler.models.inspect import load_model_proto

    warnings: list[str] = []
    original = load_model_proto(src)
    op_types = {n.op_type for n in original.graph.node}
    quantized = sorted(op_types & QUANTIZED_OPS)
    if quantized:
        raise InputError(f"{src.name} is quantized already (it has {', '.join(quantized)} nodes): int8 calibration "
                         "applies to float models; its fp32 variant runs its own integer arithmetic")
    exclude_ops = {k for k in keep_fp32 if k in op_types}
    exclude_nodes = sorted(k for k in keep_fp32 if k not in op_types)
    quant_ops = [op for op in QUANTIZED_OP_TYPES if op not in exclude_ops]

    pre = work_dir / (dst.stem + ".pre.onnx")
    to_quantize = src
    if progress:
        progress("int8: pre-processing (shape inference, graph optimisation)")
    try:
        # symbolic shape inference is skipped: it helps transformers with symbolic dims, fails on
        # many CNN exports, and on failure drops a temporary model into the working directory
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        to_quantize = pre
        preprocessed = True
    except Exception as exc:
        preprocessed = False
        warnings.append(f"int8: pre-processing failed ({type(exc).__name__}: {exc}); "
                        "quantizing the original graph (BatchNormalization stays unfused)")
    opset_note = _ensure_opset(to_quantize, pre, MIN_QDQ_OPSET)
    if opset_note:
        to_quantize = pre
        warnings.append(opset_note)
    reader = _make_reader(samples, progress, method)
    extra: dict[str, Any] = {"ActivationSymmetric": True, "WeightSymmetric": True,
                             "QDQKeepRemovableActivations": True}
    if method == "percentile":
        extra["CalibPercentile"] = PERCENTILE
    kwargs: dict[str, Any] = {}
    collector = _LogCollector()
    root = logging.getLogger()
    root.addHandler(collector)
    t0 = time.perf_counter()
    printed = io.StringIO()  # the calibrators print their histogram chatter to stdout
    ranges = work_dir / (dst.stem + ".ranges.json")
    entropy_bins = None
    cache_ranges = _supports_range_cache()
    bad_range_nodes: list[dict[str, str]] = []
    try:
        with contextlib.redirect_stdout(printed):
            if method == "entropy" and _supports_range_cache():
                # quantize_static's own entropy calibrator has 128 histogram bins for 128 quantized
                # bins, i.e. no threshold to search (it degenerates to min-max), and its search is
                # slow Python. Calibrate as TensorRT's entropy calibrator does (2048 bins, KL
                # divergence against 128 levels) and hand the ranges over.
                _entropy_ranges(to_quantize, quant_ops, reader, ranges, work_dir)
                kwargs["calibration_cache_path"] = str(ranges)
                reader = None
                entropy_bins = ENTROPY_BINS
            def run(data_reader, excluded):
                quantize_static(str(to_quantize), str(dst), data_reader, quant_format=QuantFormat.QDQ,
                                op_types_to_quantize=quant_ops, per_channel=True, reduce_range=False,
                                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                                nodes_to_exclude=excluded, calibrate_method=_calibration_method(method),
                                extra_options=extra, **kwargs)

            if cache_ranges and "calibration_cache_path" not in kwargs:
                kwargs["calibration_cache_path"] = str(ranges)  # quantize_static writes the ranges there
            try:
                try:
                    run(reader, exclude_nodes)
                except ValueError as exc:
                    # onnxruntime 1.19-1.32 compares a per-channel weight scale array as a scalar when it
                    # adjusts weight scales for int32 biases (magika's Dense layers); without that
                    # adjustment the quantization is the one older releases made
                    if "truth value of an array" not in str(exc):
                        raise
                    extra["QDQDisableWeightAdjustForInt32Bias"] = True
                    warnings.append("int8: onnxruntime's weight-scale adjustment for int32 biases failed on "
                                    "per-channel scales; quantized without it")
                    run(None if ranges.is_file() else _make_reader(samples, progress, method), exclude_nodes)
            except Exception as exc:
                # an inf/NaN range makes the quantizer fail on its scale: keep those tensors float instead
                if not (ranges.is_file() and _bad_ranges(ranges)):
                    raise
                failed: Exception | None = exc
            else:
                failed = None
            bad_range_nodes = _nodes_touching(to_quantize, _bad_ranges(ranges), quant_ops) if ranges.is_file() else []
            if failed is not None and not bad_range_nodes:
                raise failed
            if bad_range_nodes:
                exclude_nodes = sorted(set(exclude_nodes) | {k["node"] for k in bad_range_nodes})
                run(None, exclude_nodes)  # the ranges are cached: no second calibration
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"int8 quantization of {str(src)!r} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        root.removeHandler(collector)
        pre.unlink(missing_ok=True)
        ranges.unlink(missing_ok=True)
    if method == "entropy" and entropy_bins is None:
        warnings.append("int8: this onnxruntime cannot take precomputed ranges; its entropy calibration uses "
                        "128 histogram bins, which makes it equivalent to minmax")
    calib_s = time.perf_counter() - t0
    if bad_range_nodes:
        warnings.append(f"int8: kept in float32 (calibrated range not finite or beyond +-{INT8_MAX_ABS_RANGE:g}, "
                        "INT8_MAX_ABS_RANGE): " + "; ".join(f"{k['node']} ({k['tensor']}: {k['reason']})"
                                                           for k in bad_range_nodes[:10])
                        + (f"; and {len(bad_range_nodes) - 10} more" if len(bad_range_nodes) > 10 else ""))
    elif not cache_ranges:
        warnings.append("int8: this onnxruntime cannot save calibrated ranges, so tensors with an infinite or "
                        "huge range (an attention mask) were not looked for and may carry an inf scale")
    quantized = onnx.load(str(dst))
    if exclude_nodes or exclude_ops:
        _unquantize_inputs(quantized, set(exclude_nodes), exclude_ops)
        onnx.save(quantized, str(dst))
    counts: dict[str, int] = {}
    for n in quantized.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    dq_outputs = {n.output[0] for n in quantized.graph.node if n.op_type == "DequantizeLinear"}
    compute = [n for n in quantized.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
    # a compute layer runs in int8 only when both its data and weight inputs come through Q/DQ
    kept = [n.name for n in compute if not all(i in dq_outputs for i in n.input[:2])]
    if not counts.get("QuantizeLinear"):
        inside = any(n.op_type in ("If", "Loop", "Scan") for n in quantized.graph.node)
        warnings.append("int8: no node was quantized, so this variant computes in float32"
                        + (" (the model's layers sit inside If/Loop/Scan subgraphs, which onnxruntime's quantizer "
                           "does not enter)" if inside else ""))
    return {
        "converter": "onnxruntime.quantization quantize_static (QDQ)",
        "converter_version": quantizer_version(),
        "preprocessed": preprocessed,
        "quant_format": "QDQ", "activation_type": "int8", "weight_type": "int8",
        "symmetric": True, "per_channel": True,
        "op_types_quantized": quant_ops,
        "excluded_nodes": exclude_nodes,
        "q_nodes": counts.get("QuantizeLinear", 0), "dq_nodes": counts.get("DequantizeLinear", 0),
        "nodes_kept_fp32": kept,
        "nodes_kept_fp32_bad_range": bad_range_nodes,
        "max_abs_range": INT8_MAX_ABS_RANGE,
        "calibration_s": round(calib_s, 3),
        "entropy_bins": entropy_bins,
        "quantizer_log": sorted(set(collector.messages))[:20],
        "warnings": warnings,
    }


def prepare_int8(src: Path, info_src, shapes: dict, *, base: dict, cache, calib, calib_method: str,
                 progress, keep_fp32: list[str], seed: int, random_calib_samples: int,
                 holdout_fraction: float, started: float):
    """The int8 branch of :func:`profiler.variants.prepare` (cache lookup, calibration data, quantize)."""
    from profiler.models import file_sha256, load_samples, random_samples, samples_hash, split_holdout
    from profiler.variants import RANDOM_CALIBRATION_WARNING, PreparedModel
    from profiler.variants.cache import cache_key

    if calib is not None:
        samples = load_samples(calib, info_src, shapes)
        samples, held_out = split_holdout(samples, holdout_fraction)
        source, meaningless = str(calib), False
    else:
        samples = random_samples(info_src, shapes, seed=seed, count=random_calib_samples)
        held_out, source, meaningless = [], "random", True
    data_hash = samples_hash(samples)
    import onnx

    key = cache_key({"model": info_src.model_hash, "precision": "int8", "calib_data": data_hash,
                     "method": calib_method, "quantizer": quantizer_version(), "onnx": onnx.__version__,
                     "keep_fp32": keep_fp32, "recipe": RECIPE_VERSION, "ops": list(QUANTIZED_OP_TYPES)})
    calibration = {"source": source, "samples": len(samples), "held_out_samples": len(held_out),
                   "method": calib_method, "data_hash": data_hash, "meaningless": meaningless,
                   "cache_hit": False}
    hit = cache.lookup(key, "int8")
    if hit is not None:
        path, stored = hit
        if progress:
            progress(f"int8: reusing cached calibration {path.name} (no recalibration)")
        info = {**base, **stored, "cache_key": key}
        info["calibration"] = {**stored.get("calibration", {}), **calibration, "cache_hit": True}
    else:
        if progress:
            progress(f"int8: calibrating {src.name} on {len(samples)} "
                     f"{'random' if meaningless else 'calibration'} samples ({calib_method})")
        tmp = cache.new_temp_path("int8")
        try:
            made = quantize_int8(src, tmp, samples, method=calib_method, keep_fp32=keep_fp32,
                                 work_dir=cache.root, progress=progress)
            made["calibration"] = dict(calibration)
            path = cache.store(key, "int8", tmp, made)
        finally:
            tmp.unlink(missing_ok=True)
        info = {**base, **made, "cache_key": key}
    warnings = list(info.get("warnings", []))
    if meaningless and RANDOM_CALIBRATION_WARNING not in warnings:
        warnings.insert(0, RANDOM_CALIBRATION_WARNING)
    info["warnings"] = warnings
    if progress and info.get("nodes_kept_fp32_bad_range"):
        # a decision about the model that is timed: said, not only stored
        progress(next(w for w in warnings if w.startswith("int8: kept in float32")))
    info["cache_hit"] = info["calibration"]["cache_hit"]
    info["prepare_s"] = round(time.perf_counter() - started, 3)
    return PreparedModel(path, "int8", info, file_sha256(path), dict(shapes))
