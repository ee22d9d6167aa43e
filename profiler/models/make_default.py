"""Write the bundled default model, ``tiny_convnet.onnx``: a small seeded CNN classifier.

``trtprof sweep`` with no model runs it, so the first command in the README works anywhere. The
network is an image classifier as it looks after export with batch norm folded into the
convolutions: three Conv+Relu stages (two followed by 2x2 MaxPool), global average pooling, a Gemm
head and Softmax; 1x3x64x64 float32 in, 1x10 class probabilities out, opset 17, static shapes.
Weights are He-initialised from a fixed seed, so running this script reproduces the file byte for
byte (a test checks that)::

    python -m profiler.models.make_default [OUT.onnx]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 20240611
INPUT_SHAPE = (1, 3, 64, 64)
NUM_CLASSES = 10
#: (in_channels, out_channels, followed by MaxPool) per Conv stage
STAGES = ((3, 16, True), (16, 32, True), (32, 64, False))
OPSET = 17


def build_model():
    """The ModelProto (deterministic for a given SEED)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits = [], []
    x = "input"
    for i, (cin, cout, pool) in enumerate(STAGES):
        fan_in = cin * 9
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(cout, cin, 3, 3)).astype(np.float32)
        b = rng.normal(0.0, 0.05, size=(cout,)).astype(np.float32)  # folded BN shift
        inits += [numpy_helper.from_array(w, f"conv{i}.weight"), numpy_helper.from_array(b, f"conv{i}.bias")]
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.weight", f"conv{i}.bias"], [f"conv{i}"],
                                      name=f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"], name=f"relu{i}"))
        x = f"relu{i}"
        if pool:
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{i}"], name=f"pool{i}",
                                          kernel_shape=[2, 2], strides=[2, 2]))
            x = f"pool{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["features"], name="flatten", axis=1))
    cfeat = STAGES[-1][1]
    wfc = rng.normal(0.0, np.sqrt(2.0 / cfeat), size=(NUM_CLASSES, cfeat)).astype(np.float32)
    bfc = rng.normal(0.0, 0.1, size=(NUM_CLASSES,)).astype(np.float32)
    inits += [numpy_helper.from_array(wfc, "fc.weight"), numpy_helper.from_array(bfc, "fc.bias")]
    nodes.append(helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes, "tiny_convnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [INPUT_SHAPE[0], NUM_CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="trtprof", producer_version="make_default")
    model.ir_version = 8
    model.doc_string = "trtprof default model: seeded tiny CNN classifier, 1x3x64x64 -> 10 classes"
    onnx.checker.check_model(model)
    return model


def write(path: Path) -> Path:
    """Serialise the model to ``path`` (deterministic bytes)."""
    model = build_model()
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(__file__).with_name("tiny_convnet.onnx")
    write(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
