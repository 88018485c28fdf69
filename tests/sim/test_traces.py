"""Trace readers: the real public traces (full, or the excerpts in tests/data) and small
malformed files."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import pytest

from trace_files import AZURE_CONV, MOONCAKE, MOONCAKE_REQUESTS, SESSIONS
from ttlpolicy.traces import (
    MAX_TEXT_CHARS,
    HashScopes,
    TraceFormatError,
    TraceRecord,
    read_trace,
    sample_dir,
)

# ---- real files -------------------------------------------------------------------------


def test_mooncake_records_are_typed_and_ordered():
    n, last = 0, -1.0
    for rec in read_trace(MOONCAKE):
        assert isinstance(rec, TraceRecord)
        assert rec.session_id == "" and rec.hash_scope == "" and rec.block_tokens == 512
        # In this trace every request has one hash per started 512-token block.
        assert len(rec.hash_ids) == math.ceil(rec.input_tokens / 512)
        assert rec.arrival_s >= last
        last = rec.arrival_s
        n += 1
    assert n == MOONCAKE_REQUESTS
    assert last <= 3600.0  # one hour


def test_azure_records_start_at_zero_and_carry_no_hashes():
    recs = list(read_trace(AZURE_CONV))
    assert recs[0].arrival_s == 0.0
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(recs))
    assert all(r.hash_ids == () and r.block_tokens == 0 for r in recs)
    assert all(r.input_tokens >= 0 and r.output_tokens >= 0 for r in recs)


def test_agentic_session_with_subagents():
    path = SESSIONS / "trace_0004.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    subagents = [r for r in doc["requests"] if r.get("type") == "subagent"]
    main = [r for r in doc["requests"] if r.get("type") != "subagent"]
    recs = list(read_trace(path))
    top = [r for r in recs if r.session_id == doc["id"]]
    assert [r.input_tokens for r in top] == [r["in"] for r in main]
    assert [r.index for r in top] == list(range(len(main)))
    for sub in subagents:
        mine = [r for r in recs if r.session_id == f"{doc['id']}/{sub['agent_id']}"]
        assert len(mine) == len(sub["requests"])
        # Sub-agent times are shifted to the parent's clock.
        assert mine[0].arrival_s == pytest.approx(sub["t"] + sub["requests"][0]["t"])
    # One file, one hash scope, shared by its sub-agents.
    assert {r.hash_scope for r in recs} == {doc["id"]}
    # Each session's shared prefix is its own tools + system prompt (a sub-agent's are its).
    assert {r.common_prefix_tokens for r in top} == {doc["tool_tokens"] + doc["system_tokens"]}
    for sub in subagents:
        own = {r.common_prefix_tokens for r in recs if r.session_id.endswith(sub["agent_id"])}
        assert own == {sub["tool_tokens"] + sub["system_tokens"]}
    assert subagents[0]["tool_tokens"] != doc["tool_tokens"]  # (the case that tells them apart)


def test_a_subagent_without_its_own_prefix_has_its_parents(tmp_path):
    req = {"t": 0, "in": 128, "out": 8, "hash_ids": [1, 2]}
    sub = {"type": "subagent", "agent_id": "a", "t": 1, "requests": [req]}
    doc = {"id": "s", "block_size": 64, "tool_tokens": 100, "system_tokens": 20}
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**doc, "requests": [req, sub]}))
    assert [r.common_prefix_tokens for r in read_trace(path)] == [120, 120]
    sub.update(tool_tokens=40, system_tokens=2)
    path.write_text(json.dumps({**doc, "requests": [req, sub]}))
    assert [r.common_prefix_tokens for r in read_trace(path)] == [120, 42]


def test_shipped_sample_sessions_read():
    recs = list(read_trace(sample_dir()))
    assert len({r.hash_scope for r in recs}) == 16
    assert all(r.block_tokens == 64 and r.hash_scope for r in recs)
    assert {r.stop for r in recs} <= {"tool_use", "end_turn", None}


def test_hash_scopes_keep_files_apart(tmp_path):
    for name in ("a", "b"):
        _write_session(tmp_path / f"{name}.json", {"id": name, "requests": [_req(hash_ids=[1, 2])]})
    scopes = HashScopes()
    a, b = (scopes.hash_ids(r) for r in read_trace(tmp_path))
    assert a != b and len(set(a) | set(b)) == 4
    # The mapping is stable and keeps equal ids equal within a scope.
    assert scopes.hash_ids(next(read_trace(tmp_path / "a.json"))) == a
    glob = TraceRecord("", 0, 0.0, 1, 1, (5, 6), 64, None, 0.0, None)
    assert scopes.hash_ids(glob) == (5, 6)
    bad = TraceRecord("", 0, 0.0, 1, 1, (1 << 32,), 64, None, 0.0, None, hash_scope="x")
    with pytest.raises(ValueError, match="outside"):
        scopes.hash_ids(bad)


# ---- streaming -------------------------------------------------------------------------


def test_jsonl_is_streamed(tmp_path):
    """Records before a broken line come out before the error: the file is read lazily."""
    path = tmp_path / "t.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})
    path.write_text(good + "\n" + good + "\n{not json\n")
    it = read_trace(path)
    assert len(list(itertools.islice(it, 2))) == 2
    with pytest.raises(TraceFormatError):
        next(it)


def test_csv_is_streamed(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,3,4\nbroken\n"
    )
    it = read_trace(path)
    assert next(it).input_tokens == 3
    with pytest.raises(TraceFormatError, match="line 3"):
        next(it)


# ---- malformed files: the error names file, record and field ---------------------------


def _req(**over):
    req = {"t": 0.0, "in": 100, "out": 5, "hash_ids": [1, 2], "stop": "tool_use"}
    req.update(over)
    return req


def _write_session(path: Path, doc: dict) -> Path:
    doc = {"block_size": 64, "hash_id_scope": "local", **doc}
    path.write_text(json.dumps(doc))
    return path


def _moon(**over):
    obj = {"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    obj.update(over)
    return json.dumps(obj)


@pytest.mark.parametrize(
    "line, field",
    [
        ("{oops", "(json)"),
        ("[1, 2]", "(record)"),
        (_moon(timestamp=-5), "timestamp"),
        (_moon(timestamp=None), "timestamp"),
        (_moon(timestamp=float("nan")), "timestamp"),
        (_moon(input_length="10"), "input_length"),
        (_moon(output_length=1.5), "output_length"),
        (_moon(hash_ids="1,2"), "hash_ids"),
        (_moon(hash_ids=[1, True]), "hash_ids[1]"),
        (_moon(hash_ids=[1, 2**63]), "hash_ids[1]"),
    ],
)
def test_malformed_mooncake_line(tmp_path, line, field):
    path = tmp_path / "m.jsonl"
    path.write_text(_moon() + "\n\n" + line + "\n")
    with pytest.raises(TraceFormatError) as e:
        list(read_trace(path))
    assert e.value.path == str(path) and e.value.record == "line 3" and e.value.field == field
    assert str(path) in str(e.value) and "line 3" in str(e.value) and field in str(e.value)


@pytest.mark.parametrize(
    "doc, record, field",
    [
        ({"id": "s", "requests": [_req(), _req(**{"in": -1})]}, "requests[1]", "in"),
        ({"id": "s", "requests": [_req(t="x")]}, "requests[0]", "t"),
        ({"id": "s", "requests": [_req(hash_ids=None)]}, "requests[0]", "hash_ids"),
        ({"id": "s", "requests": [_req(think_time=-1)]}, "requests[0]", "think_time"),
        ({"id": "s", "requests": ["x"]}, "requests[0]", "(record)"),
        ({"id": "s", "requests": {}}, "session", "requests"),
        (
            {"id": "s", "requests": [{"type": "subagent", "t": 1, "requests": 5}]},
            "requests[0]",
            "requests",
        ),
        (
            {
                "id": "s",
                "requests": [
                    _req(),
                    {"type": "subagent", "t": 3, "requests": [_req(), _req(out=None)]},
                ],
            },
            "requests[1].requests[1]",
            "out",
        ),
    ],
)
def test_malformed_session(tmp_path, doc, record, field):
    path = _write_session(tmp_path / "s.json", doc)
    with pytest.raises(TraceFormatError) as e:
        list(read_trace(path))
    assert (e.value.path, e.value.record, e.value.field) == (str(path), record, field)


def test_session_without_block_size(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"id": "s", "requests": []}))
    with pytest.raises(TraceFormatError, match="block_size"):
        list(read_trace(path))


@pytest.mark.parametrize(
    "text, record, field",
    [
        ("TS,Context,Gen\n", "line 1", "(header)"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1\n", "line 2", "(record)"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "line 2", "TIMESTAMP"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,-2\n",
            "line 2",
            "GeneratedTokens",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:46,1,2\n2023-11-16 18:15:45,1,2\n",
            "line 3",
            "TIMESTAMP",
        ),
    ],
)
def test_malformed_csv(tmp_path, text, record, field):
    path = tmp_path / "a.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as e:
        list(read_trace(path))
    assert (e.value.path, e.value.record, e.value.field) == (str(path), record, field)


def test_truncated_gzip_names_the_file(tmp_path):
    data = gzip.compress(("\n".join(_moon() for _ in range(2000)) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="cannot be decoded") as e:
        list(read_trace(path))
    assert e.value.path == str(path) and e.value.field == "(file)"


def test_bad_utf8_names_the_line(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(_moon().encode() + b"\n\xff\xfe\n")
    with pytest.raises(TraceFormatError, match="cannot be decoded"):
        list(read_trace(path))


def test_untrusted_text_is_bounded(tmp_path):
    long = "x" * 100_000
    path = _write_session(tmp_path / "s.json", {"id": long, "requests": [_req(stop=long)]})
    (rec,) = read_trace(path)
    assert (
        rec.stop is not None
        and len(rec.stop) == MAX_TEXT_CHARS
        and len(rec.session_id) == MAX_TEXT_CHARS
    )


def test_unknown_format_and_empty_dir(tmp_path):
    (tmp_path / "x.parquet").write_text("")
    with pytest.raises(ValueError, match="format"):
        list(read_trace(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="no session files"):
        list(read_trace(tmp_path))
