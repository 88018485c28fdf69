"""The two grouping rules behind the tiered store: groups and TTLs come from the library's
tuners (OnlineGroupTTL, ReuseClassTTL) and use only past accesses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ttlpolicy as tp
from ttlpolicy.groups.online import OnlineGroupTTL
from ttlpolicy.groups.reuse import NEW, ReuseClassTTL
from ttlpolicy.groups.sources import DepthGroups, make


@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=8), min_size=1, max_size=30))
def test_depth_groups_and_ttls_are_online_group_ttls(requests):
    src = DepthGroups([1.0, 0.5], [0.01, 0.001], 100.0)
    twin = OnlineGroupTTL(1.0, 0.01, 100.0, refit_every=256)
    for t, keys in enumerate(requests):
        src.observe(keys, float(t))
        twin.access(keys, float(t))
        for i in range(len(keys)):
            g = src.group_of(keys, i)
            assert g == twin.group_key(keys[: i + 1])
            assert src.ttl_of(g, 0) == twin.ttl_s(g)


def test_reuse_classes_follow_the_last_interval():
    assert [ReuseClassTTL.class_of(x) for x in (0.2, 1.0, 3.9, 4.0, 1e9)] == [0, 0, 1, 2, 16]
    r = ReuseClassTTL([1.0], [0.001], 600.0, refit_every=1)
    r.observe([7], 0.0)
    assert r.group_of([7], 0) == NEW
    r.observe([7], 10.0)
    assert r.group_of([7], 0) == ReuseClassTTL.class_of(10.0)


def test_reuse_class_ttl_is_the_solver_on_past_next_intervals():
    r = ReuseClassTTL([1.0], [0.001], 600.0, refit_every=1)
    assert r.ttl_of(NEW, 0) == 600.0  # before any fit: keep
    # block 1 seen at 0 and 5 (class of 5 s), then back after 8 s: a sample of that class
    for keys, now in (([1], 0.0), ([1], 5.0), ([1], 13.0)):
        r.observe(keys, now)
    c = ReuseClassTTL.class_of(5.0)
    assert r.ttl_of(c, 0) == tp.solve_ttl([8.0], 1.0, 0.001, 600.0)[0] == 8.0
    assert r.ttl_of(NEW, 0) == tp.solve_ttl([5.0], 1.0, 0.001, 600.0)[0]


def test_reuse_memory_is_bounded():
    r = ReuseClassTTL([1.0], [0.1], 10.0, max_blocks=5)
    for k in range(50):
        r.observe([k], float(k))
    assert len(r._last) == 5


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (([math.nan], [0.1], 1.0), "benefit_per_hit"),
        (([1.0], [-1.0], 1.0), "price_per_block_s"),
        (([1.0], [0.1, 0.2], 1.0), "one value per tier"),
        (([1.0], [0.1], math.inf), "max_ttl_s"),
    ],
)
def test_bad_economics_name_the_field(args, field):
    with pytest.raises(ValueError, match=field):
        ReuseClassTTL(*args)


def test_unknown_rule_is_named():
    with pytest.raises(ValueError, match="grouping must be one of"):
        make("by-moon-phase", [1.0], [0.1], 1.0)
