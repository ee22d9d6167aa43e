"""Read an ONNX model's interface (inputs, outputs, opset, ops) and hash it, without running it.

Inspection loads the protobuf only (external weight files are hashed, not parsed), so it is cheap
enough to run before every sweep. Anything unreadable becomes an :class:`InputError` that names the
file and the reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from profiler.errors import InputError


@dataclass
class TensorInfo:
    """One input or output of a model (the backends describe their engines' bindings with it too)."""

    name: str
    shape: tuple[int | str | None, ...]  # str/None for dynamic dimensions
    dtype: str  # numpy dtype name: float32, float16, int64, ...


@dataclass
class ModelInfo:
    """What trtprof needs to know about a model before building anything from it.

    Dynamic dimensions appear in ``TensorInfo.shape`` as their symbolic name (str) or None when the
    model leaves them unnamed (or, as some exporters do, marks them with a negative size).
    """

    path: Path
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opset: int
    opsets: dict[str, int]
    ir_version: int
    node_count: int
    op_types: dict[str, int]
    model_hash: str
    size_bytes: int
    producer: str = ""
    external_data: list[str] = field(default_factory=list)
    #: inputs whose rank the model does not declare (they always need --shape)
    unknown_rank: list[str] = field(default_factory=list)

    @property
    def dynamic_inputs(self) -> list[TensorInfo]:
        """Inputs with at least one dimension that is not a fixed positive size."""
        return [t for t in self.inputs if t.name in self.unknown_rank or not is_static(t.shape)]

    def input(self, name: str) -> TensorInfo:
        for t in self.inputs:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        def tensor(t: TensorInfo) -> dict[str, Any]:
            return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}

        return {
            "path": str(self.path), "model_hash": self.model_hash, "size_bytes": self.size_bytes,
            "opset": self.opset, "opsets": dict(self.opsets), "ir_version": self.ir_version,
            "producer": self.producer, "node_count": self.node_count, "op_types": dict(self.op_types),
            "inputs": [tensor(t) for t in self.inputs], "outputs": [tensor(t) for t in self.outputs],
            "external_data": list(self.external_data),
        }


def is_static(shape: tuple[int | str | None, ...]) -> bool:
    """True when every dimension is a fixed positive integer."""
    return all(isinstance(d, int) and d > 0 for d in shape)


def file_sha256(path: Path, extra_files: list[Path] | None = None) -> str:
    """sha256 of a model file (and, in order, of the external data files it references), each checked
    to be a readable regular file first."""
    from profiler.hashing import file_sha256 as sha256_of

    files = [Path(p) for p in [path, *(extra_files or [])]]
    for p in files:
        check_model_file(p)
    return sha256_of(*files)


def onnx_dtype_name(elem_type: int) -> str:
    """ONNX element type -> numpy dtype name ('float32', 'int64'); ONNX's own name when numpy has none."""
    import onnx

    try:
        import numpy as np

        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _tensor_info(value_info) -> tuple[TensorInfo, bool]:
    """TensorInfo of a graph input/output, and whether its rank is known."""
    ttype = value_info.type.tensor_type
    dims: list[int | str | None] = []
    for d in ttype.shape.dim:
        kind = d.WhichOneof("value")
        if kind == "dim_value" and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif kind == "dim_param" and d.dim_param:
            dims.append(d.dim_param)
        else:  # unset, 0 or negative (an exporter's way of saying "dynamic")
            dims.append(None)
    return TensorInfo(value_info.name, tuple(dims), onnx_dtype_name(ttype.elem_type)), ttype.HasField("shape")


def _count_ops(graph, counter: Counter) -> int:
    """Count nodes by op type, including those inside If/Loop/Scan subgraphs."""
    import onnx

    n = 0
    for node in graph.node:
        n += 1
        counter[node.op_type] += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                n += _count_ops(attr.g, counter)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    n += _count_ops(g, counter)
    return n


