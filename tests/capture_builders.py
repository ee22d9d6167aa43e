"""Shared by the capture tests: synthetic frame builders (times in ns) and each real capture analysed once.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze_path

_CACHE: dict[Path, object] = {}


def result_of(path: Path):
    """``analyze_path`` of a real capture with every instance (setup included, as SQL sees it), once."""
    if path not in _CACHE:
        _CACHE[path] = analyze_path(path, AnalysisOptions(include_setup=True))  # every instance, as SQL sees it
    return _CACHE[path]


T = 1_000  # one microsecond in ns


def kernels(*rows, **common) -> pd.DataFrame:
    """rows: (start, end, api_tid, api_start[, correlation_id]) in ns."""
    out = []
    for i, r in enumerate(rows):
        start, end, tid, api_start = r[:4]
        out.append({"start_ns": start, "end_ns": end, "api_tid": tid, "api_start_ns": api_start,
                    "api_end_ns": api_start + 2 * T, "correlation_id": r[4] if len(r) > 4 else i + 1,
                    "device_id": 0, "stream_id": 7, "pid": 1, "name": "k", "short_name": "k", **common})
    return pd.DataFrame(out)


def ranges(*rows) -> pd.DataFrame:
    """rows: (name, start, end or None, global_tid[, domain[, event_type[, end_tid]]])."""
    out = []
    for r in rows:
        name, start, end, tid = r[:4]
        out.append({"name": name, "start_ns": start, "end_ns": end, "global_tid": tid,
                    "domain": r[4] if len(r) > 4 else "", "event_type": r[5] if len(r) > 5 else "push_pop",
                    "end_global_tid": r[6] if len(r) > 6 else tid, "pid": 1, "tid": tid})
    df = pd.DataFrame(out)
    df["end_ns"] = df["end_ns"].astype("Int64")
    return df


def api(*rows) -> pd.DataFrame:
    """rows: (name, start, end, global_tid, category)."""
    return pd.DataFrame([{"name": n, "start_ns": s, "end_ns": e, "global_tid": t, "category": c, "pid": 1,
                          "tid": t, "api": "runtime", "correlation_id": i + 1000}
                         for i, (n, s, e, t, c) in enumerate(rows)])


def capture_or_skip(path: Path) -> Path:
    """``path`` when the capture is there, else skip the test saying which is missing."""
    if not Path(path).is_file():
        pytest.skip(f"{path} not found")
    return Path(path)


#: Kernel names the many-layer capture's layers run: Tensor Core, CUDA core and unknown ones.
LAYER_KERNELS = ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32", "sgemm_128x64_nn",
                 "trt_fused_conv_kernel", "elementwise_add_kernel", "h16816gemm_relu", "reduce_kernel")


def many_layers(n_layers: int, inferences: int = 3, wide_kernels: int = 20):
    """A TensorRT-shaped capture with ``n_layers`` distinct layer ranges (domain TensorRT, named as
    TensorRT names them) inside each of ``inferences`` ``ExecutionContext::enqueue`` ranges on one thread.
    Layer j launches 1 + j % 3 kernels (names from ``LAYER_KERNELS``, durations 1-4 us, so totals tie
    often) that run on the GPU after their launch; layer 0 launches ``wide_kernels`` kernels of one
    duration under as many names (a tie wider than a small sort's), and the last layer is missing from
    the last inference. Built as arrays, so 10,000 layers take a moment."""
    from profiler.capture.trace import Trace

    j = np.arange(n_layers)
    per_layer = np.where(j == 0, wide_kernels, 1 + j % 3)
    span_ns = (10 * n_layers + 20) * T
    nv, kr = [], []
    for i in range(inferences):
        t0 = i * (span_ns + int(per_layer.sum()) * 5 * T)
        nv.append(pd.DataFrame({"name": ["ExecutionContext::enqueue"], "start_ns": [t0], "end_ns": [t0 + span_ns]}))
        present = j[: n_layers - 1] if i == inferences - 1 and n_layers > 1 else j
        ls = t0 + 5 * T + present * 10 * T
        nv.append(pd.DataFrame({"name": [f"layer_{k} [Conv + Relu]" for k in present], "start_ns": ls,
                                "end_ns": ls + 6 * T}))
        owner = np.repeat(present, per_layer[present])
        within = np.arange(len(owner)) - np.repeat(np.cumsum(per_layer[present]) - per_layer[present], per_layer[present])
        dur = np.where(owner == 0, 2 * T, (1 + (owner + within) % 4) * T)
        start = t0 + span_ns + np.r_[0, np.cumsum(dur)[:-1]] + np.arange(len(owner)) * T
        name = np.where(owner == 0, np.char.add("wide_kernel_", within.astype(str)),
                        np.array(LAYER_KERNELS)[(owner * 7 + within) % len(LAYER_KERNELS)])
        launch = t0 + 5 * T + owner * 10 * T + T + within * (4 * T // per_layer[owner])  # inside the range
        kr.append(pd.DataFrame({"start_ns": start, "end_ns": start + dur, "api_start_ns": launch,
                                "api_end_ns": launch + 100, "name": name}))
    nvtx = pd.concat(nv, ignore_index=True).assign(global_tid=5, domain="TensorRT", event_type="push_pop",
                                                   end_global_tid=5, pid=1, tid=5)
    nvtx["end_ns"] = nvtx["end_ns"].astype("Int64")
    k = pd.concat(kr, ignore_index=True)
    k = k.assign(api_tid=5, correlation_id=np.arange(1, len(k) + 1), device_id=0, stream_id=7, pid=1, short_name="k")
    calls = pd.DataFrame({"name": "cudaLaunchKernel", "start_ns": k["api_start_ns"], "end_ns": k["api_end_ns"],
                          "global_tid": 5, "category": "launch", "pid": 1, "tid": 5, "api": "runtime",
                          "correlation_id": k["correlation_id"]})
    return Trace(kernels=k, nvtx=nvtx, api=calls)
