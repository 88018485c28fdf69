"""The pin table: which programs hold pinned KV blocks, how many, and until when.

A program holds at most one pin; a second pin while the first is held (parallel requests of
one program) merges into it: blocks add up, the later deadline wins.  Two orders matter:

* expiry — by ``(deadline_s, program_id)``: a min-heap, entries invalidated lazily;
* reclaim under memory pressure — latest-arrived program first, by the program's FCFS
  position (the order it was first seen, which follows arrival) descending.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pin:
    """``blocks`` KV blocks of ``program_id`` kept in memory until ``deadline_s``."""

    program_id: str
    blocks: int
    deadline_s: float


class PinTable:
    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._order: dict[str, int] = {}  # each pinned program's FCFS position, for reclaim
        # (deadline_s, program_id); an entry is live iff it matches the current pin.
        self._deadlines: list[tuple[float, str]] = []
        self.blocks = 0

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, program_id: str) -> Pin | None:
        return self._pins.get(program_id)

    def add(self, program_id: str, blocks: int, deadline_s: float, order: int) -> Pin:
        old = self._pins.get(program_id)
        if old is not None:
            blocks += old.blocks
            deadline_s = max(deadline_s, old.deadline_s)
            self.blocks -= old.blocks
        pin = Pin(program_id, blocks, deadline_s)
        self._pins[program_id] = pin
        self._order[program_id] = order
        self.blocks += blocks
        if old is None or deadline_s != old.deadline_s:
            heapq.heappush(self._deadlines, (deadline_s, program_id))
            self._compact()
        return pin

    def remove(self, program_id: str) -> Pin | None:
        pin = self._pins.pop(program_id, None)
        if pin is not None:
            del self._order[program_id]
            self.blocks -= pin.blocks
        return pin

    def _live_top(self) -> tuple[float, str] | None:
        """Drops stale heap entries above the earliest live deadline."""
        heap = self._deadlines
        while heap:
            deadline_s, program_id = heap[0]
            pin = self._pins.get(program_id)
            if pin is not None and pin.deadline_s == deadline_s:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _compact(self) -> None:
        # Lazy deletion must not let the heap grow without bound (bounded state).
        if len(self._deadlines) > 2 * len(self._pins) + 64:
            self._deadlines = [(p.deadline_s, pid) for pid, p in self._pins.items()]
            heapq.heapify(self._deadlines)

    def next_deadline_s(self) -> float | None:
        top = self._live_top()
        return None if top is None else top[0]

    def expire(self, now: float) -> list[Pin]:
        """Removes and returns the pins with ``deadline_s <= now``, earliest first."""
        out = []
        while (top := self._live_top()) is not None and top[0] <= now:
            heapq.heappop(self._deadlines)
            pin = self.remove(top[1])
            assert pin is not None
            out.append(pin)
        return out

    def expire_before(self, now: float) -> list[Pin]:
        """Removes and returns the pins with ``deadline_s < now`` (strictly), earliest first."""
        out = []
        while (top := self._live_top()) is not None and top[0] < now:
            heapq.heappop(self._deadlines)
            pin = self.remove(top[1])
            assert pin is not None
            out.append(pin)
        return out

    def reclaim(self, blocks_needed: int, keep_until: int | None = None) -> list[Pin]:
        """Removes pins, latest-arrived program first, until ``blocks_needed`` blocks are
        released or no pin is left — keeping, when ``keep_until`` is given, the pins of
        programs whose FCFS position is at most it."""
        order = sorted(self._pins, key=self._order.__getitem__, reverse=True)
        out: list[Pin] = []
        released = 0
        for program_id in order:
            if released >= blocks_needed:
                break
            if keep_until is not None and self._order[program_id] <= keep_until:
                break  # every pin left is of a program no younger than ``keep_until``
            pin = self.remove(program_id)
            assert pin is not None
            released += pin.blocks
            out.append(pin)
        return out

    def all(self) -> list[Pin]:
        """Every pin, in expiry order ``(deadline_s, program_id)``."""
        return sorted(self._pins.values(), key=lambda p: (p.deadline_s, p.program_id))
