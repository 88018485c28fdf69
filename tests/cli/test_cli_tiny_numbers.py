"""A positive number too small for what divides by it is refused when the command line is
parsed, with the flag named (audit: ``--rate 1e-320`` made every arrival inf and the run
wait for ever)."""

from __future__ import annotations

import argparse

import pytest

from ttlpolicy.cli import main
from ttlpolicy.cli._args import float_in


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--rate", "1e-320"],
        ["compare", "--rate", "5e-324"],
        ["replay", "--endpoint", "http://127.0.0.1:9", "--rate", "1e-320"],
    ],
)
def test_a_rate_whose_arrivals_would_not_be_finite_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2  # (before any work: it used to hang)
    err = capsys.readouterr().err
    assert "argument --rate" in err and "1e-290" in err and "Traceback" not in err


def test_small_but_usable_positive_numbers_still_parse() -> None:
    parse = float_in(0.0, 1e6, low_open=True)
    assert parse("1e-12") == 1e-12 and parse("1e-290") == 1e-290
    with pytest.raises(argparse.ArgumentTypeError):
        parse("1e-300")
    assert float_in(0.0, 1.0)("1e-320") == 1e-320  # (closed at 0: a tiny value means ~0)
