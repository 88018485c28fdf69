"""Which agent program an SGLang request belongs to, read from what the client sent.

In order, the first one present names the program:

1. ``sampling_params.custom_params["program_id"]`` (HTTP: ``"custom_params"`` in the sampling
   parameters), which may also carry ``"tool"`` (the tool this turn ends by calling) and
   ``"last_turn"`` (the program's final request);
2. ``session_id`` (SGLang's session field);
3. ``routing_key`` (what a router already keys sessions on);
4. ``extra_key`` (note: SGLang also namespaces the prefix cache by it, so requests with
   different extra keys never share cached prefixes).

A request with none of them is anonymous and is scheduled as stock SGLang would.  All of it
is client input: ids are bounded, a malformed value makes the request anonymous rather than
failing it, and a tool name is normalised by ``ttlpolicy`` (bounded, never raises).

The program is its tenant's: the id is namespaced by the request's ``cache_salt`` (or the
field a trusted gateway sets in ``custom_params``, ``ttlpolicy.ids.Tenancy``), so a client
naming another tenant's program id names a different program.
"""

from __future__ import annotations

from typing import Any

from ttlpolicy.ids import (
    MAX_ID_BYTES,
    MAX_PROGRAM_ID_CHARS,
    OPEN_TENANCY,
    ProgramInfo,
    Tenancy,
    program_info,
    scheduler_id,
)

__all__ = [
    "MAX_PROGRAM_ID_CHARS",
    "MAX_SCHEDULER_ID_BYTES",
    "PROGRAM_FIELDS",
    "ProgramInfo",
    "Tenancy",
    "program_of",
    "request_key",
    "tenant_of",
]

#: Longest id the ProgramScheduler accepts, in bytes of UTF-8.
MAX_SCHEDULER_ID_BYTES = MAX_ID_BYTES
#: Request fields that may name the program, after ``custom_params["program_id"]``.
PROGRAM_FIELDS = ("session_id", "routing_key", "extra_key")


def request_key(rid: Any) -> str:
    """The id under which the ProgramScheduler tracks an SGLang request.  SGLang takes ``rid``
    from clients, of any length; ids the ProgramScheduler would refuse (empty, over 1024
    bytes, lone surrogates, not a str) are tracked under a digest instead."""
    return scheduler_id(rid if isinstance(rid, str) else repr(rid))


def _custom_params(req: Any) -> dict[str, Any]:
    params = getattr(getattr(req, "sampling_params", None), "custom_params", None)
    return params if isinstance(params, dict) else {}


def tenant_of(req: Any, tenancy: Tenancy = OPEN_TENANCY) -> str | None:
    """The tenant key of ``req`` (``Tenancy.tenant``), None for no tenant."""
    return tenancy.tenant(getattr(req, "cache_salt", None), _custom_params(req))


def program_of(req: Any, tenancy: Tenancy = OPEN_TENANCY) -> ProgramInfo | None:
    """The program of ``req`` (an ``sglang.srt.managers.schedule_batch.Req``), its id
    namespaced by the request's tenant; None when anonymous."""
    params = _custom_params(req)
    # The first field present decides; a malformed one makes the request anonymous.
    named = params.get("program_id")
    for field in PROGRAM_FIELDS:
        if named is not None:
            break
        named = getattr(req, field, None)
    info = program_info(named, params.get("last_turn", False), params.get("tool"))
    return tenancy.scoped(info, tenant_of(req, tenancy))
