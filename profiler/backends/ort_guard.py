"""Every ONNX Runtime inference the sweep starts runs under a time limit and stops on Ctrl-C or SIGTERM.

A model can run for ever (a ``Loop`` whose trip count is 2^62 and whose condition stays true) inside one
``InferenceSession.run`` call, which holds the calling thread in C++: Python's signal handlers wait for it
to return. ONNX Runtime stops a run between two nodes (inside a Loop's body too) when another thread sets
``RunOptions.terminate``; :class:`Watchdog`'s thread does that when the run has lasted
:data:`INFERENCE_TIME_LIMIT_S`, or at once when SIGINT or SIGTERM arrives (it reads the signal numbers
from Python's wakeup file descriptor, which the C-level handler writes to while the Python-level one
cannot run yet; a session being created is waited for off the main thread, ``onnxruntime.off_main_thread``,
so the handlers run then too). The stopped run then raises, and :func:`run_error` turns that, and any other error the
runtime raises on a model (a node that fails, an allocation of 40 GB), into one sentence about the model.

ONNX Runtime's own log is filtered to fatal messages (:data:`ORT_LOG_SEVERITY`): what it would log about
a failed run is in the exception, which reaches the terminal escaped like every other line trtprof
prints, while its log line would carry a node's name (and its escape sequences) raw to the terminal.
"""

from __future__ import annotations

import math
import os
import re
import select
import signal
import threading
import time
from typing import Any

from profiler.backends.base import BuildError

#: The longest one inference may take (seconds) before it is stopped and the model reported as too slow to
#: time: a model that takes longer per query cannot be swept in reasonable time on this backend (the
#: sweep runs hundreds of queries per variant). TRTPROF_INFERENCE_TIME_LIMIT_S overrides it.
INFERENCE_TIME_LIMIT_S = 300.0

#: ONNX Runtime's log severity for every session and run: 4 = fatal only (0 verbose, 2 warning, 3 error).
ORT_LOG_SEVERITY = 4

#: How often (seconds) the watchdog compares the running inferences with their deadline.
POLL_S = 0.05

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ModelRunError(BuildError):
    """ONNX Runtime could not run the model (a node failed, memory, the time limit); ``str()`` is the
    sentence shown. The sweep fails the variant with it, or, when the FP32 reference cannot run, stops
    with it as bad input (exit 3)."""


def time_limit_s() -> float:
    """The per-inference limit: TRTPROF_INFERENCE_TIME_LIMIT_S when set (a positive number), else
    :data:`INFERENCE_TIME_LIMIT_S`."""
    from profiler.errors import UsageError

    text = os.environ.get("TRTPROF_INFERENCE_TIME_LIMIT_S")
    if not text:
        return INFERENCE_TIME_LIMIT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"TRTPROF_INFERENCE_TIME_LIMIT_S={text!r} is not a positive number of seconds")
    return value


class _Run:
    __slots__ = ("options", "deadline_ns", "reason")

    def __init__(self, options: Any, deadline_ns: int):
        self.options, self.deadline_ns, self.reason = options, deadline_ns, None


