"""PrefixTree speed, both backends side by side (``bash scripts/bench.sh -k prefix_tree``).

* the whole Mooncake conversation trace (12,031 requests, 288,500 blocks; found through
  ``TTLPOLICY_TRACES``, see ``trace_paths.py``) through a bounded
  tree with a TTL, as the ``groups`` command replays it;
* one insert of a 1,024-block request that extends a held 1,016-block prefix by 8 blocks (an
  agent turn), and one of 1,024 new blocks: time per call / 1,024 = time per block.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from trace_paths import ROOT, missing_message, traces_dir
from ttlpolicy.reference.prefix_tree import PrefixTree as ReferenceTree

NativeTree: type | None
try:
    from ttlpolicy._native import PrefixTree as NativeTree
except ImportError:  # the reference alone still benchmarks
    NativeTree = None

MOONCAKE = traces_dir() / "mooncake" / "conversation_trace.jsonl.gz"
#: without the full trace a test run (benchmarks disabled) uses the tests' excerpt
MOONCAKE_EXCERPT = ROOT / "tests" / "data" / "mooncake" / "conversation_trace_head2000.jsonl.gz"

BACKENDS = [
    pytest.param(ReferenceTree, id="python"),
    pytest.param(
        NativeTree,
        id="rust",
        marks=pytest.mark.skipif(NativeTree is None, reason="native module not built"),
    ),
]


def read_mooncake(path: Path) -> list[tuple[float, list[int]]]:
    with gzip.open(path, "rt") as f:
        return [(o["timestamp"] / 1000.0, o["hash_ids"]) for o in map(json.loads, f)]


@pytest.mark.parametrize("tree_cls", BACKENDS)
def test_bench_mooncake_whole_trace(benchmark, tree_cls):
    if MOONCAKE.is_file():
        mooncake = read_mooncake(MOONCAKE)
    elif benchmark.disabled:  # a test run: check the code path on the shipped excerpt
        mooncake = read_mooncake(MOONCAKE_EXCERPT)
    else:
        pytest.skip(missing_message(MOONCAKE))

    def run():
        tree = tree_cls(max_nodes=50_000, default_ttl_s=300.0)
        hits = 0
        for now, hashes in mooncake:
            hits += tree.insert(hashes, now)
        return hits

    hits = benchmark.pedantic(run, rounds=3, iterations=1)
    assert hits > 0


@pytest.mark.parametrize("tree_cls", BACKENDS)
@pytest.mark.parametrize("shape", ["extend-8", "all-new"])
def test_bench_insert_1024_blocks(benchmark, tree_cls, shape):
    rng = np.random.default_rng(0)
    state = {"now": 0.0}
    tree = tree_cls(max_nodes=1 << 20, default_ttl_s=60.0)
    base = rng.integers(0, 1 << 62, size=1016, dtype=np.int64)
    tree.insert(base, 0.0)

    def request():
        state["now"] += 0.001
        if shape == "extend-8":
            tail = rng.integers(0, 1 << 62, size=8, dtype=np.int64)
            return (np.concatenate([base, tail]), state["now"]), {}
        return (rng.integers(0, 1 << 62, size=1024, dtype=np.int64), state["now"]), {}

    benchmark.pedantic(tree.insert, setup=request, rounds=200, iterations=1)
