"""SGLang's host tier (HiCache) ordered by ttlpolicy's online group TTLs.

With ``--enable-hierarchical-cache``, SGLang 0.5.23's ``UnifiedRadixCache`` backs nodes up to a
host pool, demotes them there when the GPU evicts, loads them back on a hit, and, when the host
pool is full, evicts host leaves through ``FullComponent.drive_host_eviction``: a heap of the
evictable host leaves keyed by ``session_ref_eviction_strategy`` (by default the tree's
``--radix-eviction-policy``, LRU).  ``HostOrderedFullComponent`` keeps that loop and only swaps
the key, for the duration of the call, to ``HostTierOrder.rank``:

* the rule is the library's ``OnlineGroupTTL.eviction_rank`` (the one the vLLM tier policy
  calls): expired groups and ended programs first, then the groups of least value per
  block-second, a program waiting on a tool (a pin's deadline) after every live group; SGLang's
  own access counter breaks ties (least recently used first);
* the model is ``OffloadSettings.group_ttl`` (``TTLPOLICY_OFFLOAD``, read at start-up; a bad
  value stops the server with the field named).  One access of the model is one finished
  request's path, cut into chunks of ``chunk_tokens`` tokens, each chunk named by a chained
  hash of its tokens, seeded with what SGLang's tree keeps apart (``tree_namespace``: the
  request's ``extra_key`` and ``cache_salt``, so two tenants' equal prompts are two groups, as
  they are two paths); a node's group is the first ``group_depth`` chunk hashes of its path
  from the root.

A component other than SGLang's own makes SGLang build the Python TreeCore ("custom components
require the Python TreeCore"): with HiCache on, the ``ttlpolicy`` backend runs on it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
from sglang.srt.mem_cache.unified_cache.components.full import FullComponent

from ttlpolicy.serving import OffloadSettings

GroupKey = tuple[int, ...]


def tree_namespace(key: Any) -> tuple[Any, Any]:
    """What SGLang's tree keeps apart besides the tokens, read from a request or a node's
    ``RadixKey`` (both carry them): its ``extra_key`` and its ``cache_salt`` (a tenant's)."""
    return getattr(key, "extra_key", None), getattr(key, "cache_salt", None)


def chunk_hashes(
    token_ids: Sequence[int], chunk_tokens: int, namespace: tuple[Any, Any] = (None, None)
) -> list[int]:
    """One signed 64-bit id per ``chunk_tokens`` tokens (the last chunk may be short), each
    chained on the one before it, so a chunk's id names its whole prefix (as block hashes do)
    within its ``namespace`` (``tree_namespace``)."""
    ids = []
    h = hash(("ttlpolicy", namespace))
    for start in range(0, len(token_ids), chunk_tokens):
        h = hash((h, tuple(token_ids[start : start + chunk_tokens])))  # a signed 64-bit int
        ids.append(h)
    return ids


class HostTierOrder:
    """The host tier's eviction key (module docstring).  ``clock`` gives seconds; the model's
    time starts at 0 at the clock's first reading (not at construction: the cache reads its
    adapter's clock, which a test or replay may set after building the tree) and never goes
    back, whatever the clock does."""

    def __init__(
        self, settings: OffloadSettings, capacity_tokens: int, clock: Callable[[], float]
    ) -> None:
        if settings.chunk_tokens != int(settings.chunk_tokens) or settings.chunk_tokens < 1:
            raise ValueError(
                "OffloadSettings.chunk_tokens must be a whole number of tokens >= 1 for SGLang's"
                f" host tier, got {settings.chunk_tokens!r}"
            )
        if capacity_tokens < 1:
            raise ValueError(f"the host pool must hold tokens, got capacity {capacity_tokens!r}")
        self.settings = settings
        self.chunk_tokens = int(settings.chunk_tokens)
        self.depth = settings.group_depth
        capacity_chunks = math.ceil(capacity_tokens / self.chunk_tokens)
        self.model = settings.group_ttl(capacity_chunks)
        self.clock = clock
        self._t0: float | None = None  # the clock's first reading
        self._last_now = 0.0
        # Per group: its last access (s), and what its program does; bounded as the model's
        # idle groups are (least recently accessed dropped first).
        self._max_groups = max(1024, capacity_chunks)
        self._last_access: OrderedDict[GroupKey, float] = OrderedDict()
        self._waiting: dict[GroupKey, float] = {}  # group -> end of its program's tool wait
        self._ended: dict[GroupKey, float] = {}  # group -> when its program ended

    def now(self) -> float:
        t = self.clock()
        if self._t0 is None:
            self._t0 = t
        self._last_now = max(self._last_now, t - self._t0)
        return self._last_now

    # -- accesses ----------------------------------------------------------------------------
    def accessed(
        self,
        token_ids: Sequence[int],
        namespace: tuple[Any, Any] = (None, None),
        *,
        waiting_until_s: float | None = None,
        ended: bool = False,
    ) -> GroupKey:
        """A request finished on ``token_ids`` (its cached path, in its tree ``namespace``):
        one access of the model.  ``waiting_until_s`` (the clock's seconds): its program waits
        on a tool until then; ``ended``: its program ended.  Returns the path's group."""
        now = self.now()
        path = chunk_hashes(token_ids, self.chunk_tokens, namespace)
        if not path:
            return ()
        self.model.access(path, now)
        group = tuple(path[: self.depth])
        self._last_access.pop(group, None)
        self._last_access[group] = now
        self._waiting.pop(group, None)
        self._ended.pop(group, None)
        if ended:
            self._ended[group] = now
        elif waiting_until_s is not None:
            self._waiting[group] = waiting_until_s - (self._t0 or 0.0)  # (now() set it)
        while len(self._last_access) > self._max_groups:
            old, _ = self._last_access.popitem(last=False)
            self._waiting.pop(old, None)
            self._ended.pop(old, None)
        return group

    # -- the order ---------------------------------------------------------------------------
    def group_of(self, node: Any) -> GroupKey:
        """The group of a tree node: the first ``group_depth`` chunk hashes of its path."""
        keys = []
        while node is not None and node.key is not None:
            keys.append(node.key)
            node = node.parent
        if not keys:
            return ()
        tokens: list[int] = []
        want = self.depth * self.chunk_tokens
        for key in reversed(keys):
            tokens.extend(key.token_ids[: want - len(tokens)])
            if len(tokens) >= want:
                break
        return tuple(chunk_hashes(tokens, self.chunk_tokens, tree_namespace(keys[0])))

    def ranker(self) -> Callable[[Any], tuple[float, ...]]:
        """The key of one ``drive_host_eviction`` call (groups memoised for the call)."""
        now = self.now()
        groups: dict[int, GroupKey] = {}

        def rank(node: Any) -> tuple[float, ...]:
            group = groups.get(node.id)
            if group is None:
                group = groups[node.id] = self.group_of(node)
            last_s = self._last_access.get(group)
            if last_s is None:  # never finished a request (inserted while running): pending
                last_s, group = now, ()
            return (
                *self.model.eviction_rank(
                    group,
                    last_s,
                    now,
                    ended_s=self._ended.get(group),
                    waiting_until_s=self._waiting.get(group),
                ),
                node.last_access_time,
            )

        return rank


class HostOrderedFullComponent(FullComponent):
    """SGLang's FULL component whose host eviction is keyed by ``host_order`` (set by the
    cache once built; None: SGLang's own key)."""

    host_order: HostTierOrder | None = None

    def drive_host_eviction(
        self,
        num_tokens: int,
        tracker: dict[ComponentType, int],
        device_frees: dict[ComponentType, list[Any]],
        host_frees: dict[ComponentType, list[Any]],
        cache_actions: list[Any],
    ) -> None:
        if self.host_order is None:
            return super().drive_host_eviction(
                num_tokens, tracker, device_frees, host_frees, cache_actions
            )
        self._ensure_eviction_strategy()
        keyed: Any = self  # (SGLang sets the attribute lazily: untyped)
        device_key = keyed.session_ref_eviction_strategy
        keyed.session_ref_eviction_strategy = self.host_order.ranker()
        try:
            super().drive_host_eviction(
                num_tokens, tracker, device_frees, host_frees, cache_actions
            )
        finally:
            keyed.session_ref_eviction_strategy = device_key


def host_prefix_tokens(cache: Any, node_id: Any) -> int:
    """Leading tokens of ``node_id``'s path that the host pool holds (a reload away)."""
    if getattr(cache, "cache_controller", None) is None:
        return 0
    core = cache.tree_core
    node = core.node_by_id(node_id)
    path = []
    while node is not None and node is not core.root_node:
        path.append(node)
        node = node.parent
    held = 0
    for node in reversed(path):
        if node.component_data[ComponentType.FULL].host_value is None:
            break
        held += len(node.key)
    return held
