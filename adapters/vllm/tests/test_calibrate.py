"""Calibration on a real vLLM engine (CPU): a dummy-weight Llama built from a local config,
measured, fitted, written as a profile the simulator loads."""

from __future__ import annotations

from vllm_calibrate import (  # isort: skip
    EngineSettings,
    Shape,
    StepRecorder,
    calibrate_llm,
    make_llm,
    usable_blocks,
    write_model_dir,
)

import json

import pytest

from ttlpolicy.sim import load_profile, save_profile
from ttlpolicy.sim.profile import prefill_shape, step_shape

pytestmark = pytest.mark.engine  # (calibration measures a running engine)

TINY = Shape(2, 64, 2, 2, 32, 128, 512, "float32")
SETTINGS = EngineSettings(blocks=24, block_size=32, token_budget=256, max_seqs=4, max_model_len=256)


def test_calibrate_measures_the_engine_and_writes_a_loadable_profile(tmp_path) -> None:
    llm = make_llm(write_model_dir(tmp_path / "m", TINY), TINY, SETTINGS,
                   "vllm.v1.core.sched.scheduler.Scheduler")  # fmt: skip
    try:
        free = usable_blocks(llm)
        hw, record = calibrate_llm(llm, TINY, SETTINGS, "cpu", repeats=1)
        assert usable_blocks(llm) == free  # the engine is left idle, nothing held
    finally:
        llm.llm_engine.engine_core.shutdown()
    rows = record["rows"]
    assert all(r[4] > 0 for r in rows)
    shapes = {tuple(r[:4]) for r in rows}
    # Lone prefills at growing sizes: the attention term is the triangle of the chunk, one
    # sequence in the step.
    lone = sorted(
        r[0] for r in rows if r[2] == r[0] and r[1] == r[0] * (r[0] + 1) / 2 and r[3] == 1
    )
    assert len(lone) >= 3 and lone == sorted(set(lone))
    # The cached prefill really hit the engine's prefix cache: a 124-token prompt leaves 3
    # full blocks of 32; extended by 62 tokens, the second prompt's chunk starts after them.
    assert prefill_shape(124 + 62 - 96, 96) in shapes
    # and a short chunk after a long prefix: 186 tokens cache 5 blocks, extended by 16
    assert prefill_shape(186 + 16 - 160, 160) in shapes
    # Prompts prefilled together in one step: the same tokens as one prompt of their sum,
    # as many sequences as prompts (limit 248: 2 × 62, 4 × 31; max_seqs 4 stops at 4).
    assert step_shape([(62, 0)] * 2) in shapes and step_shape([(31, 0)] * 4) in shapes
    assert max(r[3] for r in rows if r[1] != r[2]) == 4  # (decodes have attn == kv)
    # Decode batches of 1 and 4 requests: a token and a sequence each.
    assert {1.0, 4.0} <= {r[0] for r in rows if r[1] == r[2] and r[0] == r[3] and r[0] <= 4}
    assert hw.kv_capacity_blocks(32) == free
    assert record["engine"].startswith("vllm ")
    path = tmp_path / "profile.json"
    save_profile(path, hw, record)
    assert load_profile(path) == hw
    assert json.loads(path.read_text())["calibration"]["settings"]["blocks"] == 24
    # The fit describes what it was fitted on, roughly (a loaded, shared machine).
    assert 0 <= record["fit_mean_rel_error"] < 1.0


def test_step_recorder_records_each_step_with_the_simulator_shape(tmp_path) -> None:
    """A replay's own steps as calibration rows: two prompts submitted together are prefilled
    in one step of two sequences (the sum of their ``prefill_shape``s), then each decode step
    has the shape of ``decode_shape`` over both contexts; each step's chunks are kept, and the
    model executor's share of a step is part of that step's time."""
    from vllm import SamplingParams

    from ttlpolicy.sim.profile import decode_shape

    llm = make_llm(write_model_dir(tmp_path / "m", TINY), TINY, SETTINGS,
                   "vllm.v1.core.sched.scheduler.Scheduler")  # fmt: skip
    try:
        recorder = StepRecorder(llm)
        engine = llm.llm_engine
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        # 100 and 60 tokens: one chunk each within the token budget of 256
        engine.add_request("r0", {"prompt_token_ids": list(range(3, 103))}, params)
        engine.add_request("r1", {"prompt_token_ids": list(range(200, 260))}, params)
        while engine.has_unfinished_requests():
            recorder.step(engine)
    finally:
        llm.llm_engine.engine_core.shutdown()
    shapes = [tuple(r[:4]) for r in recorder.rows]
    # one prefill step (it samples the first tokens), then a decode step per further token:
    # the k-th reads each prompt and the k tokens generated before it
    prefill = tuple(a + b for a, b in zip(prefill_shape(100), prefill_shape(60), strict=True))
    assert prefill[3] == 2
    assert shapes == [prefill] + [decode_shape([100 + k, 60 + k]) for k in (1, 2, 3)]
    # a decode is a chunk of one after all but the newest token
    decodes = [[(1, 99 + k), (1, 59 + k)] for k in (1, 2, 3)]
    assert recorder.chunks == [[(100, 0), (60, 0)], *decodes]
    assert len(recorder.model_s) == len(recorder.rows)
    assert all(0 < m <= r[4] for m, r in zip(recorder.model_s, recorder.rows, strict=True))
    assert len(recorder.cpu_s) == len(recorder.rows) and all(c > 0 for c in recorder.cpu_s)
