"""bench/linker_cost.py's ``--hot`` and ``--together`` modes time the path they say: calls
that continue their own program's turn end (a call that linked ``new`` or ``fork`` would time
another path), on both backends."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import linker_cost  # (bench/)
from conftest import NATIVE


@pytest.mark.parametrize(
    "backend",
    ["python", pytest.param("rust", marks=pytest.mark.skipif(NATIVE is None, reason="no native"))],
)
def test_hot_calls_continue_their_program(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    linker_cost.main(
        ["--hot", "--backend", backend, "--programs", "30", "--batches", "2", "--batch", "15"]
    )
    out = capsys.readouterr().out
    assert "kinds ['continue']" in out
    assert re.search(r"hot: link -?\d+\.\d+ us, best -?\d+\.\d+", out)


@pytest.mark.parametrize(
    "backend",
    ["python", pytest.param("rust", marks=pytest.mark.skipif(NATIVE is None, reason="no native"))],
)
def test_calls_linked_together_continue_their_programs(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # (each call of a batch continues its own program: the batch's calls are of distinct
    # programs, so none is a fork of another in the batch)
    linker_cost.main(
        ["--together", "--backend", backend, "--programs", "40", "--batches", "3", "--batch", "12"]
    )
    out = capsys.readouterr().out
    assert "kinds {'continue': 36}" in out
    assert re.search(r"together: link -?\d+\.\d+ us, best -?\d+\.\d+", out)


def test_hot_and_floor_are_one_mode_at_a_time() -> None:
    with pytest.raises(SystemExit):
        linker_cost.main(["--hot", "--floor", "--programs", "2"])
