"""``ttlpolicy.serving.tool_names``: how many tool names a tenant brings into the shared tool
statistics, and what that gate keeps for the other tenants of a ``ProgramScheduler``."""

from __future__ import annotations

import ttlpolicy
from ttlpolicy import PolicyConfig
from ttlpolicy.ids import program_key, tenant_key, tenant_of
from ttlpolicy.serving.tool_names import TenantToolNames


def key(salt: str) -> str:
    """A tenant's key (its program ids' namespace)."""
    k = tenant_key(salt)
    assert k is not None
    return k


A, B = key("tenant-a"), key("tenant-b")


def test_a_tenant_brings_at_most_its_share_of_names() -> None:
    gate = TenantToolNames(per_tenant=3, idle_s=100.0, max_tenants=8)
    assert [gate.admit(A, f"t{i}", 1.0) for i in range(5)] == ["t0", "t1", "t2", None, None]
    assert gate.admit(A, "t1", 2.0) == "t1"  # a name it holds stays its own
    assert gate.admit(B, "t3", 2.0) == "t3"  # another tenant's share is its own
    assert gate.admit("", "t9", 2.0) == "t9" and gate.admit(A, None, 2.0) is None
    assert gate.refused == 2
    # names unused for longer than idle_s free their places (t0, t2: t1 was used at 2.0)
    assert gate.admit(A, "t5", 101.5) == "t5" and gate.admit(A, "t6", 101.5) == "t6"
    assert gate.admit(A, "t7", 101.5) is None


def test_tenants_are_bounded() -> None:
    gate = TenantToolNames(per_tenant=1, idle_s=100.0, max_tenants=2)
    for t in range(5):
        gate.admit(key(f"t{t}"), "x", 1.0)
    assert gate.tenant_count == 2  # (the two seen last)


def returns(s: ttlpolicy.ProgramScheduler, pid: str, tool: str | None, t: float) -> float:
    """One turn of ``pid`` ending with ``tool``, and its return 1 s later (the gap
    observed); the program then ends.  The time after it."""
    s.arrive(f"{pid}-1", pid, t, 1)
    s.pop(t)
    s.finish(f"{pid}-1", t + 0.1, 1, tool=tool)
    s.arrive(f"{pid}-2", pid, t + 1.1, 1)
    s.pop(t + 1.1)
    s.finish(f"{pid}-2", t + 1.2, 1, last_turn=True)
    return t + 1.3


def test_a_flood_of_names_does_not_push_another_tenants_tool_out() -> None:
    """The library keeps 8 names here: tenant A returning from 40 new names pushes tenant
    B's ``bash`` out of its table unless the names pass the gate (4 a tenant)."""
    counts = []
    for gate in (None, TenantToolNames(per_tenant=4)):
        policy = ttlpolicy.TTLPolicy(PolicyConfig(max_tools=8))
        s = ttlpolicy.ProgramScheduler(policy, 100, 10)
        t = returns(s, program_key(B, "b"), "bash", 0.0)
        for i in range(40):
            pid = program_key(A, f"a{i}")
            tool = f"tool-{i}" if gate is None else gate.admit(tenant_of(pid), f"tool-{i}", t)
            t = returns(s, pid, tool, t)
        counts.append(policy.tool_count("bash"))
    assert counts == [0, 1]
