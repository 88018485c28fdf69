"""What the two stand-in engines (``vllm_engine.py``, ``sglang_engine.py``) share: the clock a
test moves, and the policy the adapters' tests pin with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: A policy that pins whenever the budget allows: a cold-start pin that clearly pays (a miss
#: costs 100 s), short tool calls, and no prefill fitting on the fake clock's zero-length steps.
TEST_POLICY = (
    '{"prefill_base_s": 100.0, "prior_mean_s": 1.0, "max_ttl_s": 30.0,'
    ' "min_prefill_samples": 1048576}'
)


class FakeClock:
    """The adapter's clock, moved by the test (pins expire when the test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def simulated_summary(folder: Path, workdir: Path) -> dict[str, Any]:
    """What ``ttlpolicy compare`` (stock vLLM's policy, 4 programs in flight) gives on a
    recording folder: its summary (calls, input, output and hit tokens among others)."""
    from ttlpolicy.cli import main

    out = workdir / "compare.json"
    argv = ["compare", "--trace", str(folder), "--policies", "vllm", "--concurrency", "4"]
    if main([*argv, "--json", str(out)]) != 0:
        raise AssertionError(f"ttlpolicy compare failed on {folder}")
    summary: dict[str, Any] = json.loads(out.read_text())["results"][0]["summary"]
    return summary


def recorded_sessions(folder: Path) -> dict[str, list[Any]]:
    """The calls of a recording folder, by program (session), in order."""
    from ttlpolicy.traces import read_trace

    sessions: dict[str, list[Any]] = {}
    for r in read_trace(folder):
        sessions.setdefault(r.session_id, []).append(r)
    return sessions


def recorded_programs(
    folder: Path, *, calls: int, programs: int, turns: int, anonymous: int
) -> list[list[Any]]:
    """The named programs of a recording folder (each a list of its calls), checked against
    what the test served: ``calls`` calls, ``programs`` named programs of ``turns`` calls each,
    and ``anonymous`` one-call programs."""
    sessions = recorded_sessions(folder)
    assert sum(len(s) for s in sessions.values()) == calls
    named = [s for s in sessions.values() if len(s) > 1]
    assert len(named) == programs and all(len(s) == turns for s in named)
    assert len(sessions) == programs + anonymous  # each anonymous call its own program
    return named
