"""Recording traffic (``ttlpolicy.serving.record``) and reading it back
(``ttlpolicy.traces.recording``): programs, gaps and reuse survive the round trip, nothing a
client sent is written, the files stay within their bound, bad lines are named."""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ttlpolicy.cli import main as cli_main
from ttlpolicy.serving import Recorder, RecordSettings, record, record_from_env
from ttlpolicy.serving.record import MIN_FILE_BYTES, RECORD_BLOCK_TOKENS
from ttlpolicy.traces import TraceFormatError, detect_format, has_programs, read_trace
from ttlpolicy.traces.recording import record_files


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def engine_hashes(prefix: str, blocks: int) -> list[bytes]:
    """Chained-looking engine block hashes: block i of a context named ``prefix``."""
    return [f"{prefix}:{i}".encode().ljust(32, b".") for i in range(blocks)]


def recorder(folder: Path, clock: Clock | None = None, **kw: Any) -> Recorder:
    opts: dict[str, Any] = {
        "engine_block_tokens": 16,
        "clock": clock or Clock(),
        "background": False,
    }
    opts.update(kw)
    max_bytes = opts.pop("max_bytes", 1 << 24)
    max_files = opts.pop("max_files", 4)
    return Recorder(RecordSettings(folder, max_bytes, max_files), **opts)


