#!/usr/bin/env python3
"""Workloads that show how real applications name, stage and break their captures, and the mistakes an expert
reads off a timeline, each beside its healthy twin (see the README's "Patterns" section).

Each runs for a second or two on an H200 under ``nsys profile`` (``capture_patterns.sh``). NVTX ranges go through
``torch.cuda.nvtx`` (default domain) or, where torch is not loaded, the ``nvtx`` package (default domain);
TensorRT-shaped ranges use the ``TensorRT`` domain as ``trt_shaped.py`` does. Workloads that drive the CUDA driver
directly (``two_contexts``, ``one_context_two_streams``, ``rebuild``) call ``libcuda`` through ctypes (which
releases the GIL during each call) and launch ``spin`` from ``spin.cu``, compiled to a cubin beforehand
(``nvcc -cubin -arch=sm_90 -o $SPIN_CUBIN sample_traces/spin.cu``; default path /tmp/trtprof-spin.cubin).

Usage: ``python3 patterns.py NAME [--manifest PATH]``; NAME is one of ``WORKLOADS``. The manifest (JSON) says
what the workload did: ``ranges`` (name -> count, checked against the capture by the tests), and the known answers.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

DEV = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
SPIN_CUBIN = os.environ.get("SPIN_CUBIN", "/tmp/trtprof-spin.cubin")
MANIFEST: str | None = None  # set by main(): workloads that die before returning write it themselves


def _torch():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def _push(name: str) -> None:
    import torch

    torch.cuda.nvtx.range_push(name)


def _pop() -> None:
    import torch

    torch.cuda.nvtx.range_pop()


def _write_manifest(info: dict[str, Any]) -> None:
    if MANIFEST:
        with open(MANIFEST, "w") as f:
            json.dump(info, f, indent=2)


# ----------------------------------------------------------------------------- issue 29: how apps name units
def _mlp(torch, layers: int = 24, width: int = 256):
    """A small model of ``layers`` Linear+ReLU pairs (one GEMM and one ReLU kernel each: ~48 small kernels)."""
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods).to(DEV).eval()


def numbered(graph: bool = False, warmups: int = 5, inferences: int = 60, kill_at: int | None = None,
             pace_ms: float = 0.0) -> dict[str, Any]:
    """``Warmup 0``..``Warmup 4`` then ``Inference 0``..``Inference 59``, each one forward of the small MLP
    followed by a stream sync, no enclosing range. ``graph``: the model captured as a CUDA graph during the
    warm-ups (eager in Warmup 0-2 on a side stream, captured in Warmup 3) and replayed once per inference."""
    torch = _torch()
    model = _mlp(torch)
    x = torch.randn(8, 256, device=DEV)
    stream = torch.cuda.current_stream()
    g = None
    with torch.no_grad():
        for i in range(warmups):
            _push(f"Warmup {i}")
            if not graph:
                model(x)
            elif i < 3:
                side = torch.cuda.Stream()
                side.wait_stream(stream)
                with torch.cuda.stream(side):
                    model(x)
                stream.wait_stream(side)
            else:
                if g is None:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        model(x)
                g.replay()
            stream.synchronize()
            _pop()
        for i in range(inferences):
            _push(f"Inference {i}")
            if g is not None:
                g.replay()
            else:
                model(x)
            if kill_at is not None and i == kill_at:
                info = {"ranges": {}, "planned": {"Warmup #": warmups, "Inference #": inferences},
                        "killed_in": f"Inference {i}", "closed_before_kill": {"Warmup #": warmups, "Inference #": i},
                        "signal": "SIGKILL", "kernels_per_inference": 48}
                _write_manifest(info)
                print(json.dumps(info), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            stream.synchronize()
            _pop()
            if pace_ms:
                time.sleep(pace_ms / 1000.0)
    torch.cuda.synchronize()
    ranges = {f"Warmup {i}": 1 for i in range(warmups)} | {f"Inference {i}": 1 for i in range(inferences)}
    return {"ranges": ranges, "series": {"Warmup #": warmups, "Inference #": inferences},
            "cuda_graph": graph, "kernels_per_inference": 48, "sync": "cudaStreamSynchronize per range"}


STAGES = ("read_input", "preprocess", "backbone", "neck", "head", "postprocess")


def stages(frames: int = 100) -> dict[str, Any]:
    """A per-frame pipeline of six sibling stage ranges (STAGES), no enclosing per-frame range: read the input
    (host fill of a pinned frame and its H2D copy), preprocess (normalise, resize), backbone (4 convs), neck
    (2 convs, upsample, add), head (two 1x1 convs), postprocess (sigmoid, top-k, copy to the host: the sync)."""
    torch = _torch()
    F = torch.nn.functional
    half = torch.half
    host = torch.empty(1, 3, 360, 640, dtype=torch.uint8).pin_memory()
    frames_src = [torch.randint(0, 255, (1, 3, 360, 640), dtype=torch.uint8) for _ in range(4)]
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEV).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEV).view(1, 3, 1, 1) * 255

    def conv(cin, cout, k=3, s=1):
        return torch.nn.Conv2d(cin, cout, k, stride=s, padding=k // 2).to(DEV, half).eval()

    backbone = [conv(3, 32, s=2), conv(32, 64, s=2), conv(64, 128, s=2), conv(128, 128)]
    neck = [conv(128, 64), conv(64, 64)]
    head = [conv(64, 32, k=1), conv(32, 8, k=1)]

    def frame(i: int, ranged: bool) -> None:
        def stage(name):
            if ranged:
                _push(name)

        def end():
            if ranged:
                _pop()
        stage("read_input")
        host.copy_(frames_src[i % 4])
        d = host.to(DEV, non_blocking=True)
        end()
        stage("preprocess")
        x = (d.float() - mean) / std
        x = F.interpolate(x, size=(384, 640), mode="bilinear", align_corners=False).to(half)
        end()
        stage("backbone")
        for c in backbone:
            x = torch.relu(c(x))
        end()
        stage("neck")
        y = torch.relu(neck[0](x))
        y = F.interpolate(y, scale_factor=2.0, mode="nearest")
        y = torch.relu(neck[1](y)) + F.interpolate(torch.relu(neck[0](x)), scale_factor=2.0, mode="nearest")
        end()
        stage("head")
        z = head[1](torch.relu(head[0](y)))
        end()
        stage("postprocess")
        scores = torch.sigmoid(z.float()).flatten()
        top = torch.topk(scores, 100)
        top.values.cpu()
        top.indices.cpu()
        end()

    with torch.no_grad():
        for i in range(3):
            frame(i, ranged=False)
        torch.cuda.synchronize()
        for i in range(frames):
            frame(i, ranged=True)
    torch.cuda.synchronize()
    return {"ranges": {s: frames for s in STAGES}, "stages_in_order": list(STAGES), "frames": frames,
            "enclosing_range": None, "sync": "the D2H copies of postprocess (pageable: synchronous)"}


def chained_enqueues(inferences: int = 50) -> dict[str, Any]:
    """``infer 0``..``infer 49`` (default domain): per inference a 6 MiB pinned H2D input copy, four
    TensorRT-shaped engines enqueued one after the other on one stream (each an ``ExecutionContext::enqueueV3``
    range in the ``TensorRT`` domain with its layer ranges nested), a D2H copy of the last output, a stream sync."""
    import nvtx

    torch = _torch()
    domain = "TensorRT"
    engines = {
        "detector": [("Conv_0 + Relu_1", 3, 64), ("Conv_2 + Relu_3", 64, 64), ("Conv_4", 64, 32)],
        "landmarks": [("Conv_0 + Relu_1", 32, 64), ("Conv_2 + Relu_3", 64, 64), ("Conv_4", 64, 32)],
        "embedder": [("Conv_0 + Relu_1", 32, 64), ("Conv_2 + Relu_3", 64, 64), ("Conv_4", 64, 32)],
        "classifier": [("Conv_0 + Relu_1", 32, 64), ("GlobalAveragePool_2", 64, 64), ("Gemm_3", 64, 1000)],
    }
    w = {(e, n): torch.randn(co, ci, 3, 3, device=DEV, dtype=torch.half) * 0.05
         for e, layers in engines.items() for n, ci, co in layers if n.startswith("Conv")}
    fc = torch.randn(64, 1000, device=DEV, dtype=torch.half) * 0.05
    stream = torch.cuda.Stream()
    h_in = torch.randn(16, 3, 256, 256, dtype=torch.half).pin_memory()  # 6 MiB
    d_in = torch.empty(16, 3, 256, 256, device=DEV, dtype=torch.half)
    h_out = torch.empty(16, 1000, dtype=torch.half).pin_memory()

    def layer(e, name, x):
        if name.startswith("Conv"):
            x = torch.nn.functional.conv2d(x, w[(e, name)], padding=1)
            return torch.relu(x) if "Relu" in name else x
        if name.startswith("GlobalAveragePool"):
            return x.mean(dim=(2, 3))
        return x @ fc

    def run(ranged: bool):
        x = d_in
        for e, layers in engines.items():
            if ranged:
                nvtx.push_range("ExecutionContext::enqueueV3", domain=domain)
            for name, _, _ in layers:
                if ranged:
                    nvtx.push_range(f"{e}/{name}", domain=domain)
                x = layer(e, name, x)
                if ranged:
                    nvtx.pop_range(domain=domain)
            if ranged:
                nvtx.pop_range(domain=domain)
            if e == "detector":
                x = torch.nn.functional.max_pool2d(x, 2)  # the engines' outputs are the next one's inputs
        return x

    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):
            d_in.copy_(h_in, non_blocking=True)
            run(False)
        stream.synchronize()
        for i in range(inferences):
            _push(f"infer {i}")
            d_in.copy_(h_in, non_blocking=True)
            h_out.copy_(run(True), non_blocking=True)
            stream.synchronize()
            _pop()
    torch.cuda.synchronize()
    return {"ranges": {f"infer {i}": 1 for i in range(inferences)}, "series": {"infer #": inferences},
            "enqueues_per_inference": len(engines), "engines_in_order": list(engines),
            "enqueue_range": "TensorRT:ExecutionContext::enqueueV3",
            "layers_per_engine": {e: [f"{e}/{n}" for n, _, _ in ls] for e, ls in engines.items()}}


def killed() -> dict[str, Any]:
    """The numbered_eager loop that sends itself SIGKILL in ``Inference 150`` (of 400 planned), with that
    inference's kernels queued: no atexit, no CUPTI flush, no NVTX range end."""
    return numbered(inferences=400, kill_at=150)


