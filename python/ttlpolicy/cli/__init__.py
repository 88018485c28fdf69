"""The ``ttlpolicy`` command: one sub-command a module (``fit``, ``groups``, ``compare``)."""

from __future__ import annotations

import argparse
import importlib
import sys

#: sub-command name → module under ttlpolicy.cli exposing add_arguments(parser) and run(args)
COMMANDS = {
    "fit": "fit",
    "groups": "groups",
    "compare": "compare",
    "plan": "plan",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttlpolicy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"ttlpolicy.cli.{module}")
        p = sub.add_parser(
            name, help=(mod.__doc__ or name).strip().splitlines()[0], description=mod.__doc__
        )
        mod.add_arguments(p)
        modules[name] = mod
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args) or 0)
    except (ValueError, OSError) as e:  # bad input: one clear line, no traceback
        print(f"ttlpolicy {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
