"""Per-layer truth: TensorRT profiles and layer info, IProfiler records, ONNX Runtime node profiles.

Every source lands in one frame (:mod:`profiler.layers.frame`); :mod:`profiler.layers.align`
lines up the layers of two engines of the same model.
"""
