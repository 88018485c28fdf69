"""Which program a Ray Serve request belongs to, and how big it is, read from what the router
sees of it (``PendingRequest``): the same fields the vLLM adapter reads in the engine.

In order, the first one present names the program:

1. ``vllm_xargs["program_id"]`` of the request body (``args[0]``: Ray Serve LLM's
   ``ChatCompletionRequest``/``CompletionRequest``, or a dict given to a handle call) — what
   ``ttlpolicy_vllm`` reads as ``SamplingParams.extra_args["program_id"]``, so one field
   serves both the router and the engine; ``vllm_xargs["last_turn"]`` ends the program;
2. ``RequestMetadata.session_id``: Ray's session header (``x-session-id``, renamed by
   ``RAY_SERVE_SESSION_ID_HEADER_KEY``), which Ray Serve LLM's ingress forwards to the
   model deployment's handle, or ``handle.options(session_id=...)``;
3. the session an agent client sends in its own headers (``X-Claude-Code-Session-Id``,
   ``x-claude-code-agent-id`` for a sub-agent's own program, and the others of
   ``ttlpolicy.agent_headers``) or in the body's ``prompt_cache_key``: Ray Serve LLM's ingress
   passes the HTTP request's headers to the model deployment's handle as its second argument
   (``RawRequestInfo.headers``), which the router sees (``args[1]``).

A request with none of them, or with a malformed or over-long id (``ttlpolicy.ids.program_info``:
at most ``MAX_PROGRAM_ID_CHARS`` characters), is anonymous: the router routes it as a
one-call program (or, with ``TTLPOLICY_INFER_PROGRAMS=1``, is linked to a program from its
prompt's text: ``inference.py``).  All of it is client input: nothing here raises on it.

**Tenants.**  A program is (tenant, id), keyed as the engines key it (``ttlpolicy.ids``):
``tenant_of_request`` reads the request's tenant (by default vLLM's ``cache_salt``: the
secret that already keeps tenants' prefix caches apart, which a gateway sets per tenant; or a
``vllm_xargs`` field the operator declares as set by a trusted gateway), and
``program_key`` makes the router's key of the pair — the one the replicas' reports name the
program by — so another tenant naming the same id (a ``last_turn`` included) addresses a
different program.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ttlpolicy.agent_headers import (
    AGENT_FIELD,
    SESSION_FIELD,
    AgentSession,
    agent_session,
    from_fields,
)
from ttlpolicy.ids import (
    MAX_PROGRAM_ID_CHARS,
    MAX_TENANT_FIELD_CHARS,
    ProgramInfo,
    Tenancy,
    program_info,
    program_key,
    tenant_key,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "MAX_PROGRAM_ID_CHARS",
    "MAX_TENANT_FIELD_CHARS",
    "Tenancy",
    "carry_session",
    "client_session",
    "program_key",
    "program_of",
    "request_body",
    "request_tokens",
    "tenant_key",
    "tenant_of_request",
]


#: Characters per token when a request carries text, not token ids (the router has no
#: tokenizer; a call's size only weighs where it fits).
CHARS_PER_TOKEN = 4


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def request_body(pending: Any) -> Any:
    """The request's body: its first argument (None when it has none)."""
    args = getattr(pending, "args", None)
    return args[0] if isinstance(args, list | tuple) and args else None


def client_session(pending: Any) -> AgentSession | None:
    """The session an agent client named in its headers (``args[1].headers``, Ray Serve LLM's
    ``RawRequestInfo``) or the body's ``prompt_cache_key``; None when none is valid."""
    args = getattr(pending, "args", None)
    raw = args[1] if isinstance(args, list | tuple) and len(args) > 1 else None
    headers = getattr(raw, "headers", None)
    lower = {str(k).lower(): v for k, v in headers.items()} if isinstance(headers, Mapping) else {}
    return agent_session(
        lower, {"prompt_cache_key": _field(request_body(pending), "prompt_cache_key")}
    )