def call(rec: Recorder, program: str | None, t: float, end: float, prompt: int, **kw: Any) -> None:
    fields: dict[str, Any] = {
        "tenant": "tenant-a",
        "output_tokens": 10,
        "cached_tokens": 0,
        "tool": None,
        "last_turn": False,
        "block_hashes": engine_hashes(program or "anon", prompt // 16),
    }
    fields.update(kw)
    rec.call(program_id=program, arrival_s=t, finish_s=end, prompt_tokens=prompt, **fields)


def test_a_recording_reads_back_as_programs_with_their_gaps_tools_and_reuse(
    tmp_path: Path,
) -> None:
    rec = recorder(tmp_path)
    call(rec, "\x00t:abc:agent-1", 10.0, 11.0, 256, tool="bash")
    call(rec, None, 10.5, 10.7, 100)
    call(rec, "\x00t:abc:agent-1", 14.0, 15.5, 384, last_turn=True)
    call(rec, None, 20.0, 20.1, 100)
    rec.close()
    assert has_programs(tmp_path) and detect_format(record_files(tmp_path)[0]) == "recording"
    records = list(read_trace(tmp_path))
    assert len(records) == 4
    prog = [r for r in records if r.index == 1 or r.input_tokens > 100]
    assert len({r.session_id for r in prog}) == 1
    first, second = prog
    assert (first.arrival_s, second.arrival_s) == (0.0, 4.0)
    assert second.think_time_s == pytest.approx(3.0)  # since the first call finished
    assert (first.stop, second.stop) == ("bash", "end_turn")
    assert (first.api_time_s, second.api_time_s) == (1.0, 1.5)
    # engine blocks of 16 tokens, recorded as the simulator's 64-token blocks
    assert first.block_tokens == RECORD_BLOCK_TOKENS
    assert len(first.hash_ids) == 256 // 64 and len(second.hash_ids) == 384 // 64
    assert second.hash_ids[:4] == first.hash_ids  # the prefix turn 2 reused
    anonymous = [r for r in records if r not in prog]
    assert len({r.session_id for r in anonymous}) == 2  # each its own one-call program


def test_nothing_a_client_sent_is_written_and_keys_differ_per_recording(tmp_path: Path) -> None:
    ids = []
    for folder in (tmp_path / "a", tmp_path / "b"):
        rec = recorder(folder)
        call(rec, "secret-program", 0.0, 1.0, 128, tenant="secret-tenant")
        rec.close()
        text = "".join(f.read_text() for f in record_files(folder))
        assert "secret" not in text and "anon" not in text
        line = json.loads(text.splitlines()[1])
        ids.append((line["program"], line["tenant"], line["hash_ids"]))
    # the same program, tenant and blocks: unlinkable across two recordings (fresh keys)
    assert all(a != b for a, b in zip(ids[0], ids[1], strict=True))


def test_equal_blocks_stay_equal_and_unequal_differ_within_a_recording(tmp_path: Path) -> None:
    rec = recorder(tmp_path, key=b"k" * 32)
    call(rec, "p", 0.0, 1.0, 128, block_hashes=engine_hashes("x", 8))
    call(rec, "q", 0.0, 1.0, 128, block_hashes=engine_hashes("x", 4) + engine_hashes("y", 4))
    rec.close()
    a, b = (r.hash_ids for r in read_trace(tmp_path))
    assert a[0] == b[0] and a[1] != b[1]


def test_engine_blocks_that_do_not_divide_64_are_recorded_as_they_are(tmp_path: Path) -> None:
    rec = recorder(tmp_path, engine_block_tokens=48)
    call(rec, "p", 0.0, 1.0, 480, block_hashes=engine_hashes("p", 10))
    rec.close()
    (r,) = read_trace(tmp_path)
    assert r.block_tokens == 48 and len(r.hash_ids) == 10


def test_calls_are_written_in_batches(tmp_path: Path) -> None:
    clock = Clock()
    rec = recorder(tmp_path, clock, batch_calls=3, flush_interval_s=10.0)
    call(rec, "p", 0.0, 1.0, 64)
    call(rec, "p", 2.0, 3.0, 64)
    assert record_files(tmp_path) == []  # buffered
    call(rec, "p", 4.0, 5.0, 64)
    assert len(list(read_trace(tmp_path))) == 3  # the batch is full: written
    call(rec, "p", 11.0, 12.0, 64)
    assert len(list(read_trace(tmp_path))) == 3
    call(rec, "p", 14.0, 15.0, 64)  # 10 s since the last write (at 5 s)
    assert len(list(read_trace(tmp_path))) == 5
    call(rec, "p", 16.0, 17.0, 64)
    assert len(list(read_trace(tmp_path))) == 5
    rec.close()
    assert len(list(read_trace(tmp_path))) == 6 and rec.calls_recorded == 6


@settings(max_examples=20, deadline=None)
@given(
    max_files=st.integers(1, 4),
    prompts=st.lists(st.integers(0, 4096), min_size=1, max_size=400),
    seed=st.integers(0, 1 << 30),
)
def test_files_stay_within_their_bound_over_a_long_run(
    tmp_path_factory: pytest.TempPathFactory, max_files: int, prompts: list[int], seed: int
) -> None:
    folder = tmp_path_factory.mktemp("bound")
    max_bytes = max_files * MIN_FILE_BYTES
    # an older recording in the folder counts against the bound too
    old = recorder(folder, max_bytes=max_bytes, max_files=max_files, batch_calls=7)
    for i in range(300):
        call(old, f"old-{i % 5}", i, i + 0.5, 2048)
    old.close()
    rec = recorder(folder, max_bytes=max_bytes, max_files=max_files, batch_calls=7)
    for i, n in enumerate(prompts * 10):
        call(rec, f"p{(i + seed) % 13}", float(i), i + 0.5, n)
        files = record_files(folder)
        assert len(files) <= max_files
        assert sum(f.stat().st_size for f in files) <= max_bytes
    rec.close()
    files = record_files(folder)
    assert len(files) <= max_files and sum(f.stat().st_size for f in files) <= max_bytes
    assert rec.bytes_written > 0 and rec.calls_dropped == 0
    # what is left is the newest and reads back whole
    assert files[-1].name.split("-")[2] == rec.recording
    assert len(list(read_trace(folder))) >= 1


def test_the_writer_thread_writes_full_batches_and_close_writes_the_rest(tmp_path: Path) -> None:
    rec = recorder(tmp_path, batch_calls=4, background=True)
    for i in range(4):
        call(rec, "p", float(i), i + 0.5, 128)
    for _ in range(500):  # the thread writes the full batch without being asked
        if rec.calls_recorded == 4:
            break
        time.sleep(0.01)
    assert rec.calls_recorded == 4 and len(list(read_trace(tmp_path))) == 4
    call(rec, "p", 9.0, 9.5, 128)
    rec.close()
    assert len(list(read_trace(tmp_path))) == 5 and rec.calls_dropped == 0


def test_a_call_longer_than_a_file_is_dropped_and_counted(tmp_path: Path) -> None:
    rec = recorder(tmp_path, max_bytes=MIN_FILE_BYTES, max_files=1)
    call(rec, "p", 0.0, 1.0, 16 * 8000)  # 2000 recorded blocks: ~40 kB
    call(rec, "p", 0.0, 1.0, 16 * 16000)  # ~80 kB: more than the 64 kB file
    rec.close()
    assert rec.calls_dropped == 1 and rec.calls_recorded == 1
    assert len(list(read_trace(tmp_path))) == 1


def _recording_with_line(tmp_path: Path, line: str) -> Path:
    rec = recorder(tmp_path)
    call(rec, "p", 0.0, 1.0, 128)
    call(rec, "p", 2.0, 3.0, 128)
    rec.close()
    (path,) = record_files(tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = line
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"t": 1.0, "end": 2.0', "(json)"),
        (
            '{"t": 1.0, "end": 2.0, "program": "p", "in": -3, "out": 1, "cached": 0, '
            '"hash_ids": []}',
            "in",
        ),
        (
            '{"t": 3.0, "end": 2.0, "program": "p", "in": 3, "out": 1, "cached": 0, '
            '"hash_ids": []}',
            "end",
        ),
        (
            '{"t": 1.0, "end": 2.0, "program": 7, "in": 3, "out": 1, "cached": 0, "hash_ids": []}',
            "program",
        ),
        (
            '{"t": 1.0, "end": 2.0, "program": "p", "in": 3, "out": 1, "cached": 0, '
            '"hash_ids": ["x"]}',
            "hash_ids[0]",
        ),
    ],
)
def test_a_malformed_line_is_named_by_file_line_and_field(
    tmp_path: Path, line: str, field: str
) -> None:
    path = _recording_with_line(tmp_path, line)
    with pytest.raises(TraceFormatError) as e:
        list(read_trace(tmp_path))
    assert e.value.path == str(path) and e.value.record == "line 3" and e.value.field == field
    assert str(path) in str(e.value) and "line 3" in str(e.value)


