"""What the host did while the GPU waited, named from the evidence ``gpu_idle`` gathers, and the advice
that fits it.

Causes, most specific first: a CUDA or OS runtime call that fills at least half of the idle time (its
kind decides the advice: a launch call, a synchronisation, an allocation, a graph instantiation ...);
else an NVTX range the gaps fall in for at least half of the idle time (the innermost such range, never
one that spans the whole steady state like a benchmark loop: TensorRT's enqueue, a JIT compile, an MPI
wait); else the host's own code, said with care when OS runtime calls were not traced (then sleeps,
locks and I/O cannot be told apart from code).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from profiler.capture import blockwise, intervals
from profiler.capture.waits import SLEEP_CALLS
from profiler.fmt import fmt_num
from profiler.rules.capture import _common
from profiler.capture.context import CaptureContext

CAUSE_MIN_SHARE = 0.5
"""A call or range names the cause when it fills at least this share of the idle time."""
ENCLOSING_COVER = 0.9
"""A range whose instances cover this share of the steady state is the loop itself, not a cause."""
LAZY_LOAD_CALL_US = 100.0
"""Launch calls this long on average are loading modules (lazy loading), not just launching."""

_JIT = re.compile(r"compil|jit|nvrtc|codegen|autotun", re.I)
_COMM = re.compile(r"\bmpi|nccl|gloo|allreduce|all_reduce|allgather|barrier|send|recv|broadcast", re.I)


@dataclass
class Cause:
    """``kind`` picks the advice; :meth:`sentence` completes "meanwhile the host was ..."."""

    kind: str  # launch | lazy_load | sync | api | os_runtime | range | code
    phrase: str
    name: str = ""
    majority: bool = True  # it fills at least half of the idle time (else it is only the largest part)

    def sentence(self) -> str:
        """"mostly in cudaLaunchKernel (42.8 of 44.5 ms)", or "for the largest part ..." without a majority."""
        return ("mostly " if self.majority else "for the largest part ") + self.phrase


ALLOC_CALL = re.compile(r"^(cuda|cu)(Malloc|Free|MemAlloc|MemFree|HostAlloc|MallocHost|FreeHost|MemCreate|MemRelease)")
"""CUDA API calls that allocate or free memory: together, one cause of idle gaps."""


def dominant_cause(ctx: CaptureContext, host: dict, ranges_ns: np.ndarray, idle_ms: float) -> Cause:
    """The cause of the idle time from ``host`` (the ``host_during_gaps_ms`` evidence) and ``ranges_ns``,
    the time (ns) each NVTX series, by series id, overlaps the gaps. The first of a call, a range and
    the host's own code that fills half of the idle time; when none does, the largest of them."""
    of = f" of {fmt_num(idle_ms, 3)} ms)"
    cands: list[tuple[float, Cause]] = []
    best: tuple[str, str, float] | None = None  # (kind, name, ms) of the longest call
    for kind in ("os_runtime", "cuda_api"):
        for name, v in (host.get(kind) or {}).items():
            if best is None or v > best[2]:
                best = (kind, name, v)
    alloc = {n: v for n, v in (host.get("cuda_api") or {}).items() if ALLOC_CALL.search(n)}
    if len(alloc) > 1 and sum(alloc.values()) > (best[2] if best else 0.0):
        # cudaMalloc and cudaFree in the loop are one cause (their driver ioctls are no other one)
        v = sum(alloc.values())
        names = sorted(alloc, key=alloc.get, reverse=True)
        each = ", ".join(f"{n} {fmt_num(alloc[n], 3)}" for n in names)
        cands.append((v, Cause("api", f"in allocation calls ({each} ms: {fmt_num(v, 3)}{of}", "/".join(names))))
    elif best is not None:
        kind, name, v = best
        cands.append((v, Cause(_call_kind(ctx, kind, name), f"in {name} ({fmt_num(v, 3)}{of}", name)))
    sid = _innermost_range(ctx, ranges_ns, CAUSE_MIN_SHARE * idle_ms * 1e6)
    if sid is None and len(ranges_ns):
        sid = _innermost_range(ctx, ranges_ns, float(ranges_ns.max()))  # the longest, if it is no loop
    if sid is not None:
        label = ctx.label(sid) or ""
        v = float(ranges_ns[sid]) / 1e6
        cands.append((v, Cause("range", f"inside the NVTX range {label} ({fmt_num(v, 3)}{of}", label)))
    outside = float(host.get("outside_cuda_and_os_calls_ms", 0.0))
    if osrt_traced(ctx):
        code = Cause("code", f"running code outside CUDA and OS runtime calls ({fmt_num(outside, 3)}{of}")
    else:
        code = Cause("code", f"outside CUDA calls ({fmt_num(outside, 3)}{of}; OS runtime calls were not traced "
                             "(nsys -t osrt), so sleeps, locks and I/O are not told apart from the host's own code")
    cands.append((outside, code))
    for v, cause in cands:  # in order of specificity
        if v >= CAUSE_MIN_SHARE * idle_ms:
            return cause
    v, cause = max(cands, key=lambda vc: vc[0])
    cause.majority = False
    return cause


