"""Recording on SGLang's real tree cache (CPU): with ``TTLPOLICY_RECORD`` set, the plug-in's
hook on ``UnifiedRadixCache.on_release`` writes the calls served, on stock SGLang (no backend)
and on ``--radix-cache-backend ttlpolicy``; ``ttlpolicy compare`` on that folder gives back the
live run's calls, token counts and cached tokens (SGLang's ``cached_tokens``, what ``usage``
reports) within 2 %.

SGLang caches by token (page size 1), the simulator by 64-token block: a returning turn's hit
in SGLang is its whole previous context (prompt and output), in the simulator the previous
prompt's full blocks.  Prompts here fall on 64-token blocks, so the two differ by the previous
turn's 8 output tokens on hits of about 1,100 tokens (< 1 %).  Hooks patch the whole process:
the tests patch ``on_release`` with the hook the way ``HookRegistry`` does (AROUND) and undo
it; the plug-in's own registration runs in a subprocess."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from ttlpolicy_sglang.identity import ProgramInfo
from ttlpolicy_sglang.recording import (
    INFERRED_PROGRAM_ATTR,
    TokenBlocks,
    call_log_of,
    record_on_release,
)

from conftest import FakeClock, MiniScheduler, make_scheduler
from engine_fixtures import recorded_programs, recorded_sessions, simulated_summary
from ttlpolicy.traces import read_trace

PROGRAMS, TURNS = 4, 3
FIRST_PROMPT, OUTPUT, APPENDED = 1024, 8, 56  # turn i+1's prompt: turn i's context + 56
TOOL_GAP_S = 2.5
KV_TOKENS = 8192  # room for every context: nothing is evicted, as in the simulator's H100
BENCH = Path(__file__).resolve().parents[3] / "bench"


def hooked(mp: pytest.MonkeyPatch) -> None:
    """``on_release`` wrapped by the plug-in's hook, as ``HookRegistry.apply_hooks`` does."""
    original = UnifiedRadixCache.on_release

    def on_release(cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        return record_on_release(original, cache, req, *args, **kwargs)

    mp.setattr(UnifiedRadixCache, "on_release", on_release)


def recording_scheduler(mp: pytest.MonkeyPatch, folder: Path, backend: str | None) -> Any:
    mp.setenv("TTLPOLICY_RECORD", str(folder))
    hooked(mp)
    clock = FakeClock()
    s = make_scheduler(KV_TOKENS, backend, clock if backend else None)
    log = call_log_of(s.cache)
    assert log is not None
    log.clock = clock
    return s, clock


def serve(s: MiniScheduler, prompt: list[int], output: list[int], **kw: Any) -> Any:
    req = s.submit(prompt, max_new_tokens=len(output), **kw)
    assert s.schedule() == [req]
    s.finish(req, output)
    return req


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, int]]]:
    """A live run on stock SGLang with the recording hook: (its folder, live totals)."""
    folder = tmp_path_factory.mktemp("recorded")
    rng = random.Random(7)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, 150_000) for _ in range(n)]

    live = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "hit_tokens": 0}
    with pytest.MonkeyPatch.context() as mp:
        s, clock = recording_scheduler(mp, folder, None)
        contexts = {f"prog-{i}": tokens(FIRST_PROMPT) for i in range(PROGRAMS)}
        for turn in range(TURNS):
            calls: list[tuple[list[int], dict[str, Any], str | None]] = [
                (p, dict(program=pid, tool="bash", last_turn=turn == TURNS - 1), pid)
                for pid, p in contexts.items()
            ] + [(tokens(100), {}, None)]
            for prompt, fields, pid in calls:
                out = tokens(OUTPUT)
                req = serve(s, prompt, out, **fields)
                live["calls"] += 1
                live["input_tokens"] += len(prompt)
                live["output_tokens"] += len(out)
                live["hit_tokens"] += req.cached_tokens
                if pid is not None:
                    contexts[pid] = prompt + out + tokens(APPENDED)
            clock.advance(TOOL_GAP_S)
        call_log_of(s.cache).close()  # type: ignore[union-attr]  # (writes what is buffered)
    yield folder, live


def test_compare_on_the_recording_gives_back_the_live_run(
    recorded: tuple[Path, dict[str, int]], tmp_path: Path
) -> None:
    folder, live = recorded
    assert live["hit_tokens"] > 0  # (the check below is about something)
    summary = simulated_summary(folder, tmp_path)
    for key, value in live.items():
        assert summary[key] == pytest.approx(value, rel=0.02), key


