"""Timed copies of programs' chains back from the CPU tier (the rivals that prefetch:
Tokencake's predictive upload, KVFlow's next-step prefetch): one planned start a program,
the latest plan replacing the earlier; the engine is woken at the earliest start through the
policy's ``next_deadline`` and the due ones are handed to its ``prefetch``."""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class UploadPlan:
    """Planned upload starts, with what the policy needs to know at each (its blocks, the
    end of the pin it gets)."""

    def __init__(self) -> None:
        # (start, seq, program); an entry whose start is not its program's live one is stale
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int, float]] = {}  # program → (start, blocks, pin end)
        self._n = 0

    def plan(self, program: str, start_s: float, blocks: int, pin_end_s: float) -> None:
        self._n += 1
        self._live[program] = (start_s, blocks, pin_end_s)
        heapq.heappush(self._heap, (start_s, self._n, program))

    def cancel(self, program: str) -> None:
        """The program is back (or gone): no upload to do any more."""
        self._live.pop(program, None)

    def _prune(self) -> None:
        heap, live = self._heap, self._live
        while heap:
            start, _, program = heap[0]
            plan = live.get(program)
            if plan is not None and plan[0] == start:
                return
            heapq.heappop(heap)

    def next_s(self) -> float | None:
        """The earliest planned start, if any."""
        self._prune()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> Iterator[tuple[str, int, float]]:
        """The uploads due by ``now`` (program, blocks, pin end), each once."""
        self._prune()
        while self._heap and self._heap[0][0] <= now:
            _, _, program = heapq.heappop(self._heap)
            _, blocks, pin_end_s = self._live.pop(program)
            yield program, blocks, pin_end_s
            self._prune()


def earliest(a: float | None, b: float | None) -> float | None:
    """The earlier of two optional instants."""
    if a is None:
        return b
    return a if b is None or a <= b else b
