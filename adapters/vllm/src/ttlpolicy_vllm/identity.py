"""Which agent program a vLLM request belongs to, read from what the client sent.

``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``) may carry ``program_id``, ``last_turn``
and ``tool``; without ``program_id`` the request's ``session_id`` names the program.  A request
with neither is anonymous and is scheduled as stock vLLM would.  All of it is client input:
ids are bounded, a malformed value makes the request anonymous rather than failing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ttlpolicy._validate import tool_key
from ttlpolicy.ids import MAX_ID_BYTES, scheduler_id

MAX_PROGRAM_ID_CHARS = 256
#: What ttlpolicy.ProgramScheduler accepts as an id (bytes of UTF-8); longer or invalid
#: request ids are tracked under a digest (``scheduler_key``, from the library).
MAX_SCHEDULER_ID_BYTES = MAX_ID_BYTES
scheduler_key = scheduler_id


@dataclass(frozen=True, slots=True)
class ProgramInfo:
    program_id: str
    last_turn: bool
    tool: str | None  # as sent by the client; None: recover it from the output


def _truthy(value: Any) -> bool:
    # vllm_xargs values arrive as JSON: accept booleans and the usual spellings
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return value is True or value == 1


def program_of(request: Any) -> ProgramInfo | None:
    """The program of ``request`` (a ``vllm.v1.request.Request``), or None when anonymous."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    if not isinstance(extra, dict):
        extra = {}
    program_id = extra.get("program_id")
    if program_id is None:
        program_id = getattr(request, "session_id", None)
    if isinstance(program_id, int) and not isinstance(program_id, bool):
        program_id = str(program_id)
    if not isinstance(program_id, str) or not program_id or len(program_id) > MAX_PROGRAM_ID_CHARS:
        return None
    try:
        program_id.encode("utf-8")  # JSON can carry lone surrogates; ids must be valid text
    except UnicodeEncodeError:
        return None
    tool = extra.get("tool")
    tool = tool_key(tool) if isinstance(tool, str) and tool else None
    return ProgramInfo(program_id, _truthy(extra.get("last_turn", False)), tool)
