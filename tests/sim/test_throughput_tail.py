"""bench/throughput_tail.py, behind docs/investigations/2026-rivals.md's "Throughput at the
heavy points": its step loop is the simulator's run (the same figures), it counts the
seconds the engine computed, and its split names the program that sets the makespan."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sim_hardware import hw_blocks
from ttlpolicy.sim import (
    Engine,
    EngineConfig,
    Metrics,
    Program,
    Turn,
    make_policy,
    simulate,
)
from ttlpolicy.sim.workload import programs_from_trace
from ttlpolicy.traces import sample_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import throughput_tail  # (bench/)
from bounds import Tally

CFG = EngineConfig(block_tokens=64, token_budget=8192, max_seqs=64)


def sessions() -> list[Program]:
    return programs_from_trace(
        sample_dir(), max_context=120_000, think_cap_s=300.0, human_turns="drop"
    )


@pytest.mark.parametrize("name", ["ttlpolicy-offload", "mori", "vllm-offload"])
def test_the_logged_run_is_the_simulators(name: str) -> None:
    programs, hw = sessions(), hw_blocks(2500, 64, 300)  # (contended: the tier runs short)
    m, busy = throughput_tail.run_logged(hw, make_policy(name), programs, 0.2, 1, CFG)
    want = simulate(hw, name, programs, rate_per_s=0.2, seed=1, config=CFG)
    assert m.summary() == want.summary()
    assert 0 < busy.busy_s < m.makespan_s
    # every output token but a call's first (its prefill's last chunk gives that) is a
    # decode slot; a preempted call's first token comes again
    assert busy.decode_slots <= m.output_tokens - m.calls_done
    assert busy.steps >= busy.decode_slots / 64  # (at most max_seqs decode a step)
    blocks = busy.mean_blocks()
    assert blocks["running_blocks"] > 0 and sum(blocks.values()) <= 2500  # (the GPU's blocks)
    if name == "mori":  # (it pins the busiest programs' chains)
        assert blocks["pinned_blocks"] > 0
    if name == "vllm-offload":  # (no pins; LRU keeps the free chains cached)
        assert blocks["pinned_blocks"] == 0 < blocks["cached_blocks"]


def test_a_lone_programs_idle_seconds_are_its_tool_time() -> None:
    turns = tuple(
        Turn((100 + i) * 64, 20, (99 + i) if i else 0, 5.0 if i else 0.0, "bash" if i < 3 else None)
        for i in range(4)
    )
    m, busy = throughput_tail.run_logged(
        hw_blocks(2500, 64, 300), make_policy("vllm"), [Program("a", turns)], 1.0, 0, CFG
    )
    assert m.makespan_s - busy.busy_s == pytest.approx(15.0)  # three 5 s tool calls
    assert busy.decode_slots == m.output_tokens - m.calls_done == 4 * 19
    # (one call at a time, of 100-104 blocks with its output; vLLM pins nothing; the chain
    # a call left is cached while the next runs on it: no free cached chain beside it)
    blocks = busy.mean_blocks()
    assert 100 <= blocks["running_blocks"] <= 104.5
    assert blocks["pinned_blocks"] == 0.0 and blocks["cached_blocks"] == 0.0


def test_the_split_names_the_last_program_its_lead_and_the_floor() -> None:
    m = Metrics()
    for program, start_s, finish_s in (("a", 0.0, 100.0), ("b", 10.0, 300.0), ("c", 50.0, 250.0)):
        m.program_started(program, start_s)
        m.program_finished(program, finish_s, think_s=start_s / 10)
    m.makespan_s, m.output_tokens = 300.0, 6000
    tally = Tally(make_policy("vllm"))
    tally.per_program["b"] = {"wait_first_s": 5.0, "wait_return_kept_s": 7.0, "preemptions": 2.0}  # type: ignore[assignment]
    busy = throughput_tail.Busy(busy_s=200.0, steps=10, decode_slots=25)
    split = throughput_tail.makespan_split(m, busy, {"a": 90.0, "b": 120.0, "c": 190.0}, tally)
    assert split["throughput_tok_s"] == 20.0
    assert (split["last_program"], split["last_start_s"], split["last_jct_s"]) == ("b", 10.0, 290.0)
    assert split["last_think_s"] == 1.0 and split["last_alone_s"] == 120.0
    assert split["last_wait_s"] == 12.0  # (waits only: preemptions are a count)
    assert split["lead_s"] == 50.0  # (after c, at 250 s)
    assert split["floor_s"] == 240.0  # (c: 50 + 190)
    assert split["idle_s"] == 100.0 and split["mean_decode_batch"] == 2.5
    assert throughput_tail.fold_jct(m, {0: {"a", "c"}, 3: {"b", "zz"}}) == {
        "jct_fold0_s": 150.0,
        "jct_fold3_s": 290.0,
    }


def test_a_split_needs_two_finished_programs() -> None:
    m = Metrics()
    m.program_started("a", 0.0)
    m.program_finished("a", 10.0)
    m.makespan_s = 10.0
    with pytest.raises(ValueError, match="2 finished programs, got 1"):
        throughput_tail.makespan_split(
            m, throughput_tail.Busy(), {"a": 10.0}, Tally(make_policy("vllm"))
        )


def test_uncapped_the_order_is_the_librarys() -> None:
    programs, hw = sessions(), hw_blocks(2500, 64, 300)
    capped = throughput_tail.make_run_policy("ttlpolicy-offload+cap=1e18")
    m, _ = throughput_tail.run_logged(hw, capped, programs, 0.2, 1, CFG)
    # (the bench's orders run without the library's skip unless they name ``+skip=K``)
    want = simulate(hw, "ttlpolicy-offload:skip=0", programs, rate_per_s=0.2, seed=1, config=CFG)
    assert m.summary() == want.summary()


def two_returns(name: str) -> dict[str, float]:
    """On a GPU that runs one call at a time, ``hog`` (a long first call) and ``light`` (a
    short one) return 0.1 s apart, hog first, while ``blocker``'s first call runs: both
    returns wait for it.  Each program's finish."""

    def prog(pid: str, output: int) -> Program:
        first = Turn(100 * 64, output, 0, 0.0, "bash")
        return Program(pid, (first, Turn(120 * 64, 8, 100, 0.5, None)))

    hw = hw_blocks(160, 64, 10_000)
    engine = Engine(hw, throughput_tail.make_run_policy(name), CFG)
    engine.add_programs(
        [(0.0, prog("hog", 1000)), (0.1, prog("light", 8)), (0.2, prog("blocker", 1000))]
    )
    m = engine.run()
    return m.program_finish_s


