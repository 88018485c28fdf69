"""Continuum as its authors' public code does it (github.com/Hanchenli/vllm-continuum,
arXiv 2511.02230 v1): when a call ends in a tool call, pin its blocks for 2 s if that tool's
running mean duration is at most 2 s — a tool never seen counts as 0 s, so it is pinned;
schedule the program holding a pin (earliest program first) before the rest, then job-level
FCFS (by the program's first arrival).  A pin is kept while its program has a call waiting
and passes to that call when it is scheduled; under memory pressure a pin is given up only
when at most one call runs, the pin with the latest end time first.
"""

from __future__ import annotations

from ..call import Call
from ..interface import Verdict
from .base import QueuePolicy, ToolMeans

PIN_S = 2.0


class Continuum(QueuePolicy):
    name = "continuum"

    def __init__(self) -> None:
        super().__init__()
        self.means = ToolMeans(prior_s=0.0)
        self._waiting: dict[int, Call] = {}
        self._pins: dict[str, tuple[float, int]] = {}  # program → (end time, blocks)
        self._waiting_programs: dict[str, int] = {}  # program → calls waiting

    # -- the queue: pinned programs first, then by program arrival ------------------------
    def _rank(self, call: Call) -> tuple:
        return (call.program_id not in self._pins, call.program_arrival_s, call.issue_s,
                call.call_id)  # fmt: skip

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        self._enqueue(call)
        return False  # the pin passes over when the call is scheduled

    def requeue(self, call: Call, now: float) -> None:
        self._enqueue(call)

    def _enqueue(self, call: Call) -> None:
        self._waiting[call.call_id] = call
        pid = call.program_id
        self._waiting_programs[pid] = self._waiting_programs.get(pid, 0) + 1

    def peek(self) -> Call | None:
        return min(self._waiting.values(), key=self._rank, default=None)

    def pop(self) -> Call:
        call = self.peek()
        assert call is not None
        del self._waiting[call.call_id]
        pid = call.program_id
        self._waiting_programs[pid] -= 1
        if not self._waiting_programs[pid]:
            del self._waiting_programs[pid]
        self._pins.pop(pid, None)  # handed over: the engine already took the blocks
        return call

    def waiting(self) -> int:
        return len(self._waiting)

    # -- pins -----------------------------------------------------------------------------
    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        if last_turn or chain_blocks == 0:
            return Verdict.FREE
        if self.means.mean_s(call.turn.tool) <= PIN_S:
            self._pins[call.program_id] = (now + PIN_S, chain_blocks)
            return Verdict.PIN
        return Verdict.FREE

    def _expirable(self) -> list[tuple[float, str]]:
        """(end, program) of the pins that may expire: no call of their program waits."""
        waiting = self._waiting_programs
        return [(end, pid) for pid, (end, _) in self._pins.items() if pid not in waiting]

    def expire(self, now: float) -> list[str]:
        out = [pid for end, pid in sorted(self._expirable()) if end <= now]
        for pid in out:
            del self._pins[pid]
        return out

    def next_deadline(self) -> float | None:
        # (asked at every engine step: the earliest end, without sorting the pins)
        ends = self._expirable() if self._pins else None
        return min(ends)[0] if ends else None

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        assert self.view is not None, "bind() first"
        if self.view.running_count > 1:
            return []
        out, freed = [], 0
        for pid, (_, blocks) in sorted(self._pins.items(), key=lambda kv: -kv[1][0]):
            if freed >= blocks_needed:
                break
            del self._pins[pid]
            out.append(pid)
            freed += blocks
        return out

    def program_done(self, program_id: str, turns: int) -> None:
        self._pins.pop(program_id, None)
