"""Which program a Ray Serve request belongs to, and how big it is, read from what the router
sees of it (``PendingRequest``): the same fields the vLLM adapter reads in the engine.

In order, the first one present names the program:

1. ``vllm_xargs["program_id"]`` of the request body (``args[0]``: Ray Serve LLM's
   ``ChatCompletionRequest``/``CompletionRequest``, or a dict given to a handle call) — what
   ``ttlpolicy_vllm`` reads as ``SamplingParams.extra_args["program_id"]``, so one field
   serves both the router and the engine; ``vllm_xargs["last_turn"]`` ends the program;
2. ``RequestMetadata.session_id``: Ray's session header (``x-session-id``, renamed by
   ``RAY_SERVE_SESSION_ID_HEADER_KEY``), which Ray Serve LLM's ingress forwards to the
   model deployment's handle, or ``handle.options(session_id=...)``.

A request with neither, or with a malformed or over-long id (``ttlpolicy.ids.program_info``:
at most ``MAX_PROGRAM_ID_CHARS`` characters), is anonymous: the router routes it as a
one-call program.  All of it is client input: nothing here raises on it.

**Tenants.**  A program is (tenant, id): ``tenant_of`` names the tenant from a field of the
request the operator trusts to tell tenants apart (by default vLLM's ``cache_salt``: the
secret that already separates tenants' prefix caches, which a gateway sets or checks), and
``program_key`` makes the router's key of the pair, so another tenant naming the same id (a
``last_turn`` included) addresses a different program.  A request without the field is of
no tenant: its key is the id itself, as the replicas' reports name it.  Both are pure
functions of their arguments (no Ray), so they can move to ``ttlpolicy.ids`` when the
engines namespace their ids the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ttlpolicy.ids import MAX_PROGRAM_ID_CHARS, ProgramInfo, program_info, scheduler_id

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_TENANT_FIELD",
    "MAX_PROGRAM_ID_CHARS",
    "program_key",
    "program_of",
    "request_tokens",
    "tenant_field_of",
    "tenant_of",
]

#: The request field that names a program's tenant by default (vLLM's prefix-cache salt).
DEFAULT_TENANT_FIELD = "cache_salt"

#: Characters per token when a request carries text, not token ids (the router has no
#: tokenizer; a call's size only weighs where it fits).
CHARS_PER_TOKEN = 4


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _body(pending: Any) -> Any:
    args = getattr(pending, "args", None)
    return args[0] if isinstance(args, list | tuple) and args else None


def program_of(pending: Any) -> ProgramInfo | None:
    """The program of ``pending`` (a ``ray.serve.request_router.PendingRequest``), or None."""
    xargs = _field(_body(pending), "vllm_xargs")
    if not isinstance(xargs, Mapping):
        xargs = {}
    named = xargs.get("program_id")
    if named is None:
        named = getattr(getattr(pending, "metadata", None), "session_id", None) or None
    return program_info(named, xargs.get("last_turn", False))


def tenant_of(value: Any) -> str | None:
    """The tenant a request field's ``value`` names: None (no tenant) unless a non-empty str;
    else a digest of it (32 hex digits: a bounded key that does not repeat the secret)."""
    if not isinstance(value, str) or not value:
        return None
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def program_key(tenant: str | None, program_id: str) -> str:
    """The router's key of program ``program_id`` of ``tenant``: the id itself for no tenant
    (as engines report it), else one no other (tenant, id) pair has.  Client ids that start
    with NUL, the prefix of the router's own keys, are set apart too; a key over the
    router's id bound is kept under its digest (``ttlpolicy.ids.scheduler_id``)."""
    if tenant is not None:
        key = f"\x00tenant:{tenant}\x00{program_id}"
    elif program_id.startswith("\x00"):
        key = "\x00raw:" + program_id
    else:
        key = program_id
    return scheduler_id(key)


def tenant_field_of(pending: Any, field: str | None) -> Any:
    """The value of the request body's ``field`` (None: no field is trusted)."""
    return None if field is None else _field(_body(pending), field)


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
    body = _body(pending)
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
