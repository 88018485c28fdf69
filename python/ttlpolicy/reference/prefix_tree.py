"""Prefix tree over KV-block hashes, with a TTL per group of blocks chosen by return on
investment (the Kareto tuner, arXiv 2603.08739).

The tree is one cache tier (DRAM or SSD): a node is a block held there, reachable through the
blocks of its prefix.  ``insert(hash_ids, now)`` walks the held prefix of a request, counts
those blocks as hits and stores the rest.

**Grouping rule** (ours: the Kareto paper groups blocks by prefix-tree access pattern, but we
could not find its exact rule, so we state our own).  With ``group_depth = D``, the group of a
block at depth k (1-based) is keyed by the first ``min(k, D)`` hashes of its path: each of the
top D−1 levels is a group of one block (shared system prompts, hit by everyone), and everything
at depth ≥ D hangs in the subtree of its depth-D ancestor (one conversation, one agent
session).  A group is named by that key, so it outlives its blocks: its statistics keep being
recorded while its blocks are gone, and a TTL can be set before a group is ever seen.

**Reuse intervals** are per group: each insert that reaches a group records one sample, the
time since the group's previous access.  Because the group outlives its blocks, an access
after expiry still records its interval: the samples are not censored by the TTL in force.

**Group TTL** (``group_ttls``): τ_g = argmax_τ P_g(reuse ≤ τ)·benefit_per_hit − price·τ with
``solve_ttl``, the solver of CacheTTL.  Benefit and price are per block: an access holds its
blocks for τ and the next access within τ reuses them, so the number of blocks multiplies both
terms and cancels (the issue's cost ``price · blocks`` with benefit ``blocks · per-block
benefit`` gives the same τ).

**Expiry** is per block: a block expires when ``last_access_s + ttl(group) < now``; removing a
block removes its subtree (a block without its prefix can never be matched).  A group whose
last access is past its TTL therefore holds no blocks once ``expire(now)`` (or any insert) has
run.  **Bound**: at most ``max_nodes`` blocks; an insert that needs room first expires, then
evicts least recently used leaves (never a block of the prefix being inserted).  Groups that
hold blocks are always kept; at most ``max_idle_groups`` groups without blocks are remembered
(the longest idle is forgotten first).

**Block-seconds**: each block is charged from creation until it is removed, or until its
deadline if that came first (expiry is charged at the deadline, not when ``expire`` ran).

Mirrored exactly by ``rust/src/prefix_tree.rs``: the orders below (path touched leaf→root,
subtree removed in pre-order with children in insertion order, deadlines popped by
(deadline, sequence number), one heap entry per block) are part of the rule.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._validate import (
    as_float,
    as_int,
    count_field,
    i64_field,
    int_in,
    non_negative,
    seq_items,
    short_repr,
    unchecked,
)
from ._sync import synchronized
from .solver import solve_ttl

MAX_NODES = 1 << 31
MAX_GROUP_DEPTH = 64
MAX_WINDOW = 1 << 20
MAX_IDLE_GROUPS = 1 << 32
HASH_MIN, HASH_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class GroupStats:
    """A snapshot of one group."""

    key: tuple[int, ...]  # the hashes of the group's head path (length ≤ group_depth)
    blocks: int  # blocks held now
    accesses: int  # inserts that reached the group
    hits: int  # blocks of the group found held by an insert
    reuse_s: tuple[float, ...]  # the last `window` reuse intervals, oldest first
    ttl_s: float  # math.inf: no TTL
    last_access_s: float | None

    def __post_init__(self) -> None:
        # a caller's values checked as the native class converts them (its maker's: unchecked)
        key = seq_items("key", "integers", self.key)
        object.__setattr__(self, "key", tuple(i64_field(f"key[{i}]", h) for i, h in enumerate(key)))
        for name in ("blocks", "accesses", "hits"):
            object.__setattr__(self, name, count_field(name, getattr(self, name)))
        reuse = seq_items("reuse_s", "numbers", self.reuse_s)
        object.__setattr__(
            self, "reuse_s", tuple(as_float(f"reuse_s[{i}]", r) for i, r in enumerate(reuse))
        )
        object.__setattr__(self, "ttl_s", as_float("ttl_s", self.ttl_s))
        if self.last_access_s is not None:
            object.__setattr__(self, "last_access_s", as_float("last_access_s", self.last_access_s))


def check_hashes(field: str, hash_ids: Any) -> list[int]:
    """A sequence of 64-bit signed integers (list, tuple, numpy integer array)."""
    if isinstance(hash_ids, (str, bytes)) or not isinstance(hash_ids, Iterable):
        raise TypeError(f"{field} must be a sequence of integers, got {type(hash_ids).__name__}")
    out = []
    for i, h in enumerate(hash_ids):
        n = as_int(f"{field}[{i}]", h)
        if not HASH_MIN <= n <= HASH_MAX:
            raise ValueError(
                f"{field}[{i}] must fit in a signed 64-bit integer, got {short_repr(n)}"
            )
        out.append(n)
    return out


def check_ttl(field: str, value: Any) -> float:
    """A TTL: a number >= 0, or math.inf for none."""
    x = as_float(field, value)
    if math.isnan(x) or x < 0.0:
        raise ValueError(f"{field} must be >= 0 (inf: no TTL), got {x!r}")
    return x


class _Group:
    __slots__ = ("accesses", "blocks", "hits", "key", "last_access_s", "reuse", "ttl_s")

    def __init__(self, key: tuple[int, ...], ttl_s: float, window: int) -> None:
        self.key = key
        self.blocks = 0
        self.accesses = 0
        self.hits = 0
        self.reuse: deque[float] = deque(maxlen=window)
        self.ttl_s = ttl_s
        self.last_access_s: float | None = None


class _Node:
    __slots__ = (
        "alive",
        "children",
        "created_s",
        "group",
        "hash",
        "last_access_s",
        "mark",
        "parent",
        "queued",
        "seq",
    )

    def __init__(self, h: int, parent: _Node | None, group: _Group | None, now: float) -> None:
        self.hash = h
        self.parent = parent
        self.children: dict[int, _Node] = {}
        # None only at the root, whose group is never read
        self.group: _Group = group  # type: ignore[assignment]
        self.last_access_s = now
        self.created_s = now
        self.seq = 0  # sequence number of the last touch
        self.queued = 0  # seq of this block's one live heap entry (0: none)
        self.mark = 0  # id of the insert whose prefix holds this block (protected from eviction)
        self.alive = True


@synchronized
class PrefixTree:
    """Blocks held in one tier, as a tree of block-hash prefixes, grouped for per-group TTLs."""

    def __init__(
        self,
        max_nodes: int = 1 << 20,
        group_depth: int = 2,
        window: int = 256,
        max_idle_groups: int = 1 << 16,
        default_ttl_s: float = math.inf,
    ) -> None:
        self._max_nodes = int_in("max_nodes", max_nodes, 1, MAX_NODES)
        self._group_depth = int_in("group_depth", group_depth, 1, MAX_GROUP_DEPTH)
        self._window = int_in("window", window, 1, MAX_WINDOW)
        self._max_idle_groups = int_in("max_idle_groups", max_idle_groups, 0, MAX_IDLE_GROUPS)
        self._default_ttl_s = check_ttl("default_ttl_s", default_ttl_s)
        self._root = _Node(0, None, None, 0.0)
        self._lru: OrderedDict[_Node, None] = OrderedDict()  # least recently used first
        # (deadline, seq, node): at most one live entry per block, pushed when the block is
        # first touched and re-pushed, when popped, if it was touched since; so a touch costs
        # no heap work.  Entries of removed blocks are skipped when popped.
        self._heap: list[tuple[float, int, _Node]] = []
        self._groups: dict[tuple[int, ...], _Group] = {}  # in creation order
        self._idle: OrderedDict[tuple[int, ...], _Group] = OrderedDict()  # groups without blocks
        self._seq = 0
        self._inserts = 0
        self._now = 0.0
        self._closed_block_s = 0.0
        self._expired_blocks = 0
        self._evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def max_nodes(self) -> int:
        """The most blocks held; an insert that needs room expires, then evicts least recently
        used leaves."""
        return self._max_nodes

    @property
    def group_depth(self) -> int:
        """Blocks of a request's head path that name its group."""
        return self._group_depth

    @property
    def window(self) -> int:
        """Reuse intervals kept per group (the last ``window``)."""
        return self._window

    @property
    def max_idle_groups(self) -> int:
        """The most groups without blocks remembered (the longest idle is forgotten beyond)."""
        return self._max_idle_groups

    @property
    def default_ttl_s(self) -> float:
        """The TTL in seconds of a group without one set (inf: none)."""
        return self._default_ttl_s

    @property
    def expired_blocks(self) -> int:
        """Blocks removed so far past their group's TTL."""
        return self._expired_blocks

    @property
    def evicted_blocks(self) -> int:
        """Blocks evicted so far to stay within ``max_nodes``."""
        return self._evicted_blocks

    # ---- queries (read-only) -------------------------------------------------------------

    def match_len(self, hash_ids: Any) -> int:
        """Leading blocks of ``hash_ids`` held now (as of the last insert or expire)."""
        node = self._root
        n = 0
        for h in check_hashes("hash_ids", hash_ids):
            child = node.children.get(h)
            if child is None:
                break
            node = child
            n += 1
        return n

    def groups(self) -> list[GroupStats]:
        """Every remembered group, in creation order."""
        fields = ((g.key, g.blocks, g.accesses, g.hits, tuple(g.reuse), g.ttl_s, g.last_access_s)
                  for g in self._groups.values())  # fmt: skip
        return [unchecked(GroupStats, *f) for f in fields]

    def group_ttls(
        self, benefit_per_hit: Any, price_per_block_s: Any, max_ttl_s: Any
    ) -> dict[tuple[int, ...], float]:
        """τ_g = solve_ttl(reuse intervals of g, benefit_per_hit, price_per_block_s, max_ttl_s)
        for every group, in creation order (a group without samples gets 0).  Benefit and price
        are per block, in one unit (e.g. dollars).  Changes nothing: apply with set_group_ttls."""
        benefit = non_negative("benefit_per_hit", benefit_per_hit)
        price = non_negative("price_per_block_s", price_per_block_s)
        cap = non_negative("max_ttl_s", max_ttl_s)
        return {key: solve_ttl(g.reuse, benefit, price, cap)[0] for key, g in self._groups.items()}

    def block_seconds(self, now: Any) -> float:
        """Block-seconds held so far: removed blocks as charged, held ones until
        min(now, deadline)."""
        now = self._check_now(now)
        total = self._closed_block_s
        for n in self._lru:
            total += min(now, n.last_access_s + n.group.ttl_s) - n.created_s
        return total

    # ---- updates --------------------------------------------------------------------------

    def insert(self, hash_ids: Any, now: Any) -> int:
        """Store a request's blocks at time ``now``; returns how many leading blocks were held."""
        hashes = check_hashes("hash_ids", hash_ids)
        now = self._check_now(now)
        self._now = now
        self._expire(now)
        self._inserts += 1
        mark = self._inserts
        path: list[_Node] = []
        node = self._root
        for h in hashes:
            child = node.children.get(h)
            if child is None:
                break
            child.mark = mark
            path.append(child)
            node = child
        matched = len(path)
        path_groups = self._touch_groups(hashes, matched, now)
        stored = min(len(hashes), self._max_nodes) - matched
        self._make_room(stored, mark, now)
        d = self._group_depth
        for h in hashes[matched : matched + stored]:
            group = path_groups[min(len(path) + 1, d) - 1]
            child = _Node(h, node, group, now)
            node.children[h] = child
            self._lru[child] = None
            if group.blocks == 0:
                del self._idle[group.key]
            group.blocks += 1
            path.append(child)
            node = child
        # Leaf first, so that every parent is more recent than its children: the least
        # recently used block is then always a leaf.
        for n in reversed(path):
            self._touch(n, now)
        self._trim_idle_groups()
        return matched

    def expire(self, now: Any) -> int:
        """Remove every block past its group's TTL at ``now``; returns how many were removed."""
        now = self._check_now(now)
        self._now = now
        removed = self._expire(now)
        self._trim_idle_groups()
        return removed

    def set_group_ttls(self, ttls: Mapping[Any, Any]) -> None:
        """Set the TTL of the groups named by the keys (creating those not yet seen)."""
        if not isinstance(ttls, Mapping):
            raise TypeError(
                f"ttls must be a mapping of group key to TTL, got {type(ttls).__name__}"
            )
        checked = []
        for item in ttls.items():
            if not (isinstance(item, tuple) and len(item) == 2):  # (a mapping's items are pairs)
                raise TypeError(
                    f"ttls must be a mapping of group key to TTL, got an item {short_repr(item)}"
                )
            key, ttl = item
            k = tuple(check_hashes("group key", key))
            if not 1 <= len(k) <= self._group_depth:
                raise ValueError(
                    f"group key must be 1 to {self._group_depth} hashes long, got {list(k)!r}"
                )
            checked.append((k, check_ttl(f"ttls[{list(k)!r}]", ttl)))
        for k, ttl in checked:
            self._group(k).ttl_s = ttl
        # Deadlines moved: rebuild the heap from the held blocks, oldest first.
        self._heap = []
        for n in self._lru:
            n.queued = 0
            self._push_deadline(n)
        self._trim_idle_groups()

    # ---- internals ------------------------------------------------------------------------

    def _check_now(self, now: Any) -> float:
        t = non_negative("now", now)
        if t < self._now:
            raise ValueError(f"now must be not before the last time seen, {self._now!r}, got {t!r}")
        return t

    def _group(self, key: tuple[int, ...]) -> _Group:
        g = self._groups.get(key)
        if g is None:
            g = _Group(key, self._default_ttl_s, self._window)
            self._groups[key] = g
            self._idle[key] = g
        return g

    def _touch_groups(self, hashes: list[int], matched: int, now: float) -> list[_Group]:
        """One access (and one reuse sample) for each group on the path; block hits per group."""
        d = self._group_depth
        out = []
        for depth in range(1, min(len(hashes), d) + 1):
            g = self._group(tuple(hashes[:depth]))
            if g.last_access_s is not None:
                g.reuse.append(now - g.last_access_s)
            g.last_access_s = now
            g.accesses += 1
            if depth < d:
                g.hits += 1 if matched >= depth else 0
            else:
                g.hits += max(0, matched - d + 1)
            out.append(g)
        return out

    def _touch(self, n: _Node, now: float) -> None:
        n.last_access_s = now
        self._seq += 1
        n.seq = self._seq
        self._lru.move_to_end(n)
        if n.queued == 0:
            self._push_deadline(n)

    def _push_deadline(self, n: _Node) -> None:
        ttl = n.group.ttl_s
        if ttl != math.inf:
            n.queued = n.seq
            heapq.heappush(self._heap, (n.last_access_s + ttl, n.seq, n))

    def _expire(self, now: float) -> int:
        removed = 0
        heap = self._heap
        while heap and heap[0][0] < now:
            _, seq, n = heapq.heappop(heap)
            if not n.alive or n.queued != seq:
                continue
            n.queued = 0
            deadline = n.last_access_s + n.group.ttl_s
            if deadline < now:
                k = self._remove_subtree(n, deadline)
                self._expired_blocks += k
                removed += k
            else:  # touched since it was queued
                self._push_deadline(n)
        return removed

    def _make_room(self, stored: int, mark: int, now: float) -> None:
        """Evict least recently used leaves until ``stored`` new blocks fit; blocks of the
        prefix being inserted (marked) are skipped, not evicted."""
        while len(self._lru) + stored > self._max_nodes:
            victim = next(iter(self._lru))
            if victim.mark == mark:
                self._lru.move_to_end(victim)
                continue
            self._evicted_blocks += self._remove_subtree(victim, now)

    def _remove_subtree(self, top: _Node, t_remove: float) -> int:
        """Remove ``top`` and its descendants, charging each until min(t_remove, its deadline)."""
        order = []
        stack = [top]
        while stack:
            n = stack.pop()
            order.append(n)
            stack.extend(reversed(n.children.values()))
        assert top.parent is not None
        del top.parent.children[top.hash]
        for n in order:
            g = n.group
            self._closed_block_s += min(t_remove, n.last_access_s + g.ttl_s) - n.created_s
            n.alive = False
            del self._lru[n]
            g.blocks -= 1
            if g.blocks == 0:
                self._idle[g.key] = g
        return len(order)

    def _trim_idle_groups(self) -> None:
        while len(self._idle) > self._max_idle_groups:
            key, _ = self._idle.popitem(last=False)
            del self._groups[key]
