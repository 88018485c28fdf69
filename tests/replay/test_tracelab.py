"""TraceLab round traces (tests/data/tracelab, CC BY 4.0: tests/data/NOTICE) read by --trace:
the reader against the raw rows, the simulator and the replay on them, malformed lines."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from pathlib import Path

import pytest
from fake_server import serve

from trace_files import DATA, MOONCAKE_EXCERPT
from ttlpolicy.cli import main
from ttlpolicy.traces import (
    TRACELAB_BLOCK_TOKENS,
    TraceFormatError,
    detect_format,
    read_trace,
    read_tracelab,
)

TRACELAB = DATA / "tracelab" / "round_trace.jsonl.gz"
BT = TRACELAB_BLOCK_TOKENS


def _rows() -> list[dict]:
    with gzip.open(TRACELAB, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def test_format_is_told_by_content() -> None:
    assert detect_format(TRACELAB) == "tracelab"
    assert detect_format(MOONCAKE_EXCERPT) == "mooncake"  # also .jsonl


def test_rounds_reuse_the_recorded_prefix_and_append_new_blocks() -> None:
    rows, recs = _rows(), list(read_trace(TRACELAB))
    assert len(recs) == len(rows) == 19
    assert len({r.session_id for r in recs}) == 2
    prev: dict[str, tuple[dict, tuple[int, ...]]] = {}
    for row, rec in zip(rows, recs, strict=True):
        assert rec.input_tokens == row["input_tokens_total"]
        assert rec.output_tokens == row["output_tokens"]
        assert len(rec.hash_ids) == row["input_tokens_total"] // BT
        sid = row["session_id"]
        if sid in prev:
            prow, pids = prev[sid]
            want = min(row["prefix_tokens"], row["input_tokens_total"]) // BT
            want = min(want, prow["input_tokens_total"] // BT)
            k = 0
            while k < min(len(pids), len(rec.hash_ids)) and pids[k] == rec.hash_ids[k]:
                k += 1
            assert k == want  # the recorded prefix, then blocks of its own
            earlier = {
                h for r in recs[: recs.index(rec)] if r.session_id == sid for h in r.hash_ids
            }
            assert not set(rec.hash_ids[want:]) & earlier  # appended tokens are new blocks
        prev[sid] = (row, rec.hash_ids)


def test_tool_gaps_are_the_tools_wall_time() -> None:
    """A round that follows tool calls and starts with their results is issued when the last
    result is in: its think time is the tools' span after the previous round's last event."""
    rows, recs = _rows(), list(read_trace(TRACELAB))
    checked = 0
    for i in range(1, len(rows)):
        row, prow = rows[i], rows[i - 1]
        same = row["session_id"] == prow["session_id"]
        inputs = [
            e for e in row["timing_events"] if e["event_type"] in ("user_message", "tool_result")
        ]
        if not (same and prow["tools"] and all(e["event_type"] == "tool_result" for e in inputs)):
            continue
        last_result = max(_t(t["result_at"]) for t in prow["tools"])
        prev_end = max(_t(e["timestamp"]) for e in prow["timing_events"])
        assert recs[i].think_time_s == pytest.approx(max(0.0, last_result - prev_end), abs=1e-6)
        assert recs[i - 1].stop == "tool_use"
        checked += 1
    assert checked >= 8
    assert recs[0].think_time_s == 0.0 and recs[0].arrival_s == 0.0


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "round_trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("line3", "field"),
    [
        ("{not json", "(json)"),
        ("[1, 2]", "(record)"),
        ("DROP prefix_tokens", "prefix_tokens"),
        ("round out of order", "round_index"),
        ("timestamp yesterday", "timing_events[0].timestamp"),
    ],
)
def test_a_malformed_line_is_named(tmp_path: Path, line3: str, field: str) -> None:
    rows = _rows()
    lines = [json.dumps(r) for r in rows[:4]]
    bad = dict(rows[2])
    if line3 == "DROP prefix_tokens":
        del bad["prefix_tokens"]
        lines[2] = json.dumps(bad)
    elif line3 == "round out of order":
        bad["round_index"] = 0  # after round 1 of its session
        lines[2] = json.dumps(bad)
    elif line3 == "timestamp yesterday":
        bad["timing_events"] = [dict(bad["timing_events"][0], timestamp="yesterday")]
        lines[2] = json.dumps(bad)
    else:
        lines[2] = line3
    path = _write(tmp_path, lines)
    with pytest.raises(TraceFormatError) as e:
        list(read_tracelab(path))
    assert str(path) in str(e.value) and "line 3" in str(e.value) and e.value.field == field


def test_compare_simulates_the_tracelab_sessions(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    argv = ["compare", "--trace", str(TRACELAB), "--policies", "vllm,ttlpolicy"]
    assert main([*argv, "--concurrency", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["results"]] == ["vllm", "ttlpolicy"]
    for r in doc["results"]:
        assert r["summary"]["programs"] == 2  # both sessions, as programs (not open loop)
        assert r["summary"]["hit_rate"] > 0.5  # the recorded prefixes are reused


def test_replay_plays_the_tracelab_sessions(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    with serve() as fake:
        argv = ["replay", "--endpoint", fake.url, "--trace", str(TRACELAB), "--time-scale", "0"]
        assert main([*argv, "--max-output-tokens", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    s = doc["results"][0]["summary"]
    assert s["programs_finished"] == 2 and s["calls"] == 19
    assert [len(x.words) for x in fake.received] != []
    assert sorted(len(x.words) for x in fake.received) == sorted(
        r["input_tokens_total"] for r in _rows()
    )
    # the server caches what the recorded prefixes allow (its blocks divide the trace's)
    assert s["hit_rate"] == pytest.approx(s["ideal_hit_rate"], abs=0.01)
    assert s["hit_rate"] > 0.5


def test_replay_names_a_malformed_trace_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows()
    path = _write(tmp_path, [json.dumps(rows[0]), '{"session_id": "x"'])
    with serve() as fake:
        rc = main(["replay", "--endpoint", fake.url, "--trace", str(path)])
        assert fake.received == []  # refused before any request
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}: line 2" in err
