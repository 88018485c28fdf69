"""The Rust core's step-time model (``ttlpolicy._native.StepModel``, which the simulator's
engine uses when the native module is loaded) gives the reference's floats to the bit
(``ttlpolicy.sim.hardware``): a simulation's results must not depend on the backend."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import native
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.hardware import Line, StepModel, StepTimer, native_steps
from ttlpolicy.sim.workload import swe_agent_programs

pytestmark = pytest.mark.skipif(native is None, reason="the native module is not built")

coefficient = st.floats(-1e-2, 1e-2, allow_nan=False) | st.just(0.0)
line = st.tuples(*[coefficient] * 5)
size = st.floats(0, 1e10, allow_nan=False) | st.integers(0, 10**6)
growth = st.floats(-1e7, 1e7, allow_nan=False) | st.integers(0, 10**5)


#: a decode-only step's line, or none (every step on the two lines)
decode_line = st.none() | line


def both(
    c: tuple[float, ...], m: tuple[float, ...], d: tuple[float, ...] | None = None
) -> tuple[StepModel, StepTimer]:
    reference = StepModel(Line(*c), Line(*m), None if d is None else Line(*d))
    return reference, native_steps(reference)


def seqs_of(tokens: float, seqs: int, decode_only: bool) -> float:
    """A step's sequences: as drawn, or its tokens (a decode-only step: one token each)."""
    return tokens if decode_only else seqs


def same(x: float, y: float) -> bool:
    """The same float, to the bit (NaN equal to NaN)."""
    return (x == y and math.copysign(1.0, x) == math.copysign(1.0, y)) or (x != x and y != y)


@given(
    c=line,
    m=line,
    d=decode_line,
    tokens=size,
    attn=size,
    kv=size,
    seqs=st.integers(0, 512),
    decode_only=st.booleans(),
)
def test_one_step_is_the_same_float(c, m, d, tokens, attn, kv, seqs, decode_only) -> None:
    reference, fast = both(c, m, d)
    seqs = seqs_of(tokens, seqs, decode_only)
    assert same(fast.step_s(tokens, attn, kv, seqs), reference.step_s(tokens, attn, kv, seqs))


#: a model (lines c, m, d) and a run's first step and growth, decode-only or not
RUN = {
    "c": line,
    "m": line,
    "d": decode_line,
    "tokens": size,
    "attn0": size,
    "d_attn": growth,
    "kv0": size,
    "d_kv": growth,
    "decode_only": st.booleans(),
}


@given(**RUN, seqs=st.integers(0, 512), ks=st.lists(st.integers(0, 5_000), min_size=1, max_size=8))
def test_a_run_has_the_same_split_and_times(
    c, m, d, tokens, attn0, d_attn, kv0, d_kv, seqs, decode_only, ks
):
    reference, fast = both(c, m, d)
    seqs = seqs_of(tokens, seqs, decode_only)
    ref = reference.run(tokens, attn0, d_attn, kv0, d_kv, seqs)
    run: Any = fast.run(tokens, attn0, d_attn, kv0, d_kv, seqs)  # (its fields: native only)
    for field in ("a0", "da", "b0", "db"):
        assert same(getattr(run, field), getattr(ref, field)), field
    # (a crossing past u64 steps saturates natively: past any run either way)
    assert run.split == (ref.split if ref.split is None or ref.split < 2**64 else 2**64 - 1)
    assert run.monotone == ref.monotone
    for k in ks:
        assert same(run.s(k), ref.s(k)), k


@given(**RUN, k=st.integers(1, 3_000), start_s=st.floats(0, 1e7), fraction=st.floats(0, 1.5))
def test_reach_finds_the_same_step(
    c, m, d, tokens, attn0, d_attn, kv0, d_kv, decode_only, k, start_s, fraction
):
    """Whatever the lines (rising, falling, crossing), the same step count and time."""
    reference, fast = both(c, m, d)
    seqs = seqs_of(tokens, 1, decode_only)
    ref = reference.run(tokens, attn0, d_attn, kv0, d_kv, seqs)
    run = fast.run(tokens, attn0, d_attn, kv0, d_kv, seqs)
    s_k = ref.s(k)
    until_s = start_s + s_k * fraction
    j_ref, s_ref = ref.reach(start_s, until_s, k, s_k)
    j, s_j = run.reach(start_s, until_s, k, s_k)
    assert j == j_ref
    assert same(s_j, s_ref)


def test_a_model_that_scatters_its_steps_times_them_itself() -> None:
    """``JitteredSteps`` draws a ratio per step: the native twin, deterministic, cannot
    stand in for it."""
    from ttlpolicy.sim.hardware import JitteredSteps

    jittered = JitteredSteps(roofline("llama-3.1-8b", "h100-80g").steps, [0.9, 1.1], [1.0], 7)
    assert native_steps(jittered) is jittered


def test_reach_refuses_a_step_count_it_cannot_compare_exactly() -> None:
    fast = native_steps(roofline("llama-3.1-8b", "h100-80g").steps)
    run = fast.run(8, 1e5, 8, 1e5, 8, 8)
    with pytest.raises(ValueError, match=r"k must be in \[1, 9007199254740992\], got 0"):
        run.reach(0.0, 1.0, 0, 0.0)


@pytest.mark.parametrize("decode", [False, True], ids=["roofline", "decode-line"])
@pytest.mark.parametrize("policy", ["vllm", "ttlpolicy", "cachettl", "ttlpolicy-offload"])
def test_a_simulation_is_the_same_with_either_step_model(policy, decode, monkeypatch) -> None:
    """The whole engine on the native step model and on the reference's: every metric equal
    (with the roofline, and with decode-only steps priced on a line of their own, as a CPU
    engine's calibrated profile does)."""
    from ttlpolicy.sim import engine as engine_module
    from ttlpolicy.sim.hardware import Hardware

    hw = roofline("llama-3.1-8b", "h100-80g", cpu_tier_bytes=64e9)
    if decode:
        steps = StepModel(hw.steps.compute, hw.steps.memory, Line(8e-3, 2e-6, 0.0, 4e-9, 1e-4))
        hw = Hardware(hw.model, hw.gpu, steps, hw.kv_capacity_bytes, hw.cpu_tier_bytes)
    programs = swe_agent_programs(40, seed=3)
    fast = simulate(hw, policy, programs, concurrency=6)
    monkeypatch.setattr(engine_module, "native_steps", lambda model: model)
    slow = simulate(hw, policy, programs, concurrency=6)
    skip = {"wall_s"}
    assert {k: v for k, v in vars(fast).items() if k not in skip} == {
        k: v for k, v in vars(slow).items() if k not in skip
    }
