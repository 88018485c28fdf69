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
``MAX_BODY_BYTES`` (read no further than that, then passed on as they stream).  The body it
rewrites is compact UTF-8 JSON, no longer than the one that came plus the fields added (and
``_SLACK_BYTES``: a rewrite longer still, as many ``1e9`` written back as ``1000000000.0``, is
not made)."""

from __future__ import annotations

import json
import re
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

#: The endpoints whose requests reach the scheduler with ``vllm_xargs`` (``/v1/messages``:
#: vLLM's Anthropic API, Claude Code's, which passes them on to its chat completion).
PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"})
#: Largest body read to find the session, in bytes; a larger one passes through untouched
#: (anonymous unless it names its program itself), so memory per request stays bounded.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Digits of the largest Content-Length compared as a number (more: larger than any cap).
_MAX_LENGTH_DIGITS = 18
#: Bytes a rewritten body may grow beyond the fields added: numbers written back a little
#: longer (``1e-7`` as ``1e-07``).
_SLACK_BYTES = 1024
#: Lone surrogates (a JSON body may escape one): UTF-8 has no bytes for them.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _declared_over(declared: str, cap: int) -> bool:
    """Does a Content-Length value exceed ``cap``?  False when it is not a number (ASCII
    digits only: ``"²".isdigit()`` is true, and ``int`` refuses over 4300 digits)."""
    if not (declared.isascii() and declared.isdigit()):
        return False  # read, bounded by the cap, like a request without one
    digits = declared.lstrip("0")
    return len(digits) > _MAX_LENGTH_DIGITS or int(digits or "0") > cap


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
    added = {SESSION_FIELD: session.session_id}
    if session.agent_id is not None:
        added[AGENT_FIELD] = session.agent_id
    xargs.update(added)
    parsed["vllm_xargs"] = xargs
    # Text as itself, not \u escapes (up to 6 bytes a character), and no spaces: the body
    # grows by the added fields only.
    text = _dumps(parsed)
    try:
        out = text.encode()
    except UnicodeEncodeError:  # lone surrogates: escaped, as the client sent them
        out = _SURROGATE.sub(_escaped, text).encode()
    if len(out) > len(body) + len(_dumps({"vllm_xargs": added}).encode()) + _SLACK_BYTES:
        return None  # numbers written back much longer (``1e9``): not worth the memory
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
        if _declared_over(headers.get("content-length", ""), self.max_body_bytes):
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
