"""Replaying block-hash streams through vLLM's real ``CPUOffloadingManager``, as its
connector drives it, for any cache policy (vLLM's ``lru``, ``arc``, or ours by module path).

One request = what ``OffloadingConnectorScheduler`` does for it with a GPU prefix cache that
holds nothing of it: look its chunks up head first until the first miss, load the hits
(``prepare_load`` → ``complete_load``), store the rest (``prepare_store`` → ``complete_store``),
then ``on_request_finished``.  Used by the tests and by ``bench/offload_policies.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

from offload_streams import Access, agentic_stream, iter_sessions, mooncake_stream
from ttlpolicy_vllm import program_hints

# (the streams live in offload_streams.py, shared with SGLang's replay; re-exported here)
__all__ = ["Access", "agentic_stream", "iter_sessions", "mooncake_stream"]

#: the names a user writes in kv_connector_extra_config, per policy of the comparison
POLICIES: dict[str, tuple[str, str | None]] = {
    "lru": ("lru", None),
    "arc": ("arc", None),
    "ttl": ("TTLCachePolicy", "ttlpolicy_vllm.offload"),
}


#: chunks offered per prepare_store: one engine step of prefill (e.g. 2048 tokens / 64)
STORE_BATCH_CHUNKS = 32


def chunk_key(hash_id: int) -> OffloadKey:
    """The offload key of a trace block (KV group 0); ``offload.key_hash`` inverts it."""
    return make_offload_key(hash_id.to_bytes(8, "big", signed=True), 0)


class TimedPolicy:
    """Forwards to a CachePolicy and adds up the wall time of each method (the manager only
    calls methods, so the proxy sees every call)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls = 0
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        return timed


@dataclass
class ReplayStats:
    policy: str
    capacity_chunks: int
    requests: int = 0
    chunks_requested: int = 0
    hit_chunks: int = 0
    stored_chunks: int = 0
    store_failures: int = 0
    evicted_chunks: int = 0
    chunk_seconds: float = 0.0  # allocated chunks integrated over time
    held_chunks_end: int = 0
    policy_calls: int = 0
    policy_seconds: float = 0.0
    hits_per_request: list[int] = field(default_factory=list, repr=False)

    @property
    def hit_rate(self) -> float:
        return self.hit_chunks / self.chunks_requested if self.chunks_requested else 0.0


def make_manager(policy: str, capacity_chunks: int) -> CPUOffloadingManager:
    """vLLM's manager with ``policy`` resolved by its factory, as from kv_connector_extra_config."""
    name, module_path = POLICIES[policy]
    return CPUOffloadingManager(
        num_chunks=capacity_chunks, cache_policy=name, cache_policy_module_path=module_path
    )


def replay(
    policy: str,
    capacity_chunks: int,
    stream: Iterable[Access],
    hints: bool = False,
) -> ReplayStats:
    """Run ``stream`` through a fresh manager; ``hints``: tell the policy which request is a
    program's last (as ``TTLScheduler`` does through ``program_hints``)."""
    manager = make_manager(policy, capacity_chunks)
    timed = TimedPolicy(manager._policy)
    inner = manager._policy
    now = [0.0]
    if hasattr(inner, "use_clock"):
        inner.use_clock(lambda: now[0])
    manager._policy = timed
    stats = ReplayStats(policy, capacity_chunks)
    program_hints.clear()
    last_t = None
    for access in stream:
        if last_t is not None:
            stats.chunk_seconds += held_chunks(manager) * (access.t_s - last_t)
        last_t = access.t_s
        now[0] = access.t_s
        if hints and access.last_turn:
            program_hints.note(access.request_id, ended=True)
        hits = run_request(manager, access, stats)
        stats.hits_per_request.append(hits)
    program_hints.clear()
    stats.held_chunks_end = held_chunks(manager)
    stats.policy_calls, stats.policy_seconds = timed.calls, timed.seconds
    return stats


def held_chunks(manager: CPUOffloadingManager) -> int:
    return manager._num_allocated_chunks - len(manager._free_list)


def run_request(manager: CPUOffloadingManager, access: Access, stats: ReplayStats) -> int:
    """One request through the manager as the connector drives it; returns its hit chunks."""
    keys = list(dict.fromkeys(chunk_key(h) for h in access.hash_ids))  # a key once per request
    ctx = ReqContext(access.request_id)
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, i + 1)
    manager.on_new_request(ctx)
    hits = 0
    for key in keys:
        if manager.lookup(key, ctx) is not LookupResult.HIT:
            break
        hits += 1
    if hits:
        manager.prepare_load(keys[:hits], ctx)
        manager.complete_load(keys[:hits], ctx)
    # the connector offers new chunks step by step as prefill computes them
    for start in range(hits, len(keys), STORE_BATCH_CHUNKS):
        out = manager.prepare_store(keys[start : start + STORE_BATCH_CHUNKS], ctx)
        if out is None:
            stats.store_failures += 1
        else:
            manager.complete_store(out.keys_to_store, ctx)
            stats.stored_chunks += len(out.keys_to_store)
            stats.evicted_chunks += len(out.evicted_keys)
    manager.on_request_finished(ctx)
    stats.requests += 1
    stats.chunks_requested += len(keys)
    stats.hit_chunks += hits
    return hits
