"""The CacheTTL paper's reproduction pieces in the simulator: its workload generators (Table 2),
its engine presets, its baselines (Continuum's public rule) and ablation policies (through the
library's published preset), and the compare flags that run them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ttlpolicy.cli import main as cli_main
from ttlpolicy.sim import Program, Turn, Verdict, roofline, simulate
from ttlpolicy.sim.call import Call, ProgramRun
from ttlpolicy.sim.hardware import paper_hardware
from ttlpolicy.sim.interface import EngineConfig
from ttlpolicy.sim.paper_workloads import PAPER_ENGINE, describe, paper_programs
from ttlpolicy.sim.policies.cachettl import CacheTTL, StaticTTL
from ttlpolicy.sim.policies.continuum import Continuum

# -- workloads --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "turns", "tool_s", "tokens"),
    [("swe-bench", 10.9, 0.925, 70_126), ("bfcl", 6.3, 1.923, 93_256 * 0.4)],
)
def test_generators_match_table_2(workload, turns, tool_s, tokens) -> None:
    """Means of 400 programs within sampling error of the paper's Table 2 (tool times are
    long-tailed: 25 %)."""
    stats = describe(paper_programs(workload, 400, seed=1))
    assert stats["turns"][0] == pytest.approx(turns, abs=0.4)
    assert stats["tool_s"][0] == pytest.approx(tool_s, rel=0.25)
    assert stats["prompt_tokens"][0] == pytest.approx(tokens, rel=0.2)


def test_generators_are_seeded_and_shaped_like_agents() -> None:
    a = paper_programs("swe-bench", 20, seed=3)
    assert a == paper_programs("swe-bench", 20, seed=3)
    assert a != paper_programs("swe-bench", 20, seed=4)
    for p in a:
        assert p.turns[0].think_s == 0.0 and p.turns[-1].tool is None
        assert all(t.tool is not None for t in p.turns[:-1])
        for prev, t in zip(p.turns, p.turns[1:], strict=False):
            # the context grows (by the visible part of the previous output and a tool
            # observation); the previous input's full blocks are reusable
            assert t.input_tokens > prev.input_tokens
            assert t.reusable_blocks == prev.input_tokens // PAPER_ENGINE.block_tokens
    tools = {t.tool for p in a for t in p.turns[:-1]}
    assert tools <= {"cat", "sed", "grep", "ls", "find", "cd", "echo", "python", "pytest"}


def test_keep_whole_output_grows_contexts_by_every_generated_token() -> None:
    for p in paper_programs("bfcl", 5, seed=2, keep_whole_output=True):
        for prev, t in zip(p.turns, p.turns[1:], strict=False):
            assert t.input_tokens > prev.input_tokens + prev.output_tokens


def test_observation_tokens_set_how_fast_contexts_grow() -> None:
    """Table 2's tokens read as the last call's context: ~6.9k appended per turn instead of
    ~0.75k (everything else drawn the same)."""
    base = describe(paper_programs("swe-bench", 200, seed=1))["prompt_tokens"][0]
    grown = paper_programs("swe-bench", 200, seed=1, observation_mean_tokens=6900.0)
    last = sum(p.turns[-1].input_tokens for p in grown) / len(grown)
    assert last == pytest.approx(70_126, rel=0.2)  # the last call's context, not the sum
    assert describe(grown)["prompt_tokens"][0] > 4 * base


def test_turn_scale_repeats_turns_with_tokens_divided() -> None:
    one = paper_programs("bfcl", 10, seed=2)
    three = paper_programs("bfcl", 10, seed=2, turn_scale=3)
    for p1, p3 in zip(one, three, strict=True):
        assert len(p3.turns) == 3 * len(p1.turns)
        # the same tokens in all, within the rounding of dividing each count by 3
        assert p3.turns[-1].input_tokens == pytest.approx(p1.turns[-1].input_tokens, rel=0.05)
        assert p3.turns[1].think_s == p1.turns[1].think_s


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"workload": "gaia"}, "workload"),
        ({"workload": "bfcl", "n": 0}, "n"),
        ({"workload": "bfcl", "turn_scale": 0}, "turn_scale"),
        ({"workload": "bfcl", "output_mean_tokens": float("nan")}, "output_mean_tokens"),
        ({"workload": "bfcl", "observation_mean_tokens": 0.0}, "observation_mean_tokens"),
        ({"workload": "bfcl", "observation_mean_tokens": math.inf}, "observation_mean_tokens"),
    ],
)
def test_generator_bad_input_names_the_field(kwargs, field) -> None:
    with pytest.raises(ValueError, match=field):
        paper_programs(**kwargs)


def test_paper_hardware_offload_tiers() -> None:
    assert paper_hardware("llama-3.1-8b", "b200").cpu_tier_bytes == 0.0
    assert paper_hardware("llama-3.1-8b", "b200", offload=True).cpu_tier_bytes == 200e9
    assert paper_hardware("llama-3.1-70b", "a100-80g", offload=True).cpu_tier_bytes == 400e9
    assert PAPER_ENGINE.token_budget == 2048


# -- Continuum as its public code ---------------------------------------------------------

BASE = roofline("llama-3.1-8b", "h100-80g")
CFG = EngineConfig()


def call(program: str, arrival_s: float, tool: str | None = "ls", call_id: int = 0) -> Call:
    prog = Program(program, (Turn(640, 8, 0, 0.0, tool), Turn(704, 8, 10, 1.0, None)))
    return Call(call_id, ProgramRun(prog, arrival_s), 0, arrival_s)


def bound_continuum(running: int) -> Continuum:
    c = Continuum()
    c.bind(SimpleNamespace(running_count=running, config=CFG, hardware=BASE, now=0.0))
    return c


def test_continuum_pins_unseen_tools_and_ranks_pinned_programs_first() -> None:
    c = bound_continuum(running=1)
    old, new = call("old", 0.0, call_id=1), call("new", 5.0, call_id=2)
    assert c.finished(new, 6.0, 10, last_turn=False) is Verdict.PIN  # unseen tool: 0 s
    c.arrive(old, 7.0)
    back = call("new", 5.0, call_id=3)
    c.arrive(back, 7.0)
    assert c.peek() is back  # the program holding a pin goes first
    assert c.expire(100.0) == []  # its call waits: the pin is kept
    assert c.pop() is back and c.next_deadline() is None  # handed over
    assert c.peek() is old


def test_continuum_reclaims_only_with_at_most_one_call_running() -> None:
    busy = bound_continuum(running=2)
    for i, pid in enumerate("AB"):
        busy.finished(call(pid, float(i), call_id=i), float(i), 10, last_turn=False)
    assert busy.reclaim(5, 3.0) == []
    idle = bound_continuum(running=1)
    for i, (pid, t) in enumerate([("A", 0.5), ("B", 0.1)]):
        idle.finished(call(pid, 0.0, call_id=i), t, 10, last_turn=False)
    assert idle.reclaim(5, 3.0) == ["A"]  # the latest end time first
    assert idle.reclaim(50, 3.0) == ["B"]


def test_continuum_does_not_pin_a_slow_tool() -> None:
    c = bound_continuum(running=1)
    slow = Program("p", (Turn(640, 8, 0, 0.0, "pytest"), Turn(704, 8, 10, 30.0, "pytest"),
                         Turn(768, 8, 11, 30.0, None)))  # fmt: skip
    run = ProgramRun(slow, 0.0)
    c.arrive(Call(0, run, 1, 30.0), 30.0)  # observes pytest: 30 s
    assert c.finished(Call(1, run, 1, 30.0), 31.0, 10, last_turn=False) is Verdict.FREE


# -- the ablation policies run the library -------------------------------------------------


def short_tool_program(name: str, turns: int = 6) -> Program:
    return Program(
        name,
        tuple(
            Turn(
                6400 + 64 * i,
                8,
                100 + i if i else 0,
                0.5 if i else 0.0,
                None if i == turns - 1 else "ls",
            )
            for i in range(turns)
        ),
    )


def test_program_fcfs_never_pins_and_cachettl_pins_through_the_library() -> None:
    progs = [short_tool_program(f"p{i}") for i in range(3)]
    hw = roofline("llama-3.1-8b", "h100-80g")
    m = simulate(hw, "program-fcfs", progs, rate_per_s=1.0, config=PAPER_ENGINE)
    assert m.pinned_block_s == 0.0
    pol = CacheTTL()
    simulate(hw, pol, progs, rate_per_s=1.0, config=PAPER_ENGINE)
    assert pol.ttl_policy.config.pin_handover == "schedule"
    assert pol.sched.pin_handover == "schedule"
    assert pol.ttl_policy.tool_count("ls") == 3 * 5  # every tool gap was observed


def test_static_ttl_pins_the_cold_start_value() -> None:
    pol = StaticTTL()
    hw = roofline("llama-3.1-8b", "h100-80g")
    simulate(hw, pol, [short_tool_program("p")], rate_per_s=1.0, config=PAPER_ENGINE)
    policy = pol.ttl_policy
    miss = 5.0
    d = policy.decide(tool="ls", cache_miss_cost_s=miss)
    assert d.source == "exponential_prior"  # never leaves the cold start
    expected = math.log(miss + policy.out_of_order_cost_s)
    assert d.ttl_s == pytest.approx(expected, rel=1e-12)


def test_compare_runs_a_paper_workload(capsys) -> None:
    rc = cli_main(["compare", "--workload", "bfcl", "--programs", "6", "--turn-scale", "2",
                   "--policies", "vllm,cachettl", "--rate", "2"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "cachettl" in out and "rate (programs/s) = 2" in out
    assert cli_main(["compare", "--workload", "bfcl", "--trace", "x"]) == 2
    assert "--trace or --workload" in capsys.readouterr().err


def test_reproduction_script_writes_a_table_per_figure(tmp_path) -> None:
    """bench/reproduce_cachettl.py end to end on a tiny workload (its numbers are the bench's
    business; here: it runs and writes every figure's table beside the paper's values)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "reproduce_cachettl.py"
    spec = importlib.util.spec_from_file_location("reproduce_cachettl", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path), "--programs", "3", "--quick", "--no-plots"]) == 0
    tables = (tmp_path / "tables.md").read_text(encoding="utf-8")
    for heading in ("Fig. 8", "Fig. 10", "Fig. 14", "Fig. 16", "Job-arrival sweep", "Sensitivity",
                    "Output length", "Where the time goes"):  # fmt: skip
        assert heading in tables
    assert "| vllm | 2,000 |" in tables  # the paper's value beside ours
