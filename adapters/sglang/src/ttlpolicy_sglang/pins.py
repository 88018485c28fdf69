"""Holding a finished request's cached prefix so that SGLang's radix tree cannot evict it.

A pin is one lock (``TreeLock``, from the cache's own ``lock``) on the node where the request's
checkpoint ended: a locked node and its ancestors count as the tree's protected size, never as
evictable, so no eviction reaches them, and the program's next request matches them like any
prefix hit.  Releasing is the cache's ``unlock``: the nodes turn evictable again (they stay in
the tree, prefix-cacheable, until evicted).  Which programs are pinned, and until when, is
decided by ``ttlpolicy.ProgramScheduler``; this class only takes and gives back locks.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import Any

from ttlpolicy.ids import continuation_index


def continuation_point(prompt_ids: Sequence[int]) -> tuple[int, bytes] | None:
    """Where a request continues a finished request's context: the length of its prompt's
    first ``ttlpolicy.ids.CONTINUATION_SHARE`` and a digest of those tokens; None for an
    empty prompt."""
    end = continuation_index(len(prompt_ids)) + 1
    return None if end <= 0 else (end, _digest(prompt_ids[:end]))


def _digest(token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", token_ids).tobytes(), digest_size=16).digest()


class TreeLockPins:
    """Locks held per program, with the tokens on each locked path."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._held: dict[str, list[tuple[Any, int]]] = {}
        self._points: dict[str, tuple[int, bytes] | None] = {}  # latest pinned turn's

    def hold(
        self, program_id: str, node: Any, path_tokens: int, point: tuple[int, bytes] | None = None
    ) -> None:
        """Lock ``node`` for the program.  A program's pins merge (as in the ProgramScheduler):
        a second lock is kept beside the first and both are released together.  ``point``:
        the pinned turn's ``continuation_point`` (the latest turn's is kept)."""
        lock = self._cache.lock(node)
        self._held.setdefault(program_id, []).append((lock, path_tokens))
        self._points[program_id] = point

    def continues(self, program_id: str, prompt_ids: Sequence[int]) -> bool:
        """Whether a request with ``prompt_ids`` may take ``program_id``'s pin: true when the
        program holds none, or the request's prompt continues the pinned context."""
        point = self._points.get(program_id) if program_id in self._held else None
        if point is None:
            return True
        end, digest = point
        return len(prompt_ids) >= end and _digest(prompt_ids[:end]) == digest

    def release(self, program_id: str) -> int:
        """Unlock everything the program holds; returns the tokens those locks covered."""
        self._points.pop(program_id, None)
        held = self._held.pop(program_id, None)
        if not held:
            return 0
        for lock, _ in reversed(held):
            self._cache.unlock(lock)
        return sum(tokens for _, tokens in held)

    def move(self, key: str, to: TreeLockPins, to_key: str) -> int:
        """Hand the locks held under ``key`` to ``to`` under ``to_key`` (a consumed pin stays
        locked until the request that consumed it holds its own lock); returns their tokens."""
        self._points.pop(key, None)
        held = self._held.pop(key, None)
        if not held:
            return 0
        to._held.setdefault(to_key, []).extend(held)
        return sum(tokens for _, tokens in held)

    def held_tokens(self) -> int:
        """Tokens on the locked paths, summed over locks (shared prefixes count twice)."""
        return sum(tokens for held in self._held.values() for _, tokens in held)

    def programs(self) -> list[str]:
        return list(self._held)
