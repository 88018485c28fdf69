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

from ttlpolicy.ids import continuation_index


def cached_blocks(kv_cache_manager: Any, request_id: str) -> list[Any]:
    """The request's blocks that the prefix cache can serve (full, hashed), all groups."""
    out: list[Any] = []
    for group in kv_cache_manager.get_blocks(request_id).blocks:
        out.extend(b for b in group if b.block_hash is not None and not b.is_null)
    return out


def continuation_point(block_hashes: list[Any], prompt_tokens: int, block_size: int) -> Any:
    """Where a request continues a finished request's context: ``(index, hash)`` of its
    prompt's block at ``ttlpolicy.ids.continuation_index`` (block hashes are chained, so an
    equal hash there means every block before it is equal too), or None for a prompt of no
    full block."""
    index = continuation_index(min(prompt_tokens // block_size, len(block_hashes)))
    return None if index < 0 else (index, block_hashes[index])


class BlockPins:
    """References held per program, and where each pinned context continues."""

    def __init__(self, block_pool: Any) -> None:
        self._pool = block_pool
        self._held: dict[str, list[Any]] = {}
        self._points: dict[str, Any] = {}  # (index, hash) of the latest pinned turn

    def hold(self, program_id: str, blocks: list[Any], point: Any = None) -> None:
        """One more reference on each block.  A program's pins merge (as in the
        ProgramScheduler): a block held twice is referenced twice and released twice.
        ``point``: the pinned turn's ``continuation_point`` (the latest turn's is kept)."""
        if blocks:
            self._pool.touch(blocks)
            self._held.setdefault(program_id, []).extend(blocks)
            self._points[program_id] = point

    def continues(self, program_id: str, block_hashes: list[Any]) -> bool:
        """Whether a request with ``block_hashes`` may take ``program_id``'s pin: true when
        the program holds none, or the request's prompt continues the pinned context."""
        if program_id not in self._held:
            return True
        point = self._points.get(program_id)
        if point is None:
            return True
        index, block_hash = point
        return index < len(block_hashes) and block_hashes[index] == block_hash

    def release(self, program_id: str) -> int:
        self._points.pop(program_id, None)
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
