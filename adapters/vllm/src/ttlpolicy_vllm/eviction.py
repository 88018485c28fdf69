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

The table is bounded: at most ``MAX_ORDERED_PROGRAMS`` programs, those whose latest turn
finished last; noting one more forgets the one noted longest ago, whose blocks stay where
vLLM's LRU put them (ahead of the ordered ones: they go first, as stock).  The adapter asks
the library for the order of these programs only when it may have changed (a request
arrived or finished, a pin went, the library's ``next_order_change_s`` passed, or once a
second), so a step costs about the same with 100 programs known or 20,000
(``bench/vllm_many_programs.py``; bench/RESULTS.md, "Load control under many programs").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

#: Programs whose free cached blocks are kept in next-use order (the rest: LRU, as stock).
MAX_ORDERED_PROGRAMS = 256


class NextUseOrder:
    def __init__(self, block_pool: Any, max_programs: int = MAX_ORDERED_PROGRAMS) -> None:
        self._pool = block_pool
        self.max_programs = max_programs
        # program -> (block, its hash when the turn finished), prefix order; the program
        # noted longest ago first
        self._blocks: OrderedDict[str, list[tuple[Any, Any]]] = OrderedDict()

    def note(self, program_id: str, blocks: list[Any]) -> None:
        """The program's latest finished turn left ``blocks`` cached (replaces the last)."""
        self._blocks.pop(program_id, None)
        if blocks:
            self._blocks[program_id] = [(b, b.block_hash) for b in blocks]
            while len(self._blocks) > self.max_programs:
                self._blocks.popitem(last=False)  # its blocks stay in LRU order, as stock

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
