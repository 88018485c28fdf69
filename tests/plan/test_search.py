"""The adaptive search on a synthetic objective surface (no simulation): diminishing returns
stop a tier; refinement fills the front; exhaustive evaluates the grid once."""

from __future__ import annotations

import math
from typing import Any

from ttlpolicy.plan.front import as_min, front_indices, hypervolume
from ttlpolicy.plan.objectives import Config
from ttlpolicy.plan.search import Grid, Search, doubling, policies

GRID = Grid(doubling(64, 8192), doubling(512, 32768), policies([60.0], ["reuse"]))


def cost(c: Config) -> float:
    return 4.0 + c.dram_gb * 0.0034 + c.ssd_gb * 0.00011


def surface(c: Config) -> dict[str, float]:
    """Concave, saturating gains: DRAM helps more than SSD; the TTL policy a little less."""
    eff = 1.0 if c.policy == "lru" else 0.9
    x = eff * (1 - math.exp(-c.dram_gb / 600)) + 0.5 * eff * (1 - math.exp(-c.ssd_gb / 4000))
    return {
        "cost_usd_per_h": cost(c),
        "throughput_tok_s": 1000 * (1 + 0.1 * x),
        "ttft_mean_s": 2.0 / (1 + x),
        "ttft_p99_s": 8.0 / (1 + x),
    }


def counting():
    calls = []

    def evaluate(configs):
        calls.extend(configs)
        return [surface(c) for c in configs]

    return calls, evaluate


def test_exhaustive_evaluates_every_point_once():
    calls, ev = counting()
    s = Search(GRID, ev, cost)
    s.exhaustive()
    s.exhaustive()
    assert len(calls) == len(set(calls)) == len(GRID.all())
    # (0, 0) is one point whatever the policy
    assert len(GRID.all()) == 9 * 8 * 3 - 2


def test_adaptive_reaches_the_exhaustive_front_with_a_fraction_of_the_evaluations():
    calls, ev = counting()
    full = Search(GRID, ev, cost)
    full.exhaustive()
    calls2, ev2 = counting()
    s = Search(GRID, ev2, cost)
    s.adaptive(gain_threshold=0.02, hv_threshold=0.001)
    assert len(calls2) == len(set(calls2)) <= 0.5 * len(calls)
    bounds = full.objectives()
    hv_full = hypervolume([bounds[i] for i in front_indices(bounds)], bounds)
    mine = s.objectives()
    hv = hypervolume([mine[i] for i in front_indices(mine)], bounds)
    assert hv >= 0.95 * hv_full


def test_a_tier_that_stops_paying_stops_growing():
    # SSD gives nothing here: the walk tries one SSD doubling per step at most, never grows it
    def flat_ssd(c):
        r = surface(Config(c.dram_gb, 0.0, c.policy, c.ttl_s, c.grouping).canonical())
        r["cost_usd_per_h"] = cost(c)
        return r

    seen: list[Any] = []

    def evaluate(cs: Any) -> list[Any]:
        seen.extend(cs)
        return [flat_ssd(c) for c in cs]

    s = Search(GRID, evaluate, cost)
    s.adaptive(gain_threshold=0.02, hv_threshold=1.0)
    assert max(c.ssd_gb for c in seen) == GRID.ssd_gb[1]


def test_front_points_are_not_dominated_by_any_evaluated_point():
    _, ev = counting()
    s = Search(GRID, ev, cost)
    s.adaptive()
    objs = {c: as_min(r) for c, r in s.results.items()}
    for c in s.front():
        assert not any(
            all(x <= y for x, y in zip(o, objs[c], strict=True)) and o != objs[c]
            for o in objs.values()
        )
