#!/usr/bin/env python3
"""Probe the GPU machine for what trtprof's CUDA layer needs, and time bare launch loops.

Checks, through cuda-python (cuda.bindings.runtime): versions, device and memory info, cudaMalloc,
pinned host memory, streams, events and their elapsed time, stream capture -> instantiate -> launch;
through PyTorch: kernels on a cuda-python stream (torch.cuda.ExternalStream), torch.cuda.graph
capture on it, and capturing torch kernels with cuda-python's own stream capture. Then times a bare
graph-launch loop and a plain enqueue loop of the same tiny kernels (host us per iteration, GPU us).

Prints a short table last; ``--json PATH`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def _ck(res: Any) -> Any:
    """Unpack a cuda-python result tuple, raising on an error code."""
    from cuda.bindings import runtime as rt

    if isinstance(res, tuple):
        err, rest = res[0], res[1:]
    else:
        err, rest = res, ()
    if int(err) != 0:
        name = rt.cudaGetErrorName(err)[1]
        raise RuntimeError(f"CUDA error {name.decode() if isinstance(name, bytes) else name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--kernels", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=2000)
    args = ap.parse_args()
    res: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []

    import cuda.bindings
    from cuda.bindings import runtime as rt

    res["cuda_bindings"] = cuda.bindings.__version__
    res["driver_version"] = _ck(rt.cudaDriverGetVersion())
    res["runtime_version"] = _ck(rt.cudaRuntimeGetVersion())
    _ck(rt.cudaSetDevice(0))
    prop = _ck(rt.cudaGetDeviceProperties(0))
    res["device"] = prop.name.decode(errors="replace").rstrip("\x00")
    res["cc"] = f"{prop.major}.{prop.minor}"
    free_b, total_b = _ck(rt.cudaMemGetInfo())
    res["mem_free_total_bytes"] = [int(free_b), int(total_b)]
    rows += [("cuda-bindings", res["cuda_bindings"]), ("driver/runtime", f"{res['driver_version']}/{res['runtime_version']}"),
             ("device", f"{res['device']} cc{res['cc']}"), ("mem free/total GiB", f"{free_b/2**30:.1f}/{total_b/2**30:.1f}")]

    # buffers, streams, events
    nbytes = 64 << 20
    dptr = _ck(rt.cudaMalloc(nbytes))
    hptr = _ck(rt.cudaMallocHost(nbytes))
    stream = _ck(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
    e0, e1 = _ck(rt.cudaEventCreate()), _ck(rt.cudaEventCreate())
    _ck(rt.cudaEventRecord(e0, stream))
    _ck(rt.cudaMemcpyAsync(dptr, hptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream))
    _ck(rt.cudaEventRecord(e1, stream))
    _ck(rt.cudaStreamSynchronize(stream))
    ms = _ck(rt.cudaEventElapsedTime(e0, e1))
    res["h2d_64MiB_pinned_ms"] = ms
    rows.append(("H2D 64 MiB pinned", f"{ms:.3f} ms ({nbytes/ms/1e6:.1f} GB/s)"))

    # stream capture of memset nodes via cuda-python alone
    _ck(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
    for i in range(8):
        _ck(rt.cudaMemsetAsync(dptr, i, 4096, stream))
    g = _ck(rt.cudaStreamEndCapture(stream))
    ge = _ck(rt.cudaGraphInstantiate(g, 0))
    _ck(rt.cudaGraphLaunch(ge, stream))
    _ck(rt.cudaStreamSynchronize(stream))
    rows.append(("cuda-python capture/instantiate/launch", "ok"))

    # error mapping probe: an invalid capture (sync inside capture)
    try:
        _ck(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        err = rt.cudaStreamSynchronize(stream)
        res["sync_in_capture_error"] = rt.cudaGetErrorName(err[0])[1].decode()
        err2 = rt.cudaStreamEndCapture(stream)
        res["end_capture_after_invalid"] = rt.cudaGetErrorName(err2[0])[1].decode()
        rt.cudaGetLastError()
    except Exception as exc:  # noqa: BLE001
        res["sync_in_capture_error"] = f"exception {exc}"
    rows.append(("sync inside capture ->", f"{res.get('sync_in_capture_error')} / end: {res.get('end_capture_after_invalid')}"))

    # torch on the cuda-python stream
    import torch

    res["torch"] = torch.__version__
    ext = torch.cuda.ExternalStream(int(stream))
    x = torch.randn(4096, device="cuda")
    k = args.kernels

    def tiny() -> None:
        for _ in range(k // 2):
            x.mul_(0.999)
            x.add_(0.001)

    with torch.cuda.stream(ext):
        tiny()
    torch.cuda.synchronize()
    # torch.cuda.graph on the external stream
    try:
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg, stream=ext):
            tiny()
        tg.replay()
        torch.cuda.synchronize()
        res["torch_graph_on_external_stream"] = "ok"
    except Exception as exc:  # noqa: BLE001
        res["torch_graph_on_external_stream"] = f"{type(exc).__name__}: {exc}"[:200]
    rows.append(("torch.cuda.graph on ExternalStream", res["torch_graph_on_external_stream"]))

    # torch kernels captured by cuda-python's stream capture (in-place ops: no allocation)
    _ck(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
    with torch.cuda.stream(ext):
        tiny()
    g2 = _ck(rt.cudaStreamEndCapture(stream))
    nodes = _ck(rt.cudaGraphGetNodes(g2, 0))
    ge2 = _ck(rt.cudaGraphInstantiate(g2, 0))
    res["captured_nodes"] = nodes[1] if isinstance(nodes, tuple) else nodes
    rows.append(("cuda-python capture of torch kernels", f"nodes={res['captured_nodes']}"))

    def timed(fn, n: int) -> tuple[float, float]:
        for _ in range(50):
            fn()
        _ck(rt.cudaStreamSynchronize(stream))
        _ck(rt.cudaEventRecord(e0, stream))
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        t1 = time.perf_counter_ns()
        _ck(rt.cudaEventRecord(e1, stream))
        _ck(rt.cudaStreamSynchronize(stream))
        t2 = time.perf_counter_ns()
        gpu_ms = _ck(rt.cudaEventElapsedTime(e0, e1))
        return (t1 - t0) / n / 1e3, max(gpu_ms * 1e3 / n, (t2 - t0) / n / 1e3)

    n = args.iterations
    launch = rt.cudaGraphLaunch
    host_us, wall_us = timed(lambda: launch(ge2, stream), n)
    res["bare_graph_launch"] = {"host_us": host_us, "wall_us_per_iter": wall_us}
    rows.append((f"bare cudaGraphLaunch loop ({k} kernels)", f"host {host_us:.2f} us, wall {wall_us:.2f} us/iter"))
    host_us, wall_us = timed(lambda: tg.replay(), n)
    res["torch_graph_replay"] = {"host_us": host_us, "wall_us_per_iter": wall_us}
    rows.append(("torch CUDAGraph.replay loop", f"host {host_us:.2f} us, wall {wall_us:.2f} us/iter"))

    def enqueue() -> None:
        with torch.cuda.stream(ext):
            tiny()

    host_us, wall_us = timed(enqueue, max(n // 10, 50))
    res["eager_enqueue"] = {"host_us": host_us, "wall_us_per_iter": wall_us}
    rows.append((f"eager enqueue loop ({k} kernels)", f"host {host_us:.2f} us, wall {wall_us:.2f} us/iter"))
    host_us, _ = timed(lambda: rt.cudaEventRecord(e1, stream), n)
    rows.append(("bare cudaEventRecord", f"host {host_us:.2f} us"))
    res["event_record_host_us"] = host_us

    for mod in ("onnx", "onnxruntime", "nvtx", "sqlalchemy", "plotly"):
        try:
            m = __import__(mod)
            res[f"{mod}_version"] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001
            res[f"{mod}_version"] = f"missing: {exc}"
        rows.append((mod, str(res[f"{mod}_version"])))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    w = max(len(a) for a, _ in rows)
    print("\n".join(f"{a:<{w}}  {b}" for a, b in rows))


if __name__ == "__main__":
    main()