def test_the_recording_holds_programs_gaps_and_no_content(
    recorded: tuple[Path, dict[str, int]],
) -> None:
    folder, live = recorded
    named = recorded_programs(
        folder, calls=live["calls"], programs=PROGRAMS, turns=TURNS, anonymous=TURNS
    )
    for s in named:
        # the clock moved only between rounds: each turn waited one tool gap (the arrival is
        # taken from SGLang's perf_counter stamp: the test's own run time is in it)
        assert [r.think_time_s for r in s[1:]] == pytest.approx([TOOL_GAP_S] * (TURNS - 1), abs=0.5)
        assert [r.stop for r in s] == ["bash"] * TURNS
        # each turn's blocks begin with the previous turn's: the prefix it reused
        for prev, cur in itertools.pairwise(s):
            assert cur.hash_ids[: len(prev.hash_ids)] == prev.hash_ids
            assert len(cur.hash_ids) == cur.input_tokens // 64
    text = "\n".join(f.read_text() for f in folder.iterdir())
    assert "prog-" not in text  # program ids are keyed digests


def test_ttl_backend_records_too(tmp_path: Path, policy_env: pytest.MonkeyPatch) -> None:
    s, clock = recording_scheduler(policy_env, tmp_path, "ttlpolicy")
    prompt = list(range(1000, 1000 + 192))
    first = serve(s, prompt, [5] * OUTPUT, program="p", tool="grep")
    clock.advance(1.0)
    ctx = prompt + [5] * OUTPUT + list(range(5000, 5000 + APPENDED))
    second = serve(s, ctx, [6] * OUTPUT, program="p", last_turn=True)
    aborted = s.submit(list(range(9000, 9100)), program="q")
    s.abort_waiting(aborted)  # (never released: SGLang's queued abort)
    running = s.submit(list(range(9200, 9300)), program="r")
    assert s.schedule() == [running]
    s.abort_running(running)  # released, not recorded
    call_log_of(s.cache).close()  # type: ignore[union-attr]
    records = list(read_trace(tmp_path))
    assert [r.session_id for r in records] == [records[0].session_id] * 2
    assert [r.stop for r in records] == ["grep", "end_turn"]
    assert [r.input_tokens for r in records] == [192, len(ctx)]
    assert (first.cached_tokens, second.cached_tokens) == (0, 192 + OUTPUT)
    assert records[1].hash_ids[:3] == records[0].hash_ids
    assert records[1].think_time_s == pytest.approx(1.0, abs=0.5)


def test_an_inferred_program_is_recorded_as_its_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that names no program but that the adapter linked to one (the tracker sets
    ``INFERRED_PROGRAM_ATTR``) is recorded as that program's call; one without is its own."""
    s, _ = recording_scheduler(monkeypatch, tmp_path, None)
    linked = ProgramInfo("\x00linked:1", False, None)
    for i in range(3):
        req = s.submit(list(range(100 * i, 100 * i + 130)), max_new_tokens=2)
        if i < 2:
            setattr(req, INFERRED_PROGRAM_ATTR, linked)
        assert s.schedule() == [req]
        s.finish(req, [1, 2])
    call_log_of(s.cache).close()  # type: ignore[union-attr]
    sessions = [len(calls) for calls in recorded_sessions(tmp_path).values()]
    assert sorted(sessions) == [1, 2]


def test_unset_knob_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TTLPOLICY_RECORD", raising=False)
    hooked(monkeypatch)
    s = make_scheduler(1024, None, None)
    serve(s, list(range(100, 300)), [1, 2])
    assert call_log_of(s.cache) is None
    assert list(tmp_path.iterdir()) == []


def test_token_blocks_are_chained_prefix_digests() -> None:
    a = list(range(64 * 3 + 10))
    b = a[:128] + [7] * 64
    ta, tb = TokenBlocks(a), TokenBlocks(b)
    assert (len(ta), len(tb)) == (3, 3)  # full blocks only
    assert ta[:2] == tb[:2] and ta[2] != tb[2]
    # a block's digest covers its prefix: the same block after a different prefix differs
    c = [9] * 64 + a[64:128]
    assert TokenBlocks(c)[1] != ta[1]
    assert len(set(ta[:])) == 3


SCRIPT = r"""
import json, sys
import sglang_engine as testing
from sglang.srt.plugins import load_plugins
from ttlpolicy_sglang.recording import call_log_of
load_plugins()
s = testing.make_scheduler(512, None, None)  # stock SGLang: no --radix-cache-backend
req = s.submit(testing.tokens(100, 130), program="agent", tool="bash")
assert s.schedule() == [req]
s.finish(req, testing.tokens(1000, 4))
call_log_of(s.cache).close()
print("RESULT " + json.dumps(call_log_of(s.cache).recorder.stats()))
"""


def test_the_plugin_hooks_recording_when_the_knob_is_set(tmp_path: Path) -> None:
    env = {**os.environ, "TTLPOLICY_RECORD": str(tmp_path / "rec")}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH), env.get("PYTHONPATH", "")])
    got = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=240
    )
    assert got.returncode == 0, got.stderr[-3000:]
    line = next(x for x in got.stdout.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[7:])["record_calls"] == 1
    [record] = list(read_trace(tmp_path / "rec"))
    assert (record.input_tokens, record.output_tokens, record.stop) == (130, 4, "bash")
    assert len(record.hash_ids) == 2
