"""The simulator's ttlpolicy takes the library's skip past a head too large for memory
(``ttlpolicy.serving.skip_ahead``) as the adapters do: on by default with a reload tier
(``ttlpolicy-offload``), off without one, ``skip=K`` to set it; pins give way for the
library's head, not the call skipped to."""

from __future__ import annotations

from typing import Any

import pytest

from sim_hardware import hw_blocks
from ttlpolicy import PolicyConfig
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, make_policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)


def program(name: str, prompt_blocks: int, output_tokens: int) -> Program:
    return Program(name, (Turn(prompt_blocks * 64, output_tokens, 0, 0.0, None),))


# a holds 150 of the 200 blocks for 400 decode steps; b and b2 (100 blocks) cannot join it;
# c (10 blocks) can.  Load control off (``:admission``): it would hold b back as a program.
A, B, B2, C = (program("a", 150, 400), program("b", 100, 20), program("b2", 100, 20),
               program("c", 10, 20))  # fmt: skip


def finish_s(name: str, arrivals: list[tuple[float, Program]]) -> tuple[dict[str, float], int]:
    policy = make_policy(name)
    engine = Engine(hw_blocks(200, 64, 300), policy, CFG)
    engine.add_programs(arrivals)
    return engine.run().program_finish_s, policy.skips  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "skips"),
    [("ttlpolicy-offload:admission", True), ("ttlpolicy-offload:admission+skip=0", False),
     ("ttlpolicy:admission", False), ("ttlpolicy:admission+skip=2", True)],
)  # fmt: skip
def test_a_call_that_fits_passes_a_head_that_does_not(name: str, skips: bool) -> None:
    done, n = finish_s(name, [(0.0, A), (0.5, B), (0.6, C)])
    assert done["b"] >= done["a"]  # b waits for a's blocks either way
    if skips:
        assert done["c"] < done["a"] and n == 1  # c ran beside a
    else:
        assert done["c"] > done["a"] and n == 0  # vLLM's order: c waits for b, b for a


def test_the_skip_looks_no_further_than_its_depth() -> None:
    arrivals = [(0.0, A), (0.5, B), (0.55, B2), (0.6, C)]
    done, n = finish_s("ttlpolicy-offload:admission+skip=1", arrivals)
    assert done["c"] > done["a"] and n == 0  # (c is the 2nd behind b)
    done, n = finish_s("ttlpolicy-offload:admission+skip=2", arrivals)
    assert done["c"] < done["a"] and n == 1


def test_a_head_load_control_refuses_is_not_passed() -> None:
    # (load control holds b, the oldest waiting program, back while a runs: FCFS, nobody
    # younger passes it, skip or not)
    arrivals = [(0.0, A), (0.5, B), (0.6, C)]
    on, n = finish_s("ttlpolicy-offload", arrivals)
    assert on == finish_s("ttlpolicy-offload:skip=0", arrivals)[0] and n == 0


@pytest.mark.parametrize(
    ("name", "says"),
    [("ttlpolicy-offload:skip=x", "skip depth must be an integer, got 'x'"),
     ("ttlpolicy-offload:skip=65", r"skip depth must be an integer in \[0, 64\], got 65"),
     ("ttlpolicy-offload:skip=-1", "skip depth must be an integer, got '-1'"),
     ("ttlpolicy:skip=1+skip=2", "skip=1 and skip=2 clash")],
)  # fmt: skip
def test_a_bad_skip_word_is_refused_naming_it(name: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make_policy(name)


class GiveWaySpy:
    """The lifecycle, recording the program of the call each ``give_way`` keeps, and when."""

    def __init__(self, policy: TTLPolicyPlugin) -> None:
        self._policy, self._life = policy, policy.life
        self.kept: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._life, name)

    def give_way(
        self, now: float, short: int, release: Any, stalled: bool = False, keep: str | None = None
    ) -> None:
        if keep is not None:
            self.kept.append((self._policy._calls[keep].program_id, now))
        self._life.give_way(now, short, release, stalled=stalled, keep=keep)


def test_pins_give_way_for_the_librarys_head_not_the_call_skipped_to() -> None:
    # (p's first call, 20 blocks, ends at once and its chain is pinned through its 30 s tool
    # (a prefill priced high enough to pin); b and c arrive together while a runs, b first:
    # b heads the queue and lacks blocks, c fits.  Before the step that admits c the
    # lifecycle is asked to make room for b, as TTLScheduler asks for vLLM's head, not for
    # c, which would ask for nothing)
    p = Program("p", (Turn(20 * 64, 1, 0, 0.0, "bash"), Turn(21 * 64, 1, 20, 30.0, None)))
    policy = TTLPolicyPlugin(config=PolicyConfig(prefill_s_per_token=0.01), skip_depth=2)
    engine = Engine(hw_blocks(200, 64, 300), policy, CFG)
    spy = GiveWaySpy(policy)
    engine.add_programs([(0.0, p), (0.01, A), (0.5, B), (0.5, C)])
    policy.life = spy  # (bound with the engine: the spy wraps it)
    m = engine.run()
    assert policy.skips == 1 and m.summary()["pinned_block_s"] > 0
    assert {program for program, _ in spy.kept} == {"b"}
    assert spy.kept[0][1] <= m.program_start_s["c"]