def check_model_file(p: Path) -> None:
    """InputError unless ``p`` is a regular file: a FIFO would block the read forever, a device
    (/dev/zero) would never end, a directory is not a model."""
    import stat

    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"model file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read model file {str(p)!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"model path {str(p)!r} is a directory, not an .onnx file")
    if not stat.S_ISREG(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device" if (
            stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise InputError(f"model path {str(p)!r} is {kind}, not an .onnx file; give the model file itself")


#: The largest tensor a model may declare (a graph input, output or intermediate with static dimensions, or an
#: initializer's dimensions), in bytes: 64 GiB, more than any one weight or activation of a model a GPU
#: serves; a model past it (or past half this machine's memory, where that is less) is refused before
#: anything is allocated (``profiler.models.shapes.max_tensor_bytes``).
MAX_DECLARED_TENSOR_BYTES = 64 << 30


def max_declared_bytes() -> int:
    """:data:`MAX_DECLARED_TENSOR_BYTES`, or half this machine's memory where that is less."""
    from profiler.models.shapes import max_tensor_bytes

    return min(MAX_DECLARED_TENSOR_BYTES, max_tensor_bytes())


def _item_bytes(elem_type: int) -> int:
    import onnx

    try:
        return max(1, onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except Exception:
        return 4


def _declared(graph) -> Iterator[tuple[str, str, list[int], int]]:
    """(what, name, static dims, element type) of every tensor ``graph`` and its subgraphs declare with
    fixed dimensions: initializers, inputs, outputs, value_info. One pass over the nodes (linear)."""
    import onnx

    stack = [graph]
    while stack:
        g = stack.pop()
        for init in g.initializer:
            yield "initializer", init.name, list(init.dims), init.data_type
        for what, infos in (("input", g.input), ("output", g.output), ("intermediate", g.value_info)):
            for vi in infos:
                if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
                    continue
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim if d.WhichOneof("value") == "dim_value"]
                if len(dims) == len(vi.type.tensor_type.shape.dim):
                    yield what, vi.name, dims, vi.type.tensor_type.elem_type
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(attr.graphs)
                elif attr.type == onnx.AttributeProto.TENSOR:
                    yield "constant", node.name or node.op_type, list(attr.t.dims), attr.t.data_type


def check_declared_sizes(graph, path: Path) -> None:
    """InputError, before anything is allocated, for a declared tensor larger than :func:`max_declared_bytes`."""
    limit = max_declared_bytes()
    for what, name, dims, elem_type in _declared(graph):
        elements = 1
        for d in dims:
            elements *= max(int(d), 0)
        need = elements * _item_bytes(elem_type)
        if need > limit:
            raise InputError(f"{str(path)!r} declares {what} {name!r} of shape {list(dims)}: {need / (1 << 30):.3g} "
                             f"GiB, more than the {limit / (1 << 30):.3g} GiB a tensor may take "
                             "(MAX_DECLARED_TENSOR_BYTES, or half this machine's memory)")


def load_model_proto(path: str | Path, *, load_external_data: bool = False):
    """Parse an ONNX file or raise InputError naming the file and the reason."""
    import onnx
    from google.protobuf.message import DecodeError

    p = Path(path)
    check_model_file(p)
    try:
        model = onnx.load(str(p), load_external_data=load_external_data)
    except DecodeError as exc:
        raise InputError(f"{str(p)!r} is not a valid ONNX model: the protobuf cannot be parsed ({exc})") from exc
    except Exception as exc:  # truncated files, bad external data references, ...
        raise InputError(f"{str(p)!r} cannot be loaded as an ONNX model: {type(exc).__name__}: {exc}") from exc
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise InputError(f"{str(p)!r} is not a valid ONNX model: it has no graph nodes")
    if model.ir_version <= 0:
        raise InputError(f"{str(p)!r} is not a valid ONNX model: it declares no IR version")
    return model


def _external_files(model, base: Path) -> list[Path]:
    import onnx

    names: list[str] = []
    for init in model.graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            for entry in init.external_data:
                if entry.key == "location" and entry.value not in names:
                    names.append(entry.value)
    return [base / n for n in sorted(names)]


def inspect_model(path: str | Path) -> ModelInfo:
    """Inputs, outputs, opset, op counts and file hash of an ONNX model (InputError if unreadable)."""
    p = Path(path)
    model = load_model_proto(p)
    graph = model.graph
    init_names = {i.name for i in graph.initializer}  # IR < 4 lists weights among the inputs
    inputs: list[TensorInfo] = []
    unknown_rank: list[str] = []
    for vi in graph.input:
        if vi.name in init_names:
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            raise InputError(f"{str(p)!r}: input {vi.name!r} is not a tensor (sequences and maps are not supported)")
        info, has_rank = _tensor_info(vi)
        inputs.append(info)
        if not has_rank:
            unknown_rank.append(vi.name)
    outputs = [_tensor_info(vi)[0] for vi in graph.output if vi.type.WhichOneof("value") == "tensor_type"]
    if not inputs:
        raise InputError(f"{str(p)!r} is not a usable ONNX model: it has no runtime inputs")
    if not outputs:
        raise InputError(f"{str(p)!r} is not a usable ONNX model: it declares no tensor outputs, so running it "
                         "computes nothing to time or check")
    check_declared_sizes(graph, p)
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    counter: Counter = Counter()
    node_count = _count_ops(graph, counter)
    extra = _external_files(model, p.parent)
    missing = [str(e) for e in extra if not e.exists()]
    if missing:
        raise InputError(f"{str(p)!r} references external weight files that do not exist: {missing}")
    return ModelInfo(
        path=p, inputs=inputs, outputs=outputs, opset=opsets.get("ai.onnx", 0), opsets=opsets,
        ir_version=int(model.ir_version), node_count=node_count,
        op_types=dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))),
        model_hash=file_sha256(p, extra), size_bytes=p.stat().st_size + sum(e.stat().st_size for e in extra),
        producer=" ".join(x for x in (model.producer_name, model.producer_version) if x),
        external_data=[e.name for e in extra], unknown_rank=unknown_rank,
    )
