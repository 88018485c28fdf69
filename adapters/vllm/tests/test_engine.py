"""TTLScheduler inside a real vLLM engine (CPU), against stock vLLM in the same run.

The KV cache is made small (24 blocks of 32 tokens) so that two other requests arriving
during a program's tool call need the memory its finished turn left behind: stock vLLM's
prefix cache evicts those blocks, TTLScheduler keeps them pinned until the deadline.
The adapter's clock is a FakeClock: a pin expires exactly when a test moves time past it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import ttl_engine
from vllm_engine import BLOCK, TEST_POLICY, Engine, build_tiny_model, make_engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 25  # 24 usable: vLLM keeps block 0 as its null block
TTL = "ttlpolicy_vllm.TTLScheduler"
STOCK = "vllm.v1.core.sched.scheduler.Scheduler"
#: a program's first turn: 201 prompt + 24 output tokens → 224 tokens with KV = 7 full blocks
TURN1_PROMPT, TURN1_OUT = 201, 24
FILLER = 420  # tokens of each request that runs during the tool call (14 blocks)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    """(stock, ttl) engines on the same tiny model; pin budget 75% of the blocks."""
    model = build_tiny_model(tmp_path_factory.mktemp("tiny-llama-engine"))
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_POLICY", TEST_POLICY)
    mp.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.75")
    stock = make_engine(model, STOCK, NUM_BLOCKS)
    ttl = make_engine(model, TTL, NUM_BLOCKS)
    mp.undo()
    yield stock, ttl
    for e in (stock, ttl):
        e.llm.llm_engine.engine_core.shutdown()


@pytest.fixture
def ttl(pair: tuple[Engine, Engine]) -> Iterator[Engine]:
    engine = pair[1]
    yield engine
    # every test leaves the engine as it found it: nothing pinned, every block free
    assert engine.scheduler.pins.held_blocks() == 0
    assert engine.scheduler.programs.pin_count == 0
    assert engine.free_blocks() == NUM_BLOCKS - 1


class Prompts:
    def __init__(self, engine: Engine, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = len(engine.llm.get_tokenizer())

    def __call__(self, n: int) -> list[int]:
        return [self.rng.randrange(3, self.vocab) for _ in range(n)]


def context_of(prompt: list[int], out: Any) -> list[int]:
    return prompt + list(out.outputs[0].token_ids)


def tool_call_under_pressure(engine: Engine, seed: int, program: str) -> tuple[int, int]:
    """Turn 1 of ``program``, a tool call during which two filler requests need the memory,
    then turn 2.  Returns (turn 2's prefix-cache hit, tokens of turn 1 that had KV)."""
    p = Prompts(engine, seed)
    a1 = p(TURN1_PROMPT)
    out1 = engine.turn(a1, TURN1_OUT, program_id=program, tool="bash")
    ctx = context_of(a1, out1)
    if engine.clock is not None:
        engine.clock.advance(1.0)
    engine.turn(p(FILLER), 8)
    engine.turn(p(FILLER), 8)
    out2 = engine.turn(ctx + p(20), 4, program_id=program, tool="bash", last_turn=True)
    # the last sampled token of turn 1 never had its KV computed
    return out2.num_cached_tokens, len(ctx) - 1


def test_pinned_context_survives_a_tool_call_that_stock_vllm_evicts(pair, ttl) -> None:
    stock = pair[0]
    stock_hit, stock_ctx = tool_call_under_pressure(stock, seed=1, program="p-stock")
    m0 = ttl.scheduler.ttl_stats()
    ttl_hit, ttl_ctx = tool_call_under_pressure(ttl, seed=1, program="p-ttl")
    m1 = ttl.scheduler.ttl_stats()
    whole = (ttl_ctx // BLOCK) * BLOCK
    assert ttl_ctx == stock_ctx and whole == ttl_ctx  # turn 1 fills whole blocks
    assert ttl_hit == whole, "TTLScheduler: the next turn hits the whole previous context"
    assert stock_hit < whole, "stock vLLM evicted some of it during the tool call"
    assert m1["pins"] - m0["pins"] == 1
    assert m1["pinned_prefix_hits"] - m0["pinned_prefix_hits"] == 1
    assert m1["pinned_prefix_hit_tokens"] - m0["pinned_prefix_hit_tokens"] == whole


def test_expiry_releases_the_blocks(ttl) -> None:
    p = Prompts(ttl, seed=2)
    a1 = p(TURN1_PROMPT)
    out1 = ttl.turn(a1, TURN1_OUT, program_id="p-exp", tool="grep")
    sched = ttl.scheduler
    held = sched.pins.held_blocks()
    assert held == 7 and ttl.free_blocks() == NUM_BLOCKS - 1 - held
    before = sched.ttl_stats()["expiries"]
    ttl.clock.advance(31.0)  # past max_ttl_s of the test policy
    ttl.turn(p(FILLER), 8)  # a schedule() call expires the pin
    assert sched.ttl_stats()["expiries"] == before + 1
    assert sched.pins.held_blocks() == 0 and sched.programs.pin_count == 0
    # released into the normal free queue: still prefix-cacheable until evicted
    out2 = ttl.turn(context_of(a1, out1) + p(5), 4, program_id="p-exp", last_turn=True)
    assert out2.num_cached_tokens == 7 * BLOCK


def test_abort_releases_at_once(ttl) -> None:
    p = Prompts(ttl, seed=3)
    a1 = p(TURN1_PROMPT)
    out1 = ttl.turn(a1, TURN1_OUT, program_id="p-abort", tool="bash")
    assert ttl.scheduler.pins.held_blocks() == 7
    rid = ttl.submit(context_of(a1, out1) + p(5), 4, program_id="p-abort", tool="bash")
    ttl.abort(rid)  # before it ever ran: no engine step in between
    assert ttl.scheduler.pins.held_blocks() == 0
    assert ttl.free_blocks() == NUM_BLOCKS - 1
    ttl.run()


def test_aborting_one_request_does_not_strand_its_siblings(ttl) -> None:
    # An abort ends the whole program in the ProgramScheduler, dropping its other requests
    # there; vLLM still runs them, so the adapter must re-admit or untrack them.
    p = Prompts(ttl, seed=9)
    running = ttl.submit(p(60), 16, program_id="p-sib", last_turn=True)
    ttl.step()  # `running` is admitted
    waiting = ttl.submit(p(60), 4, program_id="p-sib", last_turn=True)
    doomed = ttl.submit(p(60), 4, program_id="p-sib")
    ttl.abort(doomed)
    ttl.run(max_steps=200)
    assert len(ttl.outputs[running].outputs[0].token_ids) == 16
    assert len(ttl.outputs[waiting].outputs[0].token_ids) == 4
    assert ttl.scheduler.programs.program_count == 0
    assert ttl.scheduler.programs.waiting_count == 0


def test_last_turn_releases_at_once(ttl) -> None:
    p = Prompts(ttl, seed=5)
    pins = ttl.scheduler.ttl_stats()["pins"]
    ttl.turn(p(TURN1_PROMPT), TURN1_OUT, program_id="p-last", tool="bash", last_turn=True)
    assert ttl.scheduler.ttl_stats()["pins"] == pins
    assert ttl.free_blocks() == NUM_BLOCKS - 1


def test_pinned_blocks_stay_within_budget(ttl) -> None:
    sched = ttl.scheduler
    budget = sched.pin_budget_blocks
    assert budget == 18
    p = Prompts(ttl, seed=6)
    prompts = [p(TURN1_PROMPT) for _ in range(4)]
    rids = [  # 4 × 7 blocks would exceed the budget
        ttl.submit(prompts[i], TURN1_OUT, program_id=f"p-budget{i}", tool="bash") for i in range(4)
    ]
    engine = ttl.llm.llm_engine
    while engine.has_unfinished_requests():
        ttl.step()
        assert sched.pins.held_blocks() <= budget
        assert sched.programs.pinned_blocks <= budget
    assert 7 <= sched.pins.held_blocks() <= budget  # some pinned, the rest refused
    for i in range(4):  # each program's last turn continues its context (it takes the pin)
        context = context_of(prompts[i], ttl.outputs[rids[i]])
        ttl.turn(context + p(8), 2, program_id=f"p-budget{i}", last_turn=True)


def test_a_program_that_never_returns_cannot_starve_others(ttl) -> None:
    sched = ttl.scheduler
    p = Prompts(ttl, seed=7)
    old_prompt = p(TURN1_PROMPT)
    old_out = ttl.turn(old_prompt, TURN1_OUT, program_id="p-gone-old", tool="bash")
    ttl.clock.advance(0.5)  # the second program arrives later
    ttl.turn(p(TURN1_PROMPT), TURN1_OUT, program_id="p-gone-new", tool="bash")
    assert sched.pins.held_blocks() == 14  # 10 blocks left free: a 14-block request needs pins
    reclaims = sched.ttl_stats()["reclaims"]
    out = ttl.turn(p(FILLER), 8)  # no time passes: only a reclaim can make room
    assert len(out.outputs[0].token_ids) == 8
    assert sched.ttl_stats()["reclaims"] == reclaims + 1
    # latest-arrived program yields first; the older pin is kept
    assert sched.programs.pin("p-gone-new") is None
    assert sched.programs.pin("p-gone-old") is not None
    sched.programs.end_program("p-gone-new")
    context = context_of(old_prompt, old_out)  # (a last turn that continues takes the pin)
    ttl.turn(context + p(8), 2, program_id="p-gone-old", last_turn=True)


def test_anonymous_requests_run_exactly_as_stock(pair, ttl) -> None:
    stock = pair[0]
    outs = []
    for engine in (stock, ttl):
        p = Prompts(engine, seed=8)
        shared = p(100)
        rids = [engine.submit(shared + p(n), 6) for n in (40, 300, 10, 200, 120)]
        engine.run()
        outs.append([(engine.outputs[r].num_cached_tokens,
                      list(engine.outputs[r].outputs[0].token_ids)) for r in rids])  # fmt: skip
    assert outs[0] == outs[1]
    assert ttl.scheduler.programs.program_count == 0


def test_overlong_request_ids_are_served_not_fatal(ttl) -> None:
    # vLLM takes request ids from clients (X-Request-Id); the ProgramScheduler bounds ids at
    # 1024 bytes, so longer ones must be tracked under a digest, not crash the engine.
    p = Prompts(ttl, seed=11)
    a1 = p(TURN1_PROMPT)
    rid1 = ttl.submit(a1, TURN1_OUT, rid="t1-" + "x" * 3000, program_id="p-long", tool="bash")
    ttl.run()
    assert ttl.scheduler.pins.held_blocks() == 7  # pinned like any other program request
    ctx = context_of(a1, ttl.outputs[rid1])
    rid2 = ttl.submit(ctx + p(5), 4, rid="t2-" + "y" * 3000, program_id="p-long", last_turn=True)
    anon = ttl.submit(p(40), 4, rid="anon-" + "z" * 3000)  # no program: stock behaviour
    ttl.run()
    assert ttl.outputs[rid2].num_cached_tokens == 7 * BLOCK
    assert len(ttl.outputs[anon].outputs[0].token_ids) == 4
    assert ttl.scheduler.programs.program_count == 0


def test_a_running_prefill_counts_its_next_chunk_before_pins_yield(ttl) -> None:
    """With a 256-token budget a 300-token prompt prefills in two chunks: after the first
    step it holds 8 blocks and its next chunk (44 tokens) takes it to 10 — two blocks, where
    a decode opens at most one — so pins yield for both before vLLM would preempt it."""
    sched = ttl.scheduler
    budget = sched.max_num_scheduled_tokens
    sched.max_num_scheduled_tokens = 256  # (read by every schedule() call)
    try:
        p = Prompts(ttl, seed=10)
        rid = ttl.submit(p(300), 2, program_id="p-chunks", last_turn=True)
        ttl.step()
        (request,) = sched.running
        assert request.num_computed_tokens == 256 and request.num_prompt_tokens == 300
        assert sched._step_blocks() == -(-300 // BLOCK) - 256 // BLOCK == 2
        ttl.run()
    finally:
        sched.max_num_scheduled_tokens = budget
    assert len(ttl.outputs[rid].outputs[0].token_ids) == 2
    assert ttl.free_blocks() == NUM_BLOCKS - 1


@pytest.fixture
def fresh(tiny_model) -> Iterator[Engine]:
    """An engine of its own, as ``pair``'s TTL one: no program of another test is noted in its
    free queue's order (one whose standing changes with time would refresh the queue)."""
    yield from ttl_engine(tiny_model, TEST_POLICY, "0.75", NUM_BLOCKS)


def test_contexts_released_by_pins_are_evicted_in_the_librarys_order(fresh) -> None:
    """A pin's expiry hands its blocks back to vLLM's free queue at the tail, in the order the
    pins expire: x's (it left first), then y's.  The library's order is the other way (both
    expected back alike, the later arrival y goes first).  The pins expire within a second of
    the free queue's last ordering, with no turn finished since, as z returns needing more
    blocks than are empty: it must take y's, not x's (before, the adapter re-sorted the queue
    only after a turn finished, the order changed, or a second passed, and gave it x's)."""
    ttl = fresh
    p = Prompts(ttl, seed=5)
    sched = ttl.scheduler
    z1, x1, y1 = p(40), p(TURN1_PROMPT), p(TURN1_PROMPT)  # 1, 7 and 7 full blocks
    z_out = ttl.turn(z1, 8, program_id="z-pin", tool="bash")
    ttl.clock.advance(0.1)
    x_out = ttl.turn(x1, TURN1_OUT, program_id="x-pin", tool="bash")
    ttl.clock.advance(0.2)
    y_out = ttl.turn(y1, TURN1_OUT, program_id="y-pin", tool="bash")
    pins = {pin.program_id: pin.deadline_s for pin in sched.programs.pins()}
    assert sorted(pins) == ["x-pin", "y-pin", "z-pin"]
    ttl.clock.advance(pins["y-pin"] - sched.clock() - 0.3)
    ttl.turn(p(20), 2)  # steps just before x's and y's deadlines: the free queue is ordered
    order = sched.admission.eviction_order(sched.eviction.programs(), sched.clock())
    assert order == ["y-pin", "x-pin", "z-pin"]
    ttl.clock.advance(0.6)  # past both deadlines, within a second of that ordering
    # z returns: 16 blocks, 15 new, more than are empty; x's and y's pins expire first
    # (the order the free queue was put in still holds: only a release can have moved it)
    assert sched.admission.eviction_order(sched.eviction.programs(), sched.clock()) == order
    z2 = ttl.turn(context_of(z1, z_out) + p(450), 4, program_id="z-pin", last_turn=True)
    assert z2.num_cached_tokens == BLOCK
    assert sched.programs.pin_count == 0
    x2 = ttl.turn(context_of(x1, x_out) + p(8), 2, program_id="x-pin", last_turn=True)
    y2 = ttl.turn(context_of(y1, y_out) + p(8), 2, program_id="y-pin", last_turn=True)
    assert x2.num_cached_tokens == 7 * BLOCK, "x, second to go, kept its context"
    assert y2.num_cached_tokens < 7 * BLOCK, "y, first to go, lost the blocks z needed"


def test_held_chains_never_stall_a_preempted_head(fresh) -> None:
    """A pin handed over to its program's next request at arrival keeps its blocks held until
    that request is admitted.  Here two such requests (``a`` and ``d``, 7 blocks held each)
    wait behind ``b``, which grows past the 10 blocks left and is preempted; nothing runs
    then, and ``b`` heads the queue (preempted first) needing 11 blocks.  The held chains
    must yield to it — before, ``b`` waited for their blocks forever and the engine stalled."""
    ttl = fresh
    sched = ttl.scheduler
    p = Prompts(ttl, seed=11)
    firsts = {pid: p(TURN1_PROMPT) for pid in ("a-held", "d-held")}
    outs = {pid: ttl.turn(x, TURN1_OUT, program_id=pid, tool="bash") for pid, x in firsts.items()}
    assert sched.programs.pin_count == 2
    b = ttl.submit(p(250), 150)  # no program: 8 blocks of prompt, 13 at its end
    ttl.step()  # b is admitted
    seconds = [
        ttl.submit(context_of(x, outs[pid]) + p(100), 2, program_id=pid, last_turn=True)
        for pid, x in firsts.items()
    ]  # 11 blocks each, 4 of them new: they wait while b runs
    assert sched.pins.held_blocks() == 14 and sched.life.held_count == 2  # held till admitted
    assert sched.programs.pin_count == 0  # (both consumed: no pin left to reclaim)
    reclaims = sched.ttl_stats()["reclaims"]
    ttl.run(max_steps=3000)
    assert sched.ttl_stats()["reclaims"] - reclaims == 1  # d's chain only: then b fits
    assert len(ttl.outputs[b].outputs[0].token_ids) == 150
    for rid in seconds:
        assert len(ttl.outputs[rid].outputs[0].token_ids) == 2
    assert sched.pins.held_blocks() == 0 and sched.life.held_count == 0
    assert ttl.free_blocks() == NUM_BLOCKS - 1