def truncated() -> dict[str, Any]:
    """The numbered_eager loop paced at 10 ms per inference for far longer than the collection: nsys's
    ``--duration`` ends the collection (and sends SIGTERM) in the middle of it."""
    info = numbered(inferences=3000, pace_ms=10.0)
    return info


def _mp_target() -> None:
    numbered(inferences=60)


def mp_worker(method: str) -> dict[str, Any]:
    """The numbered_eager loop run in a ``multiprocessing`` worker while the main process (no CUDA) waits in a
    range. ``fork``: the child is forked without exec (nsys traces such a child only with
    ``--trace-fork-before-exec=true``) and ends, as multiprocessing's forked children do, with ``os._exit``.
    ``spawn``: the child is a fresh interpreter (exec: traced) and exits normally."""
    import multiprocessing as mp

    import nvtx

    nvtx.push_range("main: wait for worker")
    p = mp.get_context(method).Process(target=_mp_target)
    p.start()
    p.join()
    nvtx.pop_range()
    return {"ranges": {}, "start_method": method, "worker_exitcode": p.exitcode, "worker_planned": {"Warmup #": 5, "Inference #": 60},
            "main_ranges": {"main: wait for worker": 1}}


def two_processes(iterations: int = 100) -> dict[str, Any]:
    """Two worker processes (children that inherit the environment: both traced), each with its own (primary)
    context, start the spin loop of ``contexts`` at the same moment: per iteration (range ``infer``) 4 spin
    kernels of ~100 us and a stream sync. Two processes time-slice the GPU like two contexts."""
    start = time.time() + 6.0
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "_spinner", str(start), str(iterations)])
             for _ in range(2)]
    codes = [p.wait() for p in procs]
    return {"ranges": {"infer": 2 * iterations}, "processes": 2, "exit_codes": codes,
            "iterations_per_process": iterations, "kernels_per_iteration": 4, "spin_cycles": 200_000}


