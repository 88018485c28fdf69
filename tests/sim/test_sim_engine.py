"""The engine model pinned down on hand-built programs: every expected value below is computed
from the model's definition (roofline formulas, block arithmetic), not by running the engine."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.sim import (
    Engine,
    EngineConfig,
    Program,
    Turn,
    roofline,
    simulate,
    swe_agent_programs,
)
from ttlpolicy.sim.hardware import MODELS, Line, StepModel, StepRun
from ttlpolicy.sim.policies import make_policy

HW = roofline("llama-3.1-8b", "h100-80g")
CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)


def roofline_step_s(tokens: int, attn: float, kv: int) -> float:
    """The roofline restated from the model card and spec sheet (not from StepModel)."""
    m = MODELS["llama-3.1-8b"]
    flops = 2 * m.params * tokens + 4 * m.layers * m.heads * m.head_dim * attn
    bytes_ = m.params * 2 + 2 * m.layers * m.kv_heads * m.head_dim * 2 * kv
    return max(flops / (989e12 * 0.6), bytes_ / (3.35e12 * 0.6)) + 0.004


def one(turns: list[Turn], policy: str = "vllm", hw=HW, cfg=CFG):
    engine = Engine(hw, make_policy(policy), cfg)
    engine.add_programs([(0.0, Program("p", tuple(turns)))])
    return engine, engine.run()


def test_lone_request_ttft_is_prefill_time() -> None:
    n = 3000  # one chunk
    _, m = one([Turn(n, 1, 0, 0.0, None)])
    expected = roofline_step_s(n, n * (n + 1) / 2, n)
    assert m.ttfts_s == [pytest.approx(expected, rel=1e-9)]


def test_lone_long_request_ttft_is_chunked_prefill_time() -> None:
    n = 20_000  # chunks of 8192, 8192, 3616
    _, m = one([Turn(n, 1, 0, 0.0, None)])
    expected, done = 0.0, 0
    for c in (8192, 8192, 3616):
        expected += roofline_step_s(c, c * done + c * (c + 1) / 2, done + c)
        done += c
    assert m.ttfts_s[0] == pytest.approx(expected, rel=1e-9)
    assert HW.prefill_s(n, 8192) == pytest.approx(expected, rel=1e-9)


def test_decode_time_is_the_sum_of_decode_steps() -> None:
    n, out = 1000, 50
    _, m = one([Turn(n, out, 0, 0.0, None)])
    prefill = roofline_step_s(n, n * (n + 1) / 2, n)
    decode = sum(roofline_step_s(1, n + g, n + g) for g in range(1, out))
    assert m.makespan_s == pytest.approx(prefill + decode, rel=1e-9)


def test_returning_program_recomputes_only_new_tokens() -> None:
    first = Turn(6400, 10, 0, 0.0, "tool_use")  # 100 full blocks
    second = Turn(7000, 10, 100, 5.0, None)  # reuses all 100 blocks, 600 new tokens
    _, m = one([first, second])
    assert m.hit_tokens == 6400
    assert m.prefill_tokens == 6400 + 600
    assert m.recomputed_tokens == 0
    # its TTFT is the prefill of 600 tokens after a 6400-token prefix
    ttft2 = roofline_step_s(600, 600 * 6400 + 600 * 601 / 2, 7000)
    assert m.ttfts_s[1] == pytest.approx(ttft2, rel=1e-9)


def test_partial_reuse_recomputes_the_rest() -> None:
    first = Turn(6400, 10, 0, 0.0, "tool_use")
    second = Turn(6400, 10, 40, 5.0, None)  # prefix diverges after 40 blocks
    _, m = one([first, second])
    assert m.hit_tokens == 40 * 64
    assert m.prefill_tokens == 6400 + 6400 - 40 * 64


def test_run_s_matches_step_by_step_sum() -> None:
    steps = HW.steps
    for tokens, a0, da, k0, dk, k in [
        (1, 1e5, 1, 1e5, 1, 500),
        (8192, 3e7, 8192**2, 1e4, 8192, 30),
        (40, 4e6, 40, 4e6, 40, 2000),
    ]:
        direct = sum(steps.step_s(tokens, a0 + j * da, k0 + j * dk) for j in range(k))
        assert steps.run_s(tokens, a0, da, k0, dk, k) == pytest.approx(direct, rel=1e-9)


@given(
    c=st.tuples(*[st.floats(0, 1e-3)] * 5),
    m=st.tuples(*[st.floats(0, 1e-3)] * 5),
    tokens=st.integers(0, 10_000),
    a0=st.floats(0, 1e9),
    da=st.floats(-1e5, 1e7),
    k0=st.floats(0, 1e7),
    dk=st.floats(-10, 1e4),
    k=st.integers(0, 300),
    seqs=st.integers(0, 512),
)
def test_run_s_is_the_sum_of_steps(c, m, tokens, a0, da, k0, dk, k, seqs) -> None:
    """A run's closed form is the sum of its steps, each with the run's sequences."""
    steps = StepModel(Line(*c), Line(*m))
    direct = sum(steps.step_s(tokens, a0 + j * da, k0 + j * dk, seqs) for j in range(k))
    assert steps.run_s(tokens, a0, da, k0, dk, k, seqs) == pytest.approx(
        direct, rel=1e-7, abs=1e-12
    )


@given(
    c=st.tuples(*[st.floats(0, 1e-3)] * 5),
    m=st.tuples(*[st.floats(0, 1e-3)] * 5),
    tokens=st.integers(0, 10_000),
    a0=st.one_of(st.integers(0, 10**9), st.floats(0, 1e9)),
    da=st.floats(-1e5, 1e7),
    k0=st.integers(0, 10**7),
    dk=st.floats(-10, 1e4),
    seqs=st.integers(0, 512),
)
def test_one_step_s_is_the_runs_first_step_exactly(c, m, tokens, a0, da, k0, dk, seqs) -> None:
    """The engine times a single step with ``step_s`` instead of building a ``StepRun``: the
    very same float, or simulations would drift from what the runs gave."""
    steps = StepModel(Line(*c), Line(*m))
    assert steps.step_s(tokens, a0, k0, seqs) == StepRun(steps, tokens, a0, da, k0, dk, seqs).s(1)


@given(
    c=st.tuples(*[st.floats(0, 1e-3)] * 4),
    tokens=st.integers(0, 10_000),
    attn=st.one_of(st.integers(0, 10**9), st.floats(0, 1e9)),
    kv=st.one_of(st.integers(0, 10**7), st.floats(0, 1e7)),
    seqs=st.integers(0, 512),
)
def test_a_zero_sequence_term_leaves_every_step_time_to_the_bit(c, tokens, attn, kv, seqs) -> None:
    """The roofline has no per-sequence cost: with ``c_seq`` 0 a step's time is, to the last
    bit, the three-term line's, whatever the sequence count — every simulation on a roofline
    (or a /1 profile) gives the results it gave before the term existed."""
    line = Line(*c)
    three_terms = c[0] + c[1] * tokens + c[2] * attn + c[3] * kv  # the line before the term
    assert line.at(tokens, attn, kv, seqs) == three_terms
    for name in ("llama-3.1-8b", "llama-3.1-70b"):
        hw = roofline(name, "h100-80g")
        assert hw.steps.compute.c_seq == hw.steps.memory.c_seq == 0.0


def test_each_sequence_in_a_step_costs_the_per_sequence_term() -> None:
    """A profile whose only cost is 5 ms per sequence in a step: a lone call of 8 output
    tokens runs 8 steps of one sequence (its prefill, which samples the first token, and 7
    decodes: 40 ms); two such calls side by side run 8 steps of two (80 ms), both finishing
    together.  The engine counts every decode and every prefill chunk of a step."""
    base = roofline("llama-3.1-8b", "h100-80g")
    line = Line(0.0, 0.0, 0.0, 0.0, 5e-3)
    hw = type(base)(base.model, base.gpu, StepModel(line, line), base.kv_capacity_bytes)
    lone = simulate(hw, "vllm", [Program("a", (Turn(500, 8, 0, 0.0, None),))], open_loop=True)
    assert lone.summary()["jct_mean_s"] == pytest.approx(8 * 5e-3, rel=1e-12)
    pair = [Program(p, (Turn(500, 8, 0, 0.0, None),)) for p in ("a", "b")]
    both = simulate(hw, "vllm", pair, open_loop=True)
    assert both.summary()["jct_mean_s"] == pytest.approx(8 * 2 * 5e-3, rel=1e-12)


def small_hw(blocks: int):
    """Same model, a KV room of ``blocks`` 64-token blocks: memory pressure on small programs."""
    base = roofline("llama-3.1-8b", "h100-80g")
    return type(base)(base.model, base.gpu, base.steps, blocks * 64 * base.kv_bytes_per_token, 1e12)


POLICIES = [
    "vllm",
    "vllm-offload",
    "infercept",
    "autellix",
    "continuum",
    "fixed-ttl=5",
    "ttlpolicy",
    "ttlpolicy-offload",
]


class CheckedEngine(Engine):
    """Checks the memory books after every step."""

    def _step(self, plan, length=None):
        super()._step(plan, length)
        self.kv.check()
        held = sum(c.blocks for c in self.running)
        assert held + self.kv.pinned <= self.kv.used <= self.kv.capacity
        # a decoding call holds the KV of all its tokens but the last (the engine's bound on
        # decode growth relies on it)
        b = self.config.block_tokens
        for c in self.running:
            if c.computed >= c.prompt:
                assert c.blocks >= -(-(c.prompt + c.generated - 1) // b)


@pytest.mark.parametrize("policy", POLICIES)
def test_memory_bounded_and_every_call_finishes(policy: str) -> None:
    programs = swe_agent_programs(30, seed=3)
    hw = small_hw(3000)
    engine = CheckedEngine(hw, make_policy(policy), CFG)
    from ttlpolicy.sim.workload import poisson_arrivals

    engine.add_programs(poisson_arrivals(programs, 2.0, seed=1))
    m = engine.run()
    assert m.programs_done == len(programs)
    assert m.calls_done == sum(len(p.turns) for p in programs)
    assert m.output_tokens >= sum(t.output_tokens for p in programs for t in p.turns)
    assert engine.peak_used_blocks <= engine.kv.capacity
    assert not engine.running and engine.policy.waiting() == 0


def test_pressure_causes_preemption_or_recompute() -> None:
    """The scenario above is tight enough to bite (else the previous test proves little)."""
    m = simulate(
        small_hw(3000), "vllm", swe_agent_programs(30, seed=3), rate_per_s=2.0, seed=1, config=CFG
    )
    assert m.preemptions > 0 or m.recomputed_tokens > 0


@pytest.mark.parametrize("policy", ["vllm", "ttlpolicy", "infercept"])
def test_identical_seeds_identical_results(policy: str) -> None:
    progs = swe_agent_programs(20, seed=5)
    a = simulate(small_hw(4000), policy, progs, concurrency=6, seed=2, config=CFG).summary()
    b = simulate(small_hw(4000), policy, progs, concurrency=6, seed=2, config=CFG).summary()
    c = simulate(small_hw(4000), policy, progs, concurrency=6, seed=3, config=CFG).summary()
    assert a == b
    assert a != c  # the seed matters (program order)


def test_request_larger_than_memory_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max-context"):
        one([Turn(64 * 200, 1, 0, 0.0, None)], hw=small_hw(100))


def test_makespan_grows_with_think_time() -> None:
    _, m1 = one([Turn(640, 5, 0, 0.0, "t"), Turn(700, 5, 10, 1.0, None)])
    _, m2 = one([Turn(640, 5, 0, 0.0, "t"), Turn(700, 5, 10, 11.0, None)])
    assert m2.makespan_s - m1.makespan_s == pytest.approx(10.0, rel=1e-9)
    assert math.isclose(m1.completion_times_s()[0], m1.makespan_s)


class StepTimeCheckedEngine(Engine):
    """Checks every run of steps the engine plans: the step times it uses (computed once per
    run, ``StepRun``) equal the step-by-step roofline sum over the batch's own shape."""

    checked = 0

    def _plan(self, active):
        plan = super()._plan(active)
        if plan is not None:
            decode, chunks, steps, times = plan
            for k in {1, steps // 2, steps}:
                if k >= 1:
                    direct = self.direct_s(decode, chunks, k)
                    # one step comes as its seconds (StepRun.s(1) exactly: tested below)
                    s_k = times if isinstance(times, float) else times.s(k)
                    assert s_k == pytest.approx(direct, rel=1e-9)
                    self.checked += 1
        return plan

    def direct_s(self, decode, chunks, k: int) -> float:
        total = 0.0
        for j in range(k):
            tokens, attn, kv = 0, 0.0, 0
            for c in decode:  # one token against the whole context (grows by one)
                tokens += 1
                attn += c.prompt + c.generated + j
                kv += c.prompt + c.generated + j
            for c, n in chunks:  # a chunk of n after what was computed
                done = c.computed + j * n
                tokens += n
                attn += n * done + n * (n + 1) / 2
                kv += done + n
            total += roofline_step_s(tokens, attn, kv)
        return total


@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["vllm", "ttlpolicy", "vllm-offload"]),
    concurrency=st.integers(1, 8),
)
def test_cached_step_times_equal_fresh_ones(seed: int, policy: str, concurrency: int) -> None:
    from ttlpolicy.sim.workload import ConcurrencyArrivals

    hw = small_hw(3000)
    engine = StepTimeCheckedEngine(hw, make_policy(policy), CFG)
    engine.use_concurrency(ConcurrencyArrivals(swe_agent_programs(6, seed=seed), concurrency, 0))
    engine.run()
    assert engine.checked > 0


