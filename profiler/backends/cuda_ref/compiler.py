"""The compiler: an ONNX graph -> a flat list of steps for fixed input shapes on one torch device.

The model runs once on zero inputs of the fixed shapes while compiling. Every node whose inputs are all
constant (``Shape`` chains, ``Reshape`` targets, weight transforms) is folded into a constant; every
other node becomes one :class:`Step` whose function only launches kernels (no ``.item()``, no shape
arithmetic on tensors, no host allocation), so a forward pass can be captured into a CUDA graph.
Slots dead after a step are freed by it (liveness), as an inference runtime would reuse the memory.
Unsupported ops raise :class:`~profiler.backends.base.UnsupportedOp` naming the op and node. The op set
is frozen: it is the registry the ``ops_*`` modules fill (``nodes.OPS``), and a test pins it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from profiler.backends.base import BuildError, TensorInfo, UnsupportedOp
from profiler.backends.cuda_ref import ops_math, ops_nn, ops_quant  # noqa: F401 - they register their ops
from profiler.backends.cuda_ref._torch import load_torch
from profiler.backends.cuda_ref.nodes import (NP_NAMES, OPS, Node, np_dtype_name, onnx_dtype,
                                              tensor_from_proto)
from profiler.backends.cuda_ref.ops_shape import SHAPE_OPS, fold_shape_op

BACKEND_NAME = "cuda"

# -- the compiled program ----------------------------------------------------------------------------
@dataclass
class Step:
    """One ONNX node at run time: ``fn(*env[ins])`` into ``outs``; ``frees`` are dead after it."""

    name: str
    op: str
    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    multi: bool
    frees: tuple[int, ...] = ()


@dataclass
class Program:
    """An ONNX graph compiled for fixed input shapes on one torch device (see the module docstring)."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    steps: list[Step]
    template: list[Any]
    input_slots: list[int]
    output_slots: list[int]
    input_casts: list[Any]  # per input: dtype to cast to inside the program, or None
    output_casts: list[Any]
    nodes_total: int
    nodes_folded: int
    op_counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    _plans: dict[bool, list[tuple]] = field(default_factory=dict)

    def plan(self, ranges: Any = None) -> list[tuple]:
        """The hot loop's tuples; with ``ranges`` (an enabled ``profiler.nvtx.Ranges``) each step
        is wrapped in an NVTX range named after its ONNX node."""
        if ranges is None:
            if False not in self._plans:
                self._plans[False] = [(s.fn, s.ins, s.outs[0] if not s.multi else s.outs, s.multi, s.frees)
                                      for s in self.steps]
            return self._plans[False]
        out = []
        for s in self.steps:
            push, pop = ranges.pusher(s.name, color="yellow")
            out.append((_ranged(s.fn, push, pop), s.ins, s.outs[0] if not s.multi else s.outs, s.multi, s.frees))
        return out

    def _bound(self, inputs: Sequence[Any]) -> list[Any]:
        """The slot list for one pass: constants from the template, ``inputs`` (cast where declared)."""
        env = list(self.template)
        for slot, t, cast in zip(self.input_slots, inputs, self.input_casts):
            env[slot] = t if cast is None else t.to(cast)
        return env

    def forward(self, inputs: Sequence[Any], plan: list[tuple] | None = None) -> list[Any]:
        """Run the steps on ``inputs`` (tensors on the program's device, in input order)."""
        env = self._bound(inputs)
        for fn, ins, out, multi, frees in (plan if plan is not None else self.plan()):
            r = fn(*[env[i] for i in ins])
            if multi:
                for k, s in enumerate(out):
                    env[s] = r[k]
            else:
                env[out] = r
            for f in frees:
                env[f] = None
        return [env[s] if c is None else env[s].to(c) for s, c in zip(self.output_slots, self.output_casts)]

    def forward_each(self, inputs: Sequence[Any], after_step: Callable[[int], None]) -> None:
        """``forward`` without freeing, calling ``after_step(k)`` once step ``k`` is enqueued (per-step timing)."""
        env = self._bound(inputs)
        for k, (fn, ins, out, multi, _frees) in enumerate(self.plan()):
            r = fn(*[env[i] for i in ins])
            if multi:
                for j, s in enumerate(out):
                    env[s] = r[j]
            else:
                env[out] = r
            after_step(k)

    def run_numpy(self, feeds: dict[str, np.ndarray], device: Any = "cpu") -> dict[str, np.ndarray]:
        """Convenience for tests and checks: numpy in, numpy out (synchronous)."""
        t = load_torch()
        ins = [t.from_numpy(np.ascontiguousarray(feeds[i.name], dtype=NP_NAMES.get(i.dtype, None))).to(device)
               for i in self.inputs]
        with t.inference_mode():
            outs = self.forward(ins)
        return {o.name: v.detach().cpu().numpy() for o, v in zip(self.outputs, outs)}