def program_of(pending: Any) -> ProgramInfo | None:
    """The program of ``pending`` (a ``ray.serve.request_router.PendingRequest``), or None."""
    xargs = _field(request_body(pending), "vllm_xargs")
    if not isinstance(xargs, Mapping):
        xargs = {}
    named = xargs.get("program_id")
    if named is None:
        named = getattr(getattr(pending, "metadata", None), "session_id", None) or None
    if named is None:
        session = client_session(pending)
        named = None if session is None else session.program_id
    return program_info(named, xargs.get("last_turn", False))


def carry_session(pending: Any, program_id: str) -> bool:
    """Carry the session that named ``pending``'s program ``program_id`` at the router (Ray's
    ``x-session-id``, or an agent client's headers) into its body's ``vllm_xargs`` fields
    ``ttlpolicy_session``/``ttlpolicy_agent``, which the vLLM adapter reads after
    ``program_id`` (as its HTTP middleware carries them): headers reach the router, not the
    engine, so the engine then names (and pins) the same program.  Nothing is changed when
    the body names its program or session itself, has no ``vllm_xargs`` to set, or the
    engine would read another program from the fields (``from_fields``: it refuses a session
    id over ``MAX_SESSION_ID_CHARS``); returns whether it carried."""
    body = request_body(pending)
    xargs = _field(body, "vllm_xargs")
    if body is None or not isinstance(xargs, dict | None):
        return False
    if xargs and any(name in xargs for name in ("program_id", SESSION_FIELD, AGENT_FIELD)):
        return False
    session = client_session(pending)
    if session is None or session.program_id != program_id:
        session = AgentSession(program_id)  # (Ray's session id)
    fields = {SESSION_FIELD: session.session_id}
    if session.agent_id is not None:
        fields[AGENT_FIELD] = session.agent_id
    read = from_fields(fields)
    if read is None or read.program_id != program_id:
        return False
    try:
        if isinstance(body, dict):
            body["vllm_xargs"] = {**(xargs or {}), **fields}
        else:
            body.vllm_xargs = {**(xargs or {}), **fields}
    except (AttributeError, TypeError, ValueError):  # a frozen or validating model
        return False
    return True


def tenant_of_request(pending: Any, tenancy: Tenancy) -> str | None:
    """The tenant key of ``pending`` (``ttlpolicy.ids.Tenancy.tenant``): from the body's
    ``cache_salt``, or the ``vllm_xargs`` field the operator's gateway sets."""
    body = request_body(pending)
    xargs = _field(body, "vllm_xargs")
    return tenancy.tenant(_field(body, "cache_salt"), xargs if isinstance(xargs, Mapping) else None)


def _text_chars(value: Any, depth: int = 0) -> int:
    """Characters of text in a prompt or a list of chat messages (bounded recursion)."""
    if isinstance(value, str):
        return len(value)
    if depth > 4:
        return 0
    if isinstance(value, Mapping):
        return _text_chars(value.get("content"), depth + 1)
    if isinstance(value, list | tuple):
        return sum(_text_chars(v, depth + 1) for v in value)
    content = getattr(value, "content", None)
    return _text_chars(content, depth + 1) if content is not None else 0


def request_tokens(pending: Any) -> tuple[int, int]:
    """(prompt tokens, output tokens at most) of ``pending``: the prompt's token ids when it
    carries them (``prompt`` as a list of ints), else its characters / ``CHARS_PER_TOKEN``;
    the output cap from ``max_completion_tokens`` or ``max_tokens`` (0 when absent)."""
    body = request_body(pending)
    prompt = _field(body, "prompt")
    if isinstance(prompt, list | tuple) and prompt and all(type(t) is int for t in prompt):
        tokens = len(prompt)
    else:
        chars = _text_chars(prompt) if prompt is not None else _text_chars(_field(body, "messages"))
        tokens = -(-chars // CHARS_PER_TOKEN)
    out = 0
    for name in ("max_completion_tokens", "max_tokens"):
        cap = _field(body, name)
        if type(cap) is int and cap > 0:
            out = cap
            break
    return tokens, out
