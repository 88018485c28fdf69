"""Programs told from the prompt's text at the router, for calls that name none
(``TTLPOLICY_INFER_PROGRAMS=1``, or the router's ``infer_programs``).

The router sees the request body, not tokens.  Ray Serve's prefix-aware router
(``PrefixCacheAffinityRouter``) reduces a prompt or a chat's messages to one string (their text
contents, concatenated) and matches it character by character in a prefix tree per replica; the
linker (``ttlpolicy.ProgramLinker``) reads block hashes that each name the whole prefix up to
their block instead, so ``prompt_hashes`` hashes the same kind of string's prefixes at whole
chunks of ``TEXT_CHUNK_BYTES`` (``ttlpolicy.serving.inferred.PrefixHashes``).  Each message
contributes its role and its text, each closed by a control character, so an agent's next
call — its history with the answer and the tool results appended — begins with every chunk of
the previous call's string.  A prompt of token ids is hashed as the ids (int64).  At most
``MAX_HASHED_BYTES`` are hashed (the rest of a longer prompt is not read: the cost per call
stays bounded).

A router sees no call finish: ``InferredPrograms.routed`` records each call's prompt as its
program's turn end at once, so the program's next call links to it and goes to its home.
"""

from __future__ import annotations

from array import array
from typing import Any

from ttlpolicy.serving.inferred import PrefixHashes

from .identity import _field, request_body

__all__ = ["MAX_HASHED_BYTES", "TEXT_CHUNK_BYTES", "prompt_bytes", "prompt_hashes"]

#: Bytes per hashed chunk: about 64 tokens of text (``identity.CHARS_PER_TOKEN``).
TEXT_CHUNK_BYTES = 256
#: The most bytes of a prompt hashed.
MAX_HASHED_BYTES = 8 * 1024 * 1024
#: Closes a message's role and its text (ASCII unit and record separators).
ROLE_END, MESSAGE_END = "\x1f", "\x1e"
_MAX_DEPTH = 4


class _Capped:
    """Text's UTF-8 bytes (surrogates passed), collected up to ``limit`` of them: a string is
    read only as far as the limit reaches, so a prompt's length past it costs nothing."""

    __slots__ = ("left", "parts")

    def __init__(self, limit: int) -> None:
        self.parts: list[bytes] = []
        self.left = limit

    def add(self, text: str) -> None:
        if self.left <= 0:
            return
        # A character is 1 to 4 bytes, so the first ``left`` characters hold at least
        # ``left`` bytes (or are all of it); UTF-8 encodes each character on its own, so
        # the pieces' bytes, joined, are the joined text's.
        data = text[: self.left].encode("utf-8", "surrogatepass")[: self.left]
        self.parts.append(data)
        self.left -= len(data)

    @property
    def full(self) -> bool:
        return self.left <= 0


def _text(value: Any, out: _Capped, depth: int = 0) -> None:
    """The text in a message's content: a string, or the ``text`` of its parts."""
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, list | tuple) and depth < _MAX_DEPTH:
        for part in value:
            if out.full:
                return  # (the rest is past the cap: not read)
            text = _field(part, "text") if not isinstance(part, str) else part
            _text(text, out, depth + 1)


def prompt_bytes(body: Any) -> bytes:
    """The bytes of ``body``'s prompt (a string, token ids, strings) or chat ``messages``
    (role and text of each), at most ``MAX_HASHED_BYTES``: the first ``MAX_HASHED_BYTES`` of
    the whole prompt's, read no further."""
    prompt = _field(body, "prompt")
    if isinstance(prompt, list | tuple) and prompt and all(type(t) is int for t in prompt):
        try:
            return array("q", prompt[: MAX_HASHED_BYTES // 8]).tobytes()
        except OverflowError:
            return b""  # not token ids: nothing to link by
    out = _Capped(MAX_HASHED_BYTES)
    if prompt is not None:
        _text(prompt, out)
    else:
        messages = _field(body, "messages")
        for message in messages if isinstance(messages, list | tuple) else ():
            if out.full:
                break  # (the rest is past the cap: not read)
            role = _field(message, "role")
            out.add(role if isinstance(role, str) else "")
            out.add(ROLE_END)
            _text(_field(message, "content"), out)
            out.add(MESSAGE_END)
    return b"".join(out.parts)


def prompt_hashes(pending: Any) -> PrefixHashes:
    """The prefix hashes of the prompt of ``pending`` (a ``PendingRequest``: its body's
    ``prompt_bytes``) in whole chunks of ``TEXT_CHUNK_BYTES``."""
    return PrefixHashes(prompt_bytes(request_body(pending)), TEXT_CHUNK_BYTES)