def _ranged(fn: Callable[..., Any], push: Callable[[], None], pop: Callable[[], None]) -> Callable[..., Any]:
    def run(*xs: Any) -> Any:
        push()
        try:
            return fn(*xs)
        finally:
            pop()
    return run


def _topo_nodes(graph: Any) -> list[Any]:
    """Nodes in an order where every input is produced before use (ONNX asks for it; check anyway)."""
    produced = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        rest = []
        for nd in pending:
            if all(x in produced for x in nd.input):
                ordered.append(nd)
                produced.update(nd.output)
            else:
                rest.append(nd)
        if len(rest) == len(pending):
            missing = sorted({x for nd in rest for x in nd.input if x not in produced})[:3]
            raise BuildError(f"the ONNX graph uses tensors nothing produces: {', '.join(missing)}")
        pending = rest
    return ordered


@dataclass
class _Build:
    """The compiler's state: build-time values and constness by tensor name, and slot numbers."""

    values: dict[str, Any] = field(default_factory=dict)
    const: dict[str, bool] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    folded: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)

    def slot(self, name: str) -> int:
        if name not in self.slots:
            self.slots[name] = len(self.slots)
        return self.slots[name]


def compile_model(model: Any, shapes: dict[str, tuple[int, ...]] | None = None, device: Any = "cpu",
                  half: bool = False) -> Program:
    """Compile an ONNX ``ModelProto`` (or path) for fixed input ``shapes`` on a torch ``device``.

    ``half``: cast float32 constants and inputs to float16 and outputs back to float32 (used when
    FP16 is asked of a model that has no float16 tensors).
    """
    t = load_torch()
    model = _load_model(model)
    graph = model.graph
    opset = _default_opset(model)
    dev = t.device(device)
    b = _Build()
    _add_initializers(b, graph, dev, half)
    inputs, input_casts = _add_inputs(b, graph, dict(shapes or {}), dev, half)
    input_slots = [b.slot(i.name) for i in inputs]
    nodes = _topo_nodes(graph)
    with t.inference_mode():
        for idx, nd in enumerate(nodes):
            _compile_node(b, nd, idx, opset, dev, half)
    outputs, output_slots, output_casts = _bind_outputs(b, graph, inputs, half)
    template: list[Any] = [None] * len(b.slots)  # the constants the steps read; everything else starts empty
    for name, s in b.slots.items():
        if b.const.get(name, False) and name in b.values:
            template[s] = b.values[name]
    _free_dead_slots(b.steps, template, output_slots)
    notes = ["fp16 by casting the fp32 model's float constants and inputs to float16 (outputs float32)"] if half else []
    return Program(inputs, outputs, b.steps, template, input_slots, output_slots, input_casts, output_casts,
                   nodes_total=len(nodes), nodes_folded=b.folded, op_counts=b.op_counts, notes=notes)


def _load_model(model: Any) -> Any:
    """A ModelProto from a ModelProto or a path; a BuildError when the file cannot be read."""
    if hasattr(model, "graph"):
        return model
    import onnx

    try:
        return onnx.load(str(model))
    except Exception as exc:
        raise BuildError(f"cannot read the ONNX model {model}: {exc}") from exc


def _default_opset(model: Any) -> int:
    """The default domain's opset; an UnsupportedOp for the first node of any other domain."""
    for o in model.opset_import:
        if o.domain not in ("", "ai.onnx"):
            used = [n.op_type for n in model.graph.node if n.domain == o.domain]
            if used:
                raise UnsupportedOp(f"{o.domain}.{used[0]}", None, BACKEND_NAME)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def _add_initializers(b: _Build, graph: Any, dev: Any, half: bool) -> None:
    t = load_torch()
    for init in graph.initializer:
        v = tensor_from_proto(init)
        if half and v.dtype == t.float32:
            v = v.half()
        b.values[init.name], b.const[init.name] = v.to(dev), True


def _add_inputs(b: _Build, graph: Any, shapes: dict[str, tuple[int, ...]], dev: Any,
                half: bool) -> tuple[list[TensorInfo], list[Any]]:
    """The graph's inputs (initializers excluded) at their fixed shapes, as zero tensors to build on."""
    t = load_torch()
    init_names = {i.name for i in graph.initializer}
    inputs: list[TensorInfo] = []
    casts: list[Any] = []
    for gi in graph.input:
        if gi.name in init_names:
            continue
        tt = gi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                for d in tt.shape.dim]
        shape = shapes.get(gi.name)
        if shape is None:
            if any(not isinstance(d, int) for d in dims):
                raise BuildError(f"input {gi.name!r} has dynamic dimensions {dims}: give its shape (--shape)")
            shape = tuple(dims)
        shape = tuple(int(d) for d in shape)
        dt = onnx_dtype(tt.elem_type)
        inputs.append(TensorInfo(gi.name, shape, np_dtype_name(dt)))
        cast = t.float16 if (half and dt == t.float32) else None
        casts.append(cast)
        b.values[gi.name] = t.zeros(shape, dtype=cast or dt, device=dev)
        b.const[gi.name] = False
    return inputs, casts


