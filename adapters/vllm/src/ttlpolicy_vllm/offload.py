"""``TTLCachePolicy``: ttlpolicy's online group TTLs as the replacement policy of vLLM's CPU
offload tier (vLLM 0.32 and 0.33 ``CachePolicy``), loaded by configuration only::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"cpu_bytes_to_use": 8000000000,
        "eviction_policy": "TTLCachePolicy", "cache_policy_module_path": "ttlpolicy_vllm.offload"}}'

**What it decides** (every rule lives in ``ttlpolicy.OnlineGroupTTL``, the eviction order in
its ``eviction_rank``; this class only keeps vLLM's chunks in the order that rule gives):

* A request's chunks, in prefix order (``on_request_finished``), are one access of the
  library's model: grouping by prefix (``PrefixTree``: the first ``group_depth`` chunk hashes
  name the group), reuse intervals per group, TTL and ROI per group refitted online every
  ``refit_every`` requests.
* ``evict(n, protected)`` takes, among chunks with ``ref_cnt == 0`` outside ``protected``:
  first expired chunks (idle longer than their group's TTL) and chunks of programs that ended,
  oldest deadline first; then the least value given the idle time (``back_value``); least
  recently used within a group
  (a request's tail before its head); chunks of a request still running last among live
  ones.  Chunks of a program known to wait on a tool
  (``program_hints``, fed by ``TTLScheduler``) go last until that wait's deadline.
  All or nothing: ``None`` and no change when ``n`` such chunks do not exist.
* Chunks stored before their request finished have no group yet: they expire by the pooled
  TTL from their insertion, and until then rank after every live group.

Prices (``TTLPOLICY_OFFLOAD``, JSON, all optional; the library's ``OffloadSettings``, which
also builds the model): benefit of a hit = prefill time saved minus reload time, priced at the
GPU's $/hour; cost = the tier's $/GB-hour times the chunk's bytes.  Both in dollars, so τ and
ROI are in dollars per chunk.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

from typing_extensions import override

from ttlpolicy.serving import OffloadSettings

from . import program_hints
from .compat import CachePolicy, ChunkStatus, OffloadKey, ReqContext, order_request_keys

GroupKey = tuple[int, ...]
#: the group of chunks stored before their request told us their prefix
PENDING: GroupKey = ()


def key_hash(key: OffloadKey) -> int:
    """A chunk key (block hash + KV group index) as the signed 64-bit id the prefix tree takes:
    the block hash is already a strong hash, so its first 8 bytes are enough."""
    return int.from_bytes(bytes(key[:8]).ljust(8, b"\0"), "big", signed=True)


class TTLCachePolicy(CachePolicy):
    """vLLM CachePolicy ordered by ttlpolicy's online group TTLs (module docstring)."""

    def __init__(
        self,
        cache_capacity: int,
        settings: OffloadSettings | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(cache_capacity)
        self.settings = settings if settings is not None else OffloadSettings.from_env()
        self.clock: Callable[[], float] = clock if clock is not None else time.monotonic
        self._t0 = self.clock()
        self._last_now = 0.0
        self._make_model()
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self._group_of: dict[OffloadKey, GroupKey] = {}
        # per group, its chunks least recently used first, with each chunk's last access
        self._lru: dict[GroupKey, OrderedDict[OffloadKey, float]] = {}
        self._ended: dict[GroupKey, float] = {}  # group -> when its program ended
        self._waiting: dict[GroupKey, float] = {}  # group -> end of its program's tool wait
        self.evict_calls = 0
        self.expired_evictions = 0

    def _make_model(self) -> None:
        # the shadow outlives a few evictions; idle groups at least as many as chunks
        self.model = self.settings.group_ttl(self.cache_capacity)

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Read the time from ``clock`` from now on (a replay's virtual time): the model's time
        goes on from where it is, never back, counted from ``clock``'s reading now."""
        self.clock = clock
        self._t0 = clock() - self._last_now

    def _now(self) -> float:
        # the model's time starts at 0 and never goes back, whatever the clock does
        self._last_now = max(self._last_now, self.clock() - self._t0)
        return self._last_now

    # -- storage ----------------------------------------------------------------------------
    @override
    def get(self, key: OffloadKey) -> ChunkStatus | None:
        return self.chunks.get(key)

    @override
    def insert(
        self, key: OffloadKey, chunk: ChunkStatus, req_context: ReqContext | None = None
    ) -> None:
        # (vLLM 0.33 passes the storing request's context, 0.32 does not: the chunk's group
        # comes from on_request_finished's prefix order either way)
        del req_context
        self.chunks[key] = chunk
        self._place(key, self._group_of.get(key, PENDING), self._now())

    @override
    def remove(self, key: OffloadKey) -> None:
        del self.chunks[key]
        self._unplace(key)

    @override
    def clear(self) -> None:
        self.chunks.clear()
        self._group_of.clear()
        self._lru.clear()
        self._ended.clear()
        self._waiting.clear()
        self._make_model()

    def _place(self, key: OffloadKey, group: GroupKey, now: float) -> None:
        old = self._group_of.get(key)
        if old is not None and old in self._lru:
            chunks = self._lru[old]
            chunks.pop(key, None)
            if not chunks:
                del self._lru[old]
        self._group_of[key] = group
        self._lru.setdefault(group, OrderedDict())[key] = now

    def _unplace(self, key: OffloadKey) -> None:
        group = self._group_of.pop(key, None)
        if group is None:
            return
        chunks = self._lru.get(group)
        if chunks is not None:
            chunks.pop(key, None)
            if not chunks:
                del self._lru[group]
                self._ended.pop(group, None)
                self._waiting.pop(group, None)

    # -- accesses ---------------------------------------------------------------------------
    @override
    def touch(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> None:
        now = self._now()
        for key in reversed(list(keys)):  # tail first: the head ends most recent
            group = self._group_of.get(key)
            if group is not None and key in self.chunks:
                self._lru[group].pop(key, None)
                self._lru[group][key] = now

    @override
    def on_request_finished(
        self,
        key_groups: Sequence[Sequence[OffloadKey]],
        insertion_only_keys: set[OffloadKey],
        reused_keys: set[OffloadKey],
        req_context: ReqContext,
    ) -> None:
        del insertion_only_keys, reused_keys
        keys = order_request_keys(key_groups, req_context)
        if not keys:
            return
        now = self._now()
        path = [key_hash(k) for k in keys]
        self.model.access(path, now)
        hint = program_hints.lookup(req_context.req_id)
        depth = self.settings.group_depth
        touched: set[GroupKey] = set()
        for i in range(len(keys) - 1, -1, -1):  # tail first: the head ends most recent
            key = keys[i]
            if key in self.chunks:
                group = tuple(path[: min(i + 1, depth)])
                self._place(key, group, now)
                touched.add(group)
        for group in touched:
            self._ended.pop(group, None)
            self._waiting.pop(group, None)
            if hint is not None and hint.ended:
                self._ended[group] = now
            elif hint is not None and hint.wait_s is not None:
                self._waiting[group] = now + hint.wait_s

    # -- eviction ---------------------------------------------------------------------------
    def rank(self, group: GroupKey, last_access_s: float, now: float) -> tuple[float, ...]:
        """Eviction order of a chunk of ``group`` last used at ``last_access_s`` (smallest
        first): the library's rule (``OnlineGroupTTL.eviction_rank``), told whether the
        group's program ended or waits on a tool (``program_hints``)."""
        return self.model.eviction_rank(
            group,
            last_access_s,
            now,
            ended_s=self._ended.get(group),
            waiting_until_s=self._waiting.get(group),
        )

    def _candidates(self, group: GroupKey, protected: set[OffloadKey]) -> Iterator[tuple]:
        """The group's evictable chunks, least recently used first: (key, last access, chunk)."""
        for key, last in self._lru[group].items():
            chunk = self.chunks[key]
            if chunk.ref_cnt == 0 and key not in protected:
                yield key, last, chunk

    @override
    def evict(
        self, n: int, protected: set[OffloadKey]
    ) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        if n == 0:
            return []
        self.evict_calls += 1
        now = self._now()
        # one entry per group: (rank of its next candidate, tie-break, group, candidate, rest)
        heap: list[tuple[tuple[float, ...], int, GroupKey, tuple, Iterator[tuple]]] = []
        for i, group in enumerate(self._lru):
            it = self._candidates(group, protected)
            first = next(it, None)
            if first is not None:
                heap.append((self.rank(group, first[1], now), i, group, first, it))
        heapq.heapify(heap)
        selected: list[tuple[OffloadKey, ChunkStatus]] = []
        expired = 0
        while heap and len(selected) < n:
            rank, i, group, (key, _, chunk), it = heapq.heappop(heap)
            selected.append((key, chunk))
            expired += rank[0] == 0.0
            following = next(it, None)
            if following is not None:
                heapq.heappush(heap, (self.rank(group, following[1], now), i, group, following, it))
        if len(selected) < n:
            return None  # all or nothing: nothing was changed
        for key, _ in selected:
            del self.chunks[key]
            self._unplace(key)
        self.expired_evictions += expired
        return selected