def test_a_file_without_its_header_is_refused(tmp_path: Path) -> None:
    path = _recording_with_line(tmp_path, "{}")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(TraceFormatError, match="line 1: field 'format'"):
        list(read_trace(tmp_path))


def test_compare_reads_a_recording_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rec = recorder(tmp_path / "rec")
    for p in range(3):
        for turn in range(4):
            call(rec, f"p{p}", 10.0 * turn, 10.0 * turn + 1, 256 + 128 * turn, tool="bash")
    rec.close()
    out = tmp_path / "out.json"
    argv = ["compare", "--trace", str(tmp_path / "rec"), "--policies", "vllm", "--json", str(out)]
    assert cli_main(argv) == 0
    s = json.loads(out.read_text())["results"][0]["summary"]
    assert s["programs"] == 3 and s["calls"] == 12
    assert s["input_tokens"] == 3 * sum(256 + 128 * t for t in range(4))
    # each turn reuses the whole previous prompt
    assert s["hit_tokens"] == 3 * sum(256 + 128 * t for t in range(3))
    capsys.readouterr()


def test_the_knobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("TTLPOLICY_RECORD", "TTLPOLICY_RECORD_MAX_BYTES", "TTLPOLICY_RECORD_FILES"):
        monkeypatch.delenv(name, raising=False)
    assert record_from_env() is None  # off by default
    monkeypatch.setenv("TTLPOLICY_RECORD", str(tmp_path / "rec"))
    s = record_from_env()
    assert s is not None and s.directory == tmp_path / "rec" and s.max_files == 16
    assert s.max_bytes == 1 << 30
    refusals = [
        ("TTLPOLICY_RECORD_MAX_BYTES", "1000", r"TTLPOLICY_RECORD_MAX_BYTES.*1000"),
        ("TTLPOLICY_RECORD_MAX_BYTES", "x", r"TTLPOLICY_RECORD_MAX_BYTES.*'x'"),
        ("TTLPOLICY_RECORD_MAX_BYTES", "2e6.5", r"TTLPOLICY_RECORD_MAX_BYTES.*'2e6.5'"),
        ("TTLPOLICY_RECORD_MAX_BYTES", "1000000.5", "TTLPOLICY_RECORD_MAX_BYTES must be a whole"),
        ("TTLPOLICY_RECORD_FILES", "2.9", r"TTLPOLICY_RECORD_FILES must be an integer.*'2.9'"),
    ]  # (2.9 files was read as 2)
    for name, value, message in refusals:
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=message):
            record_from_env()
        monkeypatch.delenv(name)
    monkeypatch.setenv("TTLPOLICY_RECORD_MAX_BYTES", "1e9")  # (a whole number, written short)
    assert getattr(record_from_env(), "max_bytes", None) == 10**9
    monkeypatch.delenv("TTLPOLICY_RECORD_MAX_BYTES")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TTLPOLICY_RECORD", str(tmp_path / "file"))
    with pytest.raises(ValueError, match="TTLPOLICY_RECORD must name a directory"):
        record_from_env()


