"""SGLang's host tier (HiCache) under the ``ttlpolicy`` backend, on SGLang's real tree, host pool,
cache controller and eviction calls on CPU (bench/sglang_engine.py: only the copy kernel and the
page-locking call are replaced)."""

from __future__ import annotations

import json
import os
from array import array
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.mem_cache.unified_cache.components.full import FullComponent
from test_properties import KV, Interleavings, submit
from ttlpolicy_sglang.host_tier import (
    HostOrderedFullComponent,
    HostTierOrder,
    chunk_hashes,
    host_prefix_tokens,
    tree_namespace,
)

from conftest import TEST_POLICY, FakeClock, MiniScheduler, make_scheduler, tokens
from ttlpolicy.serving import OffloadSettings

FULL = ComponentType.FULL
HOST_RATIO = 2.0  # host pool = 2 × the KV pool (SGLang's --hicache-ratio)
TURN = 100


def hicache(
    clock: FakeClock | None, backend: str | None = "ttlpolicy", policy: str = "lru"
) -> MiniScheduler:
    return make_scheduler(KV, backend, clock, host_ratio=HOST_RATIO, eviction_policy=policy)


def turn(s: MiniScheduler, prompt: list[int], program: str | None, **kw: Any) -> Any:
    req = s.submit(prompt, program=program, tool="bash" if program else None, **kw)
    assert s.schedule() == [req]
    s.finish(req, tokens(prompt[-1] * 7 + 1, 4))
    return req


def arena(s: MiniScheduler) -> dict[int, Any]:
    return s.cache.tree_core._node_arena  # SGLang's Python TreeCore: every live node by id


def on_host(s: MiniScheduler, prompt: list[int]) -> int:
    """Leading tokens of ``prompt`` found on the host only (SGLang's match)."""
    match = s.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt))))
    assert match.device_prefix_len == 0
    return match.host_hit_length


def host_leaves(s: MiniScheduler) -> list[Any]:
    return list(s.cache.tree_core.evictable_host_leaves)


def test_hicache_runs_the_library_order_on_sglang_s_python_tree_core(policy_env) -> None:
    s = hicache(FakeClock())
    full = s.cache.components[FULL]
    assert isinstance(full, HostOrderedFullComponent) and full.host_order is s.cache.host_order
    assert s.cache._tree_core_backend == "python"  # SGLang's rule for a custom component
    stock = hicache(None, backend=None)
    assert type(stock.cache.components[FULL]) is FullComponent
    plain = make_scheduler(KV, "ttlpolicy", FakeClock())  # no HiCache: nothing changes
    assert plain.cache.host_order is None and plain.cache.ttl.host_tokens is None


def test_a_demoted_turn_is_loaded_back_from_the_host(policy_env) -> None:
    s = hicache(FakeClock())
    first = tokens(10_000, TURN)
    turn(s, first, None)
    for i in range(3):  # the KV pool holds two turns: the first is demoted to the host
        turn(s, tokens(20_000 + 1000 * i, TURN), None)
    assert s.hit_tokens(first) == 0, "not on the device any more"
    again = s.submit(first + tokens(90_000, 8))
    assert s.schedule() == [again]
    assert s.host_loaded_tokens == TURN and again.prefix_len == TURN


def test_the_host_evicts_the_leaf_the_library_ranks_first(policy_env) -> None:
    s = hicache(FakeClock())
    order = s.cache.host_order
    for i in range(4):
        s.ttl.clock.advance(31.0)  # past the test policy's longest pin: no pin holds memory
        s.order()
        turn(s, tokens(10_000 * (i + 1), TURN), f"p{i}", last_turn=i % 2 == 0)
    leaves = host_leaves(s)
    assert len(leaves) >= 2
    rank = order.ranker()
    expected = min(leaves, key=rank)
    before = set(arena(s))
    freed = s.cache.evict_host(1)
    assert freed > 0
    gone = before - set(arena(s))
    assert expected.id in gone, "the leaf of smallest eviction_rank went first"
    # An ended program's turn ranks (0, ...) and goes before a live one's, however recent.
    ended = [n for n in leaves if rank(n)[0] == 0.0]
    assert ended and expected in ended


