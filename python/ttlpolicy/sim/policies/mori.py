"""MORI (Xia et al., "Idleness is Relative", arXiv 2606.00866; the group of Continuum): a
program's idleness is the share of its time spent waiting on tools, a continuous score; the
active programs are ranked by it, the busiest keep their KV in GPU HBM and the most idle go
to CPU DRAM, the boundary between the two is wherever the GPU's capacity falls (it moves as
the running batch grows and shrinks), and admission is controlled at each tier.

As built here, on Continuum's scheduler (program-level FCFS, a resident program's call
first, its pin passed to the call when it is scheduled):

* idleness = tool time / (tool time + LLM time) over the program's life so far: tool time
  the gaps between its calls, plus the current tool's time so far; LLM time from each call's
  admission to its end; a program with no history has the mean idleness of the others;
* placement, at each call's end: the program and every GPU-resident program are ranked by
  idleness; the busiest are kept on the GPU (pinned) while their chains fit in the GPU
  tier's share — the capacity less the running calls' blocks and the prompts of the calls
  waiting to be admitted; the finishing program outside it is offloaded (``SWAP``), a
  resident one demoted (its pin ends: its chain goes to the free queue, and to the CPU tier
  when evicted);
* the boundary moves with the capacity: when a step or an admission is short of blocks, the
  most idle resident programs are demoted until it fits;
* admission per tier: on the GPU, the resident programs' calls first (they hit), then the
  rest by program arrival; for the CPU tier, a new program is admitted only while the KV of
  the active programs (their last chains) and its prompt fit in GPU + CPU capacity.

Simplifications: the paper's exact score window and rebalancing period are not in the
abstract or summaries read (the paper text was not available here): the score is the
whole-life share and placement happens at call ends and under pressure; a demoted chain
stays on the GPU until evicted (the engine's tier takes evicted blocks for free) rather than
being copied out at once; copies share no bandwidth.
"""

from __future__ import annotations

from ..call import Call
from ..interface import Verdict
from .continuum import Continuum


