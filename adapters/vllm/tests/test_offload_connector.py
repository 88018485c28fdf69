"""Both plug-ins together, by configuration only, in vLLM's real scheduler: ``TTLScheduler``
(``scheduler_cls``) with the real ``OffloadingConnector`` (``kv_transfer_config``) whose CPU
tier runs ``TTLCachePolicy`` (``eviction_policy`` + ``cache_policy_module_path``).

vLLM refuses CPU offloading on a CPU engine, so the scheduler is built bare (its model config
from the tiny model's config.json) and this test plays the model runner and the connector's
worker side: it samples tokens and reports every store job complete after each step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ttlpolicy_vllm import TTLScheduler, program_hints
from ttlpolicy_vllm.offload import TTLCachePolicy
from ttlpolicy_vllm.tier import offloaded_prefix_tokens
from vllm_engine import BLOCK, TEST_POLICY

NUM_BLOCKS = 25


def bare_scheduler(model_dir: Path, extra: dict[str, Any] | None) -> Any:
    import torch
    from vllm.config import (
        CacheConfig,
        KVTransferConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.output import SchedulerOutput  # noqa: F401 - import check
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, dtype="float32", max_model_len=512
    )
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
    cache.num_gpu_blocks = NUM_BLOCKS
    config = VllmConfig(
        model_config=model,
        cache_config=cache,
        scheduler_config=SchedulerConfig(
            max_num_seqs=8,
            max_num_batched_tokens=512,
            max_model_len=512,
            is_encoder_decoder=False,
            scheduler_cls="ttlpolicy_vllm.TTLScheduler",
        ),
        kv_transfer_config=None
        if extra is None  # (no connector at all)
        else KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"cpu_bytes_to_use": 1 << 22} | extra,
        ),
    )
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=2, head_size=32, dtype=torch.float32)
    layers = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    kv = KVCacheConfig(
        num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(layers, spec)]
    )
    cls = config.scheduler_config.get_scheduler_cls()
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
    )


def make_request(rid: str, prompt: list[int], max_tokens: int, **xargs: Any) -> Any:
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256_cbor)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=xargs or None)
    return Request(
        rid, prompt, params, None, block_hasher=get_request_block_hasher(BLOCK, sha256_cbor)
    )


def run_until_finished(sched: Any, rid: str, max_steps: int = 200) -> None:
    """Play the model runner (token 7 each step) and the connector's workers (every
    store/load job submitted so far completes at the end of the step)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

    side = sched.connector.connector_scheduler
    finished_at = None
    for step in range(max_steps):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        done = OffloadingWorkerMetadata(completed_jobs={j: 1 for j in list(side._jobs)})
        runner = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids],
            kv_connector_output=KVConnectorOutput(kv_connector_worker_meta=done),
        )
        sched.update_from_output(out, runner)
        if rid not in sched.requests and finished_at is None:
            finished_at = step
        # a few more steps: stores submitted at the finish complete, then the connector
        # tells the tier the request finished
        if finished_at is not None and step >= finished_at + 3:
            return
    raise AssertionError(f"{rid} did not finish")


@pytest.fixture(scope="module")
def sched(tiny_model: Path) -> Any:
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    mp.setenv("TTLPOLICY_OFFLOAD", '{"refit_every": 1, "chunk_tokens": 32}')
    try:
        yield bare_scheduler(
            tiny_model,
            {
                "eviction_policy": "TTLCachePolicy",
                "cache_policy_module_path": "ttlpolicy_vllm.offload",
            },
        )
    finally:
        mp.undo()


def test_both_plug_ins_load_by_configuration(sched):
    assert isinstance(sched, TTLScheduler)
    policy = sched.connector.connector_scheduler.manager._policy
    assert isinstance(policy, TTLCachePolicy)
    assert policy.settings.chunk_tokens == 32  # TTLPOLICY_OFFLOAD reached the tier
    # a lost context reloads from the tier: returning calls go by attained service
    assert sched.programs.serve_order == "attained"


def test_tier_sees_the_program_and_the_pin_sees_the_tier(sched):
    policy = sched.connector.connector_scheduler.manager._policy
    program_hints.clear()
    prompt = [3 + (i * 5) % 200 for i in range(201)]
    first = make_request("t1", prompt, 24, program_id="prog", tool="bash")
    sched.add_request(first)
    run_until_finished(sched, "t1")
    # the connector stored the turn's chunks in the CPU tier, through our policy
    assert len(policy.chunks) >= 6
    assert policy.model.accesses == 1  # the request's chunks in prefix order: one access
    # the pin decision saw the prefix already offloaded (complete stores before the finish)
    # (201 prompt tokens and the first outputs fill 6 blocks before the last step; the tier
    # holds what the connector stored, and the lookup the pin used agrees with it now)
    offloaded = sched.ttl_metrics.offloaded_tokens_at_finish
    assert offloaded == offloaded_prefix_tokens(sched.connector, first) == 6 * BLOCK
    # the program waits on a tool: its chunks rank after every other group's until then
    assert sched.programs.pin_count == 1
    assert policy._waiting, "the scheduler's note did not reach the tier"
    assert program_hints.size() == 0
    # the last turn: the program ends, the tier moves its chunks to the front of eviction
    ctx = prompt + [7] * 24 + [9] * 20
    second = make_request("t2", ctx, 4, program_id="prog", last_turn=True)
    sched.add_request(second)
    run_until_finished(sched, "t2")
    assert sched.programs.pin_count == 0 and sched.pins.held_blocks() == 0
    assert policy._ended and not policy._waiting
    assert policy.model.accesses == 2
    evicted = policy.evict(1, set())
    assert evicted is not None and policy.expired_evictions == 1  # an ended program's chunk


def test_without_a_connector_returning_calls_stay_in_program_order(tiny_model):
    sched = bare_scheduler(tiny_model, None)
    assert sched.programs.serve_order == "program"


def test_without_a_connector_nothing_is_offloaded():
    class NoConnector:
        pass

    assert offloaded_prefix_tokens(None, object()) == 0
    assert offloaded_prefix_tokens(NoConnector(), object()) == 0
