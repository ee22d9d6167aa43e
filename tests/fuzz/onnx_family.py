"""Issue 33's ONNX family, generated: every kind of defect a model can carry, crossed with the ops that carry
it and the sizes that make it hurt, each model built with ``onnx.helper`` at test time.

- ``huge-static``: a tensor declared with static dimensions too large for any machine (an input, an
  output, an intermediate's value_info, an initializer's dims without data): refused before anything is
  allocated, exit 3.
- ``no-outputs``: a graph that declares no output: exit 3.
- ``runtime-alloc``: an op whose output shape is computed at run time (ConstantOfShape, Expand, Tile,
  Range) asks for terabytes: ONNX Runtime's failure is one sentence about the model, exit 3.
- ``fails-at-run``: a node that fails at run time (Reshape to a wrong size, Gather out of range, Concat of
  mismatched shapes), named with a terminal escape sequence: exit 3, nothing raw on the terminal.
- ``never-ends``: a Loop that never ends (a trip count of 2^62 and a condition that stays true, or no trip
  count at all) around a body op: stopped by the per-inference time limit, injected tiny, exit 3.

Every case's sizes and names come from ``random.Random(<the case's name>)``: the corpus is the same each run.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

from tests.fuzz.hostile import Case

ESCAPES = ("\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\x07\x08")
#: the time limit the never-ending cases run under (seconds): tiny, so the suite stays fast
TINY_LIMIT_S = "0.3"
SWEEP = ("--no-store", "--duration", "0", "--iterations", "2", "--warmup", "0", "--no-layers")


def _save(tmp: Path, nodes: list, inputs: list, outputs: list, inits: list = (), value_info: list = ()) -> Path:
    from onnx import helper, save

    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits), value_info=list(value_info))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / "model.onnx"
    save(m, str(path))
    return path


def _vi(name: str, shape, elem: int | None = None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT if elem is None else elem, shape)


def _unary(op: str, a: str, out: str, name: str = "") -> object:
    from onnx import helper

    extra = {"axis": 0} if op == "Softmax" else {}
    return helper.make_node(op, [a], [out], name=name or f"{op.lower()}0", **extra)


def _huge_static(where: str, op: str, elements: int) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        from onnx import TensorProto

        small, big = [1, 8], [1, elements]
        x_shape = big if where == "input" else small
        y_shape = big if where == "output" else small
        nodes = [_unary(op, "x", "y")]
        inits, vis = [], []
        if where == "value_info":
            nodes = [_unary(op, "x", "t"), _unary("Identity", "t", "y", "id0")]
            vis = [_vi("t", big)]
        if where == "initializer":  # dims without data: the declared size alone is refused
            w = TensorProto(name="w", data_type=TensorProto.FLOAT)
            w.dims.extend(big)
            inits = [w]
            nodes = [_unary(op, "x", "y")]
        return ["sweep", str(_save(tmp, nodes, [_vi("x", x_shape)], [_vi("y", y_shape)], inits, vis)), *SWEEP]
    return build


def _no_outputs(op: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["sweep", str(_save(tmp, [_unary(op, "x", "y")], [_vi("x", [1, 8])], [])), *SWEEP]


def _runtime_alloc(op: str, elements: int) -> Callable[[Path], list[str]]:
    """``op`` makes a tensor of ``elements`` float32 values from a shape only known at run time."""
    def build(tmp: Path) -> list[str]:
        import numpy as np
        from onnx import helper, numpy_helper

        shape = numpy_helper.from_array(np.array([elements], dtype=np.int64), "shape")
        one = numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one")
        made = {
            "ConstantOfShape": [helper.make_node("ConstantOfShape", ["shape"], ["big"])],
            "Expand": [helper.make_node("Expand", ["one", "shape"], ["big"])],
            "Tile": [helper.make_node("Tile", ["one", "shape"], ["big"])],
            "Range": [helper.make_node("Cast", ["shape"], ["limit"], to=1),
                      helper.make_node("Squeeze", ["limit"], ["limit0"]),
                      helper.make_node("Range", ["zero", "limit0", "step"], ["big"])],
        }[op]
        inits = [shape, one, numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
                 numpy_helper.from_array(np.array(1.0, dtype=np.float32), "step")]
        nodes = [*made, helper.make_node("ReduceSum", ["big"], ["s"], keepdims=1),
                 helper.make_node("Add", ["x", "s"], ["y"])]
        return ["sweep", str(_save(tmp, nodes, [_vi("x", [1, 8])], [_vi("y", [1, 8])], inits)), *SWEEP]
    return build


def _fails_at_run(op: str, escape: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        name = f"{escape}{op.lower()}"
        if op == "Reshape":
            inits = [numpy_helper.from_array(np.array([3, 5], dtype=np.int64), "c")]
            node = helper.make_node("Reshape", ["x", "c"], ["y"], name=name)
        elif op == "Gather":
            inits = [numpy_helper.from_array(np.array([99], dtype=np.int64), "c")]
            node = helper.make_node("Gather", ["x", "c"], ["y"], name=name, axis=1)
        else:  # Concat along axis 0 of [1, 8] and [1, 3]
            inits = [numpy_helper.from_array(np.ones((1, 3), dtype=np.float32), "c")]
            node = helper.make_node("Concat", ["x", "c"], ["y"], name=name, axis=0)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        return ["sweep", str(_save(tmp, [node], [_vi("x", [1, 8])], [y], inits)), *SWEEP]
    return build


def _never_ends(op: str, with_trip_count: bool) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]), _unary(op, "v_in", "v_out", "body0")],
            "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _vi("v_in", [1, 8])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _vi("v_out", [1, 8])])
        inits = [numpy_helper.from_array(np.array(True), "cond"),
                 numpy_helper.from_array(np.array(2**62, dtype=np.int64), "trips")]
        loop = helper.make_node("Loop", ["trips" if with_trip_count else "", "cond", "x"], ["y"], body=body,
                                name="loop")
        return ["sweep", str(_save(tmp, [loop], [_vi("x", [1, 8])], [_vi("y", [1, 8])], inits)), *SWEEP]
    return build


UNARY_OPS = ("Relu", "Identity", "Sigmoid", "Neg", "Softmax", "Abs")


def onnx_cases(per_kind: int = 4) -> list[Case]:
    """A seeded sample of each defect kind x op x size."""
    c: list[Case] = []

    def add(name: str, build, env: tuple = ()) -> None:
        c.append(Case("onnx", name, build, expect=(3,), env=env))

    for where in ("input", "output", "value_info", "initializer"):
        rng = random.Random(f"huge-static-{where}")
        for op in rng.sample(UNARY_OPS, 2):
            elements = rng.choice((2**35, 2**40, 2**50, 2**62))
            add(f"huge-static-{where}-{op}-2^{elements.bit_length() - 1}", _huge_static(where, op, elements))
    for op in random.Random("no-outputs").sample(UNARY_OPS, 2):
        add(f"no-outputs-{op}", _no_outputs(op))
    for op in ("ConstantOfShape", "Expand", "Tile", "Range"):
        elements = random.Random(f"runtime-alloc-{op}").choice((2**42, 2**44, 2**50))  # terabytes: no machine has them
        add(f"runtime-alloc-{op}-2^{elements.bit_length() - 1}", _runtime_alloc(op, elements))
    for op in ("Reshape", "Gather", "Concat"):
        for i, esc in enumerate(random.Random(f"fails-{op}").sample(ESCAPES, 2)):
            add(f"fails-at-run-{op}-escape{i}", _fails_at_run(op, esc))
    for op in random.Random("never-ends").sample(UNARY_OPS, per_kind // 2):
        for trips in (True, False):
            add(f"never-ends-{op}-{'trips' if trips else 'no-trip-count'}", _never_ends(op, trips),
                env=(("TRTPROF_INFERENCE_TIME_LIMIT_S", TINY_LIMIT_S),))
    return c
