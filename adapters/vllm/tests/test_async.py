"""TTLScheduler follows the engine's scheduling mode: the AsyncScheduler-based variant when
async scheduling is on (vLLM's default on GPUs: the next step is scheduled while the current
one runs), the plain one otherwise; both pin a program's context on a real CPU engine.

vLLM's CPU platform turns async scheduling off; the async engine here turns it back on after
that hook (the engine then runs its batch queue, as on a GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler

from ttlpolicy_vllm import TTLAsyncScheduler, TTLScheduler
from vllm_engine import TEST_POLICY, Engine, build_tiny_model, make_engine

NUM_BLOCKS = 25
PROMPT, OUT = 201, 24  # 224 tokens with KV: 7 full blocks of 32


def _engine(model: Any, scheduler_cls: str, async_on: bool) -> Engine:
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.75")
    if async_on:
        from vllm.platforms import current_platform

        platform = type(current_platform)
        hook = platform.check_and_update_config.__func__

        def async_after_hook(cls: Any, vllm_config: Any) -> None:
            hook(cls, vllm_config)
            vllm_config.scheduler_config.async_scheduling = True

        mp.setattr(platform, "check_and_update_config", classmethod(async_after_hook))
    try:
        return make_engine(model, scheduler_cls, NUM_BLOCKS)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    model = build_tiny_model(tmp_path_factory.mktemp("tiny-llama-async"))
    made = {
        "sync": _engine(model, "ttlpolicy_vllm.TTLScheduler", async_on=False),
        "async": _engine(model, "ttlpolicy_vllm.TTLScheduler", async_on=True),
        "forced": _engine(model, "ttlpolicy_vllm.TTLAsyncScheduler", async_on=False),
    }
    yield made
    for e in made.values():
        e.llm.llm_engine.engine_core.shutdown()


@pytest.mark.slow
@pytest.mark.engine
def test_the_class_follows_the_engines_mode(engines):
    sync, async_ = engines["sync"], engines["async"]
    assert type(sync.scheduler) is TTLScheduler and not isinstance(sync.scheduler, AsyncScheduler)
    assert sync.core.batch_queue is None
    assert type(async_.scheduler) is TTLAsyncScheduler
    assert isinstance(async_.scheduler, AsyncScheduler)
    assert async_.core.batch_queue is not None  # the engine overlaps scheduling and execution
    assert type(engines["forced"].scheduler) is TTLAsyncScheduler


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.parametrize("mode", ["sync", "async", "forced"])
def test_a_pinned_turn_is_hit_by_the_next_one_in_each_mode(engines, mode):
    engine = engines[mode]
    sched = engine.scheduler
    prompt = [3 + (i * 7) % 200 for i in range(PROMPT)]
    out1 = engine.turn(prompt, OUT, program_id=f"p-{mode}", tool="bash")
    assert len(out1.outputs[0].token_ids) == OUT
    pinned = sched.pins.held_blocks()
    assert pinned == 7  # every full block with KV, in each mode
    engine.clock.advance(1.0)
    ctx = prompt + list(out1.outputs[0].token_ids) + [5] * 20
    out2 = engine.turn(ctx, 4, program_id=f"p-{mode}", last_turn=True)
    assert out2.num_cached_tokens == 32 * pinned  # the whole pinned prefix was hit
    stats = sched.ttl_stats()
    assert stats["pins"] == 1 and stats["pinned_prefix_hits"] == 1
    assert sched.pins.held_blocks() == 0 and sched.programs.pin_count == 0
    assert engine.free_blocks() == NUM_BLOCKS - 1
    # outputs came back for every step but at most the batch queue's last (an idle step)
    assert len(sched._steps_in_flight) <= (0 if mode == "sync" else 2)


def test_new_picks_the_variant_from_the_config_only_for_the_base_class():
    class Config:
        class scheduler_config:  # mimics vllm_config.scheduler_config
            async_scheduling = True

    assert type(TTLScheduler.__new__(TTLScheduler, vllm_config=Config())) is TTLAsyncScheduler
    Config.scheduler_config.async_scheduling = False
    assert type(TTLScheduler.__new__(TTLScheduler, Config())) is TTLScheduler
    # naming the async variant keeps it whatever the config says
    assert type(TTLScheduler.__new__(TTLAsyncScheduler, Config())) is TTLAsyncScheduler
