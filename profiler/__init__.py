"""trtprof: profile and diagnose GPU inference built with TensorRT and CUDA.

The library is usable from a notebook; the CLI (`profiler.cli`) is a thin layer over it.
Data flow (one package per arrow):

    model.onnx --variants--> engines --harness--> measurements
    nsys export --capture--> Trace (pandas frames)   trtexec / IProfiler JSON --layers--> layer frames
    measurements + frames --rules--> findings --store--> run history --report--> HTML / JSON / exit code
"""

__version__ = "0.1.0"
