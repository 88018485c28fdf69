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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ._validate import tool_key
from .reference.scheduler import MAX_ID_BYTES

__all__ = ["MAX_ID_BYTES", "MAX_PROGRAM_ID_CHARS", "ProgramInfo", "program_info", "scheduler_id"]

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
