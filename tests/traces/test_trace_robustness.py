"""Trace readers on hostile or damaged input (audit): every failure is a TraceFormatError
naming file, line and field, read in bounded memory; a recording's torn last line (an engine
killed mid-write) is skipped; an unreadable cache entry is rebuilt."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pytest

from ttlpolicy.traces import TraceFormatError, read_trace, recording, records, sample_dir
from ttlpolicy.traces import cache as trace_cache

HEADER = '{"format":"ttlpolicy-record","version":1,"recording":"r1","block_size":64}\n'
MOONCAKE = '{"timestamp":0,"input_length":512,"output_length":1,"hash_ids":[1]}\n'


def call_line(t: int, program: str | None = "p") -> str:
    prog = "null" if program is None else f'"{program}"'
    return (
        f'{{"t":{t}.0,"end":{t}.5,"program":{prog},"tenant":null,"in":64,"out":1,'
        f'"cached":0,"tool":null,"last":false,"hash_ids":[{t}]}}\n'
    )


def recording_file(folder: Path, n: int, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    p = folder / f"record-2026010{n}T000000000000000-r{n}-000001.jsonl"
    p.write_text(text)
    return p


def refused(path: Path) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as e:
        for _ in read_trace(path):
            pass
    return e.value


def gzipped(p: Path, head: bytes) -> Path:
    """A gzip file of ``head`` then a last field: one record, too large for a patched limit."""
    with gzip.open(p, "wb") as g:
        g.write(head + b'"x":1}' + (b"\n" if p.name.endswith(".jsonl.gz") else b""))
    return p


def refused_text(p: Path, text: str) -> TraceFormatError:
    """The error reading a file of ``text`` raises."""
    p.write_text(text)
    return refused(p)


# ---- a torn last line ------------------------------------------------------------------------


def test_a_recordings_torn_last_line_is_skipped_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    full = HEADER + "".join(call_line(i) for i in range(5))
    torn = recording_file(tmp_path, 1, full[:-40])  # killed mid-write of its last line
    recording_file(tmp_path, 2, HEADER + call_line(9))  # the engine restarted
    with caplog.at_level(logging.WARNING):
        got = list(read_trace(tmp_path))
    assert len(got) == 4 + 1
    assert torn.name in caplog.text and "line 6" in caplog.text and "torn" in caplog.text


def test_a_torn_line_in_the_middle_of_a_recording_is_still_refused(tmp_path: Path) -> None:
    lines = [HEADER] + [call_line(i) for i in range(5)]
    lines[3] = lines[3][:-40] + "\n"
    p = recording_file(tmp_path, 1, "".join(lines))
    e = refused(p)
    assert e.path == str(p) and e.record == "line 4" and e.field == "(json)"


def test_a_torn_last_line_of_another_format_is_still_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(MOONCAKE + MOONCAKE[:-20])
    assert refused(p).record == "line 2"


# ---- deep nesting, huge integers, huge lines --------------------------------------------------


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("rec.jsonl", HEADER + '{"t":' + "[" * 200_000 + "]" * 200_000 + "}\n", "line 2"),
        ("mc.jsonl", MOONCAKE + "[" * 200_000 + "\n", "line 2"),
        ("first.jsonl", "[" * 200_000 + "\n", "line 1"),
        ("tl.jsonl", '{"session_id":"s","round_index":' + "[" * 200_000 + "\n", "line 1"),
        ("s.json", '{"block_size":64,"requests":' + "[" * 200_000 + "]" * 200_000 + "}", "session"),
    ],
)
def test_json_nested_too_deeply_is_a_format_error(
    tmp_path: Path, name: str, text: str, line: str
) -> None:
    e = refused_text(tmp_path / name, text)
    assert (e.path, e.record, e.field) == (str(tmp_path / name), line, "(json)")
    assert "nested" in str(e)


@pytest.mark.parametrize(
    "name, text, line",
    [
        ("rec.jsonl", HEADER + call_line(1).replace('"in":64', '"in":' + "9" * 5000), "line 2"),
        ("mc.jsonl", MOONCAKE + '{"timestamp":' + "1" * 5000 + "}\n", "line 2"),
        ("s.json", '{"block_size":' + "9" * 5000 + ',"requests":[]}', "session"),
    ],
)
def test_an_integer_of_too_many_digits_is_a_format_error(
    tmp_path: Path, name: str, text: str, line: str
) -> None:
    e = refused_text(tmp_path / name, text)
    assert (e.record, e.field) == (line, "(json)") and "4300 digits" in str(e)


def test_a_line_over_the_limit_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "MAX_LINE_BYTES", 1000)
    p = gzipped(tmp_path / "bomb.jsonl.gz", MOONCAKE.encode() + b'{"timestamp":0,' + b" " * 5000)
    read: list[int] = []
    real = gzip.GzipFile.readline

    def counted(self: gzip.GzipFile, size: int = -1) -> bytes:
        line = real(self, size)
        read.append(len(line))
        return line

    monkeypatch.setattr(gzip.GzipFile, "readline", counted)
    e = refused(p)
    assert (e.record, e.field) == ("line 2", "(line)") and "1000 bytes" in str(e)
    assert max(read) <= 1001  # never more than the limit read


def test_a_session_file_over_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", 1000)
    e = refused(gzipped(tmp_path / "s.json.gz", b'{"block_size":64,"requests":[],' + b" " * 5000))
    assert (e.record, e.field) == ("session", "(file)") and "1000 bytes" in str(e)


def test_invalid_utf8_is_reported_at_its_own_line(tmp_path: Path) -> None:
    lines = [(HEADER + call_line(i)).split("\n")[1] + "\n" for i in range(1000)]
    lines[499] = lines[499].replace('"tool":null', '"tool":"\udcff"')
    p = tmp_path / "u.jsonl"
    p.write_bytes((HEADER + "".join(lines)).encode("utf-8", "surrogateescape"))
    e = refused(p)
    assert (e.record, e.field) == ("line 501", "(file)")


def test_an_azure_field_over_the_csv_limit_is_a_format_error(tmp_path: Path) -> None:
    p = tmp_path / "a.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        '2023-11-16 18:15:47.0,"' + "1" * 200_000 + '",1\n'
    )
    e = refused(p)
    assert (e.record, e.field) == ("line 3", "(csv)")


# ---- the open-program table -------------------------------------------------------------------


def test_anonymous_calls_take_no_room_in_the_program_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recording, "MAX_OPEN_PROGRAMS", 3)
    p = recording_file(tmp_path, 1, HEADER + "".join(call_line(i, None) for i in range(50)))
    got = list(read_trace(p))
    assert len(got) == 50 and len({r.session_id for r in got}) == 50
    assert all(r.index == 0 and r.arrival_s == 0 and r.think_time_s == 0 for r in got)


def test_programs_idle_the_longest_are_forgotten_past_the_table_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound the program idle the longest is forgotten; a later call of it begins
    a new program (its own name), so no two programs' calls are mixed."""
    monkeypatch.setattr(recording, "MAX_OPEN_PROGRAMS", 2)
    order = ["a", "b", "a", "c", "a", "b", "a"]  # b is idle the longest when c comes
    p = recording_file(tmp_path, 1, HEADER + "".join(call_line(i, x) for i, x in enumerate(order)))
    got = list(read_trace(p))
    by_session: dict[str, list[int]] = {}
    for r in got:
        by_session.setdefault(r.session_id, []).append(r.index)
    assert by_session["r1:a"] == [0, 1, 2, 3]  # active all along: one program
    assert by_session["r1:b"] == [0]
    assert sorted(len(v) for v in by_session.values()) == [1, 1, 1, 4]
    reborn = next(s for s in by_session if s.startswith("r1:b@"))
    assert reborn == f"r1:b@{p.name}:7"  # named by where it came back


# ---- the trace cache --------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0.5, 0.9, 0.0])
def test_a_truncated_cache_entry_is_rebuilt(
    cut: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a cache of its own: the session's holds other tests' entries, which it must not cut)
    monkeypatch.setenv("TTLPOLICY_CACHE", str(tmp_path / "cache"))
    first = trace_cache.load_block_trace(sample_dir())
    entries = sorted(trace_cache.cache_dir().glob("blocks-*.npz"))
    assert entries
    for entry in entries:  # a full disk or a crash cut them short
        data = entry.read_bytes()
        entry.write_bytes(data[: int(len(data) * cut)])
    again = trace_cache.load_block_trace(sample_dir())
    assert np.array_equal(again.keys, first.keys) and np.array_equal(
        again.arrival_s, first.arrival_s
    )
    for entry in entries:  # rebuilt: readable again
        with open(entry, "rb") as fh, np.load(fh) as z:
            assert "keys" in z.files
