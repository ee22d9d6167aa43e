"""Shared by the capture tests: synthetic frame builders (times in ns), each real capture analysed once, and
read-only SQL on a capture to check an analysis against.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.capture.analyze import AnalysisOptions, analyze_path
from profiler.capture.trace import Trace

_CACHE: dict[Path, object] = {}


def sql_rows(path: Path, query: str) -> list[tuple]:
    """The rows of ``query`` on a capture, opened read-only (what SQL says, to check an analysis against)."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


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


def two_threads(*, same_context: bool, overlap: bool, waits: str | None):
    """Two threads, 20 inferences each of one 400 us kernel; contexts 1 and 2 (or one), kernels one after the
    other (or at once); each thread waits ``waits`` ('alternate' or 'together') 450 us per iteration."""
    from profiler.capture.trace import Trace

    ks, rs, os_rows = [], [], []
    for i in range(20):
        for th in (1, 2):
            t0 = 1_000_000 + i * 1000 * T + (0 if overlap or th == 1 else 500 * T)
            rs.append(("infer", t0, t0 + 450 * T, th))
            ks.append((t0 + 20 * T, t0 + 420 * T, th, t0 + 5 * T, 1 + 2 * (i * 2 + th)))
            if waits:  # alternate: each waits while the other runs
                base = 1_000_000 + i * 1000 * T
                w0 = base + (500 * T if th == 1 or waits == "together" else 0)
                os_rows.append({"start_ns": w0, "end_ns": w0 + 450 * T, "name": "sem_wait", "pid": 1, "tid": th,
                                "global_tid": th})
    frame = kernels(*ks)
    frame["context_id"] = [1 if same_context else r[2] for r in ks]
    frame["stream_id"] = [10 + r[2] for r in ks]
    gpus = [{"device_id": 0, "name": "GPU", "compute_major": 8, "compute_minor": 0}]
    osrt = pd.DataFrame(os_rows) if os_rows else None
    return Trace.from_frames(meta={"gpus": gpus}, kernels=frame, nvtx=ranges(*rs),
                             **({"osrt": osrt} if osrt is not None else {}))


# -- stream_race, repeated_setup and host_sleeps: each pattern and its healthy twins --------------------------
RACE_N = 20
RACE_PERIOD_NS = 200 * T
COPY_STREAM, TRT_STREAM = 9, 8


def _race_copy(i: int, launch_ns: int, start_ns: int, end_ns: int) -> dict:
    return {"start_ns": start_ns, "end_ns": end_ns, "api_tid": 5, "api_start_ns": launch_ns,
            "correlation_id": 5000 + i, "device_id": 0, "stream_id": COPY_STREAM, "pid": 1, "bytes": 602112,
            "copy_kind": "HtoD", "src_kind": "pinned", "dst_kind": "device"}


def race_app(mode: str, racing: int = 20) -> Trace:
    """A pycuda-shaped loop: the input copy on stream 9 (launched before the 'infer' range), then three kernels on
    stream 8 launched inside it, then a stream synchronisation. ``race``: the first kernel starts 10 us into the
    50 us copy; ``joined``: a cudaStreamWaitEvent before the range, the kernels after the copy; ``pipelined``: the
    next inference's copy is launched inside this one's range after its kernels, overlapping them, and joined by
    an event wait before the next range; ``prefetch``: the same, the next copy launched before this inference's
    kernels (each range starts with the event wait). ``racing`` inferences race (the others' kernels start late)."""
    krows, copies, calls, nv = [], [], [], []
    for i in range(RACE_N):
        t = i * RACE_PERIOD_NS
        nv.append(("infer", t + 10 * T, t + 150 * T, 5))
        if mode == "prefetch":  # the next input copied first, then this inference's kernels launched
            calls.append(("cudaStreamWaitEvent", t + 11 * T, t + 11 * T + 500, 5, "other"))
            if i == 0:
                copies.append(_race_copy(0, t + 1 * T, t + 3 * T, t + 8 * T))
            if i + 1 < RACE_N:
                copies.append(_race_copy(i + 1, t + 11 * T + 600, t + 16 * T, t + 66 * T))
            first = t + 15 * T
        elif mode == "pipelined":
            if i == 0:
                copies.append(_race_copy(0, t + 1 * T, t + 3 * T, t + 8 * T))
            calls.append(("cudaStreamWaitEvent", t + 8 * T, t + 9 * T, 5, "other"))
            first = t + 20 * T
            if i + 1 < RACE_N:  # the next input, behind this inference's launches, overlapping its kernels
                copies.append(_race_copy(i + 1, t + 40 * T, t + 45 * T, t + 95 * T))
        else:
            copies.append(_race_copy(i, t + 1 * T, t + 5 * T, t + 55 * T))
            if mode == "joined":
                calls.append(("cudaStreamWaitEvent", t + 4 * T, t + 5 * T, 5, "other"))
            first = t + (15 if mode == "race" and i < racing else 60) * T
        for j in range(3):
            krows.append((first + j * 25 * T, first + (j * 25 + 20) * T, 5, t + (12 + 2 * j) * T, 100 * i + j + 1))
        calls.append(("cudaStreamSynchronize", t + 20 * T, t + 140 * T, 5, "sync"))
    return Trace(kernels=kernels(*krows, stream_id=TRT_STREAM), memcpy=pd.DataFrame(copies), api=api(*calls),
                 nvtx=ranges(*nv))


