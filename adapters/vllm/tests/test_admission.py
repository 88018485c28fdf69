"""Load control (``ttlpolicy.AdmissionControl``) inside a real vLLM engine (CPU), on and off.

24 usable KV blocks of 32 tokens; each program's context is 13 blocks, so two programs'
contexts exceed the memory.  With load control on (the default) a program that arrives while
another is away on a short tool call waits in vLLM's queue until the first one ends (or
stays away longer than ``max_ttl_s``), instead of evicting its context; and free cached
blocks are evicted latest next use first, not LRU.  With both off (``"admission": false,
"evict_by_next_use": false`` in ``TTLPOLICY_POLICY``) the adapter behaves as before: the
newcomer runs at once, eviction is LRU.  No pins here (budget 0): load control alone.  The
adapter's clock is a FakeClock, moved by the tests.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

import ttlpolicy
from conftest import ttl_engine
from ttlpolicy.reference.admission import away_limit_s
from vllm_engine import BLOCK, TEST_POLICY, Engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 25  # 24 usable: vLLM keeps block 0 as its null block
TTL = "ttlpolicy_vllm.TTLScheduler"
PROMPT, OUT = 400, 8  # 408 tokens: 13 blocks needed, 12 full blocks cached at the finish
MAX_TTL_S = json.loads(TEST_POLICY)["max_ttl_s"]
#: how long a program away on the prior stays expected back (max_ttl_s, or less: the prior's
#: longest draw, ``away_limit_s``)
AWAY_LIMIT_S = away_limit_s(ttlpolicy.PolicyConfig(**json.loads(TEST_POLICY)), [])
ADMISSION_OFF = json.dumps(
    {**json.loads(TEST_POLICY), "admission": False, "evict_by_next_use": False}
)


def engine_with(policy: str, tiny_model) -> Iterator[Engine]:
    yield from ttl_engine(tiny_model, policy, "0", NUM_BLOCKS)  # no pins: load control alone


@pytest.fixture(scope="module")
def engine_on(tiny_model) -> Iterator[Engine]:
    yield from engine_with(TEST_POLICY, tiny_model)  # no "admission" key: the default, on


@pytest.fixture(scope="module")
def engine_off(tiny_model) -> Iterator[Engine]:
    yield from engine_with(ADMISSION_OFF, tiny_model)


@pytest.fixture
def on(engine_on: Engine) -> Iterator[Engine]:
    yield engine_on
    check_nothing_left(engine_on)


@pytest.fixture
def off(engine_off: Engine) -> Iterator[Engine]:
    yield engine_off
    check_nothing_left(engine_off)


def check_nothing_left(engine: Engine) -> None:
    """No pin, no block and no program left behind once every program ended."""
    sched = engine.scheduler
    assert sched.pins.held_blocks() == 0
    assert sched.programs.pin_count == 0 and sched.programs.program_count == 0
    assert engine.free_blocks() == NUM_BLOCKS - 1
    if sched.admission is not None:
        assert sched.admission.program_count == 0


VOCAB = 256  # below the test tokenizer's vocabulary (byte-level: 256 symbols at least)


def prompt(seed: int, n: int = PROMPT) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def first_turn(engine: Engine, program: str, seed: int) -> list[int]:
    """A program's first turn (ends calling ``bash``); returns its context."""
    p = prompt(seed)
    out = engine.turn(p, OUT, program_id=program, tool="bash")
    return p + list(out.outputs[0].token_ids)


def waiting_and_running(engine: Engine) -> tuple[int, int]:
    sched = engine.scheduler
    return len(sched.waiting), len(sched.running)


def test_load_control_is_on_by_default(on, off) -> None:
    assert on.scheduler.admission is not None and on.scheduler.eviction is not None
    assert on.scheduler.policy.config.admission
    assert off.scheduler.admission is None and off.scheduler.eviction is None


