"""AdmissionControl: the Rust core and the Python reference agree on any sequence of calls
(results, errors by type, views); and the no-starvation invariant of the module doc holds
when an engine drives it: programs start in arrival order, the oldest program waiting for
admission is admitted as soon as no program is, and every program finishes."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REFERENCE, both_backends
from parity import close as same
from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.reference.admission import MAX_TURNS_AHEAD

PROGRAMS = ["A", "B", "C", "D", "E"]
#: programs of three tenants (two namespaced, one shared), for the tenant shares
TENANT_A, TENANT_B = tenant_key("a"), tenant_key("b")
assert TENANT_A is not None and TENANT_B is not None
TENANT_PROGRAMS = [program_key(TENANT_A, "A"), program_key(TENANT_A, "B"),
                   program_key(TENANT_B, "A"), program_key(TENANT_B, "C"), "E"]  # fmt: skip
WEIGHTS = [None, {TENANT_A: 3}, {TENANT_A: 1, TENANT_B: 2}]
TOOLS = [None, "bash", "grep", "é" * 200]
CONFIG = PolicyConfig(
    min_tool_samples=2,
    min_total_samples=3,
    prior_mean_s=4.0,
    max_ttl_s=50.0,
    expected_working_set=False,
    working_set_horizon_scale=1.0,
)
#: the working-set rules (``PolicyConfig.expected_working_set``, ``working_set_horizon_scale``):
#: the median rule, the expected working set, either with a horizon scaled, and the defaults
RULES = [
    CONFIG,
    PolicyConfig(**{**CONFIG.model_dump(), "expected_working_set": True}),
    PolicyConfig(**{**CONFIG.model_dump(), "working_set_horizon_scale": 2.5}),
    PolicyConfig(
        **{**CONFIG.model_dump(), "expected_working_set": True, "working_set_horizon_scale": 0.4}
    ),
    PolicyConfig(
        **{
            **CONFIG.model_dump(),
            "expected_working_set": PolicyConfig().expected_working_set,
            "working_set_horizon_scale": PolicyConfig().working_set_horizon_scale,
        }
    ),
]


def ops_over(programs: list[str]) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.5, 3.0, 40.0, -1.0])),
        st.tuples(st.just("arrive"), st.sampled_from(programs), st.integers(-1, 70)),
        st.tuples(
            st.just("finish"),
            st.sampled_from(programs),
            st.integers(0, 70),
            st.sampled_from(TOOLS),
            st.sampled_from([0.0, 1.0, 30.0, -1.0]),
            st.sampled_from([False, False, True]),
        ),
        st.tuples(st.just("may_run"), st.sampled_from(programs)),
        st.tuples(st.just("admit"), st.sampled_from(programs)),
        st.tuples(st.just("end"), st.sampled_from(programs)),
        st.tuples(st.just("order"), st.lists(st.sampled_from([*programs, "Z"]), max_size=6)),
        st.tuples(
            st.just("gap"),
            st.sampled_from(TOOLS),
            st.sampled_from([0.5, 2.0, 9.0, 60.0]),
            st.sampled_from(["", "", TENANT_A, TENANT_B]),  # (whose window it feeds)
        ),
    )


ops = ops_over(PROGRAMS)


def apply(ac, policy, now, op):
    kind = op[0]
    if kind == "arrive":
        return ac.arrive(op[1], now, op[2])
    if kind == "finish":
        _, pid, blocks, tool, rebuild, last = op
        return ac.finish(pid, now, blocks, tool=tool, rebuild_s=rebuild, last_turn=last)
    if kind == "may_run":
        return ac.may_run(op[1], now)
    if kind == "end":
        return ac.end(op[1])
    if kind == "admit":
        return ac.admit(op[1], now)
    if kind == "order":
        return tuple(ac.eviction_order(op[1], now))
    if kind == "gap":
        return policy.observe_tool(op[1], op[2], op[3])
    raise AssertionError(kind)


def outcome(ac, policy, now, op):
    try:
        return ("ok", apply(ac, policy, now, op))
    except (KeyError, ValueError, TypeError) as e:
        return ("error", type(e).__name__)


def views(ac, latest, programs=PROGRAMS):
    """Every view at ``latest``, the latest time seen (no view moves the clock)."""
    per_program = tuple((ac.knows(p), ac.admitted(p), ac.next_use_s(p, latest)) for p in programs)
    return (ac.admitted_count, ac.waiting_count, ac.program_count, per_program,
            ac.working_set_blocks(latest), ac.next_shrink_s(latest),
            ac.dropped_idle_programs)  # fmt: skip


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(ops, min_size=5, max_size=80), st.sampled_from([0, 2, 1 << 16]), st.sampled_from(RULES)
)
def test_backends_agree_on_any_sequence(backends, seq, max_idle, config):
    run_both(backends, seq, config, max_idle=max_idle)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(ops_over(TENANT_PROGRAMS), min_size=5, max_size=80),
    st.sampled_from(RULES),
    st.sampled_from(WEIGHTS),
)
def test_backends_agree_with_tenant_shares(backends, seq, config, weights):
    run_both(backends, seq, config, weights=weights, programs=TENANT_PROGRAMS)


#: programs an engine inferred (``tenants.is_inferred``: plain, and within a tenant's
#: namespace) beside a client's, under the quantile's default, lowest, middle and "off"
INFERRED_PROGRAMS = ["A", "\x00linked:1", "\x00linked:2", program_key(TENANT_A, "\x00linked:3"),
                     program_key(TENANT_A, "linked:3")]  # fmt: skip
INFERRED_RULES = [
    PolicyConfig(**{**rule.model_dump(), "inferred_away_quantile": q})
    for rule in (CONFIG, RULES[1])
    for q in (PolicyConfig().inferred_away_quantile, 0.0, 0.5, 1.0)
]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(ops_over(INFERRED_PROGRAMS), min_size=5, max_size=80), st.sampled_from(INFERRED_RULES)
)
def test_backends_agree_on_inferred_programs(backends, seq, config):
    run_both(backends, seq, config, programs=INFERRED_PROGRAMS)


@pytest.mark.parametrize("config", INFERRED_RULES)
@pytest.mark.parametrize("gaps", [(), (9.0,), (0.5, 2.0, 9.0, 60.0, 60.0, 2.0)])
def test_backends_agree_on_inferred_programs_away(backends, config, gaps):
    """Each of ``INFERRED_PROGRAMS`` away on one tool, the tool's gaps ``gaps``: every view
    the same at each instant (the quantile's edges, the prior's, past ``max_ttl_s``)."""
    # (each tenant's programs read its own window of the tool)
    seq: list[tuple] = [("gap", "bash", d, who) for who in ("", TENANT_A) for d in gaps]
    for i, pid in enumerate(INFERRED_PROGRAMS):
        seq += [("arrive", pid, 10 + i), ("may_run", pid), ("tick", 0.5)]
        seq += [("finish", pid, 20 + i, "bash", 30.0, False)]
    seq += [("arrive", "Z", 50), ("may_run", "Z")]
    for step in (0.25, 0.5, 1.0, 1.25, 3.0, 5.0, 4.0, 40.0):
        seq += [("tick", step), ("may_run", "Z"), ("order", INFERRED_PROGRAMS)]
    run_both(backends, seq, config, programs=[*INFERRED_PROGRAMS, "Z"])


def run_both(backends, seq, config, max_idle=1 << 16, weights=None, programs=PROGRAMS):
    """Runs ``seq`` on both backends: every result and every view the same."""
    states = []
    for b in backends:
        policy = b.TTLPolicy(config)
        states.append((b.AdmissionControl(policy, 100, max_idle, tenant_weights=weights), policy))
    now = latest = 0.0
    for op in seq:
        if op[0] == "tick":
            now += op[1]  # -1.0: time goes back, every timed call must fail alike
            latest = max(latest, now)
            continue
        results = [outcome(ac, p, now, op) for ac, p in states]
        assert same(results[0], results[1]), (op, results)
        v = [views(ac, latest, programs) for ac, _ in states]
        assert same(v[0], v[1]), (op, v)


# -- the invariant, with a toy engine ---------------------------------------------------------

program = st.tuples(
    st.floats(0.0, 50.0),  # arrival
    st.lists(  # turns: (blocks, tool, gap after it)
        st.tuples(st.integers(1, 100), st.sampled_from(TOOLS), st.floats(0.0, 30.0)),
        min_size=1,
        max_size=6,
    ),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(program, min_size=1, max_size=8),
    st.sampled_from(both_backends()),
    st.sampled_from(RULES),
)
def test_no_starvation_and_fcfs_admission(programs, backend, config):
    """An engine with room for 100 blocks runs one request per second of whatever may run,
    asking the head of its FCFS queue as the module doc prescribes."""
    impl = backend.values[0] or REFERENCE
    policy = impl.TTLPolicy(config)
    ac = impl.AdmissionControl(policy, 100)
    names = [f"p{i}" for i in range(len(programs))]
    order = sorted(range(len(programs)), key=lambda i: (programs[i][0], names[i]))
    next_turn = [0] * len(programs)
    ready_at = [programs[i][0] for i in range(len(programs))]
    known: set[int] = set()
    done: set[int] = set()
    admitted_order: list[int] = []
    now = 0.0
    # A bound on the time this can take when nothing starves: every gap and turn serially.
    horizon = 60.0 + sum(len(t) * 31.0 for _, t in programs)
    while len(done) < len(programs):
        assert now <= horizon, "a program starved"
        # requests issued (a program's first turn at its arrival, the next after its gap)
        for i in order:
            if i not in done and next_turn[i] >= 0 and ready_at[i] <= now:
                ac.arrive(names[i], now, programs[i][1][next_turn[i]][0])
                known.add(i)
                next_turn[i] = -next_turn[i] - 1  # waiting: encoded negative
        waiting = [i for i in order if i in known and i not in done and next_turn[i] < 0]
        if ac.admitted_count == 0 and waiting:
            # nobody admitted: the oldest waiting program must be admitted now
            assert ac.may_run(names[waiting[0]], now)
        running = []
        for i in waiting:  # FCFS queue: stop at the first that may not run
            if not ac.admitted(names[i]):
                if not ac.may_run(names[i], now):
                    break
                admitted_order.append(i)
            running.append(i)
        for i in running:  # each runs for one second
            turn = -next_turn[i] - 1
            blocks, tool, gap = programs[i][1][turn]
            last = turn == len(programs[i][1]) - 1
            ac.finish(names[i], now + 1.0, blocks, tool=tool, rebuild_s=2.0, last_turn=last)
            if last:
                done.add(i)
            else:
                policy.observe_tool(tool, gap)
                next_turn[i] = turn + 1
                ready_at[i] = now + 1.0 + gap
        now += 1.0
    assert admitted_order == sorted(admitted_order, key=lambda i: (programs[i][0], names[i]))
    assert ac.program_count == 0 and ac.admitted_count == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 100), min_size=1, max_size=3),  # members' footprints
    st.integers(1, 100),  # the head's
    st.lists(  # turns: (which member, its tool, time away before it is back: 0 = in flight)
        st.tuples(st.integers(0, 2), st.sampled_from(TOOLS), st.sampled_from([0.0, 0.0, 0.5])),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(RULES),
)
def test_programs_kept_in_flight_hold_the_head_back_a_bounded_while(
    members, head_blocks, pattern, config
):
    """Members that never end, each taking turns (back to back, or after a short gap),
    hold the head back at most while one of them runs MAX_TURNS_AHEAD turns, and a lone
    member in flight holds only a head that does not fit beside it; both backends answer
    alike at every step."""
    states = []
    for b in both_backends():
        impl = b.values[0] or REFERENCE
        policy = impl.TTLPolicy(config)
        states.append((impl.AdmissionControl(policy, 100), policy))
    names = [f"m{i}" for i in range(len(members))]
    first = []
    for ac, _ in states:
        for name, blocks in zip(names, members, strict=True):
            ac.arrive(name, 0.0, blocks)  # a cohort: admitted together
            assert ac.may_run(name, 0.0)
        ac.arrive("head", 1.0, head_blocks)
        first.append(ac.may_run("head", 1.0))  # a refusal starts its wait
    assert first[0] == first[1]
    if first[0]:
        return
    turns = [0] * len(members)
    now = 1.0
    for step in range(MAX_TURNS_AHEAD * len(members)):
        who, tool, away_s = pattern[step % len(pattern)]
        who %= len(members)
        answers = []
        for ac, policy in states:
            ac.finish(names[who], now + 1.0, members[who], tool=tool, rebuild_s=2.0)
            policy.observe_tool(tool, 1.0 + away_s)
            ac.arrive(names[who], now + 1.0 + away_s, members[who])
            answers.append(ac.may_run("head", now + 1.0 + away_s))
        assert answers[0] == answers[1], step
        turns[who] += 1
        now += 1.0 + away_s
        if answers[0]:
            break
        # a lone member, live again, holds only a head whose own footprint does not fit
        assert len(members) > 1 or members[0] + head_blocks > 100
        assert max(turns) < MAX_TURNS_AHEAD  # no member runs further ahead of it
    else:
        raise AssertionError("the head was never admitted")


# -- when to ask again ------------------------------------------------------------------------


DURATIONS_S = [0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 40.0]
away = st.tuples(  # an admitted program gone on a tool: blocks, tool, rebuild_s, when it left
    st.integers(1, 60),
    st.sampled_from(TOOLS),
    st.sampled_from([0.5, 2.0, 6.0, 20.0]),
    st.sampled_from([1.0, 1.3, 4.0]),
)


def gone_on_tools(impl, durations, programs, total_blocks, config=CONFIG):
    """A controller whose programs arrived one at a time (no cohort), were asked to run, and
    left on their tools; the policy (``config``) has recorded ``durations``."""
    policy = impl.TTLPolicy(config)
    for tool, d in durations:
        policy.observe_tool(tool, d)
    ac = impl.AdmissionControl(policy, total_blocks)
    names = PROGRAMS[: len(programs)]
    for i, (name, (blocks, *_)) in enumerate(zip(names, programs, strict=True)):
        ac.arrive(name, i * 1e-3, blocks)
        ac.may_run(name, i * 1e-3)
    for name, (blocks, tool, rebuild_s, left_s) in sorted(
        zip(names, programs, strict=True), key=lambda x: x[1][3]
    ):
        ac.finish(name, left_s, blocks, tool=tool, rebuild_s=rebuild_s)
    return ac, names


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(TOOLS[1:3]), st.sampled_from(DURATIONS_S)), max_size=12),
    st.lists(away, min_size=1, max_size=3),
    st.integers(1, 100),
    st.sampled_from(both_backends()),
    st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=5),
    st.sampled_from(RULES),
)
def test_a_refused_program_stays_refused_until_the_working_set_may_shrink(
    durations, programs, newcomer_blocks, backend, at, config
):
    """With no event in between, nobody ``may_run`` refuses at ``now`` is admitted before
    ``next_shrink_s(now)`` — the promise that lets an engine stepping by events (the
    simulator) skip asking at every step."""
    impl = backend.values[0] or REFERENCE
    ac, names = gone_on_tools(impl, durations, programs, 100, config)
    now = 5.0
    ac.arrive("new", now, newcomer_blocks)
    refused = [p for p in [*names, "new"] if not ac.may_run(p, now)]
    shrinks_at_s = ac.next_shrink_s(now)
    assert shrinks_at_s > now
    span_s = shrinks_at_s - now if math.isfinite(shrinks_at_s) else 1e6
    for fraction in sorted(at):
        t = now + fraction * span_s
        if t >= shrinks_at_s:
            continue
        for p in refused:
            assert not ac.may_run(p, t), (p, t, shrinks_at_s)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(TOOLS[1:3]), st.sampled_from(DURATIONS_S)), max_size=80),
    st.lists(away, min_size=1, max_size=4),
    st.sampled_from([4.0, 4.5, 9.0, 30.0, 60.0]),
    st.sampled_from(RULES),
)
def test_backends_agree_on_when_the_working_set_shrinks(durations, programs, now, config):
    """The Rust core skips runs of recorded durations that cannot end a program's stay in
    the working set; the reference scans them one by one: the same instant either way (and
    the same working set, whichever rule counts it)."""
    answers = []
    for b in both_backends():
        ac, _ = gone_on_tools(b.values[0] or REFERENCE, durations, programs, 1000, config)
        assert ac.admitted_count == len(programs)  # 1000 blocks: all fit
        answers.append((ac.next_shrink_s(now), ac.working_set_blocks(now)))
    assert answers[0] == answers[1]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(TOOLS[1:3]), st.sampled_from(DURATIONS_S)), max_size=12),
    st.lists(away, min_size=1, max_size=5),
    st.sampled_from(both_backends()),
    st.lists(st.floats(0.0, 80.0), min_size=1, max_size=8),
    st.booleans(),
)
def test_the_eviction_order_holds_until_it_is_said_to_change(
    durations, programs, backend, offsets_s, live_one
):
    """With no event in between, ``eviction_order`` at any instant before
    ``next_order_change_s(ids, now, until_s)`` is its order at ``now``, and differs at that
    instant — the promise that lets the simulator allocate a run of steps' blocks at once."""
    ac, names = gone_on_tools(backend.values[0] or REFERENCE, durations, programs, 1000)
    now, until_s = 5.0, 85.0
    if live_one:
        ac.arrive(names[0], now, 1)  # back: next use 0 from now on
    ids = [*names, "gone"]  # "gone": unknown, first of all
    change_s = ac.next_order_change_s(ids, now, until_s)
    assert change_s > now
    assert change_s == math.inf or change_s <= until_s
    before = ac.eviction_order(ids, now)
    for t in sorted(now + x for x in offsets_s):
        if t >= change_s:
            break
        assert ac.eviction_order(ids, t) == before, (t, change_s)
    if change_s < math.inf:
        assert ac.eviction_order(ids, change_s) != before


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(TOOLS[1:3]), st.sampled_from(DURATIONS_S)), max_size=80),
    st.lists(away, min_size=1, max_size=5),
    st.sampled_from([4.0, 4.5, 9.0, 30.0, 60.0]),
    st.sampled_from([0.5, 10.0, 100.0]),
)
def test_backends_agree_on_when_the_eviction_order_changes(durations, programs, now, window_s):
    """The Rust core finds each adjacent pair's first pass by bisecting the passing
    program's jumps; the reference sorts again at every jump: the same instant either way."""
    changes = []
    for b in both_backends():
        ac, names = gone_on_tools(b.values[0] or REFERENCE, durations, programs, 1000)
        changes.append(ac.next_order_change_s([*names, "gone"], now, now + window_s))
    assert changes[0] == changes[1]