SETUP_N = 12
SETUP_PERIOD_NS = 19_600 * T  # per image: the host is in setup calls for most of the time the GPU idles
SETUP_WEIGHTS_BYTES = 64 << 20
SETUP_MODULES = 5


def _setup_calls_at(t: int) -> list[tuple]:
    """Before an inference: SETUP_MODULES cuModuleLoadData of 1 ms, a stream creation, three cudaMalloc of 100 us."""
    calls = [("cuModuleLoadData", t + j * 1000 * T, t + (j + 1) * 1000 * T - 10 * T, 5, "other") for j in range(SETUP_MODULES)]
    calls.append(("cudaStreamCreateWithFlags", t + 5000 * T, t + 5050 * T, 5, "other"))
    calls += [("cudaMalloc_v3020", t + (5100 + 200 * j) * T, t + (5200 + 200 * j) * T, 5, "other") for j in range(3)]
    return calls


def _teardown_calls_at(t: int) -> list[tuple]:
    """After an inference: the modules unloaded (1 ms each) and the buffers freed (50 us each)."""
    calls = [("cuModuleUnload", t + j * 1000 * T, t + (j + 1) * 1000 * T - 5 * T, 5, "other") for j in range(SETUP_MODULES)]
    calls += [("cudaFree", t + (5000 + 100 * j) * T, t + (5050 + 100 * j) * T, 5, "other") for j in range(3)]
    return calls


def rebuild_app(rebuild: bool) -> Trace:
    """SETUP_N images; each inference is an 'infer' range of 10 kernels of 200 us. ``rebuild``: every image first loads
    the engine (_setup_calls_at), uploads its 64 MiB of weights (6 ms) and afterwards tears it down (_teardown_calls_at);
    else that happens once, before the first image."""
    krows, copies, calls, nv = [], [], [], []
    for i in range(SETUP_N):
        t = i * SETUP_PERIOD_NS
        if rebuild or i == 0:
            calls += _setup_calls_at(t)
            copies.append({"start_ns": t + 5800 * T, "end_ns": t + 11_800 * T, "api_tid": 5, "api_start_ns": t + 5790 * T,
                           "correlation_id": 9000 + i, "device_id": 0, "stream_id": 7, "pid": 1, "bytes": SETUP_WEIGHTS_BYTES,
                           "copy_kind": "HtoD", "src_kind": "pageable", "dst_kind": "device"})
        s = t + 12_000 * T
        nv.append(("infer", s, s + 2100 * T, 5))
        for j in range(10):
            krows.append((s + (10 + 205 * j) * T, s + (210 + 205 * j) * T, 5, s + (2 + 3 * j) * T, 100 * i + j + 1))
        calls.append(("cudaStreamSynchronize", s + 40 * T, s + 2080 * T, 5, "sync"))
        if rebuild:
            calls += _teardown_calls_at(s + 2200 * T)
    return Trace(kernels=kernels(*krows), memcpy=pd.DataFrame(copies), api=api(*calls), nvtx=ranges(*nv))


