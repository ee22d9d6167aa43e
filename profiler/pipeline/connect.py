"""Reaching a Dask scheduler (``--scheduler``): the address checked where it is parsed, the server probed with
a bounded read before any Dask client is made, and every way it can fail said in one sentence.

A Dask client trusts what the server sends: the first eight bytes of every message are its length, and a
buffer of that length is allocated before it is read. A server that is not a Dask scheduler (a web server,
an SSH daemon, anything listening on the port) makes that length garbage, and the client tries to allocate
exabytes (an internal error) or waits for bytes that never come. So :func:`connect` first opens a plain socket
of its own, reads the scheduler's greeting (the handshake every Dask peer sends as soon as it is connected)
with a declared ceiling on its size and a deadline, and only then creates the client, with the same deadline.

Failures: a malformed address is a usage error (exit 2); an address where nothing answers in time, or where the
server is not a Dask scheduler, is bad input (exit 3), naming the address.
"""

from __future__ import annotations

import math
import os
import re
import socket
import struct
import time
from typing import Any

from profiler.errors import InputError, MissingExtra, UsageError

#: Seconds to reach the scheduler, read its greeting and connect the client (each step within what is left of
#: it). A scheduler on the same network answers in milliseconds; 10 s leaves room for a busy one. Overridden
#: by the environment variable :data:`TIMEOUT_ENV` (a positive number of seconds).
SCHEDULER_TIMEOUT_S = 10.0
TIMEOUT_ENV = "TRTPROF_SCHEDULER_TIMEOUT_S"

#: The largest greeting read from a server before it is taken for a Dask scheduler. A scheduler's handshake is
#: one frame of about 60 bytes (its compression, Python version and pickle protocol); a declared length past
#: this is a server speaking another protocol, refused before anything of that length is allocated.
MAX_GREETING_BYTES = 64 * 1024

#: The most frames a greeting may declare (a scheduler sends one).
MAX_GREETING_FRAMES = 16

SCHEMES = ("tcp", "tls")
_ADDRESS = re.compile(r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)"
                      r":(?P<port>[0-9]+)/?$")


