"""Programs without ids, on a real vLLM engine (CPU): with ``TTLPOLICY_INFER_PROGRAMS=1`` a
client that names no program (an unmodified OpenAI client) still gets its context pinned
across a tool call: the next call continues the previous prompt, and the adapter links it.
Stock vLLM evicts the same context in the same scenario (tests/test_engine.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_engine import FILLER, NUM_BLOCKS, TURN1_OUT, TURN1_PROMPT, Prompts, context_of

from vllm_engine import BLOCK, TEST_POLICY, Engine, make_engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]


@pytest.fixture(scope="module")
def engine(tiny_model) -> Iterator[Engine]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.75")
    mp.setenv("TTLPOLICY_INFER_PROGRAMS", "1")
    e = make_engine(tiny_model, "ttlpolicy_vllm.TTLScheduler", NUM_BLOCKS)
    mp.undo()
    yield e
    e.llm.llm_engine.engine_core.shutdown()


def test_three_sessions_without_ids_find_their_contexts(engine) -> None:
    """Three chat sessions, no id in any request, each turn appending to its history; two
    fillers need the memory between turns.  Every later turn finds its whole history."""
    sched = engine.scheduler
    assert sched.inferred is not None
    prompts = [Prompts(engine, 100 + i) for i in range(3)]
    histories = [p(TURN1_PROMPT // 3) for p in prompts]
    hits: list[tuple[int, int]] = []
    for turn in range(3):
        for i, p in enumerate(prompts):
            out = engine.turn(histories[i], TURN1_OUT // 3, cache_salt="tenant-a")
            if turn > 0:
                hits.append((out.num_cached_tokens, ((len(histories[i]) - 1) // BLOCK) * BLOCK))
            histories[i] = context_of(histories[i], out) + p(10)  # a tool result appended
            assert engine.clock is not None
            engine.clock.advance(1.0)
        engine.turn(Prompts(engine, 900 + turn)(FILLER), 8)  # memory pressure in between
    stats = sched.ttl_stats()
    assert stats["calls_linked"] == 6 and stats["calls_new_program"] == 3 + 3  # + 3 fillers
    assert stats["calls_forked"] == 0
    assert hits and all(hit >= whole - BLOCK for hit, whole in hits), hits
    assert stats["pinned_prefix_hits"] >= 6