SLEEP_N = 10
SLEEP_KERNEL_US = 2000


def sleep_app(waits_us: list[int]) -> Trace:
    """SLEEP_N 'infer' ranges of one 2 ms kernel and its sync; before each but the first, the feeding thread (5) is in
    select() for ``waits_us[i]``, the GPU idle meanwhile."""
    krows, calls, nv, os_calls = [], [], [], []
    t = 0
    for i in range(SLEEP_N):
        if i:
            os_calls.append({"name": "select", "start_ns": t, "end_ns": t + waits_us[i] * T, "global_tid": 5,
                             "tid": 5, "pid": 1})
            t += waits_us[i] * T + 10 * T
        nv.append(("infer", t, t + (SLEEP_KERNEL_US + 30) * T, 5))
        krows.append((t + 10 * T, t + (10 + SLEEP_KERNEL_US) * T, 5, t + 2 * T, i + 1))
        calls.append(("cudaStreamSynchronize", t + 5 * T, t + (SLEEP_KERNEL_US + 15) * T, 5, "sync"))
        t += (SLEEP_KERNEL_US + 40) * T
    return Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv), osrt=pd.DataFrame(os_calls))


def exact_timeouts_us(n: int = 10) -> list[int]:
    """50.06 ms, give or take the timer's 20-odd microseconds."""
    return [50_060 + d for d in ([0, 12, -8, 25, 3, -15, 9, 0, 18, -4] * 2)[:n]]


def sleep_in_range_app(sleep_us: int = 50_060, n: int = 40) -> Trace:
    """``n`` 'infer' ranges of a 1 ms kernel and its sync; every fifth also sleeps in select() for ``sleep_us``
    inside the range, before its launch (the range's outliers)."""
    krows, calls, nv, os_calls = [], [], [], []
    t = 0
    for i in range(n):
        w = sleep_us if i % 5 == 4 else 0
        nv.append(("infer", t, t + (1030 + w) * T, 5))
        if w:
            os_calls.append({"name": "select", "start_ns": t + 5 * T, "end_ns": t + (5 + w) * T, "global_tid": 5,
                             "tid": 5, "pid": 1})
        s = t + (10 + w) * T
        krows.append((s + 10 * T, s + 1010 * T, 5, s + 2 * T, i + 1))
        calls.append(("cudaStreamSynchronize", s + 5 * T, s + 1015 * T, 5, "sync"))
        t += (1100 + w) * T
    return Trace(kernels=kernels(*krows), api=api(*calls), nvtx=ranges(*nv), osrt=pd.DataFrame(os_calls))


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


def _copy_row(kind: str, launch_ns: int, start_ns: int, end_ns: int, tid: int, stream: int, corr: int) -> dict:
    return {"start_ns": start_ns, "end_ns": end_ns, "api_tid": tid, "api_start_ns": launch_ns,
            "correlation_id": corr, "device_id": 0, "stream_id": stream, "pid": 1, "bytes": 1 << 20,
            "copy_kind": kind, "src_kind": "device" if kind != "HtoD" else "pinned",
            "dst_kind": "pinned" if kind == "DtoH" else "device"}


