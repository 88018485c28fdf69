"""vLLM's free-block queue put in the library's eviction order (latest next use first).

vLLM's prefix cache evicts from the head of its free-block queue: blocks without a hash
first, then cached blocks in the order they were freed (LRU).  ``NextUseOrder`` remembers the
cached blocks of each program's latest finished turn and, when asked, moves those still free
and still holding that turn's hash to the tail of the queue, in the order
``ttlpolicy.AdmissionControl.eviction_order`` gives (the program to evict first nearest the
head, each program's tail block before its head block, as vLLM frees them).  Everything else
— empty blocks, anonymous requests' and ended programs' cached blocks — stays ahead of them
and goes first, as the library orders unknown programs first.  Which program goes first is
the library's rule; this class only moves blocks.
"""

from __future__ import annotations

from typing import Any


class NextUseOrder:
    def __init__(self, block_pool: Any) -> None:
        self._pool = block_pool
        # program -> (block, its hash when the turn finished), prefix order
        self._blocks: dict[str, list[tuple[Any, Any]]] = {}

    def note(self, program_id: str, blocks: list[Any]) -> None:
        """The program's latest finished turn left ``blocks`` cached (replaces the last)."""
        if blocks:
            self._blocks[program_id] = [(b, b.block_hash) for b in blocks]
        else:
            self._blocks.pop(program_id, None)

    def forget(self, program_id: str) -> None:
        self._blocks.pop(program_id, None)

    def programs(self) -> list[str]:
        return list(self._blocks)

    def reorder(self, order: list[str]) -> int:
        """Move the free blocks of the programs in ``order`` (first to evict first) to the
        tail of the free queue; returns how many moved.  Blocks evicted or reused since are
        skipped, and a program with none left is forgotten."""
        queue = self._pool.free_block_queue
        # Collected last-to-go first, so that a block shared by several programs (a common
        # prefix) is placed for the one that needs it longest; reversed at the end.
        taken: list[Any] = []
        for pid in reversed(order):
            kept = [(b, h) for b, h in self._blocks.get(pid, ()) if b.block_hash == h]
            if not kept:  # every block evicted (and maybe reused) since
                self._blocks.pop(pid, None)
                continue
            self._blocks[pid] = kept
            for block, _ in kept:
                # free (ref_cnt 0, linked in the queue) and not taken already
                if block.ref_cnt == 0 and block.prev_free_block is not None:
                    queue.remove(block)
                    taken.append(block)
        taken.reverse()
        queue.append_n(taken)
        return len(taken)