def test_a_cap_on_attained_service_serves_the_long_programs_return_first() -> None:
    library = two_returns("ttlpolicy-offload:admission")  # (load control off: all three run)
    assert library["light"] < library["hog"]  # least attained service first
    assert two_returns("ttlpolicy-offload:admission+cap=1e18") == library
    capped = two_returns("ttlpolicy-offload:admission+cap=0")
    assert capped["hog"] < capped["light"]  # by the returns' arrival: hog's came first
    assert two_returns("ttlpolicy-offload:admission+cap=0.05") == capped  # (light ran 0.1 s less)


def test_a_cap_above_a_threshold_or_past_an_age_holds_for_long_programs_only() -> None:
    library = two_returns("ttlpolicy-offload:admission")
    capped = two_returns("ttlpolicy-offload:admission+cap=0")
    assert capped != library
    # hog has run its 1,000-token first call, light its 8-token one: a threshold above
    # light's service and below hog's caps hog alone, which is enough to put hog first
    assert two_returns("ttlpolicy-offload:admission+cap=0@0.5") == capped
    assert two_returns("ttlpolicy-offload:admission+cap=0@1e18") == library
    # in the system since 0.0 s (hog) and 0.1 s (light): an age bound below both caps both
    assert two_returns("ttlpolicy-offload:admission+age=0") == capped
    assert two_returns("ttlpolicy-offload:admission+age=1e18") == library


def test_a_weight_on_attained_service_scales_how_long_returns_wait_for_it() -> None:
    library = two_returns("ttlpolicy-offload:admission")
    by_arrival = two_returns("ttlpolicy-offload:admission+cap=0")
    assert two_returns("ttlpolicy-offload:admission+w=1") == library
    assert two_returns("ttlpolicy-offload:admission+w=0") == by_arrival
    # hog's return came 0.1 s before light's, with ~1,000 tokens more service: a weight that
    # scales that lead below 0.1 s puts hog first, one that keeps it above does not
    assert two_returns("ttlpolicy-offload:admission+w=1e-9") == by_arrival
    assert two_returns("ttlpolicy-offload:admission+w=0.5") == library


