"""``--backend cuda``: trtprof's reference executor, for GPUs without TensorRT.

What it is for. It runs ONNX models on a CUDA GPU through PyTorch's kernels so that everything trtprof
does around an engine (the timed loop, NVTX ranges, CUDA graphs, several streams, nsys captures and
their analysis) can be proven on a real GPU where TensorRT is not installed. Its latencies are its own
interpreter's (one PyTorch kernel sequence per ONNX node, no layer fusion, no tactic selection): they
say nothing about what TensorRT would do with the same model, and reports must not present them as
TensorRT's.

Layout (the data flow, one module per stage):

* :mod:`.nodes`: what an op factory sees of an ONNX node, and the op registry (``OPS``);
* :mod:`.ops_math`, :mod:`.ops_nn`, :mod:`.ops_shape`, :mod:`.ops_quant`: the op factories (a frozen set: a test pins it);
* :mod:`.compiler`: ONNX graph -> :class:`~.compiler.Program`, a flat list of steps for fixed shapes,
  constants folded, dead slots freed, ready for CUDA-graph capture;
* :mod:`.runtime`: one stream's execution context, timed by the loop every GPU backend shares
  (:mod:`profiler.cuda.timed_loop`); it supplies only buffers and the enqueue (eager steps or a graph);
* :mod:`.backend`: the ``Backend``/``Engine`` (build, describe, per-node profiling pass).

Precision. FP32 runs the model as given. FP16 runs the float16 ONNX model the sweep prepares
(``profiler.variants``: onnxconverter-common with the block list and fp32 I/O), so the ops kept in
float32 stay in float32 exactly as in the ONNX model; handed a model without any float16 tensor, the
backend casts its float constants and inputs to float16 itself and returns float32 outputs (noted in
``engine.info["notes"]``). INT8 runs the sweep's Q/DQ model (``profiler.variants.int8``) as fake
quantization (:mod:`.ops_quant`, plan in :mod:`.quant`): each QuantizeLinear computes ONNX's
``saturate(round_half_even(x / scale) + zero_point)`` into a real int8/uint8 tensor, bit-exact with ONNX's
reference, each DequantizeLinear ``(x - zero_point) * scale`` back to float32, and the Conv/MatMul/Gemm
between them run in floating point on the dequantized values (cuDNN's TF32 default for FP32
convolutions applies). A TensorRT INT8 engine fuses the same pairs into integer kernels with int32
accumulation and requantizes between them, so the two agree to within float accumulation and rounding,
and the executor's INT8 latency is that of float kernels plus the Q/DQ kernels (``INT8_ROUTE``, the
variant's ``precision_label``): never an int8 engine's. Block quantization, 4-bit and float8 types
are refused with the reason.

Memory. Everything goes through PyTorch's caching allocator, so the variant's device memory
(weights, activations per context, workspaces, peak, what one more context adds) comes from its
counters (:mod:`.memory`), recorded with the sweep's memory snapshot.

NVTX. When a tool is attached (nsys), each ONNX node's step runs inside an NVTX range named after the
node in domain ``trtprof``, as TensorRT emits one range per layer. They are on in timed passes too
(``node_ranges="auto"``), like TensorRT's default, because that is what lets a capture of a sweep be
cut per layer; ``node_ranges="off"`` removes them. Under CUDA graphs they are emitted once, at capture
time, as TensorRT does. Without a tool attached the hot loop never calls NVTX.

Importing this package imports neither PyTorch nor cuda-python (:mod:`._torch` loads PyTorch on use).
"""

from profiler.backends.cuda_ref.backend import INT8_ROUTE, CudaTorchBackend, CudaTorchEngine
from profiler.backends.cuda_ref.compiler import Program, Step, compile_model, has_float16
from profiler.backends.cuda_ref.nodes import OPS
from profiler.backends.cuda_ref.runtime import CudaTorchContext

__all__ = ["INT8_ROUTE", "OPS", "CudaTorchBackend", "CudaTorchContext", "CudaTorchEngine", "Program", "Step",
           "compile_model", "has_float16"]
