"""TTLCachePolicy inside vLLM's real CPUOffloadingManager (loaded through vLLM's factory by
module path, as a user configures it), driven by replayed block-hash streams and by random
interleavings of concurrent requests: capacity never exceeded, protected and referenced
chunks never evicted, evict all or nothing, nothing leaked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vllm.v1.kv_offload.base import ReqContext
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

from ttlpolicy.traces import sample_dir
from ttlpolicy_vllm import program_hints
from ttlpolicy_vllm.offload import OffloadSettings, TTLCachePolicy, key_hash
from vllm_offload_replay import (
    Access,
    agentic_stream,
    chunk_key,
    held_chunks,
    iter_sessions,
    make_manager,
    mooncake_stream,
    replay,
)

#: the Mooncake excerpt the repository ships for tests (Apache-2.0, LICENSE beside it)
MOONCAKE_EXCERPT = (
    Path(__file__).resolve().parents[3]
    / "tests"
    / "data"
    / "mooncake"
    / "conversation_trace_head2000.jsonl.gz"
)

# fast refits so that small streams exercise fitted TTLs
FAST = OffloadSettings(refit_every=2, max_ttl_s=50.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def consistent(policy: TTLCachePolicy) -> None:
    """The policy's indexes agree: every chunk is in exactly one group's LRU list."""
    in_lists = [k for chunks in policy._lru.values() for k in chunks]
    assert len(in_lists) == len(set(in_lists)) == len(policy.chunks)
    assert set(in_lists) == set(policy.chunks) == set(policy._group_of)
    assert all(policy._lru.values()), "an empty group list was left behind"


def test_loads_by_module_path_through_vllms_factory():
    cls = CachePolicyFactory.get_cache_policy_cls("TTLCachePolicy", "ttlpolicy_vllm.offload")
    assert cls is TTLCachePolicy
    manager = make_manager("ttl", 16)
    assert isinstance(manager._policy, TTLCachePolicy)
    assert manager._policy.cache_capacity == 16


def test_key_hash_inverts_chunk_key():
    for h in (0, 1, -1, (1 << 63) - 1, -(1 << 63), 123456789):
        assert key_hash(chunk_key(h)) == h


def test_sample_sessions_replay_through_the_real_manager():
    """The package's agentic sessions through vLLM's manager with our policy at a capacity
    that forces evictions: the tier stays within capacity and every hit is a chunk that the
    stream stored before and that was not evicted since."""
    stream = agentic_stream(iter_sessions(sample_dir(), limit=2), mean_gap_s=30.0)[:60]
    capacity = 300
    manager = make_manager("ttl", capacity)
    policy = manager._policy
    held: set = set()
    for access in stream:
        keys = list(dict.fromkeys(chunk_key(h) for h in access.hash_ids))
        ctx = ReqContext(access.request_id)
        manager.on_new_request(ctx)
        hits = 0
        for key in keys:
            if manager.lookup(key, ctx).name != "HIT":
                break
            hits += 1
        assert all(k in held for k in keys[:hits])
        if hits:
            manager.prepare_load(keys[:hits], ctx)
            manager.complete_load(keys[:hits], ctx)
        out = manager.prepare_store(keys[hits:], ctx) if hits < len(keys) else None
        if out is not None:
            # vLLM protects the chunks offered for storing (the loaded head has completed)
            assert not set(out.evicted_keys) & set(keys[hits:]), "evicted a protected chunk"
            held -= set(out.evicted_keys)
            manager.complete_store(out.keys_to_store, ctx)
            held |= set(out.keys_to_store)
        manager.on_request_finished(ctx)
        assert held_chunks(manager) == len(policy.chunks) == len(held) <= capacity
        consistent(policy)
    assert policy.evict_calls > 0 and policy.model.accesses == len(stream)


def test_replay_counts_agree_between_policies():
    """The same stream through lru, arc and ours: each request's chunks are counted once,
    and what each policy stored is what it holds plus what it evicted."""
    stream = agentic_stream(iter_sessions(sample_dir(), limit=1), mean_gap_s=10.0)[:40]
    results = {p: replay(p, 1200, stream) for p in ("lru", "arc", "ttl")}
    asked = {r.chunks_requested for r in results.values()}
    assert len(asked) == 1
    for r in results.values():
        assert r.requests == len(stream) and r.store_failures == 0
        # chunks after the first miss that the tier still holds are neither hits nor stored
        assert 0 < r.hit_chunks + r.stored_chunks <= r.chunks_requested
        assert r.evicted_chunks == r.stored_chunks - r.held_chunks_end
        assert r.held_chunks_end == 1200  # the stream is larger than the tier: it fills up
    assert results["lru"].hits_per_request[1] > 0  # the second request reuses the first's


# -- eviction order ---------------------------------------------------------------------------


def stored(policy: TTLCachePolicy, hash_ids, rid: str) -> list:
    """Insert and finish one request's chunks (ready, evictable), as the manager would."""
    keys = [chunk_key(h) for h in hash_ids]
    for i, key in enumerate(keys):
        if policy.get(key) is None:
            chunk = ChunkStatus(len(policy.chunks) + i)
            chunk.ref_cnt = 0
            policy.insert(key, chunk)
    ctx = ReqContext(rid)
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, i + 1)
    policy.on_request_finished([keys], set(), set(), ctx)
    return keys


