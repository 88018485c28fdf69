"""Tool-gap statistics per tenant (``ToolHistory``): a tenant's gaps feed its own window of a
tool name, the scheduler reads the tenant from the program id, and a tenant returning from
many new names churns its own share of the table, not the others' tools."""

from __future__ import annotations

from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key

MISS_S = 50.0  # a miss worth pinning for


def key(salt: str) -> str:
    """A tenant's key (its program ids' namespace)."""
    k = tenant_key(salt)
    assert k is not None
    return k


A, B = key("tenant-a"), key("tenant-b")


def returns(s, pid: str, tool: str | None, t: float, gap_s: float = 1.0) -> float:
    """One turn of ``pid`` ending with ``tool``, its return ``gap_s`` later (the gap
    observed); the program then ends.  The time after it."""
    s.arrive(f"{pid}-1", pid, t, 1)
    assert s.pop(t) == f"{pid}-1"
    s.finish(f"{pid}-1", t + 0.1, 1, tool=tool, cache_miss_cost_s=MISS_S)
    back = t + 0.1 + gap_s
    s.arrive(f"{pid}-2", pid, back, 1)
    assert s.pop(back) == f"{pid}-2"
    s.finish(f"{pid}-2", back + 0.1, 1, last_turn=True)
    return back + 0.2


def test_a_flood_of_names_churns_only_its_own_tools(impl) -> None:
    """8 names in the table: tenant A — or the shared namespace, a tenant like the others —
    returning from 40 new names pushes B's ``bash`` out of it only while A holds no more tools
    than B; past that A's names replace its own, its last 7 kept."""
    for flooder in (A, ""):
        policy = impl.TTLPolicy(PolicyConfig(max_tools=8))
        s = impl.ProgramScheduler(policy, 100, 10)
        t = returns(s, program_key(B, "b"), "bash", 0.0)
        for i in range(40):
            pid = program_key(flooder, f"a{i}") if flooder else f"a{i}"
            t = returns(s, pid, f"tool-{i}", t)
        kept = [i for i in range(40) if policy.tool_count(f"tool-{i}", flooder)]
        assert (policy.tool_count("bash", B), kept) == (1, list(range(33, 40)))


def test_a_smaller_tenants_new_name_takes_room_from_the_larger(impl) -> None:
    """The table full of A's names: B's new names take the room of A's least recent while B
    holds no more than A (B's fifth, at 4 against 4, still does), then B's own."""
    policy = impl.TTLPolicy(PolicyConfig(max_tools=8))
    s = impl.ProgramScheduler(policy, 100, 10)
    t = 0.0
    for i in range(8):
        t = returns(s, program_key(A, f"a{i}"), f"a-tool-{i}", t)
    for i in range(8):
        t = returns(s, program_key(B, f"b{i}"), f"b-tool-{i}", t)
    held = [sum(1 for i in range(8) if policy.tool_count(f"{who}-tool-{i}", key))
            for who, key in (("a", A), ("b", B))]  # fmt: skip
    assert held == [3, 5]


def test_gaps_feed_their_tenants_window_only(impl) -> None:
    """The scheduler observes a return's gap under its program's tenant: A's ``bash`` gaps,
    B's and the shared namespace's (an id of no tenant) are three windows."""
    policy = impl.TTLPolicy(PolicyConfig())
    s = impl.ProgramScheduler(policy, 100, 10)
    t = 0.0
    for i in range(3):
        t = returns(s, program_key(A, f"a{i}"), "bash", t)
    t = returns(s, program_key(B, "b"), "bash", t)
    assert [policy.tool_count("bash", who) for who in (A, B, "")] == [3, 1, 0]
    t = returns(s, "plain", "bash", t)
    assert [policy.tool_count("bash", who) for who in (A, B, "")] == [3, 1, 1]
    assert policy.tool_count(None) == 5  # the all-tools window is everyone's


def test_another_tenants_gaps_do_not_move_a_tenants_ttl(impl) -> None:
    """B's pin for ``bash`` is what B's own gaps give, whatever A's ``bash`` gaps are: A
    returning 100 times after 10 ms moves nothing of B's decision (one shared window of the
    name would: most of its samples would be A's)."""
    ttls = []
    for flood in (False, True):
        policy = impl.TTLPolicy(PolicyConfig(min_tool_samples=8))
        s = impl.ProgramScheduler(policy, 1000, 500)
        t = 0.0
        for i in range(10):
            t = returns(s, program_key(B, f"b{i}"), "bash", t, gap_s=30.0 + i)
            if flood:
                for j in range(10):
                    t = returns(s, program_key(A, f"a{i}-{j}"), "bash", t, gap_s=0.01)
        pid = program_key(B, "last")
        s.arrive("last-1", pid, t, 1)
        assert s.pop(t) == "last-1"
        done = s.finish("last-1", t, 1, tool="bash", cache_miss_cost_s=MISS_S,
                        mean_active_blocks=1.0)  # fmt: skip
        assert done.pin is not None
        ttls.append(done.pin.deadline_s - t)
    assert ttls[0] >= 30.0 and ttls[1] == ttls[0]
