"""The adapter inside SGLang's real radix tree and scheduling pass (CPU pools, no model)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from ttlpolicy_sglang import TTLRadixCache

from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens

KV = 512
TURN1 = 200  # prompt tokens of a program's first turn
OUT1 = 20  # tokens it generates before calling a tool
FILLER = 200  # prompt tokens of another request


def turn1(s: MiniScheduler, program: str, start: int = 10_000) -> tuple[list[int], list[int]]:
    """A program's first turn, ending in a call to ``bash``: returns (prompt, output)."""
    prompt, out = tokens(start, TURN1), tokens(start + TURN1, OUT1)
    req = s.submit(prompt, program=program, tool="bash")
    assert s.schedule() == [req]
    s.finish(req, out)
    return prompt, out


def fillers(s: MiniScheduler, n: int, start: int = 50_000) -> None:
    """``n`` anonymous requests, one after the other, each leaving its tokens cached."""
    for i in range(n):
        req = s.submit(tokens(start + i * 1000, FILLER))
        assert s.schedule() == [req]
        s.finish(req, tokens(start + i * 1000 + 900, 4))


def test_the_backend_is_built_by_sglang_and_subclasses_the_real_tree(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    assert isinstance(s.cache, TTLRadixCache) and isinstance(s.cache, UnifiedRadixCache)
    stock = make_scheduler(KV, None, None)
    assert type(stock.cache) is UnifiedRadixCache


def test_turn1_survives_a_tool_call_under_pressure_and_stock_evicts_it(policy_env) -> None:
    hits = {}
    for backend in (None, "ttlpolicy"):
        s = make_scheduler(KV, backend, FakeClock() if backend else None)
        prompt, out = turn1(s, "agent-1")
        # During the tool call, two other requests need the memory: the second one's
        # allocation must evict 108 cached tokens.
        fillers(s, 2)
        nxt = s.submit(prompt + out + tokens(90_000, 30), program="agent-1", last_turn=True)
        assert s.schedule() == [nxt]
        hits[backend] = nxt.prefix_len
        s.finish(nxt, tokens(91_000, 4))
    assert hits["ttlpolicy"] == TURN1 + OUT1, "the whole first turn is reused"
    assert hits[None] < TURN1 + OUT1, "stock LRU evicted the start of the first turn"


def test_a_pin_is_protected_not_evictable_and_expires(policy_env) -> None:
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    prompt, out = turn1(s, "agent-exp")
    assert s.cache.protected_size() == TURN1 + OUT1
    assert s.cache.evictable_size() == 0
    assert s.ttl.metrics.pins == 1
    clock.advance(31.0)  # past max_ttl_s of the test policy
    s.order()  # a scheduling pass expires it
    assert s.ttl.metrics.expiries == 1
    assert s.cache.protected_size() == 0
    assert s.cache.evictable_size() == TURN1 + OUT1  # still cached, now evictable
    assert s.hit_tokens(prompt + out) == TURN1 + OUT1


def test_pressure_reclaims_the_pin_before_a_request_waits(policy_env) -> None:
    # Load control off: with it on, the newcomer would wait for agent-big to end instead of
    # evicting its context (tests/test_admission.py).
    policy_env.setenv(
        "TTLPOLICY_POLICY", json.dumps({**json.loads(TEST_POLICY), "admission": False})
    )
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    turn1(s, "agent-big")
    assert s.cache.protected_size() == TURN1 + OUT1
    big = s.submit(tokens(70_000, 400))  # needs more than free + evictable with the pin
    assert s.schedule() == [big]
    assert s.ttl.metrics.reclaims == 1
    assert s.cache.protected_size() == 0  # released; the running request is not in the tree yet


def test_decode_pressure_reclaims_through_eviction(policy_env) -> None:
    """A running request that needs slots SGLang can only get by evicting pinned tokens:
    the eviction itself reclaims the pin (the request is not retracted)."""
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    turn1(s, "agent-dec")
    req = s.submit(tokens(70_000, 250))
    assert s.schedule() == [req]
    s.decode(req, tokens(80_000, 60))  # 42 free slots: the rest must come from the tree
    assert s.ttl.metrics.reclaims == 1
    assert s.cache.protected_size() == 0
    s.finish(req, tokens(81_000, 2))
    assert s.hit_tokens(tokens(70_000, 250) + tokens(80_000, 60)) == 250 + 60


def test_the_next_request_hands_over_and_last_turn_ends_the_program(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    prompt, out = turn1(s, "agent-2")
    nxt = s.submit(prompt + out + tokens(90_000, 10), program="agent-2", tool="grep")
    assert s.schedule() == [nxt]
    assert nxt.prefix_len == TURN1 + OUT1
    s.finish(nxt, tokens(91_000, 5))  # pinned again: the whole second turn
    assert s.ttl.metrics.pinned_prefix_hits == 1
    assert s.cache.protected_size() == TURN1 + OUT1 + 10 + 5
    last = s.submit(prompt + out + tokens(90_000, 10) + tokens(91_000, 5), program="agent-2",
                    last_turn=True)  # fmt: skip
    assert s.schedule() == [last]
    s.finish(last, tokens(92_000, 3))
    assert s.cache.protected_size() == 0, "the program's end released everything"
    assert s.ttl.programs.program_count == 0 and s.ttl.live_requests() == 0


def test_aborts_release_at_once(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    prompt, out = turn1(s, "agent-a")
    waiting = s.submit(prompt + out + tokens(90_000, 10), program="agent-a")
    s.order()  # arrives: consumes the pin, whose lock waits for it
    assert s.cache.protected_size() == TURN1 + OUT1
    s.abort_waiting(waiting)
    assert s.cache.protected_size() == 0
    prompt, out = turn1(s, "agent-b", start=20_000)
    running = s.submit(prompt + out + tokens(95_000, 10), program="agent-b")
    assert s.schedule() == [running]
    s.abort_running(running)
    assert s.cache.protected_size() == 0
    assert s.ttl.programs.program_count == 0 and s.ttl.live_requests() == 0


def test_pins_never_exceed_the_budget(policy_env) -> None:
    policy_env.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", "0.5")  # 256 tokens
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    turn1(s, "p1")
    turn1(s, "p2", start=20_000)  # 220 more would pass 256: not pinned
    assert s.ttl.metrics.pins == 1
    assert s.cache.protected_size() == TURN1 + OUT1 <= s.ttl.pin_budget_tokens


def test_the_queue_is_ordered_by_program(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    prompt, out = turn1(s, "agent-q")
    a = s.submit(tokens(60_000, 10))
    b = s.submit(tokens(61_000, 10), program="other")
    back = s.submit(prompt + out + tokens(90_000, 10), program="agent-q")
    s.order()
    assert s.waiting == [back, a, b], "the pinned program first, then arrival order"


def test_stock_order_without_the_backend(policy_env) -> None:
    s = make_scheduler(KV, None, None)
    reqs = [s.submit(tokens(60_000 + 1000 * i, 10), program=f"p{3 - i}") for i in range(3)]
    s.order()
    assert s.waiting == reqs


@pytest.mark.parametrize("fraction", ["-0.1", "1.5", "lots"])
def test_a_bad_knob_names_itself(policy_env, fraction: str) -> None:
    policy_env.setenv("TTLPOLICY_PIN_BUDGET_FRACTION", fraction)
    with pytest.raises(ValueError, match="TTLPOLICY_PIN_BUDGET_FRACTION"):
        make_scheduler(KV, "ttlpolicy", None)


class TextTokenizer:
    """SGLang sets ``req.tokenizer`` to the server's tokenizer; here ids are code points."""

    def decode(self, ids: list[int]) -> str:
        return "".join(map(chr, ids))


class BrokenTokenizer:
    def decode(self, ids: list[int]) -> str:
        raise ValueError("cannot decode")


@pytest.mark.parametrize(
    ("tokenizer", "output", "expected"),
    [
        (
            TextTokenizer(),
            'ok <tool_call>{"name": "search", "arguments": {}}</tool_call>',
            "search",
        ),
        (TextTokenizer(), "no call here", None),
        (BrokenTokenizer(), "<tool_call>{}", None),
        (None, "<tool_call>{}", None),
    ],
)
def test_the_tool_is_read_from_the_output_when_the_client_names_none(
    policy_env, tokenizer, output: str, expected: str | None
) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    req = s.submit(tokens(10, 20), program="agent-t")
    req.tokenizer = tokenizer
    req.output_ids.extend(ord(ch) for ch in output)
    assert s.ttl._parse_tool(req) == expected


def _held_behind(policy_env) -> tuple[MiniScheduler, Any, Any]:
    """agent-held's first turn is pinned (220 tokens); an anonymous request ``x`` runs
    (280 of the 512 tokens); agent-held's next request arrives and consumes the pin — its
    prefix stays locked until it is admitted — but cannot be: 12 tokens are free."""
    policy_env.setenv(
        "TTLPOLICY_POLICY", json.dumps({**json.loads(TEST_POLICY), "admission": False})
    )
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    prompt, out = turn1(s, "agent-held")
    x = s.submit(tokens(70_000, 280))
    assert s.schedule() == [x]
    nxt = s.submit(prompt + out + tokens(90_000, 100), program="agent-held", last_turn=True)
    assert s.schedule() == []
    assert s.ttl.programs.pin_count == 0 and s.ttl.handover.held_tokens() == TURN1 + OUT1
    return s, x, nxt


def test_a_held_prefix_yields_to_the_last_running_request(policy_env) -> None:
    """SGLang never retracts its last running request: when its decoding needs more than
    is free and no pin is left, the prefix held for a waiting request must turn evictable —
    before, the allocation ran out of memory (SGLang's RuntimeError)."""
    s, x, nxt = _held_behind(policy_env)
    s.decode(x, tokens(80_000, 60))  # 12 free: 48 must come from the held prefix
    assert s.ttl.metrics.reclaims == 1 and s.ttl.handover.held_tokens() == 0
    s.finish(x, tokens(81_000, 2))
    assert s.schedule() == [nxt]
    assert nxt.prefix_len < TURN1 + OUT1  # x's decoding took the end of it


def test_held_prefixes_never_stall_a_retracted_head(policy_env) -> None:
    """``x`` decodes, is retracted, and heads the queue (retracted first) needing 290 + 8
    tokens with nothing running: only 292 are free beside the held prefix, which must yield
    — before, the queue waited for memory no request would ever free."""
    s, x, nxt = _held_behind(policy_env)
    s.decode(x, tokens(80_000, 10))
    s.retract(x)
    assert s.schedule() == [x]
    assert s.ttl.metrics.reclaims == 1 and s.ttl.handover.held_tokens() == 0
    s.finish(x, tokens(81_000, 2))
    assert s.schedule() == [nxt]
