"""The session an agent client already sends in its headers names the SGLang request's program.

SGLang's OpenAI server reads one routing header, ``x-smg-routing-key``, into the request's
``routing_key`` (``OpenAIServingBase.extract_routing_key``, called for chat and completion
requests), which ``identity.program_of`` reads as the program after ``custom_params`` and
``session_id``.  The plug-in wraps that method (an AROUND hook): when the stock method finds
no routing key and the server runs the ``ttlpolicy`` backend, the session the client's headers
name (``X-Claude-Code-Session-Id``, ``x-claude-code-agent-id`` for a sub-agent's own program,
and the others of ``ttlpolicy.agent_headers``) is the routing key.  Client input: bounded,
printable, else ignored; the program it names is namespaced by the request's tenant like any
client id.  The body's ``prompt_cache_key`` is not read: SGLang's request models drop fields
they do not declare before this point (a gateway may send it as ``x-smg-routing-key``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ttlpolicy.agent_headers import agent_session

__all__ = ["BACKEND", "ROUTING_KEY_TARGET", "routing_key_from_session"]

#: What the plug-in wraps (SGLang 0.5.23).
ROUTING_KEY_TARGET = (
    "sglang.srt.entrypoints.openai.serving_base.OpenAIServingBase.extract_routing_key"
)
#: The radix-cache backend's name (``--radix-cache-backend ttlpolicy``).
BACKEND = "ttlpolicy"


def _backend(serving: Any) -> Any:
    server_args = getattr(getattr(serving, "tokenizer_manager", None), "server_args", None)
    return getattr(server_args, "radix_cache_backend", None)


def routing_key_from_session(
    original: Callable[..., Any], serving: Any, raw_request: Any, *args: Any, **kwargs: Any
) -> Any:
    """SGLang's routing key, else (backend ``ttlpolicy`` only) the agent session's program."""
    key = original(serving, raw_request, *args, **kwargs)
    if key is not None or raw_request is None or _backend(serving) != BACKEND:
        return key
    headers = getattr(raw_request, "headers", None)
    if headers is None:
        return None
    session = agent_session({str(k).lower(): v for k, v in headers.items()})
    return None if session is None else session.program_id
