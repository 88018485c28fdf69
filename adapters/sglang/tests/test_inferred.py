"""Programs without ids, in SGLang's real radix tree and scheduling pass: with
``TTLPOLICY_INFER_PROGRAMS=1`` requests that name no program (an unmodified OpenAI client)
are linked to the program whose turn their prompt continues, and their contexts are pinned
across the tool call; the stock tree under the same pressure keeps none of them.  Linking
is per tenant (``cache_salt``): a copy of another tenant's prompt, or an id forged to look
like an inferred program's, links to nothing of that tenant.  SGLang's OpenAI server names
the program from an agent client's session headers (``headers.py``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ttlpolicy_sglang.headers import routing_key_from_session

from conftest import FakeClock, MiniScheduler, make_scheduler, tokens
from ttlpolicy.ids import INFERRED_PREFIX

KV = 512
TURN1, OUT, TOOL, FILLER = 48, 8, 8, 200


@pytest.fixture
def infer_env(policy_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    policy_env.setenv("TTLPOLICY_INFER_PROGRAMS", "1")
    return policy_env


def turn(s: MiniScheduler, prompt: list[int], out: list[int], **fields: Any) -> int:
    """One call of ``prompt`` (no program named) answering ``out``; its cached prefix."""
    req = s.submit(prompt, **fields)
    assert s.schedule() == [req]
    hit = int(req.prefix_len)
    s.finish(req, out)
    return hit


def three_sessions(s: MiniScheduler, clock: FakeClock | None) -> list[tuple[int, int]]:
    """Three chat sessions, three turns each, each turn appending the answer and a tool
    result to its history; three fillers need the memory between rounds.  The (cached,
    whole history) tokens of every later turn."""
    histories = [tokens(10_000 * (i + 1), TURN1) for i in range(3)]
    hits = []
    for rnd in range(3):
        for i, history in enumerate(histories):
            out = tokens(10_000 * (i + 1) + 1000 * (rnd + 1), OUT)
            hit = turn(s, history, out, cache_salt="tenant-a")
            if rnd > 0:
                hits.append((hit, len(history)))
            histories[i] = history + out + tokens(10_000 * (i + 1) + 1000 * (rnd + 1) + 500, TOOL)
            if clock is not None:
                clock.advance(1.0)
        for f in range(3):  # memory pressure during the tool calls
            turn(s, tokens(100_000 + 1000 * (3 * rnd + f), FILLER), tokens(900_000 + f, 4))
    return hits


def test_three_sessions_without_ids_find_their_contexts(infer_env) -> None:
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    hits = three_sessions(s, clock)
    stats = s.cache.ttl_stats()
    assert stats["calls_linked"] == 6, stats  # every later turn linked to its session
    assert stats["calls_new_program"] == 3 + 9  # the sessions' first turns, the fillers
    assert stats["calls_forked"] == 0
    # each later turn finds its whole previous context (all but the tool result appended)
    assert all(hit >= whole - TOOL for hit, whole in hits), hits
    assert stats["pinned_prefix_hits"] >= 6


def test_the_stock_tree_keeps_none_of_them(infer_env) -> None:
    s = make_scheduler(KV, None, None)
    hits = three_sessions(s, None)
    assert all(hit == 0 for hit, _ in hits), hits


def test_without_the_flag_nothing_is_linked(policy_env) -> None:
    s = make_scheduler(KV, "ttlpolicy", FakeClock())
    three_sessions(s, None)
    stats = s.cache.ttl_stats()
    assert stats["calls_linked"] == stats["calls_new_program"] == stats["pins"] == 0


def owner_then(s: MiniScheduler, clock: FakeClock, stranger: dict[str, Any]) -> int:
    """The owner's turn 1 (tenant "salt-a", no id); a stranger's copy of the owner's next
    prompt with ``stranger``'s fields; fillers; the owner's turn 2: its cached prefix."""
    prompt, out = tokens(10_000, TURN1), tokens(11_000, OUT)
    turn(s, prompt, out, cache_salt="salt-a")
    follow = prompt + out + tokens(12_000, TOOL)
    clock.advance(1.0)
    turn(s, follow, tokens(13_000, OUT), **stranger)
    for f in range(3):
        turn(s, tokens(100_000 + 1000 * f, FILLER), tokens(900_000 + f, 4))
    clock.advance(1.0)
    return turn(s, follow, tokens(14_000, OUT), cache_salt="salt-a")


@pytest.mark.parametrize(
    "stranger",
    [
        {"cache_salt": "salt-b"},  # a copy of the owner's prompt, another tenant
        {},  # ... no tenant
        {"cache_salt": "salt-b", "routing_key": f"{INFERRED_PREFIX}1"},  # a forged id
    ],
    ids=["other-tenant", "no-tenant", "forged-id"],
)
def test_a_strangers_copy_links_to_nothing_of_the_tenant(infer_env, stranger) -> None:
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    hit = owner_then(s, clock, stranger)
    stats = s.cache.ttl_stats()
    assert stats["calls_new_program"] == 2 + 3  # the owner's first turn, the stranger's
    assert stats["calls_linked"] == 1  # the owner's own second turn, to its program
    assert hit >= TURN1 + OUT  # its pin survived the stranger and the fillers


def serving(backend: str | None) -> Any:
    return SimpleNamespace(
        tokenizer_manager=SimpleNamespace(server_args=SimpleNamespace(radix_cache_backend=backend))
    )


class Headers(dict[str, str]):
    """Starlette's request headers as SGLang reads them: names matched in any case."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__({k.lower(): v for k, v in headers.items()})

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


