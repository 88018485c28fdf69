"""``vllm serve --middleware ttlpolicy_vllm.middleware.AgentHeaders``: the session an agent
client already sends in its headers (``X-Claude-Code-Session-Id`` and the others of
``ttlpolicy.agent_headers``), or in the body's ``prompt_cache_key``, names the program — no
change to the client.

Headers do not reach vLLM's scheduler, so this ASGI middleware carries the session into the
JSON body of completion requests, as ``vllm_xargs`` fields ``ttlpolicy_session`` and
``ttlpolicy_agent``, which ``identity.program_of`` reads after an explicit ``program_id`` or
``session_id`` (and which tenancy then namespaces, like any client id).  It never overwrites a
field the client set, and leaves every other request byte for byte as it came: other paths
and methods, bodies that are not a JSON object, requests naming no session, and bodies over
``MAX_BODY_BYTES`` (read no further than that, then passed on as they stream)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ttlpolicy.agent_headers import (
    AGENT_FIELD,
    BODY_SESSION_FIELDS,
    SESSION_FIELD,
    SESSION_HEADERS,
    agent_session,
)

__all__ = ["MAX_BODY_BYTES", "PATHS", "AgentHeaders", "carried"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

#: The endpoints whose requests reach the scheduler with ``vllm_xargs``.
PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/responses"})
#: Largest body read to find the session, in bytes; a larger one passes through untouched
#: (anonymous unless it names its program itself), so memory per request stays bounded.
MAX_BODY_BYTES = 8 * 1024 * 1024


def carried(body: bytes, headers: dict[str, str]) -> bytes | None:
    """``body`` with the session ``headers`` (and its own ``prompt_cache_key``) name carried
    into its ``vllm_xargs``; None to leave it as it is."""
    if not any(name in headers for name in SESSION_HEADERS) and not any(
        name.encode() in body for name in BODY_SESSION_FIELDS
    ):
        return None  # the common case costs no JSON parse
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None  # vLLM answers it with its own error
    if not isinstance(parsed, dict):
        return None
    session = agent_session(headers, parsed)
    xargs = parsed.get("vllm_xargs")
    if session is None or not isinstance(xargs, dict | None):
        return None
    xargs = {} if xargs is None else xargs
    if SESSION_FIELD in xargs or AGENT_FIELD in xargs:
        return None  # the client's own fields win
    xargs[SESSION_FIELD] = session.session_id
    if session.agent_id is not None:
        xargs[AGENT_FIELD] = session.agent_id
    parsed["vllm_xargs"] = xargs
    return json.dumps(parsed).encode()


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` giving ``messages`` first, then what ``receive`` gives."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


class AgentHeaders:
    """Pure ASGI middleware (vLLM adds a class given to ``--middleware`` with
    ``app.add_middleware``)."""

    def __init__(self, app: App, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or scope.get("path") not in PATHS
        ):
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for name, value in scope.get("headers") or ():
            headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message.get("type") != "http.request":  # the client went away
                await self.app(scope, _replay(messages, receive), send)
                return
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:  # stop reading; the rest streams on as it comes
                await self.app(scope, _replay(messages, receive), send)
                return
            if not message.get("more_body", False):
                break
        body = carried(b"".join(m.get("body", b"") for m in messages), headers)
        if body is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        scope = dict(scope)
        scope["headers"] = [
            (name, value)
            for name, value in scope.get("headers") or ()
            if name.lower() != b"content-length"
        ] + [(b"content-length", str(len(body)).encode())]
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)
