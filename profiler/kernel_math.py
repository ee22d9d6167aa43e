"""What a GPU kernel's name says about its math: the operation, the precision and whether it runs on Tensor Cores.

One table of declared name patterns (:data:`FAMILIES`), first match wins, read by the capture's per-layer
tables, the trtexec layer rules and the capture rule on FP32 math (``fp32_math``). Each family says which
operation its kernels do (``op``), how to read the precision from the name, and whether they use Tensor
Cores (``True``/``False``, or ``None``: decided from the precision and the architecture the name targets).

``op`` is one of :data:`MATRIX_OPS` (``gemm``, ``conv``, ``attention``: matrix multiply-accumulate that Tensor
Cores can run), ``gemv`` and ``depthwise`` (memory-bound: Tensor Cores would not help), ``other`` (element-wise,
pooling, reductions, copies, layout changes, helper kernels) or ``None`` (the name does not say).
``precision`` is the type the multiplies take their operands in: one of :data:`PRECISIONS` or ``None``.

Naming conventions read (the kernel names of every capture and trtexec export the tests hold):

- TensorRT/cuDNN/cuBLAS XMMA kernels ``sm<arch>_xmma_<op>_<types>_...``: the types are ``<A><B>_<math><acc>_<out>``
  (``f16f16_f16f16_f16``, ``f32f32_tf32f32_f32``, ``i8i8_i8i32_f32``); the math type is the precision. An
  ``sm50``/``sm60`` kernel targets a GPU without Tensor Cores, ``ffma``/``simt`` name FP32 FMA on the CUDA cores,
  ``tensor16x8x8`` names the MMA shape; FP32 math is FFMA.
- cuDNN/cuBLAS kernels ``<arch>_[<type>_]<h|s|i|d><shape>(cudnn|gemm)``: ``h``/``s``/``i`` half, single, int8
  math, an MMA shape (``884``, ``1688``, ``16816``, ``8816``, ``16832``) means Tensor Cores (``s1688`` without an
  fp16/bf16 prefix is TF32); no shape (``scudnn``, ``sgemm``, ``hcudnn``, ``icudnn_int8x4``) means CUDA cores.
- CUTLASS ``cutlass_<arch>_(tensorop|wmma_tensorop|simt)_...``; cuBLAS ``nvjet_[sm<arch>_]<abc>_`` (letters:
  h half, b bf16, t tf32, s single, e/q fp8, i int8).
- FlashAttention ``flash::flash_fwd*``/``flash_bwd*`` (MMA atoms on sm80+), Triton (``triton_poi/red/per``
  element-wise and reductions, ``triton_mm/bmm/tem`` matrix products of unknown math), Myelin (``__myl_*``,
  fused graphs the name does not describe), PyTorch ``at::native`` kernels (element-wise, reductions, copies)
  and TensorRT's reformat and helper kernels, whose precision comes from their template arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "int8", "fp8")
MATRIX_OPS = ("gemm", "conv", "attention")
"""Operations Tensor Cores run: matrix multiply-accumulate (GEMM, convolution as implicit GEMM, attention)."""
TENSOR_CORE_MIN_SM = 70
"""An ``sm<NN>_`` kernel built for an architecture below sm70 (Volta) cannot issue MMA instructions."""
TENSOR_CORE_PRECISIONS = ("tf32", "fp16", "bf16", "int8", "fp8")
"""Math types that run on Tensor Cores in an MMA kernel built for sm70 or newer (TF32 and BF16 from sm80)."""


@dataclass(frozen=True)
class KernelMath:
    """What a kernel name says: operation, precision, Tensor Cores (``None``: the name does not say), and the
    table family that read it."""

    op: str | None
    precision: str | None
    tensor_cores: bool | None
    family: str

    @property
    def fp32_on_cuda_cores(self) -> bool:
        """A matrix kernel doing FP32 math without Tensor Cores (what an FP16/TF32/INT8 build would speed up)."""
        return self.op in MATRIX_OPS and self.precision == "fp32" and self.tensor_cores is False


# ---- precision readers: name -> precision or None ----

_XMMA_TYPES = re.compile(r"_((?:[a-z]+\d+){1,2})_((?:[a-z]+\d+){1,2})_([a-z]+\d+)(?:_|$)", re.I)
_TYPE_TOKEN = {"f16": "fp16", "h": "fp16", "bf16": "bf16", "f32": "fp32", "s": "fp32", "tf32": "tf32",
               "t": "tf32", "i8": "int8", "i": "int8", "e4m3": "fp8", "e5m2": "fp8", "e": "fp8", "q": "fp8",
               "f64": "fp64", "d": "fp64", "b": "bf16", "fp16": "fp16", "fp32": "fp32",
               "int8": "int8", "fp8": "fp8"}
_TOKENS = re.compile(r"[a-z]+\d+", re.I)
_FIRST_TYPE = re.compile(r"_(bf16|tf32|f16|f32|i8|e4m3|e5m2)(?![0-9])", re.I)


def _xmma_precision(name: str) -> str | None:
    """``f16f16_f16f16_f16`` -> fp16 (the math type, first of the middle group when it holds two types:
    ``f32f32_tf32f32_f32`` -> tf32); a middle group of one type (``f16f16_f32_f32``) -> the inputs' type."""
    tail = name.split("_xmma_", 1)[-1]
    m = _XMMA_TYPES.search(tail)
    if m is None:  # no full type string: the first type token named (``gemm_f16``), else the template's
        t = _FIRST_TYPE.search(tail)
        return _TYPE_TOKEN[t.group(1).lower()] if t else _template_precision(name)
    middle = _TOKENS.findall(m.group(2))
    first = middle[0] if len(middle) == 2 else _TOKENS.findall(m.group(1))[0]
    return _TYPE_TOKEN.get(first.lower())


