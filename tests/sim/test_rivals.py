"""2026's rivals (issue 46), each tested for what defines it: MORI's GPU tier holds the
busiest programs, fits the capacity and moves with it; a Tokencake return on time finds its
KV back on the GPU (and one early waits for the copy, one late reloads it); KVFlow evicts by
steps-to-execution.  And the engine's prefetch hook (``KVCache.prefetch``) keeps its books."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from ttlpolicy.sim import Engine, EngineConfig, Program, Turn, Verdict, roofline
from ttlpolicy.sim.call import Call, ProgramRun
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.kv_cache import KVCache
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.policies.kvflow import KVFlow
from ttlpolicy.sim.policies.mori import Mori
from ttlpolicy.sim.policies.tokencake import Tokencake

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)
BASE = roofline("llama-3.1-8b", "h100-80g")


def hw_with(blocks: int, cpu_blocks: int) -> Hardware:
    per_block = 64 * BASE.kv_bytes_per_token
    return Hardware(BASE.model, BASE.gpu, BASE.steps, blocks * per_block, cpu_blocks * per_block)


def agent(name: str, gap_s: float, blocks: int = 100, turns: int = 2) -> Program:
    """Calls of ``blocks`` blocks, each extending the previous one by a block, ``gap_s``
    apart (a tool call)."""
    return Program(
        name,
        tuple(
            Turn(
                (blocks + i) * 64,
                8,
                (blocks + i - 1) if i else 0,
                gap_s if i else 0.0,
                "bash" if i < turns - 1 else None,
            )
            for i in range(turns)
        ),
    )


def run(policy, programs, hw):
    engine = Engine(hw, policy, CFG)
    engine.add_programs(programs)
    return engine, engine.run()


# -- the engine's prefetch: KVCache.prefetch ------------------------------------------------
def test_prefetch_brings_a_swapped_chain_back_pinned() -> None:
    kv = KVCache(100, 100)
    kv.take("A", 40)
    kv.release("A", 40, 30, Verdict.SWAP)
    assert (kv.used, kv.chain_blocks("A"), kv.cpu_used) == (0, 0, 30)
    assert kv.prefetch("A") == 30
    assert (kv.used, kv.pinned, kv.chain_blocks("A"), kv.cpu_used) == (30, 30, 30, 0)
    assert kv.hit("A", 30, 31) == (30, 0)  # all of it on the GPU
    kv.check()


def test_prefetch_refused_changes_nothing() -> None:
    kv = KVCache(50, 100)
    kv.take("A", 40)
    kv.release("A", 40, 40, Verdict.SWAP)
    kv.take("B", 20)  # a running call holds 20: 30 left, the chain needs 40
    before = (kv.used, kv.pinned, kv.cached, kv.cpu_used, kv.chain_blocks("A"))
    assert kv.prefetch("A") == 0
    assert kv.prefetch("nobody") == 0
    assert (kv.used, kv.pinned, kv.cached, kv.cpu_used, kv.chain_blocks("A")) == before
    kv.check()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("ABCD"), st.integers(0, 4), st.integers(1, 40)), max_size=40)
)
def test_prefetch_keeps_the_books(ops: list[tuple[str, int, int]]) -> None:
    """Any mix of releases (free, pin, swap), admissions, unpins and prefetches leaves the
    books balanced and no tier over its capacity."""
    kv = KVCache(120, 60)
    held: dict[str, int] = {}
    for program, op, blocks in ops:
        if op == 0 and program not in held and kv.hit(program, blocks, blocks) is not None:
            kv.take(program, blocks)
            held[program] = blocks
        elif op == 1 and program in held:
            kv.release(program, held.pop(program), blocks, (Verdict.FREE, Verdict.PIN,
                       Verdict.SWAP)[blocks % 3])  # fmt: skip
        elif op == 2:
            kv.unpin(program)
        elif op == 3 and program not in held:
            copied = kv.prefetch(program)
            assert copied == 0 or kv.chain_blocks(program) >= copied
        kv.check()


# -- Tokencake: offload during the tool, upload before its predicted end --------------------
def tokencake_run(predicted_s: float, tool_s: float = 30.0):
    pol = Tokencake(prior_tool_s=predicted_s)
    engine, m = run(pol, [(0.0, agent("A", tool_s))], hw_with(2000, 2000))
    return pol, engine, m


def test_tokencake_return_on_time_finds_its_kv_on_the_gpu() -> None:
    pol, engine, m = tokencake_run(predicted_s=30.0)
    assert (pol.offloads, pol.uploads) == (1, 1)
    assert engine.kv.offloaded_blocks >= 100 and engine.kv.prefetched_blocks >= 100
    assert m.reloaded_tokens == 0  # nothing read from the CPU at admission
    assert m.hit_tokens >= 100 * 64  # the return hit its whole chain on the GPU
    # and did not wait for a copy: its first token as fast as a first call's prefill allows
    assert m.ttfts_s[1] < m.ttfts_s[0]


def test_tokencake_return_before_the_upload_reloads_it() -> None:
    # predicted far later than it returns: the upload has not started; the call reloads
    pol, _, m = tokencake_run(predicted_s=300.0)
    assert (pol.offloads, pol.uploads) == (1, 0)
    assert m.reloaded_tokens >= 100 * 64


def test_tokencake_return_during_the_upload_waits_for_it() -> None:
    hw = hw_with(2000, 2000)
    move_s = hw.transfer_s(100 * 64)
    # the upload starts half a copy before the return and ends half a copy after it
    pol, _, m = tokencake_run(predicted_s=30.0 + move_s / 2)
    assert pol.uploads == 1 and m.reloaded_tokens == 0
    assert m.ttfts_s[1] >= move_s / 2


def test_tokencake_keeps_a_short_call_on_the_gpu() -> None:
    # a tool predicted shorter than two round trips is not worth offloading: pinned
    pol, engine, m = tokencake_run(predicted_s=1e-4, tool_s=1e-4)
    assert pol.offloads == 0 and engine.kv.offloaded_blocks == 0
    assert m.hit_tokens >= 100 * 64


# -- MORI: idleness tiers ---------------------------------------------------------------------
def mori_bound(capacity: int, running: int = 0) -> Mori:
    pol = Mori()
    hw = SimpleNamespace(
        kv_capacity_blocks=lambda b: capacity, cpu_capacity_blocks=lambda b: 10 * capacity
    )
    view = SimpleNamespace(hardware=hw, config=CFG, now=0.0, cpu_tier=True,
                           running_blocks=lambda: running)  # fmt: skip
    pol.bind(view)
    return pol


def at(pol: Mori, now: float) -> None:
    """Sets the fake view's clock (``mori_bound``'s view is a plain namespace)."""
    vars(pol.view)["now"] = now


def call_of(program: str, turn: int, admit_s: float, issue_s: float = 0.0) -> Call:
    prog = agent(program, 1.0, turns=3)
    c = Call(0, ProgramRun(prog, 0.0), turn, issue_s)
    c.admit_s = admit_s
    return c


def test_mori_keeps_the_busiest_on_the_gpu_the_idlest_goes_to_the_cpu() -> None:
    pol = mori_bound(capacity=150)  # room for one chain
    # A: 1 s of LLM time, then a tool
    assert pol.finished(call_of("A", 0, 0.0), 1.0, 100, False) is Verdict.PIN
    # at t = 10, A has waited 9 s of its 10 (idleness 0.9); B just ran 0.1 s (0): B stays
    # on the GPU and A is demoted
    at(pol, 10.0)
    assert pol.idleness("A", 10.0) == 0.9
    assert pol.finished(call_of("B", 0, 9.9), 10.0, 100, False) is Verdict.PIN
    assert pol.expire(10.0) == ["A"] and set(pol.resident) == {"B"}
    # C ran 0.1 s after 100 s in tools (idleness ~1): more idle than B (0.5 at t = 10.2),
    # so C goes to the CPU and B stays
    pol._tool_s["C"] = 100.0
    at(pol, 10.2)
    assert pol.finished(call_of("C", 1, 10.1), 10.2, 100, False) is Verdict.SWAP
    assert pol.expire(10.2) == [] and set(pol.resident) == {"B"}


def test_mori_gpu_tier_fits_the_capacity_and_moves_with_it() -> None:
    # room for two chains when nothing runs; with 100 blocks running, for one
    idle = mori_bound(capacity=250)
    busy = mori_bound(capacity=250, running=100)
    for pol in (idle, busy):
        for i, name in enumerate("ABC"):
            pol.finished(call_of(name, 0, float(i)), float(i) + 1.0, 100, False)
            pol.expire(float(i) + 1.0)
            assert sum(pol.resident.values()) <= pol.gpu_share_blocks()
    assert len(idle.resident) == 2 and len(busy.resident) == 1
    # the boundary moves under pressure: the most idle resident goes first
    at(idle, 100.0)
    first = max(idle.resident, key=lambda p: idle.idleness(p, 100.0))
    assert idle.reclaim(1, 100.0) == [first]


def test_mori_runs_and_pins_within_the_gpu() -> None:
    # end to end: many agents on a small GPU; resident chains never exceed what is free
    class Checked(Mori):
        def finished(self, call, now, chain_blocks, last_turn):
            verdict = super().finished(call, now, chain_blocks, last_turn)
            if verdict is Verdict.PIN:
                assert self.view is not None
                capacity = self.view.hardware.kv_capacity_blocks(64)
                assert sum(self.resident.values()) <= capacity - self.view.running_blocks()
            return verdict

    pol = Checked()
    programs = [(i * 0.5, agent(f"P{i}", 2.0 + 7 * i, blocks=80, turns=4)) for i in range(6)]
    engine, m = run(pol, programs, hw_with(250, 4000))
    assert m.programs_done == 6 and pol.offloads + pol.demotions > 0
    engine.kv.check()


# -- KVFlow: steps-to-execution ---------------------------------------------------------------
def test_kvflow_evicts_ended_sessions_first_then_the_farthest_from_running() -> None:
    pol = KVFlow(prior_tool_s=10.0)
    pol.bind(SimpleNamespace(hardware=BASE, config=CFG))
    pol.means.observe("bash", 5.0)
    pol.means.observe("read", 60.0)
    near, far, done = (call_of(p, 0, 0.0) for p in ("near", "far", "done"))
    near.turn = Turn(6400, 8, 0, 0.0, "bash")
    far.turn = Turn(6400, 8, 0, 0.0, "read")
    pol.finished(near, 1.0, 100, False)
    pol.finished(far, 1.0, 100, False)
    pol.finished(done, 1.0, 100, True)
    order = pol.eviction_order()
    assert order(["near", "far", "done"]) == ["done", "far", "near"]
    back = call_of("far", 1, 0.0, issue_s=2.0)  # its call is waiting: next to run
    pol.arrive(back, 2.0)
    assert order(["far", "near"]) == ["near", "far"]


def test_kvflow_prefetch_restores_an_evicted_chain_before_the_return() -> None:
    # A's chain is evicted to the CPU by B's big call; A's tool mean is known, so the
    # prefetch brings the chain back before A returns, and A reads nothing at admission
    pol = make_policy("kvflow")
    assert isinstance(pol, KVFlow)
    pol.means.observe("bash", 30.0)
    b = Program("B", (Turn(250 * 64, 8, 0, 0.0, None),))
    engine, m = run(pol, [(0.0, agent("A", 30.0)), (1.0, b)], hw_with(300, 2000))
    assert engine.kv.offloaded_blocks > 0 and pol.prefetched == 1
    assert m.reloaded_tokens == 0 and m.hit_tokens >= 100 * 64


def test_bounds_tally_keeps_a_rivals_prefetch() -> None:
    # bench/bounds.py's Tally wraps a policy for its breakdown: a rival's prefetch must pass
    # through it, else a run under the harness would silently be another policy
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from bounds import Tally

    pol = make_policy("kvflow")
    assert isinstance(pol, KVFlow)
    pol.means.observe("bash", 30.0)
    b = Program("B", (Turn(250 * 64, 8, 0, 0.0, None),))
    _, m = run(Tally(pol), [(0.0, agent("A", 30.0)), (1.0, b)], hw_with(300, 2000))
    assert pol.prefetched == 1 and m.reloaded_tokens == 0