def test_an_ended_program_leaves_the_host_before_an_older_live_one(policy_env) -> None:
    survivors = {}
    for backend in (None, "ttlpolicy"):
        s = hicache(FakeClock() if backend else None, backend=backend)
        live, done = tokens(10_000, TURN), tokens(20_000, TURN)
        turn(s, live, "live")  # older, its program waits on a tool
        if backend:
            s.ttl.clock.advance(31.0)  # its pin expires: it is evictable, as stock's is
            s.order()
        turn(s, done, "done", last_turn=True)  # newer, its program ended
        for i in range(2):  # both are demoted (the host holds all four turns)
            turn(s, tokens(30_000 + 1000 * i, TURN), None)
        assert [on_host(s, t) for t in (live, done)] == [TURN, TURN]
        s.cache.evict_host(TURN)
        survivors[backend] = (on_host(s, live) == TURN, on_host(s, done) == TURN)
    assert survivors[None] == (False, True), "SGLang's LRU drops the older turn"
    assert survivors["ttlpolicy"] == (True, False), "ours drops the ended program's"


def test_a_pin_is_priced_as_a_reload_of_what_the_host_holds(policy_env) -> None:
    # the reload's price needs the tier's bandwidth (as for vLLM's offloading connector)
    reload = {**json.loads(TEST_POLICY), "offload_bandwidth_bytes_per_s": 25e9}
    policy_env.setenv("TTLPOLICY_POLICY", json.dumps(reload))
    s = hicache(FakeClock())
    prompt = tokens(10_000, TURN)
    req = turn(s, prompt, "agent")
    held = host_prefix_tokens(s.cache, req.last_node)
    assert held == s.ttl.metrics.offloaded_tokens_at_finish > 0
    policy = s.ttl.policy
    path = req.kv.cache_protected_len
    assert policy.miss_cost_s(path, held) < policy.miss_cost_s(path), "a reload is cheaper"


def test_a_node_s_group_is_its_path_s_as_a_finished_turn_names_it(policy_env) -> None:
    s = hicache(FakeClock())
    order = s.cache.host_order
    prompt = tokens(10_000, TURN)
    req = turn(s, prompt, "agent")
    path = [*req.origin_input_ids, *req.output_ids][: req.kv.cache_protected_len]
    node = s.cache.tree_core.node_by_id(req.last_node)
    head = chunk_hashes(path, order.chunk_tokens, tree_namespace(req))[: order.depth]
    assert order.group_of(node) == tuple(head)


def test_one_tenant_s_turns_leave_another_s_group_alone(policy_env) -> None:
    # two tenants (their cache salts) send the same prompt: SGLang keeps two paths, and the
    # host tier two groups — one tenant's ended program does not end the other's, which
    # waits on a tool (an ended program's group ranks first, (0, ...))
    s = hicache(FakeClock())
    order = s.cache.host_order
    prompt = tokens(10_000, TURN)
    waiting = turn(s, prompt, "agent", cache_salt="tenant-b")
    ended = turn(s, prompt, "agent", cache_salt="tenant-a", last_turn=True)
    node = {
        salt: s.cache.tree_core.node_by_id(req.last_node)
        for salt, req in (("b", waiting), ("a", ended))
    }
    assert node["a"] is not node["b"]  # (SGLang's own separation)
    assert order.group_of(node["a"]) != order.group_of(node["b"])
    rank = order.ranker()
    assert rank(node["a"])[0] == 0.0 and rank(node["b"])[0] != 0.0


def test_the_model_s_time_starts_at_the_clock_s_first_reading() -> None:
    """The cache reads its adapter's clock, which a replay sets after SGLang built the tree:
    the model's time must start there, not at the clock of construction (which put a fake
    clock's first hours at 0 and made every reuse interval 0)."""
    adapter = SimpleNamespace(clock=lambda: 50_000.0)  # the clock when the tree is built
    order = HostTierOrder(
        OffloadSettings(chunk_tokens=1, refit_every=1), 64, lambda: adapter.clock()
    )
    fake = adapter.clock = FakeClock()  # the replay's clock, 1000 s
    path = tokens(10_000, 8)
    order.accessed(path)
    fake.advance(7.0)
    order.accessed(path)
    assert order.now() == 7.0
    windows = [list(g.reuse_s) for g in order.model.tree.groups()]
    assert [7.0] in windows, windows


