"""Argument types shared by the sub-commands: every number is checked when the command line is
parsed, before any work, and a bad one is refused with the flag, the value and the allowed
range (argparse prefixes the flag: ``argument --concurrency: must be an integer in [1, ...]``).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their line breaks and bullets; a flag with a default shows it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else format(x, ".15g")


def _range_text(low: float, high: float | None, low_open: bool = False) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {_num(low)}"
    return f"in {'(' if low_open else '['}{_num(low)}, {_num(high)}]"


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in ``[low, high]`` (``high`` None: no upper bound)."""

    def parse(text: str) -> int:
        rng = _range_text(low, high)
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {rng}, got {text!r}") from None
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"must be an integer {rng}, got {n}")
        return n

    parse.__name__ = "integer"  # argparse names the type in its fallback message
    return parse


#: The smallest number a flag open at 0 takes (``float_in(0, ..., low_open=True)``: a rate, a
#: scale): its reciprocal (a rate's mean gap) times the gaps of a long run stays finite.  A
#: rate of 1e-320 made every arrival inf and the run wait for ever.
MIN_POSITIVE = 1e-290


def float_in(
    low: float, high: float | None = None, *, low_open: bool = False
) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``); nan and inf are
    refused, so a typo cannot silently mean "no limit".  Open at 0, a number below
    ``MIN_POSITIVE`` is refused too (what it divides would overflow)."""

    def parse(text: str) -> float:
        rng = _range_text(low, high, low_open)
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {rng}, got {text!r}") from None
        too_low = x <= low if low_open else x < low
        if not math.isfinite(x) or too_low or (high is not None and x > high):
            raise argparse.ArgumentTypeError(f"must be a finite number {rng}, got {text!r}")
        if low_open and low == 0 and x < MIN_POSITIVE:
            raise argparse.ArgumentTypeError(
                f"must be a number {rng} of at least {MIN_POSITIVE:g} (its reciprocal, "
                f"e.g. a rate's mean gap, would not be finite), got {text!r}"
            )
        return x

    parse.__name__ = "number"
    return parse


def finite_float(text: str) -> float:
    """Any finite number (the flag gives negative values a meaning of its own)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return x


def writable_file(text: str) -> str:
    """An output file we will be able to write, checked before any work is done (a run of
    minutes should not end in "permission denied").  The folder is tried for real (a file
    created and removed there), since permission bits do not tell a read-only mount or, for
    root, anything at all; the target itself is not created."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: no such directory {str(parent)!r}"
        )
    if p.exists() and not os.access(p, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".ttlpolicy-write-check-")
    except OSError as e:
        reason = (e.strerror or str(e)).lower()
        if e.errno == errno.ENOENT:  # the folder is there: a virtual filesystem (/proc) says so
            reason = "its filesystem does not allow creating files there (ENOENT)"
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: folder {str(parent)!r}: {reason}"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return text


def add_ids_argument(parser: argparse.ArgumentParser) -> None:
    """``--ids explicit|inferred|none``: which program ids the ttlpolicy policies see (issue
    45; ``sim/policies/program_ids.py``); the other policies are unchanged.  Shared by
    ``ttlpolicy compare`` and the simulator's benchmarks (bench/sim_sweep.py, bounds.py,
    fleet.py), which apply it with ``sim.policies.ttlpolicy_plugin.with_ids``."""
    parser.add_argument(
        "--ids",
        choices=("explicit", "inferred", "none"),
        default="explicit",
        help="program ids the ttlpolicy policies see: the trace's (explicit), linked from each "
        "call's prompt block hashes by ttlpolicy.ProgramLinker (inferred: the policy is named "
        "ttlpolicy:inferred-ids), or none (each call its own program: ttlpolicy:no-ids)",
    )


def add_common_prefix_argument(parser: argparse.ArgumentParser) -> None:
    """``--common-prefix``: the sessions share the prefix real Claude Code sessions share (tool
    definitions and system prompt: each file's ``tool_tokens + system_tokens``), which the
    traces' per-file hash ids hide (issue 45; ``sim/workload.py``, ``sim/kv_cache.py``).
    Shared by ``ttlpolicy compare`` and bench/sim_sweep.py, bounds.py, fleet.py, which pass it
    to ``programs_from_trace(common_prefix=...)``."""
    parser.add_argument(
        "--common-prefix",
        action="store_true",
        help="agentic traces: every session's first (tool_tokens + system_tokens) tokens, from "
        "its file's header, are one prefix common to all sessions, stored once in the KV cache "
        "and seen by the inferred ids' linker (default: each session's blocks its own, as the "
        "traces' per-file hash ids say)",
    )
