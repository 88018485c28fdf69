"""``serving.tenant_probe.next_to_ask``: which waiting request an engine queue asks load
control about when its head is refused (issue 44, "Fair shares")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.serving.tenant_probe import MAX_OTHER_TENANTS, MAX_SCANNED, next_to_ask


def pid(tenant: str, name: str) -> str:
    return program_key(tenant_key(tenant), name)


def ask(
    waiting: list[str], admitted: set[str], programs: set[str], tenants: set[str]
) -> str | None:
    return next_to_ask(waiting, lambda p: p, admitted.__contains__, programs, tenants)


def refused(*program_ids: str) -> tuple[set[str], set[str]]:
    from ttlpolicy.ids import tenant_of

    return set(program_ids), {tenant_of(p) for p in program_ids}


def test_another_tenants_first_program_is_asked_past_the_refused_head() -> None:
    head, a_later, b_first, b_later = pid("A", "x"), pid("A", "y"), pid("B", "x"), pid("B", "y")
    programs, tenants = refused(head)
    assert ask([head, a_later, b_first, b_later], set(), programs, tenants) == b_first


def test_a_tenant_refused_this_step_is_not_asked_again() -> None:
    head, b_first, b_later = pid("A", "x"), pid("B", "x"), pid("B", "y")
    programs, tenants = refused(head, b_first)
    assert ask([head, b_first, b_later], set(), programs, tenants) is None


def test_an_admitted_programs_request_passes_its_own_tenants_refused_head() -> None:
    head, in_flight = pid("A", "new"), pid("A", "old")
    programs, tenants = refused(head)
    assert ask([head, in_flight], {in_flight}, programs, tenants) == in_flight
    assert ask([head, in_flight], set(), programs, tenants) is None  # one tenant: FCFS


def test_at_most_max_other_tenants_are_refused_per_step() -> None:
    heads = [pid(f"T{i}", "x") for i in range(MAX_OTHER_TENANTS + 2)]
    last = heads[-1]
    programs, tenants = refused(*heads[:-1])  # the head's tenant and MAX_OTHER_TENANTS others
    assert ask(heads, set(), programs, tenants) is None
    programs, tenants = refused(*heads[:-2])
    assert ask(heads, set(), programs, tenants) == heads[-2]
    assert last not in programs


def test_reads_at_most_max_scanned_requests() -> None:
    head = pid("A", "x")
    waiting = [head] + [pid("A", f"p{i}") for i in range(MAX_SCANNED)] + [pid("B", "x")]
    programs, tenants = refused(head)
    assert ask(waiting, set(), programs, tenants) is None
    assert ask(waiting[:MAX_SCANNED], set(), programs, tenants) is None
    assert ask([head, pid("B", "x")], set(), programs, tenants) == pid("B", "x")


@given(st.lists(st.tuples(st.sampled_from("ABCDEF"), st.integers(0, 5)), max_size=40))
def test_never_names_a_refused_program_nor_a_refused_tenants_unadmitted_one(
    queue: list[tuple[str, int]],
) -> None:
    from ttlpolicy.ids import tenant_of

    waiting = [pid(t, f"p{n}") for t, n in queue]
    admitted = {p for p in waiting if p.endswith("p0")}
    programs: set[str] = set()
    tenants: set[str] = set()
    asked = 0
    while (p := ask(waiting, admitted, programs, tenants)) is not None:
        assert p not in programs
        assert p in admitted or tenant_of(p) not in tenants
        if p in admitted:  # it runs: it leaves the queue
            waiting.remove(p)
            continue
        programs.add(p)
        tenants.add(tenant_of(p))
        asked += 1
    assert asked <= MAX_OTHER_TENANTS + 1
