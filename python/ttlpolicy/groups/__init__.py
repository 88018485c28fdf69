"""Group TTLs (Kareto): one TTL per group of KV blocks on a tier, by return on investment,
tuned online from past accesses only.

* ``online`` — ``OnlineGroupTTL``: groups by prefix-tree depth, TTLs refitted from the tree
  (``PrefixTree.group_ttls``); also served as ``ttlpolicy.OnlineGroupTTL``;
* ``reuse`` — ``ReuseClassTTL``: groups by reuse-interval class;
* ``sources`` — either rule as the tier planner's per-tier TTL source
  (``plan.tiers.GroupTTLSource``).

Nothing is imported here: ``import ttlpolicy`` loads ``online`` only.
"""
