"""A minimal OpenAI-compatible client on the standard library (``http.client``): streamed
``/v1/completions`` with time to first token and the usage the server reports
(``usage.prompt_tokens_details.cached_tokens``: vLLM sends it with
``--enable-prompt-tokens-details``), and ``/v1/models``.

Everything read from the server is bounded (line length, lines per response, a deadline per
call, kept on every read of the socket: a server trickling bytes cannot hold a call past it;
JSON nesting).  A failure is a :class:`CallError` whose ``kind`` says what happened: ``refused``,
``timeout``, ``http <status>``, ``disconnected``, ``protocol`` (a response that is not what the
API says) or ``cancelled`` (the run was stopped while the call was in flight).
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

#: Longest line of a streamed response, bytes (a chunk of a few tokens is ~ 300).
MAX_LINE_BYTES = 1 << 20
#: Most lines one streamed response may send (a bound on a runaway server).
MAX_LINES = 1_000_000
#: Most bytes of a non-streamed response read.
MAX_BODY_BYTES = 16 << 20


class _DeadlineReader(io.RawIOBase):
    """A socket's reads (through the response's own socket file, which keeps the socket open
    while the response is), each given the time left to ``deadline`` (``time.perf_counter``):
    a timeout per read alone lets a server that sends a byte now and then hold a call for
    ever."""

    def __init__(self, inner: io.BufferedReader, sock: socket.socket, deadline: float) -> None:
        self._inner, self._sock, self._deadline = inner, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        left = self._deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError("the call's deadline passed")
        self._sock.settimeout(left)
        return self._inner.raw.readinto(b) or 0  # (one read: the buffered one would fill b)

    def close(self) -> None:
        self._inner.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """A response whose every read keeps the call's deadline (``_DeadlineReader``)."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kw: Any) -> None:
        super().__init__(sock, *args, **kw)
        # (nothing read yet: ``begin`` reads the status line through the new reader)
        self.fp = io.BufferedReader(_DeadlineReader(self.fp, sock, deadline))


