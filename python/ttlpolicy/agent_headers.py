"""The session ids agent clients already send, as a program: which header or body field names
a request's agent session, in what order, and how a sub-agent's id makes a program of its own.

Many clients name their session without being asked: Claude Code sends
``X-Claude-Code-Session-Id`` (and ``X-Claude-Code-Agent-Id`` for a sub-agent), Qwen Code
``X-Qwen-Code-Session-Id``, Codex and others ``session_id``, ``x-session-id`` or ``thread-id``,
OpenAI clients ``prompt_cache_key`` in the body (the families NVIDIA Dynamo's
``AgentContext.agent_headers`` captures).  ``agent_session`` reads them in that order; the first
valid value names the session.  Every value is client input: bounded, printable text, else as
if absent; a malformed sub-agent id makes the request anonymous rather than merging the
sub-agent into its parent's program.

Precedence over the other ways to name a program (the adapters apply it): the id a trusted
gateway or the client set explicitly (``program_id``, the engine's ``session_id``), then these
headers, then inference from the prompts (``TTLPOLICY_INFER_PROGRAMS``).  The program id a
session gives is still the client's, so it is namespaced by the request's tenant
(``ttlpolicy.ids.Tenancy.scoped``): the same header under another tenant names another program.

An HTTP front end (``ttlpolicy_vllm.middleware.AgentHeaders``) carries a session into the
request's extra fields under ``SESSION_FIELD`` and ``AGENT_FIELD``; ``from_fields`` reads them
back, checking them again since a client can set those fields itself.  Not a rule of the model:
no Rust twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AGENT_FIELD",
    "AGENT_HEADERS",
    "AGENT_SEPARATOR",
    "BODY_SESSION_FIELDS",
    "MAX_AGENT_ID_CHARS",
    "MAX_SESSION_ID_CHARS",
    "SESSION_FIELD",
    "SESSION_HEADERS",
    "AgentSession",
    "agent_session",
    "from_fields",
]

#: Header names (lower case, as HTTP/2 and ASGI give them) that name a client's session, in
#: the order they are taken.
SESSION_HEADERS = (
    "x-claude-code-session-id",
    "x-qwen-code-session-id",
    "session_id",
    "x-session-id",
    "thread-id",
)
#: Header names that name a sub-agent within its session.
AGENT_HEADERS = ("x-claude-code-agent-id",)
#: Body fields that name a session, taken after every header.
BODY_SESSION_FIELDS = ("prompt_cache_key",)

#: Longest session and sub-agent ids taken, in characters: together with ``AGENT_SEPARATOR``
#: within ``ttlpolicy.ids.MAX_PROGRAM_ID_CHARS`` (256).
MAX_SESSION_ID_CHARS = 128
MAX_AGENT_ID_CHARS = 96
AGENT_SEPARATOR = "/agent:"

#: The extra request fields (vLLM ``vllm_xargs``) a front end carries a session in.
SESSION_FIELD = "ttlpolicy_session"
AGENT_FIELD = "ttlpolicy_agent"


@dataclass(frozen=True, slots=True)
class AgentSession:
    """A client's session and, for a sub-agent, its agent id (both valid, bounded text)."""

    session_id: str
    agent_id: str | None = None

    @property
    def program_id(self) -> str:
        """The program: the session itself, or a sub-agent's own program
        ``<session>/agent:<agent id>`` (a fork of its parent: its first prompt begins with
        what the parent sent, later calls continue its own context)."""
        if self.agent_id is None:
            return self.session_id
        return f"{self.session_id}{AGENT_SEPARATOR}{self.agent_id}"


def _valid(value: Any, max_chars: int) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    # (isprintable is false for control characters, the library's namespaces, and for the
    # lone surrogates JSON can carry)
    if not value or len(value) > max_chars or not value.isprintable():
        return None
    return value


def _with_agent(session_id: str | None, agent: Any) -> AgentSession | None:
    if session_id is None:
        return None
    if agent is None:
        return AgentSession(session_id)
    agent_id = _valid(agent, MAX_AGENT_ID_CHARS)
    return None if agent_id is None else AgentSession(session_id, agent_id)


def _first(names: tuple[str, ...], source: Mapping[str, Any], max_chars: int) -> str | None:
    for name in names:
        found = _valid(source.get(name), max_chars)
        if found is not None:
            return found
    return None


def agent_session(headers: Mapping[str, Any], body: Any = None) -> AgentSession | None:
    """The session a request's ``headers`` (lower-case names) and JSON ``body`` name, by
    ``SESSION_HEADERS`` then ``BODY_SESSION_FIELDS``; None when none names a valid one, or
    when a sub-agent header is present but malformed.  Never raises."""
    if not isinstance(headers, Mapping):
        headers = {}
    session_id = _first(SESSION_HEADERS, headers, MAX_SESSION_ID_CHARS)
    if session_id is None and isinstance(body, Mapping):
        session_id = _first(BODY_SESSION_FIELDS, body, MAX_SESSION_ID_CHARS)
    agents = (headers[name] for name in AGENT_HEADERS if headers.get(name) is not None)
    return _with_agent(session_id, next(agents, None))


def from_fields(fields: Any) -> AgentSession | None:
    """The session a front end carried in a request's extra ``fields`` (``SESSION_FIELD``,
    ``AGENT_FIELD``), checked again as client input; None when absent or malformed."""
    if not isinstance(fields, Mapping):
        return None
    session_id = _valid(fields.get(SESSION_FIELD), MAX_SESSION_ID_CHARS)
    return _with_agent(session_id, fields.get(AGENT_FIELD))