def _spinner(start: float, iterations: int, kernels: int = 4, cycles: int = 200_000) -> None:
    import nvtx

    drv = Driver()
    drv.primary_context()
    fn = drv.load()[1]
    s = drv.stream()
    for _ in range(3):
        drv.spin(fn, s, cycles)
    drv.call("cuStreamSynchronize", s)
    while time.time() < start:
        time.sleep(0.001)
    for _ in range(iterations):
        nvtx.push_range("infer")
        for _ in range(kernels):
            drv.spin(fn, s, cycles)
        drv.call("cuStreamSynchronize", s)
        nvtx.pop_range()


def launcher(requests: int = 60) -> dict[str, Any]:
    """A client that starts its GPU server as a child with a clean environment (as a container runtime or a
    service manager would: nothing of the profiler's injection reaches it) and sends it ``requests`` requests
    over a pipe, each in a range ``request N``; the server infers and answers. The traced process holds the
    ranges; the GPU work is in a process nsys does not trace."""
    import nvtx

    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "PYTHONPATH") if k in os.environ}
    srv = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_server"], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "ready"
    for i in range(requests):
        nvtx.push_range(f"request {i}")
        srv.stdin.write(f"{i}\n")
        srv.stdin.flush()
        srv.stdout.readline()
        nvtx.pop_range()
    srv.stdin.close()
    srv.wait()
    return {"ranges": {f"request {i}": 1 for i in range(requests)}, "server": "child process, clean environment",
            "server_gpu_work_per_request": "one forward of the 48-kernel MLP, then cudaStreamSynchronize"}


def _server() -> None:
    torch = _torch()
    model = _mlp(torch)
    x = torch.randn(8, 256, device=DEV)
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        print("ready", flush=True)
        for line in sys.stdin:
            model(x)
            torch.cuda.current_stream().synchronize()
            print(line.strip(), flush=True)


# ----------------------------------------------------------------------------- issue 32: races
def _convnet(torch):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(512, 10)).to(DEV).eval()


def race(mode: str = "race", inferences: int = 50) -> dict[str, Any]:
    """Per inference (range ``infer``) a pinned 24 MiB H2D input copy on stream A and a conv net reading that
    input on stream B. ``race``: B starts at once, nothing orders it after the copy (the kernel may read a
    half-copied input). ``fixed``: cudaEventRecord on A after the copy, cudaStreamWaitEvent on B before the
    net. ``pipelined``: double buffering done right: the copy of the NEXT inference's input runs on A while
    B computes this one (B waits on the copy's event, A waits on the event of the compute that last read the
    buffer); the host waits for each inference's result."""
    torch = _torch()
    model = _convnet(torch)
    shape = (32, 3, 256, 256)  # fp32: 24 MiB
    h_in = [torch.randn(shape).pin_memory() for _ in range(2)]
    d_in = [torch.empty(shape, device=DEV) for _ in range(2)]
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(2)]
    consumed = [torch.cuda.Event() for _ in range(2)]
    with torch.no_grad():
        for _ in range(3):
            model(d_in[0])
        torch.cuda.synchronize()
        if mode == "pipelined":
            with torch.cuda.stream(a):
                d_in[0].copy_(h_in[0], non_blocking=True)
                copied[0].record(a)
        for i in range(inferences):
            _push("infer")
            if mode == "pipelined":
                cur, nxt = i % 2, (i + 1) % 2
                b.wait_event(copied[cur])
                with torch.cuda.stream(b):
                    out = model(d_in[cur])
                    consumed[cur].record(b)
                if i + 1 < inferences:
                    with torch.cuda.stream(a):
                        if i >= 1:
                            a.wait_event(consumed[nxt])  # the compute of inference i-1 read d_in[nxt]
                        d_in[nxt].copy_(h_in[nxt], non_blocking=True)
                        copied[nxt].record(a)
                consumed[cur].synchronize()
            else:
                with torch.cuda.stream(a):
                    d_in[0].copy_(h_in[0], non_blocking=True)
                    if mode == "fixed":
                        copied[0].record(a)
                if mode == "fixed":
                    b.wait_event(copied[0])
                with torch.cuda.stream(b):
                    out = model(d_in[0])
                b.synchronize()
                a.synchronize()
            _pop()
            del out
    torch.cuda.synchronize()
    return {"ranges": {"infer": inferences}, "mode": mode, "input_bytes": 32 * 3 * 256 * 256 * 4,
            "copy_stream": "A (first side stream)", "compute_stream": "B (second side stream)",
            "ordering": {"race": "none", "fixed": "cudaEventRecord(A) + cudaStreamWaitEvent(B) per inference",
                         "pipelined": "copy of inference i+1 on A after cudaStreamWaitEvent on the compute of i-1; "
                                      "compute of i on B after cudaStreamWaitEvent on its copy"}[mode]}


