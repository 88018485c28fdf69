"""``TTLRadixCache``: SGLang's ``UnifiedRadixCache`` whose finished agent turns stay cached.

Selected with ``--radix-cache-backend ttlpolicy`` (the plug-in registers the factory).  Every
method of the real tree is inherited; the overrides only report to the ``ProgramTracker``:

* ``checkpoint`` — after SGLang's own insert, a finished request's node is where its cached
  turn ends: the tracker may lock it (the pin).  Called by ``release_kv_cache`` before the
  request's own lock is dropped, so the path is never unprotected in between.
* ``on_release`` — every release ends there: aborts and un-inserted requests end their program.
* ``finish`` — a queued request aborted by SGLang (never held KV): its program ends.
* with ``--enable-hierarchical-cache``, the host tier's eviction key is ttlpolicy's
  (``host_tier``: SGLang's FULL component with ``HostOrderedFullComponent``'s key), each
  finished turn is one access of its model, and a pin's miss is priced as a reload of what the
  host holds.
* ``evict`` / ``evict_for_alloc`` — when the evictable tokens cannot cover the request, what
  ``ProgramLifecycle.give_way`` says gives way is released first (pins, latest-arrived program
  first), so SGLang's own eviction can proceed; for an allocation, stalled (SGLang never
  retracts its last request: it would run out of memory), the prefixes held for waiting
  requests (consumed pins) too.

Tested against SGLang 0.5.23 exactly (``sglang==0.5.23``).
"""

from __future__ import annotations

import time
from typing import Any

from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.mem_cache.base_prefix_cache import (
    CacheRequestHandle,
    CacheRequestOutcome,
    EvictParams,
    EvictResult,
)
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.runtime_context import get_memory

from ttlpolicy.serving import EngineKnobs, OffloadSettings

from . import host_tier
from .identity import program_of
from .programs import ProgramTracker


class TTLRadixCache(UnifiedRadixCache):
    def __init__(self, params: Any) -> None:
        hierarchical = bool(get_memory().enable_hierarchical_cache)
        if hierarchical:  # read before anything is built: a bad value stops the start
            self.offload = OffloadSettings.from_env()
            params.component_registry_override = {
                **(params.component_registry_override or {}),
                ComponentType.FULL: host_tier.HostOrderedFullComponent,
            }
        super().__init__(params)
        total_tokens = params.token_to_kv_pool_allocator.size
        knobs = EngineKnobs.from_env(reload_tier=hierarchical)
        self.ttl = ProgramTracker(
            self,
            total_tokens,
            self.page_size,
            knobs,
            enable_metrics=bool(getattr(params, "enable_metrics", False)),  # --enable-metrics
        )
        self.host_order: host_tier.HostTierOrder | None = None

    def init_hicache(self, server_args: Any, params: Any) -> None:
        super().init_hicache(server_args, params)
        full = self.components.get(ComponentType.FULL)
        if self.cache_controller is None or not isinstance(
            full, host_tier.HostOrderedFullComponent
        ):
            return
        capacity = self.cache_controller.mem_pool_host.size
        self.host_order = host_tier.HostTierOrder(self.offload, capacity, lambda: self.ttl.clock())
        full.host_order = self.host_order
        self.ttl.host_tokens = lambda node: host_tier.host_prefix_tokens(self, node)

    def checkpoint(self, req: Any, *, up_to: int, **kwargs: Any) -> None:
        super().checkpoint(req, up_to=up_to, **kwargs)
        if req.finished() and not isinstance(req.finished_reason, FINISH_ABORT):
            t0 = time.perf_counter()
            self.ttl.finished(req, req.last_node, req.kv.cache_protected_len)
            if self.host_order is not None:
                self._host_access(req, req.kv.cache_protected_len)
            self.ttl.metrics.adapter_s += time.perf_counter() - t0

    def _host_access(self, req: Any, path_tokens: int) -> None:
        """The finished turn is one access of the host tier's model, told whether its
        program ended or waits on a tool (its pin's deadline)."""
        info = program_of(req, self.ttl.tenancy)
        pin = self.ttl.programs.pin(info.program_id) if info is not None else None
        ids = [*req.origin_input_ids, *req.output_ids][:path_tokens]
        self.host_order.accessed(  # type: ignore[union-attr]
            ids,
            host_tier.tree_namespace(req),
            waiting_until_s=pin.deadline_s if pin is not None else None,
            ended=info is not None and info.last_turn,
        )

    def on_release(self, req: Any, *, checkpointed: bool) -> None:
        super().on_release(req, checkpointed=checkpointed)
        t0 = time.perf_counter()
        self.ttl.released(req)
        self.ttl.metrics.adapter_s += time.perf_counter() - t0

    def finish(self, handle: CacheRequestHandle, outcome: CacheRequestOutcome) -> None:
        super().finish(handle, outcome)
        if outcome != CacheRequestOutcome.SUCCESS:
            self.ttl.aborted(handle.rid)

    def evict(self, params: EvictParams) -> EvictResult:
        self._make_evictable(params.num_tokens, stalled=False)
        return super().evict(params)

    def evict_for_alloc(self, params: EvictParams, **kwargs: Any) -> EvictResult:
        self._make_evictable(params.num_tokens, stalled=True)
        return super().evict_for_alloc(params, **kwargs)

    def _make_evictable(self, num_tokens: int, stalled: bool) -> None:
        if self.disable or not self.ttl.life.may_give_way(stalled):
            return
        if self.ttl.programs.pin_count:
            self.ttl.expire()  # (expired pins go first, as pins do at a scheduling pass)
        self.ttl.give_way(num_tokens - self.evictable_size(), stalled)

    def ttl_stats(self) -> dict[str, float]:
        """The adapter's counters (see ``AdapterMetrics``)."""
        self.ttl.note_pinned()
        return self.ttl.metrics.as_dict()
