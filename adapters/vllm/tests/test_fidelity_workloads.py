"""``bench/fidelity.py --workload``: a named workload sets flag defaults, an explicit flag
still wins, and ``contended`` (and its longer forms) fits its contexts in the engine's model
length; ``contended-many`` keeps ``contended-long``'s calls and contention with four times the
calls, and both sides start its programs in the same order."""

from __future__ import annotations

import pytest


@pytest.fixture
def fidelity(bench):
    return bench("fidelity")


def test_contended_sets_its_defaults_and_flags_override(fidelity) -> None:
    plain = fidelity.parse_args([])
    args = fidelity.parse_args(["--workload", "contended"])
    for flag, value in fidelity.WORKLOADS["contended"].items():
        assert getattr(args, flag) == value != getattr(plain, flag)
    assert args.programs == plain.programs  # what the workload does not name stays
    assert fidelity.parse_args(["--workload", "contended", "--blocks", "90"]).blocks == 90
    assert fidelity.parse_args(["--blocks", "90", "--workload", "contended"]).blocks == 90


@pytest.mark.parametrize("workload", ["contended", "contended-long", "contended-many"])
def test_contended_contexts_fit_the_model_length(fidelity, workload) -> None:
    """Every prompt and its output fit ``--max-model-len`` (else vLLM refuses the request
    mid-run), and the programs together need more KV than the cache holds (they compete)."""
    args = fidelity.parse_args(["--workload", workload])
    sessions = fidelity.workload_sessions(args)
    assert len(sessions) == args.programs
    longest = 0
    for turns in sessions:
        ctx = 0
        for t in turns:
            ctx += t.new_tokens
            longest = max(longest, ctx + t.output_tokens)
            ctx += t.output_tokens
    assert longest <= args.max_model_len
    last = [sum(t.new_tokens + t.output_tokens for t in turns) for turns in sessions]
    in_flight = args.concurrency or args.programs
    assert sum(sorted(last)[:in_flight]) > 2 * args.blocks * args.block_size


def test_contended_long_has_three_times_the_calls(fidelity) -> None:
    """One call must be worth about 1 pt of hit rate, not 2–3 (the point of the workload)."""

    def calls(workload: str) -> int:
        a = fidelity.parse_args(["--workload", workload])
        sessions = fidelity.load_sessions(a.programs, a.turns, a.max_context, a.max_out,
                                          a.time_scale, a.max_gap_s)  # fmt: skip
        return sum(len(turns) for turns in sessions)

    assert calls("contended-long") >= 3 * calls("contended")


def _sessions(fidelity, workload: str, *flags: str):
    return fidelity.workload_sessions(fidelity.parse_args(["--workload", workload, *flags]))


def test_contended_many_is_contended_long_four_times_over(fidelity) -> None:
    """Four times the calls, each of a session ``contended-long`` scales the same way (the
    same per-call shape), six programs in flight on the same cache (the same contention)."""
    long_args = fidelity.parse_args(["--workload", "contended-long"])
    many_args = fidelity.parse_args(["--workload", "contended-many"])
    long, many = _sessions(fidelity, "contended-long"), _sessions(fidelity, "contended-many")
    assert sum(map(len, many)) == 4 * sum(map(len, long))
    assert many[: len(long)] == long
    every = _sessions(fidelity, "contended-long", "--programs", "99")
    assert all(s in every for s in many)  # a repeat is one of the shipped 18-turn sessions
    assert many_args.concurrency == long_args.programs
    for flag in ("blocks", "block_size", "token_budget", "max_seqs", "max_context", "max_out"):
        assert getattr(many_args, flag) == getattr(long_args, flag)


def _hardware(fidelity, args):
    from ttlpolicy.sim.hardware import GPUSpec, Hardware, Line, ModelSpec, StepModel

    settings = fidelity.settings_from(args)
    model = ModelSpec("tiny", 2e7, 8, 512, 8, 8, 64, dtype_bytes=4)
    prefill, decode = Line(20e-3, 130e-6, 80e-12, 0.0, 0.0), Line(8e-3, 0.0, 4e-7, 4e-7, 0.0)
    kv = float(args.blocks * settings.block_size * model.kv_bytes_per_token)
    steps = StepModel(prefill, prefill, decode)
    return settings, Hardware(model, GPUSpec("cpu", 0.0, 0.0, 24e9, 1e10), steps, kv)


@pytest.mark.parametrize("policy", ["vllm", "ttlpolicy:adapter"])
def test_the_engine_starts_programs_in_the_simulators_order(fidelity, policy) -> None:
    """``arrival_order`` (what the engine's replay follows) is the order in which the
    simulator's first calls are issued, and the simulator never has more than
    ``--concurrency`` programs in flight."""
    args = fidelity.parse_args(["--workload", "contended-many"])
    sessions = fidelity.workload_sessions(args)
    settings, hw = _hardware(fidelity, args)
    calls: list[dict] = []
    programs = fidelity.sim_programs(sessions, settings.block_size)
    fidelity.replay_sim(hw, policy, programs, settings, calls, args.concurrency)
    assert len(calls) == sum(map(len, sessions))
    first = {c["program"]: c["issue_s"] for c in calls if c["turn"] == 0}
    last = {c["program"]: c["finish_s"] for c in calls if c["turn"] == args.turns - 1}
    started = sorted(first, key=first.__getitem__)
    order = [f"prog{i}" for i in fidelity.arrival_order(sessions, args.concurrency)]
    n = args.concurrency
    assert set(started[:n]) == set(order[:n]) and started[n:] == order[n:]
    assert sorted(order) == sorted(first) and len(order) == args.programs
    for t in first.values():  # at each start: the programs in flight, the starting one too
        assert sum(first[q] <= t < last[q] for q in first) <= args.concurrency


def test_the_engine_queue_starts_the_next_program_when_one_ends(fidelity) -> None:
    """``ProgramQueue``: the first ``concurrency`` of the order are due at once (listed in
    that order), the rest not until a program ends, each at that instant and in order; a
    turn that is not a program's last starts nothing; without ``concurrency`` every program
    is due at once."""
    import random

    turns = [fidelity.ReplayTurn(10, 2, 0.5)] * 2
    programs = [fidelity.Program(f"prog{i}", turns, random.Random(i)) for i in range(4)]
    queue = fidelity.ProgramQueue(programs, [2, 0, 3, 1], 2)
    assert [p.due_s <= 0.0 for p in programs] == [True, False, True, False]
    # the replay issues turns due at one instant in this list's order: 2 before 0 at 0
    assert [p.pid for p in queue.programs] == ["prog2", "prog0", "prog3", "prog1"]
    fidelity.finish_turn(programs[2], [1, 2], 1.0)  # its first turn: nothing starts
    queue.finished(programs[2], 1.0)
    assert programs[3].due_s == programs[1].due_s == float("inf")
    fidelity.finish_turn(programs[2], [1, 2], 2.0)  # its last turn: the next (3) starts
    queue.finished(programs[2], 2.0)
    assert programs[3].due_s == 2.0 and programs[1].due_s == float("inf")
    fidelity.finish_turn(programs[0], [1], 3.0)
    fidelity.finish_turn(programs[0], [1], 4.0)
    queue.finished(programs[0], 4.0)
    assert programs[1].due_s == 4.0
    fresh = [fidelity.Program(f"prog{i}", turns, random.Random(i)) for i in range(3)]
    fidelity.ProgramQueue(fresh, [0, 1, 2], None)
    assert all(p.due_s == 0.0 for p in fresh)
