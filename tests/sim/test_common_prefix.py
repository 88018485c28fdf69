"""The prefix every session shares (tool definitions and system prompt; issue 45 part 4): the
workload marks it (``--common-prefix``), the simulator's KV cache stores it once as one chain
that every holder keeps, and the inferred ids' linker sees it as the same hashes in every
program."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_hardware import hw_blocks
from trace_files import DATA
from ttlpolicy.cli import main as cli_main
from ttlpolicy.sim import Engine, programs_from_records, roofline
from ttlpolicy.sim.call import Call, ProgramRun
from ttlpolicy.sim.interface import Verdict
from ttlpolicy.sim.kv_cache import KVCache
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.program_ids import COMMON_HASH, ProgramIds
from ttlpolicy.sim.workload import ConcurrencyArrivals, Program, Turn
from ttlpolicy.traces import read_trace, sample_dir

SESSIONS = DATA / "sessions"


def sharing(capacity: int, **common: int) -> KVCache:
    kv = KVCache(capacity)
    for program, blocks in common.items():
        kv.share(program, blocks)
    return kv


def test_a_common_chain_is_stored_once() -> None:
    kv = sharing(100, a=10, b=10)
    assert kv.acquire("a", 0, 15) == (0, 0)  # a computes the common prefix and 5 own blocks
    kv.release("a", 15, 15, Verdict.FREE)
    assert kv.acquire("a", 15, 20) == (15, 0)
    assert kv.acquire("b", 10, 12) == (10, 0)  # b's first call finds the common chain
    kv.check()
    # both hold the 10 common blocks, counted once: a's 10 own blocks, b's 2
    assert kv.used == 10 + 10 + 2
    assert kv.free_blocks == 100 - 22


def test_the_common_chain_is_evicted_only_when_no_one_holds_it() -> None:
    kv = sharing(40, a=10, b=10)
    kv.acquire("a", 0, 12)
    kv.release("a", 12, 12, Verdict.FREE)  # the common 10 and a's own 2, both free
    assert kv.acquire("b", 10, 15) == (10, 0)  # b holds the common chain
    kv.take("c", 25)  # c shares nothing: 23 blocks are free, 2 more must go
    kv.check()
    assert kv.chain_blocks("a") == 10  # a's own blocks went, not the common ones
    kv.release("b", 15, 15, Verdict.PIN)  # a pin holds it as a running call does
    assert kv.hit("d", 0, 16) is None  # only the common chain could make room: held
    kv.unpin("b")  # no one holds it now
    kv.take("d", 15)  # b's own 5 blocks (freed first), then the common chain's 10
    kv.check()
    assert (kv.chain_blocks("a"), kv.chain_blocks("b")) == (0, 0)


def test_a_hold_keeps_only_its_depth_of_a_longer_common_chain() -> None:
    kv = sharing(30, a=20, b=8)
    kv.acquire("a", 0, 20)
    kv.release("a", 20, 20, Verdict.FREE)  # the common chain is 20 blocks
    assert kv.acquire("b", 8, 10) == (8, 0)  # b shares its first 8
    kv.take("c", 20)  # 10 free, and the common chain's 12 blocks past b's depth
    kv.check()
    assert (kv.chain_blocks("a"), kv.chain_blocks("b")) == (8, 8)
    assert kv.hit("c2", 0, 11) is None  # the 8 b holds cannot go


def program(name: str, common: int, turns: int = 2) -> Program:
    # a 20-block first prompt, the next turn extending it; ``common`` blocks come first
    first = Turn(20 * 64, 64, common, 0.0, "tool_use")
    later = [
        Turn((22 + 3 * i) * 64, 64, 21 + 3 * (i - 1), 1.0, "tool_use") for i in range(1, turns)
    ]
    return Program(name, (first, *later), common_blocks=common)


def hit_tokens(programs: list[Program], policy: str = "vllm") -> int:
    engine = Engine(roofline("llama-3.1-8b", "h100-80g"), make_policy(policy))
    engine.use_concurrency(ConcurrencyArrivals(programs, 1, 0))
    return engine.run().hit_tokens


def test_programs_hit_the_common_chain_another_computed() -> None:
    # one after the other: the second and third programs' first calls find the first's prefix
    shared = hit_tokens([program(p, 12) for p in "xyz"])
    alone = hit_tokens([program(p, 0) for p in "xyz"])
    # a first call's hit stops at the common prefix; the rest reuses each program's own
    assert shared - alone == 2 * 12 * 64


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_books_balance_under_any_sequence(data: st.DataObject) -> None:
    programs = {"a": 6, "b": 10, "c": 0, "d": 14}
    kv = sharing(60, **{p: n for p, n in programs.items() if n})
    running: dict[str, int] = {}  # program → blocks its call holds
    for _ in range(data.draw(st.integers(1, 40))):
        p = data.draw(st.sampled_from(sorted(programs)))
        if p in running:
            if data.draw(st.booleans()) and kv.grow(2):
                running[p] += 2
                continue
            held = running.pop(p)
            verdict = data.draw(st.sampled_from(list(Verdict)))
            kv.release(p, held, data.draw(st.integers(0, held)), verdict)
        elif data.draw(st.booleans()):
            kv.unpin(p)
        else:
            total = data.draw(st.integers(1, 30))
            reusable = data.draw(st.integers(0, total))
            if kv.acquire(p, reusable, total) is not None:
                running[p] = total
        kv.check()
        # every held common block is on the GPU, and the cache never exceeds its capacity
        assert kv.common_held <= kv.common_blocks
        assert kv.used + kv.cached <= kv.capacity


def test_programs_with_the_common_prefix() -> None:
    records = list(read_trace(SESSIONS))
    plain = programs_from_records(records)
    shared = programs_from_records(records, common_prefix=True)
    assert [p.program_id for p in shared] == [p.program_id for p in plain]
    heads = {}
    for f in SESSIONS.glob("*.json.gz"):
        with gzip.open(f) as fh:
            doc = json.load(fh)
        heads[doc["id"]] = doc["tool_tokens"] + doc["system_tokens"]
        for sub in (r for r in doc["requests"] if r.get("type") == "subagent"):
            heads[f"{doc['id']}/{sub['agent_id']}"] = sub["tool_tokens"] + sub["system_tokens"]
    assert any("/" in p.program_id for p in shared)  # (sub-agents are among them)
    for with_prefix, without in zip(shared, plain, strict=True):
        # a session's own tools + system prompt, a sub-agent's its own (not its parent's)
        blocks = heads[with_prefix.program_id] // 64
        assert with_prefix.common_blocks == blocks > 0
        assert without.common_blocks == 0
        for t, u in zip(with_prefix.turns, without.turns, strict=True):
            assert t.reusable_blocks == max(u.reusable_blocks, min(blocks, t.input_tokens // 64))


def test_the_linker_sees_the_common_prefix_in_every_program() -> None:
    ids = ProgramIds("inferred", 64)
    runs = [ProgramRun(program(p, 12), 0.0) for p in "xy"]
    hashes = [ids.hashes(Call(i, run, 0, 0.0)) for i, run in enumerate(runs)]
    common = list(range(COMMON_HASH, COMMON_HASH + 12))
    assert hashes[0][:12] == hashes[1][:12] == common
    assert not set(hashes[0][12:]) & set(hashes[1][12:])  # the rest is each program's own
    later = ids.hashes(Call(2, runs[0], 1, 1.0))
    assert later[:20] == hashes[0]  # a later turn extends its program's previous prompt


def test_compare_takes_the_option(tmp_path: Path) -> None:
    out = {}
    for name, extra in (("plain", []), ("common", ["--common-prefix"])):
        path = tmp_path / f"{name}.json"
        argv = ["compare", "--policies", "vllm", "--concurrency", "2", "--json", str(path)]
        assert cli_main([*argv, *extra]) == 0
        out[name] = json.loads(path.read_text())
    hits = {k: v["results"][0]["summary"]["hit_tokens"] for k, v in out.items()}
    assert hits["common"] > hits["plain"]  # the sample sessions' first calls hit the prefix
    assert out["common"]["meta"]["common_prefix"] is True
    assert "common_prefix" not in out["plain"]["meta"]


@pytest.mark.parametrize(
    "policy", ["vllm", "vllm-offload", "ttlpolicy", "ttlpolicy-offload", "ttlpolicy:inferred-ids"]
)
def test_engine_books_balance_with_the_common_prefix(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the package's 16 sample sessions, cut short, on a memory that holds a few contexts:
    # pins, evictions (a policy's order too), reloads and preemptions meet the common chain
    records = list(read_trace(sample_dir()))
    programs = [
        Program(p.program_id, p.turns[:6], common_blocks=p.common_blocks)
        for p in programs_from_records(records, max_context=24_000, common_prefix=True)
    ]
    checked = 0

    def checking(name: str) -> None:
        method = getattr(KVCache, name)

        def run(self: KVCache, *args: object) -> object:
            nonlocal checked
            out = method(self, *args)
            self.check()
            checked += 1
            return out

        monkeypatch.setattr(KVCache, name, run)

    for name in ("take", "grow", "release", "unpin", "prefetch", "drop"):
        checking(name)
    engine = Engine(hw_blocks(900, 64, cpu_blocks=2000), make_policy(policy))
    engine.use_concurrency(ConcurrencyArrivals(programs, 4, 0))
    m = engine.run()
    assert m.calls_done == sum(len(p.turns) for p in programs)
    assert checked > 0 and m.evicted_blocks > 0  # (memory was short: the books were tried)
    assert engine.kv.common_blocks > 0


def test_a_compaction_supersedes_its_linked_program() -> None:
    # x's second call keeps only the common prefix (a compaction): the linker cannot tell it
    # from a new session, so it starts a new program; the old one is listed as superseded
    first = Turn(30 * 64, 64, 12, 0.0, "tool_use")
    compacted = Turn(20 * 64, 64, 12, 1.0, "tool_use")
    extended = Turn(24 * 64, 64, 20, 1.0, "tool_use")
    x = ProgramRun(Program("x", (first, compacted, extended), common_blocks=12), 0.0)
    ids = ProgramIds("inferred", 64)
    calls = [Call(i, x, i, float(i)) for i in range(3)]
    before = ids.arrive(calls[0], 0.0)
    ids.finished(calls[0], 0.5, False)
    after = ids.arrive(calls[1], 1.0)
    assert after != before and ids.links["new"] == 2
    assert ids.take_superseded() == [before] and ids.superseded == []
    ids.finished(calls[1], 1.5, False)
    assert ids.arrive(calls[2], 2.0) == after  # it extends the compacted prompt: continues
    assert ids.superseded == []
