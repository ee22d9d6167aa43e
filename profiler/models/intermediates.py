"""Every float tensor of an ONNX model, not only its outputs: the model saved with each float node output
exposed as a graph output and run on ONNX Runtime's CPU provider with no graph optimization, so each tensor
is stored in its declared type as a GPU engine stores it. Precision localization
(:mod:`profiler.compare.precision`) and the float16 converter's overflow scan
(:func:`profiler.variants.fp16.activation_overflow_nodes`) both read them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def expose_all(model_path: str | Path, out_path: Path) -> list[str]:
    """Save a copy of the model with every float node output as a graph output; returns their names."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {vi.name: vi.type.tensor_type.elem_type
                 for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    except Exception:
        types = {}
    existing = {o.name for o in model.graph.output}
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
    names = []
    for node in model.graph.node:
        if node.op_type in ("Constant", "QuantizeLinear"):
            continue
        for out in node.output:
            if not out or out in existing:
                continue
            t = types.get(out)
            if t is not None and t not in floats:
                continue
            model.graph.output.append(helper.make_tensor_value_info(out, t or TensorProto.FLOAT, None)
                                      if t else helper.make_empty_tensor_value_info(out))
            existing.add(out)
            names.append(out)
    onnx.save(model, str(out_path))
    return names


def run_all(model_path: str | Path, feeds: list[dict[str, np.ndarray]], tmp: Path) -> list[dict[str, np.ndarray]]:
    """Every float tensor of the model (graph outputs included), each stored in its declared type.

    ONNX Runtime's CPU provider runs float16 nodes in float32 and removes the casts between
    consecutive nodes, so a float16 model's final outputs never see float16 rounding or overflow in
    between. Exposing every node output forces each one to be materialised in float16, which is what a
    GPU float16 engine does (fp32 accumulation, fp16 storage).
    """
    import onnxruntime as ort

    exposed = tmp / (Path(model_path).stem + ".all.onnx")
    expose_all(model_path, exposed)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every node
    opts.log_severity_level = 4  # fatal only: errors come back as exceptions, printed through our escaping
    sess = ort.InferenceSession(str(exposed), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    results = []
    for f in feeds:
        vals = sess.run(names, f)
        results.append({n: v for n, v in zip(names, vals)
                        if isinstance(v, np.ndarray) and v.dtype.kind == "f"})
    return results
