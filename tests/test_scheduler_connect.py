"""``--scheduler``: a malformed address is exit 2 where it is parsed; a closed port, a silent server and a server
speaking another protocol are exit 3 in one sentence naming the address, within the declared timeout, and a
garbage length in the server's first bytes is never allocated. Local socket servers, no Dask cluster."""

from __future__ import annotations

import socket
import struct
import threading
import tracemalloc

import msgpack
import pytest

from profiler.cli import main
from profiler.pipeline import connect as conn
from profiler.errors import InputError, UsageError
from tests.conftest import SAMPLE_TRACES


class Server:
    """A TCP listener on 127.0.0.1 that sends ``greeting`` to every connection (then keeps it open until
    closed), or nothing when ``greeting`` is None."""

    def __init__(self, greeting: bytes | None):
        self.greeting, self.conns, self.accepted = greeting, [], threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.greeting is not None:
                c.sendall(self.greeting)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def dask_greeting(message: object) -> bytes:
    """A message framed as a Dask peer frames it: total length, frame count, frame lengths, frames."""
    frame = msgpack.packb(message)
    body = struct.pack("<QQ", 1, len(frame)) + frame
    return struct.pack("<Q", len(body)) + body


HANDSHAKE = {"compression": None, "python": [3, 11, 7], "pickle-protocol": 5}
GARBAGE = {
    "huge-length": b"\xff" * 8 + b"junk",  # 2^64 - 1 bytes declared
    "http": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    "ssh": b"SSH-2.0-OpenSSH_9.6\r\n",
    "small-length-not-frames": struct.pack("<Q", 24) + b"\x07" * 24,
    "frames-not-msgpack": struct.pack("<Q", 20) + struct.pack("<QQ", 1, 4) + b"\xc1\xc1\xc1\xc1",
    "msgpack-not-handshake": dask_greeting({"op": "hello"}),
}


@pytest.fixture
def server():
    made = []

    def make(greeting: bytes | None) -> Server:
        made.append(Server(greeting))
        return made[-1]
    yield make
    for s in made:
        s.close()


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"tcp://127.0.0.1:{port}"


@pytest.mark.parametrize("given,expected", [
    ("tcp://10.0.0.5:8786", ("tcp", "10.0.0.5", 8786)), ("tls://sched.example:8786", ("tls", "sched.example", 8786)),
    ("sched:8786", ("tcp", "sched", 8786)), ("tcp://[::1]:8786", ("tcp", "::1", 8786)),
    ("TCP://host:1/", ("tcp", "host", 1)),
])
def test_addresses_accepted(given, expected):
    assert conn.parse_address(given) == expected


@pytest.mark.parametrize("given", ["", "host", "tcp://host", "tcp://:8786", "http://host:80", "inproc://x:1",
                                   "tcp://host:0", "tcp://host:70000", "tcp://host:port", "tcp://ho st:1",
                                   "tcp://host:1/path", "host:1:2"])
def test_malformed_addresses_are_usage_errors(given):
    with pytest.raises(UsageError, match="--scheduler"):
        conn.parse_address(given)


@pytest.mark.parametrize("command", ["sweep", "analyze"])
def test_a_malformed_address_is_exit_2_before_any_work(command, capsys):
    head = ["sweep", "--no-store"] if command == "sweep" else ["analyze", str(SAMPLE_TRACES / "transfer_bound.sqlite")]
    with pytest.raises(SystemExit) as exc:
        main([*head, "--scheduler", "tcp://nowhere"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "is not a scheduler address" in err and "Traceback" not in err


def test_a_closed_port_is_bad_input_naming_the_address():
    address = closed_port()
    with pytest.raises(InputError, match=f"--scheduler {address}: cannot reach a Dask scheduler there"):
        conn.probe(address, 2.0)


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_a_server_that_is_not_dask_is_refused_without_allocating(kind, server):
    srv = server(GARBAGE[kind])
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as exc:
            conn.probe(srv.address, 5.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(exc.value)
    assert msg.startswith(f"--scheduler {srv.address}: ") and "Dask" in msg and "\n" not in msg
    assert peak < 4 * conn.MAX_GREETING_BYTES  # nothing sized by the garbage length


def test_a_declared_length_just_past_the_ceiling_is_refused(server, monkeypatch):
    monkeypatch.setattr(conn, "MAX_GREETING_BYTES", 100)
    big = dask_greeting({**HANDSHAKE, "pad": "x" * 200})
    with pytest.raises(InputError, match="declares 2[0-9][0-9] bytes, a Dask handshake at most 100"):
        conn.probe(server(big).address, 5.0)


def test_a_silent_server_fails_at_the_injected_timeout(server):
    srv = server(None)
    with pytest.raises(InputError, match=f"{srv.address}: the server there sent no Dask handshake within 0.2 s"):
        conn.probe(srv.address, 0.2)


def test_a_server_closing_at_once_is_not_dask(server):
    srv = server(b"")

    def close_all() -> None:  # accept and hang up: the probe reads end-of-file
        srv.accepted.wait()
        srv.conns[0].close()
    threading.Thread(target=close_all, daemon=True).start()
    with pytest.raises(InputError, match="closed the connection without a Dask handshake"):
        conn.probe(srv.address, 5.0)


def test_a_dask_handshake_passes_the_probe(server):
    conn.probe(server(dask_greeting(HANDSHAKE)).address, 5.0)  # no exception: a client may be made


def test_a_split_greeting_is_read_whole(server):
    """The greeting arriving in pieces (a slow link) is read to its declared length, not judged on a part."""
    whole = dask_greeting(HANDSHAKE)
    srv = server(whole[:5])

    def rest() -> None:
        srv.accepted.wait()
        srv.conns[0].sendall(whole[5:])
    threading.Thread(target=rest, daemon=True).start()
    conn.probe(srv.address, 5.0)


@pytest.mark.parametrize("raw,expected", [(None, conn.SCHEDULER_TIMEOUT_S), ("", conn.SCHEDULER_TIMEOUT_S),
                                          ("0.5", 0.5), ("30", 30.0)])
def test_timeout_from_the_environment(raw, expected):
    env = {} if raw is None else {conn.TIMEOUT_ENV: raw}
    assert conn.timeout_s(env) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "abc", "1e9"])
def test_a_bad_timeout_is_a_usage_error(raw):
    with pytest.raises(UsageError, match=conn.TIMEOUT_ENV):
        conn.timeout_s({conn.TIMEOUT_ENV: raw})


@pytest.mark.parametrize("command", ["sweep", "analyze"])
@pytest.mark.parametrize("kind", ["huge-length", "http", "closed"])
def test_the_commands_exit_3_in_one_sentence(command, kind, server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(conn.TIMEOUT_ENV, "2")
    address = closed_port() if kind == "closed" else server(GARBAGE[kind]).address
    head = (["sweep", "--no-store", "--out", str(tmp_path / "o"), "--precision", "fp32"] if command == "sweep"
            else ["analyze", str(SAMPLE_TRACES / "transfer_bound.sqlite"), "--no-store", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exc:
        main([*head, "--scheduler", address])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("trtprof: error")]
    assert exc.value.code == 3, err
    assert len(errors) == 1 and address in errors[0], err
    assert "Traceback" not in err and "internal error" not in err
