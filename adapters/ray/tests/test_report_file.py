"""``report_file``: a report crosses from the engine's process to the replica's whole or not
at all, and a bad file never fails the replica's stats call."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ttlpolicy_ray import REPORT_KEY, read_report, report_path, routing_stats, write_report
from ttlpolicy_ray.report_file import MAX_REPORT_BYTES


def a_report(seq: int) -> dict:
    return routing_stats(
        seq=seq, free_blocks=10, total_blocks=24, queue_len=1, queued_tokens=64,
        working_set_blocks=8, cached_fraction=0.5, block_size=32,
        pins=[("p", 3.0, 4)], evicted=[("q", 0)], at=1000.0,
    )  # fmt: skip


def test_a_written_report_reads_back_as_made(tmp_path: Path) -> None:
    path = report_path(tmp_path, 4321)
    assert path == tmp_path / "ttlpolicy-report-4321.json"
    assert read_report(path) == {}  # none yet
    write_report(path, a_report(1))
    write_report(path, a_report(2))
    got = read_report(path)
    assert got == json.loads(json.dumps(a_report(2)))
    assert got[REPORT_KEY]["seq"] == 2 and got[REPORT_KEY]["pins"] == [["p", 3.0, 4]]


def test_a_report_that_cannot_be_written_leaves_the_last_one_and_no_temporary(
    tmp_path: Path,
) -> None:
    path = report_path(tmp_path, 1)
    write_report(path, a_report(1))
    with pytest.raises(TypeError):
        write_report(path, {REPORT_KEY: {"seq": object()}})  # not JSON
    assert read_report(path)[REPORT_KEY]["seq"] == 1
    assert sorted(os.listdir(tmp_path)) == [path.name]


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"[1, 2]", b'{"other": 1}', b'{"ttlpolicy": 3}', b"\xff\xfe", b"NaN"],
)
def test_a_bad_file_is_no_report(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    assert read_report(path) == {}


def test_an_oversized_file_is_no_report(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b'{"ttlpolicy": {"pad": "' + b"x" * MAX_REPORT_BYTES + b'"}}')
    assert read_report(path) == {}


def test_a_directory_in_place_of_the_file_is_no_report(tmp_path: Path) -> None:
    assert read_report(tmp_path) == {}
