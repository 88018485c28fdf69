"""Differential test: random operation sequences give identical results on the Rust core
and the Python reference — return values, errors (by type) and views after every step."""

from __future__ import annotations

from functools import partial

from hypothesis import given
from hypothesis import strategies as st

from parity import assert_same, outcome
from parity import scheduler_snapshot as snapshot
from ttlpolicy import PolicyConfig

PROGRAMS = ["A", "B", "C", "D"]
REQUESTS = [f"r{i}" for i in range(12)]  # reused: errors for duplicates and unknowns too
TOOLS = [None, "bash", "grep", "é" * 200]

ops = st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([0.0, 0.25, 2.0, 30.0, -1.0])),
    st.tuples(
        st.just("arrive"),
        st.sampled_from(REQUESTS),
        st.sampled_from(PROGRAMS),
        st.integers(-1, 120),
    ),
    st.tuples(
        st.just("arrive_many"),
        st.lists(st.sampled_from(REQUESTS), max_size=3),
        st.lists(st.sampled_from(PROGRAMS), min_size=3, max_size=3),
        st.integers(0, 60),
    ),
    st.tuples(st.just("pop"), st.integers(0, 3)),
    st.tuples(st.just("preempt"), st.sampled_from(REQUESTS)),
    st.tuples(st.just("take"), st.sampled_from(REQUESTS)),
    st.tuples(
        st.just("finish"),
        st.sampled_from(REQUESTS),
        st.integers(0, 60),
        st.sampled_from(TOOLS),
        st.booleans(),
        st.sampled_from([None, 0.0, 3.0, 100.0]),
        st.integers(0, 5000),
    ),
    st.tuples(st.just("expire")),
    st.tuples(st.just("reclaim"), st.integers(0, 80)),
    st.tuples(st.just("reclaim_for"), st.integers(0, 80), st.sampled_from(PROGRAMS)),
    st.tuples(st.just("end"), st.sampled_from(PROGRAMS)),
    st.tuples(st.just("abort"), st.sampled_from(REQUESTS)),
    st.tuples(st.just("delay"), st.sampled_from([0.0, 1.5, -1.0])),
    # a whole turn under a fresh id: arrive, run all that waits, finish — builds up pins,
    # tool histories and η/T inputs that the single steps above rarely reach
    *[
        st.tuples(
            st.just("turn"),
            st.sampled_from(PROGRAMS),
            st.integers(0, 40),
            st.sampled_from(TOOLS),
            st.sampled_from([None, 2.0, 100.0, 1000.0]),
            st.sampled_from([False, False, False, True]),
        )
    ]
    * 3,
)


def apply(s, now: float, op: tuple, step: int):
    kind = op[0]
    if kind == "turn":
        _, pid, blocks, tool, miss, last = op
        rid = f"turn{step}"
        consumed = s.arrive(rid, pid, now, blocks)
        ran = s.pop_many(100, now)
        fin = s.finish(rid, now, blocks, tool=tool, last_turn=last, cache_miss_cost_s=miss)
        return (consumed, ran, fin)
    if kind == "arrive":
        return s.arrive(op[1], op[2], now, op[3])
    if kind == "arrive_many":
        rids = op[1]
        return s.arrive_many(rids, op[2][: len(rids)], now, [op[3]] * len(rids))
    if kind == "pop":
        return s.pop(now) if op[1] == 1 else s.pop_many(op[1], now)
    if kind == "preempt":
        return s.preempt(op[1], now)
    if kind == "take":
        return s.take(op[1], now)
    if kind == "finish":
        _, rid, blocks, tool, last, miss, prefix = op
        return s.finish(rid, now, blocks, tool=tool, last_turn=last, cache_miss_cost_s=miss,
                        prefix_tokens=prefix)  # fmt: skip
    if kind == "expire":
        return s.expire(now)
    if kind == "reclaim":
        return s.reclaim(op[1], now)
    if kind == "reclaim_for":
        return s.reclaim(op[1], now, for_program=op[2])
    if kind == "end":
        return s.end_program(op[1])
    if kind == "abort":
        return s.abort(op[1])
    if kind == "delay":
        return s.record_queueing_delay(op[1])
    raise AssertionError(kind)


def views(s, policy):
    return (*snapshot(s), policy.eta, policy.out_of_order_cost_s, policy.tool_count("bash"))


# `backends` only names the two backends (no state): sharing it across examples is fine.
@given(
    st.lists(ops, min_size=10, max_size=80),
    st.sampled_from(["default", "published"]),
    st.sampled_from(["program", "attained"]),
)
def test_backends_agree_on_any_sequence(backends, seq, model, order):
    small = {"min_tool_samples": 2, "min_total_samples": 3, "eta_min_programs": 2,
             "serve_order": order}  # fmt: skip
    config = PolicyConfig(**small) if model == "default" else PolicyConfig.published(**small)
    states = []
    for b in backends:
        policy = b.TTLPolicy(config)
        states.append((b.ProgramScheduler(policy, 200, 80), policy))
    now = 0.0
    for step, op in enumerate(seq):
        if op[0] == "tick":
            now += op[1]  # -1.0: time goes back, every timed call must fail alike
            continue
        results = [outcome(partial(apply, s, now, op, step)) for s, _ in states]
        assert_same(results[0], results[1], f"{op}")
        v = [views(s, p) for s, p in states]
        assert_same(v[0], v[1], f"views after {op}")