BAD_OFFLOAD = [
    ("chunk_tokens", {"chunk_tokens": 0}),
    ("chunk_tokens", {"chunk_tokens": 2.5}),
    ("group_depth", {"group_depth": 0}),
    ("refit_every", {"refit_every": 0}),
    ("window", {"window": 0}),
    ("max_ttl_s", {"max_ttl_s": -1}),
    ("gpu_price_per_hour", {"gpu_price_per_hour": "4"}),
    ("reload_bytes_per_s", {"reload_bytes_per_s": 0}),
    ("bogus", {"bogus": 1}),
]


@pytest.mark.parametrize(("field", "values"), BAD_OFFLOAD, ids=[f for f, _ in BAD_OFFLOAD])
def test_every_bad_offload_knob_is_refused_at_start_up(policy_env, field, values) -> None:
    policy_env.setenv("TTLPOLICY_OFFLOAD", json.dumps(values))
    with pytest.raises((ValueError, TypeError), match=field):
        hicache(FakeClock())


def test_offload_knobs_that_are_not_json_are_refused(policy_env) -> None:
    policy_env.setenv("TTLPOLICY_OFFLOAD", "chunk_tokens=16")
    with pytest.raises(ValueError, match="TTLPOLICY_OFFLOAD"):
        hicache(FakeClock())


class HostInterleavings(Interleavings):
    """The device tree's interleavings (test_properties.py) with HiCache on: demotions, host
    evictions by the library's order and load-backs happen among them."""

    def __init__(self) -> None:  # the parent's body, with a host pool
        super(Interleavings, self).__init__()
        self.clock = FakeClock()
        knobs = {"TTLPOLICY_POLICY": TEST_POLICY, "TTLPOLICY_PIN_BUDGET_FRACTION": "0.5"}
        with mock.patch.dict(os.environ, knobs):
            self.s = hicache(self.clock)
        from test_properties import Programs

        self.c = Programs()
        self.seen: set[str] = set()

    @rule(n=st.integers(60, 200))
    def a_crowd_demotes_to_the_host(self, n: int) -> None:
        """An anonymous request runs alone to its end when it fits: its allocation demotes
        cached turns to the host (and the host evicts to make room)."""
        if self.s.running or self.s.waiting:
            return
        req = self.s.submit(self.c.fresh(n))
        if self.s.schedule() == [req]:
            self.s.finish(req, self.c.fresh(2))

    @rule(p=st.integers(0, 3), n=st.integers(60, 200))
    def a_program_returns_after_a_crowd(self, p: int, n: int) -> None:
        """Its pin expired and its context was demoted meanwhile: its turn loads it back."""
        self.clock.advance(31.0)  # past the test policy's longest pin
        self.s.order()
        self.a_crowd_demotes_to_the_host(n)
        submit(self.s, self.c, p, 5, False)
        self.s.schedule()

    @rule(n=st.integers(1, 300))
    def host_pressure(self, n: int) -> None:
        """The controller's call when a backup finds the host pool full."""
        if self.s.cache.evict_host(n):
            event("the host evicted by the library's order")

    @invariant()
    def no_lock_or_host_reference_outlives_its_node(self) -> None:
        nodes = arena(self.s)
        root = self.s.cache.tree_core.root_node
        host = self.s.cache.cache_controller.mem_pool_host
        held = 0
        for node in nodes.values():
            data = node.component_data[FULL]
            if node is not root:  # attached: its parent chain reaches the root
                up = node
                while up.parent is not None:
                    assert up in up.parent.children.values()
                    up = up.parent
                assert up is root
            assert data.host_lock_ref == 0, "no load in flight holds a host lock between steps"
            if data.host_value is not None:
                held += len(data.host_value)
        # every host slot in use belongs to a node in the tree
        assert host.size - host.available_size() == held
        if held:
            event("the host holds nodes")
        if self.s.host_loaded_tokens:
            event("a host hit was loaded back")
        # every lock the adapter holds (pins, consumed pins) is on a node of the tree
        for pins in (self.s.ttl.pins, self.s.ttl.handover):
            for held_locks in pins._held.values():
                for lock, _ in held_locks:
                    assert lock.node in nodes


HostInterleavings.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_lock_or_host_reference_outlives_its_node = HostInterleavings.TestCase
