"""Reclaiming pins can reorder the waiting queue: under the published order (preempted, then
programs holding a pin, then program arrival) a program that loses its pin loses its place.
The engine must then admit the new head, not the call it peeked before reclaiming (it did:
that call ran twice and the popped one never, and the run died in ``finished``)."""

from __future__ import annotations

import dataclasses

import pytest

from ttlpolicy.sim import simulate
from ttlpolicy.sim.hardware import paper_hardware
from ttlpolicy.sim.paper_workloads import PAPER_ENGINE, SWE_BENCH, paper_programs

# Table 2's SWE-bench with contexts growing to ~74k tokens (the tokens read as the last call's
# context): 100 programs do not fit in one B200's KV, so pins are reclaimed for the head.
LONG_CONTEXTS = dataclasses.replace(
    SWE_BENCH, observation_mean_tokens=6900, output_mean_tokens=1000
)


@pytest.mark.parametrize(
    "policy",
    ["static-ttl", "cachettl", "static-ttl:fcfs-reclaim", "cachettl:fcfs-reclaim", "continuum",
     "ttlpolicy"],
)  # fmt: skip
def test_every_call_runs_once_when_reclaiming_reorders_the_queue(policy) -> None:
    programs = paper_programs(LONG_CONTEXTS, 100, 0)
    hw = paper_hardware("llama-3.1-8b", "b200", offload=False)
    m = simulate(hw, policy, programs, rate_per_s=0.13, seed=0, config=PAPER_ENGINE)
    assert m.summary()["programs"] == len(programs)
    # each call's prompt counted once at its (first) admission: the programs' prompts exactly
    assert m.input_tokens == sum(t.input_tokens for p in programs for t in p.turns)
    assert len(m.ttfts_s) == sum(len(p.turns) for p in programs)


def test_fcfs_reclaim_is_a_variant_of_the_published_rows_only() -> None:
    from ttlpolicy.sim.policies import make_policy
    from ttlpolicy.sim.policies.cachettl import CacheTTL

    for base in ("cachettl", "static-ttl"):
        plain, fcfs = make_policy(base), make_policy(f"{base}:fcfs-reclaim")
        assert isinstance(plain, CacheTTL) and isinstance(fcfs, CacheTTL)
        assert type(plain) is type(fcfs)
        assert (plain.fcfs_reclaim, fcfs.fcfs_reclaim) == (False, True)
        assert fcfs.name == f"{base}:fcfs-reclaim"
    for bad in ("program-fcfs:fcfs-reclaim", "cachettl:fcfs", "continuum:fcfs-reclaim"):
        with pytest.raises(ValueError, match="unknown policy"):
            make_policy(bad)


def test_fcfs_reclaim_keeps_older_pins_for_a_younger_head() -> None:
    """On the memory-tight setting the published rule, as read, hands older programs' pins to
    younger heads; keeping them is what makes pins pay (more prefix hits than without)."""
    programs = paper_programs(LONG_CONTEXTS, 100, 0)
    hw = paper_hardware("llama-3.1-8b", "b200", offload=False)
    hits = {
        p: simulate(hw, p, programs, rate_per_s=0.13, seed=0, config=PAPER_ENGINE).summary()[
            "hit_rate"
        ]
        for p in ("program-fcfs", "cachettl", "cachettl:fcfs-reclaim")
    }
    assert hits["cachettl:fcfs-reclaim"] > hits["cachettl"] + 0.05
    assert hits["cachettl:fcfs-reclaim"] > hits["program-fcfs"] + 0.05


@pytest.mark.parametrize("policy", ["static-ttl:fcfs-reclaim", "cachettl:fcfs-reclaim"])
def test_fcfs_reclaim_cannot_deadlock_behind_a_preempted_call(policy) -> None:
    """A preempted call heads the queue before pinned programs' waiting calls, which then
    cannot expire their pins; were it to take only younger pins, nothing would run again
    (with every generated token kept, contexts ~3.7x Table 2's, the run stalled with 65
    calls waiting). A preempted call was running: it may take any pin, as running calls do."""
    programs = paper_programs(
        "swe-bench", 100, 0, output_mean_tokens=3500.0, keep_whole_output=True
    )
    hw = paper_hardware("llama-3.1-8b", "b200", offload=False)
    m = simulate(hw, policy, programs, rate_per_s=0.13, seed=0, config=PAPER_ENGINE)
    assert m.summary()["programs"] == len(programs)
    assert m.preemptions > 0  # the situation arose
