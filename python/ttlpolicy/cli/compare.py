"""(not built yet) placeholder for `ttlpolicy compare`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SystemExit("ttlpolicy compare: not built yet")
