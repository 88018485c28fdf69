"""Online group-TTL tuners as the tiered simulator's per-tier TTL source
(``sim.tiers.GroupTTLSource``), one per grouping rule:

* ``depth`` — the prefix-tree depth rule (``PrefixTree``'s ``group_depth``), tuned online by
  ``group_ttl.OnlineGroupTTL``;
* ``reuse`` — the reuse-interval-class rule, ``reuse_groups.ReuseClassTTL``.

Both see only past accesses (no fit on the trace they are replayed on).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

RULES = ("depth", "reuse")


def make(
    rule: str,
    benefit_per_hit: Sequence[float],
    price_per_block_s: Sequence[float],
    max_ttl_s: float,
):
    """One source serving every tier (benefit and price per tier, in one unit)."""
    if rule == "reuse":
        from .reuse_groups import ReuseClassTTL

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
        from .group_ttl import OnlineGroupTTL

        self.tuners = [
            OnlineGroupTTL(benefit_per_hit=b, price_per_block_s=p, max_ttl_s=max_ttl_s)
            for b, p in zip(benefit_per_hit, price_per_block_s, strict=True)
        ]
        self.depth = self.tuners[0].group_depth

    def observe(self, keys: Sequence[int], now: float) -> None:
        for t in self.tuners:
            t.access(keys, now)

    def group_of(self, keys: Sequence[int], index: int) -> Hashable:
        return tuple(keys[: min(index + 1, self.depth)])

    def ttl_of(self, group: Hashable, tier: int) -> float:
        return self.tuners[tier].ttl_s(group)