def evicted(policy: TTLCachePolicy, n: int) -> list:
    """The keys ``policy`` evicts to free ``n`` chunks (it can: nothing is protected)."""
    got = policy.evict(n, set())
    assert got is not None
    return [k for k, _ in got]


def test_expired_chunks_go_before_live_ones_and_tail_before_head():
    clock = Clock()
    policy = TTLCachePolicy(100, FAST, clock)
    # group A reused every 10 s, group B every 40 s; holding is cheap, so A's fit, shrunk
    # toward the pooled intervals (OnlineGroupTTL's prior_weight), reaches B's 40 s too
    for t in range(0, 121, 10):
        clock.now = float(t)
        if t <= 80:
            a = stored(policy, [1, 2, 3], f"a{t}")
        if t % 40 == 0:
            stored(policy, [7, 8, 9], f"b{t}")
    assert policy.model.ttl_s([1, 2]) == 40.0 and policy.model.ttl_s([7, 8]) == 40.0
    clock.now = 125.0  # A idle 45 s > 40 s: expired; B idle 5 s < 40 s: live
    assert evicted(policy, 2) == [a[2], a[1]]  # A's tail first
    assert policy.expired_evictions == 2
    consistent(policy)


def test_lowest_roi_group_goes_first_among_live_ones():
    clock = Clock()
    policy = TTLCachePolicy(100, FAST, clock)
    for t in range(0, 81, 10):
        clock.now = float(t)
        stored(policy, [1, 2], f"a{t}")  # reused every 10 s: high value per chunk-second
        if t % 40 == 0:
            b = stored(policy, [7, 8], f"b{t}")  # every 40 s: lower
    assert policy.model.roi([7, 8]) < policy.model.roi([1, 2])
    clock.now = 81.0  # both live; B was used less recently than A... and is worth less
    assert evicted(policy, 1) == [b[1]]


def test_ended_program_goes_first_and_waiting_program_last():
    clock = Clock()
    policy = TTLCachePolicy(100, OffloadSettings(refit_every=1000), clock)
    program_hints.clear()
    program_hints.note("old", ended=False, wait_s=100.0)
    old = stored(policy, [1, 2], "old")  # least recently used, but its program waits
    clock.now = 1.0
    mid = stored(policy, [3, 4], "mid")
    clock.now = 2.0
    program_hints.note("done", ended=True)
    done = stored(policy, [5, 6], "done")  # most recent, but its program ended
    order = [done[1], done[0], mid[1], mid[0], old[1], old[0]]
    assert evicted(policy, 6) == order
    assert program_hints.size() == 0


# -- vLLM's contract --------------------------------------------------------------------------