WAIT_CALLS = ("sem_wait", "sem_timedwait", "sem_clockwait", "pthread_cond_wait", "pthread_cond_timedwait",
              "pthread_cond_clockwait", "epoll_wait", "epoll_pwait", "poll", "ppoll", "select", "pselect",
              "recv", "recvfrom", "recvmsg", "accept", "msgrcv", "mq_receive", "mq_timedreceive")
"""OS runtime calls that wait for another thread, process or peer to hand over work: a queue's get, a data
loader's batch, an incoming request."""
LOCK_CALLS = ("pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_rwlock_", "pthread_spin_lock", "flock",
              "lockf")
"""OS runtime calls that wait for a lock another thread holds."""


def os_call_kind(name: str) -> str:
    """'sleep', 'input' (waits for work handed over), 'lock' or 'other' (I/O and the rest) for an OS runtime
    call's name (nsys names them as libc does)."""
    if name.startswith(SLEEP_CALLS):
        return "sleep"
    if name in WAIT_CALLS:
        return "input"
    return "lock" if name.startswith(LOCK_CALLS) else "other"


def advice(cause: Cause, tensorrt: bool) -> str:
    """The recommendation for ``cause`` (TensorRT-aware where the capture is TensorRT's)."""
    n = cause.name
    if cause.kind == "os_runtime":
        return _os_advice(n)
    if cause.kind == "sync":
        return ("The host waits for the GPU and only then issues more work: queue the next iteration before "
                "synchronising (double buffering, a second stream), or replace the host-side wait with "
                "cudaStreamWaitEvent.")
    if cause.kind == "lazy_load":
        return (f"{n} calls take long because each kernel's first launch loads its module (lazy loading, "
                "CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2): warm every kernel up before measuring, "
                "or set CUDA_MODULE_LOADING=EAGER.")
    if cause.kind == "launch":
        return ("The host issues many short launches one by one and the GPU drains them faster: capture the work "
                "as a CUDA graph and replay it" + (" (trtexec --useCudaGraph)" if tensorrt else "") +
                ", or fuse kernels so each launch carries more work.")
    if cause.kind == "api":
        return _api_advice(n)
    if cause.kind == "range":
        return _range_advice(n, tensorrt)
    return ("The host runs its own code between GPU work (pre/post-processing, the framework, or waits the "
            "capture did not trace): overlap it with GPU work (a producer thread, a second stream), batch "
            "requests, or capture the GPU part as a CUDA graph.")


def _os_advice(n: str) -> str:
    kind = os_call_kind(n)
    if kind == "sleep":
        return (f"The launching thread sleeps ({n}) while the GPU has nothing queued. If the sleep paces "
                "requests that arrive no faster (a server at low load), the GPU has capacity to spare: batch "
                "requests, or serve more load from this GPU. Otherwise remove the sleep or polling from the "
                "thread that feeds the GPU, or queue the next batch's work before it.")
    if kind == "input":
        return (f"The launching thread waits for its next input ({n}: a queue, a data loader's workers, incoming "
                "requests) while the GPU has nothing queued. If the producer is slower than the GPU (data loading "
                "or preprocessing), speed it up or run more of it in parallel (more loader workers, prefetching, "
                "batches ready ahead in pinned memory); if no input was waiting (a server at low load), the GPU "
                "has capacity to spare: batch requests or serve more load from this GPU.")
    if kind == "lock":
        return (f"The launching thread waits on a lock ({n}) while the GPU has nothing queued: shorten what other "
                "threads do while holding it, or keep the thread that feeds the GPU out of that lock.")
    return (f"The launching thread is in {n} (I/O or another system call) while the GPU has nothing queued: move "
            "that work off the thread that feeds the GPU, or queue the next batch's work before it.")


