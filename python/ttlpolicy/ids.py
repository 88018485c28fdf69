"""Engine request ids as ``ProgramScheduler`` ids.

Engines take request ids from clients (vLLM's ``X-Request-Id``, SGLang's ``rid``), of any
length and content; the ``ProgramScheduler`` accepts non-empty text of at most
``MAX_ID_BYTES`` bytes of UTF-8.  ``scheduler_id`` keeps a valid id as it is and tracks any
other under a digest, so a client's id never fails a request inside the engine.  The adapters
call this; it is not a rule of the model, so it has no Rust twin.
"""

from __future__ import annotations

import hashlib

from .reference.scheduler import MAX_ID_BYTES

__all__ = ["MAX_ID_BYTES", "scheduler_id"]


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