def snapshot(policy: TTLCachePolicy):
    return (
        {k: (c.ref_cnt, c.chunk_id) for k, c in policy.chunks.items()},
        {g: list(v.items()) for g, v in policy._lru.items()},
        dict(policy._group_of),
        policy.expired_evictions,
    )


@settings(max_examples=60, deadline=None)
@given(
    n_chunks=st.integers(1, 12),
    pinned=st.sets(st.integers(0, 11)),
    protected=st.sets(st.integers(0, 11)),
    n=st.integers(0, 14),
)
def test_evict_is_all_or_nothing_and_skips_referenced_and_protected(n_chunks, pinned, protected, n):
    clock = Clock()
    policy = TTLCachePolicy(16, FAST, clock)
    keys = stored(policy, range(100, 100 + n_chunks), "r")
    for i in pinned & set(range(n_chunks)):
        policy.chunks[keys[i]].ref_cnt = 1 if i % 2 else -1  # loading / not yet stored
    prot = {keys[i] for i in protected if i < n_chunks}
    clock.now = 5.0
    before = copy.deepcopy(snapshot(policy))
    out = policy.evict(n, prot)
    free = [k for i, k in enumerate(keys) if i not in pinned and k not in prot]
    if n > len(free):
        assert out is None and snapshot(policy) == before
    else:
        assert out is not None and len(out) == n
        assert {k for k, _ in out} <= set(free)
        assert len(policy.chunks) == n_chunks - n
    consistent(policy)


# Random interleavings of concurrent requests: each request goes through
# new -> lookup/load -> store -> complete (in any order across requests) -> finish.
ops = st.lists(
    st.tuples(
        st.sampled_from(["start", "store", "complete_store", "complete_load", "finish", "tick"]),
        st.integers(0, 5),  # which request slot
        st.lists(st.integers(0, 9), min_size=1, max_size=6),  # its hash path (small alphabet)
        st.booleans(),  # store success
    ),
    max_size=60,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 10), script=ops, policy_name=st.sampled_from(["ttl", "lru"]))
def test_random_interleavings_keep_vllms_invariants(capacity, script, policy_name):
    """Ours under the same driver as vLLM's LRU (the driver's own check): capacity never
    exceeded, chunks being loaded or stored never evicted, no chunk leaked at the end."""
    manager = make_manager(policy_name, capacity)
    policy = manager._policy
    clock = Clock()
    if isinstance(policy, TTLCachePolicy):
        policy.clock, policy._t0 = clock, 0.0
        policy.settings = FAST
    live: dict[int, dict] = {}  # slot -> request state
    serial = 0
    for op, slot, path, ok in script:
        clock.now += 1.0
        req = live.get(slot)
        if op == "start" and req is None:
            serial += 1
            keys = list(dict.fromkeys(chunk_key(h * 1000 + slot * 0) for h in path))
            ctx = ReqContext(f"q{serial}")
            for i, key in enumerate(keys):
                ctx.set_offload_key_position(key, i + 1)
            manager.on_new_request(ctx)
            hits = 0
            for key in keys:
                if manager.lookup(key, ctx).name != "HIT":
                    break
                hits += 1
            if hits:
                manager.prepare_load(keys[:hits], ctx)
            live[slot] = {"ctx": ctx, "keys": keys, "loading": keys[:hits], "storing": None}
        elif op == "store" and req is not None and req["storing"] is None:
            busy = {
                k
                for r in live.values()
                for k in r["loading"] + (r["storing"] or [])
                if r is not req
            }
            out = manager.prepare_store(req["keys"], req["ctx"])
            if out is not None:
                assert not set(out.evicted_keys) & (busy | set(req["keys"]))
                req["storing"] = list(out.keys_to_store)
            else:
                req["storing"] = []
        elif op == "complete_store" and req is not None and req["storing"]:
            manager.complete_store(req["storing"], req["ctx"], success=ok)
            req["storing"] = []
        elif op == "complete_load" and req is not None and req["loading"]:
            manager.complete_load(req["loading"], req["ctx"])
            req["loading"] = []
        elif op == "finish" and req is not None and not req["loading"] and not req["storing"]:
            manager.on_request_finished(req["ctx"])
            del live[slot]
        assert held_chunks(manager) <= capacity
        if isinstance(policy, TTLCachePolicy):
            assert held_chunks(manager) == len(policy.chunks)
            consistent(policy)
    # drain: everything completes and finishes; then the whole tier can be evicted
    for req in live.values():
        if req["storing"]:
            manager.complete_store(req["storing"], req["ctx"])
        if req["loading"]:
            manager.complete_load(req["loading"], req["ctx"])
        manager.on_request_finished(req["ctx"])
    held = held_chunks(manager)
    assert manager._num_evictable_cache_chunks == held, "a chunk stayed referenced"
    assert len(policy.evict(held, set()) or []) == held, "a chunk could not be evicted"


