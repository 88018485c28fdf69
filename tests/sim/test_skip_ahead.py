"""bench/skip_ahead.py: a head of the queue too large for memory lets the first of the next K
waiting calls that fits run, no further; without the skip the engine waits for the head,
as vLLM does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sim_hardware import hw_blocks
from ttlpolicy.serving.skip_ahead import MAX_PASSES
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, make_policy
from ttlpolicy.sim.interface import Policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import skip_ahead  # (bench/)

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)


def program(name: str, prompt_blocks: int, output_tokens: int) -> Program:
    return Program(name, (Turn(prompt_blocks * 64, output_tokens, 0, 0.0, None),))


def finish_s(policy: Policy, arrivals: list[tuple[float, Program]]) -> dict[str, float]:
    engine = Engine(hw_blocks(200, 64, 300), policy, CFG)
    engine.add_programs(arrivals)
    return engine.run().program_finish_s


# a holds 150 of the 200 blocks for 400 decode steps; b and b2 (100 blocks) cannot join it;
# c (10 blocks) can
A, B, B2, C = (program("a", 150, 400), program("b", 100, 20), program("b2", 100, 20),
               program("c", 10, 20))  # fmt: skip


@pytest.mark.parametrize("name", ["mori", "ttlpolicy-offload:admission"])
def test_a_call_that_fits_passes_a_head_that_does_not(name: str) -> None:
    arrivals = [(0.0, A), (0.5, B), (0.6, C)]
    # (ttlpolicy-offload skips by default, ``ttlpolicy.serving.skip_ahead``: off here)
    plain = finish_s(make_policy(name if name == "mori" else f"{name}+skip=0"), arrivals)
    assert plain["c"] > plain["a"]  # (vLLM's order: c waits for b, b for a)
    skipped = finish_s(skip_ahead.make_skip_policy(f"{name}+skip=2"), arrivals)
    assert skipped["c"] < skipped["a"]  # c ran beside a
    assert skipped["b"] >= skipped["a"]  # b still waited for a's blocks


@pytest.mark.parametrize("skip", ["+skip=2", "+lcskip=2"])
def test_a_head_load_control_refuses_is_not_passed(skip: str) -> None:
    # (ttlpolicy's load control holds b, the oldest waiting program, back while a runs:
    # FCFS, nobody younger may pass it, skip or not; ``lcskip`` asks load control of the calls
    # behind the refused head, and it refuses c as well)
    arrivals = [(0.0, A), (0.5, B), (0.6, C)]
    policy = skip_ahead.make_skip_policy(f"ttlpolicy-offload{skip}")
    assert finish_s(policy, arrivals) == finish_s(make_policy("ttlpolicy-offload"), arrivals)
    assert policy.skips == 0  # type: ignore[attr-defined]


def test_lcskip_passes_a_head_that_does_not_fit_as_skip_does() -> None:
    arrivals = [(0.0, A), (0.5, B), (0.6, C)]
    name = "ttlpolicy-offload:admission"
    lc = skip_ahead.make_skip_policy(f"{name}+lcskip=2")
    assert finish_s(lc, arrivals) == finish_s(
        skip_ahead.make_skip_policy(f"{name}+skip=2"), arrivals
    )
    assert lc.skips == 1 and lc.lcskips == 0  # type: ignore[attr-defined]


def test_the_skip_looks_no_further_than_its_depth() -> None:
    arrivals = [(0.0, A), (0.5, B), (0.55, B2), (0.6, C)]
    one = skip_ahead.make_skip_policy("mori+skip=1")
    assert finish_s(one, arrivals)["c"] > finish_s(make_policy("mori"), [(0.0, A)])["a"]
    assert one.skips == 0  # type: ignore[attr-defined]
    two = skip_ahead.make_skip_policy("mori+skip=2")
    assert finish_s(two, arrivals)["c"] < 2.0  # (c is the 2nd behind b: within reach)
    assert two.skips == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "name", ["mori+skip=0", "mori+skip=x", "vllm+skip=2", "ttlpolicy+skip=2", "mori+skip=-1"]
)
def test_a_bad_skip_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ValueError, match=r"skip|depth"):
        skip_ahead.make_skip_policy(name)


def test_a_head_is_passed_no_more_often_than_the_librarys_bound() -> None:
    # (the library's rule, ``skip_ahead.HeadSkips``: a stream of small calls, each fitting
    # beside a, would otherwise keep b waiting for as long as it lasts)
    small = [(0.6 + i / 1000, program(f"c{i}", 10, 20)) for i in range(MAX_PASSES + 6)]
    policy = skip_ahead.make_skip_policy("ttlpolicy-offload:admission+skip=2")
    done = finish_s(policy, [(0.0, A), (0.5, B), *small])
    assert policy.skips == MAX_PASSES  # type: ignore[attr-defined]
    assert done[f"c{MAX_PASSES - 1}"] < done["a"]  # (the last passed ran beside a)
    assert done[f"c{MAX_PASSES}"] > done["a"]  # the first not passed waited for b
