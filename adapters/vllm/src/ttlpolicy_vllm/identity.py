"""Which agent program a vLLM request belongs to, read from what the client sent.

``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``) may carry ``program_id``, ``last_turn``
and ``tool``; without ``program_id`` the request's ``session_id`` names the program, and without
either the session an agent client sent in its own headers (``X-Claude-Code-Session-Id`` and
the like, carried into ``vllm_xargs`` by ``ttlpolicy_vllm.middleware.AgentHeaders``;
``ttlpolicy.agent_headers``).  A request with none is anonymous and is scheduled as stock vLLM
would (or inferred, ``TTLPOLICY_INFER_PROGRAMS``).  All of it is client input:
ids are bounded, a malformed value makes the request anonymous rather than failing it.

The program is its tenant's: the id is namespaced by the request's ``cache_salt`` (or the
field a trusted gateway sets, ``ttlpolicy.ids.Tenancy``), so a client naming another tenant's
program id names a different program.
"""

from __future__ import annotations

from typing import Any

from ttlpolicy.agent_headers import from_fields
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
    "ProgramInfo",
    "Tenancy",
    "program_of",
    "scheduler_key",
    "tenant_of",
]

#: What ttlpolicy.ProgramScheduler accepts as an id (bytes of UTF-8); longer or invalid
#: request ids are tracked under a digest (``scheduler_key``, from the library).
MAX_SCHEDULER_ID_BYTES = MAX_ID_BYTES
scheduler_key = scheduler_id


def _extra(request: Any) -> dict[str, Any]:
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    return extra if isinstance(extra, dict) else {}


def tenant_of(request: Any, tenancy: Tenancy = OPEN_TENANCY) -> str | None:
    """The tenant key of ``request`` (``Tenancy.tenant``), None for no tenant."""
    return tenancy.tenant(getattr(request, "cache_salt", None), _extra(request))


def program_of(request: Any, tenancy: Tenancy = OPEN_TENANCY) -> ProgramInfo | None:
    """The program of ``request`` (a ``vllm.v1.request.Request``), its id namespaced by the
    request's tenant; None when anonymous."""
    extra = _extra(request)
    program_id = extra.get("program_id")
    if program_id is None:
        program_id = getattr(request, "session_id", None)
    if program_id is None:
        session = from_fields(extra)
        program_id = None if session is None else session.program_id
    info = program_info(program_id, extra.get("last_turn", False), extra.get("tool"))
    return tenancy.scoped(info, tenant_of(request, tenancy))