def _call_kind(ctx: CaptureContext, kind: str, name: str) -> str:
    """The cause kind of the call ``name`` of ``kind`` (os_runtime or cuda_api) that fills the gaps: a launch
    call whose mean length says it loads modules is ``lazy_load``."""
    if kind == "os_runtime":
        return "os_runtime"
    if "ynchron" in name:
        return "sync"
    api = ctx.table.api
    if not name.startswith(("cudaLaunch", "cuLaunch")) or not len(api):
        return "api"
    codes = np.flatnonzero(api.names == name)
    total_ns, calls = 0, 0
    for sl in blockwise.blocks(len(api), _common.CALL_BLOCK):  # a launch-bound capture has millions of them
        m = api.top_level[sl] & np.isin(api.name_code[sl], codes)
        total_ns += int((api.end_ns[sl][m] - api.start_ns[sl][m]).sum())
        calls += int(m.sum())
    mean_us = total_ns / calls / 1e3 if calls else 0.0
    return "lazy_load" if mean_us >= LAZY_LOAD_CALL_US else "launch"


def _api_advice(name: str) -> str:
    """The advice when the CUDA API call ``name`` (neither a launch nor a synchronisation) fills the gaps."""
    if "GraphInstantiate" in name:
        return (f"{name} fills the gaps: instantiate each graph once, outside the loop, and replay it "
                "(cudaGraphExecUpdate when only parameters change).")
    if re.search(r"Malloc|Alloc|Free", name):
        return (f"{name} fills the gaps: allocate buffers once before the loop (or use a memory pool, "
                "cudaMallocAsync) instead of per iteration.")
    if "Memcpy" in name or "Memset" in name:
        return (f"{name} fills the gaps: use pinned host buffers with async copies on their own stream so "
                "the copies overlap GPU work, or move fewer bytes.")
    if re.search(r"Module|Library|Kernel(Get|Set)", name):
        return f"{name} fills the gaps: module loading; warm up before measuring or load modules eagerly."
    return f"CUDA API calls ({name}) fill the gaps: keep them out of the loop that feeds the GPU."


def _range_advice(label: str, tensorrt: bool) -> str:
    """The advice when the gaps fall inside the NVTX range ``label`` (TensorRT's enqueue, a JIT, a wait on
    communication, or the program's own)."""
    if tensorrt and label.startswith("TensorRT:"):
        return (f"The gaps fall inside {label}: TensorRT's own host-side work of issuing the layers' kernels. "
                "Replay the enqueue as a CUDA graph (trtexec --useCudaGraph; cudaStreamBeginCapture around "
                "enqueueV3), and keep a second execution context on its own stream queued.")
    if _JIT.search(label):
        return (f"The gaps fall inside {label}: JIT compilation in the measured work. Warm up every shape "
                "before measuring, cache the compiled kernels, or compile ahead of time.")
    if _COMM.search(label):
        return (f"The gaps fall inside {label}: the host waits on communication. Overlap it with GPU work "
                "(non-blocking sends and receives, NCCL or CUDA-aware transfers on their own stream).")
    return (f"The gaps fall inside {label}: that range's host work keeps the GPU waiting. Overlap it with GPU "
            "work or move it off the thread that feeds the GPU.")


def _innermost_range(ctx: CaptureContext, ranges_ns: np.ndarray, min_ns: float) -> int | None:
    """The deepest NVTX series overlapping the gaps for at least ``min_ns`` that does not span the steady
    state (then the longest of the deepest); None when there is none."""
    cands = np.flatnonzero(ranges_ns >= min_ns) if len(ranges_ns) else np.zeros(0, np.int64)
    inst = ctx.table.instances
    sid_of = inst["series_id"].to_numpy()
    best, best_key = None, None
    for sid in cands.tolist():
        rows = sid_of == sid
        if _cover(ctx, inst["start_ns"].to_numpy()[rows], inst["end_ns"].to_numpy()[rows]) >= ENCLOSING_COVER:
            continue
        key = (int(inst["depth"].to_numpy()[rows].max()), float(ranges_ns[sid]))
        if best_key is None or key > best_key:
            best, best_key = sid, key
    return best


def _cover(ctx: CaptureContext, start: np.ndarray, end: np.ndarray) -> float:
    """Share of the judged window (steady state) the intervals cover."""
    lo, span = ctx.judged_start_ns, ctx.steady_ns
    if span <= 0:
        return 1.0
    s, e = intervals.clip(start, end, lo, lo + span)
    return intervals.union_length(s, e) / span


def osrt_traced(ctx: CaptureContext) -> bool:
    """Whether the capture traced OS runtime calls (nsys -t osrt) and has any."""
    osrt = getattr(ctx.trace, "osrt", None)
    return osrt is not None and len(osrt) > 0
