"""AdmissionControl (both backends): the rules of ``ttlpolicy.reference.admission``, each
checked on a case worked by hand, and its bad-input handling."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.reference.admission import MAX_TURNS_AHEAD

#: the median rule, which the cases worked by hand below state unless they say otherwise
MEDIAN_RULE = {"expected_working_set": False, "working_set_horizon_scale": 1.0}


def make(impl, total_blocks=100, **cfg):
    policy = impl.TTLPolicy(PolicyConfig(**{**MEDIAN_RULE, **cfg}))
    return impl.AdmissionControl(policy, total_blocks), policy


def test_programs_start_in_arrival_order_while_the_working_set_fits(impl):
    ac, _ = make(impl)
    for pid, t in (("a", 0.0), ("b", 1.0), ("c", 2.0)):
        ac.arrive(pid, t, 30)
    ac.arrive("d", 3.0, 10)
    assert not ac.may_run("b", 3.0)  # a is older and not admitted yet
    assert ac.may_run("a", 3.0)
    assert ac.may_run("b", 3.0)  # 30 + 30 <= 100
    assert ac.may_run("c", 3.0)  # 60 + 30 <= 100
    # d needs 10 blocks now, but is expected to grow to the admitted mean, 30: 90 + 30 > 100
    assert not ac.may_run("d", 3.0)
    assert (ac.admitted_count, ac.waiting_count, ac.program_count) == (3, 1, 4)
    ac.finish("b", 4.0, 30, last_turn=True)  # b ends: its blocks leave the working set
    assert ac.may_run("d", 4.0)  # 60 + 30 <= 100


def test_a_new_program_is_expected_to_grow_as_the_admitted_did(impl):
    ac, _ = make(impl)
    ac.arrive("big", 0.0, 60)
    ac.arrive("other", 0.0, 10)
    ac.arrive("small", 1.0, 30)
    assert ac.may_run("big", 1.0)
    assert ac.may_run("other", 1.0)
    # mean (60 + 10) // 2 = 35: 70 + max(30, 35) > 100, though 70 + 30 fits
    assert not ac.may_run("small", 1.0)
    ac.arrive("big", 2.0, 40)  # footprints only grow: big stays at 60
    assert not ac.may_run("small", 2.0)


def test_the_oldest_waiting_program_is_admitted_when_nobody_is(impl):
    ac, _ = make(impl, total_blocks=100)
    ac.arrive("big", 0.0, 100)
    assert ac.may_run("big", 0.0)  # alone: admitted whatever its size
    ac.finish("big", 0.5, 100, tool="bash", rebuild_s=10.0)  # away, back in 6.9 s
    ac.arrive("small", 0.5, 1)
    assert not ac.may_run("small", 0.5)
    ac.end("big")
    assert ac.may_run("small", 0.5)


def test_programs_that_arrived_together_are_admitted_together(impl):
    # A cohort (same arrival) has no FCFS order, and a program-FCFS queue interleaves its
    # requests by their own arrival: a refused member could sit ahead of admitted ones and
    # block them with nothing running (the demo's closed loop at 16 programs stalled so).
    ac, _ = make(impl, total_blocks=100)
    for pid in ("a", "b", "c"):
        ac.arrive(pid, 0.0, 60)
    ac.arrive("late", 1.0, 10)
    assert ac.may_run("a", 1.0)
    assert ac.may_run("b", 1.0)  # 60 + 60 > 100, but b arrived with a
    assert ac.may_run("c", 1.0)
    assert not ac.may_run("late", 1.0)  # a later arrival still waits for room
    assert (ac.admitted_count, ac.waiting_count) == (3, 1)


def test_next_use_follows_the_tools_gap_distribution(impl):
    ac, policy = make(impl, min_tool_samples=4)
    for d in (1.0, 2.0, 4.0, 8.0, 16.0):
        policy.observe_tool("bash", d)
    ac.arrive("p", 0.0, 10)
    assert ac.next_use_s("p", 0.0) == 0.0  # a live request: used now
    ac.finish("p", 10.0, 10, tool="bash", rebuild_s=1.0)
    # median of the durations > 0 is 4 (nearest rank); > 3 s elapsed: median of {4, 8, 16} = 8
    assert ac.next_use_s("p", 10.0) == 4.0
    assert ac.next_use_s("p", 13.0) == 8.0 - 3.0
    assert ac.next_use_s("p", 30.0) == math.inf  # outlived every recorded duration
    assert ac.next_use_s("unknown", 30.0) == math.inf


def test_next_use_cold_start_and_no_tool(impl):
    ac, _ = make(impl, prior_mean_s=10.0)
    ac.arrive("p", 0.0, 10)
    ac.arrive("q", 0.0, 10)
    ac.finish("p", 1.0, 10, tool="bash")
    ac.finish("q", 1.0, 10, tool=None)
    assert ac.next_use_s("p", 1.0) == pytest.approx(10.0 * math.log(2.0))
    assert ac.next_use_s("q", 1.0) == math.inf  # the turn ended without a tool


def test_a_program_away_longer_than_max_ttl_is_not_expected_back(impl):
    # A client that died during a tool call never ends its program: on the memoryless prior
    # its next use would stay at mu·ln 2 forever and it would hold its place in the working
    # set; past max_ttl_s (no pin lasts longer) it leaves it, and the waiting head gets in.
    ac, _ = make(impl, total_blocks=100, prior_mean_s=10.0, max_ttl_s=60.0)
    ac.arrive("dead", 0.0, 70)
    assert ac.may_run("dead", 0.0)
    ac.finish("dead", 1.0, 70, tool="bash", rebuild_s=30.0)
    ac.arrive("next", 2.0, 40)
    assert not ac.may_run("next", 2.0)  # dead is expected back in 6.9 s: 70 + 40 > 100
    assert ac.next_use_s("dead", 61.0) == pytest.approx(10.0 * math.log(2.0))  # 60 s away
    assert not ac.may_run("next", 61.0)
    assert ac.next_use_s("dead", 61.5) == math.inf
    assert ac.may_run("next", 61.5)  # still admitted, but out of the working set


@pytest.mark.parametrize(
    ("rebuild_s", "shrinks_at_s"),
    [
        # p finished at 10 s on bash (durations 1, 2, 4, 8, 16 s), alone: in the working set
        # while its next use (module doc) is <= rebuild_s.  Away e s, its next use is the
        # median of the durations > e, minus e: 4 (e < 1), 4 - e (1 <= e < 2), 8 - e
        # (2 <= e < 4), 8 - e (4 <= e < 8), 16 - e (8 <= e < 16), then inf.
        (5.0, 12.0),  # at e = 2 it jumps to 6 > 5
        (7.0, 18.0),  # 6 and 4 fit; at e = 8 it jumps to 8 > 7
        (9.0, 26.0),  # every jump fits; at e = 16 it has outlived every duration
    ],
)
def test_a_refused_program_is_asked_again_when_the_working_set_shrinks(
    impl, rebuild_s, shrinks_at_s
):
    ac, policy = make(impl, min_tool_samples=4)
    for d in (1.0, 2.0, 4.0, 8.0, 16.0):
        policy.observe_tool("bash", d)
    ac.arrive("p", 0.0, 50)
    assert ac.may_run("p", 0.0)
    assert ac.next_shrink_s(0.0) == math.inf  # p's request is live: it leaves on no clock
    ac.finish("p", 10.0, 50, tool="bash", rebuild_s=rebuild_s)
    ac.arrive("next", 10.5, 60)
    assert not ac.may_run("next", 10.5)  # 50 + 60 > 100
    assert ac.next_shrink_s(10.5) == shrinks_at_s
    assert not ac.may_run("next", math.nextafter(shrinks_at_s, 0.0))
    assert ac.may_run("next", shrinks_at_s)
    # two sharers now: p's limit doubles (>= 10 s), so p counts again until it has outlived
    # every duration, 16 s away, at 26 s ("next" is live: it leaves on no clock)
    assert ac.next_shrink_s(shrinks_at_s) == (26.0 if shrinks_at_s < 26.0 else math.inf)
    ac.end("p")
    assert ac.next_shrink_s(26.0) == math.inf


def test_the_working_set_shrinks_just_past_max_ttl(impl):
    ac, _ = make(impl, prior_mean_s=10.0, max_ttl_s=60.0)
    ac.arrive("dead", 0.0, 70)
    assert ac.may_run("dead", 0.0)
    ac.finish("dead", 1.0, 70, tool="bash", rebuild_s=30.0)  # the prior: back in 6.9 s
    ac.arrive("next", 2.0, 40)
    assert not ac.may_run("next", 2.0)
    # the prior's next use never jumps; past 60 s away (strictly) dead is not expected back
    shrinks_at_s = math.nextafter(61.0, math.inf)
    assert ac.next_shrink_s(2.0) == shrinks_at_s
    assert not ac.may_run("next", 61.0)
    assert ac.may_run("next", shrinks_at_s)


def test_the_instant_the_working_set_shrinks_is_not_rounded_short(impl):
    # 0.1 + 4.0 rounds to an instant whose time since 0.1 is a hair under 4 s (the rules
    # subtract): next_shrink_s must name the first instant at which the jump has happened.
    since_s, d = 0.1, 4.0
    assert (since_s + d) - since_s < d
    ac, policy = make(impl, min_tool_samples=1)
    for x in (1.0, d, 16.0):
        policy.observe_tool("t", x)
    ac.arrive("p", 0.0, 50)
    assert ac.may_run("p", 0.0)
    ac.finish("p", since_s, 50, tool="t", rebuild_s=5.0)  # next use 4 - e, then 16 - 4 > 5
    at_s = ac.next_shrink_s(since_s)
    assert at_s - since_s >= d and math.nextafter(at_s, 0.0) - since_s < d
    assert ac.next_use_s("p", at_s) == 16.0 - (at_s - since_s)


def test_working_set_counts_programs_back_within_their_rebuild_times_sharers(impl):
    ac, policy = make(impl, min_tool_samples=1)
    for d in (2.0, 2.0, 2.0, 50.0):
        policy.observe_tool("fast", d)
        policy.observe_tool("slow", d * 100)
    for pid in ("a", "b"):
        ac.arrive(pid, 0.0, 40)
        assert ac.may_run(pid, 0.0)
    ac.finish("a", 1.0, 40, tool="fast", rebuild_s=1.5)  # back in 2 s <= 2 sharers × 1.5 s
    ac.finish("b", 1.0, 40, tool="slow", rebuild_s=1.5)  # back in 200 s: not counted
    assert ac.working_set_blocks(1.0) == 40
    ac.arrive("c", 1.0, 60)
    assert ac.may_run("c", 1.0)  # 40 + 60 fits
    ac.arrive("d", 1.5, 1)  # later than c (a program arriving with c would join c's cohort)
    assert not ac.may_run("d", 1.5)  # c is live: 40 + 60 + 1 > 100


def away_on_mix(impl, **cfg):
    """a (40 blocks) away since 1.0 on a tool whose gaps were 1, 2, 3 and 100 s, rebuilt in
    1 s; b (30 blocks) live: two sharers, a horizon of 2 s (times the scale)."""
    ac, policy = make(impl, min_tool_samples=1, **cfg)
    for d in (1.0, 2.0, 3.0, 100.0):
        policy.observe_tool("mix", d)
    ac.arrive("a", 0.0, 40)
    assert ac.may_run("a", 0.0)
    ac.arrive("b", 0.5, 30)
    assert ac.may_run("b", 0.5)
    ac.finish("a", 1.0, 40, tool="mix", rebuild_s=1.0)
    return ac


def test_the_expected_working_set_weighs_each_member_by_its_chance_to_be_back(impl):
    median = away_on_mix(impl)
    expected = away_on_mix(impl, expected_working_set=True)
    # median rule: a's median return (2 s) is within 2 s: a counts whole, beside live b
    assert median.working_set_blocks(1.0) == 40 + 30
    # expected: 2 of the 4 gaps longer than 0 s end within 2 s: half of a
    assert expected.working_set_blocks(1.0) == 40 * 2 // 4 + 30
    # 1.5 s away: 2 of the 3 gaps longer than 1.5 s end by 3.5 s: 26.7, rounded up
    assert expected.working_set_blocks(2.5) == 27 + 30
    for ac, admits in ((median, False), (expected, True)):
        ac.arrive("c", 1.0, 45)  # 45 beside 70 does not fit 100, beside 50 it does
        assert ac.may_run("c", 1.0) is admits


def test_the_expected_working_set_is_asked_again_when_it_leaves_room(impl):
    # a's share as its time away passes the gaps: 1 s: 2 of 3 back by 3 s (27 blocks, up
    # from 20); 2 s: 1 of 2 by 4 s (20); 3 s: none of 1 by 5 s (0); b counts 30 throughout
    ac = away_on_mix(impl, expected_working_set=True)
    assert [ac.working_set_blocks(t) for t in (2.0, 3.0, 4.0)] == [57, 50, 30]
    assert ac.next_shrink_s(1.0) == 4.0  # nobody waits: the first fall below 50
    ac.arrive("c", 1.0, 52)
    assert not ac.may_run("c", 1.0)  # 50 + 52 > 100
    assert ac.next_shrink_s(1.0) == 4.0  # room for c at 48 blocks: at 4 s, not 3 s
    assert not ac.may_run("c", math.nextafter(4.0, 0.0)) and ac.may_run("c", 4.0)
    ac.arrive("a", 4.5, 40)  # back: counts whole, cannot fall with no event
    assert ac.next_shrink_s(4.5) == math.inf


def test_the_horizon_scales_with_working_set_horizon_scale(impl):
    # half the horizon, 1 s: a's median return (2 s) is no longer within it; 1 gap in 4 is
    assert away_on_mix(impl, working_set_horizon_scale=0.5).working_set_blocks(1.0) == 30
    scaled = away_on_mix(impl, expected_working_set=True, working_set_horizon_scale=0.5)
    assert scaled.working_set_blocks(1.0) == 40 // 4 + 30
    with pytest.raises(ValueError, match="working_set_horizon_scale"):
        PolicyConfig(working_set_horizon_scale=0.0)


def test_eviction_order_latest_next_use_first(impl):
    ac, policy = make(impl, min_tool_samples=1)
    for d in (1.0, 10.0, 100.0):
        policy.observe_tool("t", d)
    for pid, t in (("old", 0.0), ("mid", 1.0), ("new", 2.0), ("live", 3.0)):
        ac.arrive(pid, t, 5)
    ac.finish("old", 4.0, 5, tool="t")  # next use 10 s
    ac.finish("mid", 4.0, 5, tool=None)  # not expected back
    ac.finish("new", 4.0, 5, tool=None)  # not expected back, arrived later: goes first
    order = ac.eviction_order(["live", "old", "gone", "mid", "new"], 4.0)
    assert order == ["gone", "new", "mid", "old", "live"]


def test_a_program_ends_on_its_last_turn(impl):
    ac, _ = make(impl)
    ac.arrive("p", 0.0, 10)
    assert ac.may_run("p", 0.0)
    ac.finish("p", 1.0, 10, last_turn=True)
    assert (ac.program_count, ac.admitted_count) == (0, 0)
    assert not ac.admitted("p")
    with pytest.raises(KeyError):
        ac.may_run("p", 1.0)


def test_the_eviction_order_changes_only_at_a_jump_that_reorders(impl):
    # "t" took 1, 3 and 10 s; a left at 0 s, b at 1 s.  At 1.5 s a's next use is the median
    # of {3, 10} - 1.5 = 1.5 s, b's the median of {1, 3, 10} - 0.5 = 2.5 s: b goes first.
    # Both fall together until a jump: b's at 2 s (its time away reaches 1 s: 3 - 1 = 2
    # against a's 1) keeps the order; a's at 3 s (10 - 3 = 7 against b's 1) reverses it;
    # b's at 4 s (10 - 3 = 7 against a's 6) reverses it again.
    ac, policy = make(impl, min_tool_samples=1)
    for d in (1.0, 3.0, 10.0):
        policy.observe_tool("t", d)
    ac.arrive("a", 0.0, 10)
    ac.finish("a", 0.0, 10, tool="t")
    ac.arrive("b", 0.5, 10)
    ac.finish("b", 1.0, 10, tool="t")
    assert ac.next_order_change_s(["a", "b"], 1.5, 100.0) == 3.0
    assert ac.next_order_change_s(["a", "b"], 1.5, 3.0) == 3.0  # until_s is included
    assert ac.next_order_change_s(["a", "b"], 1.5, math.nextafter(3.0, 0.0)) == math.inf
    assert ac.next_order_change_s(["b", "zz", "a"], 3.0, 100.0) == 4.0
    assert ac.next_order_change_s(["a", "zz"], 1.5, 100.0) == math.inf  # one known program
    # it moved no clock: the order at 1.5 s is still asked for, and is as said
    assert ac.eviction_order(["a", "b"], 1.5) == ["b", "a"]
    assert ac.eviction_order(["a", "b"], 3.0) == ["a", "b"]
    assert ac.eviction_order(["a", "b"], 4.0) == ["b", "a"]
    # past its last recorded duration a program is not expected back (inf, for good): a at
    # 10 s goes first; b follows at 11 s, and arrived later: it goes first; then no change
    assert ac.next_order_change_s(["a", "b"], 10.0, 1e9) == 11.0
    assert ac.next_order_change_s(["a", "b"], 11.0, 1e9) == math.inf


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda ac: ac.arrive("", 0.0, 1), ValueError),
        (lambda ac: ac.arrive(3, 0.0, 1), TypeError),
        (lambda ac: ac.arrive("x", math.nan, 1), ValueError),
        (lambda ac: ac.arrive("x", 0.0, 101), ValueError),
        (lambda ac: ac.arrive("x", 0.0, 1.5), TypeError),
        (lambda ac: ac.arrive("x", -1.0, 1), ValueError),  # time goes back
        (lambda ac: ac.finish("nobody", 5.0, 1), KeyError),
        (lambda ac: ac.finish("p", 5.0, 1, rebuild_s=-1.0), ValueError),
        (lambda ac: ac.finish("p", 5.0, 1, tool=7), TypeError),
        (lambda ac: ac.finish("p", 5.0, 1, last_turn=1), TypeError),
        (lambda ac: ac.may_run("nobody", 5.0), KeyError),
        (lambda ac: ac.end("nobody"), KeyError),
        (lambda ac: ac.eviction_order("p", 5.0), TypeError),
        (lambda ac: ac.eviction_order(["p", ""], 5.0), ValueError),
        (lambda ac: ac.next_order_change_s(["p"], 5.0, math.nan), ValueError),
        (lambda ac: ac.next_order_change_s(["p"], 5.0, math.inf), ValueError),
        (lambda ac: ac.next_order_change_s(["p"], -1.0, 9.0), ValueError),  # time goes back
        (lambda ac: ac.next_order_change_s([3], 5.0, 9.0), TypeError),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(impl, call, error):
    ac, _ = make(impl)
    ac.arrive("p", 0.0, 10)
    with pytest.raises(error):
        call(ac)
    assert (ac.program_count, ac.admitted_count, ac.next_use_s("p", 0.0)) == (1, 0, 0.0)
    assert ac.may_run("p", 0.0)


def test_finish_without_a_live_request_is_refused(impl):
    ac, _ = make(impl)
    ac.arrive("p", 0.0, 10)
    ac.finish("p", 1.0, 10, tool="bash")
    with pytest.raises(ValueError, match="live request"):
        ac.finish("p", 2.0, 10, tool="bash")


def test_tool_names_from_model_output_are_bounded(impl):
    ac, policy = make(impl, min_tool_samples=1)
    long_name = "é" * 10_000 + "\ud800"
    policy.observe_tool(long_name, 3.0)
    ac.arrive("p", 0.0, 10)
    ac.finish("p", 1.0, 10, tool=long_name)
    assert ac.next_use_s("p", 1.0) == 3.0


def test_policy_must_be_a_ttlpolicy(impl):
    with pytest.raises(TypeError, match="policy"):
        impl.AdmissionControl(object(), 10)
    with pytest.raises(ValueError, match="total_blocks"):
        impl.AdmissionControl(impl.TTLPolicy(), 0)


def test_a_program_that_ends_and_comes_back_is_a_new_arrival(impl):
    # found by the differential test: a stale queue entry of the ended program must not
    # stand for the new one
    ac, _ = make(impl)
    ac.arrive("A", 0.0, 10)
    ac.end("A")
    ac.arrive("B", 0.25, 10)
    ac.arrive("A", 0.5, 10)
    assert not ac.may_run("A", 0.5)  # B arrived first this time
    assert ac.may_run("B", 0.5) and ac.may_run("A", 0.5)


def test_engines_run_with_load_control_unless_their_config_says_otherwise():
    # the library's defaults stay off: existing configs keep their meaning
    assert not PolicyConfig().admission and not PolicyConfig().evict_by_next_use
    on = PolicyConfig(admission=True, evict_by_next_use=True)
    assert PolicyConfig.for_engine(None) == on
    assert PolicyConfig.for_engine("") == on
    assert PolicyConfig.for_engine('{"max_ttl_s": 5.0}') == PolicyConfig(
        max_ttl_s=5.0, admission=True, evict_by_next_use=True
    )
    off = PolicyConfig.for_engine('{"admission": false}')
    assert not off.admission and off.evict_by_next_use
    with pytest.raises(ValueError, match="admision"):
        PolicyConfig.for_engine('{"admision": false}')  # a misspelt switch is refused


def test_a_tenant_flooding_idle_programs_forgets_its_own(impl):
    """3 idle programs remembered: tenant b's, idle longest, stays admitted while tenant a's
    10 go idle after it (past the cap a holds more than b: its own idle longest go)."""
    a, b = tenant_key("a"), tenant_key("b")
    ac = impl.AdmissionControl(impl.TTLPolicy(PolicyConfig()), 1000, max_idle_programs=3)
    pids = [program_key(b, "p")] + [program_key(a, f"p{i}") for i in range(10)]
    for i, pid in enumerate(pids):
        ac.arrive(pid, float(i), 10)
        assert ac.may_run(pid, float(i))
        ac.finish(pid, i + 0.5, 10, tool="bash")
    assert (ac.program_count, ac.dropped_idle_programs) == (3, 8)
    assert [ac.admitted(p) for p in (pids[0], pids[1], pids[-1])] == [True, False, True]


def test_the_references_pending_queues_stay_within_the_programs_kept():
    """(White-box, the reference: the Rust core's own test is in admission.rs.) Programs
    admitted at once, then forgotten as idle, each left an entry in the pending queues, which
    are looked at only when a program waits: 50,000 of them grew the state without bound."""
    from ttlpolicy.reference.admission import AdmissionControl
    from ttlpolicy.reference.policy import TTLPolicy

    ac = AdmissionControl(TTLPolicy(PolicyConfig()), 1_000_000, max_idle_programs=100)
    for i in range(5000):
        pid = f"p{i}"
        ac.arrive(pid, float(i), 1)
        assert ac.may_run(pid, float(i))
        ac.finish(pid, float(i), 1, tool="bash")
    assert ac.program_count == 100
    assert len(ac._pending) <= 2 * 100 + 17 and len(ac._tenants[""].pending) <= 2 * 100 + 17


def test_idle_programs_beyond_the_cap_are_forgotten_oldest_first(impl):
    # Clients that vanish during a tool call never end their program: the state must not
    # grow without bound (the ProgramScheduler's max_idle_programs, the same default).
    policy = impl.TTLPolicy(PolicyConfig())
    assert impl.AdmissionControl(policy, 100).max_idle_programs == 1 << 16
    ac = impl.AdmissionControl(policy, 100, max_idle_programs=2)
    for i, pid in enumerate(("a", "b", "c")):
        ac.arrive(pid, float(i), 10)
        assert ac.may_run(pid, float(i))
    ac.finish("a", 3.0, 10, tool="bash")
    ac.finish("b", 4.0, 10, tool="bash")
    ac.arrive("a", 5.0, 10)  # a is back: no longer idle
    ac.finish("c", 6.0, 10, tool="bash")  # idle: b, c
    assert (ac.program_count, ac.dropped_idle_programs) == (3, 0)
    ac.finish("a", 7.0, 10, tool="bash")  # idle: b, c, a: b, idle longest, is forgotten
    assert (ac.program_count, ac.dropped_idle_programs) == (2, 1)
    assert not ac.admitted("b") and ac.admitted("a") and ac.admitted("c")
    assert ac.admitted_count == 2
    with pytest.raises(KeyError):
        ac.end("b")
    with pytest.raises(ValueError, match="max_idle_programs"):
        impl.AdmissionControl(policy, 100, max_idle_programs=-1)


# -- bounded wait (module doc): no program holds the head back by staying in flight ----------


def test_a_lone_program_in_flight_does_not_hold_the_head_back(impl):
    # One client keeps "big" (60 of 100 blocks) in flight back to back: with its mean rule
    # (a newcomer is expected to grow to 60) the head would wait for big's end, for ever.
    ac, _ = make(impl, prior_mean_s=10.0)
    ac.arrive("big", 0.0, 60)
    assert ac.may_run("big", 0.0)
    ac.arrive("small", 0.5, 2)
    assert ac.may_run("small", 0.5)  # 60 + 2 fits: big's 60 is not small's expected size
    ac.arrive("large", 0.6, 50)
    assert not ac.may_run("large", 0.6)  # 62 + max(50, (60 + 2) // 2) > 100
    # Away on a tool, the same program is protected as before: its idle context is kept.
    ac2, _ = make(impl, prior_mean_s=10.0)
    ac2.arrive("big", 0.0, 60)
    assert ac2.may_run("big", 0.0)
    ac2.finish("big", 1.0, 60, tool="bash", rebuild_s=10.0)  # back in 6.9 s <= 10 s
    ac2.arrive("small", 1.5, 2)
    assert not ac2.may_run("small", 1.5)  # 60 + max(2, 60) > 100
    ac2.arrive("big", 2.0, 60)  # back: in flight again, and alone
    assert ac2.may_run("small", 2.0)


def in_flight(ac, **blocks):
    """Programs that arrived together at 0 s (a cohort: admitted together), now live."""
    for pid, n in blocks.items():
        ac.arrive(pid, 0.0, n)
    assert all(ac.may_run(pid, 0.0) for pid in blocks)


def test_no_program_runs_more_than_max_turns_ahead_of_the_head(impl):
    # Two programs (30 blocks each) kept in flight back to back; "head" (50) is refused:
    # 60 + 50 > 100.  After MAX_TURNS_AHEAD turns of one of them it gets in.
    ac, _ = make(impl)
    in_flight(ac, a=30, b=30)
    ac.arrive("head", 1.0, 50)
    assert not ac.may_run("head", 1.0)
    t = 1.0
    for turn in range(1, MAX_TURNS_AHEAD + 1):
        t += 1.0
        ac.finish("a", t, 30, tool="bash", rebuild_s=1.0)
        ac.arrive("a", t, 30)
        if turn % 2:  # b's turns count on their own, not towards a's
            ac.finish("b", t, 30, tool="bash", rebuild_s=1.0)
            ac.arrive("b", t, 30)
        assert ac.may_run("head", t) == (turn == MAX_TURNS_AHEAD), turn
    # a new wait counts anew
    ac.arrive("next", t, 60)
    assert not ac.may_run("next", t)
    ac.finish("a", t + 1.0, 30, tool="bash", rebuild_s=1.0)
    ac.arrive("a", t + 1.0, 30)
    assert not ac.may_run("next", t + 1.0)


def test_admit_admits_whatever_the_working_set(impl):
    ac, _ = make(impl)
    in_flight(ac, a=60, b=60)
    ac.arrive("anon", 1.0, 90)
    assert not ac.may_run("anon", 1.0)
    ac.admit("anon", 1.0)
    assert ac.admitted("anon") and ac.may_run("anon", 1.0)
    assert ac.working_set_blocks(1.0) == 210  # it counts from now on
    ac.admit("anon", 1.0)  # again: nothing changes
    assert ac.admitted_count == 3
    with pytest.raises(KeyError, match="unknown program_id"):
        ac.admit("nobody", 1.0)
    with pytest.raises(ValueError, match="now"):
        ac.admit("anon", 0.5)  # time never goes back


def test_many_programs_gone_on_the_prior_hold_a_newcomer_less_than_max_ttl(impl):
    """Issue 44: 300 one-block programs arrive together (a cohort: all admitted), finish one
    turn holding 2 blocks on a tool and never return; nobody has returned, so they are judged
    by the prior.  Their summed horizon n · rebuild_s covers the prior's next use, so they
    fill the working set (600 of 200 blocks) and a newcomer waits.  It waited until they had
    been away max_ttl_s (300 s); now until they have outlasted what the prior stands for,
    prior_mean_s · (1 + ln window) (79.3 s), and not a step longer."""
    cfg = {"admission": True}
    ac, _ = make(impl, total_blocks=200, **cfg)
    for i in range(300):
        ac.arrive(f"p{i}", 0.0, 1)
    assert all(ac.may_run(f"p{i}", 0.0) for i in range(300))
    for i in range(300):
        ac.finish(f"p{i}", 1.0, 2, tool="bash", rebuild_s=0.05)
    ac.arrive("new", 2.0, 1)
    assert not ac.may_run("new", 2.0)
    config = PolicyConfig(**{**MEDIAN_RULE, **cfg})
    gone_s = 1.0 + config.prior_mean_s * (1.0 + math.log(config.window))
    assert gone_s < 1.0 + config.max_ttl_s - 200.0
    t = 2.0
    while not ac.may_run("new", t):
        t = ac.next_shrink_s(t)
        assert t <= math.nextafter(gone_s, math.inf)
    assert t == math.nextafter(gone_s, math.inf)


def test_the_prior_gives_up_no_later_than_max_ttl(impl):
    ac, _ = make(impl, prior_mean_s=100.0, max_ttl_s=300.0)  # 100 · (1 + ln 1024) > 300
    ac.arrive("p", 0.0, 10)
    ac.finish("p", 1.0, 10, tool="bash")
    assert ac.next_use_s("p", 301.0) == pytest.approx(100.0 * math.log(2.0))
    assert ac.next_use_s("p", 301.5) == math.inf


# -- programs an engine inferred (``tenants.is_inferred``) --------------------------------------

INFERRED = "\x00linked:1"
GAPS_1_TO_10 = tuple(float(d) for d in range(1, 11))


def away_beside(impl, program_id, gaps=GAPS_1_TO_10, **cfg):
    """``program_id`` (80 blocks) away on bash since 1.0, rebuilt in 100 s (its horizon covers
    any gap), the tool's recorded gaps ``gaps``; a newcomer of 30 blocks waits at 1.0."""
    ac, policy = make(impl, min_tool_samples=1, admission=True, **cfg)
    for d in gaps:
        policy.observe_tool("bash", d)
    ac.arrive(program_id, 0.0, 80)
    assert ac.may_run(program_id, 0.0)
    ac.finish(program_id, 1.0, 80, tool="bash", rebuild_s=100.0)
    ac.arrive("new", 1.0, 30)
    return ac


def test_an_inferred_program_away_past_the_quantile_is_not_expected_back(impl):
    # gaps 1..10 s: the 0.9 quantile (nearest rank: the 9th) is 9 s
    inferred, plain = away_beside(impl, INFERRED), away_beside(impl, "p")
    for ac, pid in ((inferred, INFERRED), (plain, "p")):
        assert ac.next_use_s(pid, 10.0) == pytest.approx(1.0)  # 9 s away: back in 1 s
    assert inferred.next_use_s(INFERRED, 10.5) == math.inf  # 9.5 s away: past 9 s
    assert plain.next_use_s("p", 10.5) == pytest.approx(0.5)  # the 10 s gap still ahead
    # it leaves the working set then: the newcomer, refused beside 80 blocks, is let in
    assert not inferred.may_run("new", 1.0)
    at = inferred.next_shrink_s(1.0)
    assert at == math.nextafter(10.0, math.inf)  # just past 9 s away
    assert not inferred.may_run("new", 10.0)
    assert inferred.may_run("new", at)
    assert plain.next_shrink_s(1.0) == 11.0  # when it reaches the last gap, 10 s


def test_a_returning_inferred_program_counts_again(impl):
    ac = away_beside(impl, INFERRED)
    ac.arrive(INFERRED, 20.0, 80)  # back after all: live, its footprint counted whole
    assert ac.next_use_s(INFERRED, 20.0) == 0.0
    assert ac.working_set_blocks(20.0) == 80
    assert not ac.may_run("new", 20.0)


def test_the_inferred_quantile_is_configured_and_1_switches_it_off(impl):
    half = away_beside(impl, INFERRED, inferred_away_quantile=0.5)  # the 5th gap: 5 s
    assert half.next_use_s(INFERRED, 6.0) < math.inf
    assert half.next_use_s(INFERRED, 6.5) == math.inf
    off = away_beside(impl, INFERRED, inferred_away_quantile=1.0)
    assert off.next_use_s(INFERRED, 10.5) == pytest.approx(0.5)  # as any program
    lowest = away_beside(impl, INFERRED, inferred_away_quantile=0.0)  # the shortest gap
    assert lowest.next_use_s(INFERRED, 2.0) < math.inf
    assert lowest.next_use_s(INFERRED, 2.5) == math.inf
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="inferred_away_quantile"):
            PolicyConfig(inferred_away_quantile=bad)


