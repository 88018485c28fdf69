"""PrefixTree: properties from issue 4, checked on each backend (``impl``), and bad input."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

# Small alphabets make shared prefixes, branching and re-insertion common.
hash_seq = st.lists(st.integers(0, 3), min_size=0, max_size=12)
ttl = st.one_of(st.just(math.inf), st.floats(0.0, 20.0))


def ops_strategy():
    insert = st.tuples(st.just("insert"), hash_seq, st.floats(0.0, 5.0))
    expire = st.tuples(st.just("expire"), st.just(()), st.floats(0.0, 5.0))
    return st.lists(st.one_of(insert, expire), max_size=30)


def run_ops(tree, ops):
    now = 0.0
    for kind, hashes, dt in ops:
        now += dt
        if kind == "insert":
            tree.insert(hashes, now)
        else:
            tree.expire(now)
    return now


@given(seqs=st.lists(hash_seq, min_size=1, max_size=8))
def test_inserted_sequence_and_its_prefixes_match_fully(impl, seqs):
    tree = impl.PrefixTree(max_nodes=1000)
    for i, s in enumerate(seqs):
        tree.insert(s, float(i))
        assert tree.match_len(s) == len(s)
        for k in range(len(s) + 1):
            assert tree.match_len(s[:k]) == k


@given(seqs=st.lists(hash_seq, max_size=10), probe=hash_seq)
def test_insert_returns_the_held_prefix_it_found(impl, seqs, probe):
    tree = impl.PrefixTree(max_nodes=1000)
    for i, s in enumerate(seqs):
        before = tree.match_len(s)
        assert tree.insert(s, float(i)) == before
    # A sequence never inserted matches no further than its longest common prefix with one.
    longest = max((_common_prefix(probe, s) for s in seqs), default=0)
    assert tree.match_len(probe) == longest


def _common_prefix(a, b):
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@given(max_nodes=st.integers(1, 15), default_ttl=ttl, ops=ops_strategy())
def test_node_bound_holds(impl, max_nodes, default_ttl, ops):
    tree = impl.PrefixTree(max_nodes=max_nodes, default_ttl_s=default_ttl)
    now = 0.0
    for kind, hashes, dt in ops:
        now += dt
        if kind == "insert":
            held = tree.insert(hashes, now)
            # Right after an insert its first min(len, max_nodes) blocks are held.
            assert tree.match_len(hashes) == min(len(hashes), max_nodes) >= held
        else:
            tree.expire(now)
        assert len(tree) <= max_nodes
        assert sum(g.blocks for g in tree.groups()) == len(tree)


@given(
    ops=ops_strategy(),
    ttls=st.dictionaries(
        st.lists(st.integers(0, 3), min_size=1, max_size=2).map(tuple), ttl, max_size=6
    ),
    default_ttl=ttl,
    later=st.floats(0.0, 30.0),
)
def test_expired_groups_hold_no_blocks(impl, ops, ttls, default_ttl, later):
    tree = impl.PrefixTree(max_nodes=50, group_depth=2, default_ttl_s=default_ttl)
    tree.set_group_ttls(ttls)
    now = run_ops(tree, ops) + later
    tree.expire(now)
    for g in tree.groups():
        if g.last_access_s is None or g.last_access_s + g.ttl_s < now:
            assert g.blocks == 0, g
    # Blocks still held are exactly those of groups not past their TTL.
    assert all(g.last_access_s + g.ttl_s >= now for g in tree.groups() if g.blocks)


@given(ops=ops_strategy(), depth=st.integers(1, 3))
def test_group_hits_add_up_to_the_held_prefixes(impl, ops, depth):
    tree = impl.PrefixTree(max_nodes=8, group_depth=depth, default_ttl_s=3.0)
    now, hits = 0.0, 0
    for kind, hashes, dt in ops:
        now += dt
        if kind == "insert":
            hits += tree.insert(hashes, now)
        else:
            tree.expire(now)
    assert sum(g.hits for g in tree.groups()) == hits
    for g in tree.groups():
        assert 1 <= len(g.key) <= depth
        assert len(g.reuse_s) == min(g.accesses - 1, tree.window) if g.accesses else not g.reuse_s
        assert all(x >= 0.0 for x in g.reuse_s)


def test_reuse_intervals_survive_expiry(impl):
    """The group outlives its blocks: an access after expiry still records its interval."""
    tree = impl.PrefixTree(default_ttl_s=1.0, group_depth=1)
    tree.insert([7, 8], 0.0)
    assert tree.insert([7, 8], 5.0) == 0  # expired at 1.0
    (g,) = tree.groups()
    assert g.key == (7,) and g.reuse_s == (5.0,) and g.blocks == 2 and g.hits == 0


def test_group_ttl_follows_reuse_and_price(impl):
    """A group reused every 2 s earns a TTL of 2 s when the benefit pays for holding; a group
    never reused gets 0; raising the price past the break-even drops both to 0."""
    tree = impl.PrefixTree(group_depth=1)
    for i in range(10):
        tree.insert([1, 10 + i], 2.0 * i)  # group (1,) reused every 2 s
    tree.insert([2, 3], 30.0)  # group (2,) seen once
    ttls = tree.group_ttls(benefit_per_hit=10.0, price_per_block_s=1.0, max_ttl_s=100.0)
    assert ttls == {(1,): 2.0, (2,): 0.0}
    # Break-even: P(2)·benefit = 10 < 1·price·2 when price > 5.
    assert tree.group_ttls(10.0, 6.0, 100.0)[(1,)] == 0.0
    assert tree.group_ttls(10.0, 1.0, 1.5)[(1,)] == 0.0  # capped below the only sample


def test_lru_leaf_is_evicted_first(impl):
    tree = impl.PrefixTree(max_nodes=4)
    tree.insert([1, 2, 3], 0.0)
    tree.insert([1, 5], 1.0)  # now 4 blocks; (1,2,3) is the least recently used leaf path
    tree.insert([1, 6], 2.0)
    assert tree.match_len([1, 2, 3]) == 2 and tree.match_len([1, 5]) == 2
    tree.insert([1, 7], 3.0)
    assert tree.match_len([1, 2]) == 1 and tree.match_len([1, 6]) == 2
    assert tree.evicted_blocks == 2


def test_block_seconds_charge_until_deadline_or_removal(impl):
    tree = impl.PrefixTree(max_nodes=2, default_ttl_s=10.0)
    tree.insert([1, 2], 0.0)
    tree.insert([1, 3], 4.0)  # evicts block 2 at 4.0: charged 4
    # Held: 1 (0..), 3 (4..); at 20 both past deadline 14: 14 + 10.
    assert tree.block_seconds(20.0) == pytest.approx(4.0 + 14.0 + 10.0)
    assert tree.expire(20.0) == 2 and len(tree) == 0
    assert tree.block_seconds(30.0) == pytest.approx(28.0)


def test_numpy_hash_arrays_are_accepted(impl):
    tree = impl.PrefixTree()
    tree.insert(np.array([5, 6, 7], dtype=np.int64), 0.0)
    assert tree.match_len(np.array([5, 6], dtype=np.int32)) == 2
    assert tree.match_len((5, 6, 7)) == 3


# ---- bad input: clear error, same type on both backends, no state change -------------------


@pytest.mark.parametrize(
    "hashes, exc",
    [
        ("abc", TypeError),
        (b"ab", TypeError),
        (5, TypeError),
        (None, TypeError),
        ([1, 2.5], TypeError),
        ([1, None], TypeError),
        (np.array([1.0, 2.0]), TypeError),
        ([1, 2**63], ValueError),
        ([-(2**63) - 1], ValueError),
    ],
)
def test_bad_hashes_are_refused_without_change(impl, hashes, exc):
    tree = impl.PrefixTree()
    tree.insert([1, 2], 0.0)
    with pytest.raises(exc, match="hash_ids"):
        tree.insert(hashes, 1.0)
    with pytest.raises(exc, match="hash_ids"):
        tree.match_len(hashes)
    assert len(tree) == 2 and [g.accesses for g in tree.groups()] == [1, 1]


@pytest.mark.parametrize(
    "now, exc",
    [
        (math.nan, ValueError),
        (-1.0, ValueError),
        (math.inf, ValueError),
        ("1", TypeError),
        (None, TypeError),
    ],
)
def test_bad_time_is_refused(impl, now, exc):
    tree = impl.PrefixTree()
    with pytest.raises(exc, match="now"):
        tree.insert([1], now)
    with pytest.raises(exc, match="now"):
        tree.expire(now)
    assert len(tree) == 0 and tree.groups() == []


def test_time_going_back_is_refused(impl):
    tree = impl.PrefixTree()
    tree.insert([1], 5.0)
    with pytest.raises(ValueError, match="now"):
        tree.insert([2], 4.0)
    with pytest.raises(ValueError, match="now"):
        tree.block_seconds(4.0)
    assert tree.match_len([2]) == 0


@pytest.mark.parametrize(
    "kwargs, exc, field",
    [
        ({"max_nodes": 0}, ValueError, "max_nodes"),
        ({"max_nodes": 2**40}, ValueError, "max_nodes"),
        ({"max_nodes": 2.0}, TypeError, "max_nodes"),
        ({"group_depth": 0}, ValueError, "group_depth"),
        ({"group_depth": 65}, ValueError, "group_depth"),
        ({"window": 0}, ValueError, "window"),
        ({"max_idle_groups": -1}, ValueError, "max_idle_groups"),
        ({"default_ttl_s": math.nan}, ValueError, "default_ttl_s"),
        ({"default_ttl_s": -1.0}, ValueError, "default_ttl_s"),
        ({"default_ttl_s": "x"}, TypeError, None),
    ],
)
def test_bad_configuration_is_refused(impl, kwargs, exc, field):
    with pytest.raises(exc, match=field):
        impl.PrefixTree(**kwargs)


def test_bad_group_ttls_change_nothing(impl):
    tree = impl.PrefixTree(group_depth=2, default_ttl_s=5.0)
    tree.insert([1, 2, 3], 0.0)
    with pytest.raises(ValueError):
        tree.set_group_ttls({(1,): 1.0, (1, 2): math.nan})
    with pytest.raises(ValueError, match="group key"):
        tree.set_group_ttls({(1, 2, 3): 1.0})
    with pytest.raises(ValueError, match="group key"):
        tree.set_group_ttls({(): 1.0})
    with pytest.raises(TypeError):
        tree.set_group_ttls([((1,), 1.0)])
    with pytest.raises(TypeError):
        tree.set_group_ttls({(1,): "soon"})
    assert [g.ttl_s for g in tree.groups()] == [5.0, 5.0]
    with pytest.raises(ValueError, match="benefit_per_hit"):
        tree.group_ttls(-1.0, 1.0, 10.0)
    with pytest.raises(ValueError, match="max_ttl_s"):
        tree.group_ttls(1.0, 1.0, math.inf)


def test_idle_groups_are_bounded(impl):
    tree = impl.PrefixTree(group_depth=1, max_idle_groups=2, default_ttl_s=1.0)
    for i in range(5):
        tree.insert([i], float(10 * i))  # each previous group expires, becomes idle
    tree.expire(100.0)
    keys = [g.key for g in tree.groups()]
    assert keys == [(3,), (4,)]  # the two most recently idled are remembered


class _LenSaysMore:
    """Three hashes whose ``__len__`` claims far more (a caller's bug, not a reason to crash)."""

    def __init__(self, claimed: int) -> None:
        self.claimed = claimed

    def __iter__(self) -> Iterator[int]:
        return iter([1, 2, 3])

    def __len__(self) -> int:
        return self.claimed


@pytest.mark.parametrize("claimed", [2**40, 2**62])
def test_a_sequence_s_length_is_only_a_hint(impl, claimed):
    tree = impl.PrefixTree(max_nodes=10)
    assert tree.insert(_LenSaysMore(claimed), 0.0) == 0
    assert tree.match_len([1, 2, 3]) == 3
