"""CUDA errors as clear, typed exceptions.

cuda-python returns an error code with every result; :func:`check` turns a failed one into

- :class:`CudaUnavailable` (an ``InputError``, exit code 3) when there is no usable GPU or driver:
  the environment, not trtprof, has to change;
- :class:`CudaOutOfMemory` when an allocation failed;
- :class:`GraphCaptureError` for the stream-capture family of errors, with what usually causes each;
- :class:`CudaError` (a ``RuntimeError``) for everything else.

Each message names the call, the CUDA error name (``cudaErrorMemoryAllocation``) and its description.
Nothing here imports cuda-python: the runtime module is passed in, so the mapping is testable anywhere.
"""

from __future__ import annotations

from typing import Any

from profiler.errors import InputError

#: errors that mean "no usable CUDA device or driver here"
UNAVAILABLE = frozenset({
    "cudaErrorNoDevice", "cudaErrorInsufficientDriver", "cudaErrorSystemDriverMismatch",
    "cudaErrorCompatNotSupportedOnDevice", "cudaErrorDevicesUnavailable", "cudaErrorInitializationError",
    "cudaErrorInvalidDevice", "cudaErrorStubLibrary", "cudaErrorSystemNotReady", "cudaErrorNotSupported",
})
OUT_OF_MEMORY = frozenset({"cudaErrorMemoryAllocation"})
#: stream-capture errors and what usually causes each (CUDA's documented capture rules)
CAPTURE_HINTS = {
    "cudaErrorStreamCaptureUnsupported": "a call that cannot be captured ran inside the captured region "
                                         "(a synchronisation, cudaMalloc, or a copy to or from pageable memory)",
    "cudaErrorStreamCaptureInvalidated": "an earlier call inside the captured region invalidated the capture",
    "cudaErrorStreamCaptureMerge": "two independent captures were merged",
    "cudaErrorStreamCaptureUnmatched": "the capture was not begun on this stream",
    "cudaErrorStreamCaptureUnjoined": "work forked onto another stream was not joined back before the capture ended",
    "cudaErrorStreamCaptureIsolation": "the captured work depends on work outside the capture",
    "cudaErrorStreamCaptureImplicit": "the legacy default stream was used while capturing",
    "cudaErrorStreamCaptureWrongThread": "the capture was ended from another thread than the one that began it",
    "cudaErrorCapturedEvent": "an event recorded inside the capture was queried or synchronised",
    "cudaErrorGraphExecUpdateFailure": "the executable graph could not be updated in place",
}


class CudaError(RuntimeError):
    """A CUDA call failed. ``name`` is CUDA's error name, ``code`` its number, ``call`` the function."""

    def __init__(self, call: str, name: str, code: int, description: str = "", hint: str = ""):
        self.call, self.name, self.code, self.description, self.hint = call, name, int(code), description, hint
        desc = f" ({description})" if description else ""
        why = f": {hint}" if hint else ""
        super().__init__(f"CUDA call {call} failed with {name}{desc}{why}")


class CudaOutOfMemory(CudaError):
    """An allocation on the device or pinned host memory failed."""


class GraphCaptureError(CudaError):
    """Capturing, instantiating or launching a CUDA graph failed; ``str()`` is the fallback reason."""


class CudaUnavailable(InputError):
    """No usable CUDA GPU or driver (exit code 3): e.g. cudaErrorNoDevice, cudaErrorInsufficientDriver."""

    def __init__(self, call: str, name: str, code: int, description: str = ""):
        self.call, self.name, self.code = call, name, int(code)
        desc = f" ({description})" if description else ""
        super().__init__(f"no usable CUDA GPU: {call} returned {name}{desc}")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def error_name(rt: Any, err: Any) -> str:
    """CUDA's name for an error code (``cudaErrorNoDevice``), through ``rt.cudaGetErrorName``."""
    try:
        res = rt.cudaGetErrorName(err)
        return _text(res[1] if isinstance(res, tuple) else res)
    except Exception:  # an unknown code: fall back to the enum's own name or the number
        return getattr(err, "name", None) or f"cudaError {int(err)}"


def error_description(rt: Any, err: Any) -> str:
    try:
        res = rt.cudaGetErrorString(err)
        return _text(res[1] if isinstance(res, tuple) else res)
    except Exception:
        return ""


def make_error(rt: Any, err: Any, call: str) -> Exception:
    """The exception for a failed ``call`` that returned ``err``."""
    name = error_name(rt, err)
    desc = error_description(rt, err)
    code = int(err)
    if name in UNAVAILABLE:
        return CudaUnavailable(call, name, code, desc)
    if name in OUT_OF_MEMORY:
        return CudaOutOfMemory(call, name, code, desc)
    if name in CAPTURE_HINTS or name.startswith("cudaErrorStreamCapture"):
        return GraphCaptureError(call, name, code, desc, CAPTURE_HINTS.get(name, ""))
    return CudaError(call, name, code, desc)


def check(rt: Any, result: Any, call: str) -> Any:
    """Unpack a cuda-python result ``(err, *values)``; raise the mapped exception when ``err`` != 0.

    Returns None for no values, the value for one, a tuple for several.
    """
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        raise make_error(rt, err, call)
    if not values:
        return None
    return values[0] if len(values) == 1 else values
