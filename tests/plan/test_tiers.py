"""The tiered KV store: capacities hold, blocks move down on eviction and up on a hit, TTLs
demote, loads are charged to TTFT."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.plan.tiers import Tier, TieredStore, replay
from ttlpolicy.sim import roofline
from ttlpolicy.traces.cache import BlockTrace


def tier(name="dram", cap=4, policy="lru", ttl_s=math.inf, latency_s=0.0, read=1e12):
    return Tier(name, cap, read, latency_s, policy, ttl_s)


def test_eviction_demotes_and_a_hit_promotes():
    s = TieredStore(2, [tier("dram", 2), tier("ssd", 0)])
    s.admit([1, 2], 0, 0.0)
    s.admit([3, 4], 0, 1.0)
    assert s.lookup([1, 2]) == [0, 2, 0]  # pushed down to DRAM, whole
    assert s.lookup([3, 4, 9]) == [2, 0, 0]
    s.admit([1, 2], 2, 2.0)  # promoted: 3 and 4 go down
    assert s.lookup([1, 2]) == [2, 0, 0]
    assert s.lookup([3, 4]) == [0, 2, 0]
    s.check()


def test_last_tier_drops_and_capacity_zero_passes_through():
    s = TieredStore(1, [tier("dram", 0), tier("ssd", 1)])
    s.admit([1], 0, 0.0)
    s.admit([2], 0, 0.0)
    s.admit([3], 0, 0.0)
    assert s.lookup([1]) == [0, 0, 0]  # 1 fell off the SSD when 2 came down
    assert s.lookup([2]) == [0, 0, 1]
    assert s.dropped == 1
    s.check()


def test_prefix_match_stops_at_the_first_missing_block():
    s = TieredStore(4, [tier("dram", 4)])
    s.admit([1, 2, 3], 0, 0.0)
    assert s.lookup([1, 2, 7, 3]) == [2, 0]


def test_global_ttl_demotes_after_ttl_and_charges_up_to_the_deadline():
    s = TieredStore(1, [tier("dram", 8, "ttl", ttl_s=10.0), tier("ssd", 8)])
    s.admit([1], 0, 0.0)
    s.admit([2], 0, 0.0)  # 1 lands in DRAM at t=0
    s.advance(5.0)
    assert s.lookup([1]) == [0, 1, 0]
    s.advance(20.0)
    assert s.lookup([1]) == [0, 0, 1]  # expired at 10, moved to SSD
    assert s.block_s[1] == pytest.approx(10.0)  # held in DRAM 0..10 only
    assert s.block_s[2] == pytest.approx(10.0)  # and in SSD 10..20
    s.check()


class FixedGroups:
    """A group-TTL source with a TTL per first key (for tests)."""

    def __init__(self, ttls):
        self.ttls, self.seen = ttls, []

    def observe(self, keys, now):
        self.seen.append((tuple(keys), now))

    def group_of(self, keys, index):
        return keys[0]

    def ttl_of(self, group, tier):
        assert tier == 0
        return self.ttls.get(group, 0.0)


def test_group_policy_uses_the_ttl_of_each_blocks_group():
    src = FixedGroups({1: 100.0, 5: 1.0})
    s = TieredStore(1, [tier("dram", 8, "group")], src)
    s.admit([1, 2], 0, 0.0)  # 2 goes down to DRAM with group 1
    s.admit([5, 6], 0, 0.0)  # 6 and 1 go down; 6 with group 5
    s.advance(10.0)
    assert s.lookup([1, 2]) == [0, 2]
    assert s.lookup([5, 6]) == [1, 0]  # 6 expired after 1 s
    assert src.seen == [((1, 2), 0.0), ((5, 6), 0.0)]


def test_group_policy_needs_a_source():
    with pytest.raises(ValueError, match="group TTL source"):
        TieredStore(1, [tier("dram", 8, "group")])


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"capacity_blocks": -1}, "capacity_blocks"),
        ({"read_bytes_per_s": 0.0}, "read_bytes_per_s"),
        ({"latency_s": -1.0}, "latency_s"),
        ({"policy": "fifo"}, "policy"),
        ({"policy": "ttl", "ttl_s": -1.0}, "ttl_s"),
    ],
)
def test_bad_tiers_name_the_field(kw, field):
    args: dict[str, Any] = {
        "name": "dram",
        "capacity_blocks": 1,
        "read_bytes_per_s": 1.0,
        "latency_s": 0.0,
    }
    args.update(kw)
    with pytest.raises(ValueError, match=field):
        Tier(**args)


def test_time_cannot_go_back():
    s = TieredStore(1, [])
    s.advance(5.0)
    with pytest.raises(ValueError, match="back in time"):
        s.advance(4.0)


requests = st.lists(
    st.tuples(
        st.lists(st.integers(0, 12), min_size=1, max_size=6, unique=True),
        st.floats(0, 30),
    ),
    max_size=40,
)


@given(
    reqs=requests,
    hbm=st.integers(1, 4),
    dram=st.integers(0, 5),
    ssd=st.integers(0, 5),
    policy=st.sampled_from(["lru", "ttl"]),
    ttl=st.floats(0, 20),
)
def test_no_tier_exceeds_capacity_and_a_request_is_in_hbm_after_admission(
    reqs, hbm, dram, ssd, policy, ttl
):
    s = TieredStore(hbm, [tier("dram", dram, policy, ttl), tier("ssd", ssd, policy, ttl)])
    now = 0.0
    held_before = 0
    for keys, dt in reqs:
        now += dt
        s.advance(now)
        counts = s.lookup(keys)
        assert sum(counts) <= len(keys)
        s.admit(keys, sum(counts), now)
        s.check()
        if len(keys) <= hbm:
            assert s.lookup(keys)[0] == len(keys)
        assert len(s) <= hbm + dram + ssd
        held_before = len(s)
    assert held_before == len(s.where)


def _trace(keys_per_request, arrivals, inp=2048, out=8, block_tokens=512):
    offsets = np.cumsum([0] + [len(k) for k in keys_per_request])
    return BlockTrace(
        np.array(arrivals, dtype=float),
        np.full(len(arrivals), inp, dtype=np.int64),
        np.full(len(arrivals), out, dtype=np.int64),
        offsets.astype(np.int64),
        np.array([k for ks in keys_per_request for k in ks], dtype=np.int64),
        block_tokens,
    )


def test_load_time_from_a_tier_is_charged_to_ttft():
    hw = roofline("llama-3.1-8b", "h100-80g")
    # request 0 stores [1..4]; request 1 ([9]) pushes them to DRAM; request 2 reuses them
    trace = _trace([[1, 2, 3, 4], [9, 10, 11, 12], [1, 2, 3, 4]], [0.0, 100.0, 200.0])
    ttfts = []
    for latency in (0.0, 0.5):
        store = TieredStore(4, [tier("dram", 8, latency_s=latency)])
        m = replay(trace, hw, store)
        assert m.hit_tokens == [0, 4 * 512 - 1]  # the last token is always computed
        ttfts.append(m.ttfts_s)
    assert ttfts[1][:2] == pytest.approx(ttfts[0][:2])
    assert ttfts[1][2] - ttfts[0][2] == pytest.approx(0.5)


def test_a_cached_prefix_shortens_ttft_and_a_busy_engine_queues():
    hw = roofline("llama-3.1-8b", "h100-80g")
    trace = _trace([[1, 2, 3, 4], [1, 2, 3, 4]], [0.0, 100.0])
    m = replay(trace, hw, TieredStore(8, []))
    assert m.ttfts_s[1] < m.ttfts_s[0] / 2
    burst = _trace([[1, 2, 3, 4], [5, 6, 7, 8]], [0.0, 0.0])
    m = replay(burst, hw, TieredStore(8, []))
    assert m.ttfts_s[1] > m.ttfts_s[0]  # waited for the first one
    assert m.summary()["throughput_tok_s"] == pytest.approx(16 / m.makespan_s)
