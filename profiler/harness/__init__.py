"""The measurement harness: warm-up, timed iterations, trtexec-exact statistics, NVTX ranges."""

from profiler.harness.runner import (HarnessConfig, Measurement, run_queries, summarize_timings,
                                     throughput_qps, timings_to_samples)

__all__ = ["HarnessConfig", "Measurement", "run_queries", "summarize_timings", "throughput_qps",
           "timings_to_samples"]