def _features(torch):
    """Two 3x3 convolutions (64 channels) with ReLU: the 'model' whose output (a 32 MiB fp32 feature map for a
    batch of 8 128x128 images) is copied back to the host."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
        torch.nn.ReLU()).to(DEV).eval()


def race_output(mode: str = "race", inferences: int = 40) -> dict[str, Any]:
    """Per inference (range ``infer``) a pinned H2D input copy and the feature net on stream A, then the
    device-to-host copy of its output on stream B. ``race``: nothing orders B after A (the host may read a
    half-written output). ``fixed``: cudaEventRecord on A after the net, cudaStreamWaitEvent on B before the copy.
    ``pipelined``: the copy of the PREVIOUS inference's output runs on B while A computes this one, B waiting on
    that inference's event first; the host waits for that copy (cudaEventSynchronize) and copies the last output
    after the loop."""
    torch = _torch()
    model = _features(torch)
    h_in = torch.randn(8, 3, 128, 128).pin_memory()
    d_in = torch.empty(h_in.shape, device=DEV)
    h_out = [torch.empty(8, 64, 128, 128).pin_memory() for _ in range(2)]
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    done = [torch.cuda.Event() for _ in range(2)]
    copied = torch.cuda.Event()
    feats: list[Any] = [None, None]
    with torch.no_grad():
        for _ in range(3):
            model(d_in)
        torch.cuda.synchronize()
        for i in range(inferences):
            _push("infer")
            with torch.cuda.stream(a):
                d_in.copy_(h_in, non_blocking=True)
                feats[i % 2] = model(d_in)
                if mode != "race":
                    done[i % 2].record(a)
            if mode == "pipelined":
                if i >= 1:
                    prev = (i - 1) % 2
                    b.wait_event(done[prev])
                    with torch.cuda.stream(b):
                        h_out[prev].copy_(feats[prev], non_blocking=True)
                        copied.record(b)
                    copied.synchronize()
            else:
                if mode == "fixed":
                    b.wait_event(done[i % 2])
                with torch.cuda.stream(b):
                    h_out[0].copy_(feats[i % 2], non_blocking=True)
                b.synchronize()
                a.synchronize()
            _pop()
        if mode == "pipelined":
            last = (inferences - 1) % 2
            b.wait_event(done[last])
            with torch.cuda.stream(b):
                h_out[last].copy_(feats[last], non_blocking=True)
    torch.cuda.synchronize()
    return {"ranges": {"infer": inferences}, "mode": mode, "output_bytes": 8 * 64 * 128 * 128 * 4,
            "compute_stream": "A (first side stream)", "copy_stream": "B (second side stream)",
            "ordering": {"race": "none", "fixed": "cudaEventRecord(A) + cudaStreamWaitEvent(B) per inference",
                         "pipelined": "copy of inference i-1's output on B after cudaStreamWaitEvent on its event, "
                                      "while A computes inference i"}[mode]}


def race_threads(mode: str = "race", items: int = 40) -> dict[str, Any]:
    """A producer thread (range ``produce``: pinned H2D input copy and the feature net on stream A, then the output
    handed to the consumer through a queue; once the consumer says its copy is launched, cudaStreamSynchronize(A)) and a consumer thread (range
    ``consume``: the D2H copy of that output on stream B, then cudaStreamSynchronize(B)), one context. ``race``:
    the consumer copies as soon as it gets the tensor, nothing orders B after A (a host-side queue does not order
    GPU work). ``fixed``: the producer records an event on A after the net and hands it over with the tensor;
    the consumer makes B wait on it (cudaStreamWaitEvent) before the copy."""
    import queue

    torch = _torch()
    model = _features(torch)
    h_in = torch.randn(8, 3, 128, 128).pin_memory()
    h_out = torch.empty(8, 64, 128, 128).pin_memory()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    q: "queue.Queue[Any]" = queue.Queue(maxsize=2)
    acks: "queue.Queue[None]" = queue.Queue()  # the consumer's "copy launched": keeps the two threads in step

    def produce() -> None:
        d_in = torch.empty(h_in.shape, device=DEV)
        with torch.no_grad(), torch.cuda.stream(a):
            for _ in range(items):
                _push("produce")
                d_in.copy_(h_in, non_blocking=True)
                feat = model(d_in)
                ev = None
                if mode == "fixed":
                    ev = torch.cuda.Event()
                    ev.record(a)
                q.put((feat, ev))
                acks.get()
                a.synchronize()
                _pop()
        q.put(None)

    def consume() -> None:
        n = 0
        while True:
            item = q.get()
            if item is None:
                break
            feat, ev = item
            _push("consume")
            if ev is not None:
                b.wait_event(ev)
            with torch.cuda.stream(b):
                h_out.copy_(feat, non_blocking=True)
            acks.put(None)
            b.synchronize()
            _pop()
            n += 1

    with torch.no_grad():
        for _ in range(3):
            model(torch.empty(h_in.shape, device=DEV))
    torch.cuda.synchronize()
    threads = [threading.Thread(target=produce, name="producer"), threading.Thread(target=consume, name="consumer")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    return {"ranges": {"produce": items, "consume": items}, "mode": mode, "output_bytes": 8 * 64 * 128 * 128 * 4,
            "producer": "thread 'producer', stream A", "consumer": "thread 'consumer', stream B",
            "ordering": {"race": "none (a queue.Queue hand-off only)",
                         "fixed": "cudaEventRecord(A) by the producer + cudaStreamWaitEvent(B) by the consumer"}[mode]}


# ----------------------------------------------------------------------------- the CUDA driver through ctypes
class Driver:
    """The few libcuda (and libcudart, when the process has it loaded) calls these workloads need."""

    def __init__(self) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.call("cuInit", 0)
        self.dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(self.dev), 0)
        with open(SPIN_CUBIN, "rb") as f:
            self.cubin = f.read()
        self.rt = self._loaded_cudart()

    @staticmethod
    def _loaded_cudart():
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if "libcudart.so" in ln}
        return ctypes.CDLL(sorted(paths)[0]) if paths else None

    def call(self, name: str, *args) -> None:
        rc = getattr(self.cu, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned CUDA error {rc}")

    def rcall(self, name: str, *args) -> None:
        rc = getattr(self.rt, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned cudaError {rc}")

    def new_context(self) -> ctypes.c_void_p:
        ctx = ctypes.c_void_p()
        self.call("cuCtxCreate_v2", ctypes.byref(ctx), 0, self.dev)
        return ctx

    def primary_context(self) -> ctypes.c_void_p:
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.dev)
        self.call("cuCtxSetCurrent", ctx)
        return ctx

    def load(self) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuModuleLoadData", ctypes.byref(mod), self.cubin)
        self.call("cuModuleGetFunction", ctypes.byref(fn), mod, b"spin")
        return mod, fn

    def stream(self, flags: int = 1) -> ctypes.c_void_p:  # 1: CU_STREAM_NON_BLOCKING
        s = ctypes.c_void_p()
        self.call("cuStreamCreate", ctypes.byref(s), flags)
        return s

    def spin(self, fn, stream, cycles: int) -> None:
        arg = ctypes.c_longlong(cycles)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(arg), ctypes.c_void_p))
        self.call("cuLaunchKernel", fn, 1, 1, 1, 32, 1, 1, 0, stream, params, None)


# ----------------------------------------------------------------------------- issue 32: contexts
def contexts(separate: bool, iterations: int = 100, kernels: int = 4, cycles: int = 200_000) -> dict[str, Any]:
    """Two threads launch the same work "in parallel": per iteration (range ``infer`` on each thread)
    ``kernels`` spin kernels (one block, ``cycles`` clock cycles: ~100 us each), then a stream sync.
    ``separate``: each thread creates its own context (cuCtxCreate), so the GPU time-slices them and no kernel of
    one overlaps a kernel of the other. Otherwise one context, a non-blocking stream per thread: they overlap."""
    import nvtx

    drv = Driver()
    shared = None if separate else drv.primary_context()
    shared_fn = None if separate else drv.load()[1]
    ready = threading.Barrier(2, timeout=20)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            ctx = drv.new_context() if separate else shared
            drv.call("cuCtxSetCurrent", ctx)
            fn = drv.load()[1] if separate else shared_fn
            s = drv.stream()
            for _ in range(3):
                drv.spin(fn, s, cycles)
            drv.call("cuStreamSynchronize", s)
            ready.wait()
            for _ in range(iterations):
                nvtx.push_range("infer")
                for _ in range(kernels):
                    drv.spin(fn, s, cycles)
                drv.call("cuStreamSynchronize", s)
                nvtx.pop_range()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,), name=f"worker{k}") for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {"ranges": {"infer": 2 * iterations}, "threads": 2, "contexts": 2 if separate else 1,
            "streams": 2, "iterations_per_thread": iterations, "kernels_per_iteration": kernels,
            "spin_cycles": cycles, "kernel": "spin (one block of 32 threads)"}


# ----------------------------------------------------------------------------- issue 32: setup in the loop
def rebuild(every_inference: bool, iterations: int = 12, modules: int = 40, streams: int = 4,
            buffers: int = 8, weight_mb: int = 48) -> dict[str, Any]:
    """An engine "built" from ``modules`` cuModuleLoadData of a cubin, ``streams`` cudaStreamCreate, ``buffers``
    cudaMalloc of 4 MiB and a ``weight_mb`` MiB weight upload (cudaMemcpy from pageable memory), torn down with
    cuModuleUnload, cudaStreamDestroy and cudaFree. Per inference (range ``infer``): one spin kernel of the
    engine's module on its stream, a conv net forward, syncs. ``every_inference``: build, infer, tear down per
    iteration, as an app that deserialises its engine per image; else built once before the loop."""
    import numpy as np

    torch = _torch()
    model = _convnet(torch)
    x = torch.randn(8, 3, 128, 128, device=DEV)
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    drv = Driver()
    drv.primary_context()
    weights = np.ones(weight_mb << 20, dtype=np.uint8)  # pageable host memory
    use_rt = drv.rt is not None

    def build() -> dict[str, list]:
        eng: dict[str, list] = {"mods": [], "streams": [], "bufs": []}
        for _ in range(modules):
            eng["mods"].append(drv.load())
        for _ in range(streams):
            s = ctypes.c_void_p()
            if use_rt:
                drv.rcall("cudaStreamCreate", ctypes.byref(s))
            else:
                drv.call("cuStreamCreate", ctypes.byref(s), 0)
            eng["streams"].append(s)
        for n in [4 << 20] * buffers + [weight_mb << 20]:
            p = ctypes.c_void_p()
            if use_rt:
                drv.rcall("cudaMalloc", ctypes.byref(p), ctypes.c_size_t(n))
            else:
                drv.call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(n))
            eng["bufs"].append(p)
        host = ctypes.c_void_p(weights.ctypes.data)
        if use_rt:
            drv.rcall("cudaMemcpy", eng["bufs"][-1], host, ctypes.c_size_t(weights.nbytes), 1)
        else:
            drv.call("cuMemcpyHtoD_v2", eng["bufs"][-1], host, ctypes.c_size_t(weights.nbytes))
        return eng

    def teardown(eng: dict[str, list]) -> None:
        for p in eng["bufs"]:
            if use_rt:
                drv.rcall("cudaFree", p)
            else:
                drv.call("cuMemFree_v2", p)
        for s in eng["streams"]:
            if use_rt:
                drv.rcall("cudaStreamDestroy", s)
            else:
                drv.call("cuStreamDestroy_v2", s)
        for mod, _ in eng["mods"]:
            drv.call("cuModuleUnload", mod)

    def infer(eng: dict[str, list]) -> None:
        _push("infer")
        drv.spin(eng["mods"][0][1], eng["streams"][0], 20_000)
        with torch.no_grad():
            model(x)
        drv.call("cuStreamSynchronize", eng["streams"][0])
        torch.cuda.current_stream().synchronize()
        _pop()

    eng = None if every_inference else build()
    for _ in range(iterations):
        if every_inference:
            eng = build()
        infer(eng)
        if every_inference:
            teardown(eng)
    if not every_inference:
        teardown(eng)
    torch.cuda.synchronize()
    per = {"cuModuleLoadData": modules, "cuModuleUnload": modules,
           "stream_create": streams, "stream_destroy": streams, "malloc": buffers + 1, "free": buffers + 1,
           "pageable_upload_bytes": weight_mb << 20}
    return {"ranges": {"infer": iterations}, "setup_every_inference": every_inference,
            "setup_per_build": per, "builds": iterations if every_inference else 1,
            "api": "cudaStreamCreate/cudaMalloc/cudaMemcpy/cudaFree (runtime)" if use_rt else
                   "cuStreamCreate/cuMemAlloc_v2/cuMemcpyHtoD_v2/cuMemFree_v2 (driver)"}


# ----------------------------------------------------------------------------- issue 32: LLM-like generation
def generate(requests: int = 2, prompt: int = 512, steps: int = 100, drift_at: int | None = None,
             contend_size: int = 8192, contend_pause_ms: float = 0.0) -> dict[str, Any]:
    """A small SSM-like language model (fp16, d=2048, 16 layers, vocab 16384): per request a prefill over
    ``prompt`` tokens (eager, large GEMMs), then ``steps`` decode steps, each one CUDA-graph replay of the
    one-token step (``cudaGraphLaunch``), a greedy argmax and a token read back to the host (``.item()``: the
    sync), like mamba's ``generate(cg=True)``. No NVTX. ``drift_at``: from that decode step on, a second thread
    keeps a stream of large GEMMs queued (contention): the step time rises. ``contend_size`` and
    ``contend_pause_ms`` (a host pause after each GEMM) set how hard it contends."""
    torch = _torch()
    d, layers, vocab = 2048, 16, 16384
    g_ = torch.Generator(device=DEV).manual_seed(0)

    def rnd(*shape):
        return (torch.randn(*shape, device=DEV, generator=g_) * shape[0] ** -0.5).half()

    emb = rnd(vocab, d)
    w_in = [rnd(d, 2 * d) for _ in range(layers)]
    w_out = [rnd(2 * d, d) for _ in range(layers)]
    lm_head = rnd(d, vocab)
    decay = torch.full((2 * d,), 0.9, device=DEV, dtype=torch.half)

    def prefill(tokens):
        x = emb[tokens]
        states = []
        for i in range(layers):
            h = x @ w_in[i]
            states.append(h[-1:].clone())
            x = x + torch.nn.functional.gelu(h) @ w_out[i]
        return (x[-1:] @ lm_head).argmax(-1), states

    tok = torch.zeros(1, dtype=torch.long, device=DEV)
    st = [torch.zeros(1, 2 * d, device=DEV, dtype=torch.half) for _ in range(layers)]

    def step():
        x = emb[tok]
        for i in range(layers):
            st[i].mul_(decay).add_(x @ w_in[i])
            x = x + torch.nn.functional.gelu(st[i]) @ w_out[i]
        return (x @ lm_head).argmax(-1)

    with torch.no_grad():
        prompt_tokens = torch.randint(0, vocab, (prompt,), device=DEV)
        prefill(prompt_tokens)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            nxt = step()
        torch.cuda.synchronize()
        stop = threading.Event()
        contender = None
        generated = []
        for r in range(requests):
            time.sleep(0.005)  # the next request arrives
            first, states = prefill(prompt_tokens)
            for i in range(layers):
                st[i].copy_(states[i])
            tok.copy_(first)
            for k in range(steps):
                if drift_at is not None and k == drift_at and contender is None:
                    contender = threading.Thread(target=_contend, daemon=True,
                                                 args=(torch, stop, contend_size, contend_pause_ms))
                    contender.start()
                    time.sleep(0.002)
                graph.replay()
                tok.copy_(nxt)
                generated.append(int(tok.item()))
        stop.set()
        if contender is not None:
            contender.join()
    torch.cuda.synchronize()
    return {"ranges": {}, "requests": requests, "prompt_tokens": prompt, "decode_steps_per_request": steps,
            "graph_replays": requests * steps, "model": {"d": d, "layers": layers, "vocab": vocab, "dtype": "fp16"},
            "drift_from_step": drift_at, "drift_cause": "a second thread's GEMM stream" if drift_at is not None else None,
            "contender": {"gemm_size": contend_size, "pause_ms": contend_pause_ms} if drift_at is not None else None,
            "per_step": "cudaGraphLaunch, argmax copy, .item() (D2H + sync)"}


def _contend(torch, stop: threading.Event, size: int, pause_ms: float) -> None:
    a = torch.randn(size, size, device=DEV, dtype=torch.half)
    b = torch.randn(size, size, device=DEV, dtype=torch.half)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        while not stop.is_set():
            for _ in range(1 if pause_ms else 4):
                torch.mm(a, b)
            s.synchronize()
            if pause_ms:
                time.sleep(pause_ms / 1000.0)


# ----------------------------------------------------------------------------- issue 32: eager generation
def _transformer(torch, d: int = 1024, heads: int = 16, layers: int = 2, vocab: int = 16384, max_len: int = 640):
    """A small decoder-only transformer (fp16, pre-norm, ``layers`` blocks of attention over a KV cache and a
    GELU MLP, greedy head): ``forward(tokens, pos)`` runs ``tokens`` (1-D) at positions ``pos..`` through it,
    writing their keys and values into the cache, and returns the argmax of the last position's logits."""
    F = torch.nn.functional
    g_ = torch.Generator(device=DEV).manual_seed(0)
    dh = d // heads

    def rnd(*shape):
        return (torch.randn(*shape, device=DEV, generator=g_) * shape[0] ** -0.5).half()

    emb, head = rnd(vocab, d), rnd(d, vocab)
    blocks = [{"qkv": rnd(d, 3 * d), "o": rnd(d, d), "fc1": rnd(d, 4 * d), "fc2": rnd(4 * d, d)}
              for _ in range(layers)]
    cache = [(torch.zeros(heads, max_len, dh, device=DEV, dtype=torch.half),
              torch.zeros(heads, max_len, dh, device=DEV, dtype=torch.half)) for _ in range(layers)]

    def forward(tokens, pos: int):
        t = tokens.shape[0]
        x = emb[tokens]
        for b, (kc, vc) in zip(blocks, cache):
            q, k, v = (F.layer_norm(x, (d,)) @ b["qkv"]).view(t, 3, heads, dh).unbind(1)
            kc[:, pos:pos + t] = k.transpose(0, 1)
            vc[:, pos:pos + t] = v.transpose(0, 1)
            a = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kc[None, :, :pos + t],
                                               vc[None, :, :pos + t], is_causal=t > 1)
            x = x + a[0].transpose(0, 1).reshape(t, d) @ b["o"]
            x = x + F.gelu(F.layer_norm(x, (d,)) @ b["fc1"]) @ b["fc2"]
        return (F.layer_norm(x[-1:], (d,)) @ head).argmax(-1)

    return forward, vocab


