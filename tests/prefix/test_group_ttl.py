"""OnlineGroupTTL: TTLs change only at refits, each fit uses only past accesses (no
hindsight), memory stays bounded, both backends give the same TTLs, bad input is refused."""

from __future__ import annotations

import importlib.util
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.groups.online import OnlineGroupTTL
from ttlpolicy.reference.solver import solve_ttl

# Not `from conftest import NATIVE`: with several conftest.py in tests/, "conftest" names
# whichever was imported last.
NATIVE = importlib.util.find_spec("ttlpolicy._native")

BACKENDS = [
    pytest.param("python", id="python"),
    pytest.param(
        "rust", id="rust", marks=pytest.mark.skipif(NATIVE is None, reason="native not built")
    ),
]

# Small alphabets: shared prefixes and repeated groups are common.
access = st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.floats(0.0, 20.0))
stream = st.lists(access, max_size=40)
params = st.fixed_dictionaries(
    {
        "benefit_per_hit": st.floats(0.0, 50.0),
        "price_per_block_s": st.floats(0.0, 2.0),
        "max_ttl_s": st.floats(0.0, 60.0),
        "refit_every": st.integers(1, 5),
        "group_depth": st.integers(1, 3),
        "window": st.integers(1, 6),
    }
)


def keys_of(hash_ids, depth):
    return [tuple(hash_ids[:k]) for k in range(1, min(len(hash_ids), depth) + 1)]


def fits(model, keys):
    return {k: (model.ttl_s(k), model.roi(k)) for k in keys}


@pytest.mark.parametrize("backend", BACKENDS)
@given(kw=params, ops=stream)
def test_ttls_change_only_at_refits(backend, kw, ops):
    model = OnlineGroupTTL(**kw, backend=backend)
    seen: set[tuple[int, ...]] = set()
    now = 0.0
    before: dict[tuple[int, ...], tuple[float, float]] = {}
    for hashes, dt in ops:
        now += dt
        refits = model.refits
        seen.update(keys_of(hashes, kw["group_depth"]))
        model.access(hashes, now)
        after = fits(model, seen)
        if model.refits == refits:
            assert all(after[k] == before.get(k, after[k]) for k in before), "changed between fits"
            # A group first seen since the last refit has the pooled prior, not a fit of its own.
            assert all(after[k] == model.pooled() for k in after if k not in before)
        else:
            assert model.refits == refits + 1 and model.accesses % kw["refit_every"] == 0
        before = after


@pytest.mark.parametrize("backend", BACKENDS)
@given(kw=params, ops=stream, cut=st.integers(0, 40))
def test_fit_uses_only_past_accesses(backend, kw, ops, cut):
    """Two models fed the same past and different futures agree on everything up to the cut:
    the fit after access i depends on accesses 1..i only."""
    cut = min(cut, len(ops))
    past = OnlineGroupTTL(**kw, backend=backend)
    full = OnlineGroupTTL(**kw, backend=backend)
    keys: set[tuple[int, ...]] = set()
    now = 0.0
    for i, (hashes, dt) in enumerate(ops):
        now += dt
        keys.update(keys_of(hashes, kw["group_depth"]))
        full.access(hashes, now)
        if i < cut:
            past.access(hashes, now)
            assert fits(past, keys) == fits(full, keys)
    full.refit()  # a refit that sees the future too must not rewrite what `past` decided
    assert past.accesses == cut


