"""What engines read from clients: request ids as ``ProgramScheduler`` ids, and a request's
program (id, last turn, tool).

Engines take request ids from clients (vLLM's ``X-Request-Id``, SGLang's ``rid``), of any
length and content; the ``ProgramScheduler`` accepts non-empty text of at most
``MAX_ID_BYTES`` bytes of UTF-8.  ``scheduler_id`` keeps a valid id as it is and tracks any
other under a digest, so a client's id never fails a request inside the engine.  A program id,
last-turn flag and tool name arrive as JSON fields (vLLM's ``vllm_xargs``, SGLang's
``custom_params``): ``program_info`` bounds them, and a malformed id makes the request
anonymous rather than failing it.  The adapters call these; they are not rules of the model,
so they have no Rust twin.

Tenancy: a program is its tenant's alone.  ``Tenancy`` says where a request's tenant comes
from (the request's ``cache_salt`` by default, which a gateway sets per tenant; or a field the
operator declares as set by a trusted gateway) and whether client-chosen ids are taken at
all; ``Tenancy.scoped`` turns a client's program id into the id the library tracks, namespaced
by the tenant, so that no request can name, extend, end, abort, rank as or take the pin of
another tenant's program.  A client id may hold no control character, so none equals a
namespaced id (``"\x00t:..."``) or an adapter's synthetic one (``"\x00anonymous:..."``).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from ._validate import MAX_ID_BYTES, tool_key
from .reference.pins import TENANT_KEY_CHARS, TENANT_PREFIX, tenant_of
from .reference.tenants import INFERRED_PREFIX, is_inferred

__all__ = [
    "CONTINUATION_SHARE",
    "INFERRED_PREFIX",
    "MAX_ID_BYTES",
    "MAX_PROGRAM_ID_CHARS",
    "MAX_TENANT_FIELD_CHARS",
    "OPEN_TENANCY",
    "ProgramInfo",
    "Tenancy",
    "continuation_index",
    "is_inferred",
    "program_info",
    "program_key",
    "scheduler_id",
    "tenant_key",
    "tenant_of",
]

#: Longest program id taken from a request, in characters.
MAX_PROGRAM_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class ProgramInfo:
    program_id: str
    last_turn: bool
    tool: str | None  # as sent by the client; None: recover it from the output


def program_info(program_id: Any, last_turn: Any = False, tool: Any = None) -> ProgramInfo | None:
    """The program a client named, or None (anonymous) when ``program_id`` is not a non-empty
    str (or int) of at most ``MAX_PROGRAM_ID_CHARS`` valid characters.  ``last_turn`` is true
    for ``True``, ``1`` and the strings "1", "true", "yes" (any case); ``tool`` is normalised
    by the library (bounded, never raises), or None when absent or not a non-empty str."""
    if isinstance(program_id, int) and not isinstance(program_id, bool):
        program_id = str(program_id)
    if not isinstance(program_id, str) or not program_id or len(program_id) > MAX_PROGRAM_ID_CHARS:
        return None
    try:
        program_id.encode("utf-8")  # JSON can carry lone surrogates; ids must be valid text
    except UnicodeEncodeError:
        return None
    if not program_id.isprintable():  # control characters are the library's own namespaces
        return None
    return ProgramInfo(
        program_id,
        _flag(last_turn),
        tool_key(tool) if isinstance(tool, str) and tool else None,
    )


def _flag(value: Any) -> bool:
    # JSON fields: booleans and the usual spellings
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return value is True or value == 1


def scheduler_id(request_id: str) -> str:
    """``request_id`` itself when the ProgramScheduler accepts it, else ``"\\x00sha256:"`` and
    the SHA-256 of its UTF-8 (lone surrogates passed through), which no client id equals."""
    try:
        if 0 < len(request_id.encode("utf-8")) <= MAX_ID_BYTES:
            return request_id
    except UnicodeEncodeError:  # lone surrogates
        pass
    raw = request_id.encode("utf-8", "surrogatepass")
    return "\x00sha256:" + hashlib.sha256(raw).hexdigest()


#: Longest name of the trusted tenant field an operator may declare, in characters.
MAX_TENANT_FIELD_CHARS = 64
# namespaced program ids: "\x00t:<tenant key>:<client id>" (the scheduler reads the tenant
# back with ``tenant_of``, which owns the format)
_NAMESPACE = TENANT_PREFIX


def tenant_key(tenant: Any) -> str | None:
    """A tenant as a short fixed-size key: None for no tenant (None or an empty str), else the
    first 32 hex digits of the SHA-256 of its text (any other value: of its ``repr``).  Fixed
    size whatever the client sent, and no tenant's value can be read back from a program id."""
    if tenant is None or tenant == "":
        return None
    text = tenant if isinstance(tenant, str) else repr(tenant)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:TENANT_KEY_CHARS]


