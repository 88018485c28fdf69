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


@pytest.mark.parametrize("policy", ["static-ttl", "cachettl", "continuum", "ttlpolicy"])
def test_every_call_runs_once_when_reclaiming_reorders_the_queue(policy) -> None:
    programs = paper_programs(LONG_CONTEXTS, 100, 0)
    hw = paper_hardware("llama-3.1-8b", "b200", offload=False)
    m = simulate(hw, policy, programs, rate_per_s=0.13, seed=0, config=PAPER_ENGINE)
    assert m.summary()["programs"] == len(programs)
    # each call's prompt counted once at its (first) admission: the programs' prompts exactly
    assert m.input_tokens == sum(t.input_tokens for p in programs for t in p.turns)
    assert len(m.ttfts_s) == sum(len(p.turns) for p in programs)
