"""KVFlow (Pan et al., arXiv 2507.07400), on SGLang's hierarchical radix cache (GPU + CPU
tier): cached KV is evicted by each agent's steps-to-execution in the workflow's Agent Step
Graph — the farthest from running first, ties least recently used — instead of LRU, and the
KV of the agents due in the next step is prefetched from the CPU in the background,
overlapped with the current step, so that their requests find it on the GPU.

The step graph, from the sessions: a session is one agent whose workflow is the chain
LLM call → tool → LLM call …; it has no fan-out to predict from (sub-agents arrive in the
trace as programs of their own, without their parent's step), so within one session every
waiting agent is one step from running.  Many concurrent sessions are one schedule of steps:
an agent's steps-to-execution is its rank in the order of expected next activation, the end
of its call plus its tool's mean duration so far (the edge weight of the graph; a tool never
seen has the prior below).  So:

* eviction order: a finished session first (it never runs again: infinitely many steps),
  then the latest expected activation first, ties LRU; an agent whose call is waiting in the
  queue is at step 0 and goes last;
* prefetch: an agent's chain is copied back from the CPU when its expected activation is one
  transfer time away (it is in the next step), into unused GPU blocks or those of cached
  chains farther from running (evicted for it, farthest first), and pinned until its call
  arrives (at least a second, the copy's time), then kept by its key; a pin is given up
  under memory pressure most recently pinned first;
* queue: request FCFS (SGLang's ``fcfs`` schedule policy; its default, longest prefix match,
  favours the calls that hit, which this cache decides).

Simplifications: no shared-prefix tree (a program's chain is its own: the trace's sessions
share no system prompt the simulator tracks), so node-level eviction of shared prefixes is
moot; copies share no bandwidth; a call issued while its prefetch runs waits for its end.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..call import Call
from ..interface import Load, Verdict
from .base import PinTable, QueuePolicy, ToolMeans, request_fcfs
from .uploads import UploadPlan, earliest

#: expected duration of a tool never seen (seconds)
PRIOR_TOOL_S = 10.0
#: steps-to-execution keys: a call waiting (next to run), a session that ended
NEXT, NEVER = -math.inf, math.inf


class KVFlow(QueuePolicy):
    name = "kvflow"
    uses_cpu_tier = True
    prefetches = True

    def __init__(self, prior_tool_s: float = PRIOR_TOOL_S) -> None:
        super().__init__()
        self.means = ToolMeans(prior_s=prior_tool_s)
        # program → expected next activation (s); absent: the session ended (NEVER)
        self.activation: dict[str, float] = {}
        self.table = PinTable()
        self.prefetch_plan = UploadPlan()
        self.prefetched = 0

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)

    # -- steps-to-execution ---------------------------------------------------------------
    def eviction_order(self) -> Callable[[list[str]], list[str]]:
        activation = self.activation

        def order(programs: list[str]) -> list[str]:
            # latest activation first; sorted() is stable, so ties stay least recent first
            return sorted(programs, key=lambda p: -activation.get(p, NEVER))

        return order

    def eviction_order_change_s(
        self, programs: list[str], from_s: float, until_s: float
    ) -> float | None:
        return math.inf  # the keys do not read the clock

    def arrive(self, call: Call, now: float) -> bool:
        pid = call.program_id
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        self.activation[pid] = NEXT
        self.prefetch_plan.cancel(pid)
        super().arrive(call, now)
        return self.table.take(pid)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        pid = call.program_id
        if last_turn:
            self.activation.pop(pid, None)
            return Verdict.FREE
        expected = now + self.means.mean_s(call.turn.tool)
        self.activation[pid] = expected
        if chain_blocks:
            assert self.view is not None, "bind() first"
            move_s = self.view.hardware.transfer_s(chain_blocks * self.view.config.block_tokens)
            # pinned through the copy (at least a second); then its key keeps it
            self.prefetch_plan.plan(pid, expected - move_s, chain_blocks, expected + move_s)
        return Verdict.FREE

    def program_done(self, program_id: str, turns: int) -> None:
        self.activation.pop(program_id, None)
        self.prefetch_plan.cancel(program_id)
        self.table.take(program_id)

    # -- prefetch and its pins ------------------------------------------------------------
    def next_deadline(self) -> float | None:
        return earliest(self.table.next_deadline(), self.prefetch_plan.next_s())

    def prefetch(self, now: float, load: Load) -> None:
        for program, blocks, pin_end in self.prefetch_plan.due(now):
            if blocks <= self._room_for(program) and load(program):
                self.prefetched += 1
                self.table.pin(program, max(pin_end, now + 1.0), blocks)

    def _room_for(self, program: str) -> int:
        """GPU blocks a prefetch of ``program`` may take: unused ones, and the cached chains
        farther from running than it (the eviction takes those first)."""
        assert self.view is not None, "bind() first"
        activation = self.activation
        key = activation.get(program, NEVER)
        farther = sum(blocks for p, blocks in self.view.cached_chains().items()
                      if p != program and activation.get(p, NEVER) > key)  # fmt: skip
        return self.view.unused_blocks + farther

    def expire(self, now: float) -> list[str]:
        return self.table.expire(now)

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        return self.table.reclaim(blocks_needed)
