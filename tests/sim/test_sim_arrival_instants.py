"""vLLM adds requests one at a time, each reading the clock (``add_request``), so no two
arrive at one instant; the simulator, which handles every event due at a step boundary at
that boundary's time, gives each arrival after the first its own later instant.  This matters
to ``AdmissionControl``: programs that arrive at one instant form a cohort, admitted together
past the working-set rule, which on the engine never happens (bench/RESULTS.md, issue 11,
"Simulator fidelity — the engine's arrival times replayed")."""

from __future__ import annotations

from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, roofline
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.policies import make_policy

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)
#: 1 % of peak: a 200-block context takes ~20 s to rebuild, far more than a 2 s tool gap
SLOW = roofline("llama-3.1-8b", "h100-80g", efficiency=0.01)


def hw_with(blocks: int) -> Hardware:
    return Hardware(SLOW.model, SLOW.gpu, SLOW.steps, blocks * 64 * SLOW.kv_bytes_per_token, 0)


def agent(name: str, blocks: int) -> Program:
    """Three calls of a ~``blocks``-block context, 2 s tool gaps."""
    return Program(
        name,
        tuple(
            Turn((blocks + i) * 64, 8, (blocks + i - 1) if i else 0, 2.0 if i else 0.0, "bash")
            for i in range(3)
        ),
    )


def arrivals(name: str, programs: list[tuple[float, Program]]) -> list[tuple[str, int, float]]:
    """(program, turn, arrival instant the policy saw) of every call, in arrival order."""
    pol = make_policy(name)
    seen: list[tuple[str, int, float]] = []
    arrive = pol.arrive

    def record(call, now):
        seen.append((call.program_id, call.turn_index, now))
        return arrive(call, now)

    pol.arrive = record  # type: ignore[method-assign]
    engine = Engine(hw_with(1000), pol, CFG)
    engine.add_programs(programs)
    assert engine.run().programs_done == len(programs)
    return seen


def test_no_two_calls_arrive_at_one_instant() -> None:
    # four programs at 0 s; two more at 0.5 s, during the first steps (handled at a step end)
    programs = [(0.0, agent(f"p{i}", 100)) for i in range(4)]
    programs += [(0.5, agent(f"q{i}", 100)) for i in range(2)]
    seen = arrivals("vllm", programs)
    times = [t for _, _, t in seen]
    assert len(set(times)) == len(times)
    assert times == sorted(times)
    # in the order they were due, and no earlier than that
    assert [p for p, turn, _ in seen if turn == 0] == ["p0", "p1", "p2", "p3", "q0", "q1"]
    assert all(t >= 0.5 for p, _, t in seen if p.startswith("q"))


def admitted_at(programs: list[tuple[float, Program]], blocks: int) -> dict[str, float]:
    """When each program's first call was admitted under ``ttlpolicy:exact`` (load control;
    priced exactly, so that rebuilding a context outweighs a 2 s tool gap)."""
    pol = make_policy("ttlpolicy:exact")
    first: dict[str, float] = {}
    admitted = pol.admitted

    def record(call, now, dropped):
        first.setdefault(call.program_id, now)
        return admitted(call, now, dropped)

    pol.admitted = record  # type: ignore[method-assign]
    engine = Engine(hw_with(blocks), pol, CFG)
    engine.add_programs(programs)
    assert engine.run().programs_done == len(programs)
    return first


def test_programs_started_together_pass_the_working_set_rule_one_by_one() -> None:
    # Two agents of ~200 blocks at the same instant, 300 blocks of memory: on vLLM the second
    # add_request comes after the first, so the second program waits for admission until the
    # first ends, as it would one microsecond later; a cohort would admit both at once and
    # thrash (the first's context evicted in every tool gap).
    together = admitted_at([(0.0, agent("A", 200)), (0.0, agent("B", 200))], 300)
    apart = admitted_at([(0.0, agent("A", 200)), (1e-6, agent("B", 200))], 300)
    assert together["A"] < 1e-9
    assert together["B"] > 4.0  # after A's two tool gaps: A has ended
    assert together["B"] == apart["B"]
