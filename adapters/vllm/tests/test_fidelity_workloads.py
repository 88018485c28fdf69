"""``bench/fidelity.py --workload``: a named workload sets flag defaults, an explicit flag
still wins, and ``contended`` (and its longer form) fits its contexts in the engine's model
length."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def fidelity(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))  # it imports its neighbours in bench/ by name
    import fidelity

    return fidelity


def test_contended_sets_its_defaults_and_flags_override(fidelity) -> None:
    plain = fidelity.parse_args([])
    args = fidelity.parse_args(["--workload", "contended"])
    for flag, value in fidelity.WORKLOADS["contended"].items():
        assert getattr(args, flag) == value != getattr(plain, flag)
    assert args.programs == plain.programs  # what the workload does not name stays
    assert fidelity.parse_args(["--workload", "contended", "--blocks", "90"]).blocks == 90
    assert fidelity.parse_args(["--blocks", "90", "--workload", "contended"]).blocks == 90


@pytest.mark.parametrize("workload", ["contended", "contended-long"])
def test_contended_contexts_fit_the_model_length(fidelity, workload) -> None:
    """Every prompt and its output fit ``--max-model-len`` (else vLLM refuses the request
    mid-run), and the programs together need more KV than the cache holds (they compete)."""
    args = fidelity.parse_args(["--workload", workload])
    sessions = fidelity.load_sessions(args.programs, args.turns, args.max_context,
                                      args.max_out, args.time_scale, args.max_gap_s)  # fmt: skip
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
    assert sum(last) > 2 * args.blocks * args.block_size


def test_contended_long_has_three_times_the_calls(fidelity) -> None:
    """One call must be worth about 1 pt of hit rate, not 2–3 (the point of the workload)."""

    def calls(workload: str) -> int:
        a = fidelity.parse_args(["--workload", workload])
        sessions = fidelity.load_sessions(a.programs, a.turns, a.max_context, a.max_out,
                                          a.time_scale, a.max_gap_s)  # fmt: skip
        return sum(len(turns) for turns in sessions)

    assert calls("contended-long") >= 3 * calls("contended")
