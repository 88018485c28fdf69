"""Workloads: trace sessions become programs as documented; arrivals are seeded."""

from __future__ import annotations

import json

import pytest

from ttlpolicy.cli import main
from ttlpolicy.sim import (
    ConcurrencyArrivals,
    poisson_arrivals,
    programs_from_records,
    swe_agent_programs,
)
from ttlpolicy.traces import TraceRecord


def rec(
    sid: str,
    i: int,
    inp: int,
    hashes: tuple[int, ...],
    think: float = 0.0,
    stop: str | None = "tool_use",
    out: int = 10,
) -> TraceRecord:
    return TraceRecord(sid, i, 0.0, inp, out, hashes, 64, stop, think, None)


def test_reusable_blocks_are_the_common_full_block_prefix() -> None:
    recs = [
        rec("s", 0, 64 * 3 + 10, (1, 2, 3, 4)),  # 3 full blocks + a partial one
        rec("s", 1, 64 * 5, (1, 2, 3, 9, 10), think=4.0),  # shares 3 leading blocks
        rec("s", 2, 64 * 6, (1, 7, 3, 9, 10, 11), think=2.0, stop="end_turn"),  # diverges after 1
    ]
    (prog,) = programs_from_records(recs)
    assert [t.reusable_blocks for t in prog.turns] == [0, 3, 1]
    assert [t.think_s for t in prog.turns] == [0.0, 4.0, 2.0]
    assert [t.tool for t in prog.turns] == ["tool_use", "tool_use", "end_turn"]


def test_context_cap_truncates_or_skips() -> None:
    recs = [rec("a", 0, 1000, tuple(range(16))), rec("b", 0, 50_000, tuple(range(782)), out=100)]
    progs = programs_from_records(recs, max_context=10_000)
    assert [p.turns[0].input_tokens + p.turns[0].output_tokens for p in progs] == [1010, 10_000]
    progs = programs_from_records(recs, max_context=10_000, context_mode="skip")
    assert [p.program_id for p in progs] == ["a"]


def test_think_scale_cap_and_human_turns() -> None:
    recs = [
        rec("s", 0, 640, tuple(range(10)), stop="end_turn"),
        rec("s", 1, 700, tuple(range(10)), think=900.0),
    ]
    (p,) = programs_from_records(recs, think_scale=0.5, think_cap_s=300.0)
    assert p.turns[1].think_s == 300.0
    (p,) = programs_from_records(recs, think_scale=0.5)
    assert p.turns[1].think_s == 450.0
    (p,) = programs_from_records(recs, human_turns="drop")
    assert len(p.turns) == 1


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="context_mode"):
        programs_from_records([], context_mode="cut")
    with pytest.raises(ValueError, match="think_scale"):
        programs_from_records([], think_scale=float("nan"))


def test_arrivals_are_seeded() -> None:
    progs = swe_agent_programs(10, seed=1)
    assert swe_agent_programs(10, seed=1) == progs != swe_agent_programs(10, seed=2)
    a = [(t, p.program_id) for t, p in poisson_arrivals(progs, 0.5, seed=4)]
    assert a == [(t, p.program_id) for t, p in poisson_arrivals(progs, 0.5, seed=4)]
    assert [t for t, _ in a] == sorted(t for t, _ in a)
    assert sorted(p for _, p in a) == sorted(p.program_id for p in progs)
    c = ConcurrencyArrivals(progs, 3, seed=0)
    first = c.initial()
    rest = [c.replacement() for _ in range(8)]
    assert len(first) == 3 and rest[-1] is None
    assert len({p.program_id for p in first + rest[:-1] if p is not None}) == 10


def test_swe_agent_programs_grow_their_context() -> None:
    for p in swe_agent_programs(20, seed=0):
        for prev, t in zip(p.turns, p.turns[1:], strict=False):
            assert t.input_tokens > prev.input_tokens
            assert t.reusable_blocks == prev.input_tokens // 64
            assert t.think_s > 0


def test_compare_cli_on_the_sample(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    rc = main(
        ["compare", "--policies", "vllm,fixed-ttl=5", "--concurrency", "4", "--json", str(out)]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "JCT mean s" in text and "fixed-ttl=5" in text
    doc = json.loads(out.read_text())
    assert {r["policy"] for r in doc["results"]} == {"vllm", "fixed-ttl=5"}
    assert all(r["summary"]["programs"] == 16 for r in doc["results"])


def test_compare_cli_rejects_unknown_policy(capsys) -> None:
    assert main(["compare", "--policies", "vllm,bogus"]) == 2
    assert "unknown policy" in capsys.readouterr().err
