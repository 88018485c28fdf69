"""Tenant shares of the pin budget (issue 44; docs/investigations/tenant-shares.md): a victim
tenant's hit rate alone, under another tenant's flood, and under the flood with no tenants
(one pool: the scheduler before shares).

Scenario, on ``ProgramScheduler`` alone (no engine): a pin budget of ``--budget`` blocks;
the victim tenant runs ``--victims`` programs of 10 blocks, each returning ``--gap`` seconds
after its turn (a tool call), for the whole run; the flood tenant finishes one new 50-block
program every 0.01 s, ``--flood`` programs in all, none returning (each pin sits until its
TTL: alone, 5,000 blocks a second would be pinned).  Every turn finishes
with that miss cost.  A return is a hit when its arrival takes its program's pin.  Every run
lasts ``max(--flood, 20000)`` steps of 0.01 s; "alone_on_share" is the victim alone with its
share of the budget beside the flood: half, or ``W / (W + 1)`` with ``--victim-weight W``
(the scheduler's ``tenant_weights``; the flood weighs 1).

Run: ``python bench/tenant_shares.py [--backend rust|python] [--flood 20000] [--victim-weight 2]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import ttlpolicy
from ttlpolicy.ids import program_key, tenant_key
from ttlpolicy.reference import policy as ref_policy
from ttlpolicy.reference import scheduler as ref_scheduler

BLOCKS = 10
FLOOD_BLOCKS = 50
MISS_COST_S = 100.0


def victim_hit_rate(
    backend: Any,
    flood: int,
    tenants: bool = True,
    budget: int = 1000,
    victims: int = 10,
    gap_s: float = 1.0,
    step_s: float = 0.01,
    steps: int = 20_000,
    victim_weight: int = 1,
) -> float:
    """The victim tenant's hits per return over ``max(flood, steps)`` steps of ``step_s``;
    the victim's share weighs ``victim_weight`` against the flood's 1."""
    policy = backend.TTLPolicy(ttlpolicy.PolicyConfig())
    flood_tenant = tenant_key("flood") if tenants else None
    victim_tenant = tenant_key("victim") if tenants else None
    weights = {victim_tenant: victim_weight} if victim_tenant is not None else None
    s = backend.ProgramScheduler(policy, 10 * budget, budget, tenant_weights=weights)
    programs = [program_key(victim_tenant, f"v{i}") for i in range(victims)]
    due = [i * gap_s / victims for i in range(victims)]  # staggered
    turns = [0] * victims
    hits = returns = 0
    seq = 0

    def turn(pid: str, now: float, tool: str, blocks: int) -> bool:
        nonlocal seq
        seq += 1
        rid = f"r{seq}"
        kept = s.arrive(rid, pid, now, blocks) is not None
        assert s.pop(now) == rid
        s.finish(rid, now, blocks, tool=tool, cache_miss_cost_s=MISS_COST_S)
        return kept

    for k in range(max(flood, steps)):
        now = k * step_s
        s.expire(now)
        if k < flood:
            turn(program_key(flood_tenant, f"f{k}"), now, "flood", FLOOD_BLOCKS)
        for i in range(victims):
            if due[i] <= now:
                kept = turn(programs[i], now, "bash", BLOCKS)
                if turns[i]:
                    returns += 1
                    hits += kept
                turns[i] += 1
                due[i] = now + gap_s
    return hits / returns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["rust", "python"], default="rust")
    ap.add_argument("--flood", type=int, default=20_000)
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--victims", type=int, default=10)
    ap.add_argument("--victim-weight", type=int, default=1, help="the flood weighs 1")
    args = ap.parse_args()
    backend: Any = ttlpolicy
    if args.backend == "python":
        backend = argparse.Namespace(
            TTLPolicy=ref_policy.TTLPolicy, ProgramScheduler=ref_scheduler.ProgramScheduler
        )
    common = {"budget": args.budget, "victims": args.victims, "steps": args.flood}
    weight = args.victim_weight
    share = args.budget * weight // (weight + 1)
    out = {
        "alone": victim_hit_rate(backend, 0, **common),
        # what the target compares with: alone on its share (two active tenants)
        "alone_on_share": victim_hit_rate(backend, 0, **{**common, "budget": share}),
        "flood_with_tenants": victim_hit_rate(backend, args.flood, victim_weight=weight, **common),
        "flood_one_pool": victim_hit_rate(backend, args.flood, tenants=False, **common),
    }
    print(json.dumps({"backend": args.backend, "flood": args.flood, "victim_weight": weight,
                      **common, **out}))  # fmt: skip


if __name__ == "__main__":
    main()