def generate_eager(ranges: bool = True, requests: int = 3, prompt: int = 512, steps: int = 64) -> dict[str, Any]:
    """Eager generation with a KV cache (no CUDA graph): per request a prefill over ``prompt`` tokens, then
    ``steps`` decode steps of one token each, each reading its token back (``.item()``: D2H + sync), as a
    Hugging Face ``generate()`` loop without graphs. ``ranges``: NVTX ranges ``prefill`` and ``decode_step``
    around them; else none. One warm-up request (prefill and 4 steps) first; with ``PATTERNS_PROFILER_RANGE`` set
    in the environment, the requests are framed by ``cudaProfilerStart``/``Stop`` (``--capture-range=cudaProfilerApi``
    then captures only them)."""
    torch = _torch()
    forward, vocab = _transformer(torch)
    mark = _push if ranges else (lambda name: None)
    unmark = _pop if ranges else (lambda: None)
    prompt_tokens = torch.randint(0, vocab, (prompt,), device=DEV, generator=torch.Generator(device=DEV).manual_seed(1))
    generated = []
    with torch.no_grad():
        tok = forward(prompt_tokens, 0)
        for k in range(4):
            tok = forward(tok, prompt + k)
        torch.cuda.synchronize()
        framed = bool(os.environ.get("PATTERNS_PROFILER_RANGE"))
        if framed:
            torch.cuda.profiler.start()
        for _ in range(requests):
            time.sleep(0.005)  # the next request arrives
            mark("prefill")
            tok = forward(prompt_tokens, 0)
            unmark()
            for k in range(steps):
                mark("decode_step")
                tok = forward(tok, prompt + k)
                generated.append(int(tok.item()))
                unmark()
    torch.cuda.synchronize()
    if framed:
        torch.cuda.profiler.stop()
    return {"ranges": {"prefill": requests, "decode_step": requests * steps} if ranges else {},
            "requests": requests, "prompt_tokens": prompt, "decode_steps_per_request": steps,
            "warmup": "one request of a prefill and 4 steps before, outside any range",
            "model": {"d": 1024, "heads": 16, "layers": 2, "vocab": vocab, "dtype": "fp16", "kv_cache": True},
            "per_step": "eager forward of one token (about 30 kernels), argmax, .item() (D2H + sync)"}


