"""The search over configurations: a grid whose capacities double per step, searched adaptively
or exhaustively.

**Grid.**  DRAM and SSD capacities: 0 and ``start · 2^k`` up to a maximum; policies: LRU, one
global TTL per value of ``ttls``, group TTLs per grouping rule.  Points with no tier below HBM
are one point whatever the policy.

**Adaptive** (Kareto's diminishing-returns search, as we state it):

1. *Growth*, per policy: from (0, 0), evaluate one doubling of each tier still growing.  The
   gain of a step is its best relative improvement of throughput, mean TTFT or p99 TTFT; a
   tier whose doubling gains less than ``gain_threshold`` stops growing.  Of the tiers that
   gained enough, the walk moves along the one with the largest gain per added dollar an hour
   (a tier whose gain per dollar is below the other's is not grown at that step).
2. *Refinement*: sort the non-dominated points so far by cost; between each two neighbours,
   the unevaluated grid point inside their capacity box, under either's policy, whose cost is
   nearest the middle of theirs is a candidate; evaluate the candidates of the widest gaps
   (normalised objective distance), a few per round, while a round raises the hypervolume by
   at least ``hv_threshold`` (relative).

**Exhaustive** evaluates every point.  Both return every evaluated point; the front is taken
over them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .front import as_min, front_indices, hypervolume, normaliser
from .objectives import Config

Evaluate = Callable[[list[Config]], list[dict[str, float]]]


@dataclass(frozen=True)
class Grid:
    dram_gb: tuple[float, ...]
    ssd_gb: tuple[float, ...]
    policies: tuple[Config, ...]  # capacity fields ignored: policy templates

    def config(self, d: int, s: int, policy: Config) -> Config:
        return Config(
            self.dram_gb[d], self.ssd_gb[s], policy.policy, policy.ttl_s, policy.grouping
        ).canonical()

    def all(self) -> list[Config]:
        seen: dict[Config, None] = {}
        for p, d, s in itertools.product(
            self.policies, range(len(self.dram_gb)), range(len(self.ssd_gb))
        ):
            seen.setdefault(self.config(d, s, p))
        return list(seen)

    def index(self, cfg: Config) -> tuple[int, int]:
        return self.dram_gb.index(cfg.dram_gb), self.ssd_gb.index(cfg.ssd_gb)


def doubling(start: float, maximum: float) -> tuple[float, ...]:
    if not start > 0 or not maximum >= start:
        raise ValueError(f"capacity grid needs 0 < start <= max, got start {start}, max {maximum}")
    out, x = [0.0], float(start)
    while x <= maximum * (1 + 1e-9):
        out.append(x)
        x *= 2
    return tuple(out)


def policies(ttls: Sequence[float], groupings: Sequence[str]) -> tuple[Config, ...]:
    out = [Config(0, 0)]
    out += [Config(0, 0, "ttl", float(t)) for t in ttls]
    out += [Config(0, 0, "group", grouping=g) for g in groupings]
    return tuple(out)


def _gain(a: dict[str, float], b: dict[str, float]) -> float:
    """Best relative improvement from a to b (throughput up, TTFTs down)."""
    gains = [(b["throughput_tok_s"] - a["throughput_tok_s"]) / max(a["throughput_tok_s"], 1e-12)]
    for k in ("ttft_mean_s", "ttft_p99_s"):
        gains.append((a[k] - b[k]) / max(a[k], 1e-12))
    return max(gains)


class Search:
    """Holds the evaluated points; ``evaluate`` is called with batches (run in parallel)."""

    def __init__(
        self,
        grid: Grid,
        evaluate: Evaluate,
        cost_of: Callable[[Config], float],
        cost_key: str = "cost_usd_per_h",
    ) -> None:
        """``cost_of``: the provisioned $/h of a configuration (known without simulating)."""
        self.grid = grid
        self._cost = cost_of
        self._evaluate = evaluate
        self.cost_key = cost_key
        self.results: dict[Config, dict[str, float]] = {}

    def run_batch(self, configs: Sequence[Config]) -> None:
        todo = list(dict.fromkeys(c for c in configs if c not in self.results))
        if todo:
            for c, r in zip(todo, self._evaluate(todo), strict=True):
                self.results[c] = r

    def objectives(self) -> list[tuple[float, float, float]]:
        return [as_min(r, self.cost_key) for r in self.results.values()]

    def front(self) -> list[Config]:
        configs = list(self.results)
        return [configs[i] for i in front_indices(self.objectives())]

    def exhaustive(self) -> None:
        self.run_batch(self.grid.all())

    def adaptive(self, gain_threshold: float = 0.02, hv_threshold: float = 0.002) -> None:
        g = self.grid
        nd, ns = len(g.dram_gb), len(g.ssd_gb)
        walks = {p: ((0, 0), {0: nd > 1, 1: ns > 1}) for p in g.policies}
        self.run_batch([g.config(0, 0, g.policies[0])])
        while walks:
            batch = []
            for p, ((d, s), growing) in walks.items():
                if growing[0]:
                    batch.append(g.config(d + 1, s, p))
                if growing[1]:
                    batch.append(g.config(d, s + 1, p))
            self.run_batch(batch)
            nxt = {}
            for p, ((d, s), growing) in walks.items():
                here = self.results[g.config(d, s, p)]
                best, best_rate = None, -1.0
                for tier in (0, 1):
                    if not growing[tier]:
                        continue
                    step = (d + 1, s) if tier == 0 else (d, s + 1)
                    there = self.results[g.config(*step, p)]
                    gain = _gain(here, there)
                    if gain < gain_threshold:
                        growing[tier] = False
                        continue
                    dcost = there[self.cost_key] - here[self.cost_key]
                    rate = gain / max(dcost, 1e-12)
                    if rate > best_rate:
                        best, best_rate = step, rate
                if best is None:
                    continue
                growing = {
                    0: growing[0] and best[0] + 1 < nd,
                    1: growing[1] and best[1] + 1 < ns,
                }
                if growing[0] or growing[1]:
                    nxt[p] = (best, growing)
            walks = nxt
        self.refine(hv_threshold)

    def refine(self, hv_threshold: float, per_round: int = 4) -> None:
        """Evaluate points between neighbouring front points (in cost order), the widest gaps
        first, ``per_round`` at a time, until a round adds less than ``hv_threshold`` of
        hypervolume."""
        while True:
            configs = list(self.results)
            objs = self.objectives()
            norm = normaliser(objs)
            fr = sorted(front_indices(objs), key=lambda i: objs[i])
            gaps = []
            for a, b in itertools.pairwise(fr):
                c = self._between(configs[a], configs[b], objs[a][0], objs[b][0])
                if c is not None:
                    na, nb = norm(objs[a]), norm(objs[b])
                    gaps.append((math.dist(na, nb), c))
            todo = [c for _, c in sorted(gaps, key=lambda x: -x[0])][:per_round]
            if not todo:
                return
            self.run_batch(todo)
            allp = self.objectives()
            # both fronts on the new bounds
            hv0 = hypervolume([objs[i] for i in fr], allp)
            hv1 = hypervolume([allp[i] for i in front_indices(allp)], allp)
            if hv0 > 0 and (hv1 - hv0) / hv0 < hv_threshold:
                return

    def _between(self, a: Config, b: Config, cost_a: float, cost_b: float) -> Config | None:
        """The unevaluated grid point within a's and b's capacity box, under a's or b's policy,
        whose cost is nearest the middle of theirs (strictly between them)."""
        g = self.grid
        (da, sa), (db, sb) = g.index(a), g.index(b)
        mid = (cost_a + cost_b) / 2
        best, best_d = None, math.inf
        for tmpl in {Config(0, 0, x.policy, x.ttl_s, x.grouping) for x in (a, b)}:
            for d in range(min(da, db), max(da, db) + 1):
                for s in range(min(sa, sb), max(sa, sb) + 1):
                    c = g.config(d, s, tmpl)
                    if c in self.results or c in (a, b):
                        continue
                    cost = self._cost(c)
                    if cost_a < cost < cost_b and abs(cost - mid) < best_d:
                        best, best_d = c, abs(cost - mid)
        return best
