"""Tokencake (Bian et al., arXiv 2510.18586): its Time Scheduler, on vLLM.  When a call ends
in a function call, the program's KV is offloaded to the CPU if the call is predicted to last
long enough to repay the round trip over the host link, and uploaded back to the GPU ahead
of the predicted return — the upload starts one transfer time before it, so a return on time
finds its KV on the GPU; a short call keeps its KV on the GPU (pinned) until it returns.

As described (§ Time Scheduler: proactive offload, predictive upload):

* predicted duration: the function's ``predict_time``, which the paper takes from the
  application's developer; a trace carries none, so it is the tool's running mean duration
  (as Continuum's and InferCept's estimates), a cold tool the prior below;
* offload when the predicted duration is at least ``OFFLOAD_FACTOR`` times the round trip
  (2 × the chain's transfer time); otherwise the chain stays pinned, until the return or
  twice the prediction (an overdue call is then a long one: its chain goes to the LRU free
  queue and on to the CPU tier when evicted), given up under memory pressure most recently
  pinned first;
* upload at ``predicted return − transfer time``, when the GPU has room for it as vLLM's
  allocator counts it (unused blocks and cached ones, the least recently used evicted; the
  paper reserves its blocks progressively); the uploaded chain
  is pinned until the return, or twice the prediction, like a short call's;
* queue: vLLM's request FCFS.

Simplifications: the Space Scheduler (a reserved GPU pool for critical agent types, by
historical KV usage and business priority) is left out — each program of a coding-agent
trace is one agent of one type, so there is no critical agent to shield; offload writes are
free (asynchronous, as the paper's CPU block buffer makes them) and copies share no
bandwidth (each takes its own transfer time, as the engine's reloads do); a call issued
while its upload runs waits for the upload's end, not a reload of its own.
"""

from __future__ import annotations

from ..call import Call
from ..interface import Load, Verdict
from .base import PinningPolicy, ToolMeans, request_fcfs
from .uploads import UploadPlan, earliest

#: offload when the predicted call lasts at least this many round trips over the host link
OFFLOAD_FACTOR = 2.0
#: a kept or uploaded chain's pin ends at this multiple of the predicted duration
PIN_SLACK = 2.0
#: predicted duration of a tool never seen (seconds): as InferCept's prior
PRIOR_TOOL_S = 10.0


class Tokencake(PinningPolicy):
    name = "tokencake"
    uses_cpu_tier = True
    prefetches = True

    def __init__(self, prior_tool_s: float = PRIOR_TOOL_S) -> None:
        super().__init__()
        self.means = ToolMeans(prior_s=prior_tool_s)
        self.upload_plan = UploadPlan()
        self.offloads = 0
        self.uploads = 0

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        self.upload_plan.cancel(call.program_id)
        return super().arrive(call, now)

    def transfer_s(self, blocks: int) -> float:
        assert self.view is not None, "bind() first"
        return self.view.hardware.transfer_s(blocks * self.view.config.block_tokens)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        if last_turn or chain_blocks == 0:
            return Verdict.FREE
        predicted_s = self.means.mean_s(call.turn.tool)
        move_s = self.transfer_s(chain_blocks)
        if predicted_s >= OFFLOAD_FACTOR * 2.0 * move_s:
            self.offloads += 1
            start = now + predicted_s - move_s
            pin_end = now + PIN_SLACK * predicted_s
            self.upload_plan.plan(call.program_id, start, chain_blocks, pin_end)
            return Verdict.SWAP
        self.table.pin(call.program_id, now + PIN_SLACK * predicted_s, chain_blocks)
        return Verdict.PIN

    # -- uploads --------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        return earliest(self.table.next_deadline(), self.upload_plan.next_s())

    def prefetch(self, now: float, load: Load) -> None:
        assert self.view is not None, "bind() first"
        for program, blocks, pin_end in self.upload_plan.due(now):
            # room as vLLM's allocator has it: unused blocks and cached ones, LRU evicted
            if blocks <= self.view.free_blocks_for(None) and load(program):
                self.uploads += 1
                self.table.pin(program, max(pin_end, now), blocks)

    def program_done(self, program_id: str, turns: int) -> None:
        self.upload_plan.cancel(program_id)
