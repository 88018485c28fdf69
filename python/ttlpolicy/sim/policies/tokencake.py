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

import heapq

from ..call import Call
from ..interface import Load, Verdict
from .base import PinningPolicy, ToolMeans, request_fcfs

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
        # (upload start, seq, program) and the live upload of each program: (start, chain
        # blocks, pin end); an entry of the heap whose start is not the live one is stale
        self._uploads: list[tuple[float, int, str]] = []
        self._upload_of: dict[str, tuple[float, int, float]] = {}
        self._n = 0
        self.offloads = 0
        self.uploads = 0

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        self._upload_of.pop(call.program_id, None)  # back: no upload to do any more
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
            self._upload_of[call.program_id] = (start, chain_blocks, now + PIN_SLACK * predicted_s)
            self._n += 1
            heapq.heappush(self._uploads, (start, self._n, call.program_id))
            return Verdict.SWAP
        self.table.pin(call.program_id, now + PIN_SLACK * predicted_s, chain_blocks)
        return Verdict.PIN

    # -- uploads --------------------------------------------------------------------------
    def _prune(self) -> None:
        heap = self._uploads
        while heap:
            start, _, program = heap[0]
            live = self._upload_of.get(program)
            if live is not None and live[0] == start:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        d = self.table.next_deadline()
        if self._uploads:
            self._prune()
            if self._uploads and (d is None or self._uploads[0][0] < d):
                return self._uploads[0][0]
        return d

    def prefetch(self, now: float, load: Load) -> None:
        assert self.view is not None, "bind() first"
        self._prune()
        while self._uploads and self._uploads[0][0] <= now:
            _, _, program = heapq.heappop(self._uploads)
            _, blocks, pin_end = self._upload_of.pop(program)
            # room as vLLM's allocator has it: unused blocks and cached ones, LRU evicted
            if blocks <= self.view.free_blocks_for(None):
                loaded = load(program)
                if loaded:
                    self.uploads += 1
                    self.table.pin(program, max(pin_end, now), blocks)
            self._prune()

    def program_done(self, program_id: str, turns: int) -> None:
        self._upload_of.pop(program_id, None)