def classify_eager(iterations: int = 64, batch: int = 64) -> dict[str, Any]:
    """The healthy twin of ``generate_eager(ranges=False)``: the same model's forward over a fixed batch of
    ``batch`` tokens, ``iterations`` times, each read back (``.item()``), no NVTX: a repeated inference loop
    (the same kernel sequence every iteration) with no prefill and no decode."""
    torch = _torch()
    forward, vocab = _transformer(torch)
    x = torch.randint(0, vocab, (batch,), device=DEV, generator=torch.Generator(device=DEV).manual_seed(1))
    out = []
    with torch.no_grad():
        for _ in range(iterations):
            out.append(int(forward(x, 0).item()))
    torch.cuda.synchronize()
    return {"ranges": {}, "iterations": iterations, "batch_tokens": batch}


# ----------------------------------------------------------------------------- issue 32: precision
def conv_precision(half: bool, iterations: int = 40) -> dict[str, Any]:
    """The same small CNN (six 3x3 convs, 64-128 channels at 56x56, batch 32) per inference (range ``infer``),
    in FP32 with TF32 off (no Tensor Cores) or in FP16 channels_last (Tensor Core kernels); cuDNN heuristics
    (benchmark off); a stream sync per inference."""
    torch = _torch()
    torch.backends.cudnn.benchmark = False
    chans = [64, 64, 128, 128, 128, 128, 128]
    layers = []
    for cin, cout in zip(chans, chans[1:]):
        layers += [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(DEV).eval()
    x = torch.randn(32, 64, 56, 56, device=DEV)
    if half:
        model = model.half().to(memory_format=torch.channels_last)
        x = x.half().contiguous(memory_format=torch.channels_last)
    stream = torch.cuda.current_stream()
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        for _ in range(iterations):
            _push("infer")
            model(x)
            stream.synchronize()
            _pop()
    torch.cuda.synchronize()
    return {"ranges": {"infer": iterations}, "precision": "fp16" if half else "fp32",
            "tf32": False, "memory_format": "channels_last" if half else "contiguous (NCHW)",
            "convs": len(chans) - 1, "input": [32, 64, 56, 56]}


# ----------------------------------------------------------------------------- issue 32: sleeps vs waits
def sleeps(gpu_wait: bool, iterations: int = 20, period_ms: float = 50.0) -> dict[str, Any]:
    """Per iteration a short inference (range ``infer``: the MLP, a stream sync), then the program sleeps in
    ``select()`` with a ``period_ms`` timeout on a pipe that never becomes readable (frame pacing). ``gpu_wait``:
    the healthy twin: no sleep; the inference itself holds ~``period_ms`` of GPU work (a spinning kernel) and the
    host waits for it in cudaStreamSynchronize."""
    torch = _torch()
    model = _mlp(torch)
    x = torch.randn(8, 256, device=DEV)
    stream = torch.cuda.current_stream()
    rd, _wr = os.pipe()
    cycles = 0
    with torch.no_grad():
        for _ in range(3):
            model(x)
        if gpu_wait:  # calibrate the spinning kernel: cycles per ms at the clock it runs at now
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(10_000_000)
            t0.record()
            torch.cuda._sleep(20_000_000)
            t1.record()
            t1.synchronize()
            cycles = int(20_000_000 / t0.elapsed_time(t1) * period_ms)
        torch.cuda.synchronize()
        for _ in range(iterations):
            _push("infer")
            model(x)
            if gpu_wait:
                torch.cuda._sleep(cycles)
            stream.synchronize()
            _pop()
            if not gpu_wait:
                select.select([rd], [], [], period_ms / 1000.0)
    torch.cuda.synchronize()
    return {"ranges": {"infer": iterations}, "sleep": None if gpu_wait else f"select() timeout {period_ms} ms",
            "gpu_wait_cycles": cycles or None, "period_ms": period_ms}


WORKLOADS: dict[str, Callable[[], dict[str, Any]]] = {
    "numbered_eager": lambda: numbered(graph=False),
    "numbered_graph": lambda: numbered(graph=True),
    "stages": stages,
    "chained_enqueues": chained_enqueues,
    "killed": killed,
    "tiny_buffer": lambda: numbered(inferences=200),
    "launcher": launcher,
    "truncated": truncated,
    "mp_fork": lambda: mp_worker("fork"),
    "mp_spawn": lambda: mp_worker("spawn"),
    "two_processes": two_processes,
    "race": lambda: race("race"),
    "race_fixed": lambda: race("fixed"),
    "pipelined": lambda: race("pipelined"),
    "race_output": lambda: race_output("race"),
    "race_output_fixed": lambda: race_output("fixed"),
    "output_pipelined": lambda: race_output("pipelined"),
    "race_threads": lambda: race_threads("race"),
    "race_threads_fixed": lambda: race_threads("fixed"),
    "rebuild": lambda: rebuild(True),
    "rebuild_fixed": lambda: rebuild(False),
    "two_contexts": lambda: contexts(True),
    "one_context_two_streams": lambda: contexts(False),
    "generate_graph": lambda: generate(),
    "generate_drift": lambda: generate(requests=1, drift_at=50),
    "generate_drift_mild": lambda: generate(requests=1, drift_at=50, contend_size=4096, contend_pause_ms=0.3),
    "generate_eager": lambda: generate_eager(True),
    "generate_eager_bare": lambda: generate_eager(False),
    "generate_eager_one": lambda: generate_eager(True, requests=1),
    "classify_eager": classify_eager,
    "fp32_conv": lambda: conv_precision(False),
    "fp16_conv": lambda: conv_precision(True),
    "sleeps": lambda: sleeps(False),
    "gpu_wait": lambda: sleeps(True),
}


def main() -> None:
    global MANIFEST
    if sys.argv[1:] == ["_server"]:
        return _server()
    if sys.argv[1:2] == ["_spinner"]:
        return _spinner(float(sys.argv[2]), int(sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(WORKLOADS))
    ap.add_argument("--manifest", help="write what the workload did (JSON) here")
    args = ap.parse_args()
    MANIFEST = args.manifest
    t0 = time.perf_counter()
    info = WORKLOADS[args.name]()
    info["workload"] = args.name
    info["wall_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(info))
    _write_manifest(info)


if __name__ == "__main__":
    main()
