"""``bench/fidelity.py``'s simulator side: each call's record adds up to the run's figures,
and step-time scatter of ratio 1 is the deterministic run (no engine needed)."""

from __future__ import annotations

import pytest


@pytest.fixture
def fidelity(bench):
    return bench("fidelity")


def _setup(fidelity):
    from ttlpolicy.sim.hardware import GPUSpec, Hardware, Line, ModelSpec, StepModel

    args = fidelity.parse_args(["--workload", "contended-long"])
    settings = fidelity.settings_from(args)
    sessions = fidelity.load_sessions(args.programs, args.turns, args.max_context,
                                      args.max_out, args.time_scale, args.max_gap_s)  # fmt: skip
    programs = fidelity.sim_programs(sessions, settings.block_size)
    model = ModelSpec("tiny", 2e7, 8, 512, 8, 8, 64, dtype_bytes=4)
    prefill, decode = Line(20e-3, 130e-6, 80e-12, 0.0, 0.0), Line(8e-3, 0.0, 4e-7, 4e-7, 0.0)
    kv = float(args.blocks * settings.block_size * model.kv_bytes_per_token)
    hw = Hardware(
        model, GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10), StepModel(prefill, prefill, decode), kv
    )
    return args, settings, programs, hw


def test_each_call_is_recorded_and_they_add_up_to_the_hit_rate(fidelity) -> None:
    args, settings, programs, hw = _setup(fidelity)
    calls: list[dict] = []
    out = fidelity.replay_sim(hw, "vllm", programs, settings, calls)
    assert len(calls) == sum(len(p.turns) for p in programs) == args.programs * args.turns
    assert sum(c["cached"] for c in calls) / sum(c["prompt"] for c in calls) == pytest.approx(
        out["hit_rate"], abs=1e-12
    )
    for c in calls:
        assert c["issue_s"] <= c["admit_s"] <= c["first_s"] <= c["finish_s"]
        assert 0 <= c["cached"] < c["prompt"]


def test_scatter_of_ratio_one_is_the_deterministic_run(fidelity) -> None:
    _, settings, programs, hw = _setup(fidelity)
    from ttlpolicy.sim.profile import decode_shape, prefill_shape

    shapes = [prefill_shape(n) for n in (100, 300, 512)] + [decode_shape([400] * 3)]
    rows = [(*s, hw.steps.step_s(*s)) for s in shapes]  # measured exactly as modelled
    plain = fidelity.replay_sim(hw, "vllm", programs, settings)
    jittered = fidelity.replay_sim_jittered(hw, "vllm", programs, settings, rows, 3)
    assert jittered["seeds"] == 3 and jittered["hit_rate_sd"] == 0.0
    for k, v in plain.items():
        assert jittered[k] == pytest.approx(v, rel=1e-12, abs=1e-12)


def test_scatter_moves_the_hit_rate_and_its_mean_is_reported(fidelity) -> None:
    """With the scatter a CPU engine's steps have (±15 %), seeds give different hit rates;
    the reported figure is their mean."""
    _, settings, programs, hw = _setup(fidelity)
    from ttlpolicy.sim.profile import decode_shape, prefill_shape

    shapes = [prefill_shape(n) for n in (100, 300, 512)] * 2 + [decode_shape([400] * 3)] * 2
    factors = [0.85, 1.0, 1.15, 1.2, 0.8, 1.0, 0.9, 1.1]
    rows = [(*s, f * hw.steps.step_s(*s)) for s, f in zip(shapes, factors, strict=True)]
    per_seed: list[list[dict]] = []
    out = fidelity.replay_sim_jittered(hw, "vllm", programs, settings, rows, 4, per_seed)
    hits = [sum(c["cached"] for c in calls) / sum(c["prompt"] for c in calls) for calls in per_seed]
    assert len(set(hits)) > 1
    assert out["hit_rate"] == pytest.approx(sum(hits) / 4, rel=1e-12)
