"""``--trace NAME`` is looked up under ``TTLPOLICY_TRACES`` when it is not a path from the working
folder (issue 47: ``TTLPOLICY_TRACES=… ttlpolicy fit --trace claude-code`` failed), and a name
found nowhere is refused saying where it was looked for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ttlpolicy.cli import main
from ttlpolicy.traces import resolve_trace, sample_dir


@pytest.fixture
def traces(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "traces"
    (root / "mine").mkdir(parents=True)
    first = sorted(sample_dir().glob("*.json*"))[0]
    shutil.copy(first, root / "mine" / first.name)
    monkeypatch.chdir(tmp_path)  # "mine" is not a folder here
    monkeypatch.setenv("TTLPOLICY_TRACES", str(root))
    return root


def test_a_name_is_found_under_the_traces_folder(traces, capsys) -> None:
    assert resolve_trace("mine") == str(traces / "mine")
    assert main(["fit", "--trace", "mine"]) == 0
    assert "tool" in capsys.readouterr().out


def test_a_path_from_the_working_folder_wins(traces, tmp_path) -> None:
    (tmp_path / "mine").mkdir()
    assert resolve_trace("mine") == "mine"


def test_a_name_found_nowhere_says_where_it_was_looked_for(traces, capsys, monkeypatch) -> None:
    assert main(["fit", "--trace", "nothing-here"]) == 2
    assert f"'nothing-here' (nor under TTLPOLICY_TRACES={str(traces)!r})" in capsys.readouterr().err
    monkeypatch.delenv("TTLPOLICY_TRACES")
    assert main(["fit", "--trace", "nothing-here"]) == 2
    assert "TTLPOLICY_TRACES, where a trace name is also looked up, is not set" in (
        capsys.readouterr().err
    )