def test_replay_loads_a_recording_as_programs(tmp_path: Path) -> None:
    from ttlpolicy.replay.programs import load_programs

    rec = recorder(tmp_path)
    call(rec, "p", 0.0, 1.0, 256, tool="bash")
    call(rec, "p", 3.0, 4.0, 320, last_turn=True)
    call(rec, None, 0.5, 0.7, 64)
    rec.close()
    work = load_programs(tmp_path, max_programs=10, max_context=4096)
    assert not work.open_loop and len(work.programs) == 2
    (prog,) = [p for p in work.programs if len(p.calls) == 2]
    assert [c.input_tokens for c in prog.calls] == [256, 320]
    assert [c.think_s for c in prog.calls] == [0.0, 2.0] and prog.block_tokens == 64
    assert prog.calls[1].hash_ids[:4] == prog.calls[0].hash_ids


def test_a_failed_write_drops_its_batch_and_the_recorder_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "rec"
    rec = recorder(folder)
    folder.rmdir()
    folder.write_text("")  # the folder is gone: no file can be opened in it
    call(rec, "p", 0.0, 1.0, 128)
    rec.flush()
    assert rec.calls_dropped == 1 and "recording into" in caplog.text
    folder.unlink()
    folder.mkdir()
    call(rec, "p", 2.0, 3.0, 128)
    rec.close()
    assert rec.calls_recorded == 1 and len(list(read_trace(folder))) == 1


def _call_lines(folder: Path) -> list[str]:
    """The call lines of a recording (its header names the recording: it differs)."""
    return [line for f in record_files(folder) for line in f.read_text().splitlines()[1:]]


