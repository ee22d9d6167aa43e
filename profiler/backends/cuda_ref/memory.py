"""Device memory of one cuda-backend variant, from PyTorch's caching-allocator statistics.

The reference executor allocates everything through PyTorch's caching allocator (weights, inputs,
intermediates, the graph pools of captured CUDA graphs, and the cuBLAS/cuDNN workspaces PyTorch hands
those libraries), so the allocator's counters account for it. The driver's free/used view
(``cudaMemGetInfo``) sees the allocator's reserved segments and every other process on the GPU.

Columns (all bytes):

* ``weights_bytes``: the program's constants (initializers and folded values: dequantized weights of an
  INT8 model are float32 here, 4 bytes a weight where TensorRT keeps 1);
* ``activation_bytes_per_context``: the allocator's peak over one eager forward pass at build time above
  what was allocated before it, less what the pass left allocated: the intermediates and transient
  library workspaces one pass needs at once (TensorRT's per-context activation memory);
* ``workspace_bytes``: what one more context keeps allocated beyond its own input and output tensors
  after a query: the libraries' per-stream workspaces PyTorch keeps (cuBLAS's, 32 MiB a stream on
  Hopper by default); without that measurement, what the build's pass left allocated;
* ``peak_allocated_bytes``: the allocator's peak from the start of the build until the snapshot;
* ``extra_context_bytes``: what one more execution context (stream, input buffers, one query, its CUDA
  graph when the variant captures one) added to the allocator's reserved memory, measured by making one;
* ``allocated_bytes`` / ``reserved_bytes``: held by live tensors / taken from the device, at the snapshot.

This module is plain Python: :func:`read_allocator` takes the torch module, the rest takes numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AllocatorStats:
    """One reading of the caching allocator's counters on one device."""

    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int

    @classmethod
    def from_stats(cls, stats: dict[str, Any]) -> "AllocatorStats":
        """From ``torch.cuda.memory_stats()`` (its ``*.all.current`` / ``*.all.peak`` keys; 0 when absent)."""
        return cls(int(stats.get("allocated_bytes.all.current", 0)), int(stats.get("reserved_bytes.all.current", 0)),
                   int(stats.get("allocated_bytes.all.peak", 0)))


def read_allocator(torch: Any, device: Any) -> AllocatorStats:
    torch.cuda.synchronize(device)
    return AllocatorStats.from_stats(torch.cuda.memory_stats(device))


def pass_memory(before: AllocatorStats, after: AllocatorStats) -> dict[str, int]:
    """Activation and workspace bytes of one forward pass, from readings before it (peak reset just
    before) and after it (its outputs dropped)."""
    kept = max(0, after.allocated_bytes - before.allocated_bytes)
    peak = max(0, after.peak_allocated_bytes - before.allocated_bytes)
    return {"activation_bytes_per_context": max(0, peak - kept), "workspace_bytes": kept}


def context_cost(before: AllocatorStats, after: AllocatorStats, io_bytes: int) -> dict[str, int]:
    """What one more context took: reserved (from the device; the allocator grows in 2 MiB and 20 MiB
    segments, so this is 0 where its cache had room) and allocated (live tensors) deltas, and the part of
    the allocated delta that is not the context's own ``io_bytes`` (input and output tensors)."""
    allocated = max(0, after.allocated_bytes - before.allocated_bytes)
    return {"extra_context_bytes": max(0, after.reserved_bytes - before.reserved_bytes),
            "extra_context_allocated_bytes": allocated,
            "workspace_bytes": max(0, allocated - int(io_bytes))}


def memory_columns(weights_bytes: int, build_pass: dict[str, int] | None, now: AllocatorStats,
                   extra: dict[str, int] | None, why_no_extra: str | None = None) -> dict[str, Any]:
    """The variant's device-memory columns (see the module docstring); a column that could not be
    measured is None with its reason under ``<column>_reason``."""
    out: dict[str, Any] = {"weights_bytes": int(weights_bytes)}
    if build_pass is None:
        out.update(activation_bytes_per_context=None, workspace_bytes=None,
                   activation_bytes_per_context_reason="the build's probe pass did not run")
    else:
        out.update(build_pass)
    out.update(peak_allocated_bytes=now.peak_allocated_bytes, allocated_bytes=now.allocated_bytes,
               reserved_bytes=now.reserved_bytes)
    if extra is None:
        out.update(extra_context_bytes=None, extra_context_reason=why_no_extra or "not measured")
    else:
        out.update(extra)  # its workspace_bytes (a real stream's) replaces the build pass's
    return out
