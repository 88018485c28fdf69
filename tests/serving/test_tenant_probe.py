"""``serving.tenant_probe.next_to_ask``: which waiting request an engine queue asks load
control about when its head is refused (issue 44, "Fair shares")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.serving.tenant_probe import MAX_OTHER_TENANTS, MAX_SCANNED, next_to_ask


def pid(tenant: str, name: str) -> str:
    return program_key(tenant_key(tenant), name)


def ask(waiting: list[str], programs: set[str], tenants: set[str]) -> str | None:
    return next_to_ask(waiting, lambda p: p, programs, tenants)


def refused(*program_ids: str) -> tuple[set[str], set[str]]:
    from ttlpolicy.ids import tenant_of

    return set(program_ids), {tenant_of(p) for p in program_ids}


def test_another_tenants_first_program_is_asked_past_the_refused_head() -> None:
    head, a_later, b_first, b_later = pid("A", "x"), pid("A", "y"), pid("B", "x"), pid("B", "y")
    programs, tenants = refused(head)
    assert ask([head, a_later, b_first, b_later], programs, tenants) == b_first


def test_a_tenant_refused_this_step_is_not_asked_again() -> None:
    head, b_first, b_later = pid("A", "x"), pid("B", "x"), pid("B", "y")
    programs, tenants = refused(head, b_first)
    assert ask([head, b_first, b_later], programs, tenants) is None


def test_with_one_tenant_nothing_passes_the_refused_head() -> None:
    head, in_flight, anonymous = pid("A", "new"), pid("A", "old"), pid("", "anon")
    programs, tenants = refused(head)
    assert ask([head, in_flight, pid("A", "later")], programs, tenants) is None
    programs, tenants = refused(pid("", "first"))  # no tenant: anonymous requests among them
    assert ask([pid("", "first"), anonymous], programs, tenants) is None


def test_at_most_max_other_tenants_are_refused_per_step() -> None:
    heads = [pid(f"T{i}", "x") for i in range(MAX_OTHER_TENANTS + 2)]
    last = heads[-1]
    programs, tenants = refused(*heads[:-1])  # the head's tenant and MAX_OTHER_TENANTS others
    assert ask(heads, programs, tenants) is None
    programs, tenants = refused(*heads[:-2])
    assert ask(heads, programs, tenants) == heads[-2]
    assert last not in programs


def test_reads_at_most_max_scanned_requests() -> None:
    head = pid("A", "x")
    waiting = [head] + [pid("A", f"p{i}") for i in range(MAX_SCANNED)] + [pid("B", "x")]
    programs, tenants = refused(head)
    assert ask(waiting, programs, tenants) is None
    assert ask(waiting[:MAX_SCANNED], programs, tenants) is None
    assert ask([head, pid("B", "x")], programs, tenants) == pid("B", "x")


@given(st.lists(st.tuples(st.sampled_from("ABCDEF"), st.integers(0, 5)), max_size=40))
def test_names_each_tenants_first_unrefused_program_and_never_a_refused_one(
    queue: list[tuple[str, int]],
) -> None:
    from ttlpolicy.ids import tenant_of

    waiting = [pid(t, f"p{n}") for t, n in queue]
    programs: set[str] = set()
    tenants: set[str] = set()
    asked = 0
    while (p := ask(waiting, programs, tenants)) is not None:
        assert p not in programs and tenant_of(p) not in tenants
        # the first of its tenant in the queue: FCFS within a tenant holds
        assert p == next(q for q in waiting if tenant_of(q) == tenant_of(p))
        programs.add(p)
        tenants.add(tenant_of(p))
        asked += 1
    assert asked <= MAX_OTHER_TENANTS + 1
    unasked = {tenant_of(q) for q in waiting[:MAX_SCANNED]} - tenants
    assert not unasked or asked == MAX_OTHER_TENANTS + 1


# -- TenantQueue: what the probe reads -----------------------------------------------------


def test_one_tenant_s_many_requests_hide_no_other_tenant_s() -> None:
    from ttlpolicy.serving.tenant_probe import PER_TENANT, TenantQueue

    queue: TenantQueue[str] = TenantQueue()
    for i in range(10 * MAX_SCANNED):
        queue.add(pid("A", f"p{i}"), tenant_key("A") or "")
    queue.add(pid("B", "x"), tenant_key("B") or "")
    read = queue.candidates(set())
    assert read == [pid("A", f"p{i}") for i in range(PER_TENANT)] + [pid("B", "x")]
    assert queue.candidates({tenant_key("A") or ""}) == [pid("B", "x")]


def test_every_tenant_is_asked_however_many_over_their_share_wait_ahead_of_it() -> None:
    # tenants T0..T9 over their share (refused), each waiting before B, which may run: a step
    # refuses at most MAX_OTHER_TENANTS tenants besides the head's, and each refused tenant
    # goes behind the others, so B is asked within ceil(10 / MAX_OTHER_TENANTS) + 1 steps
    from ttlpolicy.ids import tenant_of
    from ttlpolicy.serving.tenant_probe import TenantQueue, ask_in_turn

    queue: TenantQueue[str] = TenantQueue()
    over = [pid(f"T{i}", "x") for i in range(10)]
    for p in [*over, pid("B", "x")]:
        queue.add(p, tenant_of(p))
    head = over[0]
    for step in range(1, 6):
        programs, tenants = refused(head)
        read = queue.candidates(tenants)
        ran = list(ask_in_turn(read, lambda p: p, lambda p: p == pid("B", "x"),
                               programs, tenants, queue.refused))  # fmt: skip
        if ran:
            assert ran == [pid("B", "x")] and step <= -(-10 // MAX_OTHER_TENANTS) + 1
            return
    raise AssertionError("B was never asked")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "discard", "refused"]),
            st.sampled_from("ABCD"),
            st.integers(0, 12),
        ),
        max_size=80,
    )
)
def test_reads_each_tenant_s_first_requests_refused_tenants_last(
    ops: list[tuple[str, str, int]],
) -> None:
    from ttlpolicy.serving.tenant_probe import PER_TENANT, TenantQueue

    queue: TenantQueue[str] = TenantQueue()
    joined: dict[str, list[str]] = {}  # the model: each tenant's keys in the order they joined
    tenant_order: list[str] = []  # tenants by their first waiting key, refused ones moved last
    for op, tenant, n in ops:
        key = f"{tenant}{n}"
        if op == "refused":
            queue.refused(tenant)
            if tenant in tenant_order:
                tenant_order.remove(tenant)
                tenant_order.append(tenant)
            continue
        for keys in joined.values():  # (a key re-added leaves, then joins at the end)
            if key in keys:
                keys.remove(key)
        for t in [t for t, keys in joined.items() if not keys]:
            del joined[t]
            tenant_order.remove(t)
        if op == "add":
            queue.add(key, tenant)
            joined.setdefault(tenant, []).append(key)
            if tenant not in tenant_order:
                tenant_order.append(tenant)
        else:
            queue.discard(key)
    expected = [k for t in tenant_order for k in joined[t][:PER_TENANT]]
    assert queue.candidates(set()) == expected[:MAX_SCANNED]
    assert len(queue) == sum(map(len, joined.values()))


def test_sync_keeps_the_places_of_requests_still_waiting() -> None:
    from ttlpolicy.serving.tenant_probe import TenantQueue

    queue: TenantQueue[str] = TenantQueue()
    queue.sync([("a1", "A"), ("b1", "B"), ("a2", "A")])
    queue.refused("A")
    queue.sync([("c1", "C"), ("a2", "A"), ("b1", "B"), ("b2", "B")])  # a1 left; c1, b2 joined
    assert queue.candidates(set()) == ["b1", "b2", "a2", "c1"]
    assert queue.candidates(set(), priority=lambda k: k != "b2") == ["b2", "b1", "a2", "c1"]
    assert len(queue) == 4
