"""Bad input at every public entry point of the decision core: NaN, infinities, negatives,
out-of-range and wrong types raise the promised exception, name the field, and change
nothing.  Runs on both backends."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from ttlpolicy import PolicyConfig

NAN, INF = float("nan"), float("inf")

#: (bad value, exception) for a float field that must be finite and >= 0.
BAD_NON_NEGATIVE = [
    (NAN, ValueError),
    (INF, ValueError),
    (-INF, ValueError),
    (-1.0, ValueError),
    (-1e-300, ValueError),
    (2**1100, ValueError),  # an int too large for a float: out of range, not OverflowError
    ("1.5", TypeError),
    (b"1", TypeError),
    (None, TypeError),
    ([1.0], TypeError),
    (object(), TypeError),
]
#: (bad value, exception) for an integer field with a lower bound of 0 or 1.
BAD_COUNT = [
    (-1, ValueError),
    (2**70, ValueError),
    (-(2**70), ValueError),
    (1.0, TypeError),  # floats are refused even when whole
    (np.float64(2.0), TypeError),
    (2.5, TypeError),
    ("3", TypeError),
    (None, TypeError),
    (NAN, TypeError),
]
BAD_TOOLS = [b"tool", 7, 1.5, ["a"], object()]


def history_state(h: Any) -> tuple:
    return (h.tools(), h.total_count(), [h.samples(t) for t in (None, "a", "b")])


def policy_state(p: Any) -> tuple:
    d = p.decide(tool="a", request_blocks=2, mean_active_blocks=10.0, prefix_tokens=1000)
    return (
        p.eta,
        p.out_of_order_cost_s,
        p.tool_count("a"),
        p.tool_count(None),
        p.miss_cost_s(5000),
        d.ttl_s,
        d.benefit_s,
        d.source,
    )


def primed_history(impl: Any) -> Any:
    h = impl.ToolHistory(window=4, max_tools=2)
    for tool, d in (("a", 1.0), ("b", 2.0), ("a", 3.0), (None, 4.0)):
        h.observe(tool, d)
    return h


def primed_policy(impl: Any) -> Any:
    p = impl.TTLPolicy(
        PolicyConfig(
            window=8,
            min_tool_samples=2,
            min_total_samples=2,
            eta_min_programs=2,
            min_prefill_samples=3,
        )
    )
    for i in range(6):
        p.observe_tool("a", 1.0 + i)
        p.observe_program(3 + i)
        p.observe_queueing_delay(0.5 * i)
        p.observe_prefill(1000 * (i + 1), 0.1 * (i + 1) ** 1.5)
    return p


def refuses(call: Callable[[], Any], exc: type, field: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc
    assert field in str(info.value), f"message does not name {field!r}: {info.value}"


# -- solve_ttl ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
@pytest.mark.parametrize("field", ["benefit_s", "cost_per_s", "max_ttl_s"])
def test_solve_ttl_scalars(impl, field, bad, exc) -> None:
    args = {"samples_s": [1.0, 2.0], "benefit_s": 1.0, "cost_per_s": 0.1, "max_ttl_s": 10.0}
    args[field] = bad
    refuses(lambda: impl.solve_ttl(**args), exc, field)


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
def test_solve_ttl_samples(impl, bad, exc) -> None:
    refuses(lambda: impl.solve_ttl([1.0, 2.0, bad], 1.0, 0.1, 10.0), exc, "samples_s[2]")


@pytest.mark.parametrize("bad", [5, None, 1.5])
def test_solve_ttl_samples_must_be_iterable(impl, bad) -> None:
    with pytest.raises(TypeError):
        impl.solve_ttl(bad, 1.0, 0.1, 10.0)


def test_solve_ttl_reports_the_first_bad_argument_in_order(impl) -> None:
    # The scalars are checked before the samples, samples in index order.
    refuses(lambda: impl.solve_ttl(["x"], -1.0, 0.1, 10.0), ValueError, "benefit_s")
    refuses(lambda: impl.solve_ttl([1.0, -1.0, "x"], 1.0, 0.1, 10.0), ValueError, "samples_s[1]")
    refuses(lambda: impl.solve_ttl([1.0, "x", -1.0], 1.0, 0.1, 10.0), TypeError, "samples_s[1]")
    refuses(lambda: impl.solve_ttl(5, 1.0, NAN, 10.0), ValueError, "cost_per_s")


def test_solve_ttl_empty_input_is_defined(impl) -> None:
    assert impl.solve_ttl([], 0.0, 0.0, 0.0) == (0.0, 0.0)


# -- ToolHistory ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, exc", [*BAD_COUNT, (0, ValueError), ((1 << 20) + 1, ValueError)])
@pytest.mark.parametrize("field", ["window", "max_tools"])
def test_history_constructor(impl, field, bad, exc) -> None:
    refuses(lambda: impl.ToolHistory(**{field: bad}), exc, field)


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
@pytest.mark.parametrize("tool", ["a", "new", None])
def test_history_observe_duration(impl, tool, bad, exc) -> None:
    h = primed_history(impl)
    before = history_state(h)
    refuses(lambda: h.observe(tool, bad), exc, "duration_s")
    assert history_state(h) == before


@pytest.mark.parametrize("bad", BAD_TOOLS)
def test_history_tool_type(impl, bad) -> None:
    h = primed_history(impl)
    before = history_state(h)
    refuses(lambda: h.observe(bad, 1.0), TypeError, "tool")
    for read in (h.count, h.mean, h.samples):
        refuses(partial(read, bad), TypeError, "tool")
    refuses(lambda: h.cdf(bad, 1.0), TypeError, "tool")
    refuses(lambda: h.quantile(bad, 0.5), TypeError, "tool")
    assert history_state(h) == before


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
def test_history_cdf_and_quantile(impl, bad, exc) -> None:
    h = primed_history(impl)
    refuses(lambda: h.cdf("a", bad), exc, "t_s")
    refuses(lambda: h.quantile("a", bad), exc, "q")
    # The value is checked before the tool, as the reference reads them.
    refuses(lambda: h.cdf(3, bad), exc, "t_s")


@pytest.mark.parametrize("bad", [1.0000001, 2.0, 1e300])
def test_history_quantile_above_one(impl, bad) -> None:
    refuses(lambda: primed_history(impl).quantile("a", bad), ValueError, "q")


def test_history_empty_names_and_windows_are_fine(impl) -> None:
    h = impl.ToolHistory()
    assert (h.count(""), h.cdf("", 1.0), h.quantile("", 0.5), h.mean(""), h.samples("")) == (
        0,
        0.0,
        None,
        None,
        [],
    )
    h.observe("", 0.0)
    assert h.tools() == [""]


# -- estimators -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, exc", [*BAD_COUNT, (0, ValueError), (1000001, ValueError)])
def test_eta_observe(impl, bad, exc) -> None:
    e = impl.EtaEstimator(window=8, min_programs=2)
    for n in (3, 9, 4):
        e.observe(n)
    before = (e.eta, e.count())
    refuses(lambda: e.observe(bad), exc, "total_turns")
    assert (e.eta, e.count()) == before


@pytest.mark.parametrize("bad, exc", BAD_COUNT)
@pytest.mark.parametrize("field", ["window", "min_programs"])
def test_eta_constructor(impl, field, bad, exc) -> None:
    refuses(lambda: impl.EtaEstimator(**{field: bad}), exc, field)


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
def test_out_of_order_observe(impl, bad, exc) -> None:
    t = impl.OutOfOrderCost(window=4)
    t.observe(2.0)
    refuses(lambda: t.observe(bad), exc, "delay_s")
    assert (t.mean_s, t.count()) == (2.0, 1)


@pytest.mark.parametrize("bad, exc", [*BAD_COUNT, (0, ValueError)])
def test_out_of_order_constructor(impl, bad, exc) -> None:
    refuses(lambda: impl.OutOfOrderCost(window=bad), exc, "window")


def miss_state(m: Any) -> tuple:
    return (m.fitted, m.coefficients, m.prefill_s(1234))


@pytest.mark.parametrize(
    "field, bad, exc",
    [
        (f, b, e)
        for f in ("prefill_base_s", "prefill_s_per_token", "prefill_s_per_token2")
        for b, e in BAD_NON_NEGATIVE
    ]
    + [("kv_bytes_per_token", b, e) for b, e in BAD_COUNT]
    + [("offload_bandwidth_bytes_per_s", b, e) for b, e in BAD_NON_NEGATIVE if b is not None]
    + [("offload_bandwidth_bytes_per_s", 0.0, ValueError)]
    + [("window", b, e) for b, e in BAD_COUNT]
    + [("min_samples", 2, ValueError)]
    + [("prefill_chunk_tokens", b, e) for b, e in BAD_COUNT if b is not None]
    + [
        ("prefill_chunk_tokens", 0, ValueError),
        ("prefill_chunk_tokens", (1 << 40) + 1, ValueError),
    ],
)
def test_miss_model_constructor(impl, field, bad, exc) -> None:
    refuses(lambda: impl.CacheMissModel(**{field: bad}), exc, field)


@pytest.mark.parametrize("bad, exc", [*BAD_COUNT, ((1 << 40) + 1, ValueError)])
def test_miss_model_token_counts(impl, bad, exc) -> None:
    m = impl.CacheMissModel(offload_bandwidth_bytes_per_s=1e9, min_samples=3)
    for n in (1000, 2000, 3000):
        m.observe_prefill(n, n / 1e4)
    before = miss_state(m)
    refuses(lambda: m.observe_prefill(bad, 1.0), exc, "tokens")
    refuses(lambda: m.observe_prefill(100, 1.0, bad), exc, "cached_tokens")
    refuses(lambda: m.prefill_s(bad), exc, "tokens")
    refuses(lambda: m.reload_s(bad), exc, "tokens")
    refuses(lambda: m.miss_cost_s(bad), exc, "prefix_tokens")
    refuses(lambda: m.miss_cost_s(10, bad), exc, "offloaded_tokens")
    assert miss_state(m) == before


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
def test_miss_model_seconds(impl, bad, exc) -> None:
    m = impl.CacheMissModel()
    refuses(lambda: m.observe_prefill(100, bad), exc, "seconds")
    # The tokens come first: a bad count wins over bad seconds, as in the reference.
    refuses(lambda: m.observe_prefill(-5, bad), ValueError, "tokens")
    assert not m.fitted


def test_offloaded_tokens_cannot_exceed_the_prefix(impl) -> None:
    refuses(lambda: impl.CacheMissModel().miss_cost_s(10, 11), ValueError, "offloaded_tokens")


# -- TTLPolicy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, exc", BAD_NON_NEGATIVE)
def test_policy_observations(impl, bad, exc) -> None:
    p = primed_policy(impl)
    before = policy_state(p)
    refuses(lambda: p.observe_tool("a", bad), exc, "duration_s")
    refuses(lambda: p.observe_queueing_delay(bad), exc, "delay_s")
    refuses(lambda: p.observe_prefill(1000, bad), exc, "seconds")
    assert policy_state(p) == before


@pytest.mark.parametrize("bad, exc", BAD_COUNT)
def test_policy_counts(impl, bad, exc) -> None:
    p = primed_policy(impl)
    before = policy_state(p)
    refuses(lambda: p.observe_program(bad), exc, "total_turns")
    refuses(lambda: p.observe_prefill(bad, 1.0), exc, "tokens")
    refuses(lambda: p.miss_cost_s(bad), exc, "prefix_tokens")
    assert policy_state(p) == before


@pytest.mark.parametrize("bad", BAD_TOOLS)
def test_policy_tool_type(impl, bad) -> None:
    p = primed_policy(impl)
    before = policy_state(p)
    refuses(lambda: p.observe_tool(bad, 1.0), TypeError, "tool")
    refuses(lambda: p.tool_count(bad), TypeError, "tool")
    refuses(lambda: p.decide(tool=bad, request_blocks=-1), TypeError, "tool")  # tool first
    assert policy_state(p) == before


DECIDE_OK = dict(
    tool="a",
    request_blocks=4,
    mean_active_blocks=20.0,
    cache_miss_cost_s=1.0,
    prefix_tokens=100,
    now=5.0,
    offloaded_tokens=0,
)
DECIDE_BAD = (
    [("request_blocks", b, e) for b, e in [*BAD_COUNT, ((1 << 40) + 1, ValueError)]]
    + [("mean_active_blocks", b, e) for b, e in [*BAD_NON_NEGATIVE, (0.0, ValueError)]]
    + [("cache_miss_cost_s", b, e) for b, e in BAD_NON_NEGATIVE if b is not None]
    + [("prefix_tokens", b, e) for b, e in BAD_COUNT]
    + [("now", b, e) for b, e in BAD_NON_NEGATIVE if not (isinstance(b, float) and b < 0)]
    + [("offloaded_tokens", b, e) for b, e in BAD_COUNT]
)


@pytest.mark.parametrize(
    "field, bad, exc, model_miss",
    # With no cache_miss_cost_s the model prices prefix_tokens/offloaded_tokens instead.
    [(*case, False) for case in DECIDE_BAD]
    + [(*case, True) for case in DECIDE_BAD if case[0] != "cache_miss_cost_s"],
)
def test_decide_arguments(impl, field, bad, exc, model_miss) -> None:
    p = primed_policy(impl)
    before = policy_state(p)
    args = dict(DECIDE_OK, **{field: bad})
    if model_miss:
        args["cache_miss_cost_s"] = None
    refuses(lambda: p.decide(**args), exc, field)
    assert policy_state(p) == before


def test_decide_negative_time_is_allowed(impl) -> None:
    # `now` is an engine's clock reading: any finite value, negative included.
    assert impl.TTLPolicy().decide(now=-5.0).source == "no_benefit"


@pytest.mark.parametrize(
    "args, exc, field",
    [
        # The reference checks request_blocks, mean_active_blocks, now, then the miss cost.
        (dict(request_blocks=-1, mean_active_blocks="x"), ValueError, "request_blocks"),
        (dict(request_blocks="x", mean_active_blocks=-1.0), TypeError, "request_blocks"),
        (dict(mean_active_blocks=0.0, cache_miss_cost_s="x"), ValueError, "mean_active_blocks"),
        (dict(cache_miss_cost_s="x", now=NAN), ValueError, "now"),
        (dict(cache_miss_cost_s=NAN, now="x"), TypeError, "now"),
        (dict(prefix_tokens=-1, offloaded_tokens="x"), ValueError, "prefix_tokens"),
        (dict(prefix_tokens=5, offloaded_tokens=6, now=NAN), ValueError, "now"),
        (dict(prefix_tokens=5, offloaded_tokens=6), ValueError, "offloaded_tokens"),
        (dict(cache_miss_cost_s=1.0, prefix_tokens=5, offloaded_tokens=6), None, None),
    ],
)
def test_decide_reports_the_first_bad_argument_in_the_references_order(impl, args, exc, field):
    p = impl.TTLPolicy()
    if exc is None:
        assert p.decide(**args).source  # offloaded > prefix only matters to the model
    else:
        refuses(lambda: p.decide(**args), exc, field)


def test_decide_with_no_arguments_is_defined(impl) -> None:
    d = impl.TTLPolicy().decide()
    assert (d.ttl_s, d.source) == (0.0, "no_benefit")
