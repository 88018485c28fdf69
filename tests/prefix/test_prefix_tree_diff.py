"""PrefixTree differential test: the Rust core and the Python reference, driven by the same
random operation sequences, give the same answers (floats within 1e-9 relative)."""

from __future__ import annotations

import math
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity import close, outcome
from parity import tree_snapshot as snapshot
from trace_files import MOONCAKE

hashes = st.lists(st.integers(-2, 4), max_size=10)
ttl = st.one_of(st.just(math.inf), st.floats(0.0, 15.0))
group_key = st.lists(st.integers(-2, 4), min_size=1, max_size=3).map(tuple)

op = st.one_of(
    st.tuples(st.just("insert"), hashes, st.floats(0.0, 4.0)),
    st.tuples(st.just("expire"), st.none(), st.floats(0.0, 4.0)),
    st.tuples(st.just("match_len"), hashes, st.just(0.0)),
    st.tuples(st.just("set_group_ttls"), st.dictionaries(group_key, ttl, max_size=4), st.just(0.0)),
    st.tuples(
        st.just("group_ttls"),
        st.tuples(st.floats(0, 50), st.floats(0, 5), st.floats(0, 30)),
        st.just(0.0),
    ),
    st.tuples(st.just("block_seconds"), st.none(), st.floats(0.0, 4.0)),
)


def call(tree, name, arg, now):
    if name in ("insert",):
        return tree.insert(arg, now)
    if name in ("expire", "block_seconds"):
        return getattr(tree, name)(now)
    if name == "match_len":
        return tree.match_len(arg)
    if name == "set_group_ttls":
        return tree.set_group_ttls(arg)
    return tree.group_ttls(*arg)


def same(a, b):
    return close(a, b, abs_tol=1e-12)


@given(
    max_nodes=st.integers(1, 20),
    group_depth=st.integers(1, 3),
    window=st.integers(1, 5),
    max_idle_groups=st.integers(0, 6),
    default_ttl=ttl,
    ops=st.lists(op, max_size=40),
)
def test_backends_agree_on_random_operations(
    backends, max_nodes, group_depth, window, max_idle_groups, default_ttl, ops
):
    ref_cls, nat_cls = (b.PrefixTree for b in backends)
    kwargs = dict(
        max_nodes=max_nodes,
        group_depth=group_depth,
        window=window,
        max_idle_groups=max_idle_groups,
        default_ttl_s=default_ttl,
    )
    ref, nat = ref_cls(**kwargs), nat_cls(**kwargs)
    now = 0.0
    for name, arg, dt in ops:
        now += dt
        r, n = (outcome(partial(call, t, name, arg, now)) for t in (ref, nat))
        assert same(r, n), (name, arg, now, r, n)
        assert same(snapshot(ref), snapshot(nat)), (name, arg, now)


@pytest.mark.slow
def test_backends_agree_on_the_mooncake_trace(backends):
    """The first 2,000 requests of the real conversation trace, with a node bound and a TTL."""
    from itertools import islice

    from ttlpolicy.traces import read_trace

    trees = [b.PrefixTree(max_nodes=5000, default_ttl_s=120.0) for b in backends]
    for rec in islice(read_trace(MOONCAKE), 2000):
        hits = [t.insert(rec.hash_ids, rec.arrival_s) for t in trees]
        assert hits[0] == hits[1]
    end = rec.arrival_s
    assert same(trees[0].block_seconds(end), trees[1].block_seconds(end))
    assert same(snapshot(trees[0]), snapshot(trees[1]))
