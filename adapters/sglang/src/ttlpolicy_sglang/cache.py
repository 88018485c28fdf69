"""``TTLRadixCache``: SGLang's ``UnifiedRadixCache`` whose finished agent turns stay cached.

Selected with ``--radix-cache-backend ttlpolicy`` (the plug-in registers the factory).  Every
method of the real tree is inherited; the overrides only report to the ``ProgramTracker``:

* ``checkpoint`` — after SGLang's own insert, a finished request's node is where its cached
  turn ends: the tracker may lock it (the pin).  Called by ``release_kv_cache`` before the
  request's own lock is dropped, so the path is never unprotected in between.
* ``on_release`` — every release ends there: aborts and un-inserted requests end their program.
* ``finish`` — a queued request aborted by SGLang (never held KV): its program ends.
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
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

from ttlpolicy.serving import EngineKnobs

from .programs import ProgramTracker


class TTLRadixCache(UnifiedRadixCache):
    def __init__(self, params: Any) -> None:
        super().__init__(params)
        total_tokens = params.token_to_kv_pool_allocator.size
        self.ttl = ProgramTracker(
            self,
            total_tokens,
            self.page_size,
            EngineKnobs.from_env(),
            enable_metrics=bool(getattr(params, "enable_metrics", False)),  # --enable-metrics
        )

    def checkpoint(self, req: Any, *, up_to: int, **kwargs: Any) -> None:
        super().checkpoint(req, up_to=up_to, **kwargs)
        if req.finished() and not isinstance(req.finished_reason, FINISH_ABORT):
            t0 = time.perf_counter()
            self.ttl.finished(req, req.last_node, req.kv.cache_protected_len)
            self.ttl.metrics.adapter_s += time.perf_counter() - t0

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