# -- settings -----------------------------------------------------------------------------------


def test_the_policy_reads_its_settings_from_the_environment(monkeypatch):
    # (the settings themselves: tests/serving/test_tier.py, in the core suite)
    monkeypatch.setenv("TTLPOLICY_OFFLOAD", json.dumps({"max_ttl_s": 60, "refit_every": 8}))
    policy = TTLCachePolicy(4)
    assert policy.settings == OffloadSettings(max_ttl_s=60, refit_every=8)
    assert policy.model.max_ttl_s == 60 and policy.model.refit_every == 8


def test_clear_forgets_everything():
    clock = Clock()
    policy = TTLCachePolicy(8, FAST, clock)
    stored(policy, [1, 2, 3], "r")
    policy.clear()
    assert not policy.chunks and not policy._lru and policy.model.accesses == 0
    assert policy.evict(1, set()) is None


def test_program_hints_are_bounded_and_consumed():
    program_hints.clear()
    for i in range(program_hints.MAX_NOTES + 10):
        program_hints.note(f"r{i}", ended=True)
    assert program_hints.size() == program_hints.MAX_NOTES
    assert program_hints.lookup("r0") is None  # the oldest were forgotten
    newest = program_hints.lookup(f"r{program_hints.MAX_NOTES + 9}")
    assert newest is not None and newest.ended
    with pytest.raises(ValueError, match="wait_s"):
        program_hints.note("x", ended=False, wait_s=float("nan"))
    program_hints.note("y" * 5000, ended=False, wait_s=3.0)  # a client's over-long id
    long_id = program_hints.lookup("y" * 5000)
    assert long_id is not None and long_id.wait_s == 3.0
    program_hints.clear()


def test_access_dataclass_is_what_replay_takes():
    s = replay("ttl", 4, [Access(0.0, "a", (1, 2, 3)), Access(1.0, "b", (1, 2, 3, 4))])
    assert s.hits_per_request == [0, 3] and s.chunks_requested == 7


def test_mooncake_excerpt_replays_through_the_real_manager():
    """The Mooncake excerpt shipped for tests (global hash ids, shared system prompts): the
    tier stays within capacity, its indexes stay consistent, stores are held or evicted."""
    path = MOONCAKE_EXCERPT
    stream = mooncake_stream(path, max_requests=300)
    distinct = len({h for a in stream for h in a.hash_ids})
    capacity = distinct // 5
    manager = make_manager("ttl", capacity)
    policy = manager._policy
    from vllm_offload_replay import ReplayStats, run_request

    stats = ReplayStats("ttl", capacity)
    for access in stream:
        policy.clock, policy._t0 = (lambda t=access.t_s: t), 0.0
        run_request(manager, access, stats)
        assert held_chunks(manager) == len(policy.chunks) <= capacity
    consistent(policy)
    assert stats.hit_chunks > 0 and stats.evicted_chunks > 0 and stats.store_failures == 0
    assert stats.evicted_chunks == stats.stored_chunks - held_chunks(manager)
    assert policy.model.accesses == len(stream)
