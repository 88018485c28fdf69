"""bench/same_json.py: two bench JSON files are the same but for timings — a timing key
differs freely at any depth, any other value (a float's last bit included) is a difference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import same_json  # noqa: E402

RUN = [{"policy": "a", "wall_s": 1.5, "summary": {"jct_mean_s": 4597.75, "sim_cpu_s": 2.0}}]


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_timings_differ_freely(tmp_path: Path) -> None:
    other = [{"policy": "a", "wall_s": 9.0, "summary": {"jct_mean_s": 4597.75, "sim_cpu_s": 7}}]
    assert same_json.main([write(tmp_path, "a", RUN), write(tmp_path, "b", other)]) == 0


def test_a_value_or_a_key_that_differs_is_reported(tmp_path: Path, capsys) -> None:
    moved = [{"policy": "a", "wall_s": 1.5, "summary": {"jct_mean_s": 4597.750000000001}}]
    assert same_json.main([write(tmp_path, "a", RUN), write(tmp_path, "b", moved)]) == 1
    assert "$[0].summary.jct_mean_s" in capsys.readouterr().out
    extra = [{**RUN[0], "hit_rate": 0.5}]
    assert same_json.main([write(tmp_path, "a", RUN), write(tmp_path, "c", extra)]) == 1
    assert (
        same_json.main(
            [write(tmp_path, "a", RUN), write(tmp_path, "c", extra), "--ignore", "hit_rate"]
        )
        == 0
    )
