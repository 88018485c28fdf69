"""bench/batch_wait.py, behind docs/investigations/2026-rivals.md's batching bullet: its probe
changes no run, its causes split the run's seconds, and a head too large for memory is
named as such, with a smaller call behind it that would fit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import cast

import pytest

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, make_policy, simulate
from ttlpolicy.sim.interface import Policy
from ttlpolicy.sim.workload import programs_from_trace
from ttlpolicy.traces import sample_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import batch_wait  # (bench/)
import throughput_tail

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)


def split(seconds: dict[str, float], phase: str) -> float:
    """The seconds of one phase summed over the causes (not the sub-counts)."""
    return sum(v for k, v in seconds.items() if k.startswith(f"{phase}:") and k.count(":") == 1)


@pytest.mark.parametrize("name", ["ttlpolicy-offload", "mori"])
def test_the_probe_changes_no_run_and_its_causes_split_the_makespan(name: str) -> None:
    programs = programs_from_trace(
        sample_dir(), max_context=120_000, think_cap_s=300.0, human_turns="drop"
    )
    hw = hw_blocks(2500, 64, 300)  # (contended: calls wait)
    watch = batch_wait.WaitWatch(make_policy(name))
    probe = batch_wait.WaitProbe(watch)
    m, busy = throughput_tail.run_logged(
        hw, cast(Policy, watch), programs, 0.2, 1, CFG, probe=probe
    )
    want = simulate(hw, name, programs, rate_per_s=0.2, seed=1, config=CFG)
    assert m.summary() == want.summary()
    assert not watch.waiting_calls  # (every call it saw arrive was popped)
    seconds = probe.summary()["seconds"]
    assert split(seconds, "busy") == pytest.approx(busy.busy_s)
    assert split(seconds, "idle") == pytest.approx(m.makespan_s - busy.busy_s)
    assert set(k.split(":")[1] for k in seconds) <= {*batch_wait.CAUSES, "none_waiting"}
    waited_s = split(seconds, "busy") - seconds.get("busy:none_waiting", 0.0)
    assert waited_s > 0  # (contended)
    assert seconds.get("busy:head_memory:skip_fits", 0.0) <= seconds.get("busy:head_memory", 0.0)


def program(name: str, prompt_blocks: int, output_tokens: int) -> Program:
    return Program(name, (Turn(prompt_blocks * 64, output_tokens, 0, 0.0, None),))


def run(arrivals: list[tuple[float, Program]]) -> dict[str, float]:
    watch = batch_wait.WaitWatch(make_policy("vllm"))
    engine = Engine(hw_blocks(200, 64), cast(Policy, watch), CFG)
    engine.add_programs(arrivals)
    probe = batch_wait.WaitProbe(watch)
    throughput_tail.drive(engine, probe)
    return probe.summary()["seconds"]


def test_a_head_too_large_for_memory_blocks_the_call_behind_it_that_fits() -> None:
    # a (150 of 200 blocks) decodes 400 tokens; b (100 blocks) cannot join it and waits at
    # the head; c (10 blocks), arriving behind b, would fit but vLLM stops at b
    a, b, c = program("a", 150, 400), program("b", 100, 20), program("c", 10, 20)
    seconds = run([(0.0, a), (0.5, b), (0.6, c)])
    assert seconds["busy:head_memory"] > 0
    assert 0 < seconds["busy:head_memory:skip_fits"] < seconds["busy:head_memory"]
    # alone behind a, b blocks nothing that would fit
    alone = run([(0.0, a), (0.5, b)])
    assert alone["busy:head_memory"] > 0 and "busy:head_memory:skip_fits" not in alone
    # and c alone behind a joins it at once: nothing waits for memory
    assert "busy:head_memory" not in run([(0.0, a), (0.6, c)])
