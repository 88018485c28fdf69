"""Pins released ahead of a step: a policy with ``reclaims_ahead`` is asked before each step
(pins held, a call waiting) to ``give_way(step_blocks, now, unpin)``, with the blocks the
running calls' next step takes, and unpins what it chooses before that step allocates — as
``ttlpolicy_vllm.TTLScheduler`` reclaims before vLLM schedules.  Without the hook a pin is
released only when the step or the head's admission runs short, after the running calls
took their blocks: a decode's new block then came from a free chain the policy's eviction
order would keep, not from the pin about to go (in virtual time, 33 of 160 requests of
``fidelity_logic.py``'s default workload hit differently; bench/RESULTS.md, "Simulator
fidelity — reclaimed ahead of the step, held until admitted")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Unpin
from ttlpolicy.sim.policies.fixed_ttl import FixedTTL
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin

BLOCK = 16
#: ``p``'s pinned chain goes before ``d``'s free one (``d`` returns at once, ``p`` in 100 s);
#: ended programs' chains go first
RANK = {"p": 1, "d": 2}


class PinP(FixedTTL):
    """Pins ``p``'s first call only, evicts in ``RANK``'s order; notes each call's hit."""

    def __init__(self) -> None:
        super().__init__(100.0)
        self.hits: dict[tuple[str, int], int] = {}

    def ttl_s(self, call: Call, now: float, chain_blocks: int) -> float:
        return self.fixed_s if call.program_id == "p" else 0.0

    def eviction_order(self) -> Callable[[list[str]], list[str]]:
        return lambda programs: sorted(programs, key=lambda program: RANK.get(program, 0))

    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        self.hits[call.program_id, call.turn_index] = call.computed


P = TypeVar("P", bound=PinP)


class PinPAhead(PinP):
    """``PinP`` with the hook: the adapter's rule, on its pin table."""

    reclaims_ahead = True

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        self.asked.append(step_blocks)
        head = self.peek()
        need = step_blocks + (-(-head.prompt // BLOCK) if head is not None else 0)
        assert self.view is not None
        short = need - self.view.free_blocks_for(head.program_id if head is not None else None)
        for program in self.table.reclaim(short) if short > 0 else []:
            unpin(program)


def run(policy: P) -> P:
    # 62 blocks.  At 0: ``p`` (20 blocks), ``d`` (10) and ``r`` (32, decoding) fill them;
    # ``h`` (15) waits for a sequence slot.  After two steps ``p`` ends pinned, ``d`` ends
    # with its chain free and returns at once (behind ``h``), and ``r``'s third token needs
    # a 33rd block: nothing is free but ``d``'s chain, 10 blocks, while ``h`` needs 15.
    p = Program("p", (Turn(319, 2, 0, 0.0, "bash"), Turn(336, 2, 20, 100.0, None)))
    d = Program("d", (Turn(159, 2, 0, 0.0, "bash"), Turn(176, 2, 10, 0.0, None)))
    r = Program("r", (Turn(511, 10, 0, 0.0, None),))
    h = Program("h", (Turn(239, 2, 0, 0.0, None),))
    engine = Engine(hw_blocks(62), policy, EngineConfig(BLOCK, 2048, max_seqs=3))
    engine.add_programs([(0.0, p), (0.0, d), (0.0, r), (0.0, h)])
    metrics = engine.run()
    engine.kv.check()
    assert metrics.programs_done == 4
    return policy


def test_without_the_hook_the_step_takes_a_block_of_the_chain_kept() -> None:
    # ``r``'s block comes from ``d``'s chain (``p``'s is still pinned); ``h``'s admission
    # then reclaims ``p``'s pin.  ``d``'s return finds 9 of its 10 blocks.
    policy = run(PinP())
    assert policy.hits["d", 1] == 9 * BLOCK


def test_with_the_hook_the_pin_goes_before_the_step_allocates() -> None:
    # Asked before the third step (``r`` needs 1 block, ``h`` 15, 10 are free to them): 6
    # short, ``p``'s pin is released, and ``r`` and ``h`` take ``p``'s blocks, first in the
    # order.  ``d``'s return finds all 10.
    policy = run(PinPAhead())
    assert policy.asked[0] == 1
    assert policy.hits["d", 1] == 10 * BLOCK
    assert policy.hits["h", 0] == 0


def test_the_library_plugin_reclaims_ahead_as_the_adapter_and_the_paper_at_admission() -> None:
    from ttlpolicy.sim.policies import make_policy

    assert TTLPolicyPlugin.reclaims_ahead is True
    assert TTLPolicyPlugin.give_way is not FixedTTL.give_way  # (FixedTTL's is the no-op)
    for name in ("ttlpolicy", "ttlpolicy:exact", "ttlpolicy-offload"):
        assert getattr(make_policy(name), "reclaims_ahead", False) is True, name
    for name in ("cachettl", "static-ttl", "program-fcfs", "continuum", "vllm", "infercept"):
        assert getattr(make_policy(name), "reclaims_ahead", False) is False, name
