"""Op factories: convolutions, normalization, pooling, resizing (see ops_math for the factory contract)."""

from __future__ import annotations

import math
from typing import Any

from profiler.backends.cuda_ref.nodes import Node, op
from profiler.backends.cuda_ref._torch import bind

torch: Any = None  # bound to PyTorch by _torch.load_torch()
F: Any = None
bind(globals())


# -- convolution, pooling, normalization -------------------------------------------------------------
def _pads_for(n: Node, spatial: tuple[int, ...], kernel: list[int], strides: list[int],
              dilations: list[int]) -> list[int]:
    """ONNX pads [x1_begin, x2_begin, ..., x1_end, ...], from ``pads`` or ``auto_pad``."""
    nd = len(kernel)
    auto = n.attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return list(n.attrs.get("pads", [0] * (2 * nd)))
    if auto == "VALID":
        return [0] * (2 * nd)
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        out = math.ceil(size / s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def torch_pad(pads: list[int]) -> list[int]:
    """ONNX begin/end pads -> F.pad's order (last dimension first)."""
    nd = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(nd)):
        out += [pads[i], pads[i + nd]]
    return out


@op("Conv")
def _conv(n: Node) -> Any:
    w_shape = n.shape(1)
    nd = len(w_shape) - 2
    kernel = list(n.attrs.get("kernel_shape", w_shape[2:]))
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    groups = int(n.attrs.get("group", 1))
    pads = _pads_for(n, n.shape(0)[2:], kernel, strides, dil)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(nd)
    if conv is None:
        raise n.unsupported(f"a {nd}-D convolution")
    sym = pads[:nd] == pads[nd:]
    padding = tuple(pads[:nd]) if sym else 0
    tp = None if sym else torch_pad(pads)
    used = [0, 1, 2] if n.has(2) else [0, 1]
    if tp is None:
        return (lambda x, w, b=None: conv(x, w, b, strides, padding, dil, groups)), used
    return (lambda x, w, b=None: conv(F.pad(x, tp), w, b, strides, 0, dil, groups)), used


@op("ConvTranspose")
def _conv_t(n: Node) -> Any:
    w_shape = n.shape(1)
    nd = len(w_shape) - 2
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    groups = int(n.attrs.get("group", 1))
    out_pad = list(n.attrs.get("output_padding", [0] * nd))
    pads = list(n.attrs.get("pads", [0] * (2 * nd)))
    if "output_shape" in n.attrs or n.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise n.unsupported("output_shape/auto_pad")
    convt = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}.get(nd)
    if convt is None:
        raise n.unsupported(f"a {nd}-D transposed convolution")
    used = [0, 1, 2] if n.has(2) else [0, 1]
    if pads[:nd] == pads[nd:]:
        padding = tuple(pads[:nd])
        return (lambda x, w, b=None: convt(x, w, b, strides, padding, out_pad, groups, dil)), used
    # asymmetric: compute unpadded, then crop begin/end per spatial dimension
    crop = tuple([slice(None), slice(None)] + [slice(pads[i], -pads[i + nd] if pads[i + nd] else None)
                                                for i in range(nd)])
    return (lambda x, w, b=None: convt(x, w, b, strides, 0, out_pad, groups, dil)[crop]), used


@op("BatchNormalization")
def _batchnorm(n: Node) -> Any:
    eps = float(n.attrs.get("epsilon", 1e-5))
    scale, bias, mean, var = (n.const(i).double() for i in range(1, 5))
    a = scale / torch.sqrt(var + eps)
    b = bias - mean * a
    view = (-1,) + (1,) * (len(n.shape(0)) - 2)
    dt = n.values[0].dtype
    a_dev = a.to(dt).reshape(view).to(n.device)
    b_dev = b.to(dt).reshape(view).to(n.device)
    return (lambda x: torch.addcmul(b_dev, x, a_dev)), [0]


@op("InstanceNormalization")
def _instnorm(n: Node) -> Any:
    eps = float(n.attrs.get("epsilon", 1e-5))
    return lambda x, s, b: F.instance_norm(x, None, None, s, b, False, 0.0, eps)


@op("LayerNormalization")
def _layernorm(n: Node) -> Any:
    axis = int(n.attrs.get("axis", -1))
    eps = float(n.attrs.get("epsilon", 1e-5))
    shape = n.shape(0)
    axis = axis % len(shape)
    norm = shape[axis:]
    used = [0, 1, 2] if n.has(2) else [0, 1]
    return (lambda x, w, b=None: F.layer_norm(x, norm, w, b, eps)), used


def _pool_common(n: Node) -> tuple[list[int], list[int], list[int], list[int], int]:
    kernel = list(n.attrs["kernel_shape"])
    nd = len(kernel)
    strides = list(n.attrs.get("strides", [1] * nd))
    dil = list(n.attrs.get("dilations", [1] * nd))
    pads = _pads_for(n, n.shape(0)[2:], kernel, strides, dil)
    return kernel, strides, dil, pads, nd