@settings(max_examples=25, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["p", "q", None]),
            st.sampled_from(["salt-a", "", None]),
            st.integers(0, 640),
            st.integers(0, 64),
            st.sampled_from(["bash", None]),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_entries_unpacked_in_the_writer_are_written_as_the_same_calls_would_be(
    tmp_path_factory: pytest.TempPathFactory,
    calls: list[tuple[str | None, str | None, int, int, str | None, bool]],
) -> None:
    """``add`` with an ``unpack`` (an adapter deferring its fields to the writer thread)
    writes byte for byte what ``call`` writes for the same calls under the same key."""
    direct_dir, deferred_dir = tmp_path_factory.mktemp("call"), tmp_path_factory.mktemp("add")
    direct = recorder(direct_dir, key=b"k" * 32)

    def unpack(entry: tuple[Any, ...]) -> tuple[Any, ...]:
        # the entry's own shape: (salt, program, i, prompt, cached, tool, last)
        salt, program, i, prompt, cached, tool, last = entry
        tenant = None if not salt else f"tenant-of-{salt}"
        hashes = engine_hashes(program or f"anon-{i}", prompt // 16)
        return (program, tenant, float(i), i + 0.5, prompt, 7, cached, hashes, tool, last)

    deferred = recorder(deferred_dir, key=b"k" * 32, unpack=unpack, batch_calls=4)
    for i, (program, salt, prompt, cached, tool, last) in enumerate(calls):
        direct.call(
            program_id=program,
            tenant=None if not salt else f"tenant-of-{salt}",
            arrival_s=float(i),
            finish_s=i + 0.5,
            prompt_tokens=prompt,
            output_tokens=7,
            cached_tokens=cached,
            block_hashes=engine_hashes(program or f"anon-{i}", prompt // 16),
            tool=tool,
            last_turn=last,
        )
        deferred.add((salt, program, i, prompt, cached, tool, last), i + 0.5)
    direct.close()
    deferred.close()
    assert deferred.calls_recorded == direct.calls_recorded == len(calls)
    assert _call_lines(deferred_dir) == _call_lines(direct_dir)


def test_an_entry_that_cannot_be_unpacked_is_dropped_alone_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def unpack(entry: tuple[Any, ...]) -> tuple[Any, ...]:
        program, prompt = entry
        hashes = engine_hashes(program, prompt // 16)
        return (program, None, 0.0, 1.0, prompt, 1, 0, hashes, None, False)

    rec = recorder(tmp_path, unpack=unpack)
    rec.add(("p", 128), 1.0)
    rec.add(("a bad entry",), 1.0)
    rec.add(("q", 64), 1.0)
    rec.flush()
    assert rec.calls_dropped == 1 and rec.calls_recorded == 2
    assert "could not be recorded" in caplog.text
    rec.add(("p", 192), 2.0)
    rec.close()
    assert rec.calls_recorded == 3 and len(list(read_trace(tmp_path))) == 3
    assert rec.writer_cpu_s > 0


def test_entries_unpacked_to_none_are_neither_written_nor_counted_as_dropped(
    tmp_path: Path,
) -> None:
    """``unpack`` says which entries are calls (an adapter tells its aborts in the writer);
    the others, appended to ``buffer`` directly as an adapter's hot path does, are skipped."""

    def unpack(entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
        program, prompt, stopped = entry
        hashes = engine_hashes(program, prompt // 16)
        return (program, None, 0.0, 1.0, prompt, 1, 0, hashes, None, False) if stopped else None

    rec = recorder(tmp_path, unpack=unpack)
    rec.buffer.append(("p", 128, True))
    rec.buffer.append(("aborted", 64, False))
    rec.add(("q", 64, True), 1.0)
    rec.close()
    assert rec.calls_recorded == 2 and rec.calls_dropped == 0
    assert [r.input_tokens for r in read_trace(tmp_path)] == [128, 64]


# ---- robustness (audit): a full disk, shared folders, bad values, bounded buffers ---------


def _call_lines_whole(folder: Path) -> list[str]:
    """Every call line of a recording, each checked whole (ends with a newline, parses)."""
    lines = []
    for f in record_files(folder):
        data = f.read_bytes()
        assert data.endswith(b"\n"), f"{f.name} ends mid-line"
        for line in data.decode().splitlines()[1:]:
            json.loads(line)
            lines.append(line)
    return lines


def test_a_disk_full_mid_batch_leaves_whole_lines_and_later_batches_land_whole(
    tmp_path: Path,
) -> None:
    """A batch whose write fails part-way (the disk fills: here the file-size limit, which
    fails a write as a full disk does, short write then an error) is cut back to the file's
    last whole line and counted as dropped, call for call; the next batch lands whole."""
    import resource
    import signal

    rec = recorder(tmp_path, batch_calls=1 << 20, flush_interval_s=1e9)  # flushed by hand
    for i in range(5):
        call(rec, f"p{i % 2}", float(i), i + 0.5, 640)
    rec.flush()
    (path,) = record_files(tmp_path)
    size = path.stat().st_size
    line = len(path.read_bytes().splitlines()[-1])
    for i in range(5, 10):
        call(rec, f"p{i % 2}", float(i), i + 0.5, 640)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (the write fails instead)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + line * 3 // 2, hard))
        rec.flush()  # room for one and a half lines of the five
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert path.stat().st_size == size  # cut back to its last whole line
    assert rec.calls_recorded == 5 and rec.calls_dropped == 5
    for i in range(10, 13):
        call(rec, f"p{i % 2}", float(i), i + 0.5, 640)
    rec.close()
    assert rec.calls_recorded == 8 and rec.calls_dropped == 5
    lines = _call_lines_whole(tmp_path)
    assert [json.loads(x)["t"] for x in lines] == [0, 1, 2, 3, 4, 10, 11, 12]
    assert len(list(read_trace(tmp_path))) == 8


def test_a_second_recorder_in_the_folder_never_removes_a_live_recordings_file(
    tmp_path: Path,
) -> None:
    """Two engine processes given one folder: the one that rotates fast removes its own
    oldest files, not the other's open file (whose calls would be written into nothing)."""
    opts: dict[str, Any] = {"max_bytes": 4 * MIN_FILE_BYTES, "max_files": 4, "batch_calls": 1}
    a, b = recorder(tmp_path, **opts), recorder(tmp_path, **opts)
    for i in range(20):
        call(a, f"a{i % 5}", float(i), i + 0.5, 640)
    for i in range(3000):  # b rotates through many files
        call(b, f"b{i % 5}", float(i), i + 0.5, 640)
    for i in range(20, 40):
        call(a, f"a{i % 5}", float(i), i + 0.5, 640)
    a.close()
    b.close()
    on_disk = [r.session_id.split(":")[0] for r in read_trace(tmp_path)]
    assert on_disk.count(a.recording) == 40 == a.calls_recorded
    mine = [f for f in record_files(tmp_path) if f.name.split("-")[2] == b.recording]
    assert b.files_removed > 0 and len(mine) <= 4  # b still keeps within its own bound


def test_a_recording_that_rotates_while_another_lists_the_folder_stays_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B rotates between A's listing of the folder and A's look at B's newest file: the file
    A probes is then unlocked (B left it), yet B is live, and none of its files go."""
    opts: dict[str, Any] = {"max_bytes": 4 * MIN_FILE_BYTES, "max_files": 4, "batch_calls": 1}
    a, b = recorder(tmp_path, **opts), recorder(tmp_path, **opts)
    for rec in (a, a, b, b, b):
        with rec._write_lock:
            rec._rotate()
    stale = record_files(tmp_path)
    with b._write_lock:
        b._rotate()  # (after A's listing, below)
    listings = iter([stale])
    monkeypatch.setattr(record, "record_files", lambda d: next(listings, None) or record_files(d))
    with a._write_lock:
        a._rotate()
    assert a.files_removed == 0
    assert len([f for f in record_files(tmp_path) if b.recording in f.name]) == 4
    a.close()
    b.close()


def test_files_of_an_ended_recording_are_removed_first_to_keep_the_folders_bound(
    tmp_path: Path,
) -> None:
    """A recording whose recorder is gone (an earlier run) holds no lock: its files go,
    oldest first, when a live recording needs the room; the folder keeps its bound."""
    opts: dict[str, Any] = {"max_bytes": 4 * MIN_FILE_BYTES, "max_files": 4, "batch_calls": 1}
    old = recorder(tmp_path, **opts)
    for i in range(600):
        call(old, f"o{i % 5}", float(i), i + 0.5, 640)
    old.close()
    assert len(record_files(tmp_path)) == 4
    new = recorder(tmp_path, **opts)
    call(new, "n", 0.0, 1.0, 640)
    files = record_files(tmp_path)
    assert len(files) == 4 and files[-1].name.split("-")[2] == new.recording
    new.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"arrival_s": math.nan},
        {"finish_s": math.inf},
        {"arrival_s": -1.0},
        {"cached_tokens": None},
        {"prompt_tokens": -5},
        {"output_tokens": 1.7},
    ],
    ids=lambda d: f"{next(iter(d))}={next(iter(d.values()))!r}",
)
def test_a_call_the_reader_would_refuse_is_dropped_and_counted_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: dict[str, Any]
) -> None:
    rec = recorder(tmp_path)
    fields: dict[str, Any] = {"arrival_s": 1.0, "finish_s": 2.0, "prompt_tokens": 128}
    fields.update(bad)
    call(rec, "p", fields.pop("arrival_s"), fields.pop("finish_s"), fields.pop("prompt_tokens"),
         **fields)  # fmt: skip
    call(rec, "p", 3.0, 4.0, 128)
    rec.close()
    assert rec.calls_dropped == 1 and rec.calls_recorded == 1
    (field,) = bad
    assert field in caplog.text  # the log names the field
    assert [r.input_tokens for r in read_trace(tmp_path)] == [128]  # the reader takes it all


#: Values a call's field may be handed, each with whether it is a time and whether a count:
#: JSON's values (what the reader sees) and numpy's (what an engine may hand the recorder,
#: written as the JSON value ``.item()`` gives).
FIELD_VALUES: list[tuple[Any, bool, bool]] = [
    (0, True, True),
    (7, True, True),
    (2**64, True, True),
    (10**400, False, True),  # (an integer, but too large for a float)
    (0.0, True, False),
    (-0.0, True, False),
    (1.5, True, False),
    (2.0, True, False),  # (a whole float: a time, not a count)
    (1e308, True, False),
    (-1, False, False),
    (-1e-9, False, False),
    (math.nan, False, False),
    (math.inf, False, False),
    (-math.inf, False, False),
    (True, False, False),
    (False, False, False),
    (None, False, False),
    ("1", False, False),
    ([1], False, False),
    (np.int64(3), True, True),
    (np.uint8(4), True, True),
    (np.int64(-3), False, False),
    (np.float64(1.5), True, False),
    (np.float32(2.0), True, False),
    (np.float64(math.nan), False, False),
    (np.bool_(True), False, False),
]
#: A call's time and count fields: the recorder's name, the reader's key, whether a time.
CALL_FIELDS = [
    ("arrival_s", "t", True),
    ("finish_s", "end", True),
    ("prompt_tokens", "in", False),
    ("output_tokens", "out", False),
    ("cached_tokens", "cached", False),
]


@pytest.mark.parametrize(("field", "key", "is_time"), CALL_FIELDS, ids=[f[0] for f in CALL_FIELDS])
@pytest.mark.parametrize(
    ("value", "time_ok", "count_ok"),
    FIELD_VALUES,
    ids=[f"{type(v[0]).__name__}:{str(v[0])[:12]}" for v in FIELD_VALUES],
)
def test_the_recorder_refuses_exactly_what_the_reader_refuses(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    field: str,
    key: str,
    is_time: bool,
    value: Any,
    time_ok: bool,
    count_ok: bool,
) -> None:
    """One rule on both sides (``traces.records.time_problem``, ``count_problem``): a value
    the recorder takes is written as a line the reader reads, one it refuses is one the reader
    refuses in that line, and the rule is the table's."""
    ok = time_ok if is_time else count_ok
    # the recorder: the call with ``value`` in ``field`` (it charges held bytes by the
    # prompt's count before the check: whatever the value, that never raises)
    fields: dict[str, Any] = {
        "arrival_s": 0.0,
        "finish_s": 0.0,
        "prompt_tokens": 128,
        "output_tokens": 10,
        "cached_tokens": 0,
    }
    fields[field] = value
    rec = recorder(tmp_path / "recorded")
    rec.call(program_id="p", tenant=None, block_hashes=[], tool=None, **fields)
    rec.close()
    recorded = rec.calls_recorded == 1
    assert recorded == ok and rec.calls_dropped == (not ok)
    if recorded:
        (r,) = read_trace(tmp_path / "recorded")  # what it wrote, the reader reads
        if key in ("in", "out"):
            assert (r.input_tokens if key == "in" else r.output_tokens) == value
    else:
        assert f"{field} must be" in caplog.text  # the log names the field
    # the reader: a line with the value (as JSON has it) where the recorder would write it
    shown = value.item() if isinstance(value, np.generic) else value
    line = {"t": 0.0, "end": 0.0, "program": None, "in": 128, "out": 10, "cached": 0}
    line.update({"t": shown, "end": shown} if key == "t" else {key: shown})
    _recording_with_line(tmp_path / "read", json.dumps({**line, "hash_ids": []}))
    try:
        list(read_trace(tmp_path / "read"))
    except TraceFormatError as e:
        assert e.field == key
        read = False
    else:
        read = True
    assert read == recorded


def test_buffered_calls_are_bounded_by_the_bytes_they_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that is stalled lets calls pile up, each holding its request's hashes or
    token ids: the bound is on the bytes held (memory), not only on the calls."""
    # 1600 prompt tokens a call: 10 fit
    monkeypatch.setattr(record, "MAX_BUFFERED_BYTES", 10 * 1600 * record.HELD_BYTES_PER_TOKEN)
    rec = recorder(tmp_path, batch_calls=1 << 20, flush_interval_s=1e9)  # never flushes alone
    for i in range(30):
        call(rec, "p", float(i), i + 0.5, 1600)
    assert len(rec.buffer) == 10 and rec.calls_dropped == 20
    for i in range(5):  # small calls still fit under the count of calls
        call(rec, "q", float(i), i + 0.5, 0)
    rec.flush()
    call(rec, "p", 40.0, 40.5, 1600)  # written: room again
    rec.close()
    assert rec.calls_recorded == 16 and rec.calls_dropped == 20
    assert len(list(read_trace(tmp_path))) == 16


@pytest.mark.parametrize("prompt_tokens", [math.nan, math.inf, -(10**9), None, "many"])
def test_a_bad_prompt_count_holds_nothing_and_leaves_the_bound_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prompt_tokens: Any
) -> None:
    """A call whose prompt count is no count is dropped at its write; meanwhile it charged
    the byte bound nothing (a NaN charge made the bound's sum NaN, and the bound was off for
    good; a negative one made room that was not there)."""
    monkeypatch.setattr(record, "MAX_BUFFERED_BYTES", 10 * 1600 * record.HELD_BYTES_PER_TOKEN)
    rec = recorder(tmp_path, batch_calls=1 << 20, flush_interval_s=1e9)
    rec.call(program_id="bad", tenant=None, arrival_s=0.0, finish_s=0.5,
             prompt_tokens=prompt_tokens, output_tokens=1, cached_tokens=0, block_hashes=[],
             tool=None)  # fmt: skip
    for i in range(30):
        call(rec, "p", float(i), i + 0.5, 1600)
    assert len(rec.buffer) == 11 and rec.calls_dropped == 20
    rec.close()
    assert rec.calls_recorded == 10 and rec.calls_dropped == 21


@pytest.mark.parametrize("bad_s", [math.nan, None, -1.0, "1.0"])
def test_a_bad_finish_time_never_moves_the_flush_clock(tmp_path: Path, bad_s: Any) -> None:
    """A call whose finish time the writer refuses, filling a batch, leaves the clock of the
    time-based flush where it was: a call 100 s later still flushes."""
    rec = recorder(tmp_path, batch_calls=2, flush_interval_s=10.0)
    call(rec, "p", 0.0, 1.0, 16)
    call(rec, "p", 0.0, bad_s, 16)  # fills the batch: flushed, the bad call dropped
    call(rec, "p", 101.0, 101.5, 16)  # 100 s after the first: due by time
    assert rec.calls_recorded == 2 and not rec.buffer
    rec.close()


def test_the_batch_being_written_counts_against_the_buffer_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer takes the whole buffer: while its write hangs, the calls it holds are
    still held, so the buffer may not fill again to the bound beside them."""
    monkeypatch.setattr(record, "MAX_BUFFERED_BYTES", 10 * 1600 * record.HELD_BYTES_PER_TOKEN)
    rec = recorder(tmp_path, batch_calls=1 << 20, flush_interval_s=1e9)
    for i in range(10):
        call(rec, "p", float(i), i + 0.5, 1600)
    during: list[int] = []

    def stalled(lines: list[bytes]) -> None:  # while the batch is being written
        if lines:
            for i in range(10):
                call(rec, "p", 20.0 + i, 20.5 + i, 1600)
            during.append(len(rec.buffer))

    monkeypatch.setattr(rec, "_write", stalled)
    rec.flush()
    assert during == [0]  # all 10 dropped (and the batch lost: not written)
    assert rec.calls_dropped == 20 and rec.calls_recorded == 0


def test_a_failed_open_at_rotation_drops_that_batch_and_the_next_opens_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMFILE when the next file is opened: the batch is dropped and counted, the old file
    is not written to after it was closed, and the next batch opens a file."""
    rec = recorder(tmp_path, max_bytes=2 * MIN_FILE_BYTES, max_files=2, batch_calls=1)
    i = 0
    while len(record_files(tmp_path)) < 1 or rec.bytes_written < MIN_FILE_BYTES - 1500:
        call(rec, None, float(i), i + 0.5, 640)
        i += 1
    recorded = rec.calls_recorded
    real_open = os.open

    def failing_open(*args: Any, **kw: Any) -> int:
        monkeypatch.setattr(record.os, "open", real_open)
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(record.os, "open", failing_open)
    call(rec, None, float(i), i + 0.5, 16 * 400)  # does not fit: rotates, the open fails
    assert rec.calls_dropped == 1
    for j in range(20):
        call(rec, None, float(i + 1 + j), i + 1.5 + j, 64)
    rec.close()
    assert rec.calls_recorded == recorded + 20 and rec.calls_dropped == 1
    assert len(list(read_trace(tmp_path))) == rec.calls_recorded