def test_the_miss_price_counts_the_engines_prefill_chunks(on) -> None:
    """vLLM chunks a prefill at its token budget (``max_num_batched_tokens=512`` here): the
    policy prices a lost prefix as that many steps, each paying the step's fixed cost."""
    cfg = on.scheduler.policy.config
    assert cfg.prefill_chunk_tokens == 512
    # the fixed term counts once per 512-token chunk: 1,025 tokens cost three steps' worth
    a = cfg.prefill_base_s  # (no prefill fitted yet: the configured coefficients)
    one_step = ttlpolicy.CacheMissModel(
        cfg.prefill_base_s, cfg.prefill_s_per_token, cfg.prefill_s_per_token2
    )
    assert on.scheduler.policy.miss_cost_s(1025) == pytest.approx(one_step.prefill_s(1025) + 2 * a)


def test_a_newcomer_waits_until_the_program_in_progress_ends(on) -> None:
    sched = on.scheduler
    ctx_a = first_turn(on, "a", seed=1)
    assert sched.admission.admitted("a")
    on.clock.advance(0.5)  # b arrives later, while a is away on its tool
    b = on.submit(prompt(2), OUT, program_id="b", last_turn=True)
    for _ in range(5):
        on.step()
    # a's 12-13 blocks plus b's 13 exceed the 24: b is held back, queued, nothing runs
    # (stock vLLM, or the adapter with load control off, would run b and evict a's context)
    assert waiting_and_running(on) == (1, 0)
    assert not sched.admission.admitted("b")
    assert b not in on.outputs
    assert sched.ttl_stats()["programs_awaiting_admission_now"] == 1
    # a comes back: its context is still cached whole, then it ends and b is admitted
    a2 = on.submit(ctx_a + prompt(3, 20), 4, program_id="a", last_turn=True)
    on.run()
    assert on.outputs[a2].num_cached_tokens == 12 * BLOCK
    assert len(on.outputs[b].outputs[0].token_ids) == OUT
    assert sched.admission.program_count == 0


def test_off_the_newcomer_runs_at_once_and_evicts(off) -> None:
    ctx_a = first_turn(off, "a", seed=1)
    off.clock.advance(0.5)
    b = off.submit(prompt(2), OUT, program_id="b", last_turn=True)
    off.step()
    assert waiting_and_running(off) == (0, 1)  # as before load control: b runs
    off.run()
    assert len(off.outputs[b].outputs[0].token_ids) == OUT
    a2 = off.turn(ctx_a + prompt(3, 20), 4, program_id="a", last_turn=True)
    assert a2.num_cached_tokens < 12 * BLOCK  # b's blocks took part of a's context


def test_a_program_that_never_returns_blocks_nobody_past_max_ttl(on) -> None:
    # The client of `gone` dies during its tool call: the program never ends.  Admission
    # waits for it only while it could still come back (max_ttl_s), then admits the head.
    sched = on.scheduler
    first_turn(on, "gone", seed=4)
    # sooner than every gap recorded so far (a's 0.5 s above): gone is expected back
    on.clock.advance(0.1)
    b = on.submit(prompt(5), OUT, program_id="b", last_turn=True)
    for _ in range(3):
        on.step()
    assert waiting_and_running(on) == (1, 0)
    on.clock.advance(MAX_TTL_S)
    on.run()
    assert len(on.outputs[b].outputs[0].token_ids) == OUT
    assert sched.admission.admitted("gone")  # still admitted, out of the working set
    # the test ends the program the dead client never ended (an abort would do the same)
    sched.programs.end_program("gone")
    sched.admission.end("gone")


def test_with_nothing_admitted_the_head_runs_whatever_its_size(on) -> None:
    whole = on.turn(prompt(6, 15 * BLOCK), 4, program_id="big", last_turn=True)
    assert len(whole.outputs[0].token_ids) == 4


def test_an_abort_while_held_back_ends_the_program(on) -> None:
    sched = on.scheduler
    ctx_a = first_turn(on, "a", seed=7)
    on.clock.advance(0.1)
    b = on.submit(prompt(8), OUT, program_id="b", last_turn=True)
    on.step()
    assert not sched.admission.admitted("b") and sched.admission.program_count == 2
    on.abort(b)
    on.step()
    assert sched.admission.program_count == 1  # b forgotten, a still in progress
    on.turn(ctx_a + prompt(9, 20), 4, program_id="a", last_turn=True)


