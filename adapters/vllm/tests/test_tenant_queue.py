"""vLLM's waiting queue asks load control about other tenants' first requests when its head
is refused (``ttlpolicy.serving.tenant_probe``; issue 44, "Fair shares"), on vLLM's real
scheduler (no model: ``test_load_control_bounds``' rig, a virtual clock, 24 blocks).

Tenant A keeps two 9-block programs in flight turn after turn (no lone program: no bounded
wait), over its share of the working set once B is active; A's new program, which does not
fit beside them, heads the queue and is refused.  B's new program, sent a step later (not of
the newcomer's cohort, which load control admits together), starts at the next step; A's
newcomer is still held, and A's programs in flight keep running (the refused newcomer, passed
over, keeps its place: ``ProgramScheduler.take``).  Without tenants (no ``cache_salt``)
the same traffic holds the later program behind the refused one, as before tenants.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_load_control_bounds import BLOCK, Rig, quiet

__all__ = ["quiet"]  # fixture

BIG_TOKENS = 9 * BLOCK - 16  # one turn of A's programs kept in flight: 9 blocks
A_TURNS = 8
MAX_STEPS = 400  # (a stalled scenario fails rather than hangs)


class SaltedRig(Rig):
    """The rig, with each request's ``cache_salt`` (its tenant) given."""

    def send_salted(self, name: str, tokens: int, out: int, program: str, salt: str | None) -> None:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        prompt = [1 + (self.count * 7 + k) % 200 for k in range(tokens)]
        self.count += 1
        params = SamplingParams(
            max_tokens=out, ignore_eos=True, extra_args={"program_id": program, "tool": "bash"}
        )
        sub = self.submit
        rid = str(len(sub.names))
        req = Request(rid, prompt, params, None, arrival_time=self.now,
                      block_hasher=sub.hasher, cache_salt=salt)  # fmt: skip
        sub.requests[name], sub.names[rid] = req, name
        self.sched.add_request(req)


def run(bench: Any, model: Path, tenants: bool, more: int = 0) -> tuple[SaltedRig, float]:
    """A's two programs in flight; A's newcomer (and ``more`` others), then B's new program,
    arrive after A's first turns.  Returns the rig and when B's program was sent."""
    rig = SaltedRig(bench, model)
    salt_a, salt_b = ("salt-a", "salt-b") if tenants else (None, None)
    turns = {"a0": 0, "a1": 0}
    for p in turns:
        rig.send_salted(f"{p}.0", BIG_TOKENS, 4, p, salt_a)
    sent_a = sent_b = -1.0
    for _ in range(MAX_STEPS):
        if min(turns.values()) >= A_TURNS:
            break
        rig.step()
        for p, turn in turns.items():
            if rig.done(f"{p}.{turn}"):  # back to back: the next call at once
                turns[p] = turn + 1
                rig.send_salted(f"{p}.{turn + 1}", BIG_TOKENS, 4, p, salt_a)
        if sent_a < 0 and min(turns.values()) >= 1:
            rig.send_salted("a-new", BIG_TOKENS, 4, "a-new", salt_a)
            for i in range(more):
                rig.send_salted(f"a-new{i}", BIG_TOKENS, 4, f"a-new{i}", salt_a)
            sent_a = rig.now
        elif sent_b < 0 <= sent_a:  # a step later: not of A's newcomer's cohort
            rig.send_salted("b-new", BLOCK - 8, 4, "b-new", salt_b)
            sent_b = rig.now
    return rig, sent_b


@pytest.mark.slow
def test_a_tenant_over_its_share_holds_back_its_own_newcomer_only(
    bench: Any, tiny_model: Path
) -> None:
    rig, sent_b = run(bench, tiny_model, tenants=True)
    assert rig.started.get("b-new") == sent_b, (rig.started, sent_b)  # at the next step
    assert rig.started.get("a-new", float("inf")) > sent_b  # A's own newcomer waits
    assert {f"a0.{A_TURNS - 1}", f"a1.{A_TURNS - 1}"} <= set(rig.started)  # A's kept running


@pytest.mark.slow
def test_with_one_tenant_the_later_program_waits_behind_the_refused_one(
    bench: Any, tiny_model: Path
) -> None:
    rig, sent_b = run(bench, tiny_model, tenants=False)
    assert rig.started.get("a-new", float("inf")) > sent_b  # refused: the scenario holds it
    assert rig.started.get("b-new", float("inf")) >= rig.started.get("a-new", float("inf"))


@pytest.mark.slow
def test_one_tenant_s_many_waiting_programs_hide_no_other_tenant_s(
    bench: Any, tiny_model: Path
) -> None:
    # A queues more newcomers than the probe reads in all (``MAX_SCANNED``), each refused:
    # B's program, behind them all, still starts at the next step
    from ttlpolicy.serving.tenant_probe import MAX_SCANNED

    rig, sent_b = run(bench, tiny_model, tenants=True, more=MAX_SCANNED)
    assert rig.started.get("b-new") == sent_b, (rig.started.get("b-new"), sent_b)
    assert rig.started.get("a-new", float("inf")) > sent_b