def test_an_inferred_program_on_the_prior_is_judged_by_the_priors_quantile(impl):
    # no gap recorded: the prior (mean 10 s) gives up after 10 · (1 + ln 1024) = 79.3 s,
    # an inferred program after its 0.9 quantile, 10 · ln 10 = 23.0 s
    inferred, plain = away_beside(impl, INFERRED, gaps=()), away_beside(impl, "p", gaps=())
    limit_s = 10.0 * math.log(10.0)
    assert inferred.next_use_s(INFERRED, 1.0 + limit_s - 0.01) < math.inf
    assert inferred.next_use_s(INFERRED, 1.0 + limit_s + 0.01) == math.inf
    assert plain.next_use_s("p", 1.0 + limit_s + 0.01) < math.inf
    assert inferred.next_shrink_s(1.0) < plain.next_shrink_s(1.0)


def test_only_an_engines_inferred_id_is_inferred(impl):
    from ttlpolicy.ids import program_key, tenant_key

    tenant = tenant_key("acme")
    for pid, inferred in (
        (program_key(tenant, INFERRED), True),  # within a tenant's namespace
        ("linked:1", False),  # a client's id (no control character)
        (program_key(tenant, "linked:1"), False),
        ("p\x00linked:1", False),  # not at the start of the client part
    ):
        ac = away_beside(impl, pid)
        assert (ac.next_use_s(pid, 10.5) == math.inf) is inferred, pid