def _compile_node(b: _Build, nd: Any, idx: int, opset: int, dev: Any, half: bool) -> None:
    """Run one node on its build-time inputs: fold it into constants, or append its Step."""
    t = load_torch()
    b.op_counts[nd.op_type] = b.op_counts.get(nd.op_type, 0) + 1
    if nd.domain not in ("", "ai.onnx"):
        raise UnsupportedOp(f"{nd.domain}.{nd.op_type}", nd.name or None, BACKEND_NAME)
    ins = [b.values[x] if x else None for x in nd.input]
    cons = [b.const.get(x, True) if x else True for x in nd.input]
    n = Node(nd, idx, ins, cons, opset, dev)
    if nd.op_type == "Cast" and half and int(n.attrs.get("to", 0)) == 1:
        n.attrs["to"] = 10  # half mode: float32 casts become float16 casts
    special = fold_shape_op(n, len(nd.output)) if nd.op_type in SHAPE_OPS else None
    if special is not None:
        for name, v in zip(nd.output, special):
            if half and v.dtype == t.float32:
                v = v.half()
            b.values[name], b.const[name] = v.to(dev), True
        b.folded += 1
        return
    factory = OPS.get(nd.op_type)
    if factory is None:
        raise UnsupportedOp(nd.op_type, nd.name or None, BACKEND_NAME)
    made = factory(n)
    fn, used = made if isinstance(made, tuple) else (made, [i for i in range(len(ins)) if ins[i] is not None])
    try:
        result = fn(*[ins[i] for i in used])
    except BuildError:
        raise
    except Exception as exc:
        raise BuildError(f"node {n.name!r} ({nd.op_type}) failed on inputs of shapes "
                         f"{[tuple(ins[i].shape) for i in used]}: {type(exc).__name__}: {exc}") from exc
    multi = isinstance(result, (tuple, list))
    results = list(result) if multi else [result]
    outs = list(nd.output)
    all_const = all(cons[i] for i in used)
    for k, name in enumerate(outs):
        if name and k < len(results):
            b.values[name], b.const[name] = results[k], all_const
    if all_const:
        b.folded += 1
        return
    in_slots = tuple(b.slot(nd.input[i]) for i in used)
    out_slots = tuple(b.slot(o) if o else -1 for o in outs[:len(results)]) if multi else (b.slot(outs[0]),)
    b.steps.append(Step(n.name, nd.op_type, fn, in_slots, out_slots, multi))


def _bind_outputs(b: _Build, graph: Any, inputs: list[TensorInfo],
                  half: bool) -> tuple[list[TensorInfo], list[int], list[Any]]:
    """Each graph output's slot; outputs that are constants, inputs or views get a copying step."""
    t = load_torch()
    outputs: list[TensorInfo] = []
    output_slots: list[int] = []
    output_casts: list[Any] = []
    input_names = {i.name for i in inputs}
    for go in graph.output:
        v = b.values.get(go.name)
        if v is None:
            raise BuildError(f"the graph output {go.name!r} is never produced")
        s = b.slot(go.name)
        if b.const.get(go.name, False) or go.name in input_names or not v.is_contiguous():
            # outputs must be fresh contiguous tensors written inside the program
            s2 = b.slot(f"{go.name}::out")
            b.steps.append(Step(f"{go.name}/contiguous", "Copy", lambda x: x.contiguous().clone(), (s,), (s2,),
                                False))
            s = s2
        cast = t.float32 if (half and v.dtype == t.float16) else None
        output_slots.append(s)
        output_casts.append(cast)
        outputs.append(TensorInfo(go.name, tuple(v.shape), np_dtype_name(cast or v.dtype)))
    return outputs, output_slots, output_casts


def _free_dead_slots(steps: list[Step], template: list[Any], output_slots: list[int]) -> None:
    """Liveness: a slot that is neither constant nor an output is freed by its last reader."""
    last_use: dict[int, int] = {}
    for k, st in enumerate(steps):
        for s in st.ins:
            last_use[s] = k
        for s in st.outs:
            last_use.setdefault(s, k)
    keep = set(output_slots) | {s for s in range(len(template)) if template[s] is not None}
    frees: dict[int, list[int]] = {}
    for s, k in last_use.items():
        if s not in keep and s >= 0:
            frees.setdefault(k, []).append(s)
    for k, st in enumerate(steps):
        st.frees = tuple(frees.get(k, ()))


def has_float16(model: Any) -> bool:
    """True when the ONNX model holds float16 tensors (a precision-transformed fp16 model)."""
    g = model.graph
    if any(i.data_type == 10 for i in g.initializer):
        return True
    for nd in g.node:
        if nd.op_type == "Cast" and any(a.name == "to" and a.i == 10 for a in nd.attribute):
            return True
    return any(v.type.tensor_type.elem_type == 10 for v in list(g.input) + list(g.output))