@given(
    tokens=st.lists(st.integers(0, 200_000), min_size=1, max_size=30),
    budget=st.sampled_from([CFG.token_budget, 512, 2048, 4000, 16384]),
)
def test_engine_view_prefill_s_is_the_hardware_s(tokens: list[int], budget: int) -> None:
    """The view memoises prefill times by token count (and its whole chunks by their count):
    each answer, asked in any order and again, is the hardware's own, to the last bit."""
    from ttlpolicy.sim.policies.vllm import VLLM

    policy = VLLM()
    Engine(HW, policy, EngineConfig(block_tokens=64, token_budget=budget, max_seqs=64))
    view = policy.view  # (the engine binds the policy to its view)
    assert view is not None
    for t in tokens + tokens[::-1] + [n * budget for n in range(4)]:
        assert view.prefill_s(t) == HW.prefill_s(t, budget)


def bisect_steps(times: StepRun, start_s: float, until_s: float, k: int) -> int:
    """The engine's search before ``StepRun.reach``: a plain bisection of [1, k]."""
    lo, hi = 1, k
    while lo < hi:
        mid = (lo + hi) // 2
        if start_s + times.s(mid) >= until_s:
            hi = mid
        else:
            lo = mid + 1
    return lo


@given(
    c=st.tuples(*[st.floats(0, 1e-3)] * 4),
    m=st.tuples(*[st.floats(0, 1e-3)] * 4),
    tokens=st.integers(0, 10_000),
    a0=st.floats(0, 1e9),
    da=st.floats(0, 1e7),
    k0=st.floats(0, 1e7),
    dk=st.floats(0, 1e4),
    k=st.integers(2, 400),
    start_s=st.floats(0, 1e6),
    fraction=st.floats(0, 1),
)
def test_reach_is_the_first_step_that_reaches(
    c, m, tokens, a0, da, k0, dk, k, start_s, fraction
) -> None:
    """The search from a guess finds what a bisection of [1, k] finds, and that is the first
    step count whose time reaches the target (non-negative lines: times never decrease)."""
    times = StepRun(StepModel(Line(*c), Line(*m)), tokens, a0, da, k0, dk)
    assert times.monotone
    until_s = start_s + times.s(k) * fraction
    j, s_j = times.reach(start_s, until_s, k, times.s(k))
    assert j == bisect_steps(times, start_s, until_s, k)
    assert s_j == times.s(j)
    assert start_s + s_j >= until_s
    assert j == 1 or start_s + times.s(j - 1) < until_s
    assert all(times.s(i) <= times.s(i + 1) for i in range(k))


