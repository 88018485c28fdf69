"""Online group-TTL tuners as the tiered simulator's per-tier TTL source
(``plan.tiers.GroupTTLSource``), one per grouping rule:

* ``depth`` — the prefix-tree depth rule (``PrefixTree``'s ``group_depth``), tuned online by
  ``online.OnlineGroupTTL``;
* ``reuse`` — the reuse-interval-class rule, ``reuse.ReuseClassTTL``.

Both see only past accesses (no fit on the trace they are replayed on).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

RULES = ("depth", "reuse")
#: Requests between refits of the depth tuner (a refit solves every remembered group; at
#: OnlineGroupTTL's default of 64 a Mooncake replay spends most of its time refitting).
REFIT_EVERY = 256


def make(
    rule: str,
    benefit_per_hit: Sequence[float],
    price_per_block_s: Sequence[float],
    max_ttl_s: float,
):
    """One source serving every tier (benefit and price per tier, in one unit)."""
    if rule == "reuse":
        from .reuse import ReuseClassTTL

        return ReuseClassTTL(benefit_per_hit, price_per_block_s, max_ttl_s)
    if rule == "depth":
        return DepthGroups(benefit_per_hit, price_per_block_s, max_ttl_s)
    raise ValueError(f"grouping must be one of {', '.join(RULES)}, got {rule!r}")


class DepthGroups:
    """``OnlineGroupTTL`` (groups by prefix-tree depth; one tuner per tier, as each tier has its
    own price) behind the simulator's source interface."""

    def __init__(
        self, benefit_per_hit: Sequence[float], price_per_block_s: Sequence[float], max_ttl_s: float
    ) -> None:
        from .online import OnlineGroupTTL

        self.tuners = [
            OnlineGroupTTL(b, p, max_ttl_s, refit_every=REFIT_EVERY)
            for b, p in zip(benefit_per_hit, price_per_block_s, strict=True)
        ]
        self.depth = self.tuners[0].group_depth
        self._head: tuple[Sequence[int], Hashable] | None = None
        self._ttls: list[tuple[int, dict]] = [(-1, {}) for _ in self.tuners]

    def observe(self, keys: Sequence[int], now: float) -> None:
        for t in self.tuners:
            t.access(keys, now)
        self._head = None

    def group_of(self, keys: Sequence[int], index: int) -> Hashable:
        # The group of block ``index`` is that of the sequence ending there, and only its first
        # ``group_depth`` hashes matter (OnlineGroupTTL's rule): blocks past the depth share the
        # group of the block at the depth, asked once per request.
        if index + 1 < self.depth:
            return self.tuners[0].group_key(keys[: index + 1])
        if self._head is None or self._head[0] is not keys:
            self._head = (keys, self.tuners[0].group_key(keys[: self.depth]))
        return self._head[1]

    def ttl_of(self, group: Hashable, tier: int) -> float:
        # TTLs change only at a refit: remember them until the tuner refits
        tuner = self.tuners[tier]
        cache = self._ttls[tier]
        if cache[0] != tuner.refits:
            cache = self._ttls[tier] = (tuner.refits, {})
        ttl = cache[1].get(group)
        if ttl is None:
            ttl = cache[1][group] = tuner.ttl_s(group)
        return ttl
