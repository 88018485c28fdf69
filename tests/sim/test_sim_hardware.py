"""Presets, KV sizing, calibration and open-loop replay."""

from __future__ import annotations

import pytest

from ttlpolicy.sim import Program, Turn, calibrate, roofline, simulate
from ttlpolicy.sim.hardware import GPUS, MODELS


def test_kv_bytes_follow_the_model_config() -> None:
    # Llama-3.1-8B: 32 layers, 8 KV heads of 128, bf16, K and V → 128 KiB per token.
    assert MODELS["llama-3.1-8b"].kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert MODELS["llama-3.1-70b"].kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_kv_capacity_is_memory_left_after_weights() -> None:
    hw = roofline("llama-3.1-70b", "h100-80g", memory_utilization=0.9)
    free = 4 * 80e9 * 0.9 - 70.6e9 * 2
    assert hw.kv_capacity_blocks(64) == int(free // (64 * 2 * 80 * 8 * 128 * 2))
    with pytest.raises(ValueError, match="does not fit"):
        roofline(
            MODELS["llama-3.1-70b"].__class__("big", 70.6e9, 80, 8192, 64, 8, 128, tp=1),
            GPUS["a100-80g"],
        )


def test_bigger_gpus_step_faster() -> None:
    shape = (4096, 4096 * 30000.0, 34096)
    times = [
        roofline("llama-3.1-8b", g).steps.step_s(*shape) for g in ("a100-80g", "h100-80g", "b200")
    ]
    assert times == sorted(times, reverse=True)


def test_calibrate_recovers_a_linear_step_model() -> None:
    hw = roofline("llama-3.1-8b", "h100-80g")
    truth = (0.003, 2e-5, 1e-9, 5e-8, 4e-4)

    def true_s(tokens: float, attn: float, kv: float, seqs: float) -> float:
        return truth[0] + truth[1] * tokens + truth[2] * attn + truth[3] * kv + truth[4] * seqs

    shapes = [
        (1, 1e5, 1e5, 1),
        (64, 6e6, 6e5, 64),
        (2048, 4e7, 3e4, 1),
        (8192, 1e8, 9e4, 2),
        (300, 1e6, 2e6, 30),
        (16, 4e5, 4e5, 16),
    ]
    cal = calibrate(hw, [(*s, true_s(*s)) for s in shapes])
    assert cal.steps.step_s(1000, 5e6, 1e5, 7) == pytest.approx(true_s(1000, 5e6, 1e5, 7))
    with pytest.raises(ValueError, match="5 rows"):
        calibrate(hw, [(*s, true_s(*s)) for s in shapes[:4]])
    with pytest.raises(ValueError, match=r"\(tokens, attn, kv, seqs, seconds\)"):
        calibrate(hw, [(*s[:3], true_s(*s)) for s in shapes])  # no sequence count


def test_open_loop_requests_are_issued_at_their_time() -> None:
    hw = roofline("llama-3.1-8b", "h100-80g")
    progs = [Program(f"r{i}", (Turn(1000, 1, 0, 0.0, None),), issue_s=10.0 * i) for i in range(3)]
    m = simulate(hw, "vllm", progs, open_loop=True)
    assert [m.program_start_s[f"r{i}"] for i in range(3)] == [0.0, 10.0, 20.0]
    alone = hw.prefill_s(1000, 8192)
    assert m.ttfts_s == [pytest.approx(alone, rel=1e-9)] * 3
