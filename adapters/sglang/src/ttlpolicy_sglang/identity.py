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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ttlpolicy._validate import tool_key
from ttlpolicy.ids import MAX_ID_BYTES, scheduler_id

#: Longest program id taken from a request, in characters.
MAX_PROGRAM_ID_CHARS = 256
#: Longest id the ProgramScheduler accepts, in bytes of UTF-8.
MAX_SCHEDULER_ID_BYTES = MAX_ID_BYTES
#: Request fields that may name the program, after ``custom_params["program_id"]``.
PROGRAM_FIELDS = ("session_id", "routing_key", "extra_key")


@dataclass(frozen=True, slots=True)
class ProgramInfo:
    program_id: str
    last_turn: bool
    tool: str | None  # as sent by the client; None: recover it from the output


def request_key(rid: Any) -> str:
    """The id under which the ProgramScheduler tracks an SGLang request.  SGLang takes ``rid``
    from clients, of any length; ids the ProgramScheduler would refuse (empty, over 1024
    bytes, lone surrogates, not a str) are tracked under a digest instead."""
    return scheduler_id(rid if isinstance(rid, str) else repr(rid))


def _as_id(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_PROGRAM_ID_CHARS:
        return None
    try:
        value.encode("utf-8")  # JSON can carry lone surrogates; ids must be valid text
    except UnicodeEncodeError:
        return None
    return value


def _flag(value: Any) -> bool:
    # custom_params arrive as JSON: booleans and the usual spellings
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return value is True or value == 1


def program_of(req: Any) -> ProgramInfo | None:
    """The program of ``req`` (an ``sglang.srt.managers.schedule_batch.Req``), None when
    anonymous."""
    params = getattr(getattr(req, "sampling_params", None), "custom_params", None)
    if not isinstance(params, dict):
        params = {}
    # The first field present decides; a malformed one makes the request anonymous.
    named = params.get("program_id")
    for field in PROGRAM_FIELDS:
        if named is not None:
            break
        named = getattr(req, field, None)
    program_id = _as_id(named)
    if program_id is None:
        return None
    tool = params.get("tool")
    tool = tool_key(tool) if isinstance(tool, str) and tool else None
    return ProgramInfo(program_id, _flag(params.get("last_turn", False)), tool)
