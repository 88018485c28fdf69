"""An output path that cannot be written is refused naming the path and the real reason (issue
47: ``--json /proc/x.json`` said "no such file or directory" of a folder that exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ttlpolicy.cli import main


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_a_folder_that_refuses_new_files_is_named_with_the_reason(capsys, flag) -> None:
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this machine")
    assert main(["compare", flag, "/proc/out.file"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: cannot write '/proc/out.file': folder '/proc':" in err
    assert "does not allow creating files there" in err
    assert "no such file or directory" not in err


def test_a_missing_folder_is_still_called_missing(tmp_path, capsys) -> None:
    out = tmp_path / "no-such-folder" / "out.json"
    assert main(["compare", "--json", str(out)]) == 2
    assert f"no such directory {str(out.parent)!r}" in capsys.readouterr().err
