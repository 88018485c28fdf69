"""A small OpenAI-compatible server on loopback for the replay tests (standard library only).

It tokenizes a prompt by whitespace (one word, one token: what ``replay.prompts`` builds on),
keeps an unbounded prefix cache of ``BLOCK``-token blocks and answers ``/v1/completions``
streamed, with ``usage.prompt_tokens_details.cached_tokens`` = the leading full blocks it had
seen before.  Every request is recorded (body, arrival time, tokens) for the tests to check.
Behaviours for the error tests: answer 500 from the n-th request on, delay the first token,
or shut down after n requests (the next connections are refused).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BLOCK = 16
MODEL = "fake-model"
MAX_MODEL_LEN = 200_000


@dataclass
class Received:
    body: dict[str, Any]
    t_s: float  # time.perf_counter() on arrival
    words: list[str]
    cached_tokens: int


@dataclass
class Behaviour:
    fail_from: int | None = None  # requests numbered from 1: this one and later get HTTP 500
    first_token_delay_s: float = 0.0
    shutdown_after: int | None = None  # after this many answered requests, stop listening
    chunks: int = 2  # streamed text chunks per answer


@dataclass
class FakeServer:
    url: str
    behaviour: Behaviour
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: set[int] = field(default_factory=set)

    def cached(self, words: list[str]) -> int:
        """Leading full blocks seen before (then all of this prompt's are seen)."""
        keys, h = [], 0
        for i in range(len(words) // BLOCK):
            h = hash((h, tuple(words[i * BLOCK : (i + 1) * BLOCK])))
            keys.append(h)
        k = 0
        while k < len(keys) and keys[k] in self.seen:
            k += 1
        self.seen.update(keys)
        return k * BLOCK


def _handler(fake: FakeServer, server: list[ThreadingHTTPServer]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _json(self, status: int, doc: dict[str, Any]) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"data": [{"id": MODEL, "max_model_len": MAX_MODEL_LEN}]})
            else:
                self._json(404, {"error": "no such path"})

        def do_POST(self) -> None:
            t = time.perf_counter()
            n = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(n))
            if self.path != "/v1/completions":
                self._json(404, {"error": "no such path"})
                return
            words = body["prompt"].split()
            b = fake.behaviour
            with fake.lock:
                number = len(fake.received) + 1
                cached = fake.cached(words)
                fake.received.append(Received(body, t, words, cached))
            if b.fail_from is not None and number >= b.fail_from:
                self._json(500, {"error": "injected failure"})
                return
            time.sleep(b.first_token_delay_s)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(b.chunks):
                chunk = {"choices": [{"index": 0, "text": f" w{i}"}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {
                "prompt_tokens": len(words),
                "completion_tokens": body["max_tokens"],
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
            if b.shutdown_after is not None and number >= b.shutdown_after:
                threading.Thread(target=_close, args=(server[0],), daemon=True).start()

    return Handler


def _close(httpd: ThreadingHTTPServer) -> None:
    """Stop serving and close the listening socket: later connections are refused."""
    httpd.shutdown()
    httpd.server_close()


@contextmanager
def serve(behaviour: Behaviour | None = None) -> Iterator[FakeServer]:
    """A fake server on 127.0.0.1 (an ephemeral port), stopped on exit."""
    holder: list[ThreadingHTTPServer] = []
    fake = FakeServer("", behaviour or Behaviour())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake, holder))
    httpd.daemon_threads = True
    holder.append(httpd)
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
