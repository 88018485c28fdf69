"""Fit pin TTLs from the tool gaps of agentic sessions and show what the policy decides.

Replays the sessions' tool-call gaps (the time between a ``tool_use`` answer and the next
request) through a :class:`ttlpolicy.TTLPolicy`, in arrival order, and prints the TTL the
policy would give a typical request at a few memory shares, next to the fraction of tool
calls that return within it.
"""

from __future__ import annotations

import argparse

import ttlpolicy as tp
from ttlpolicy.traces import read_trace, resolve_trace, sample_dir

from ._args import int_in

MAX_PREFIX_TOKENS = 1 << 40  # what the cache-miss model accepts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        type=resolve_trace,
        help="agentic session file or folder with stop reasons "
        "(default: the 16 shipped sample sessions)",
    )
    parser.add_argument(
        "--prefix-tokens",
        metavar="TOKENS",
        type=int_in(0, MAX_PREFIX_TOKENS),
        default=50_000,
        help="context of the request to price, tokens",
    )


def tool_gaps_s(path: str) -> list[float]:
    """Gaps after tool_use answers: the next request's think time, per session, in order."""
    gaps: list[float] = []
    prev_stop: dict[str, str | None] = {}
    for rec in read_trace(path):
        if prev_stop.get(rec.session_id) == "tool_use":
            gaps.append(rec.think_time_s)
        prev_stop[rec.session_id] = rec.stop
    return gaps


def run(args: argparse.Namespace) -> int:
    path = args.trace or str(sample_dir())
    gaps = tool_gaps_s(path)
    if not gaps:
        # Without a single tool gap the table would only echo the built-in prior.
        raise ValueError(
            f"{path}: no tool gaps (no request follows a 'tool_use' answer of its session); "
            "fit needs agentic sessions with stop reasons, not a Mooncake or Azure trace"
        )
    policy = tp.TTLPolicy(tp.PolicyConfig())
    for g in gaps:
        policy.observe_tool("tool_use", g)
    print(f"backend: {tp.backend}; {len(gaps)} tool gaps from {path}")
    print(f"{'share of memory':>16} {'benefit_s':>10} {'ttl_s':>8} {'P(return<=ttl)':>15}  source")
    for share in (0.01, 0.05, 0.1, 0.25, 0.5, 1.0):
        d = policy.decide(
            tool="tool_use",
            request_blocks=int(share * 1000),
            mean_active_blocks=1000.0,
            prefix_tokens=args.prefix_tokens,
            now=0.0,
        )
        print(
            f"{share:>16.2f} {d.benefit_s:>10.3f} {d.ttl_s:>8.1f} {d.p_return:>15.2f}  {d.source}"
        )
    return 0