class Watchdog:
    """Stops the inferences it watches when they pass their deadline or a stop signal arrives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, _Run] = {}
        self._thread: threading.Thread | None = None
        self._wake_fd: int | None = None

    def watch(self, options: Any, limit_s: float) -> _Run:
        """Start watching a run made with ``options`` (an ``onnxruntime.RunOptions``)."""
        if self._thread is None:
            self._start()
        run = _Run(options, time.monotonic_ns() + int(limit_s * 1e9))
        with self._lock:
            self._runs[id(run)] = run
        return run

    def done(self, run: _Run) -> str | None:
        """Stop watching ``run``; why it was stopped ('time limit', 'signal') or None."""
        with self._lock:
            self._runs.pop(id(run), None)
            if run.reason is not None:  # the options serve the context's next run: not terminated
                run.options.terminate = False
        return run.reason

    def _start(self) -> None:
        self._wake_fd = _wakeup_fd()
        self._thread = threading.Thread(target=self._loop, name="trtprof-ort-watchdog", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.check(time.monotonic_ns(), self._signalled())

    def _signalled(self) -> bool:
        if self._wake_fd is None:
            time.sleep(POLL_S)
            return False
        ready, _, _ = select.select([self._wake_fd], [], [], POLL_S)
        if not ready:
            return False
        try:
            data = os.read(self._wake_fd, 512)
        except OSError:
            return False
        return any(b in _STOP_SIGNALS for b in data)

    def check(self, now_ns: int, signalled: bool) -> None:
        """Terminate every watched run when ``signalled``, else those whose deadline ``now_ns`` passed."""
        with self._lock:  # under the lock: a run that ended meanwhile is not terminated after its end
            for run in self._runs.values():
                if run.reason is None and (signalled or now_ns >= run.deadline_ns):
                    run.reason = "signal" if signalled else "time limit"
                    run.options.terminate = True


def _wakeup_fd() -> int | None:
    """The read end of a pipe Python's signal machinery writes each signal's number to (None where
    another wakeup fd is set already, or off the main thread: then only the time limit applies)."""
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main thread
        return None
    if previous != -1:  # someone else's: give it back
        signal.set_wakeup_fd(previous)
        os.close(w)
        os.close(r)
        return None
    return r


WATCHDOG = Watchdog()


def run_options(ort: Any) -> Any:
    """A RunOptions for one context (quiet log, not terminated)."""
    ro = ort.RunOptions()
    ro.log_severity_level = ORT_LOG_SEVERITY
    return ro


def guarded(call: Any, options: Any, model: str, limit_s: float | None = None) -> Any:
    """``call()`` (an ONNX Runtime run made with ``options``), watched; its errors as ModelRunError."""
    limit = time_limit_s() if limit_s is None else limit_s
    run = WATCHDOG.watch(options, limit)
    try:
        return call()
    except Exception as exc:
        reason = WATCHDOG.done(run)
        if reason == "signal":
            _let_handlers_run()  # the Python-level handler raises KeyboardInterrupt (or Terminated) here
            raise KeyboardInterrupt from None
        raise run_error(exc, model, limit if reason == "time limit" else None) from None
    finally:
        WATCHDOG.done(run)


def _let_handlers_run() -> None:
    """Entering a Python function runs the signal handlers that are pending."""


_NODE_FAILED = re.compile(r"Non-zero status code returned while running (\w+) node\. Name:'(.*?)' "
                          r"Status Message: (.*)", re.S)
_SOURCE_PREFIX = re.compile(r"^\S+\.(?:cc|h|cpp|cu):\d+ ")
_ASSERTION = re.compile(r"^[\w.:\[\]() ]+ (?:==|!=|<=|>=|<|>) [\w.:\[\]() ]+ was false\. ")
_ALLOC = re.compile(r"Failed to allocate memory for requested buffer of size (\d+)")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def _without_signature(text: str) -> str:
    """'void* ns::F(size_t, bool) Failed to ...' -> 'Failed to ...' (the C++ function ONNX Runtime names)."""
    text = _SOURCE_PREFIX.sub("", text.strip())
    head = text.split("(", 1)[0]
    if "::" not in head:
        return text
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[i + 1:].strip()
    return text


def run_error(exc: BaseException, model: str, timed_out_after_s: float | None = None) -> ModelRunError:
    """One sentence about ``model`` from an error ONNX Runtime raised while running it."""
    if timed_out_after_s is not None:
        return ModelRunError(f"onnxruntime stopped {model} after {timed_out_after_s:g} s: one inference took "
                             f"longer than the {timed_out_after_s:g} s limit (TRTPROF_INFERENCE_TIME_LIMIT_S)")
    if isinstance(exc, MemoryError):
        return ModelRunError(f"running {model} needs more memory than this machine has")
    msg = " ".join(str(exc).split())
    msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", msg)
    where, detail = "", msg
    mt = _NODE_FAILED.search(msg)
    if mt:
        where = f" at its {mt.group(1)} node {mt.group(2)!r}" if mt.group(2) else f" at an unnamed {mt.group(1)} node"
        detail = _without_signature(mt.group(3))
    detail = _ASSERTION.sub("", detail)  # the C++ condition that failed, before the sentence that says it
    alloc = _ALLOC.search(detail)
    if alloc:
        n = int(alloc.group(1))
        detail = f"it asks for {_gib(n)} ({n} bytes) at once, more than could be allocated"
    detail = detail.rstrip(". ") or type(exc).__name__
    return ModelRunError(f"onnxruntime could not run {model}{where}: {detail}")
