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


def replayed(model, ops, depth, window):
    """Feed ``ops`` to ``model``, keeping the oracle's own record of each group's last access
    and window of reuse intervals; yields (last, windows) after each access."""
    last: dict[tuple[int, ...], float] = {}
    windows: dict[tuple[int, ...], list[float]] = {}
    now = 0.0
    for hashes, dt in ops:
        now += dt
        for k in keys_of(hashes, depth):
            if k in last:
                windows.setdefault(k, []).append(now - last[k])
                windows[k] = windows[k][-window:]
            last[k] = now
        model.access(hashes, now)
        yield last, windows


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
    the TTL by solve_ttl; groups without intervals get the fit on all windows pooled (prior
    weight 0: a group's fit is its own window's)."""
    model = OnlineGroupTTL(**kw, max_idle_groups=1 << 10, prior_weight=0.0, backend="python")
    b, c, cap, w = (kw[k] for k in ("benefit_per_hit", "price_per_block_s", "max_ttl_s", "window"))
    for last, windows in replayed(model, ops, kw["group_depth"], w):
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
        ({"prior_weight": -1.0}, "prior_weight"),
        ({"prior_weight": 1e9}, "prior_weight"),
        ({"horizon_s": math.nan}, "horizon_s"),
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
    model = OnlineGroupTTL(100.0, 0.01, 3600.0, refit_every=1, prior_weight=0.0, backend="python")
    for i in range(6):
        model.access([1, 2, 3], 20.0 * i)
        model.access([5, 6, 7], 20.0 * i + 1.0)
        model.access([1, 2, 3], 20.0 * i + 10.0)
    assert model.ttl_s([1, 2]) == 10.0 and model.ttl_s([5, 6]) == 20.0
    assert model.roi([1, 2]) > model.roi([5, 6]) > 0.0
    return model


def test_the_eviction_rank_orders_expired_then_live_by_value_given_idle_then_waiting() -> None:
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
    # live, by value per block-second given the idle time (100 per return, one return each
    # within the horizon): (5, 6) idle 10 s is 10 s from its return: 10; (1, 2) idle 2 s is
    # 8 s from it: 12.5; idle 5 s, 5 s from it: 20 (closer to its return, so worth more)
    assert [r[1] for r in (live_cheap, live_dear_new, live_dear_old)] == [10.0, 12.5, 20.0]
    assert order == [ended, expired, live_cheap, live_dear_new, live_dear_old, waiting]
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


def _idle_and_busy(**kw) -> OnlineGroupTTL:
    """Group (1, 2): eight 2 s reuses and one of 60 s; group (5, 6): reused every 20 s.
    Cheap holding: both TTLs reach their longest interval (60 s and 20 s), so roi(1, 2) =
    100 / mean(2 × 8, 60) = 100 · 9 / 76 and roi(5, 6) = 100 / 20."""
    model = OnlineGroupTTL(100.0, 0.001, 3600.0, refit_every=1, backend="python", **kw)
    idle = [100.0, 102.0, 104.0, 106.0, 108.0, 168.0, 170.0, 172.0, 174.0, 176.0]
    busy = [20.0 * i for i in range(10)]  # 0 … 180
    for t, hashes in sorted([(t, [1, 2, 3]) for t in idle] + [(t, [5, 6, 7]) for t in busy]):
        model.access(hashes, t)
    return model


def test_an_idle_group_past_its_usual_gaps_goes_before_one_just_used() -> None:
    """(1, 2) idle 5 s, past all its 2 s gaps (only its 60 s gap is longer, 55 s away); (5, 6)
    used 1 s ago, back in 19 s.  The old rule ranked live blocks by the window's ROI alone, so
    the idle group outlived the busy one; given the idle time, the idle group's value within
    a 20 s horizon is 0 and the busy one's 9 returns per 9 × 19 block-seconds."""
    model = _idle_and_busy(horizon_s=20.0, prior_weight=0.0)
    assert model.ttl_s((1, 2)) == 60.0 and model.ttl_s((5, 6)) == 20.0
    assert model.roi((1, 2)) == pytest.approx(100.0 * 9 / 76) and model.roi((5, 6)) == 5.0
    now = 181.0
    idle = model.eviction_rank((1, 2), 176.0, now)
    busy = model.eviction_rank((5, 6), 180.0, now)
    assert idle[0] == busy[0] == 1.0  # both live: neither is past its TTL
    assert idle < busy
    assert model.back_value((1, 2), 5.0) == 0.0
    assert model.back_value((5, 6), 1.0) == pytest.approx(100.0 * 9 / (9 * 19))
    # just used, (1, 2) is back within 20 s 8 times in 9, holding 8 × 2 + 20 block-seconds
    assert model.back_value((1, 2), 0.0) == pytest.approx(100.0 * 8 / 36)


def test_with_the_group_s_ttl_as_horizon_the_value_at_idle_0_is_its_roi() -> None:
    model = _idle_and_busy(prior_weight=0.0)
    assert model.back_value((1, 2), 0.0) == pytest.approx(100.0 * 9 / 76)
    assert model.back_value((5, 6), 0.0) == pytest.approx(5.0)
    # (5, 6) idle 1 s: 9 returns within 20 s, each 19 s away
    assert model.back_value((5, 6), 1.0) == pytest.approx(100.0 / 19)