@given(
    c=st.tuples(*[st.floats(-1e-3, 1e-3)] * 4),
    m=st.tuples(*[st.floats(-1e-3, 1e-3)] * 4),
    a0=st.floats(0, 1e9),
    da=st.floats(-1e5, 1e7),
    k=st.integers(2, 400),
    fraction=st.floats(0, 1),
)
def test_reach_bisects_when_times_may_fall(c, m, a0, da, k, fraction) -> None:
    """Lines that may fall: the answer is the bisection's, whatever it is."""
    times = StepRun(StepModel(Line(*c), Line(*m)), 100, a0, da, 1e5, 10)
    until_s = times.s(k) * fraction
    if times.s(k) >= until_s:
        assert times.reach(0.0, until_s, k, times.s(k))[0] == bisect_steps(times, 0.0, until_s, k)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 1e5, 1, 1e5, 1),  # decode: the memory line, nearly flat
        (8192, 3e7, 8192**2, 1e4, 8192),  # a long prefill: compute, growing fast
        (64, 1e3, 2e6, 1e3, 64),  # memory first, then compute: the lines cross
    ],
)
def test_reach_matches_bisection_everywhere(shape) -> None:
    """Every target between no step and k steps, on shapes where the guess is off (crossing
    lines) as well as where it is exact: the same answer as the bisection."""
    times = StepRun(HW.steps, *shape)
    for k in range(2, 70):
        s_k = times.s(k)
        for i in range(41):
            until_s = 10.0 + s_k * i / 40
            assert times.reach(10.0, until_s, k, s_k) == (
                bisect_steps(times, 10.0, until_s, k),
                times.s(bisect_steps(times, 10.0, until_s, k)),
            )