def stock_routing_key(self: Any, raw_request: Any) -> Any:
    """SGLang 0.5.23's ``OpenAIServingBase.extract_routing_key``, as written there (its module
    imports FastAPI, which the CPU test environment does not install)."""
    if raw_request is None:
        return None
    return raw_request.headers.get("x-smg-routing-key")


def request(headers: dict[str, str]) -> Any:
    return SimpleNamespace(headers=Headers(headers))


@pytest.mark.parametrize(
    ("backend", "headers", "key"),
    [
        ("ttlpolicy", {"X-Claude-Code-Session-Id": "s1"}, "s1"),
        (
            "ttlpolicy",
            {"X-Claude-Code-Session-Id": "s1", "x-claude-code-agent-id": "a"},
            "s1/agent:a",
        ),
        ("ttlpolicy", {"x-smg-routing-key": "k", "X-Claude-Code-Session-Id": "s1"}, "k"),
        ("ttlpolicy", {"X-Claude-Code-Session-Id": "\x01bad"}, None),
        ("ttlpolicy", {"X-Claude-Code-Session-Id": "x" * 1000}, None),
        ("ttlpolicy", {}, None),
        (None, {"X-Claude-Code-Session-Id": "s1"}, None),  # another backend: stock SGLang
    ],
)
def test_session_headers_become_the_routing_key(backend, headers, key) -> None:
    got = routing_key_from_session(stock_routing_key, serving(backend), request(headers))
    assert got == key
    assert routing_key_from_session(stock_routing_key, serving(backend), None) is None


def test_the_session_names_the_program_in_the_tree(infer_env) -> None:
    """A request whose routing key the hook set is that program (tenant-scoped), not linked:
    the same session's two calls are one program, another tenant's same header another."""
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    prompt, out = tokens(10_000, TURN1), tokens(11_000, OUT)
    turn(s, prompt, out, cache_salt="salt-a", routing_key="s1")
    clock.advance(1.0)
    other = turn(s, prompt + out, tokens(12_000, OUT), cache_salt="salt-b", routing_key="s1")
    back = turn(s, prompt + out, tokens(13_000, OUT), cache_salt="salt-a", routing_key="s1")
    stats = s.cache.ttl_stats()
    assert stats["calls_linked"] == stats["calls_new_program"] == 0  # named, not inferred
    # (SGLang matches all but a prompt's last token)
    assert back == TURN1 + OUT - 1 and stats["pinned_prefix_hits"] == 1  # only the owner's
    assert other == 0  # (cache_salt keeps the tenants' prefixes apart in the tree too)


def test_parallel_calls_from_one_context_fork_and_an_abort_ends_its_link(infer_env) -> None:
    """Two calls continuing one turn at once (a sub-agent beside its parent): the first
    continues the program, the second is a fork, a program of its own that takes no pin.
    An aborted call records no turn end: the next call from the same context links to the
    turn before it."""
    clock = FakeClock()
    s = make_scheduler(KV, "ttlpolicy", clock)
    prompt, out = tokens(10_000, TURN1), tokens(11_000, OUT)
    turn(s, prompt, out, cache_salt="salt-a")
    clock.advance(1.0)
    parent = s.submit(prompt + out + tokens(12_000, TOOL), cache_salt="salt-a")
    child = s.submit(prompt + out + tokens(13_000, TOOL), cache_salt="salt-a")
    assert s.schedule() == [parent, child]
    stats = s.cache.ttl_stats()
    assert (stats["calls_linked"], stats["calls_forked"]) == (1, 1)
    s.abort_running(child)
    s.finish(parent, tokens(14_000, OUT))
    assert s.cache.ttl_stats()["pinned_prefix_hits"] == 1  # the parent's: the fork took none
    assert not s.ttl.inferred.tracks(parent.rid) and not s.ttl.inferred.tracks(child.rid)
    clock.advance(1.0)
    turn(s, prompt + out + tokens(12_000, TOOL) + tokens(14_000, OUT), tokens(15_000, OUT),
         cache_salt="salt-a")  # fmt: skip
    assert s.cache.ttl_stats()["calls_linked"] == 2