class CallError(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        self.kind, self.detail = kind, detail
        super().__init__(f"{kind}: {detail}")


@dataclass(frozen=True, slots=True)
class Completion:
    ttft_s: float | None  # None: no token came back (max_tokens 0 or an empty answer)
    latency_s: float  # request sent → last byte
    prompt_tokens: int | None  # from usage (None: the server sent no usage)
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens (None: not sent)
    completion_tokens: int | None


def _base(url: str) -> urllib.parse.SplitResult:
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"endpoint must be an http(s)://host[:port] URL, got {url!r}")
    path = u.path.rstrip("/")
    for suffix in ("/v1/completions", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return u._replace(path=path, query="", fragment="")


class Client:
    """One server.  Thread-safe: each call opens its own connection; ``cancel_all`` closes the
    connections in flight (what a Ctrl-C does, so that the run reports at once)."""

    def __init__(self, url: str, *, timeout_s: float = 600.0, api_key: str | None = None) -> None:
        self.base = _base(url)
        self.url = urllib.parse.urlunsplit(self.base)
        self.timeout_s = timeout_s
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._cancelled = False

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        cls = (
            http.client.HTTPSConnection
            if self.base.scheme == "https"
            else http.client.HTTPConnection
        )
        conn = cls(self.base.hostname or "", self.base.port, timeout=self.timeout_s)
        conn.response_class = functools.partial(  # type: ignore[assignment]
            _DeadlineResponse, deadline=deadline
        )
        with self._lock:
            if self._cancelled:
                raise CallError("cancelled", "the run was stopped")
            self._open.add(conn)
        return conn

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)
        conn.close()

    def cancel_all(self) -> None:
        """Fail every call in flight and every later one with ``cancelled``."""
        with self._lock:
            self._cancelled = True
            conns = list(self._open)
        for c in conns:
            try:
                if c.sock is not None:
                    c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, deadline: float
    ) -> tuple[Any, Any]:
        conn = self._connection(deadline)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, self.base.path + path, body=data, headers=self._headers)
            return conn, conn.getresponse()
        except BaseException as e:
            self._release(conn)
            raise self._error(e) from None

    def _error(self, e: BaseException) -> BaseException:
        if isinstance(e, CallError) or not isinstance(e, Exception):
            return e
        if self._cancelled:
            return CallError("cancelled", "the run was stopped")
        if isinstance(e, ConnectionRefusedError):
            return CallError("refused", f"{self.url}: connection refused")
        if isinstance(e, TimeoutError | socket.timeout):
            return CallError("timeout", f"{self.url}: no answer within the call's deadline")
        if isinstance(e, RecursionError):  # (json: a reply nested deeper than it parses)
            return CallError("protocol", f"{self.url}: a reply nested too deeply to parse")
        if isinstance(
            e, http.client.RemoteDisconnected | ConnectionError | http.client.IncompleteRead
        ):
            return CallError("disconnected", f"{self.url}: {type(e).__name__}: {e}")
        if isinstance(e, OSError):
            return CallError("refused", f"{self.url}: {e.strerror or e}")
        if isinstance(e, http.client.HTTPException | ValueError):
            return CallError("protocol", f"{self.url}: {type(e).__name__}: {e}")
        return e

    def models(self) -> list[dict[str, Any]]:
        """The server's ``/v1/models`` entries (``id``, and vLLM's ``max_model_len``)."""
        conn, resp = self._send("GET", "/v1/models", None, time.perf_counter() + self.timeout_s)
        try:
            raw = resp.read(MAX_BODY_BYTES + 1)
            if resp.status != 200:
                raise CallError(f"http {resp.status}", raw[:200].decode("utf-8", "replace"))
            doc = json.loads(raw)
        except (ValueError, OSError, http.client.HTTPException, RecursionError) as e:
            raise self._error(e) from None
        finally:
            resp.close()  # (its socket file: the connection alone leaves it to the GC)
            self._release(conn)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise CallError("protocol", f"{self.url}/v1/models: no 'data' list")
        return [m for m in data if isinstance(m, dict)]

    def complete(self, body: dict[str, Any], deadline_s: float | None = None) -> Completion:
        """A streamed completion of ``body`` (``stream`` and usage options are added)."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        t0 = time.perf_counter()
        deadline = t0 + (deadline_s if deadline_s is not None else self.timeout_s)
        conn, resp = self._send("POST", "/v1/completions", body, deadline)
        ttft = None
        usage: dict[str, Any] | None = None
        try:
            if resp.status != 200:
                text = resp.read(4096).decode("utf-8", "replace")
                raise CallError(f"http {resp.status}", text[:300])
            for _ in range(MAX_LINES):
                line = resp.readline(MAX_LINE_BYTES + 1)
                if not line:
                    raise CallError("disconnected", f"{self.url}: stream ended before [DONE]")
                if len(line) > MAX_LINE_BYTES:
                    raise CallError("protocol", f"{self.url}: a line over {MAX_LINE_BYTES} bytes")
                if time.perf_counter() > deadline:
                    raise CallError("timeout", f"{self.url}: call longer than its deadline")
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event names
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                chunk = json.loads(payload)
                if not isinstance(chunk, dict):
                    raise CallError("protocol", f"{self.url}: a chunk that is not an object")
                if "error" in chunk:
                    raise CallError("http error", str(chunk["error"])[:300])
                choices = chunk.get("choices") or []
                if ttft is None and any(isinstance(c, dict) and c.get("text") for c in choices):
                    ttft = time.perf_counter() - t0
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
            else:
                raise CallError("protocol", f"{self.url}: more than {MAX_LINES} lines")
        except (ValueError, OSError, http.client.HTTPException, RecursionError) as e:
            raise self._error(e) from None
        finally:
            resp.close()  # (its socket file: the connection alone leaves it to the GC)
            self._release(conn)
        latency = time.perf_counter() - t0
        return Completion(ttft, latency, *_usage(usage))


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _usage(usage: dict[str, Any] | None) -> tuple[int | None, int | None, int | None]:
    if usage is None:
        return None, None, None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return _count(usage.get("prompt_tokens")), cached, _count(usage.get("completion_tokens"))