@op("MaxPool")
def _maxpool(n: Node) -> Any:
    kernel, strides, dil, pads, nd = _pool_common(n)
    ceil = bool(n.attrs.get("ceil_mode", 0))
    if len(n.proto.output) > 1 and n.proto.output[1]:
        raise n.unsupported("MaxPool's indices output")
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    if pads[:nd] == pads[nd:] and all(p * 2 <= k for p, k in zip(pads[:nd], kernel)):
        padding = tuple(pads[:nd])
        return lambda x: pool(x, kernel, strides, padding, dil, ceil)
    tp = torch_pad(pads)
    return lambda x: pool(F.pad(x, tp, value=float("-inf")), kernel, strides, 0, dil, ceil)


@op("AveragePool")
def _avgpool(n: Node) -> Any:
    kernel, strides, dil, pads, nd = _pool_common(n)
    if any(d != 1 for d in dil):
        raise n.unsupported("a dilated AveragePool")
    ceil = bool(n.attrs.get("ceil_mode", 0))
    include = bool(n.attrs.get("count_include_pad", 0))
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    if pads[:nd] == pads[nd:] and all(p * 2 <= k for p, k in zip(pads[:nd], kernel)):
        padding = tuple(pads[:nd])
        return lambda x: pool(x, kernel, strides, padding, ceil, include)
    if include:
        tp = torch_pad(pads)
        return lambda x: pool(F.pad(x, tp), kernel, strides, 0, ceil, True)
    raise n.unsupported("asymmetric AveragePool padding without count_include_pad")


@op("GlobalAveragePool")
def _gap(n: Node) -> Any:
    dims = tuple(range(2, len(n.shape(0))))
    return lambda x: x.mean(dims, keepdim=True)


@op("GlobalMaxPool")
def _gmp(n: Node) -> Any:
    dims = tuple(range(2, len(n.shape(0))))
    return lambda x: torch.amax(x, dims, keepdim=True)



@op("Resize", "Upsample")
def _resize(n: Node) -> Any:
    shape = n.shape(0)
    mode = n.attrs.get("mode", "nearest")
    ctm = n.attrs.get("coordinate_transformation_mode", "half_pixel" if n.op == "Resize" else "asymmetric")
    nearest_mode = n.attrs.get("nearest_mode", "round_prefer_floor")
    sizes = None
    scales = None
    if n.op == "Upsample":
        scales = n.floats(1) if n.has(1) else list(n.attrs["scales"])
    elif n.opset < 11:
        scales = n.floats(1)
    else:
        if n.has(3) and n.values[3].numel() > 0:
            sizes = n.ints(3, "sizes")
        elif n.has(2) and n.values[2].numel() > 0:
            scales = n.floats(2)
    if sizes is None:
        if scales is None:
            raise n.unsupported("Resize without scales or sizes")
        sizes = [int(math.floor(d * s)) for d, s in zip(shape, scales)]
    if list(sizes[:2]) != list(shape[:2]):
        raise n.unsupported("Resize of the batch or channel dimension")
    out = tuple(int(s) for s in sizes[2:])
    if mode == "nearest":
        if ctm == "asymmetric" and nearest_mode == "floor":
            return (lambda x: F.interpolate(x, size=out, mode="nearest")), [0]
        if ctm in ("half_pixel", "pytorch_half_pixel") and nearest_mode in ("round_prefer_ceil", "round_prefer_floor"):
            return (lambda x: F.interpolate(x, size=out, mode="nearest-exact")), [0]
        if ctm == "asymmetric" and all(o % i == 0 for o, i in zip(out, shape[2:])):
            return (lambda x: F.interpolate(x, size=out, mode="nearest")), [0]  # integer factors: same
        raise n.unsupported(f"nearest Resize with {ctm}/{nearest_mode}")
    if mode in ("linear", "bilinear", "cubic"):
        tmode = {2: "bilinear", 1: "linear", 3: "trilinear"}.get(len(out)) if mode != "cubic" else "bicubic"
        if ctm == "align_corners":
            return (lambda x: F.interpolate(x, size=out, mode=tmode, align_corners=True)), [0]
        if ctm in ("half_pixel", "pytorch_half_pixel"):
            return (lambda x: F.interpolate(x, size=out, mode=tmode, align_corners=False)), [0]
        raise n.unsupported(f"{mode} Resize with coordinate_transformation_mode {ctm!r}")
    raise n.unsupported(f"Resize mode {mode!r}")


@op("DepthToSpace")
def _d2s(n: Node) -> Any:
    b = int(n.attrs["blocksize"])
    if n.attrs.get("mode", "DCR") == "CRD":
        return lambda x: F.pixel_shuffle(x, b)
    nb, c, h, w = n.shape(0)
    return lambda x: x.reshape(nb, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2).reshape(
        nb, c // (b * b), h * b, w * b)