@given(kw=params, ops=stream)
def test_ttl_is_solved_on_the_last_window_of_reuse_intervals(kw, ops):
    """An independent oracle: each group's window, computed here from the access times, gives
    the TTL by solve_ttl; groups without intervals get the fit on all windows pooled."""
    model = OnlineGroupTTL(**kw, max_idle_groups=1 << 10, backend="python")
    b, c, cap, w = (kw[k] for k in ("benefit_per_hit", "price_per_block_s", "max_ttl_s", "window"))
    last: dict[tuple[int, ...], float] = {}
    windows: dict[tuple[int, ...], list[float]] = {}
    now = 0.0
    for hashes, dt in ops:
        now += dt
        for k in keys_of(hashes, kw["group_depth"]):
            if k in last:
                windows.setdefault(k, []).append(now - last[k])
                windows[k] = windows[k][-w:]
            last[k] = now
        model.access(hashes, now)
        model.refit()
        pooled = [r for k in last for r in windows.get(k, [])]
        tau_pooled = solve_ttl(pooled, b, c, cap)[0] if pooled else cap
        for k in last:
            own = windows.get(k)
            tau = solve_ttl(own, b, c, cap)[0] if own else tau_pooled
            assert model.ttl_s(k) == tau
            samples = own or pooled
            hit = sum(r <= tau for r in samples) / len(samples) if samples else 0.0
            held = sum(min(r, tau) for r in samples) / len(samples) if samples else 0.0
            roi = model.roi(k)
            if hit * b == 0.0:
                assert roi == 0.0
            elif held == 0.0:
                assert roi == math.inf
            else:
                assert roi == pytest.approx(hit * b / held, rel=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@given(
    kw=params,
    ops=stream,
    max_blocks=st.integers(1, 8),
    max_idle_groups=st.integers(0, 4),
)
def test_memory_is_bounded(backend, kw, ops, max_blocks, max_idle_groups):
    model = OnlineGroupTTL(
        **kw, max_blocks=max_blocks, max_idle_groups=max_idle_groups, backend=backend
    )
    now = 0.0
    for hashes, dt in ops:
        now += dt
        model.access(hashes, now)
        model.refit()
        groups = model.tree.groups()
        assert len(model) <= max_blocks
        # a group holding blocks holds at least one; idle ones are capped
        assert model.fitted_groups() == len(groups) <= max_blocks + max_idle_groups
        assert all(len(g.reuse_s) <= kw["window"] for g in groups)


@given(kw=params, ops=stream, max_blocks=st.integers(1, 10))
def test_backends_give_the_same_ttls(kw, ops, max_blocks):
    if NATIVE is None:
        pytest.skip("native module not built")
    ref = OnlineGroupTTL(**kw, max_blocks=max_blocks, backend="python")
    nat = OnlineGroupTTL(**kw, max_blocks=max_blocks, backend="rust")
    keys: set[tuple[int, ...]] = set()
    now = 0.0
    for hashes, dt in ops:
        now += dt
        keys.update(keys_of(hashes, kw["group_depth"]))
        assert ref.access(hashes, now) == nat.access(hashes, now)
        assert ref.expire(now) == nat.expire(now)
        assert ref.pooled() == pytest.approx(nat.pooled(), rel=1e-9)
        for k in keys:
            assert ref.ttl_s(k) == pytest.approx(nat.ttl_s(k), rel=1e-9)
            assert ref.roi(k) == pytest.approx(nat.roi(k), rel=1e-9)
        assert ref.block_seconds(now) == pytest.approx(nat.block_seconds(now), rel=1e-9)


def test_periodic_group_keeps_its_period_and_an_idle_one_gets_the_prior():
    model = OnlineGroupTTL(100.0, 0.01, 3600.0, refit_every=1, backend="python")
    for i in range(6):
        model.access([1, 2, 3], 10.0 * i)
    assert model.ttl_s([1, 2]) == 10.0
    assert model.ttl_s((1, 2, 99)) == 10.0  # a deeper block of the same group
    assert model.roi([1, 2]) == pytest.approx(100.0 / 10.0)
    assert model.ttl_s([7, 8]) == model.pooled()[0] == 10.0
    # a request 10 s after the last: every block is still held
    assert model.access([1, 2, 3], 60.0) == 3


def test_before_the_first_refit_groups_hold_up_to_the_cap():
    model = OnlineGroupTTL(1.0, 1.0, 30.0, refit_every=1000)
    model.access([1, 2], 0.0)
    assert model.ttl_s([1, 2]) == 30.0 and model.roi([1]) == 0.0
    assert model.access([1, 2], 29.0) == 2
    assert model.access([1, 2], 70.0) == 0  # 41 s idle > 30 s cap: expired


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"benefit_per_hit": -1.0}, "benefit_per_hit"),
        ({"price_per_block_s": math.nan}, "price_per_block_s"),
        ({"max_ttl_s": math.inf}, "max_ttl_s"),
        ({"refit_every": 0}, "refit_every"),
        ({"max_blocks": 0}, "max_blocks"),
        ({"group_depth": 0}, "group_depth"),
        ({"window": 0}, "window"),
        ({"backend": "gpu"}, "backend"),
    ],
)
def test_bad_settings_are_refused_by_name(kw, match):
    args = {"benefit_per_hit": 1.0, "price_per_block_s": 0.1, "max_ttl_s": 10.0} | kw
    with pytest.raises(ValueError, match=match):
        OnlineGroupTTL(**args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_access_is_refused_and_loses_nothing(backend):
    model = OnlineGroupTTL(1.0, 0.1, 10.0, refit_every=2, backend=backend)
    model.access([1, 2], 5.0)
    state = (model.accesses, model.hit_blocks, model.accessed_blocks, len(model), model.refits)
    with pytest.raises(ValueError, match="now must"):
        model.access([1, 2], 1.0)
    with pytest.raises(TypeError, match="hash_ids"):
        model.access("12", 6.0)
    with pytest.raises(ValueError, match="signed 64-bit"):
        model.access([1 << 64], 6.0)
    with pytest.raises(ValueError, match="now"):
        model.access([1], math.nan)
    assert state == (
        model.accesses,
        model.hit_blocks,
        model.accessed_blocks,
        len(model),
        model.refits,
    )
    with pytest.raises(ValueError, match="at least one hash"):
        model.ttl_s([])
    with pytest.raises(TypeError, match="hash_ids"):
        model.roi(None)
    assert model.access(iter([1, 2, 3]), 6.0) == 2  # a one-shot iterator is counted once
    assert model.accessed_blocks == 5


def _two_groups() -> OnlineGroupTTL:
    """Group (1, 2) reused every 10 s, group (5, 6) every 20 s: both fitted at their period,
    (1, 2) worth twice as much per block-second."""
    model = OnlineGroupTTL(100.0, 0.01, 3600.0, refit_every=1, backend="python")
    for i in range(6):
        model.access([1, 2, 3], 20.0 * i)
        model.access([5, 6, 7], 20.0 * i + 1.0)
        model.access([1, 2, 3], 20.0 * i + 10.0)
    assert model.ttl_s([1, 2]) == 10.0 and model.ttl_s([5, 6]) == 20.0
    assert model.roi([1, 2]) > model.roi([5, 6]) > 0.0
    return model


def test_the_eviction_rank_orders_expired_then_live_by_roi_then_waiting() -> None:
    model = _two_groups()
    now = 200.0
    rank = model.eviction_rank
    expired = rank((1, 2), 185.0, now)  # idle 15 s > its 10 s TTL
    ended = rank((1, 2), 199.0, now, ended_s=150.0)  # its program ended: goes, oldest first
    live_cheap = rank((5, 6), 190.0, now)  # idle 10 s < 20 s TTL, lower ROI
    live_dear_old, live_dear_new = rank((1, 2), 195.0, now), rank((1, 2), 198.0, now)
    waiting = rank((5, 6), 195.0, now, waiting_until_s=230.0)  # back from its tool later
    waited = rank((5, 6), 195.0, now, waiting_until_s=190.0)  # that wait is over: live
    assert expired == (0.0, 195.0) and ended == (0.0, 150.0)
    order = sorted([waiting, live_dear_new, expired, live_cheap, live_dear_old, ended])
    assert order == [ended, expired, live_cheap, live_dear_old, live_dear_new, waiting]
    assert waited[0] == 1.0


def test_a_block_of_no_known_group_waits_for_the_pooled_ttl_after_every_live_group() -> None:
    model = _two_groups()
    pooled_ttl_s = model.pooled()[0]
    for group in (None, ()):
        live = model.eviction_rank(group, 100.0, 100.0 + pooled_ttl_s)
        assert live == (1.0, math.inf, 100.0)
        assert live > model.eviction_rank((1, 2), 100.0, 101.0)  # after every live group
        assert model.eviction_rank(group, 100.0, 100.5 + pooled_ttl_s) == (
            0.0,
            100.0 + pooled_ttl_s,
        )