def test_a_wait_that_ends_at_time_zero_is_found_at_once(impl):
    # programs away since -300 s with a 300 s limit: the instant their wait ends is just past
    # 0, where the float grid is fine (stepping one float at a time took ~10^18 steps)
    policy = impl.TTLPolicy(PolicyConfig())
    policy.observe_tool("bash", 5.0)
    ac = impl.AdmissionControl(policy, 1000)
    for p in ["p", "q"]:
        ac.arrive(p, -300.0, 10)
        ac.may_run(p, -300.0)
        ac.finish(p, -300.0, 10, tool="bash", rebuild_s=1.0)
    assert ac.next_shrink_s(-300.0) >= -300.0
    assert ac.next_order_change_s(["p", "q"], -300.0, 1e9) >= -300.0


@given(
    st.floats(-1e12, 1e12, allow_nan=False) | st.sampled_from([-300.0, -1e-300, 0.0, -0.0]),
    st.floats(0.0, 1e6, allow_nan=False) | st.sampled_from([300.0, 1e-300]),
    st.booleans(),
)
def test_the_first_instant_is_the_first_float_past_the_wait(since_s, elapsed_s, beyond):
    from ttlpolicy.reference.admission import _first_instant

    def reached(t: float) -> bool:
        return t - since_s > elapsed_s or (not beyond and t - since_s == elapsed_s)

    t = _first_instant(since_s, elapsed_s, beyond)
    start = since_s + elapsed_s
    assert reached(t) and t >= start
    before = math.nextafter(t, -math.inf)
    assert before < start or not reached(before)
