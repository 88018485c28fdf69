"""Holding a finished request's KV blocks so that vLLM's prefix cache cannot evict them.

A pin is one extra reference on each cached block (``BlockPool.touch``): with ``ref_cnt > 0``
a block is not in the free queue, so ``get_new_blocks`` never evicts it, and the program's
next request finds it by hash like any prefix hit.  Releasing gives the references back with
``BlockPool.free_blocks`` (tail first, as vLLM frees), so the blocks join the normal free queue
and stay prefix-cacheable until evicted.  Which programs are pinned, and until when, is
decided by ``ttlpolicy.ProgramScheduler``; this class only moves references.
"""

from __future__ import annotations

from typing import Any


def cached_blocks(kv_cache_manager: Any, request_id: str) -> list[Any]:
    """The request's blocks that the prefix cache can serve (full, hashed), all groups."""
    out: list[Any] = []
    for group in kv_cache_manager.get_blocks(request_id).blocks:
        out.extend(b for b in group if b.block_hash is not None and not b.is_null)
    return out


class BlockPins:
    """References held per program."""

    def __init__(self, block_pool: Any) -> None:
        self._pool = block_pool
        self._held: dict[str, list[Any]] = {}

    def hold(self, program_id: str, blocks: list[Any]) -> None:
        """One more reference on each block.  A program's pins merge (as in the
        ProgramScheduler): a block held twice is referenced twice and released twice."""
        if blocks:
            self._pool.touch(blocks)
            self._held.setdefault(program_id, []).extend(blocks)

    def release(self, program_id: str) -> int:
        blocks = self._held.pop(program_id, None)
        if not blocks:
            return 0
        self._pool.free_blocks(reversed(blocks))
        return len(blocks)

    def blocks_of(self, program_id: str) -> int:
        return len(self._held.get(program_id, ()))

    def held_blocks(self) -> int:
        return sum(len(b) for b in self._held.values())

    def programs(self) -> list[str]:
        return list(self._held)