def early_and_late(name: str) -> dict[str, float]:
    """On a GPU that runs one call at a time, ``early`` (arrives at 0.0, a 3 s tool) and
    ``late`` (0.1, a 0.5 s tool) each run a short first call; ``late`` returns first, and
    both returns wait while ``blocker``'s long first call runs.  Each program's finish."""

    def prog(pid: str, output: int, tool_s: float) -> Program:
        first = Turn(100 * 64, output, 0, 0.0, "bash")
        return Program(pid, (first, Turn(120 * 64, 8, 100, tool_s, None)))

    engine = Engine(hw_blocks(160, 64, 10_000), throughput_tail.make_run_policy(name), CFG)
    engine.add_programs([(0.0, prog("early", 8, 3.0)), (0.1, prog("late", 8, 0.5)),
                         (0.2, prog("blocker", 1000, 0.5))])  # fmt: skip
    return engine.run().program_finish_s


def test_a_start_share_ranks_a_return_by_its_programs_start() -> None:
    by_arrival = early_and_late("ttlpolicy-offload:admission+w=0")
    assert by_arrival["late"] < by_arrival["early"]  # late's return came first
    assert early_and_late("ttlpolicy-offload:admission+w=0+start=0") == by_arrival
    by_start = early_and_late("ttlpolicy-offload:admission+w=0+start=1")
    assert by_start["early"] < by_start["late"]  # early's program started first
    # late's return came ~2.5 s before early's, late started 0.1 s after it: earlier by a
    # share of their ages (~3 s and ~0.5 s) only past ~0.96 of it
    assert early_and_late("ttlpolicy-offload:admission+w=0+start=0.5") == by_arrival


# (hog has the most service of the three live programs: with a top of 1 its return ranks at
# its arrival; a top larger than the live programs, or none, exempts nobody)
@pytest.mark.parametrize(("top", "like"), [(1, "+cap=0"), (10, ""), (0, "")])
def test_the_programs_with_the_most_service_wait_for_none_of_it(top: int, like: str) -> None:
    want = two_returns(f"ttlpolicy-offload:admission{like}")
    assert two_returns(f"ttlpolicy-offload:admission+top={top}") == want


def test_uncapped_with_a_skip_the_order_is_the_skips() -> None:
    # (a holds 150 of 200 blocks for 400 steps; b's whole prompt does not fit beside it,
    # c's does: with a skip c passes b, in the capped order as in the library's)
    def prog(name: str, blocks: int, output: int) -> Program:
        return Program(name, (Turn(blocks * 64, output, 0, 0.0, None),))

    def finish(name: str) -> dict[str, float]:
        engine = Engine(hw_blocks(200, 64, 300), throughput_tail.make_run_policy(name), CFG)
        engine.add_programs([(0.0, prog("a", 150, 400)), (0.5, prog("b", 100, 20)),
                             (0.6, prog("c", 10, 20))])  # fmt: skip
        return engine.run().program_finish_s

    skipped = finish("ttlpolicy-offload:admission+skip=2")
    assert skipped["c"] < skipped["a"]
    assert finish("ttlpolicy-offload:admission+cap=1e18+skip=2") == skipped
    assert finish("ttlpolicy-offload:admission+age=1e18+skip=2") == skipped


@pytest.mark.parametrize(
    ("name", "match"),
    [("mori+cap=5", "ttlpolicy-offload only"), ("ttlpolicy-offload+cap=x", "not a number"),
     ("ttlpolicy-offload+cap=-1", "cap_s must be >= 0"),
     ("ttlpolicy-offload+age=-1", "age_s must be >= 0"),
     ("ttlpolicy-offload+w=-0.5", "weight must be >= 0"),
     ("ttlpolicy-offload+w=x", "not a number"),
     ("ttlpolicy-offload+start=1.5", "start_share must be in"),
     ("ttlpolicy-offload+start=-0.1", "start_share must be in"),
     ("ttlpolicy-offload+top=-1", "top_n must be >= 0"),
     ("ttlpolicy-offload+top=1.5", "not an integer"),
     ("ttlpolicy-offload+cap=5@x", "not a number"),
     ("ttlpolicy-offload+cap=5+skip=0", "depth must be"),
     ("ttlpolicy-offload+cap=5+skip=y", "not an integer"),
     ("ttlpolicy-offload+cap=5+turns=3", "ttlpolicy-offload only")],
)  # fmt: skip
def test_a_bad_cap_is_refused(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        throughput_tail.make_run_policy(name)