def output_race_app(mode: str, racing: int = RACE_N) -> Trace:
    """Per inference (range 'infer', thread 5) three kernels on stream 8 launched at +12, +14, +16 us, running
    [20, 40), [45, 65), [70, 90) us, then a D2H copy of the output on stream 9 launched at +18 us, then a stream
    synchronisation. ``race``: the copy runs [22, 32) us (during the first kernel, before the others start);
    ``joined``: the same with a cudaEventSynchronize at +17 us, between the launches (only the call orders them:
    the GPU times are kept to show it); ``waited``: the copy's stream waits on an event at +11 us (before the
    kernels' launches: the previous inference's output, joined by events), and an H2D copy follows on that stream.
    ``racing`` inferences race (the
    others' copy runs after the kernels, [92, 102) us)."""
    krows, copies, calls, nv = [], [], [], []
    for i in range(RACE_N):
        t = i * RACE_PERIOD_NS
        nv.append(("infer", t + 10 * T, t + 150 * T, 5))
        for j in range(3):
            krows.append((t + (20 + 25 * j) * T, t + (40 + 25 * j) * T, 5, t + (12 + 2 * j) * T, 100 * i + j + 1))
        early = i < racing
        copies.append(_copy_row("DtoH", t + 18 * T, t + (22 if early else 92) * T, t + (32 if early else 102) * T,
                                5, COPY_STREAM, 5000 + i))
        if mode == "joined":
            calls.append(("cudaEventSynchronize", t + 17 * T, t + 17 * T + 500, 5, "sync"))
        if mode == "waited":  # and the next input staged on the copy stream right after (no wait between)
            calls.append(("cudaStreamWaitEvent", t + 11 * T, t + 11 * T + 500, 5, "other"))
            copies.append(_copy_row("HtoD", t + 19 * T, t + 33 * T, t + 34 * T, 5, COPY_STREAM, 9000 + i))
        calls.append(("cudaStreamSynchronize", t + 20 * T, t + 140 * T, 5, "sync"))
    return Trace(kernels=kernels(*krows, stream_id=TRT_STREAM), memcpy=pd.DataFrame(copies), api=api(*calls),
                 nvtx=ranges(*nv))


PRODUCER_TID, CONSUMER_TID = 5, 6


def thread_race_app(mode: str, racing: int = RACE_N) -> Trace:
    """A producer thread (5, range 'produce' [0, 100) us of each 200 us item): an H2D copy on stream 8 launched at
    +1 us, three kernels on stream 8 launched at +2, +4, +6 us running [10, 30), [31, 51), [52, 72) us, then a
    stream sync [8, 73) us. A consumer thread (6, range 'consume' [10, 100) us): a D2H copy on stream 9 launched at
    +12 us, then a stream sync [13, 90) us. ``race``: the copy runs [14, 24) us (during the first kernel, before
    the others start); ``event``: the consumer makes its stream wait on an event at +11 us; ``lag``: the
    consumer is one item behind (its item n at the producer's item n+1: a previous output copied behind the next
    item's compute); ``synced``: the producer's stream sync returns at +11.5 us, before the consumer's launch
    (only the call orders them: the GPU times are kept to show it); ``feeding``: the consumer copies to the device itself (an independent worker). ``racing``
    items race (the others' copy runs after the kernels)."""
    krows, copies, calls, nv = [], [], [], []
    lag = 1 if mode == "lag" else 0
    for i in range(RACE_N):
        t = i * RACE_PERIOD_NS
        nv.append(("produce", t, t + 100 * T, PRODUCER_TID))
        copies.append(_copy_row("HtoD", t + 1 * T, t + 3 * T, t + 8 * T, PRODUCER_TID, TRT_STREAM, 6000 + i))
        for j in range(3):
            krows.append((t + (10 + 21 * j) * T, t + (30 + 21 * j) * T, PRODUCER_TID, t + (2 + 2 * j) * T,
                          100 * i + j + 1))
        sync_end = t + (11 * T + 500 if mode == "synced" else 73 * T)
        calls.append(("cudaStreamSynchronize", t + 8 * T, sync_end, PRODUCER_TID, "sync"))
        if i < lag:
            continue
        nv.append(("consume", t + 10 * T, t + 100 * T, CONSUMER_TID))
        early = i < racing + lag
        copies.append(_copy_row("DtoH", t + 12 * T, t + (14 if early else 80) * T, t + (24 if early else 90) * T,
                                CONSUMER_TID, COPY_STREAM, 7000 + i))
        if mode == "feeding":
            copies.append(_copy_row("HtoD", t + 11 * T, t + 11 * T + 200, t + 11 * T + 400, CONSUMER_TID,
                                    COPY_STREAM, 8000 + i))
        if mode == "event":
            calls.append(("cudaStreamWaitEvent", t + 11 * T, t + 11 * T + 500, CONSUMER_TID, "other"))
        calls.append(("cudaStreamSynchronize", t + 13 * T, t + 90 * T, CONSUMER_TID, "sync"))
    return Trace(kernels=kernels(*krows, stream_id=TRT_STREAM), memcpy=pd.DataFrame(copies), api=api(*calls),
                 nvtx=ranges(*nv))
