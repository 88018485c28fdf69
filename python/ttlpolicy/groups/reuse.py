"""A second grouping rule for group TTLs: by access pattern (reuse-interval class), not by place
in the prefix tree.

**Rule.**  A block's group is the class of its *last reuse interval*: ``new`` (seen once) or
``⌊log2(interval_s)⌋`` clipped to [0, ``MAX_CLASS``] (interval < 1 s: class 0).  The idea: a
block that came back after ~10 s (a tool call) will likely come back after a similar gap again,
one that came back after 20 min (a human turn) likewise; blocks of one prefix-tree subtree mix
both.  Each class collects the *next* reuse interval of the blocks in it (its own window of
``window`` samples), so the TTL of a class is the solver's answer for "blocks that behaved like
this last time": τ_c = argmax_τ P_c(next reuse ≤ τ)·benefit − price·τ (``solve_ttl``, the one
solver of the library), refitted every ``refit_every`` requests, online: only past accesses
count.  Before the first fit every class keeps its blocks for ``max_ttl_s``.

**Bound.**  At most ``max_blocks`` blocks are remembered (the earliest first seen are forgotten
first); classes are at most ``MAX_CLASS + 2``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Sequence

NEW = -1
MAX_CLASS = 16  # 2**16 s ≈ 18 h


class ReuseClassTTL:
    """Online group TTLs with groups = reuse-interval classes (see the module doc)."""

    def __init__(
        self,
        benefit_per_hit: Sequence[float],
        price_per_block_s: Sequence[float],
        max_ttl_s: float,
        *,
        window: int = 1024,
        refit_every: int = 256,
        max_blocks: int = 1 << 22,
    ) -> None:
        from .. import solve_ttl  # the active backend's solver

        econ = [("max_ttl_s", max_ttl_s)]
        if len(benefit_per_hit) != len(price_per_block_s) or not benefit_per_hit:
            raise ValueError("benefit_per_hit and price_per_block_s: one value per tier")
        for i, (b, p) in enumerate(zip(benefit_per_hit, price_per_block_s, strict=True)):
            econ += [(f"benefit_per_hit[{i}]", b), (f"price_per_block_s[{i}]", p)]
        for name, v in econ:
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        for name, n in (
            ("window", window),
            ("refit_every", refit_every),
            ("max_blocks", max_blocks),
        ):
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {n!r}")
        self._solve = solve_ttl
        self.benefit, self.price = list(benefit_per_hit), list(price_per_block_s)
        self.max_ttl_s = max_ttl_s
        self.max_blocks, self.refit_every = max_blocks, refit_every
        self._last: dict[int, tuple[float, int]] = {}  # block → (last access s, class)
        self._samples: dict[int, deque[float]] = {
            c: deque(maxlen=window) for c in range(NEW, MAX_CLASS + 1)
        }
        # (class, tier) → TTL; until learnt: keep
        self._ttl = {
            (c, t): float(max_ttl_s) for c in self._samples for t in range(len(self.price))
        }
        self._since_refit = 0

    @staticmethod
    def class_of(interval_s: float) -> int:
        if interval_s < 1.0:
            return 0
        return min(MAX_CLASS, int(math.log2(interval_s)))

    def observe(self, keys: Sequence[int], now: float) -> None:
        last, samples = self._last, self._samples
        class_of = self.class_of
        for k in keys:
            prev = last.get(k)
            if prev is None:
                last[k] = (now, NEW)
                continue
            interval = now - prev[0]
            samples[prev[1]].append(interval)
            last[k] = (now, class_of(interval))
        if len(last) > self.max_blocks:
            for k in list(last)[: len(last) - self.max_blocks]:
                del last[k]
        self._since_refit += 1
        if self._since_refit >= self.refit_every:
            self.refit()

    def refit(self) -> None:
        self._since_refit = 0
        for c, s in self._samples.items():
            xs = list(s)
            for t, (b, p) in enumerate(zip(self.benefit, self.price, strict=True)):
                self._ttl[(c, t)] = self._solve(xs, b, p, self.max_ttl_s)[0]

    def group_of(self, keys: Sequence[int], index: int) -> Hashable:
        entry = self._last.get(keys[index])
        return NEW if entry is None else entry[1]

    def ttl_of(self, group: Hashable, tier: int) -> float:
        return self._ttl[(group, tier)]  # type: ignore[index]

    def ttls(self) -> dict[tuple[int, int], float]:
        """(class, tier) → TTL now."""
        return dict(self._ttl)
