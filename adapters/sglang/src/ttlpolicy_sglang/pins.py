"""Holding a finished request's cached prefix so that SGLang's radix tree cannot evict it.

A pin is one lock (``TreeLock``, from the cache's own ``lock``) on the node where the request's
checkpoint ended: a locked node and its ancestors count as the tree's protected size, never as
evictable, so no eviction reaches them, and the program's next request matches them like any
prefix hit.  Releasing is the cache's ``unlock``: the nodes turn evictable again (they stay in
the tree, prefix-cacheable, until evicted).  Which programs are pinned, and until when, is
decided by ``ttlpolicy.ProgramScheduler``; this class only takes and gives back locks.
"""

from __future__ import annotations

from typing import Any


class TreeLockPins:
    """Locks held per program, with the tokens on each locked path."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._held: dict[str, list[tuple[Any, int]]] = {}

    def hold(self, program_id: str, node: Any, path_tokens: int) -> None:
        """Lock ``node`` for the program.  A program's pins merge (as in the ProgramScheduler):
        a second lock is kept beside the first and both are released together."""
        lock = self._cache.lock(node)
        self._held.setdefault(program_id, []).append((lock, path_tokens))

    def release(self, program_id: str) -> int:
        """Unlock everything the program holds; returns the tokens those locks covered."""
        held = self._held.pop(program_id, None)
        if not held:
            return 0
        for lock, _ in reversed(held):
            self._cache.unlock(lock)
        return sum(tokens for _, tokens in held)

    def move(self, key: str, to: TreeLockPins, to_key: str) -> int:
        """Hand the locks held under ``key`` to ``to`` under ``to_key`` (a consumed pin stays
        locked until the request that consumed it holds its own lock); returns their tokens."""
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
