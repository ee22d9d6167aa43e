#!/usr/bin/env python3
"""Small GPU workloads whose right diagnosis is known by construction, for trtprof's sample traces.

Each workload runs for about a second on an H200 under ``nsys profile`` (see ``capture_all.sh``).
Every iteration sits inside one NVTX range with a clear name (default NVTX domain, through
``torch.cuda.nvtx``), except in ``no_nvtx``. Warm-up happens first, outside any range, so module
loading and library handle creation stay out of the ranges.

Usage: ``python3 workloads.py NAME [--manifest PATH]``; NAME is one of ``WORKLOADS``. The manifest
(JSON) records what the workload did: iteration counts, range names, and the known answers (for
``host_stall`` the 0-based indices of the stalled iterations).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import torch

DEV = "cuda"


def _push(name: str) -> None:
    torch.cuda.nvtx.range_push(name)


def _pop() -> None:
    torch.cuda.nvtx.range_pop()


def _tiny_ops(x: torch.Tensor, kernels: int) -> None:
    """``kernels`` tiny in-place elementwise kernels on ``x`` (4096 floats: ~2 us of GPU work each)."""
    for i in range(kernels // 2):
        x.mul_(0.999)
        x.add_(0.001)


def launch_bound(iterations: int = 100, kernels: int = 100) -> dict[str, Any]:
    """Eager loop of many tiny kernels: the host launches slower than the GPU runs them."""
    x = torch.randn(4096, device=DEV)
    for _ in range(5):
        _tiny_ops(x, kernels)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("launch_bound.iter")
        _tiny_ops(x, kernels)
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"launch_bound.iter": iterations}, "kernels_per_iteration": kernels,
            "sync_inside_ranges": False}


def graph(iterations: int = 100, kernels: int = 100) -> dict[str, Any]:
    """The launch_bound loop captured once with torch.cuda.CUDAGraph and replayed per iteration."""
    x = torch.randn(4096, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as torch's capture docs advise
        for _ in range(3):
            _tiny_ops(x, kernels)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _tiny_ops(x, kernels)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("graph.iter")
        g.replay()
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"graph.iter": iterations}, "kernels_per_graph": kernels, "sync_inside_ranges": False}


def host_stall(iterations: int = 100, period: int = 10, offset: int = 7, stall_ms: float = 5.0) -> dict[str, Any]:
    """A GPU-bound query loop (matmuls, then a stream sync) whose every ``period``-th iteration first
    sleeps ``stall_ms`` on the host (time.sleep -> clock_nanosleep) while the GPU sits idle."""
    a = torch.randn(2048, 2048, device=DEV)
    b = torch.randn(2048, 2048, device=DEV)
    c = torch.empty_like(a)
    stream = torch.cuda.current_stream()
    for _ in range(5):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    stalled = [i for i in range(iterations) if i % period == offset]
    for i in range(iterations):
        _push("host_stall.query")
        if i % period == offset:
            time.sleep(stall_ms / 1000.0)
        for _ in range(4):
            torch.mm(a, b, out=c)
        stream.synchronize()
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"host_stall.query": iterations}, "stalled_indices": stalled, "stall_ms": stall_ms,
            "sync_inside_ranges": True, "sync_call": "cudaStreamSynchronize (one per query, waits for its result)"}


def pageable_vs_pinned(iterations: int = 40, size_bytes: int = 16 << 20) -> dict[str, Any]:
    """The same-size H2D and D2H copies, from pageable and from pinned host memory."""
    n = size_bytes // 4
    dev = torch.empty(n, device=DEV)
    pageable = torch.randn(n)
    pinned = torch.randn(n).pin_memory()
    stream = torch.cuda.current_stream()
    for _ in range(3):
        dev.copy_(pageable)
        pageable.copy_(dev)
        dev.copy_(pinned, non_blocking=True)
        pinned.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("copy.pageable")
        dev.copy_(pageable)          # H2D from pageable memory
        pageable.copy_(dev)          # D2H to pageable memory
        _pop()
        _push("copy.pinned")
        dev.copy_(pinned, non_blocking=True)   # H2D from pinned memory
        pinned.copy_(dev, non_blocking=True)   # D2H to pinned memory
        stream.synchronize()
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"copy.pageable": iterations, "copy.pinned": iterations}, "copy_bytes": size_bytes,
            "copies_per_range": {"h2d": 1, "d2h": 1}}


def _one_stream_then_all(work_on: Any, ss: list, main: Any, iterations: int) -> dict[str, Any]:
    """Three warm-up rounds, then per iteration the work on ``main`` alone (range ``multistream.s1``)
    and spread over the streams ``ss`` (``multistream.s<N>``), each waited for inside its range."""
    streams = len(ss)
    for _ in range(3):
        work_on(ss)
        work_on([main] * streams)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("multistream.s1")
        work_on([main] * streams)
        main.synchronize()
        _pop()
        _push(f"multistream.s{streams}")
        work_on(ss)
        main.synchronize()
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"multistream.s1": iterations, f"multistream.s{streams}": iterations}}


def multistream(iterations: int = 40, streams: int = 4, kernels_per_stream: int = 4,
                spin_cycles: int = 200_000) -> dict[str, Any]:
    """Independent work on ``streams`` streams that overlaps, against the same work on one stream.

    Each kernel is ``torch.cuda._sleep``: one thread block spinning ``spin_cycles`` clock cycles
    (~100 us), far longer than its launch and using one SM, so kernels on different streams run
    side by side; on one stream they run back to back."""
    ss = [torch.cuda.Stream() for _ in range(streams)]
    main = torch.cuda.current_stream()

    def work_on(s_list: list) -> None:
        for s in s_list:
            s.wait_stream(main)
            with torch.cuda.stream(s):
                for _ in range(kernels_per_stream):
                    torch.cuda._sleep(spin_cycles)
        for s in s_list:
            main.wait_stream(s)

    return {**_one_stream_then_all(work_on, ss, main, iterations), "streams": streams,
            "kernels_per_stream": kernels_per_stream, "spin_cycles": spin_cycles}


def multistream_saturated(iterations: int = 40, streams: int = 4, mms_per_stream: int = 8,
                          size: int = 1024) -> dict[str, Any]:
    """Matmul chains on ``streams`` streams that cannot overlap: each 1024x1024 fp32 matmul fills the GPU."""
    mats = [(torch.randn(size, size, device=DEV), torch.randn(size, size, device=DEV),
             torch.empty(size, size, device=DEV)) for _ in range(streams)]
    ss = [torch.cuda.Stream() for _ in range(streams)]
    main = torch.cuda.current_stream()

    def work_on(s_list: list) -> None:
        for k, (a, b, c) in enumerate(mats):
            s = s_list[k]
            s.wait_stream(main)
            with torch.cuda.stream(s):
                for _ in range(mms_per_stream):
                    torch.mm(a, b, out=c)
            main.wait_stream(s)

    return {**_one_stream_then_all(work_on, ss, main, iterations), "streams": streams,
            "matmuls_per_stream": mms_per_stream, "matrix_size": size}


def no_nvtx(iterations: int = 60, kernels: int = 100) -> dict[str, Any]:
    """The launch_bound loop with no NVTX at all: the whole capture is one window."""
    x = torch.randn(4096, device=DEV)
    for _ in range(5):
        _tiny_ops(x, kernels)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _tiny_ops(x, kernels)
    torch.cuda.synchronize()
    return {"ranges": {}, "iterations": iterations, "kernels_per_iteration": kernels}


def sync_heavy(iterations: int = 60, steps: int = 8) -> dict[str, Any]:
    """A hot range that calls cudaDeviceSynchronize after every matmul and a stream sync at its end."""
    a = torch.randn(1024, 1024, device=DEV)
    b = torch.randn(1024, 1024, device=DEV)
    c = torch.empty_like(a)
    for _ in range(5):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("sync_heavy.step")
        for _ in range(steps):
            torch.mm(a, b, out=c)
            torch.cuda.synchronize()  # cudaDeviceSynchronize
        torch.cuda.current_stream().synchronize()  # cudaStreamSynchronize
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"sync_heavy.step": iterations}, "device_syncs_per_iteration": steps,
            "stream_syncs_per_iteration": 1}


def transfer_bound(iterations: int = 40, size_bytes: int = 32 << 20) -> dict[str, Any]:
    """Pinned H2D + a light elementwise pass + D2H: the copies take far longer than the compute."""
    n = size_bytes // 4
    host_in = torch.randn(n).pin_memory()
    host_out = torch.empty(n).pin_memory()
    dev = torch.empty(n, device=DEV)
    stream = torch.cuda.current_stream()
    for _ in range(3):
        dev.copy_(host_in, non_blocking=True)
        dev.mul_(2.0)
        host_out.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    for _ in range(iterations):
        _push("transfer_bound.step")
        dev.copy_(host_in, non_blocking=True)
        dev.mul_(2.0)
        dev.add_(1.0)
        host_out.copy_(dev, non_blocking=True)
        stream.synchronize()
        _pop()
    torch.cuda.synchronize()
    return {"ranges": {"transfer_bound.step": iterations}, "copy_bytes": size_bytes}


def pipeline(iterations: int = 160, sync_every: int = 16, batch: int = 512) -> dict[str, Any]:
    """A healthy double-buffered loop: the next batch's pinned H2D copy runs on a copy stream while this
    batch computes; the host runs ahead and synchronises every ``sync_every``-th iteration, where it waits
    for the GPU work queued by the earlier ones (a saturated GPU, not jitter)."""
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(6)]).to(DEV).eval()
    host = [torch.randn(batch, 4096).pin_memory() for _ in range(2)]
    buf = [torch.empty(batch, 4096, device=DEV) for _ in range(2)]
    copy, main = torch.cuda.Stream(), torch.cuda.current_stream()
    ready = [torch.cuda.Event() for _ in range(2)]
    synced = [i for i in range(iterations) if i % sync_every == sync_every - 1]
    with torch.no_grad():
        for _ in range(3):
            model(buf[0])
        torch.cuda.synchronize()
        with torch.cuda.stream(copy):
            buf[0].copy_(host[0], non_blocking=True)
            ready[0].record(copy)
        for i in range(iterations):
            _push("pipeline.infer")
            cur, nxt = i % 2, (i + 1) % 2
            main.wait_event(ready[cur])
            with torch.cuda.stream(copy):
                copy.wait_stream(main)  # buf[nxt] is free once the work queued so far has run
                buf[nxt].copy_(host[nxt], non_blocking=True)
                ready[nxt].record(copy)
            model(buf[cur])
            if i in synced:
                torch.cuda.synchronize()
            _pop()
    torch.cuda.synchronize()
    return {"ranges": {"pipeline.infer": iterations}, "synchronised_indices": synced, "batch": batch}


def varbatch(iterations: int = 150, batches: tuple[int, ...] = (1, 8, 64)) -> dict[str, Any]:
    """Requests with batch sizes drawn from ``batches`` (a fixed pseudo-random sequence) through a small CNN,
    each ending with its result copied to the host: latency follows the work each request brings."""
    import random

    rng = random.Random(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).to(DEV).eval()
    inputs = {b: torch.randn(b, 3, 128, 128, device=DEV) for b in batches}
    sizes = [rng.choice(batches) for _ in range(iterations)]
    with torch.no_grad():
        for b in batches:
            model(inputs[b]).cpu()
        for b in sizes:
            _push("varbatch.request")
            model(inputs[b]).cpu()
            _pop()
    torch.cuda.synchronize()
    return {"ranges": {"varbatch.request": iterations}, "batch_sizes": sizes}


def queue_wait(bursts: int = 12, per_burst: int = 10, pause_ms: float = 30.0) -> dict[str, Any]:
    """A server at low load: a producer thread puts ``per_burst`` requests on a queue, then sleeps
    ``pause_ms``; the serving thread takes each off the queue (``sem_wait`` between requests) and infers."""
    import queue
    import threading

    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(DEV).eval()
    x = torch.randn(32, 1024, device=DEV)
    requests: queue.Queue = queue.Queue()

    def produce() -> None:
        for _ in range(bursts):
            for r in range(per_burst):
                requests.put(r)
            time.sleep(pause_ms / 1000.0)
        requests.put(None)

    with torch.no_grad():
        for _ in range(3):
            model(x).cpu()
        threading.Thread(target=produce, daemon=True).start()
        served = 0
        while requests.get() is not None:
            _push("queue_wait.request")
            model(x).argmax(-1).cpu()
            _pop()
            served += 1
    torch.cuda.synchronize()
    return {"ranges": {"queue_wait.request": served}, "bursts": bursts, "per_burst": per_burst, "pause_ms": pause_ms}


WORKLOADS: dict[str, Callable[..., dict[str, Any]]] = {
    "launch_bound": launch_bound,
    "graph": graph,
    "host_stall": host_stall,
    "pageable_vs_pinned": pageable_vs_pinned,
    "multistream": multistream,
    "multistream_saturated": multistream_saturated,
    "no_nvtx": no_nvtx,
    "sync_heavy": sync_heavy,
    "transfer_bound": transfer_bound,
    "pipeline": pipeline,
    "varbatch": varbatch,
    "queue_wait": queue_wait,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(WORKLOADS))
    ap.add_argument("--manifest", help="write what the workload did (JSON) here")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.perf_counter()
    info = WORKLOADS[args.name]()
    info["workload"] = args.name
    info["wall_s"] = round(time.perf_counter() - t0, 3)
    info["gpu"] = torch.cuda.get_device_name()
    info["torch"] = torch.__version__
    print(json.dumps(info))
    if args.manifest:
        with open(args.manifest, "w") as f:
            json.dump(info, f, indent=2)


if __name__ == "__main__":
    main()