def _few_and_many(k: float) -> OnlineGroupTTL:
    """Group (5, 6) reused every 20 s, 20 times; group (1, 2) once, after 12 s."""
    model = OnlineGroupTTL(100.0, 0.01, 3600.0, refit_every=1, prior_weight=k, backend="python")
    for i in range(21):
        model.access([5, 6, 7], 20.0 * i)
    model.access([1, 2, 3], 400.0)
    model.access([1, 2, 3], 412.0)
    return model


def test_a_group_of_few_intervals_leans_on_the_pooled_fit_by_weight() -> None:
    """One 12 s interval fits a 12 s TTL on its own (k = 0), so the group's block is expired
    15 s later though every other reuse seen took 20 s.  With a prior weight k the fit is the
    argmax of (n·P_g + k·P_*)/(n + k)·b − c·τ: at k = 4, P̃(12) = 1/5 + 4/5 · 1/21 and
    P̃(20) = 1, so 20 s wins."""
    own = _few_and_many(0.0)
    assert own.ttl_s((1, 2)) == 12.0
    assert own.eviction_rank((1, 2), 412.0, 427.0)[0] == 0.0  # expired
    shrunk = _few_and_many(4.0)
    assert shrunk.ttl_s((1, 2)) == 20.0
    assert shrunk.eviction_rank((1, 2), 412.0, 427.0)[0] == 1.0  # live
    # 20 intervals of 20 s outweigh the prior: that group's fit does not move
    assert shrunk.ttl_s((5, 6)) == own.ttl_s((5, 6)) == 20.0
    # the value 15 s idle: the group's own intervals are all shorter (0 at k = 0); with k
    # the pooled ones speak: every one longer than 15 s is back within 20 s, 5 s away
    assert own.back_value((1, 2), 15.0) == 0.0
    assert shrunk.back_value((1, 2), 15.0) == pytest.approx(4 * 100.0 / (4 * 5.0))


@given(kw=params, ops=stream, k=st.floats(0.0, 20.0), idle=st.floats(0.0, 30.0))
def test_shrunk_fit_and_value_given_idle_time_against_the_windows(kw, ops, k, idle):
    """An independent oracle from the access times: every group's shrunk TTL scores at least
    as well as 0 and each of its own intervals on (n·P_g + k·P_*)/(n + k)·b − c·τ, and
    back_value is the conditional ratio of the module doc, summed here by brute force."""
    model = OnlineGroupTTL(**kw, max_idle_groups=1 << 10, prior_weight=k, backend="python")
    b, c, cap, w = (kw[x] for x in ("benefit_per_hit", "price_per_block_s", "max_ttl_s", "window"))
    last: dict[tuple[int, ...], float] = {}
    windows: dict[tuple[int, ...], list[float]] = {}
    for last, windows in replayed(model, ops, kw["group_depth"], w):  # noqa: B007 (kept after)
        pass
    model.refit()
    pooled = [r for g in last for r in windows.get(g, [])]

    def cdf(xs, t):
        return sum(r <= t for r in xs) / len(xs)

    for g in last:
        own = windows.get(g)
        if not own:
            continue
        n = len(own)

        def score(t, own=own, n=n):
            return (n * cdf(own, t) + k * cdf(pooled, t)) / (n + k) * b - c * t

        tau = model.ttl_s(g)
        assert 0.0 <= tau <= cap
        for t in [0.0, *own]:
            if t <= cap:
                assert score(tau) >= score(t) - 1e-9 * max(1.0, b)
        h = tau
        longer_p = [r for r in pooled if r > idle]
        p_p = sum(r <= idle + h for r in longer_p) / len(longer_p) if longer_p else 0.0
        m_p = sum(min(r - idle, h) for r in longer_p) / len(longer_p) if longer_p else 0.0
        longer = [r for r in own if r > idle]
        gain = (sum(r <= idle + h for r in longer) + k * p_p) * b
        hold = sum(min(r - idle, h) for r in longer) + k * m_p
        value = model.back_value(g, idle)
        if gain <= 0.0:
            assert value == 0.0
        elif hold <= 0.0:
            assert value == math.inf
        else:
            assert value == pytest.approx(gain / hold, rel=1e-9, abs=1e-12)


_durations = st.floats(0.0, 50.0, allow_nan=False).map(lambda x: round(x, 1))  # (ties)


@given(
    st.lists(st.lists(_durations, min_size=1, max_size=12), max_size=30),
    st.lists(_durations, min_size=1, max_size=40),
    st.floats(0.0, 20.0),
    st.floats(0.0, 5.0),
    st.floats(0.0, 2.0),
    st.floats(0.0, 60.0),
)
def test_the_batched_shrunk_fit_is_the_rule_group_by_group(
    windows: list[list[float]],
    pooled: list[float],
    k: float,
    benefit: float,
    price: float,
    cap: float,
) -> None:
    # ``shrunk_ttl`` states the rule; the refit runs ``shrunk_ttls`` on every group at once
    from ttlpolicy.groups.online import pooled_sketch, shrunk_ttl, shrunk_ttls

    windows = [sorted(w) for w in windows]
    pooled = sorted(pooled)
    sketch = pooled_sketch(pooled, min(cap, pooled[len(pooled) // 2]))
    expected = [shrunk_ttl(w, pooled, sketch, k, benefit, price, cap) for w in windows]
    assert shrunk_ttls(windows, pooled, sketch, (k, benefit, price, cap)) == expected
