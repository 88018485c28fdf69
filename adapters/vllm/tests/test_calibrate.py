"""Calibration on a real vLLM engine (CPU): a dummy-weight Llama built from a local config,
measured, fitted, written as a profile the simulator loads."""

from __future__ import annotations

from ttlpolicy_vllm.calibrate import (  # isort: skip
    EngineSettings,
    Shape,
    calibrate_llm,
    make_llm,
    usable_blocks,
    write_model_dir,
)

import json

from ttlpolicy.sim import load_profile, save_profile
from ttlpolicy.sim.profile import prefill_shape

TINY = Shape(2, 64, 2, 2, 32, 128, 512, "float32")


def test_calibrate_measures_the_engine_and_writes_a_loadable_profile(tmp_path) -> None:
    settings = EngineSettings(blocks=24, block_size=32, token_budget=256, max_seqs=4,
                              max_model_len=256)  # fmt: skip
    llm = make_llm(write_model_dir(tmp_path / "m", TINY), TINY, settings,
                   "vllm.v1.core.sched.scheduler.Scheduler")  # fmt: skip
    try:
        free = usable_blocks(llm)
        hw, record = calibrate_llm(llm, TINY, settings, "cpu", repeats=1)
        assert usable_blocks(llm) == free  # the engine is left idle, nothing held
    finally:
        llm.llm_engine.engine_core.shutdown()
    rows = record["rows"]
    assert all(r[3] > 0 for r in rows)
    shapes = {tuple(r[:3]) for r in rows}
    # Lone prefills at growing sizes: the attention term is the triangle of the chunk.
    lone = sorted(r[0] for r in rows if r[2] == r[0] and r[1] == r[0] * (r[0] + 1) / 2)
    assert len(lone) >= 3 and lone == sorted(set(lone))
    # The cached prefill really hit the engine's prefix cache: a 124-token prompt leaves 3
    # full blocks of 32; extended by 62 tokens, the second prompt's chunk starts after them.
    assert prefill_shape(124 + 62 - 96, 96) in shapes
    # Decode batches of 1 and 4 requests.
    assert {1.0, 4.0} <= {r[0] for r in rows if r[1] == r[2] and r[0] <= 4}
    assert hw.kv_capacity_blocks(32) == free
    assert record["engine"].startswith("vllm ")
    path = tmp_path / "profile.json"
    save_profile(path, hw, record)
    assert load_profile(path) == hw
    assert json.loads(path.read_text())["calibration"]["settings"]["blocks"] == 24
    # The fit describes what it was fitted on, roughly (a loaded, shared machine).
    assert 0 <= record["fit_mean_rel_error"] < 1.0
