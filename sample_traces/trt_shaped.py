#!/usr/bin/env python3
"""A TensorRT-shaped inference service in PyTorch, for captures with a known diagnosis.

TensorRT cannot run here, so this program reproduces the *shape* of a TensorRT application's capture:

- a setup phase: an "engine deserialisation" range (count 1) that uploads a large weight blob from
  pageable memory, then lazy module loading on the first inference (CUDA_MODULE_LOADING=LAZY);
- one inference = one ``ExecutionContext::enqueue`` range in the NVTX domain ``TensorRT`` (the range
  name and domain TensorRT uses), with one range per layer nested inside it (TensorRT's layer names);
- two streams, each with its own pinned input/output buffers: per request an 8 MiB H2D copy, the
  enqueue, a 2 MiB D2H copy, then one stream sync for the pair of requests (two in flight);
- plus one 8-byte pageable H2D copy per request (a scalar: its cost is negligible).

``eager``: every layer launches its kernels inside its range. ``graph``: each stream's layers are
captured once into a CUDA graph (the layer ranges exist only at capture time) and every enqueue
replays the graph (one cudaGraphLaunch). ``trtexec_graph``: the shape of ``trtexec --useCudaGraph`` on one
stream: one enqueue before the capture (trtexec's, to settle lazy initialisation), one enqueue while the
stream is captured, then every inference a bare cudaGraphLaunch with no TensorRT range around it, between
its input and output copies, synchronised on an event each time.

Usage: ``python3 trt_shaped.py eager|graph|trtexec_graph [--manifest PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time

import nvtx
import torch

DOMAIN = "TensorRT"
LAYERS = ("conv1 + relu1", "conv2 + relu2", "conv3 + relu3", "pool", "fc1 + gelu", "fc2")
REQUESTS = 80  # per run, alternating the two streams
WEIGHT_BLOB_MB = 512


class Net:
    """Six fp16 layers on a [16, 64, 64, 64] input (fp16, so cuDNN and cuBLAS pick tensor-core kernels)."""

    def __init__(self):
        dev = "cuda"
        self.w = [torch.randn(64, 64, 3, 3, device=dev, dtype=torch.half) * 0.05 for _ in range(3)]
        self.fc1 = torch.randn(4096, 4096, device=dev, dtype=torch.half) * 0.01
        self.fc2 = torch.randn(4096, 1000, device=dev, dtype=torch.half) * 0.01

    def layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if i < 3:
            return torch.relu(torch.nn.functional.conv2d(x, self.w[i], padding=1))
        if i == 3:
            return torch.nn.functional.adaptive_avg_pool2d(x, (8, 8)).reshape(x.shape[0], -1)
        if i == 4:
            return torch.nn.functional.gelu(x @ self.fc1)
        return x @ self.fc2

    def run(self, x: torch.Tensor, ranges: bool = True) -> torch.Tensor:
        for i, name in enumerate(LAYERS):
            if ranges:
                nvtx.push_range(name, domain=DOMAIN)
            x = self.layer(i, x)
            if ranges:
                nvtx.pop_range(domain=DOMAIN)
        return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("eager", "graph", "trtexec_graph"))
    ap.add_argument("--manifest")
    args = ap.parse_args()
    t0 = time.perf_counter()
    torch.backends.cudnn.benchmark = False
    # ---- setup: "engine deserialisation" with a large pageable upload
    nvtx.push_range("deserializeCudaEngine", domain=DOMAIN)
    blob = torch.empty(WEIGHT_BLOB_MB * 2**20, dtype=torch.uint8).fill_(1)  # pageable host memory
    blob_gpu = blob.to("cuda")
    net = Net()
    torch.cuda.synchronize()
    nvtx.pop_range(domain=DOMAIN)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    shape = (16, 64, 64, 64)
    h_in = [torch.randn(shape, dtype=torch.half).pin_memory() for _ in streams]  # 8 MiB each
    h_out = [torch.empty(16, 1000, dtype=torch.half).pin_memory() for _ in streams]
    d_in = [torch.empty(shape, device="cuda", dtype=torch.half) for _ in streams]
    d_out = [torch.empty(16, 1000, device="cuda", dtype=torch.half) for _ in streams]
    graphs = []
    if args.mode == "trtexec_graph":
        return trtexec_graph(net, streams[0], h_in[0], h_out[0], d_in[0], d_out[0], blob_gpu, t0, args.manifest)
    if args.mode == "graph":
        for s in range(2):
            side = streams[s]
            with torch.cuda.stream(side):
                net.run(d_in[s], ranges=False)  # warm-up on the stream, as torch's capture docs advise
            side.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=side):
                nvtx.push_range("ExecutionContext::enqueue", domain=DOMAIN)  # as TensorRT does at capture
                d_out[s].copy_(net.run(d_in[s]))
                nvtx.pop_range(domain=DOMAIN)
            graphs.append(g)
        torch.cuda.synchronize()
    # ---- requests: two in flight, one per stream; one sync per pair
    scalar = torch.tensor([0], dtype=torch.int64)  # pageable: an 8-byte copy per request
    for r in range(REQUESTS):
        s = r % 2
        with torch.cuda.stream(streams[s]):
            d_in[s].copy_(h_in[s], non_blocking=True)
            scalar.cuda(non_blocking=True)
            if args.mode == "graph":
                nvtx.push_range("ExecutionContext::enqueueV3", domain=DOMAIN)
                graphs[s].replay()
                nvtx.pop_range(domain=DOMAIN)
            else:
                nvtx.push_range("ExecutionContext::enqueue", domain=DOMAIN)
                d_out[s].copy_(net.run(d_in[s]))
                nvtx.pop_range(domain=DOMAIN)
            h_out[s].copy_(d_out[s], non_blocking=True)
        if s == 1:
            streams[0].synchronize()
            streams[1].synchronize()
    torch.cuda.synchronize()
    del blob_gpu
    info = {"mode": args.mode, "requests": REQUESTS, "layers": list(LAYERS), "streams": 2,
            "weight_upload_bytes": WEIGHT_BLOB_MB * 2**20, "input_bytes": 16 * 64 * 64 * 64 * 2,
            "output_bytes": 16 * 1000 * 2, "wall_s": round(time.perf_counter() - t0, 3),
            "ranges": {"ExecutionContext::enqueue" if args.mode == "eager" else "ExecutionContext::enqueueV3":
                       REQUESTS}}
    if args.manifest:
        with open(args.manifest, "w") as f:
            json.dump(info, f, indent=1)
    print(json.dumps(info))


def trtexec_graph(net: Net, stream, h_in, h_out, d_in, d_out, blob_gpu, t0: float, manifest: str | None) -> None:
    """trtexec --useCudaGraph's shape: an enqueue, an enqueue under capture, then bare graph replays."""
    with torch.cuda.stream(stream):
        nvtx.push_range("ExecutionContext::enqueueV3", domain=DOMAIN)  # before the capture
        d_out.copy_(net.run(d_in))
        nvtx.pop_range(domain=DOMAIN)
    stream.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        nvtx.push_range("ExecutionContext::enqueueV3", domain=DOMAIN)  # under the capture
        d_out.copy_(net.run(d_in))
        nvtx.pop_range(domain=DOMAIN)
    torch.cuda.synchronize()
    done = torch.cuda.Event()
    for _ in range(REQUESTS):
        with torch.cuda.stream(stream):
            d_in.copy_(h_in, non_blocking=True)
            g.replay()
            h_out.copy_(d_out, non_blocking=True)
            done.record()
        done.synchronize()
    torch.cuda.synchronize()
    del blob_gpu
    info = {"mode": "trtexec_graph", "requests": REQUESTS, "layers": list(LAYERS), "streams": 1,
            "input_bytes": 16 * 64 * 64 * 64 * 2, "output_bytes": 16 * 1000 * 2,
            "wall_s": round(time.perf_counter() - t0, 3),
            "ranges": {"ExecutionContext::enqueueV3": 2}, "graph_replays": REQUESTS}
    if manifest:
        with open(manifest, "w") as f:
            json.dump(info, f, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
