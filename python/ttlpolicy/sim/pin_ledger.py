"""Pinned block-seconds that no call ever read: what a pin held in vain (issue 45 part 3).

``Metrics.pinned_block_s`` integrates the pinned blocks over time.  This KV cache also books
each pin's blocks from when they were pinned until the pin ends, and splits them when it ends:

* the program's call took the pin over at admission (``take``): its leading blocks that the
  call's prompt found (``hit``, GPU part) were read; the rest — a compaction, an edited
  history, output the next prompt does not repeat — were pinned *in vain*;
* the pin was released before any call took it (``unpin``: expired, reclaimed, given way,
  superseded, the program left) or the run ended with it: all its blocks were pinned in vain.

So ``in_vain_block_s`` is the pinned block-seconds of the blocks never hit; per program in
``in_vain_by_program``.  A prefetch (a CPU-tier run copied back and pinned) adds its blocks
deeper in the chain, from the prefetch on.  Every booked block-second is counted once:
the totals booked equal ``Metrics.pinned_block_s`` (a test checks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from .interface import Verdict
from .kv_cache import KVCache

__all__ = ["PinLedgerKV"]


class PinLedgerKV(KVCache):
    """``KVCache`` that books each pin's block-seconds as read or in vain (module doc)."""

    def __init__(
        self, capacity_blocks: int, cpu_capacity_blocks: int, clock: Callable[[], float]
    ) -> None:
        super().__init__(capacity_blocks, cpu_capacity_blocks)
        self._clock = clock
        # program -> its pin's parts, leading first: (blocks, pinned since)
        self._open: dict[str, list[tuple[int, float]]] = {}
        self._hit: dict[str, int] = {}  # program -> GPU blocks its call's last ``hit`` found
        self.booked_block_s = 0.0
        self.in_vain_block_s = 0.0
        self.in_vain_by_program: defaultdict[str, float] = defaultdict(float)

    def _opened(self, program: str, pinned_before: int) -> None:
        added = self.pinned - pinned_before
        if added > 0:
            self._open.setdefault(program, []).append((added, self._clock()))

    def _close(self, program: str, hit_blocks: int) -> None:
        parts = self._open.pop(program, None)
        if parts is None:
            return
        now = self._clock()
        in_vain = 0.0
        for blocks, since in parts:  # the leading blocks are the ones a prompt reads
            read = blocks if blocks < hit_blocks else hit_blocks
            hit_blocks -= read
            self.booked_block_s += blocks * (now - since)
            in_vain += (blocks - read) * (now - since)
        self.in_vain_block_s += in_vain
        self.in_vain_by_program[program] += in_vain

    def close_all(self) -> None:
        """The run ended: pins still held were never read again."""
        for program in list(self._open):
            self._close(program, 0)

    # -- the KV cache's moves, booked -------------------------------------------------------
    def hit(self, program: str, reusable_blocks: int, total_blocks: int) -> tuple[int, int] | None:
        got = super().hit(program, reusable_blocks, total_blocks)
        if got is not None and program in self._open:
            self._hit[program] = got[0]
        return got

    def take(self, program: str, blocks: int) -> None:
        self._close(program, self._hit.pop(program, 0))
        super().take(program, blocks)

    def release(
        self, program: str, held_blocks: int, chain_blocks: int, verdict: Verdict = Verdict.FREE
    ) -> None:
        before = self.pinned
        super().release(program, held_blocks, chain_blocks, verdict)
        self._opened(program, before)

    def prefetch(self, program: str) -> int:
        before = self.pinned
        copied = super().prefetch(program)
        self._opened(program, before)  # (a free GPU chain pinned with the copy: added too)
        return copied

    def unpin(self, program: str) -> None:
        self._hit.pop(program, None)
        self._close(program, 0)
        super().unpin(program)
