"""``OnlineGroupTTL.refit`` at many groups, the production construction
(``OffloadSettings().group_ttl``), and its shrunk fit group by group (``shrunk_ttl``, the
rule) against all groups at once (``shrunk_ttls``, what ``refit`` calls) — run:
``bash scripts/bench.sh bench/micro/test_bench_group_refit.py``.

A refit runs on an engine's step (vLLM's ``TTLCachePolicy`` and SGLang's host tier call
``access`` per finished request; every 64th refits).  Groups: sessions sharing a first chunk,
each its own second chunk, each accessed four times (three reuse intervals).
"""

from __future__ import annotations

import pytest

from ttlpolicy.groups.online import OnlineGroupTTL, pooled_sketch, shrunk_ttl, shrunk_ttls
from ttlpolicy.serving.tier import OffloadSettings

CAPACITY_CHUNKS = 50_000


def grown(groups: int) -> OnlineGroupTTL:
    fit = OffloadSettings().group_ttl(CAPACITY_CHUNKS)
    fit.refit_every = 1 << 30  # (refits timed here only)
    now = 0.0
    for rep in range(4):
        for s in range(groups):
            now += 0.001
            fit.access([1, 1000 + s] + [10**6 + s * 100 + j for j in range(8 + rep)], now)
    return fit


@pytest.mark.parametrize("groups", [1_000, 20_000])
def test_refit(benchmark, groups: int) -> None:
    fit = grown(groups)
    benchmark.pedantic(fit.refit, rounds=5, iterations=1)


@pytest.mark.parametrize("how", ["group_by_group", "all_at_once"])
def test_shrunk_fit_of_20k_groups(benchmark, how: str) -> None:
    fit = grown(20_000)
    windows = [sorted(g.reuse_s) for g in fit.tree.groups() if g.reuse_s]
    pooled = sorted(r for w in windows for r in w)
    b, c, cap, k = fit.benefit_per_hit, fit.price_per_block_s, fit.max_ttl_s, fit.prior_weight
    sketch = pooled_sketch(pooled, cap)
    if how == "group_by_group":
        benchmark.pedantic(
            lambda: [shrunk_ttl(w, pooled, sketch, k, b, c, cap) for w in windows],
            rounds=3,
            iterations=1,
        )
    else:
        benchmark.pedantic(
            lambda: shrunk_ttls(windows, pooled, sketch, (k, b, c, cap)), rounds=3, iterations=1
        )
