"""(not built yet) placeholder for `ttlpolicy groups`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SystemExit("ttlpolicy groups: not built yet")
