"""Decode-only steps on a line of their own, and step times scattered as measured.

A CPU engine's step that prefills pays a fixed cost that a decode-only step does not (measured
on vLLM's CPU engine: ~20 ms against ~8 ms, bench/RESULTS.md "why the hit rate read low"), so
``fit_steps`` fits the two kinds apart and ``StepModel.decode`` prices decode-only steps.
``JitteredSteps`` multiplies each step time by a ratio drawn from measured ones.  The known
engines below are written out here, not taken from the code under test."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttlpolicy.sim import ProfileError, Program, Turn, load_profile, save_profile, simulate
from ttlpolicy.sim.hardware import (
    GPUSpec,
    Hardware,
    JitteredSteps,
    Line,
    ModelSpec,
    StepModel,
    StepRun,
    fit_line,
    fit_steps,
    step_ratios,
)
from ttlpolicy.sim.profile import FORMAT, FORMAT_ONE_LINE, decode_shape, prefill_shape

# A known engine: a step that prefills costs 20 ms + 130 us a token + 80 ps an attention unit;
# a decode-only step 8 ms + 0.8 us a KV token (its attention units equal its KV tokens).
PREFILL = Line(20e-3, 130e-6, 80e-12, 0.0, 0.0)
DECODE = Line(8e-3, 0.0, 0.4e-6, 0.4e-6, 0.0)
MODEL = ModelSpec("tiny", 2e7, 8, 512, 8, 8, 64, dtype_bytes=4)
DEVICE = GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10)


def true_s(shape: tuple[float, float, float, float]) -> float:
    tokens, attn, kv, seqs = shape
    line = DECODE if tokens == seqs else PREFILL
    return line.c0 + line.c_tok * tokens + line.c_attn * attn + line.c_kv * kv


def _shapes() -> list[tuple[float, float, float, float]]:
    shapes = [prefill_shape(n) for n in (64, 128, 256, 384, 512)]
    shapes += [prefill_shape(200, 600), prefill_shape(512, 1024)]
    shapes += [
        decode_shape([c] * b) for b, c in ((1, 300), (2, 900), (3, 500), (1, 1400), (4, 1200))
    ]
    return shapes


def test_fit_steps_recovers_both_kinds_where_one_line_cannot() -> None:
    rows = [(*s, true_s(s)) for s in _shapes()]
    model = fit_steps(rows, relative=False)
    assert model.decode is not None
    probes = [prefill_shape(300), prefill_shape(100, 800), decode_shape([700, 650, 10])]
    for shape in probes:
        assert model.step_s(*shape) == pytest.approx(true_s(shape), rel=1e-6)
    # One line through both kinds is off by more than 5 % on some step (what a replay fit was).
    one = fit_line(rows, relative=False)
    assert max(abs(one.at(*s) - true_s(s)) / true_s(s) for s in _shapes()) > 0.05


def test_fit_steps_keeps_one_line_without_enough_rows_of_a_kind() -> None:
    shapes = [prefill_shape(n) for n in (64, 128, 256, 384, 512)] + [decode_shape([300] * 2)]
    rows = [(*s, true_s(s)) for s in shapes]
    model = fit_steps(rows)
    assert model.decode is None
    assert model.compute == model.memory == fit_line(rows)


def test_without_a_decode_line_every_step_takes_the_larger_line() -> None:
    compute, memory = Line(1e-3, 2e-5, 0.0, 0.0, 0.0), Line(4e-3, 0.0, 0.0, 1e-6, 0.0)
    model = StepModel(compute, memory)
    for shape in (decode_shape([100] * 3), prefill_shape(50), prefill_shape(400, 100)):
        assert model.step_s(*shape) == max(compute.at(*shape), memory.at(*shape))


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 16),
    context=st.integers(1, 4000),
    k=st.integers(1, 40),
)
def test_a_decode_run_sums_its_steps_on_the_decode_line(batch: int, context: int, k: int) -> None:
    model = StepModel(PREFILL, PREFILL, DECODE)
    ctx = batch * context
    run = StepRun(model, batch, ctx, batch, ctx, batch, batch)
    want = sum(true_s((batch, ctx + j * batch, ctx + j * batch, batch)) for j in range(k))
    assert run.s(k) == pytest.approx(want, rel=1e-9)


def test_the_engine_prices_a_lone_call_step_by_step() -> None:
    """One call of 400 prompt tokens and 6 output tokens, token budget 512: one prefill step
    (its first token), then 5 decode steps at contexts 401..405 (vLLM holds the KV of all but
    the last token)."""
    kv_bytes = 64 * 32 * MODEL.kv_bytes_per_token
    hw = Hardware(MODEL, DEVICE, StepModel(PREFILL, PREFILL, DECODE), kv_bytes)
    prog = Program("p", (Turn(400, 6, 0, 0.0, None),))
    m = simulate(hw, "vllm", [prog], concurrency=1)
    want = true_s(prefill_shape(400)) + sum(true_s(decode_shape([c])) for c in range(401, 406))
    assert m.summary()["jct_mean_s"] == pytest.approx(want, rel=1e-9)


def test_jitter_of_ones_changes_nothing() -> None:
    base = StepModel(PREFILL, PREFILL, DECODE)
    jittered = JitteredSteps(base, [1.0], [1.0, 1.0], seed=3)
    for shape in (*_shapes(), prefill_shape(1)):
        assert jittered.step_s(*shape) == base.step_s(*shape)
    run = (3, 900.0, 3, 900.0, 3, 3)
    assert StepRun(jittered, *run).s(7) == StepRun(base, *run).s(7)


def test_jitter_draws_each_kind_from_its_own_ratios() -> None:
    base = StepModel(PREFILL, PREFILL, DECODE)
    jittered = JitteredSteps(base, [2.0], [0.5], seed=0)
    dec, pre = decode_shape([500, 300]), prefill_shape(256, 100)
    assert jittered.step_s(*dec) == pytest.approx(2.0 * true_s(dec), rel=1e-12)
    assert jittered.step_s(*pre) == pytest.approx(0.5 * true_s(pre), rel=1e-12)
    # a run of decode steps draws once, for the whole run
    run = (2, 800.0, 2, 800.0, 2, 2)
    assert StepRun(jittered, *run).s(5) == pytest.approx(2.0 * StepRun(base, *run).s(5))


def test_jitter_is_seeded_and_averages_to_the_model() -> None:
    base = StepModel(PREFILL, PREFILL, DECODE)
    ratios = [0.7, 0.9, 1.0, 1.1, 1.3]
    shape = prefill_shape(300)
    draws = [JitteredSteps(base, ratios, ratios, seed=s).step_s(*shape) for s in range(400)]
    again = [JitteredSteps(base, ratios, ratios, seed=s).step_s(*shape) for s in range(400)]
    assert draws == again
    assert len(set(draws)) == len(ratios)
    assert sum(draws) / len(draws) == pytest.approx(true_s(shape), rel=0.03)


def test_jitter_refuses_empty_or_negative_ratios() -> None:
    base = StepModel(PREFILL, PREFILL)
    with pytest.raises(ValueError, match="at least one ratio"):
        JitteredSteps(base, [], [1.0], seed=0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        JitteredSteps(base, [1.0], [-0.5], seed=0)


def test_step_ratios_are_measured_over_modelled_each_kind_of_mean_one() -> None:
    base = StepModel(PREFILL, PREFILL, DECODE)
    rng = random.Random(1)
    dec_f = [rng.uniform(0.8, 1.4) for _ in range(6)]
    pre_f = [rng.uniform(0.9, 1.2) for _ in range(5)]
    decs = [decode_shape([100 * (i + 1)] * (i + 1)) for i in range(6)]
    pres = [prefill_shape(64 * (i + 1)) for i in range(5)]
    rows = [(*s, f * true_s(s)) for s, f in zip(decs, dec_f, strict=True)]
    rows += [(*s, f * true_s(s)) for s, f in zip(pres, pre_f, strict=True)]
    decode_ratios, other_ratios = step_ratios(base, rows)
    mean_d, mean_p = sum(dec_f) / 6, sum(pre_f) / 5
    assert decode_ratios == pytest.approx([f / mean_d for f in dec_f])
    assert other_ratios == pytest.approx([f / mean_p for f in pre_f])
    assert step_ratios(base, rows[:6]) == (pytest.approx(decode_ratios), [1.0])


def test_a_jittered_simulation_of_ones_is_the_deterministic_one() -> None:
    kv_bytes = 60 * 32 * MODEL.kv_bytes_per_token
    hw = Hardware(MODEL, DEVICE, StepModel(PREFILL, PREFILL, DECODE), kv_bytes)
    progs = [
        Program(f"p{i}", tuple(Turn(300 + 150 * t, 8, 0 if t == 0 else (300 + 150 * t - 150) // 32,
                                    0.2 * t, "bash") for t in range(4)))
        for i in range(4)
    ]  # fmt: skip
    plain = simulate(hw, "vllm", progs, concurrency=4).summary()
    ones = Hardware(MODEL, DEVICE, JitteredSteps(hw.steps, [1.0], [1.0], seed=9), kv_bytes)
    assert simulate(ones, "vllm", progs, concurrency=4).summary() == plain


def test_a_decode_line_round_trips_as_format_3(tmp_path) -> None:
    kv_bytes = 40 * 32 * MODEL.kv_bytes_per_token
    hw = Hardware(MODEL, DEVICE, StepModel(PREFILL, PREFILL, DECODE), kv_bytes)
    path = tmp_path / "p.json"
    save_profile(path, hw)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT == "ttlpolicy-hardware-profile/3"
    assert load_profile(path) == hw
    one = Hardware(MODEL, DEVICE, StepModel(PREFILL, PREFILL), kv_bytes)
    save_profile(path, one)
    assert json.loads(path.read_text())["format"] == FORMAT_ONE_LINE  # what /2 readers load
    assert load_profile(path) == one


def test_a_bad_decode_line_names_the_field(tmp_path) -> None:
    kv_bytes = 40 * 32 * MODEL.kv_bytes_per_token
    path = tmp_path / "p.json"
    save_profile(path, Hardware(MODEL, DEVICE, StepModel(PREFILL, PREFILL, DECODE), kv_bytes))
    data = json.loads(path.read_text())
    data["step_s"]["decode"]["c0"] = -1.0
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=r"step_s\.decode\.c0 must be .*-1\.0"):
        load_profile(path)
