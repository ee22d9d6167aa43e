"""The import path of the ``cuda`` backend before it became the :mod:`profiler.backends.cuda_ref` package."""

from profiler.backends.cuda_ref import (INT8_ROUTE, CudaTorchBackend, CudaTorchContext, CudaTorchEngine, Program,
                                        compile_model, has_float16)

__all__ = ["INT8_ROUTE", "CudaTorchBackend", "CudaTorchContext", "CudaTorchEngine", "Program", "compile_model",
           "has_float16"]