def evict_under_pressure(engine: Engine) -> tuple[int, int]:
    """x ends a turn calling a tool (expected back), then y ends a turn without one (not
    expected back), 6 cached blocks each; then a 15-block request (admitted: 7 + 15 fit)
    needs 3 of their 12 blocks.  Returns the prefix hits of x's and y's next turns."""
    assert engine.clock is not None
    contexts = []
    for program, seed, tool in (("x", 11, "bash"), ("y", 12, None)):
        p = prompt(seed, 200)  # 208 tokens with the output: 6 full blocks cached
        named = {"tool": tool} if tool is not None else {}
        out = engine.turn(p, OUT, program_id=program, **named)
        contexts.append(p + list(out.outputs[0].token_ids))
        engine.clock.advance(0.1)
    engine.turn(prompt(13, 14 * BLOCK), OUT)  # anonymous, 456 tokens: 15 blocks
    x2 = engine.turn(contexts[0] + prompt(14, 8), 2, program_id="x", last_turn=True)
    y2 = engine.turn(contexts[1] + prompt(15, 8), 2, program_id="y", last_turn=True)
    return x2.num_cached_tokens, y2.num_cached_tokens


def test_the_context_expected_back_last_is_evicted_first(on) -> None:
    x_hit, y_hit = evict_under_pressure(on)
    assert x_hit == 6 * BLOCK, "x, expected back soon, kept its whole context"
    assert y_hit < 6 * BLOCK, "y, not expected back, lost the blocks the newcomer needed"
    assert on.scheduler.ttl_stats()["free_blocks_reordered"] > 0


def test_off_eviction_is_lru(off) -> None:
    x_hit, _ = evict_under_pressure(off)
    assert x_hit < 6 * BLOCK, "LRU: x finished first, so its blocks went first"


@pytest.fixture
def fresh(tiny_model) -> Iterator[Engine]:
    """Its own engine: no tool duration recorded yet, so next uses come from the policy's
    prior (mean ``prior_mean_s``) until a gap outlasts ``max_ttl_s``."""
    for engine in engine_with(TEST_POLICY, tiny_model):  # (its shutdown runs after the loop)
        yield engine
        check_nothing_left(engine)


def test_the_free_queue_follows_an_order_that_changed_with_time(fresh) -> None:
    """No turn ends between two steps 0.6 s apart, yet the eviction order flips: y, away on
    its tool for longer than it may stay expected back (``AWAY_LIMIT_S``: on the prior, less
    than ``max_ttl_s``), is no longer expected back, while x, which left just before, still
    is.  The newcomer then takes y's blocks, not x's (refreshing the order only after a turn
    or once a second, the adapter gave it x's)."""
    engine, sched = fresh, fresh.scheduler
    assert engine.clock is not None
    contexts = {}
    for program, seed, gap_s in (("y", 21, AWAY_LIMIT_S - 0.5), ("x", 22, 0.0)):
        p = prompt(seed, 200)  # 208 tokens with the output: 6 full blocks cached
        out = engine.turn(p, OUT, program_id=program, tool="bash")
        contexts[program] = p + list(out.outputs[0].token_ids)
        engine.clock.advance(gap_s)
    # a step with both turns over: both expected back (prior), latest arrival (x) first
    engine.turn(prompt(23, 20), 2)
    now = sched.clock()
    assert sched.admission.eviction_order(["x", "y"], now) == ["x", "y"]
    engine.clock.advance(0.6)  # y has been away AWAY_LIMIT_S + 0.1 s: not expected back
    assert sched.admission.eviction_order(["x", "y"], sched.clock()) == ["y", "x"]
    engine.turn(prompt(24, 14 * BLOCK), OUT)  # anonymous, 15 blocks: 3 cached ones go
    x2 = engine.turn(contexts["x"] + prompt(25, 8), 2, program_id="x", last_turn=True)
    y2 = engine.turn(contexts["y"] + prompt(26, 8), 2, program_id="y", last_turn=True)
    assert x2.num_cached_tokens == 6 * BLOCK, "x, still expected back, kept its context"
    assert y2.num_cached_tokens < 6 * BLOCK, "y, gone past its away limit, lost blocks"
