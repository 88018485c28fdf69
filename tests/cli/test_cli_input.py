"""Bad command lines are refused before any work, with the flag, the value and the allowed
range; output paths are checked before the simulation; traces that lack what a command needs
are refused with a clear error.  One test per case that once misbehaved."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ttlpolicy
from ttlpolicy.cli import compare as compare_cli
from ttlpolicy.cli import main
from ttlpolicy.traces import sample_dir


@pytest.fixture
def no_simulation(monkeypatch):
    """Any simulation started is a failure: these inputs must be refused before it."""

    def refuse(*a, **k):
        raise AssertionError("the simulation ran before the input was checked")

    monkeypatch.setattr(compare_cli, "simulate", refuse)
    monkeypatch.setattr(compare_cli, "cached_programs", refuse)


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--concurrency", "0", "must be an integer in [1, 1000000], got 0"),
        ("--concurrency", "-1", "got -1"),
        ("--concurrency", "two", "got 'two'"),
        ("--think-cap", "nan", "must be a finite number, got 'nan'"),
        ("--think-cap", "inf", "got 'inf'"),
        ("--cpu-tier-gb", "-1", "must be a finite number in [0, 1000000], got '-1'"),
        ("--cpu-tier-gb", "nan", "got 'nan'"),
        ("--rate", "0", "must be a finite number in (0, 1000000], got '0'"),
        ("--rate", "nan", "got 'nan'"),
        ("--efficiency", "1.5", "in (0, 1]"),
        ("--think-scale", "-2", "in [0, 1000000]"),
        ("--max-context", "0", "got 0"),
        ("--seed", "-3", "got -3"),
    ],
)
def test_compare_numbers_are_checked_up_front(capsys, no_simulation, flag, value, expected):
    err = _refused(capsys, ["compare", flag, value])
    assert f"argument {flag}: " in err and expected in err, err


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--top", "-1", "argument --top: must be an integer in [0, 2147483648], got -1"),
        ("--capacity-blocks", "0", "argument --capacity-blocks: must be an integer in [1,"),
        ("--max-ttl-s", "nan", "argument --max-ttl-s: must be a finite number in (0,"),
        ("--gpu-usd-per-hour", "0", "argument --gpu-usd-per-hour"),
        ("--group-depth", "0", "argument --group-depth"),
    ],
)
def test_groups_numbers_are_checked_up_front(tmp_path, capsys, flag, value, expected):
    err = _refused(capsys, ["groups", "--trace", str(tmp_path / "never-read.jsonl"), flag, value])
    assert expected in err, err


def test_fit_prefix_tokens_is_checked(capsys):
    err = _refused(capsys, ["fit", "--prefix-tokens", "-5"])
    assert "argument --prefix-tokens: must be an integer in [0," in err and "got -5" in err


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_unwritable_output_is_refused_before_the_simulation(tmp_path, capsys, no_simulation, flag):
    missing_dir = tmp_path / "no" / "such" / "dir" / "out"
    err = _refused(capsys, ["compare", flag, str(missing_dir)])
    assert f"argument {flag}: cannot write" in err and "no such directory" in err
    err = _refused(capsys, ["compare", flag, str(tmp_path)])
    assert f"argument {flag}: " in err and "is a directory" in err


@pytest.mark.parametrize("command", ["compare", "fit", "groups"])
def test_missing_trace_says_no_such_file(tmp_path, capsys, command):
    path = tmp_path / "no" / "such" / "path"
    err = _refused(capsys, [command, "--trace", str(path)])
    assert "no such trace file or directory" in err and str(path) in err
    assert "cannot tell the trace format" not in err


def _write_mooncake(path: Path) -> Path:
    rec = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    path.write_text(json.dumps(rec) + "\n")
    return path


def _write_session(path: Path, block_size: int, stops: list[str]) -> Path:
    reqs = [
        {"t": 10.0 * i, "in": 100, "out": 5, "hash_ids": [1, 2], "stop": s, "think_time": 2.0}
        for i, s in enumerate(stops)
    ]
    doc = {"id": "s1", "block_size": block_size, "hash_id_scope": "local", "requests": reqs}
    path.write_text(json.dumps(doc))
    return path


def _write_empty(path: Path) -> Path:
    path.write_text("")
    return path


def _write_azure(path: Path) -> Path:
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,3,4\n")
    return path


@pytest.mark.parametrize(
    "name, write",
    [
        ("e.jsonl", _write_empty),
        ("m.jsonl", _write_mooncake),
        ("a.csv", _write_azure),
        ("s.json", lambda p: _write_session(p, 64, ["end_turn", "end_turn"])),
    ],
)
def test_fit_refuses_a_trace_without_tool_gaps(tmp_path, capsys, name, write):
    path = write(tmp_path / name)
    err = _refused(capsys, ["fit", "--trace", str(path)])
    assert "no tool gaps" in err and str(path) in err


def test_fit_runs_on_a_session_with_tool_gaps(tmp_path, capsys):
    path = _write_session(tmp_path / "s.json", 64, ["tool_use", "tool_use", "end_turn"])
    assert main(["fit", "--trace", str(path)]) == 0
    assert "2 tool gaps" in capsys.readouterr().out


def test_groups_refuses_zero_token_blocks(tmp_path, capsys):
    path = _write_session(tmp_path / "s.json", 0, ["tool_use", "end_turn"])
    err = _refused(capsys, ["groups", "--trace", str(path), "--no-progress"])
    assert "block_size 0" in err and "'s1'" in err


def test_groups_top_zero_shows_no_group_and_top_n_shows_n(capsys):
    argv = ["groups", "--no-progress", "--max-sessions", "2"]  # default trace: the sample
    assert main([*argv, "--max-requests", "30", "--top", "0"]) == 0
    out0 = capsys.readouterr().out
    assert main([*argv, "--max-requests", "30", "--top", "2"]) == 0
    out2 = capsys.readouterr().out

    def rows(out: str) -> list[str]:
        table = out.split("\ngroup ")[1].split("\n\n")[0]
        return table.splitlines()[1:]

    assert rows(out0) == [] and len(rows(out2)) == 2
    assert f"trace: {sample_dir()}" in out2
    # groups are named by session and the block ids the session file recorded, not by the
    # 64-bit ids made unique across files
    for row in rows(out2):
        name = row.split()[0]
        assert name.startswith("trace_") and ":" in name, row


def test_sweep_does_not_repeat_its_last_point(tmp_path, capsys):
    # two sessions, concurrency 1 swept ×0.5..×4 asks for 1, 2, 4: only 1 and 2 are distinct
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for i in range(2):
        doc = {
            "id": f"s{i}",
            "block_size": 64,
            "requests": [
                {"t": 0.0, "in": 200, "out": 5, "hash_ids": [1, 2, 3], "stop": "tool_use"},
                {"t": 5.0, "in": 260, "out": 5, "hash_ids": [1, 2, 3, 4], "think_time": 2.0},
            ],
        }
        with gzip.open(sessions / f"trace_{i}.json.gz", "wt") as f:
            json.dump(doc, f)
    out_json = tmp_path / "r.json"
    argv = ["compare", "--trace", str(sessions), "--policies", "vllm", "--concurrency", "1"]
    assert main([*argv, "--sweep", "--json", str(out_json)]) == 0
    loads = [r["load"] for r in json.loads(out_json.read_text())["results"]]
    assert loads == [1, 2]
    assert "capped at the trace's 2 programs" in capsys.readouterr().err


def test_every_flag_of_every_command_is_documented():
    parser, _ = __import__("ttlpolicy.cli", fromlist=["build_parser"]).build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    from ttlpolicy.cli import COMMANDS

    assert set(sub.choices) == set(COMMANDS) >= {"compare", "fit", "groups"}
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"{name} {action.option_strings} has no help"


def test_groups_help_keeps_its_bullets(capsys):
    assert main(["groups", "--help"]) == 0
    out = capsys.readouterr().out
    assert "\n* bytes per token: 131072" in out  # not folded into one paragraph
    assert "(default: 10)" in out  # --top's default is shown


def test_version_is_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ttlpolicy {ttlpolicy.__version__}"
    from importlib.metadata import version

    assert ttlpolicy.__version__ == version("ttlpolicy")


def test_python_dash_m_ttlpolicy_runs_the_command():
    proc = subprocess.run(
        [sys.executable, "-m", "ttlpolicy", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "compare" in proc.stdout and "usage: ttlpolicy" in proc.stdout


@pytest.mark.parametrize("flags", [["--concurrency", "4"], ["--sweep"], ["--plot", "x.png"]])
def test_open_loop_trace_refuses_flags_it_would_ignore(tmp_path, capsys, no_simulation, flags):
    path = _write_mooncake(tmp_path / "m.jsonl")
    err = _refused(capsys, ["compare", "--trace", str(path), *flags])
    assert f"{flags[0]} applies to agentic sessions" in err
