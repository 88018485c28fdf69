"""Differential tests: random operation sequences, bad values included, give the same results
and the same exceptions on the Python reference and the Rust core."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from parity import assert_same, outcome, plain
from ttlpolicy import PolicyConfig

NAN, INF = float("nan"), float("inf")
BAD_FLOATS = [NAN, INF, -INF, -1.0, -1e-300, "1.5", None, b"1", 2**1100, [1.0]]
BAD_INTS = [-1, 2**40 + 1, 2**63, -(2**63) - 1, 2**70, 1.0, 2.5, "3", None, np.float64(2.0)]
ODD_OK = [0, True, -0.0, np.float64(2.5), np.int64(3), np.float32(0.5)]

nice_floats = st.one_of(
    st.floats(0.0, 100.0), st.integers(0, 50).map(lambda i: i / 4), st.sampled_from(ODD_OK)
)
floats = st.one_of(nice_floats, nice_floats, nice_floats, st.sampled_from(BAD_FLOATS))
nice_ints = st.one_of(st.integers(0, 5000), st.sampled_from([0, 1, True, np.int64(64)]))
ints = st.one_of(nice_ints, nice_ints, nice_ints, st.sampled_from(BAD_INTS))
tools = st.sampled_from(
    ["a", "b", "c", None, "y" * 200 + "1", "y" * 200 + "2", "\ud800x", "é", 5, b"a"]
)

good_tools = st.sampled_from(["a", "b", "c", None, "y" * 200 + "1", "y" * 200 + "2", "é"])
#: Tenants of tool names: "" (shared) and two others, mostly; then what must be refused.
good_tenants = st.sampled_from(["", "t1", "t2", "é" * 512])
tenants = st.one_of(
    good_tenants, good_tenants, st.sampled_from([None, 5, b"t1", "\ud800", "x" * 1025, "é" * 513])
)


def make_policy_ops(floats: Any, ints: Any, tools: Any) -> Any:
    return st.one_of(
        st.tuples(st.just("observe_tool"), tools, floats),
        st.tuples(st.just("observe_tool"), tools, floats, tenants),
        st.tuples(st.just("observe_program"), st.one_of(st.integers(1, 60), ints)),
        st.tuples(st.just("observe_queueing_delay"), floats),
        st.tuples(st.just("observe_prefill"), ints, floats),
        st.tuples(st.just("observe_prefill"), ints, floats, ints),
        st.tuples(st.just("miss_cost_s"), ints, ints),
        st.tuples(st.just("tool_count"), tools),
        st.tuples(st.just("tool_count"), tools, tenants),
        st.tuples(
            st.just("decide"),
            st.fixed_dictionaries(
                {},
                optional={
                    "tool": tools,
                    "request_blocks": ints,
                    "mean_active_blocks": floats,
                    "cache_miss_cost_s": st.one_of(st.none(), floats),
                    "prefix_tokens": ints,
                    "now": floats,
                    "offloaded_tokens": ints,
                    "tenant": tenants,
                },
            ),
        ),
    )


#: Decisions that usually have something to gain, so the CDF rules are reached.
useful_decide = st.tuples(
    st.just("decide"),
    st.fixed_dictionaries(
        {
            "tool": st.sampled_from(["a", "b", None]),
            "request_blocks": st.integers(0, 50),
            "mean_active_blocks": st.floats(1.0, 100.0),
            "cache_miss_cost_s": st.one_of(st.none(), st.floats(0.0, 50.0)),
            "prefix_tokens": st.integers(0, 20_000),
        },
        optional={"tenant": good_tenants},
    ),
)

# Mostly valid operations (so the state evolves), some with bad arguments anywhere.
policy_ops = st.one_of(
    useful_decide,
    st.tuples(st.just("observe_tool"), st.sampled_from(["a", "b"]), st.floats(0.0, 30.0)),
    st.tuples(
        st.just("observe_tool"), st.sampled_from(["a", "b"]), st.floats(0.0, 30.0), good_tenants
    ),
    make_policy_ops(nice_floats, nice_ints, good_tools),
    make_policy_ops(nice_floats, nice_ints, good_tools),
    make_policy_ops(floats, ints, tools),
)


@st.composite
def configs(draw: Any) -> PolicyConfig:
    window = draw(st.integers(1, 8))
    prefill_window = draw(st.integers(3, 8))
    return PolicyConfig(
        window=window,
        max_tools=draw(st.integers(1, 3)),
        min_tool_samples=draw(st.integers(0, window)),
        min_total_samples=draw(st.one_of(st.integers(0, window), st.integers(0, 10))),
        prior_mean_s=draw(st.floats(0.1, 50.0)),
        max_ttl_s=draw(st.one_of(st.floats(0.0, 100.0), st.just(0.0))),
        eta_window_programs=draw(st.integers(1, 6)),
        eta_min_programs=draw(st.integers(0, 4)),
        ooo_window=draw(st.integers(1, 4)),
        prefill_window=prefill_window,
        min_prefill_samples=draw(st.integers(3, prefill_window)),
        prefill_base_s=draw(st.floats(0.0, 1.0)),
        prefill_s_per_token=draw(st.floats(0.0, 1e-3)),
        prefill_s_per_token2=draw(st.floats(0.0, 1e-7)),
        kv_bytes_per_token=draw(st.integers(0, 1 << 20)),
        offload_bandwidth_bytes_per_s=draw(st.one_of(st.none(), st.floats(1e3, 1e10))),
        scale_cost_by_memory=draw(st.booleans()),
        prior_mean_from_history=draw(st.booleans()),
        cold_start_eta=draw(st.one_of(st.none(), st.floats(-1.0, 1.0))),
        clip_eta=draw(st.booleans()),
    )


def apply(obj: Any, op: tuple) -> tuple[str, Any]:
    name, *args = op
    if name == "decide":
        return outcome(lambda: obj.decide(**args[0]))
    return outcome(lambda: getattr(obj, name)(*args))


def policy_view(p: Any) -> tuple:
    return (
        p.eta,
        p.out_of_order_cost_s,
        [p.tool_count(t, who) for t in ("a", "b", "c", None) for who in ("", "t1", "t2")],
        [p.miss_cost_s(n) for n in (0, 1, 1000, 123_456)],
    )


@given(configs(), st.lists(policy_ops, max_size=60))
def test_policy_sequences_agree(backends, cfg, ops) -> None:
    ref, nat = (b.TTLPolicy(cfg) for b in backends)
    for i, op in enumerate(ops):
        assert_same(apply(ref, op), apply(nat, op), f"op {i} {op!r}")
    assert_same(policy_view(ref), policy_view(nat), "final state")


history_ops = st.one_of(
    st.tuples(st.just("observe"), tools, floats),
    st.tuples(st.just("observe"), tools, nice_floats),
    st.tuples(st.just("observe"), good_tools, nice_floats, good_tenants),
    st.tuples(st.just("observe"), tools, floats, tenants),
    st.tuples(st.just("count"), tools),
    st.tuples(st.just("count"), tools, tenants),
    st.tuples(st.just("cdf"), tools, floats),
    st.tuples(st.just("cdf"), tools, floats, tenants),
    st.tuples(st.just("quantile"), tools, st.one_of(st.floats(0.0, 1.0), floats)),
    st.tuples(st.just("quantile"), tools, st.one_of(st.floats(0.0, 1.0), floats), tenants),
    st.tuples(st.just("mean"), tools),
    st.tuples(st.just("mean"), tools, tenants),
    st.tuples(st.just("samples"), tools),
    st.tuples(st.just("samples"), tools, tenants),
    st.tuples(st.just("tools")),
    st.tuples(st.just("tools"), tenants),
    st.tuples(st.just("num_tools")),
    st.tuples(st.just("total_count")),
)


@given(st.integers(1, 6), st.integers(1, 4), st.lists(history_ops, max_size=60))
def test_history_sequences_agree(backends, window, max_tools, ops) -> None:
    ref, nat = (b.ToolHistory(window, max_tools) for b in backends)
    for i, op in enumerate(ops):
        assert_same(apply(ref, op), apply(nat, op), f"op {i} {op!r}")
    for who in ("", "t1", "t2"):
        assert_same(apply(ref, ("tools", who)), apply(nat, ("tools", who)), who)


estimator_ops = st.one_of(
    st.tuples(st.just("eta"), st.one_of(st.integers(1, 80), st.sampled_from(BAD_INTS))),
    st.tuples(st.just("ooo"), floats),
    st.tuples(st.just("prefill"), ints, floats),
    st.tuples(st.just("prefill"), st.integers(0, 20_000), st.floats(0.0, 10.0)),
    st.tuples(
        st.just("prefill"),
        st.integers(0, 20_000),
        st.floats(0.0, 10.0),
        st.integers(0, 200_000),
    ),
    st.tuples(st.just("prefill_s"), ints),
    st.tuples(st.just("reload_s"), ints),
    st.tuples(st.just("miss_cost_s"), ints, ints),
)


def run_estimators(b: Any, args: tuple, ops: list) -> list:
    eta = b.EtaEstimator(args[0], args[1])
    ooo = b.OutOfOrderCost(args[2])
    miss = b.CacheMissModel(*args[3:])
    out = []
    for name, *a in ops:
        call = {
            "eta": lambda a=a: (eta.observe(*a), eta.eta, eta.count()),
            "ooo": lambda a=a: (ooo.observe(*a), ooo.mean_s, ooo.count()),
            "prefill": lambda a=a: (miss.observe_prefill(*a), miss.fitted, miss.coefficients),
            "prefill_s": lambda a=a: miss.prefill_s(*a),
            "reload_s": lambda a=a: miss.reload_s(*a),
            "miss_cost_s": lambda a=a: miss.miss_cost_s(*a),
        }[name]
        out.append(outcome(call))
    return out


@given(
    st.tuples(
        st.integers(1, 6),
        st.integers(0, 4),
        st.integers(1, 4),
        st.floats(0.0, 1.0),
        st.floats(0.0, 1e-3),
        st.floats(0.0, 1e-7),
        st.integers(0, 1 << 20),
        st.one_of(st.none(), st.floats(1e3, 1e10)),
        st.integers(3, 8),
        st.integers(3, 5),
        st.one_of(st.none(), st.integers(1, 5_000)),
    ),
    st.lists(estimator_ops, max_size=60),
)
def test_estimator_sequences_agree(backends, args, ops) -> None:
    ref, nat = (run_estimators(b, args, ops) for b in backends)
    for i, (r, n) in enumerate(zip(ref, nat, strict=False)):
        assert_same(r, n, f"op {i} {ops[i]!r}")


solver_values = st.one_of(st.floats(0.0, 1e3), st.sampled_from(BAD_FLOATS + ODD_OK))


@given(
    st.one_of(
        st.lists(st.one_of(st.floats(0.0, 50.0), st.integers(0, 20).map(float)), max_size=40),
        st.lists(solver_values, max_size=8),
        st.sampled_from([5, None, "abc", b"ab"]),
    ),
    solver_values,
    solver_values,
    solver_values,
)
def test_solver_agrees_on_any_input(backends, samples, b, c, m) -> None:
    ref, nat = (outcome(partial(be.solve_ttl, samples, b, c, m)) for be in backends)
    assert_same(ref, nat, f"{samples!r} {b!r} {c!r} {m!r}")


def test_sample_sessions_replay_identically(backends) -> None:
    """The shipped agent sessions, replayed request by request: every observation and every
    decision (at several memory shares and context sizes) agrees across backends."""
    from ttlpolicy.traces import read_trace, sample_dir

    cfg = PolicyConfig(window=64, min_tool_samples=4, min_total_samples=16)
    ref, nat = (b.TTLPolicy(cfg) for b in backends)
    turns: dict[str, int] = {}
    prev_stop: dict[str, str | None] = {}
    sources: set[str] = set()
    for rec in read_trace(str(sample_dir())):
        returned_from_tool = prev_stop.get(rec.session_id) == "tool_use"
        for p in (ref, nat):
            if returned_from_tool:  # a few tool names per session, to exercise the windows
                p.observe_tool(f"{rec.session_id}-{rec.index % 3}", rec.think_time_s)
            p.observe_prefill(rec.input_tokens, 1e-3 + 2e-5 * rec.input_tokens)
        turns[rec.session_id] = turns.get(rec.session_id, 0) + 1
        prev_stop[rec.session_id] = rec.stop
        if rec.stop != "tool_use":
            for p in (ref, nat):
                p.observe_program(turns[rec.session_id])
                p.observe_queueing_delay(0.01 * (rec.index % 7))
            continue
        for share in (0.001, 0.05, 0.3):
            kw = dict(
                tool=f"{rec.session_id}-{(rec.index + 1) % 3}",
                request_blocks=max(1, rec.input_tokens // 16),
                mean_active_blocks=1e4 / share,
                prefix_tokens=rec.input_tokens,
                now=rec.arrival_s,
            )
            expected = ref.decide(**kw)
            assert_same(plain(expected), plain(nat.decide(**kw)), f"{rec.session_id} {kw}")
            sources.add(expected.source)
    assert {"tool_cdf", "global_cdf", "exponential_prior"} <= sources
    assert_same(policy_view(ref), policy_view(nat), "final state")
