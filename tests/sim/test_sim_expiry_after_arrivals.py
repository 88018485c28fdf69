"""At a step's end the engine takes the calls issued during the step before it expires the
pins that fell due in it, as vLLM adds the requests that came during a step before it
schedules the next (where ``ttlpolicy_vllm.TTLScheduler`` expires pins): a program back
within the step that its pin's deadline fell in takes the pin over.  The simulator expired
first; in virtual time 32 of 160 requests then hit differently from vLLM's (bench/RESULTS.md,
"Simulator fidelity — reclaimed ahead of the step, held until admitted")."""

from __future__ import annotations

from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, roofline
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.policies.fixed_ttl import FixedTTL

BLOCK = 16


class Noting(FixedTTL):
    """Pins every call 10 ms; notes whether each arrival took its program's pin over."""

    def __init__(self) -> None:
        super().__init__(0.01)
        self.took: dict[tuple[str, int], bool] = {}

    def arrive(self, call: Call, now: float) -> bool:
        took = super().arrive(call, now)
        self.took[call.program_id, call.turn_index] = took
        return took


def run(gap_s: float) -> Noting:
    # ``b`` prefills 16k tokens in 2048-token steps (~70 ms each on the H100 roofline);
    # ``a``'s first call ends after its second step, pinned for 10 ms, and ``a`` is back
    # ``gap_s`` later.
    a = Program("a", (Turn(319, 2, 0, 0.0, "bash"), Turn(336, 2, 20, gap_s, None)))
    b = Program("b", (Turn(16_000, 2, 0, 0.0, None),))
    policy = Noting()
    engine = Engine(roofline("llama-3.1-8b", "h100-80g"), policy, EngineConfig(BLOCK, 2048, 8))
    engine.add_programs([(0.0, a), (0.0, b)])
    metrics = engine.run()
    engine.kv.check()
    assert metrics.programs_done == 2
    return policy


def test_a_return_within_the_step_its_pin_fell_due_in_takes_it_over() -> None:
    # deadline 10 ms, return 20 ms after the call ended: both inside ``b``'s next step
    assert run(0.02).took["a", 1] is True


def test_a_return_after_that_step_finds_the_pin_expired() -> None:
    # 300 ms: steps later, by when the step boundary past the deadline had expired it
    assert run(0.3).took["a", 1] is False
