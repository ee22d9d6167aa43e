"""trtexec's own thresholds, in one place: every rule that reproduces a trtexec warning reads them here.

- trtexec warns that a run is enqueue-bound when the median host enqueue time exceeds 0.8 x the median
  GPU compute time;
- that it is transfer-bound when the median host-to-device or device-to-host copy takes at least the
  median GPU compute time (1.0 x);
- it warns about unstable timing when the GPU compute time's coefficient of variation exceeds 1.0%
  (TensorRT 8.6 to 10.13) or 2.5% (10.14 and later); before 8.6 it printed no such warning.
"""

from __future__ import annotations

import re

ENQUEUE_BOUND_RATIO = 0.8
TRANSFER_BOUND_RATIO = 1.0
JITTER_COV_PCT_8_6 = 1.0
JITTER_COV_PCT_10_14 = 2.5
JITTER_MEDIUM_OVER_LIMIT = 4.0
"""trtprof's severity band over trtexec's CoV limit (trtexec has none): medium above 4x the limit, else low."""


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """(major, minor[, patch]) from a version string ('10.14.1', 'TensorRT 8.6'); None without digits."""
    nums = re.findall(r"\d+", str(text)) if text else []
    return tuple(int(x) for x in nums[:3]) if nums else None


def jitter_cov_limit(version: str | None) -> tuple[float, str]:
    """(CoV limit in %, why) that trtexec of TensorRT ``version`` applies; an unknown version gets the
    current trtexec's."""
    ver = version_tuple(version)
    if ver is None or len(ver) < 2:
        return JITTER_COV_PCT_10_14, (f"TensorRT version {version!r} not understood" if version else
                                      "an unknown TensorRT version") + ": the current trtexec's threshold"
    if ver[:2] >= (10, 14):
        return JITTER_COV_PCT_10_14, f"trtexec's threshold for TensorRT {version} (10.14 and later)"
    if ver[:2] >= (8, 6):
        return JITTER_COV_PCT_8_6, f"trtexec's threshold for TensorRT {version} (8.6 to 10.13)"
    return JITTER_COV_PCT_8_6, f"TensorRT {version}: trtexec before 8.6 printed no CoV warning; using 8.6's 1.0%"
