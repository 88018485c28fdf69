"""`ttlpolicy replay --warm-prefix`: each program's first tokens (its session's tool definitions
and system prompt) are one prefix shared by all programs, sent once before the run, so every
program's first call finds it cached (as kv-cache-tester's replay warms them)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from fake_server import Behaviour, serve

from trace_files import DATA
from ttlpolicy.cli import main
from ttlpolicy.replay import Client, Options, Replay, load_programs, summary
from ttlpolicy.traces import TraceFormatError, read_trace

B = 64  # the session files' block


def _session(folder: Path, name: str, tool: int, system: int, calls: list[int]) -> None:
    """A session file: calls of ``n`` full blocks, each extending the previous (local ids)."""
    doc = {
        "id": name,
        "block_size": B,
        "hash_id_scope": "local",
        "tool_tokens": tool,
        "system_tokens": system,
        "requests": [
            {"t": float(i), "type": "n", "in": n * B, "out": 2, "hash_ids": list(range(1, n + 1))}
            for i, n in enumerate(calls)
        ],
    }
    with gzip.open(folder / f"{name}.json.gz", "wt") as f:
        json.dump(doc, f)


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    _session(folder, "a", 100, 60, [4, 5])  # 160 tokens: 2 whole blocks shared
    _session(folder, "b", 200, 0, [4])  # 3 blocks
    return folder


def _play(folder: Path, warm: str | int | None) -> tuple[list[Any], Any, Any]:
    w = load_programs(folder, max_programs=8, max_context=4096, warm_prefix=warm)
    with serve() as fake:
        r = Replay(Client(fake.url), Options(model="fake-model", duration_s=60.0))
        warmed = r.warm_up(w.warm_blocks, B)
        res = r.run_closed(w.closed(seed=0), n=1)
    assert res.stopped is None and not res.errors
    return fake.received, warmed, res


def _first_calls(received: list[Any]) -> dict[str, Any]:
    """Each program's first call, by program id."""
    got: dict[str, Any] = {}
    for x in received:
        ident = x.body.get("vllm_xargs")
        if ident is not None:
            got.setdefault(ident["program_id"], x)
    return got


def test_the_warm_prefix_is_sent_once_and_every_first_call_finds_it(sessions: Path) -> None:
    received, warmed, res = _play(sessions, "trace")
    warm = received[0]
    assert "vllm_xargs" not in warm.body and warm.body["max_tokens"] == 1  # anonymous, short
    assert len(warm.words) == 3 * B == warmed.input_tokens  # the longest shared prefix
    first = _first_calls(received[1:])
    a, b = first["a"], first["b"]
    # each program begins with as much of it as its own tools + system prompt cover
    assert a.words[: 2 * B] == warm.words[: 2 * B] and a.words[2 * B] != warm.words[2 * B]
    assert b.words[: 3 * B] == warm.words
    assert (a.cached_tokens, b.cached_tokens) == (2 * B, 3 * B)  # the server had it
    # the run's yardstick counts the warm-up as sent, and the warm-up is not a call of the run
    s = summary(res)
    assert s["calls"] == 3 and s["ideal_hit_rate"] == pytest.approx(s["hit_rate"])


def test_without_it_programs_share_nothing(sessions: Path) -> None:
    received, warmed, _ = _play(sessions, None)
    assert warmed is None and len(received) == 3
    first = _first_calls(received)
    assert first["a"].words[:B] != first["b"].words[:B]
    assert (first["a"].cached_tokens, first["b"].cached_tokens) == (0, 0)


def test_a_number_of_tokens_is_the_same_prefix_for_all(sessions: Path) -> None:
    w = load_programs(sessions, max_programs=8, max_context=4096, warm_prefix=150)
    assert w.warm_blocks == 2  # whole blocks: a partial one is each session's own
    assert {c.common_blocks for p in w.programs for c in p.calls} == {2}


def test_cli_warm_prefix_runs_and_reports(sessions: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    with serve() as a, serve(Behaviour()) as b:
        argv = ["replay", "--endpoint", a.url, "--ab", b.url, "--trace", str(sessions),
                "--concurrency", "1", "--time-scale", "0", "--warm-prefix", "trace"]  # fmt: skip
        assert main([*argv, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["warm_prefix_tokens"] == 3 * B
    for r, server in zip(doc["results"], (a, b), strict=True):
        assert r["warm_up"]["tokens"] == 3 * B and r["warm_up"]["error"] is None
        assert len(server.received[0].words) == 3 * B  # each server warmed before its run


def test_a_trace_without_a_shared_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="names no shared prefix"):
        load_programs(
            DATA / "tracelab" / "round_trace.jsonl.gz",
            max_programs=2,
            max_context=4096,
            warm_prefix="trace",
        )


def test_a_bad_tool_tokens_field_names_itself(tmp_path: Path) -> None:
    _session(tmp_path, "bad", -1, 0, [2])
    with pytest.raises(TraceFormatError, match="tool_tokens"):
        list(read_trace(tmp_path / "bad.json.gz"))