_CUDNN_SHAPE = re.compile(r"(?:^|[^a-z0-9])(?:(fp16|fp32|bf16|int8)_)?([hsid]|g?c)(884|1688|16816|8816|16832|161616)?"
                          r"(?:cudnn|gemm)", re.I)


def _cudnn_precision(name: str) -> str | None:
    """``h1688cudnn`` fp16, ``scudnn`` fp32, ``i8816cudnn`` int8, ``fp16_s16816gemm`` fp16, ``s1688gemm`` tf32."""
    m = _CUDNN_SHAPE.search(name)
    if m is None:
        return None
    prefix, letter, shape = (m.group(1) or "").lower(), m.group(2).lower(), m.group(3)
    if letter == "s" and shape:
        return {"fp16": "fp16", "bf16": "bf16"}.get(prefix, "tf32")
    if letter in ("c", "gc"):
        return "fp32"  # gcgemm / cgemm: complex single precision
    return _TYPE_TOKEN[letter]


def _cutlass_precision(name: str) -> str | None:
    """``tensorop_f16_s16816gemm`` fp16, ``tensorop_s1688gemm`` tf32, ``simt_sgemm`` fp32."""
    m = re.search(r"cutlass_\d+_(?:wmma_)?(?:tensorop|simt)_((?:bf16|f16|i8|s8|e4m3|e5m2)_)?", name, re.I)
    if m and m.group(1):
        return _TYPE_TOKEN.get(m.group(1).rstrip("_").lower().replace("s8", "i8"))
    return _cudnn_precision(name)


def _mma_precision(name: str) -> str | None:
    """The XMMA type string when the name has one, else the instruction's: HMMA half, IMMA int8."""
    found = _xmma_precision(name)
    if found is None and re.search(r"hmma", name, re.I):
        return "fp16"
    return "int8" if found is None and re.search(r"imma", name, re.I) else found


def _nvjet_precision(name: str) -> str | None:
    m = re.search(r"nvjet_(?:sm\d+_)?([a-z])[a-z]{2}_", name, re.I)
    return _TYPE_TOKEN.get(m.group(1).lower()) if m else None


_TEMPLATE_TYPES = (
    (re.compile(r"__nv_fp8|float8_e|e4m3|e5m2", re.I), "fp8"),
    (re.compile(r"bfloat16|BFloat16|__nv_bfloat|__bfloat"), "bf16"),
    (re.compile(r"__half|c10::Half|half_t|\bhalf\b|FP16"), "fp16"),
    (re.compile(r"\bint8_t\b|\bsigned char\b|\bint8\b|INT8"), "int8"),
    (re.compile(r"\bdouble\b"), "fp64"),
    (re.compile(r"\bfloat\b|FP32"), "fp32"),
)


def _template_precision(name: str) -> str | None:
    """The first data type named in the kernel's template arguments (``<c10::Half, float>`` -> fp16)."""
    found = [(m.start(), p) for rx, p in _TEMPLATE_TYPES if (m := rx.search(name))]
    return min(found)[1] if found else None


def _none(name: str) -> str | None:
    return None


