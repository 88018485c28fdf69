"""Load control's working set shared among tenants (``AdmissionControl``'s module doc,
"Tenant shares"): a tenant's oldest waiting program whose expected footprint fits its
tenant's share beside its tenant's working set is admitted, whatever other tenants hold, keep
in flight or have waiting; with one tenant nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.reference.admission import MAX_TURNS_AHEAD


def key(tenant: str) -> str:
    out = tenant_key(tenant)
    assert out is not None
    return out


A, B = key("A"), key("B")


def pid(tenant: str | None, name: str) -> str:
    return program_key(tenant, name)


def make(impl: Any, total_blocks: int, weights: dict[str, int] | None = None) -> Any:
    policy = impl.TTLPolicy(PolicyConfig(admission=True))
    return impl.AdmissionControl(policy, total_blocks, tenant_weights=weights)


def flooded(impl: Any, tenant_b: str | None, weights: dict[str, int] | None = None) -> Any:
    """100 blocks; tenant A keeps two 40-block programs in flight (turn after turn: no lone
    program, so no bounded-wait rule) and has a third, older than anything of B, waiting; at
    2 s a program ``new`` of ``tenant_b`` (None: no tenant) arrives needing 10 blocks."""
    ac = make(impl, 100, weights)
    for i in range(2):
        ac.arrive(pid(A, f"p{i}"), 0.0, 40)
        assert ac.may_run(pid(A, f"p{i}"), 0.0)
    ac.arrive(pid(A, "waits"), 1.0, 40)
    assert not ac.may_run(pid(A, "waits"), 1.0)  # 80 + 40 > 100
    ac.arrive(pid(tenant_b, "new"), 2.0, 10)
    return ac


def keep_in_flight(ac: Any, now: float) -> None:
    """A's two programs finish a turn and send the next at once."""
    for i in range(2):
        ac.finish(pid(A, f"p{i}"), now, 40, tool="bash", rebuild_s=1.0)
        ac.arrive(pid(A, f"p{i}"), now, 40)


def test_another_tenants_programs_in_flight_do_not_hold_a_new_program_back(impl):
    ac = flooded(impl, B)
    # B's share is 50 of 100: its new program fits at once, past A's older waiting one
    assert ac.may_run(pid(B, "new"), 2.0)
    assert not ac.may_run(pid(A, "waits"), 2.0)  # A, over its share, still waits its turn


def test_without_tenants_the_new_program_waits_behind_the_older_one(impl):
    """The same scenario with no tenants (one namespace): the new program waits behind the
    older one, which does not fit beside the two kept in flight — as before tenants."""
    ac = make(impl, 100)
    for i in range(2):
        ac.arrive(f"p{i}", 0.0, 40)
        assert ac.may_run(f"p{i}", 0.0)
    ac.arrive("waits", 1.0, 40)
    ac.arrive("new", 2.0, 10)
    for turn in range(1, 20):
        assert not ac.may_run("new", 2.0 + turn)  # FCFS: "waits" first, and it does not fit
        for i in range(2):
            ac.finish(f"p{i}", 2.0 + turn, 40, tool="bash", rebuild_s=1.0)
            ac.arrive(f"p{i}", 2.0 + turn, 40)


def test_the_new_program_is_admitted_after_any_number_of_the_floods_turns(impl):
    ac = flooded(impl, B)
    for turn in range(1, 2 * MAX_TURNS_AHEAD, 97):
        keep_in_flight(ac, 2.0 + turn)
    assert ac.may_run(pid(B, "new"), 2.0 + 2 * MAX_TURNS_AHEAD)


def test_a_tenant_waits_on_its_own_programs_beyond_its_share(impl):
    ac = flooded(impl, B)
    assert ac.may_run(pid(B, "new"), 2.0)
    ac.arrive(pid(B, "second"), 3.0, 30)
    ac.arrive(pid(B, "third"), 4.0, 30)
    assert ac.may_run(pid(B, "second"), 4.0)  # B: 10 + 30 <= 50
    assert not ac.may_run(pid(B, "third"), 4.0)  # 40 + 30 > 50, and 120 + 30 > 100
    ac.finish(pid(B, "second"), 5.0, 30, last_turn=True)
    assert ac.may_run(pid(B, "third"), 5.0)  # its own program ended: room in its share


@pytest.mark.parametrize(("weights", "fits"), [(None, True), ({A: 4}, False), ({B: 4}, True)])
def test_the_share_follows_the_weights(impl, weights, fits):
    """B's new 30-block program, beside nothing of B's, fits B's share of 100 blocks with
    equal weights (50) and when B weighs 4 (80), not when A does (20)."""
    ac = make(impl, 100, weights)
    for i in range(2):
        ac.arrive(pid(A, f"p{i}"), 0.0, 40)
        assert ac.may_run(pid(A, f"p{i}"), 0.0)
    ac.arrive(pid(A, "waits"), 1.0, 40)
    ac.arrive(pid(B, "new"), 2.0, 30)
    assert ac.may_run(pid(B, "new"), 2.0) is fits


def test_a_program_of_no_tenant_has_the_shared_tenants_share(impl):
    ac = flooded(impl, None)  # A and the shared tenant: 50 blocks each
    assert ac.may_run(pid(None, "new"), 2.0)


# -- one tenant: as before ---------------------------------------------------------------------
steps = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "may_run", "finish", "end", "tick"]),
        st.sampled_from(["p", "q", "r", "s"]),
        st.integers(0, 60),
        st.sampled_from([None, "bash"]),
    ),
    min_size=1,
    max_size=40,
)


def replay(ac: Any, names: dict[str, str], seq: list[tuple]) -> list[Any]:
    out: list[Any] = []
    now = 0.0
    for kind, name, blocks, tool in seq:
        program = names[name]
        try:
            if kind == "tick":
                now += blocks / 4
            elif kind == "arrive":
                out.append(ac.arrive(program, now, blocks))
            elif kind == "may_run":
                out.append(ac.may_run(program, now))
            elif kind == "finish":
                out.append(ac.finish(program, now, blocks, tool=tool, rebuild_s=2.0))
            else:
                out.append(ac.end(program))
        except (KeyError, ValueError) as e:
            out.append(type(e))
        out.append((ac.admitted_count, ac.working_set_blocks(now), ac.next_shrink_s(now)))
    return out


@given(steps, st.sampled_from([None, {A: 7}]))
def test_one_tenant_decides_as_without_tenants(impl, seq, weights):
    plain = {n: n for n in "pqrs"}
    of_a = {n: pid(A, n) for n in "pqrs"}
    assert replay(make(impl, 100), plain, seq) == replay(make(impl, 100, weights), of_a, seq)
