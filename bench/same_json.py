"""Are two benchmark JSON files the same, timings aside?  For "no behaviour change" checks
(issue 48): run a bench before and after a change, then

    python bench/same_json.py before.json after.json

Keys that measure the machine, not the simulated system (``wall_s`` and any key ending in
``_wall_s``, ``cpu_s`` or ``elapsed_s``, or named in ``--ignore``), are dropped at any depth;
the rest must be equal exactly (floats bit for bit: the simulator is deterministic).  Prints
each difference by path and exits 1 if there is one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TIMING_SUFFIXES = ("wall_s", "cpu_s", "elapsed_s")


def stripped(x: Any, ignore: frozenset[str]) -> Any:
    """``x`` without its timing keys, at any depth."""
    if isinstance(x, dict):
        return {
            k: stripped(v, ignore)
            for k, v in x.items()
            if k not in ignore and not k.endswith(TIMING_SUFFIXES)
        }
    if isinstance(x, list):
        return [stripped(v, ignore) for v in x]
    return x


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Each place where ``a`` and ``b`` differ, as ``path: a != b``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in one" for k in sorted(a.keys() ^ b.keys())]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} != {b!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--ignore", action="append", default=[], help="a key to drop too")
    args = ap.parse_args(argv)
    ignore = frozenset(args.ignore)
    a, b = (stripped(json.loads(p.read_text()), ignore) for p in (args.before, args.after))
    diffs = differences(a, b)
    for d in diffs:
        print(d)
    print("same" if not diffs else f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
