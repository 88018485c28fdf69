"""The park rule (``ttlpolicy.park.plan_park``): which window of a tool's recorded durations
a parked chain is back on the GPU for — it holds the target share of the returns that
outlast a reload, no window holding as many costs less GPU time, the copy back starts at
least one reload after the call's end — and bad input is refused by name."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttlpolicy.park import ParkPlan, plan_park

durations = st.lists(
    st.floats(0.0, 500.0, allow_nan=False, allow_subnormal=False), min_size=0, max_size=60
).map(sorted)
reloads = st.floats(0.0, 20.0, allow_nan=False, allow_subnormal=False)
targets = st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0])


def gpu_time(longer: list[float], ready: float, until: float) -> float:
    """Summed seconds each recorded return would have found its chain waiting on the GPU."""
    return sum(min(max(d, ready), until) - ready for d in longer)


@settings(max_examples=200, deadline=None)
@given(durations, reloads, targets)
def test_the_window_holds_the_target_share_and_is_the_cheapest(
    ds: list[float], reload_s: float, target: float
) -> None:
    plan = plan_park(ds, reload_s, target, min_samples=3)
    longer = [d for d in ds if d > reload_s]
    if plan is None:
        return
    assert isinstance(plan, ParkPlan)
    inside = [d for d in longer if plan.ready_s <= d <= plan.until_s]
    assert len(inside) >= target * len(longer) - 1e-9
    assert plan.covered == len(inside) / len(longer)
    # the copy back starts a round trip after the end at the earliest, and ends at ready_s
    assert plan.upload_s >= reload_s
    assert plan.upload_s + reload_s == pytest.approx(plan.ready_s)
    # brute force over every window of recorded durations holding as many: none cheaper
    k = math.ceil(target * len(longer) - 1e-9)
    best = min(gpu_time(longer, longer[s], longer[s + k - 1]) for s in range(len(longer) - k + 1))
    assert gpu_time(longer, plan.ready_s, plan.until_s) <= best + 1e-6 * (1 + best)


@settings(max_examples=100, deadline=None)
@given(durations, reloads)
def test_no_plan_from_too_few_long_durations(ds: list[float], reload_s: float) -> None:
    longer = sum(d > reload_s for d in ds)
    if longer < 8:
        assert plan_park(ds, reload_s) is None


def test_a_tool_that_always_takes_a_minute_is_back_just_in_time() -> None:
    plan = plan_park([60.0] * 20, 2.0)
    assert plan == ParkPlan(upload_s=58.0, ready_s=60.0, until_s=60.0, covered=1.0)


def test_returns_too_soon_for_a_round_trip_keep_the_pin() -> None:
    # most returns come 3 s after the call; a copy takes 2 s: parking would save 1 s
    assert plan_park([3.0] * 19 + [100.0], 2.0) is None
    # the same returns with a fast link: parked, back by the third second
    plan = plan_park([3.0] * 19 + [100.0], 0.5)
    assert plan is not None and plan.ready_s == 3.0 and plan.upload_s == 2.5


def test_the_cheapest_window_skips_a_rare_early_return() -> None:
    # one return in ten comes at once; the rest after ten minutes: with a 90 % target the
    # chain waits in DRAM till just before the tenth minute
    ds = [5.0] + [600.0 + i for i in range(9)]
    plan = plan_park(ds, 1.0, 0.9)
    assert plan is not None and plan.ready_s == 600.0 and plan.until_s == 608.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"reload_s": -1.0}, "reload_s"),
        ({"reload_s": math.nan}, "reload_s"),
        ({"reload_s": 1.0, "target": 0.0}, "target"),
        ({"reload_s": 1.0, "target": 1.5}, "target"),
        ({"reload_s": 1.0, "min_samples": 0}, "min_samples"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        plan_park([1.0, 2.0], **kwargs)
