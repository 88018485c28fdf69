"""Load control's bounds on vLLM's real scheduler (no model: ``bench/fidelity_logic.py``'s
``bare_scheduler``, a virtual clock): no program holds the others back by keeping a context in
flight, anonymous requests are never held back, a request the library cannot track is served
(not an engine crash), and the next-use table stays bounded."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ttlpolicy
from ttlpolicy.reference.admission import MAX_PROGRAMS
from ttlpolicy_vllm.eviction import MAX_ORDERED_PROGRAMS

BLOCK = 32
STEP_S = 0.1


class Rig:
    """A TTLScheduler with ``blocks`` usable blocks, driven one step at a time."""

    def __init__(self, bench: Any, model: Path, blocks: int = 24) -> None:
        self.logic = bench("fidelity_logic")
        w = SimpleNamespace(
            blocks=blocks, block_size=BLOCK, max_seqs=16, token_budget=2048, max_model_len=1024
        )
        self.sched = self.logic.bare_scheduler(model, "ttlpolicy_vllm.TTLScheduler", w)
        self.now = 0.0
        self.sched.clock = lambda: self.now
        self.submit = self.logic._Submitter(self.sched, BLOCK, self.sched.clock, lambda: None)
        self.started: dict[str, float] = {}  # name -> when first scheduled
        self.count = 0

    def send(self, name: str, tokens: int, out: int, program: str | None) -> None:
        from vllm import SamplingParams

        xargs = {"program_id": program, "tool": "bash"} if program else None
        prompt = [1 + (self.count * 7 + k) % 200 for k in range(tokens)]
        self.count += 1
        params = SamplingParams(max_tokens=out, ignore_eos=True, extra_args=xargs)
        self.submit.add_request(name, {"prompt_token_ids": prompt}, params)

    def rid(self, name: str) -> str:
        return self.submit.requests[name].request_id

    def done(self, name: str) -> bool:
        return self.rid(name) not in self.sched.requests

    def step(self) -> None:
        out = self.sched.schedule()
        for new in out.scheduled_new_reqs:
            self.started.setdefault(self.submit.names[new.req_id], self.now)
        self.sched.update_from_output(out, self.logic._runner_output(self.sched, out))
        self.now += STEP_S


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLPOLICY_LOG_INTERVAL_S", "0")
    monkeypatch.setenv("TTLPOLICY_METRICS", "0")


def test_a_program_kept_in_flight_holds_nobody_back(bench: Any, tiny_model: Path) -> None:
    """One client keeps a 13-block program (54 % of 24 blocks) in flight back to back: another
    program and an anonymous request start within one of its turns (stock: within a step)."""
    rig = Rig(bench, tiny_model)
    turn = 0
    rig.send("big0", 13 * BLOCK - 16, 8, "big")
    turn_s: list[float] = []
    turn_started = rig.now
    while turn < 12:
        rig.step()
        if rig.done(f"big{turn}"):  # back to back: the next call at once
            turn_s.append(rig.now - turn_started)
            turn, turn_started = turn + 1, rig.now
            rig.send(f"big{turn}", 13 * BLOCK - 16, 8, "big")
            if turn == 2:
                rig.send("other", BLOCK - 8, 4, "other")  # another tenant's new program
                rig.send("anon", BLOCK - 8, 4, None)
                sent_s = rig.now
    one_turn_s = max(turn_s)
    assert "other" in rig.started and "anon" in rig.started
    assert rig.started["other"] - sent_s <= one_turn_s, (rig.started, one_turn_s)
    assert rig.started["anon"] - sent_s <= one_turn_s, (rig.started, one_turn_s)


def test_an_anonymous_request_is_never_held_back(bench: Any, tiny_model: Path) -> None:
    """Two programs in flight (10 blocks each of 24): load control holds a new program (its
    expected footprint, the admitted mean, does not fit) but not an anonymous request."""
    rig = Rig(bench, tiny_model)
    rig.send("p1", 10 * BLOCK - 40, 30, "p1")
    rig.send("p2", 10 * BLOCK - 40, 30, "p2")
    rig.step()
    assert {"p1", "p2"} <= set(rig.started)
    rig.send("anon", BLOCK - 8, 2, None)
    sent_s = rig.now
    rig.step()
    assert rig.started.get("anon") == sent_s  # at the first step, as stock
    rig.send("late", BLOCK - 8, 2, "late")  # (later: not of anon's instant, its cohort)
    for _ in range(3):
        rig.step()
    assert "late" not in rig.started  # held by load control meanwhile
    while not (rig.done("p1") and rig.done("p2")):
        rig.step()
    for _ in range(3):
        rig.step()
    assert "late" in rig.started


def test_a_request_beyond_the_librarys_program_table_is_served(
    bench: Any, tiny_model: Path
) -> None:
    """With MAX_PROGRAMS live programs tracked, ``arrive`` refuses a new one: the request (a
    program's or an anonymous one) is served untracked, and no exception leaves the
    adapter."""
    rig = Rig(bench, tiny_model)
    admission = rig.sched.admission
    for i in range(MAX_PROGRAMS):  # live programs (never idle: none is forgotten)
        admission.arrive(f"x{i}", 0.0, 0)
    assert admission.program_count == MAX_PROGRAMS
    with pytest.raises(ValueError, match="tracked programs"):
        rig.sched.life.arrive("probe", "new-program", 0.0, 1)
    rig.send("prog", BLOCK - 8, 3, "new-program")
    rig.send("anon", BLOCK - 8, 3, None)
    for _ in range(10):
        rig.step()
    assert rig.done("prog") and rig.done("anon")
    assert admission.program_count == MAX_PROGRAMS
    assert rig.sched.programs.program_count == 0  # the ProgramScheduler never saw them
    assert len(rig.sched.waiting) == 0


def test_the_next_use_table_keeps_the_programs_that_finished_last(
    bench: Any, tiny_model: Path
) -> None:
    rig = Rig(bench, tiny_model, blocks=64)
    assert rig.sched.eviction.max_programs == MAX_ORDERED_PROGRAMS
    rig.sched.eviction.max_programs = 3
    for i in range(6):
        rig.send(f"r{i}", BLOCK + 8, 1, f"p{i}")
        while not rig.done(f"r{i}"):
            rig.step()
        assert len(rig.sched.eviction.programs()) == min(i + 1, 3)
    assert rig.sched.eviction.programs() == ["p3", "p4", "p5"]
    rig.step()  # the order is applied to those three only; the others' blocks stay LRU
    assert ttlpolicy.backend in ("rust", "python")
