"""ttlpolicy: how long should an LLM engine keep an agent program's KV cache?

Without --trace, every command uses the 16 sample sessions shipped with the package.
`ttlpolicy COMMAND --help` says more.

examples:
  ttlpolicy compare --concurrency 4 --sweep --plot sweep.png
  ttlpolicy fit
  ttlpolicy groups --top 5 --trace path/to/sessions
  ttlpolicy replay --endpoint http://127.0.0.1:8000 --ab http://127.0.0.1:8001 --time-scale 0.1
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ._args import HelpFormatter, add_common_prefix_argument, add_ids_argument

# (the benches share --ids and --common-prefix)
__all__ = ["add_common_prefix_argument", "add_ids_argument", "build_parser", "main"]

#: sub-command name → module under ttlpolicy.cli exposing add_arguments(parser) and run(args)
COMMANDS = {
    "compare": "compare",  # the demo's command first
    "fit": "fit",
    "groups": "groups",
    "plan": "plan",
    "replay": "replay",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    from ttlpolicy import __version__

    parser = argparse.ArgumentParser(
        prog="ttlpolicy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"ttlpolicy {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"ttlpolicy.cli.{module}")
        p = sub.add_parser(
            name,
            help=(mod.__doc__ or name).strip().splitlines()[0],
            description=(mod.__doc__ or "").replace("``", "`"),  # docstrings are reST
            formatter_class=HelpFormatter,
        )
        mod.add_arguments(p)
        modules[name] = mod
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version (0) or a bad argument (2, message printed)
        return e.code if isinstance(e.code, int) else 2
    try:
        return int(modules[args.command].run(args) or 0)
    except BrokenPipeError:  # `ttlpolicy groups ... | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    except (ValueError, OSError) as e:  # bad input: one clear line, no traceback
        print(f"ttlpolicy {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
