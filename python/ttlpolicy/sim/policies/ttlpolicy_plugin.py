"""ttlpolicy: the full CacheTTL model, driven through the library — ``ttlpolicy.TTLPolicy``
decides each pin's TTL, ``ttlpolicy.ProgramScheduler`` orders the waiting queue, keeps the
pin table, expires and reclaims pins.  No rule of theirs is restated here: this module only
translates engine events into their calls and their answers into engine actions.
"""

from __future__ import annotations

import ttlpolicy as tp

from ..call import Call
from ..interface import EngineView, Verdict


class TTLPolicyPlugin:
    """Implements ``sim.interface.Policy`` on ``ttlpolicy.ProgramScheduler``."""

    name = "ttlpolicy"
    uses_cpu_tier = False
    # set by ``bind``, before the engine calls anything else
    view: EngineView
    ttl_policy: tp.TTLPolicy
    sched: tp.ProgramScheduler

    def __init__(
        self, config: tp.PolicyConfig | None = None, pin_budget_fraction: float = 0.5
    ) -> None:
        if not 0.0 <= pin_budget_fraction <= 1.0:
            raise ValueError(f"pin_budget_fraction must be in [0, 1], got {pin_budget_fraction!r}")
        self.config = config
        self.pin_budget_fraction = pin_budget_fraction
        self._calls: dict[str, Call] = {}

    def bind(self, view: EngineView) -> None:
        self.view = view
        total = self._total_blocks(view)
        hw = view.hardware
        cfg = self.config or tp.PolicyConfig(kv_bytes_per_token=hw.kv_bytes_per_token)
        self.ttl_policy = tp.TTLPolicy(cfg)
        self._total = total
        self.sched = tp.ProgramScheduler(
            self.ttl_policy,
            total_blocks=total,
            pin_budget_blocks=int(total * self.pin_budget_fraction),
        )

    @staticmethod
    def _total_blocks(view: EngineView) -> int:
        return view.hardware.kv_capacity_blocks(view.config.block_tokens)

    # -- queue ----------------------------------------------------------------------------
    def arrive(self, call: Call, now: float) -> bool:
        b = self.view.config.block_tokens
        rid = str(call.call_id)
        self._calls[rid] = call
        return (
            self.sched.arrive(rid, call.program_id, now, min(-(-call.prompt // b), self._total))
            is not None
        )

    def requeue(self, call: Call, now: float) -> None:
        self.sched.preempt(str(call.call_id), now)

    def peek(self) -> Call | None:
        rid = self.sched.peek()
        return None if rid is None else self._calls[rid]

    def pop(self) -> Call:
        return self._calls[self.sched.pop(self.view.now)]

    def waiting(self) -> int:
        return self.sched.waiting_count

    # -- events ---------------------------------------------------------------------------
    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        pass  # the scheduler learns of admission through ``pop``

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        rid = str(call.call_id)
        del self._calls[rid]
        tokens = chain_blocks * self.view.config.block_tokens
        done = self.sched.finish(
            rid,
            now,
            chain_blocks,
            tool=call.turn.tool,
            last_turn=last_turn,
            cache_miss_cost_s=self.miss_cost_s(tokens),
        )
        return Verdict.PIN if done.pinned else Verdict.FREE

    def miss_cost_s(self, tokens: int) -> float:
        """What losing ``tokens`` of cached prefix costs on this engine: recomputing them."""
        return self.view.prefill_s(tokens)

    def expire(self, now: float) -> list[str]:
        return [pin.program_id for pin in self.sched.expire(now)]

    def reclaim(self, blocks_needed: int, now: float) -> list[str]:
        return [pin.program_id for pin in self.sched.reclaim(blocks_needed, now)]

    def next_deadline(self) -> float | None:
        return self.sched.next_deadline_s

    def program_done(self, program_id: str, turns: int) -> None:
        pass  # the scheduler forgets a program when its last call finishes (``last_turn``)


class TTLPolicyOffload(TTLPolicyPlugin):
    """ttlpolicy on an engine with a CPU tier (as ``vllm-offload``): blocks evicted from the
    GPU stay reloadable, so a dropped cache costs its reload time when that is cheaper than
    recomputing it — the miss cost the policy weighs against holding the blocks."""

    name = "ttlpolicy-offload"
    uses_cpu_tier = True

    def miss_cost_s(self, tokens: int) -> float:
        return min(self.view.prefill_s(tokens), self.view.hardware.transfer_s(tokens))