class Mori(Continuum):
    """Continuum's queue (its waiting calls, ``requeue``, ``waiting``) with MORI's tiers:
    ``resident`` replaces Continuum's 2 s pins."""

    name = "mori"
    uses_cpu_tier = True
    #: the CPU tier's admission control (off: ``mori:no-admission``, an ablation)
    tier_admission = True

    def __init__(self) -> None:
        super().__init__()
        self.resident: dict[str, int] = {}  # program → chain blocks pinned on the GPU
        self._demote: list[str] = []  # resident programs to demote at the next expire
        self._tool_s: dict[str, float] = {}
        self._llm_s: dict[str, float] = {}
        self._tool_since: dict[str, float] = {}  # program in a tool → since when
        self._footprint: dict[str, int] = {}  # active program → blocks of its last context
        self._footprint_sum = 0
        self.offloads = 0
        self.demotions = 0

    # -- idleness -------------------------------------------------------------------------
    def _share(self, program: str, now: float) -> float | None:
        tool = self._tool_s.get(program, 0.0)
        since = self._tool_since.get(program)
        if since is not None:
            tool += now - since
        total = tool + self._llm_s.get(program, 0.0)
        return tool / total if total > 0.0 else None

    def idleness(self, program: str, now: float) -> float:
        """The share of the program's time spent waiting on tools, till ``now`` (no history
        yet: the mean of the programs that have one)."""
        share = self._share(program, now)
        if share is not None:
            return share
        known = [x for p in self._llm_s if (x := self._share(p, now)) is not None]
        return sum(known) / len(known) if known else 0.0

    def gpu_share_blocks(self) -> int:
        """The GPU tier's room for resident chains: the capacity less the running calls'
        blocks and the waiting calls' prompts (those of resident programs count as their
        pins already)."""
        view = self.view
        assert view is not None, "bind() first"
        b = view.config.block_tokens
        capacity = view.hardware.kv_capacity_blocks(b)
        waiting = sum(-(-c.prompt // b) for c in self._waiting.values()
                      if c.program_id not in self.resident)  # fmt: skip
        return capacity - view.running_blocks() - waiting

    # -- the queue: resident programs first, then by program arrival ----------------------
    def _rank(self, call: Call) -> tuple:
        return (call.program_id not in self.resident, call.program_arrival_s, call.issue_s,
                call.call_id)  # fmt: skip

    def _cpu_tier_admits(self, call: Call) -> bool:
        """A new program is admitted while the active programs' KV and its prompt fit in the
        two tiers (a returning call always is: its KV is counted already)."""
        if not self.tier_admission or call.turn_index or call.program_id in self._footprint:
            return True
        view = self.view
        assert view is not None, "bind() first"
        b = view.config.block_tokens
        hw = view.hardware
        room = hw.kv_capacity_blocks(b) + (hw.cpu_capacity_blocks(b) if view.cpu_tier else 0)
        return not self._footprint or self._footprint_sum + -(-call.prompt // b) <= room

    def arrive(self, call: Call, now: float) -> bool:
        pid = call.program_id
        since = self._tool_since.pop(pid, None)
        if since is not None:
            self._tool_s[pid] = self._tool_s.get(pid, 0.0) + now - since
        self._enqueue(call)
        return False  # a resident program's pin passes to its call when it is scheduled

    def peek(self) -> Call | None:
        ready = [c for c in self._waiting.values() if self._cpu_tier_admits(c)]
        return min(ready, key=self._rank, default=None)

    def pop(self) -> Call:
        call = super().pop()  # (the call ``peek`` names)
        pid = call.program_id
        self.resident.pop(pid, None)  # handed over: the engine takes the blocks
        self._set_footprint(pid, -(-call.prompt // self._block_tokens()))
        return call

    def _block_tokens(self) -> int:
        assert self.view is not None, "bind() first"
        return self.view.config.block_tokens

    def _set_footprint(self, program: str, blocks: int) -> None:
        self._footprint_sum += blocks - self._footprint.get(program, 0)
        self._footprint[program] = blocks

    # -- placement ------------------------------------------------------------------------
    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        pid = call.program_id
        if call.admit_s is not None:
            self._llm_s[pid] = self._llm_s.get(pid, 0.0) + now - call.admit_s
        if last_turn or chain_blocks == 0:
            return Verdict.FREE
        self._tool_since[pid] = now
        self._set_footprint(pid, chain_blocks)
        ranked = sorted([*self.resident, pid], key=lambda p: (self.idleness(p, now), p))
        room = self.gpu_share_blocks()
        keep: set[str] = set()
        for program in ranked:
            blocks = chain_blocks if program == pid else self.resident[program]
            if blocks <= room:
                keep.add(program)
                room -= blocks
            else:
                room = -1  # the boundary: every more idle program goes to the CPU
        for program in list(self.resident):
            if program not in keep and program not in self._waiting_programs:
                self._demote.append(program)
        if pid in keep:
            self.resident[pid] = chain_blocks
            return Verdict.PIN
        self.offloads += 1
        return Verdict.SWAP

    def expire(self, now: float) -> list[str]:
        out = [p for p in self._demote if self.resident.pop(p, None) is not None]
        self._demote.clear()
        self.demotions += len(out)
        return out

    def next_deadline(self) -> float | None:
        assert self.view is not None, "bind() first"
        return self.view.now if self._demote else None

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        """The boundary moves: the most idle resident programs are demoted until
        ``blocks_needed`` are free (never the asker's own; those whose call waits last)."""
        out, freed = [], 0
        waiting = self._waiting_programs
        order = sorted(self.resident, key=lambda p: (p in waiting, -self.idleness(p, now), p))
        for program in order:
            if freed >= blocks_needed:
                break
            if program == for_program:
                continue
            freed += self.resident.pop(program)
            out.append(program)
        self.demotions += len(out)
        return out

    def program_done(self, program_id: str, turns: int) -> None:
        self.resident.pop(program_id, None)
        self._tool_since.pop(program_id, None)
        self._tool_s.pop(program_id, None)
        self._llm_s.pop(program_id, None)
        self._set_footprint(program_id, 0)
        del self._footprint[program_id]