@dataclass(frozen=True)
class Family:
    """One row of the table: kernels whose name matches ``pattern`` do ``op`` in ``precision(name)``, on
    Tensor Cores when ``tensor_cores`` says so (``None``: by the precision and target architecture)."""

    name: str
    pattern: re.Pattern[str]
    op: str | None
    precision: Callable[[str], str | None]
    tensor_cores: bool | None
    why: str


def _f(name: str, pattern: str, op: str | None, precision: Callable[[str], str | None], tensor_cores: bool | None,
       why: str) -> Family:
    return Family(name, re.compile(pattern, re.I), op, precision, tensor_cores, why)


FAMILIES: tuple[Family, ...] = (
    # helpers and data movement first: their names may contain a GEMM family's words (cask_cudnn, xmma_trt)
    _f("helper", r"computeOffsetsKernel|generateWinogradTilesKernel|kernel_helper_stage|im2col|"
       r"splitKreduce|epilogue::impl::globalKernel", "other", _template_precision, False,
       "index, tile and split-K reduction helpers and cuBLASLt's separate epilogue: no multiply-accumulate"),
    _f("reformat", r"genericReformat|copyPackedKernel|copyVectorizedKernel|nchwToNhwc|nhwcToNchw|nhwcTonchw|"
       r"nchwTonhwc|cuPad::|cuSliceLayer|permutationKernel|CatArrayBatchedCopy|transpose|memcpy|memset",
       "other", _template_precision, False, "layout changes, copies, padding, slices"),
    _f("xmma_pooling", r"_xmma_pooling", "other", _template_precision, False, "TensorRT pooling kernels"),
    _f("xmma_gemv", r"_xmma_cublas_gemv|gemvx|gemv2|gemv_|gemvN|gemvT|gemmSN_", "gemv", _xmma_precision, False,
       "matrix-vector products (cuBLAS gemv, small-N GEMM): memory-bound, CUDA cores"),
    _f("xmma", r"(?:^|[^a-z])sm\d+_xmma_", None, _xmma_precision, None,
       "TensorRT/cuDNN/cuBLAS XMMA kernels: math type in the name, ffma/simt/sm<70 on CUDA cores"),
    _f("cutlass_tensorop", r"cutlass_\d+_(?:wmma_)?tensorop", "gemm", _cutlass_precision, True,
       "CUTLASS Tensor Core kernels"),
    _f("cutlass_simt", r"cutlass_\d+_simt", "gemm", _cutlass_precision, False, "CUTLASS SIMT kernels"),
    _f("hmma", r"hmma|imma|wgmma|gmma_|tensorop|tensor_op", None, _mma_precision, True,
       "names of the MMA instruction (HMMA/IMMA/GMMA)"),
    _f("nvjet", r"nvjet_", "gemm", _nvjet_precision, None, "cuBLAS nvjet GEMMs: letters name the types"),
    _f("cudnn_mma", r"(?:^|_)(?:fp16_|fp32_|bf16_|int8_)?[hsi](?:884|1688|16816|8816|16832|161616)(?:cudnn|gemm)",
       None, _cudnn_precision, True, "cuDNN/cuBLAS kernels with an MMA shape (h1688cudnn, s16816gemm, i8816cudnn)"),
    _f("cudnn_simt", r"(?:^|[^a-z0-9])(?:scudnn|hcudnn|dcudnn|icudnn|sgemm|hgemm|dgemm|cgemm|gcgemm)",
       None, _cudnn_precision, False, "cuDNN/cuBLAS kernels without an MMA shape: CUDA cores (dp4a for int8)"),
    _f("cudnn_direct", r"convolve_sgemm|fft2d_|fft_|winograd|conv1D_|conv2d_grouped_direct", "conv",
       _template_precision, False, "cuDNN direct, FFT and Winograd convolutions on CUDA cores"),
    _f("depthwise", r"depthwise|dwconv", "depthwise", _template_precision, False,
       "depthwise convolutions: memory-bound, no MMA path"),
    _f("flash_attention", r"flash::flash_(?:fwd|bwd)|flash_fwd_|flash_bwd_|fmha_|fmha::|flash_attn", "attention",
       _template_precision, True, "FlashAttention kernels run their matrix products on MMA atoms"),
    _f("triton_pointwise", r"triton_(?:poi|red|per)_", "other", _none, False, "Triton element-wise and reductions"),
    _f("triton_matmul", r"triton_(?:mm|bmm|tem)", "gemm", _none, None, "Triton matrix products: math not named"),
    _f("myelin", r"__myl_|myelin", None, _none, None, "Myelin fused graphs: the name does not describe the math"),
    _f("elementwise", r"elementwise|pointwise|reduce_kernel|reduction|softmax|layer_norm|norm_kernel|pool|"
       r"gather|scatter|index|fill|arange|distribution|nll_loss|roll_cuda|op_generic_tensor|scal_kernel|"
       r"nvfuser_(?:pointwise|reduction|inner|outer)|generatedNativePointwise|activation|relu|sigmoid|tanh|gelu|"
       r"silu|cast|nccl", "other", _template_precision, False,
       "element-wise, reductions, normalisation, pooling, indexing, collectives: no matrix multiply"),
)