def program_key(tenant: str | None, program_id: str) -> str:
    """The id the library tracks for ``program_id`` of ``tenant`` (a ``tenant_key``): the id
    itself without a tenant (one shared namespace, as before tenants), else namespaced — the
    client id digested by ``scheduler_id`` should the whole exceed ``MAX_ID_BYTES``, so that
    the tenant stays readable (``tenant_of``: the pin budget is shared among tenants)."""
    if tenant is None:
        return program_id
    scoped = f"{_NAMESPACE}{tenant}:{program_id}"
    if scheduler_id(scoped) == scoped:
        return scoped
    digest = hashlib.sha256(program_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_NAMESPACE}{tenant}:\x00sha256:{digest}"


@dataclass(frozen=True, slots=True)
class Tenancy:
    """Where a request's tenant comes from and whether a client may name its program.

    ``tenant_field``: None — the request's ``cache_salt`` (vLLM and SGLang namespace their
    prefix caches by it: a gateway that sets one per tenant keeps both cache contents and
    programs apart); else the name of a request field (vLLM ``vllm_xargs``, SGLang
    ``custom_params``) that a trusted gateway sets and clients cannot (the operator's to
    ensure).  ``client_ids``: False ignores every client-chosen program id (requests are
    anonymous, scheduled as stock)."""

    tenant_field: str | None = None
    client_ids: bool = True

    def __post_init__(self) -> None:
        field = self.tenant_field
        if field is not None and not (
            isinstance(field, str) and 0 < len(field) <= MAX_TENANT_FIELD_CHARS
        ):
            raise ValueError(
                f"tenant_field must be None or a name of 1 to {MAX_TENANT_FIELD_CHARS} "
                f"characters, got {field!r}"
            )

    def tenant(self, cache_salt: Any, fields: Any) -> str | None:
        """The ``tenant_key`` of a request with ``cache_salt`` and extra ``fields`` (a dict,
        or anything else for none)."""
        if self.tenant_field is None:
            return tenant_key(cache_salt)
        return tenant_key(fields.get(self.tenant_field) if isinstance(fields, dict) else None)

    def scoped(self, info: ProgramInfo | None, tenant: str | None) -> ProgramInfo | None:
        """``info`` with its program id namespaced by ``tenant``; None (anonymous) when
        there is no program or client ids are not taken."""
        if info is None or not self.client_ids:
            return None
        return ProgramInfo(program_key(tenant, info.program_id), info.last_turn, info.tool)


#: The default: tenants from ``cache_salt``, client ids taken.
OPEN_TENANCY = Tenancy()


#: Share of a pinned turn's prompt a request naming the program must begin with to take the
#: pin (within a tenant): measured on the shipped agentic sessions, 93 % of calls begin with
#: all of the previous call's prompt and 5 % more with >= 90 % of it (a chat template
#: re-rendering the last blocks); the rest rewrote their context.
CONTINUATION_SHARE = 0.9


def continuation_index(prompt_units: int) -> int:
    """The index of the prompt unit (block, or token) a continuation must match: the last of
    the first ``CONTINUATION_SHARE`` of ``prompt_units`` (-1: no unit, nothing to match)."""
    if prompt_units <= 0:
        return -1
    # (the guard keeps 0.9 * 10 at 9 units, not 10)
    return max(0, math.ceil(prompt_units * CONTINUATION_SHARE - 1e-9) - 1)
