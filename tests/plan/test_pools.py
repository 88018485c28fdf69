"""The process pool, this process and Ray give the same numbers (the simulation is seeded)."""

from __future__ import annotations

import importlib.util

import pytest

from ttlpolicy.plan.objectives import Config, Setup
from ttlpolicy.plan.pool import LocalPool, RayPool

CONFIGS = [
    Config(0, 0),
    Config(128, 0),
    Config(128, 1024, "ttl", 30.0),
    Config(64, 512, "group", grouping="reuse"),
]


def run(pool):
    try:
        return list(pool.imap(CONFIGS))
    finally:
        pool.close()


def test_process_pool_equals_in_process(mooncake_head):
    setup = Setup(str(mooncake_head), "llama-3.1-8b", "h100-80g")
    assert run(LocalPool(setup, workers=2)) == run(LocalPool(setup, workers=1))


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (pip install 'ttlpolicy[ray]'); the Ray pool is untested here",
)
def test_ray_equals_in_process(mooncake_head):
    setup = Setup(str(mooncake_head), "llama-3.1-8b", "h100-80g")
    assert run(RayPool(setup, workers=2)) == run(LocalPool(setup, workers=1))