def parse_address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a scheduler address: ``tcp://HOST:PORT``, ``tls://HOST:PORT`` or ``HOST:PORT``
    (tcp), an IPv6 host in brackets. Anything else is a :class:`UsageError` (exit 2) in one sentence."""
    m = _ADDRESS.match(address.strip()) if isinstance(address, str) else None
    if m is None:
        raise UsageError(f"--scheduler {address!r} is not a scheduler address: give tcp://HOST:PORT, "
                         "tls://HOST:PORT or HOST:PORT")
    scheme = (m.group("scheme") or "tcp").lower()
    if scheme not in SCHEMES:
        raise UsageError(f"--scheduler {address!r}: the scheme {scheme}:// is not one trtprof connects with "
                         "(tcp:// or tls://)")
    port = int(m.group("port"))
    if not 1 <= port <= 65535:
        raise UsageError(f"--scheduler {address!r}: port {port} is outside 1-65535")
    return scheme, m.group("host").strip("[]"), port


def normalized(address: str) -> str:
    """The address as Dask takes it (``HOST:PORT`` gets ``tcp://``), once :func:`parse_address` accepts it."""
    scheme, host, port = parse_address(address)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def check_option(ctx: Any, param: Any, value: str | None) -> str | None:
    """The click callback of ``--scheduler``: a malformed address fails where it is parsed (exit 2)."""
    if value is None:
        return None
    return normalized(value)


def timeout_s(environ: dict[str, str] | None = None) -> float:
    """:data:`SCHEDULER_TIMEOUT_S`, or the value of :data:`TIMEOUT_ENV` (a usage error when it is not a finite
    positive number)."""
    raw = (os.environ if environ is None else environ).get(TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return SCHEDULER_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or value > 86400:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds in (0, 86400]")
    return value


def probe(address: str, timeout: float) -> None:
    """Raise :class:`InputError` unless a Dask scheduler answers at ``address`` within ``timeout`` seconds: a
    TCP connection, then (for tcp://) its greeting read with at most :data:`MAX_GREETING_BYTES` and checked to
    be a Dask handshake. A tls:// server is only reached here: its greeting is encrypted, and the client's own
    connection (with the same deadline) checks it."""
    scheme, host, port = parse_address(address)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise InputError(f"--scheduler {address}: nothing answered within {timeout:g} s") from None
    except OSError as exc:
        raise InputError(f"--scheduler {address}: cannot reach a Dask scheduler there "
                         f"({exc.strerror or type(exc).__name__})") from None
    try:
        if scheme == "tcp":
            _check_greeting(sock, address, deadline, timeout)
    finally:
        sock.close()


def _check_greeting(sock: socket.socket, address: str, deadline: float, timeout: float) -> None:
    not_dask = f"--scheduler {address}: the server there is not a Dask scheduler"
    head = _read(sock, 8, deadline, address, timeout)
    (length,) = struct.unpack("<Q", head)
    if not 16 <= length <= MAX_GREETING_BYTES:
        raise InputError(f"{not_dask} (its first message declares {length:,} bytes, a Dask handshake "
                         f"at most {MAX_GREETING_BYTES:,})")
    body = _read(sock, length, deadline, address, timeout)
    (n,) = struct.unpack_from("<Q", body)
    if not 1 <= n <= MAX_GREETING_FRAMES or 8 + 8 * n > length:
        raise InputError(f"{not_dask} (its first message is not a Dask handshake)")
    sizes = struct.unpack_from(f"<{n}Q", body, 8)
    if 8 + 8 * n + sum(sizes) != length or not _is_handshake(body, 8 + 8 * n, sizes):
        raise InputError(f"{not_dask} (its first message is not a Dask handshake)")


def _is_handshake(body: bytes, offset: int, sizes: tuple[int, ...]) -> bool:
    """Whether a frame of the greeting decodes to the handshake's mapping (its Python version among its keys)."""
    import msgpack

    for size in sizes:
        try:
            msg = msgpack.unpackb(body[offset:offset + size], raw=False)  # at most MAX_GREETING_BYTES
        except (ValueError, TypeError):  # not msgpack (msgpack's errors are ValueErrors), or unhashable keys
            msg = None
        if isinstance(msg, dict) and "python" in msg:
            return True
        offset += size
    return False


def _read(sock: socket.socket, n: int, deadline: float, address: str, timeout: float) -> bytes:
    """Exactly ``n`` bytes before ``deadline`` (``n`` is at most :data:`MAX_GREETING_BYTES` here)."""
    got = bytearray()
    while len(got) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise InputError(f"--scheduler {address}: the server there sent no Dask handshake within {timeout:g} s")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(got))
        except socket.timeout:
            continue  # the loop says it once the deadline has passed
        except OSError as exc:
            raise InputError(f"--scheduler {address}: the connection failed before a Dask handshake "
                             f"({exc.strerror or type(exc).__name__})") from None
        if not chunk:
            raise InputError(f"--scheduler {address}: the server there closed the connection without a Dask "
                             "handshake; it is not a Dask scheduler")
        got += chunk
    return bytes(got)


def connect(address: str, timeout: float | None = None):
    """A Dask distributed client of the scheduler at ``address``, within ``timeout`` seconds (default
    :func:`timeout_s`): the address checked (exit 2), the server probed (:func:`probe`, exit 3), then the
    client made with the same deadline; a failure of the client's own connection is exit 3 too. An in-process
    scheduler (``inproc://``, a library caller's LocalCluster) has no socket to probe."""
    in_process = address.startswith("inproc://")
    address = address if in_process else normalized(address)
    timeout = timeout_s() if timeout is None else timeout
    try:
        from distributed import Client
    except ImportError as exc:
        raise MissingExtra("distributed", "dask", "--scheduler") from exc
    if not in_process:
        probe(address, timeout)
    try:
        return Client(address, timeout=f"{timeout}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise InputError(f"--scheduler {address}: cannot connect a Dask client there ({reason})") from None
