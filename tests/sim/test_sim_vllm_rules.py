"""The simulator's engine follows vLLM v1's prefix-cache rules (vLLM 0.32.0), each stated
here with the vLLM source line it comes from, on scenarios small enough to count by hand.
``adapters/vllm/tests/test_fidelity_logic.py`` checks the same against the real scheduler."""

from __future__ import annotations

from sim_hardware import hw_blocks
from ttlpolicy.sim import Engine, EngineConfig, Program, Turn

BLOCK = 16
CFG = EngineConfig(block_tokens=BLOCK, token_budget=4096, max_seqs=8)


def run(blocks: int, programs: list[tuple[float, Program]]) -> tuple[Engine, int]:
    engine = Engine(hw_blocks(blocks), _policy(), CFG)
    engine.add_programs(programs)
    m = engine.run()
    engine.kv.check()
    return engine, m.hit_tokens


def _policy():  # stock vLLM: FCFS, freed blocks to the LRU free queue
    from ttlpolicy.sim.policies import make_policy

    return make_policy("vllm")


def test_generated_tokens_full_blocks_are_cached() -> None:
    # vLLM caches every full block of computed tokens, output included:
    # KVCacheManager.allocate_slots caches min(computed + new, request.num_tokens) tokens
    # (vllm/v1/core/kv_cache_manager.py, "num_tokens_to_cache").  A call of 64 prompt tokens
    # and 40 output tokens leaves KV for 64 + 40 - 1 = 103 tokens: 6 full blocks, so the next
    # call (the whole context + 10 new tokens) hits 96 tokens, not the prompt's 64.
    first = Turn(64, 40, 0, 0.0, "bash")
    ctx = 64 + 40 + 10
    second = Turn(ctx, 4, (64 + 40 - 1) // BLOCK, 1.0, None)
    _, hits = run(100, [(0.0, Program("A", (first, second)))])
    assert hits == 96


def test_a_finished_programs_blocks_stay_cached_and_evict_after_older_ones() -> None:
    # vLLM frees a finished request's cached blocks to the END of its free queue
    # (BlockPool.free_blocks appends hashed blocks, vllm/v1/core/block_pool.py,
    # "blocks_to_evict_last"), so they stay cached and are evicted after every block freed
    # before them, whether or not their program will ever return.  Here: 12 blocks.  B's
    # first call leaves a 4-block chain (t ~ 0); A, a one-call program, leaves 4 blocks at
    # t = 1 s; C needs 6 blocks at t = 2 s: 4 are free, so 2 must go, and the least recently
    # freed are B's (its tail first).  B returns at t = 3 s and hits its first 2 blocks only.
    # (Dropping A's blocks at once would leave 8 free: B would keep all 4.)
    b_first = Turn(64, 1, 0, 0.0, "bash")
    b_second = Turn(64 + 1 + 15, 1, 4, 3.0, None)
    a_only = Turn(64, 1, 0, 0.0, None)
    c_only = Turn(96, 1, 0, 0.0, None)
    _, hits = run(
        12,
        [
            (0.0, Program("B", (b_first, b_second))),
            (1.0, Program("A", (a_only,))),
            (2.0, Program("C", (c_only,))),
        ],
    )
    assert hits == 2 * BLOCK


def test_a_fully_cached_prompt_recomputes_its_last_block() -> None:
    # The last prompt token must be computed (its logits), and vLLM recomputes its whole
    # block: KVCacheManager.get_computed_blocks looks hits up to num_tokens - 1 tokens, in
    # whole blocks (vllm/v1/core/kv_cache_manager.py, "max_cache_hit_length").  A call that
    # sends the same 96 tokens again (6 blocks, all cached) hits 80 tokens, not 95.
    first = Turn(96, 1, 0, 0.0, "bash")
    again = Turn(96, 1, 96 // BLOCK, 1.0, None)
    engine, hits = run(100, [(0.0, Program("A", (first, again)))])
    assert hits == 80
    assert engine.metrics.prefill_tokens == 96 + 16
