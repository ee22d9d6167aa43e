"""Summary statistics with trtexec's exact formulas, so our numbers compare with trtexec's.

trtexec (samples/common/sampleReporting.cpp) sorts the samples and computes, in float32:
  percentile p: sorted[max(n - 1 - int((1 - p/100) * n), 0)]   (no interpolation)
  median:       middle element, or the mean of the middle two for even n
  mean:         float32 running sum / n
  CoV:          sqrt(float32 population variance) / mean * 100
These are pure functions of a sample array; units are whatever the caller passes (ms by convention).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

PERCENTILES = (90, 95, 99)
SUMMARY_KEYS = ("min", "mean", "median", "p90", "p95", "p99", "max", "cov_pct")


def _sorted32(samples: Iterable[float]) -> np.ndarray:
    return np.sort(np.asarray(list(samples) if not isinstance(samples, np.ndarray) else samples,
                              dtype=np.float32))


def percentile(sorted_samples: np.ndarray, p: float) -> float:
    """trtexec's percentile of an already sorted array (float32 index arithmetic)."""
    n = len(sorted_samples)
    if n == 0:
        return float("nan")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within [0, 100], not {p}")
    exclude = int(np.float32(np.float32(1) - np.float32(p) / np.float32(100)) * np.float32(n))
    return float(sorted_samples[max(n - 1 - exclude, 0)])


def median(sorted_samples: np.ndarray) -> float:
    n = len(sorted_samples)
    if n == 0:
        return float("nan")
    m = n // 2
    if n % 2:
        return float(sorted_samples[m])
    return float((np.float32(sorted_samples[m - 1]) + np.float32(sorted_samples[m])) / np.float32(2))


def _sequential_sum32(values: np.ndarray) -> np.float32:
    """Left-to-right float32 sum, as std::accumulate(..., 0.F) adds (np.sum would pairwise-sum)."""
    return np.add.accumulate(np.asarray(values, dtype=np.float32), dtype=np.float32)[-1]


def mean(samples: np.ndarray) -> float:
    """Sequential float32 accumulation, as std::accumulate(..., 0.F) does."""
    if len(samples) == 0:
        return float("nan")
    return float(_sequential_sum32(samples) / np.float32(len(samples)))


def cov_pct(samples: np.ndarray, mean_value: float | None = None) -> float:
    """Coefficient of variation in percent: population std / mean x 100, float32 like trtexec."""
    n = len(samples)
    if n == 0:
        return 0.0
    m = np.float32(mean(samples) if mean_value is None else mean_value)
    if m == 0:
        return float("inf")
    diff = np.asarray(samples, dtype=np.float32) - m
    var = _sequential_sum32(diff * diff) / np.float32(n)
    return float(np.sqrt(var) / m * np.float32(100))


def summarize(samples: Sequence[float] | np.ndarray, percentiles: Sequence[float] = PERCENTILES) -> dict:
    """{"count", "min", "mean", "median", "p90", "p95", "p99", "max", "cov_pct"} of the samples.

    An empty input gives count 0 and NaN statistics (never an exception): callers report "no data".
    """
    s = _sorted32(samples)
    out: dict = {"count": int(len(s))}
    if len(s) == 0:
        out.update({k: float("nan") for k in ("min", "mean", "median", "max", "cov_pct")})
        out.update({f"p{int(p) if float(p).is_integer() else p}": float("nan") for p in percentiles})
        return out
    m = mean(s)
    out["min"] = float(s[0])
    out["mean"] = m
    out["median"] = median(s)
    for p in percentiles:
        out[f"p{int(p) if float(p).is_integer() else p}"] = percentile(s, p)
    out["max"] = float(s[-1])
    out["cov_pct"] = cov_pct(s, m)
    return out
