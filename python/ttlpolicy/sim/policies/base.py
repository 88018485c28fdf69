"""The plumbing simulated policies share (the interface itself is ``sim.interface``): a
waiting queue ordered by a key, the pin table of the baselines that pin, per-tool mean
durations.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from ..call import Call
from ..interface import EngineView, Policy, PolicyHooks, Verdict


def prompt_fits(view: EngineView, call: Call) -> bool:
    """Whether ``call``'s whole prompt fits in memory now, as the engine admits a call
    (``scheduler_reserve_full_isl``): free blocks, free cached ones it may evict, and its
    program's own pinned chain."""
    return -(-call.prompt // view.config.block_tokens) <= view.free_blocks_for(call.program_id)


def step_shortfall(
    policy: Policy, view: EngineView, step_blocks: int, total_blocks: int
) -> tuple[int, Call | None]:
    """Blocks the running calls' next step (``step_blocks``) and the head of ``policy``'s
    queue — its whole prompt, at most the engine's ``total_blocks``; nothing while it waits
    for admission — lack beside the blocks free to them (the head's own pinned chain counts
    as free to it), and that head: what a policy that gives way ahead of a step
    (``reclaims_ahead``) measures, as ``TTLScheduler`` does before vLLM schedules."""
    need, program = step_blocks, None
    head = policy.peek()
    if head is not None:
        blocks = -(-head.prompt // view.config.block_tokens)
        need += blocks if blocks < total_blocks else total_blocks
        program = head.program_id
    return need - view.free_blocks_for(program), head


def request_fcfs(call: Call) -> tuple[float]:
    """vLLM's order: calls by issue time, whatever their program."""
    return (call.issue_s,)


class QueuePolicy(PolicyHooks):
    """A policy whose waiting queue is ordered by ``key`` (smallest first, ties by arrival)
    and whose event hooks do nothing: a finished call's blocks are freed, nothing is pinned.
    Subclasses say the order and override the hooks they need."""

    name: str

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._seq = itertools.count()
        self.view: EngineView | None = None

    def bind(self, view: EngineView) -> None:
        """Called once by the engine before the run: hardware, memory and clock views."""
        self.view = view

    # -- the waiting queue ----------------------------------------------------------------
    def key(self, call: Call) -> tuple:
        raise NotImplementedError(f"{type(self).__name__} must say its queue order (key)")

    def arrive(self, call: Call, now: float) -> bool:
        heapq.heappush(self._heap, (*self.key(call), next(self._seq), call))
        return False

    def requeue(self, call: Call, now: float) -> None:
        heapq.heappush(self._heap, (*self.key(call), next(self._seq), call))

    def peek(self) -> Call | None:
        return self._heap[0][-1] if self._heap else None

    def pop(self) -> Call:
        return heapq.heappop(self._heap)[-1]

    def waiting(self) -> int:
        return len(self._heap)

    # -- events ---------------------------------------------------------------------------
    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        pass

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        return Verdict.FREE

    def expire(self, now: float) -> list[str]:
        return []

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        return []

    def next_deadline(self) -> float | None:
        return None

    def program_done(self, program_id: str, turns: int) -> None:
        pass


@dataclass
class PinTable:
    """Pins of the baselines that pin (fixed TTL, Continuum as published, InferCept's
    preserve): program → (deadline, blocks).  A pin ends at its deadline, when its program
    returns, or under memory pressure, most recently pinned first."""

    pins: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    _deadlines: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)

    def pin(self, program: str, until: float, blocks: int) -> None:
        n = next(self._seq)
        self.pins[program] = (until, blocks, n)
        heapq.heappush(self._deadlines, (until, n, program))

    def take(self, program: str) -> bool:
        return self.pins.pop(program, None) is not None

    def _prune(self) -> None:
        while self._deadlines:
            _until, n, program = self._deadlines[0]
            cur = self.pins.get(program)
            if cur is not None and cur[2] == n:
                return
            heapq.heappop(self._deadlines)

    def expire(self, now: float) -> list[str]:
        out = []
        self._prune()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, program = heapq.heappop(self._deadlines)
            del self.pins[program]
            out.append(program)
            self._prune()
        return out

    @staticmethod
    def reclaim_key(pin: tuple[float, int, int]) -> tuple:
        """The order pins are given up in, by (deadline, blocks, pin number): most recently
        pinned first."""
        return (-pin[2],)

    def reclaim(self, blocks_needed: int) -> list[str]:
        out, freed = [], 0
        key = self.reclaim_key
        for program, (_, blocks, _) in sorted(self.pins.items(), key=lambda kv: key(kv[1])):
            if freed >= blocks_needed:
                break
            del self.pins[program]
            out.append(program)
            freed += blocks
        return out

    def next_deadline(self) -> float | None:
        if not self._deadlines:
            return None  # (asked at every engine step: no pin is the common case)
        self._prune()
        return self._deadlines[0][0] if self._deadlines else None


class PinningPolicy(QueuePolicy):
    """A baseline that pins: subclasses say for how long (``ttl_s``); a returning call takes
    its program's pin over."""

    def __init__(self) -> None:
        super().__init__()
        self.table = PinTable()

    def ttl_s(self, call: Call, now: float, chain_blocks: int) -> float:
        raise NotImplementedError

    def arrive(self, call: Call, now: float) -> bool:
        super().arrive(call, now)
        return self.table.take(call.program_id)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        if last_turn or chain_blocks == 0:
            return Verdict.FREE
        ttl = self.ttl_s(call, now, chain_blocks)
        if ttl > 0.0:
            self.table.pin(call.program_id, now + ttl, chain_blocks)
            return Verdict.PIN
        return Verdict.FREE

    def expire(self, now: float) -> list[str]:
        return self.table.expire(now)

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        return self.table.reclaim(blocks_needed)

    def next_deadline(self) -> float | None:
        return self.table.next_deadline()


class ToolMeans:
    """Running mean duration per tool (Continuum's and InferCept's duration estimate)."""

    def __init__(self, prior_s: float) -> None:
        self.prior_s = prior_s
        self._sum: dict[str | None, float] = {}
        self._n: dict[str | None, int] = {}

    def observe(self, tool: str | None, duration_s: float) -> None:
        self._sum[tool] = self._sum.get(tool, 0.0) + duration_s
        self._n[tool] = self._n.get(tool, 0) + 1

    def mean_s(self, tool: str | None) -> float:
        n = self._n.get(tool, 0)
        return self._sum[tool] / n if n else self.prior_s
