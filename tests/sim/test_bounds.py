"""The bound policies are tested for what makes them bounds (issue 34): ``alone`` finishes
every program no later than any policy does, program by program; ``clairvoyant`` never
misses a return it kept a pin for, and each of its rules does what its docstring says."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.sim import EngineConfig, roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Verdict
from ttlpolicy.sim.policies import NAMES, make_policy
from ttlpolicy.sim.policies.clairvoyant import Clairvoyant
from ttlpolicy.sim.workload import (
    Program,
    Turn,
    poisson_arrivals,
    programs_from_trace,
    swe_agent_programs,
)
from ttlpolicy.traces import sample_dir

CFG = EngineConfig(block_tokens=64, token_budget=2048, max_seqs=64)
#: every policy the simulator has, but the bound itself
OTHERS = [n.replace("<s>", "5") for n in NAMES if n != "alone"]


def small_hw(blocks: int):
    """The 8B model on an H100 with a KV room of ``blocks`` 64-token blocks (and a CPU tier
    for the policies that use one): memory pressure on small programs."""
    base = roofline("llama-3.1-8b", "h100-80g")
    return type(base)(base.model, base.gpu, base.steps, blocks * 64 * base.kv_bytes_per_token, 1e12)


def jcts(m) -> dict[str, float]:
    return {p: m.program_finish_s[p] - m.program_start_s[p] for p in m.program_finish_s}


def assert_alone_first(alone: dict[str, float], other: dict[str, float], policy: str) -> None:
    assert alone.keys() == other.keys()
    for program, alone_s in alone.items():
        # (completion times are differences of instants up to ~1e5 s: a few ulps of those)
        assert alone_s <= other[program] + 1e-9 * max(1.0, other[program]), (policy, program)


#: small random workloads: programs, their seed, the arrival seed and rate, the KV room
WORKLOADS = dict(
    n=st.integers(2, 10),
    workload_seed=st.integers(0, 10_000),
    arrival_seed=st.integers(0, 3),
    rate_per_s=st.sampled_from([0.05, 0.5, 5.0]),
    blocks=st.sampled_from([800, 1500, 4000]),
)


def fitting(n: int, workload_seed: int, blocks: int) -> list[Program]:
    """``n`` synthetic SWE-agent programs, less those whose context exceeds half the room."""
    programs = swe_agent_programs(n, seed=workload_seed)
    return [p for p in programs if max(t.input_tokens for t in p.turns) < blocks * 64 // 2]


@given(**WORKLOADS, policy=st.sampled_from(OTHERS))
def test_alone_is_never_slower_than_any_policy_program_by_program(
    n: int, workload_seed: int, arrival_seed: int, rate_per_s: float, blocks: int, policy: str
) -> None:
    programs = fitting(n, workload_seed, blocks)
    if not programs:
        return
    hw = small_hw(blocks)

    def run(name: str):
        return simulate(hw, name, programs, rate_per_s=rate_per_s, seed=arrival_seed, config=CFG)

    assert_alone_first(jcts(run("alone")), jcts(run(policy)), policy)


def test_alone_runs_each_program_as_if_it_were_the_only_one() -> None:
    """``alone`` on n programs is each program simulated by itself (the definition), the
    starts those of the arrival process, and nothing waits for memory or is preempted."""
    programs = swe_agent_programs(4, seed=11)
    hw = small_hw(1500)
    m = simulate(hw, "alone", programs, rate_per_s=1.0, seed=2, config=CFG)
    for prog in programs:
        lone = simulate(hw, "vllm", [prog], rate_per_s=1.0, seed=0, config=CFG)
        assert jcts(m)[prog.program_id] == pytest.approx(jcts(lone)[prog.program_id], rel=1e-12)
    # the arrival process's instants (a shared engine starts a program at the step boundary
    # after it, when its arrival is handled)
    starts = {p.program_id: t for t, p in poisson_arrivals(programs, 1.0, seed=2)}
    assert m.program_start_s == starts
    assert m.preemptions == 0 and not m.return_waits_lost_s
    assert m.programs_done == len(programs)
    # the runs' counters add up (``Metrics.absorb``)
    assert m.calls_done == sum(len(p.turns) for p in programs)
    assert m.output_tokens == sum(t.output_tokens for p in programs for t in p.turns)
    assert len(m.first_waits_s) == len(programs) and max(m.first_waits_s) == 0.0


@pytest.mark.parametrize("rate_per_s", [0.01, 0.2])
def test_alone_bounds_every_policy_on_the_shipped_sessions(rate_per_s: float) -> None:
    programs = programs_from_trace(
        sample_dir(), max_context=120_000, think_cap_s=300.0, human_turns="drop"
    )
    hw = roofline("llama-3.1-8b", "h100-80g")
    alone = jcts(simulate(hw, "alone", programs, rate_per_s=rate_per_s, seed=1))
    contended = False
    for policy in ("vllm", "continuum", "cachettl", "ttlpolicy", "clairvoyant"):
        other = jcts(simulate(hw, policy, programs, rate_per_s=rate_per_s, seed=1))
        assert_alone_first(alone, other, policy)
        contended |= sum(other.values()) > 1.05 * sum(alone.values())
    assert contended or rate_per_s < 0.1  # the fast rate does contend (else this proves little)


class Watched(Clairvoyant):
    """The clairvoyant policy, recording each return that took its pin over and whether that
    call then found its prefix whole."""

    def __init__(self) -> None:
        super().__init__()
        self.pinned_returns: set[int] = set()
        self.missed_pinned: list[int] = []
        self.expired: list[str] = []

    def arrive(self, call: Call, now: float) -> bool:
        taken = super().arrive(call, now)
        if taken:
            self.pinned_returns.add(call.call_id)
        return taken

    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        if call.call_id in self.pinned_returns and not call.preempted and cache_dropped:
            self.missed_pinned.append(call.call_id)

    def expire(self, now: float) -> list[str]:
        out = super().expire(now)
        self.expired.extend(out)
        return out


@given(**WORKLOADS)
def test_clairvoyant_never_misses_a_return_it_pinned_for(
    n: int, workload_seed: int, arrival_seed: int, rate_per_s: float, blocks: int
) -> None:
    programs = fitting(n, workload_seed, blocks)
    policy = Watched()
    m = simulate(small_hw(blocks), policy, programs, rate_per_s=rate_per_s, seed=arrival_seed,
                 config=CFG)  # fmt: skip
    assert m.programs_done == len(programs)
    assert policy.missed_pinned == []
    # a pin lasts exactly till its return: none runs out, each is taken over or given up
    assert policy.expired == []
    assert policy.pins_made == policy.pins_taken + policy.pins_reclaimed


def test_clairvoyant_gives_up_the_furthest_return_first_under_pressure() -> None:
    """Memory for about two contexts, three programs away at once: the pins given up are
    those whose programs come back last, and the nearest return keeps its context."""
    turns = lambda think_s: (  # noqa: E731
        Turn(64 * 300, 4, 0, 0.0, "t"),
        Turn(64 * 310, 4, 300, think_s, None),
    )
    programs = [
        Program("near", turns(5.0)),
        Program("mid", turns(30.0)),
        Program("far", turns(60.0)),
    ]
    programs.append(Program("late", (Turn(64 * 350, 4, 0, 0.0, None),)))
    hw = small_hw(1000)
    policy = Watched()
    engine_run = [
        (0.0, programs[0]),
        (0.001, programs[1]),
        (0.002, programs[2]),
        (1.0, programs[3]),
    ]
    from ttlpolicy.sim.engine import Engine

    engine = Engine(hw, policy, CFG)
    engine.add_programs(engine_run)
    m = engine.run()
    assert m.programs_done == 4
    assert policy.pins_reclaimed >= 1  # the newcomer needed memory: pressure bit
    assert policy.missed_pinned == []
    # the near program returned to its whole context; the far one lost it
    assert len(m.return_waits_kept_s) >= 1 and len(m.return_waits_lost_s) >= 1


def test_clairvoyant_eviction_is_furthest_next_use_first() -> None:
    policy = Clairvoyant()
    policy._next_use_s.update({"a": 10.0, "b": 50.0, "c": 20.0})
    order = policy.eviction_order()
    assert order is not None
    assert order(["a", "b", "c", "gone"]) == ["gone", "b", "c", "a"]
    assert policy.eviction_order_change_s(["a", "b"], 0.0, 100.0) == math.inf


def test_clairvoyant_pins_until_the_return_exactly_and_not_when_nothing_is_reused() -> None:
    hw = small_hw(2000)
    assert isinstance(make_policy("clairvoyant"), Clairvoyant)
    prog = Program(
        "p",
        (
            Turn(640, 4, 0, 0.0, "a"),
            Turn(700, 4, 10, 7.5, "b"),  # reuses: pinned for 7.5 s
            Turn(900, 4, 0, 3.0, None),  # reuses nothing: not pinned
        ),
    )
    seen: list[tuple[float, Verdict, float | None]] = []

    class Spy(Clairvoyant):
        def finished(self, call, now, chain_blocks, last_turn):
            verdict = super().finished(call, now, chain_blocks, last_turn)
            seen.append((now, verdict, self.table.next_deadline()))
            return verdict

    simulate(hw, Spy(), [prog], rate_per_s=1.0, config=CFG)
    (t0, v0, d0), (_, v1, d1), (_, v2, _) = seen
    assert v0 is Verdict.PIN and d0 == t0 + 7.5
    assert v1 is Verdict.FREE and d1 is None
    assert v2 is Verdict.FREE


def test_clairvoyant_admits_by_real_footprint() -> None:
    """A newcomer whose largest call would not fit beside a live program waits for it; one
    that fits starts at once."""
    hw = small_hw(1000)
    wide = EngineConfig(block_tokens=64, token_budget=65_536, max_seqs=64)  # budget not binding
    big = Program("big", (Turn(64 * 600, 200, 0, 0.0, None),))
    grows = Program("grows", (Turn(64 * 50, 4, 0, 0.0, "t"), Turn(64 * 500, 4, 50, 0.1, None)))
    small = Program("small", (Turn(64 * 50, 4, 0, 0.0, None),))
    m = simulate(hw, "clairvoyant", [big, grows], open_loop=True, config=wide)
    # "grows" arrives with "big" running: its peak (500 blocks) does not fit beside 600+
    assert m.first_waits_s[1] > 0.0
    m = simulate(hw, "clairvoyant", [big, small], open_loop=True, config=wide)
    assert m.first_waits_s[1] == 0.0


def test_clairvoyant_variants_switch_one_mechanism_off() -> None:
    hw = small_hw(1000)
    wide = EngineConfig(block_tokens=64, token_budget=65_536, max_seqs=64)
    big = Program("big", (Turn(64 * 600, 200, 0, 0.0, None),))
    grows = Program("grows", (Turn(64 * 50, 4, 0, 0.0, "t"), Turn(64 * 500, 4, 50, 0.1, None)))
    m = simulate(hw, "clairvoyant:admission", [big, grows], open_loop=True, config=wide)
    assert m.first_waits_s[1] == 0.0  # no admission control: it starts beside "big"
    no_pins = make_policy("clairvoyant:pins")
    assert isinstance(no_pins, Clairvoyant)
    simulate(small_hw(1500), no_pins, fitting(6, 5, 1500), rate_per_s=0.5, config=CFG)
    assert no_pins.pins_made == 0
    pins = make_policy("clairvoyant")
    assert isinstance(pins, Clairvoyant)
    simulate(small_hw(1500), pins, fitting(6, 5, 1500), rate_per_s=0.5, config=CFG)
    assert pins.pins_made > 0
    lru = make_policy("clairvoyant:evict+pins")
    assert isinstance(lru, Clairvoyant) and lru.name == "clairvoyant:evict+pins"
    assert lru.eviction_order() is None and pins.eviction_order() is not None
    # a newcomer that starts small but grows to 900 blocks, beside a live 300-block program:
    # its largest call does not fit; its first call, or the live program's size, does
    live = Program("live", (Turn(64 * 300, 400, 0, 0.0, None),))
    tall = Program("tall", (Turn(64 * 50, 4, 0, 0.0, "t"), Turn(64 * 900, 4, 50, 0.1, None)))
    m = simulate(hw, "clairvoyant", [live, tall], open_loop=True, config=wide)
    assert m.first_waits_s[1] > 0.0
    m = simulate(hw, "clairvoyant:sizes", [live, tall], open_loop=True, config=wide)
    assert m.first_waits_s[1] == 0.0
    with pytest.raises(ValueError, match="unknown clairvoyant variant 'belady'"):
        make_policy("clairvoyant:belady")
