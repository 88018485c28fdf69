"""The replay client and run against servers that misbehave (audit): a reply nested too
deeply to parse, a server that trickles bytes under the socket timeout, and a program thread
that dies of an unexpected exception.  Each must end as a counted error, never a hang or a
silent success."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from ttlpolicy.replay import Call, Client, Options, Replay, ReplayProgram
from ttlpolicy.replay.client import CallError

Reply = Callable[[socket.socket], None]


@contextmanager
def raw_server(reply: Reply) -> Iterator[str]:
    """A loopback server that reads one HTTP request and answers it with ``reply``."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (int(h.split(b":")[1]) for h in head.split(b"\r\n")
                 if h.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            while len(body) < length:
                body += sock.recv(65536)
            with contextlib.suppress(OSError):  # (the client gave up: what the tests want)
                reply(sock)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def deep_reply(sock: socket.socket) -> None:
    sock.sendall(STREAM_HEAD + b"data: " + b"[" * 100_000 + b"\n\n")


def trickle(prefix: bytes, seconds: float) -> Reply:
    def reply(sock: socket.socket) -> None:
        sock.sendall(prefix)
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # a byte at a time, never a newline
            sock.sendall(b"d")
            time.sleep(0.2)

    return reply


def test_a_reply_nested_too_deeply_to_parse_is_a_protocol_error() -> None:
    with raw_server(deep_reply) as url, pytest.raises(CallError) as e:
        Client(url, timeout_s=5.0).complete({"model": "m", "prompt": "x", "max_tokens": 1})
    assert e.value.kind == "protocol" and "nested" in e.value.detail


def test_a_models_list_nested_too_deeply_is_a_protocol_error() -> None:
    def reply(sock: socket.socket) -> None:
        body = b"[" * 100_000
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
        )

    with raw_server(reply) as url, pytest.raises(CallError) as e:
        Client(url, timeout_s=5.0).models()
    assert e.value.kind == "protocol"


@pytest.mark.parametrize(
    "reply",
    [trickle(STREAM_HEAD, 6.0), trickle(b"", 6.0)],
    ids=["body-trickled", "status-line-trickled"],
)
def test_a_server_trickling_bytes_cannot_hold_a_call_past_its_deadline(reply: Reply) -> None:
    """A byte every 0.2 s keeps each read under the socket timeout; the call's deadline
    (1 s) still ends it, not the server's 6 s."""
    with raw_server(reply) as url:
        t0 = time.perf_counter()
        with pytest.raises(CallError) as e:
            Client(url, timeout_s=1.0).complete({"model": "m", "prompt": "x", "max_tokens": 1})
        took_s = time.perf_counter() - t0
    assert e.value.kind == "timeout" and took_s < 3.0


class _BrokenClient:
    """A client whose calls fail with what no check foresaw (a bug)."""

    url = "http://broken"

    def complete(self, body: dict[str, Any], deadline_s: float | None = None) -> Any:
        raise RuntimeError("a bug")

    def cancel_all(self) -> None:
        pass


def test_a_program_thread_that_dies_of_an_unexpected_error_is_counted_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    program = ReplayProgram("p", (Call(32, 1, 0.0, None, (1, 2)),), 16)
    replay = Replay(_BrokenClient(), Options(model="m", time_scale=0.0))  # type: ignore[arg-type]
    result = replay.run_timed([(0.0, program), (0.0, program)])
    assert result.errors == {"internal": 2}
    assert [p.failed for p in result.programs] == [True, True]
    assert all(p.end_s is None for p in result.programs)
    assert "a bug" in caplog.text  # logged with its traceback