_SM = re.compile(r"(?:^|[^a-z])sm_?(\d{2,3})_", re.I)
_CUDA_CORE_MATH = re.compile(r"_ffma|ffma_|_simt|simt_", re.I)
_MMA_SHAPE = re.compile(r"_tensor\d+x\d+x\d+|hmma|imma|gmma", re.I)


def _matrix_op(name: str) -> str:
    """conv for convolution kernels (fprop/dgrad/wgrad, cuDNN), gemm otherwise."""
    n = name.lower()
    return "conv" if any(w in n for w in ("fprop", "dgrad", "wgrad", "conv", "cudnn")) else "gemm"


def _decide_tensor_cores(name: str, precision: str | None) -> bool | None:
    """Tensor Cores for a family that leaves it to the name: FFMA/SIMT or an sm<70 target say no, an MMA
    shape says yes, else the math type does (FP32/FP64 no, TF32/FP16/BF16/INT8/FP8 yes)."""
    if _CUDA_CORE_MATH.search(name):
        return False
    sm = _SM.search(name)
    if sm and int(sm.group(1)) < TENSOR_CORE_MIN_SM:
        return False
    if _MMA_SHAPE.search(name):
        return True
    if precision in ("fp32", "fp64"):
        return False
    return True if precision in TENSOR_CORE_PRECISIONS else None


TENSOR_CORE_MIN_MAJOR = 7
"""GPUs of compute capability below 7.0 (Pascal and older) have no Tensor Cores."""


def gpu_tensor_cores(gpus: list[dict[str, Any]] | None) -> bool | None:
    """Whether the capture's GPUs have Tensor Cores (compute capability 7.0 or newer); None when unknown or
    mixed (unknown which GPU ran a kernel)."""
    majors: list[int] = [m for m in (g.get("compute_major") for g in gpus or [] if isinstance(g, dict))
                         if isinstance(m, int)]
    if not majors:
        return None
    if min(majors) >= TENSOR_CORE_MIN_MAJOR:
        return True
    return False if max(majors) < TENSOR_CORE_MIN_MAJOR else None


UNKNOWN = KernelMath(None, None, None, "unknown")


def classify(name: str | None) -> KernelMath:
    """What ``name`` says about its kernel's math (see the module docs); :data:`UNKNOWN` when no family matches."""
    if not isinstance(name, str) or not name:
        return UNKNOWN
    return _classify(name)


_CACHE: dict[str, KernelMath] = {}


def _classify(name: str) -> KernelMath:
    hit = _CACHE.get(name)
    if hit is not None:
        return hit
    out = UNKNOWN
    for fam in FAMILIES:
        if not fam.pattern.search(name):
            continue
        precision = fam.precision(name)
        op = fam.op if fam.op is not None or fam.name == "myelin" else _matrix_op(name)
        tc = fam.tensor_cores if fam.tensor_cores is not None else _decide_tensor_cores(name, precision)
        out = KernelMath(op, precision, tc, fam.name)
        break
    else:
        out = KernelMath(None, _template_precision(name), None, "unknown")
    if len(_CACHE) < 100_000:
        _CACHE[name] = out
    return out


def uses_tensor_cores(name: str | None) -> bool | None:
    """True when the kernel's name says it runs on Tensor Cores, False when it says it does not, None when
    the name says neither (a Myelin or Triton matrix kernel may well use them)."""
    return classify(name).tensor_cores


__all__ = ["FAMILIES", "MATRIX_OPS", "PRECISIONS", "TENSOR_CORE_MIN_MAJOR", "TENSOR_CORE_MIN_SM",
           "TENSOR_CORE_PRECISIONS", "Family", "KernelMath", "classify", "gpu_tensor_cores", "uses_tensor_cores"]
