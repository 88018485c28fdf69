"""Recording on a real vLLM engine (CPU): ``RecordingScheduler`` (stock scheduling) writes the
calls it serves into ``TTLPOLICY_RECORD``, and ``ttlpolicy compare`` on that folder gives back
the live run's calls, token counts and cached tokens (within 2 %); ``TTLScheduler`` records
the same way when the knob is set.

Prompts are random tokens (no prefix shared between programs: the simulator models reuse
within a program) whose lengths fall on the simulator's 64-token blocks, so a turn's cached
prefix is the same whole blocks in vLLM (32-token blocks) and in the simulator."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine_fixtures import recorded_programs, simulated_summary
from ttlpolicy.traces import read_trace
from vllm_engine import Engine, make_engine

pytestmark = [pytest.mark.slow, pytest.mark.engine]

NUM_BLOCKS = 201  # room for every context: nothing is evicted, as in the simulator's H100
PROGRAMS, TURNS = 4, 3
FIRST_PROMPT, OUTPUT, APPENDED = 192, 8, 56  # turn i+1's prompt: turn i's context + 56
TOOL_GAP_S = 2.5


def recording_engine(model: Path, scheduler: str, directory: Path, **env: str) -> Engine:
    mp = pytest.MonkeyPatch()
    mp.setenv("TTLPOLICY_RECORD", str(directory))
    for k, v in env.items():
        mp.setenv(k, v)
    try:
        return make_engine(model, scheduler, NUM_BLOCKS)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
) -> Iterator[tuple[Path, dict[str, int], list[float]]]:
    """A live run on RecordingScheduler: (its folder, live totals, tool gaps it saw)."""
    folder = tmp_path_factory.mktemp("recorded")
    engine = recording_engine(tiny_model, "ttlpolicy_vllm.RecordingScheduler", folder)
    rng = random.Random(7)
    vocab = len(engine.llm.get_tokenizer())

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    live = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "hit_tokens": 0}

    def served(out: Any) -> None:
        live["calls"] += 1
        live["input_tokens"] += len(out.prompt_token_ids)
        live["output_tokens"] += len(out.outputs[0].token_ids)
        live["hit_tokens"] += out.num_cached_tokens

    contexts = {f"prog-{i}": tokens(FIRST_PROMPT) for i in range(PROGRAMS)}
    gaps = []
    for turn in range(TURNS):
        for pid, prompt in contexts.items():
            last = turn == TURNS - 1
            out = engine.turn(prompt, OUTPUT, program_id=pid, tool="bash", last_turn=last)
            served(out)
            contexts[pid] = prompt + list(out.outputs[0].token_ids) + tokens(APPENDED)
        served(engine.turn(tokens(100), OUTPUT))  # an anonymous call: a one-call program
        assert engine.clock is not None
        engine.clock.advance(TOOL_GAP_S)
        gaps.append(TOOL_GAP_S)
    engine.scheduler.call_log.close()  # (writes what is buffered)
    yield folder, live, gaps
    engine.llm.llm_engine.engine_core.shutdown()


def test_compare_on_the_recording_gives_back_the_live_run(
    recorded: tuple[Path, dict[str, int], list[float]], tmp_path: Path
) -> None:
    folder, live, _ = recorded
    assert live["hit_tokens"] > 0  # (the check below is about something)
    summary = simulated_summary(folder, tmp_path)
    for key, value in live.items():
        assert summary[key] == pytest.approx(value, rel=0.02), key


def test_the_recording_holds_programs_gaps_and_no_content(
    recorded: tuple[Path, dict[str, int], list[float]],
) -> None:
    folder, live, _ = recorded
    named = recorded_programs(
        folder, calls=live["calls"], programs=PROGRAMS, turns=TURNS, anonymous=TURNS
    )
    for s in named:
        # the engine's clock moved only between rounds: each turn waited one tool gap
        assert [r.think_time_s for r in s[1:]] == [TOOL_GAP_S] * (TURNS - 1)
        assert [r.stop for r in s] == ["bash"] * TURNS
    text = "\n".join(f.read_text() for f in folder.iterdir())
    assert "prog-" not in text  # program ids are keyed digests


def test_ttl_scheduler_records_when_asked(tiny_model: Path, tmp_path: Path) -> None:
    engine = recording_engine(
        tiny_model,
        "ttlpolicy_vllm.TTLScheduler",
        tmp_path / "rec",
        TTLPOLICY_PIN_BUDGET_FRACTION="0.5",
    )
    try:
        rng = random.Random(3)
        prompt = [rng.randrange(3, 200) for _ in range(FIRST_PROMPT)]
        out1 = engine.turn(prompt, OUTPUT, program_id="p", tool="grep")
        ctx = prompt + list(out1.outputs[0].token_ids) + [5] * APPENDED
        out2 = engine.turn(ctx, OUTPUT, program_id="p", last_turn=True)
        engine.turn(prompt[:100], OUTPUT)  # an anonymous call
        rid = engine.submit(ctx, OUTPUT, program_id="q")
        engine.step()
        engine.abort(rid)  # an aborted call: buffered, not written
        engine.run()
        engine.scheduler.call_log.close()
        records = list(read_trace(tmp_path / "rec"))
    finally:
        engine.llm.llm_engine.engine_core.shutdown()
    assert [r.session_id for r in records[:2]] == [records[0].session_id] * 2
    assert [r.stop for r in records[:2]] == ["grep", "end_turn"]
    assert [r.input_tokens for r in records] == [FIRST_PROMPT, len(ctx), 100]  # (no abort)
    assert out2.num_cached_tokens == FIRST_PROMPT
    # turn 2's blocks begin with turn 1's: the prefix it reused
    assert records[1].hash_ids[: FIRST_PROMPT // 64] == records[0].hash_ids
