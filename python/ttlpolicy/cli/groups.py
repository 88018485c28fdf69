"""Replay a trace through the prefix tree: per-group TTLs by return on investment, per tier.

Prints the largest groups (blocks, hits, median reuse interval, TTL on each tier), then, per
tier, the hit rate, block-hours and net value of four ways to run that tier with the same
capacity: no TTL (LRU), the ROI-optimal single global TTL, the best global TTL of a sweep, and
one TTL per group.  All TTLs are fitted on a first, unbounded replay of the same trace
(hindsight for every TTL policy alike), then applied on a second replay.

Economics (defaults; override on the command line):

* bytes per token: 131072 — Llama-3.1-8B (32 layers × 8 KV heads × head dim 128 × K and V ×
  2 bytes, bf16; from the model's config.json).  Bytes per block = that × the trace's block
  size (512 tokens for Mooncake, 64 for the agentic sessions).
* benefit per block hit: the prefill it saves, block_tokens / prefill rate × GPU price; prefill
  rate 20,000 tokens/s (an 8B model on one H100: 2 × 8e9 FLOP/token at ~40 % of its 989 TFLOP/s
  bf16 peak gives ~25k); GPU price: the H100's in the shipped price table
  (``ttlpolicy/data/prices.json``, the one ``ttlpolicy plan`` uses, sources beside each number;
  ``--prices FILE`` reads another).
  Reloading from the tier is taken as free.
* tier prices: DRAM's and SSD's in that table, converted from $/GB-hour to $/GiB-hour.

Agentic session files number their blocks per file: ids are made unique per file and all
sessions start together at t = 0.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..plan.prices import Prices, load_prices
from ..traces import HashScopes, read_trace, resolve_trace, sample_dir
from ._args import float_in, int_in


def default_tiers(prices: Prices) -> dict[str, float]:
    """Each tier's price in ``prices``, $ per GiB-hour."""
    return {name: t.usd_per_gb_h * GIB / 1e9 for name, t in prices.tiers.items()}


GLOBAL_TTL_GRID_S = (
    0.0,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1200.0,
    1800.0,
    3600.0,
)
GIB = float(1 << 30)
MAX_BLOCKS = 1 << 31  # what the prefix tree can hold
MAX_GROUP_DEPTH = 64
MAX_TTL_S = 1e9


@dataclass(frozen=True)
class Request:
    arrival_s: float
    hash_ids: Any  # numpy int64 array (compact: traces hold tens of millions of hashes)


@dataclass(frozen=True)
class Outcome:
    """One replay: block hits over blocks requested, and block-hours held."""

    label: str
    ttl: str
    hits: int
    blocks: int
    block_hours: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.blocks if self.blocks else 0.0

    def value(self, benefit_per_hit: float, price_per_block_h: float) -> float:
        """Dollars: prefill saved minus the price of holding."""
        return self.hits * benefit_per_hit - self.block_hours * price_per_block_h


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The trace, the tiers and the tree; then ``add_cost_arguments``."""
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        type=resolve_trace,
        help="trace with block hashes: agentic session file (.json[.gz]) or folder of them, "
        "or a Mooncake trace (.jsonl[.gz]) (default: the 16 shipped sample sessions)",
    )
    parser.add_argument(
        "--tier",
        action="append",
        metavar="NAME=USD_PER_GIB_HOUR",
        help="a tier and its price (repeatable; default: dram and ssd at the shipped price "
        "table's prices, ttlpolicy/data/prices.json)",
    )
    parser.add_argument(
        "--capacity-blocks",
        metavar="BLOCKS",
        type=int_in(1, MAX_BLOCKS),
        help="tier capacity in blocks (default: 1/4 of the distinct blocks)",
    )
    parser.add_argument(
        "--group-depth",
        metavar="BLOCKS",
        type=int_in(1, MAX_GROUP_DEPTH),
        default=2,
        help="blocks of prefix that name a group in the prefix tree",
    )
    parser.add_argument(
        "--max-ttl-s",
        metavar="S",
        type=float_in(0.0, MAX_TTL_S, low_open=True),
        default=3600.0,
        help="longest TTL considered, s",
    )
    add_cost_arguments(parser)


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """What a hit is worth and a block costs; what is read and shown."""
    parser.add_argument(
        "--bytes-per-token",
        metavar="BYTES",
        type=float_in(0.0, 1e9, low_open=True),
        default=131072.0,
        help="KV bytes per token (default: Llama-3.1-8B, bf16)",
    )
    parser.add_argument(
        "--prefill-tokens-per-s",
        metavar="PER_S",
        type=float_in(0.0, 1e12, low_open=True),
        default=20000.0,
        help="prefill rate of the GPU, tokens/s",
    )
    parser.add_argument(
        "--gpu-usd-per-hour",
        metavar="USD",
        type=float_in(0.0, 1e6, low_open=True),
        default=None,
        help="GPU price, $ per GPU-hour (default: the H100's in ttlpolicy/data/prices.json)",
    )
    parser.add_argument(
        "--top",
        metavar="N",
        type=int_in(0, MAX_BLOCKS),
        default=10,
        help="largest groups shown (0: none)",
    )
    parser.add_argument(
        "--max-requests",
        metavar="N",
        type=int_in(1, MAX_BLOCKS),
        help="replay only the first N requests (by arrival)",
    )
    parser.add_argument(
        "--max-sessions",
        metavar="N",
        type=int_in(1, MAX_BLOCKS),
        help="read only the first N session files of a directory",
    )
    parser.add_argument(
        "--prices",
        metavar="FILE",
        help="price table giving the default tier and GPU prices (JSON, the layout of the "
        "shipped ttlpolicy/data/prices.json, which is the default)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def parse_tiers(specs: Sequence[str] | None, prices: Prices) -> dict[str, float]:
    if not specs:
        return default_tiers(prices)
    tiers = {}
    for spec in specs:
        name, sep, price = spec.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--tier must be NAME=USD_PER_GIB_HOUR, got {spec!r}")
        try:
            p = float(price)
        except ValueError:
            raise ValueError(f"--tier {name}: price must be a number, got {price!r}") from None
        if not math.isfinite(p) or p < 0:
            raise ValueError(f"--tier {name}: price must be a finite number >= 0, got {price!r}")
        tiers[name.strip()] = p
    return tiers


def load_requests(
    path: str | Path, max_requests: int | None = None, max_sessions: int | None = None
) -> tuple[list[Request], int, HashScopes]:
    """Requests with block hashes, sorted by arrival; the trace's block size in tokens; and
    the mapping that made block ids unique across files (to name groups).
    ``max_sessions``: stop reading at the first record of the (N+1)-th session file."""
    scopes = HashScopes()
    out: list[Request] = []
    block_tokens = 0
    files: set[str] = set()
    for rec in read_trace(path):
        # Sub-agents ("<session>/<agent>") come from their parent's file.
        files.add(rec.session_id.split("/")[0])
        if max_sessions is not None and len(files) > max_sessions:
            break
        if not rec.hash_ids:
            continue
        if rec.block_tokens <= 0:
            # Blocks of 0 tokens would price every hit at $0 and every TTL at 0.
            raise ValueError(
                f"{path}: session {rec.session_id!r} has hash_ids but block_size "
                f"{rec.block_tokens}: blocks must hold at least one token"
            )
        if block_tokens and rec.block_tokens != block_tokens:
            raise ValueError(
                f"{path}: mixed block sizes ({block_tokens} and {rec.block_tokens} tokens)"
            )
        block_tokens = rec.block_tokens
        out.append(Request(rec.arrival_s, np.array(scopes.hash_ids(rec), dtype=np.int64)))
    if not out:
        raise ValueError(f"{path}: no request carries block hashes (hash_ids): nothing to replay")
    out.sort(key=lambda r: r.arrival_s)  # stable: ties keep file order
    return (out[:max_requests] if max_requests else out), block_tokens, scopes


class Progress:
    """A plain-text progress bar on stderr, redrawn at most every 1 % of the work."""

    def __init__(self, total: int, stream: TextIO | None, width: int = 30) -> None:
        self.total, self.stream, self.width = max(total, 1), stream, width
        self.done, self._shown = 0, -1

    def advance(self, n: int, label: str) -> None:
        self.done += n
        pct = 100 * self.done // self.total
        if self.stream is None or pct == self._shown:
            return
        tty = self.stream.isatty()
        if not tty and pct // 10 == self._shown // 10:
            return  # a log file gets a line per 10 %, not a hundred redraws
        self._shown = pct
        fill = self.width * self.done // self.total
        bar = f"[{'#' * fill}{'.' * (self.width - fill)}] {pct:3d}% {label:<28}"
        self.stream.write(f"\r{bar}" if tty else f"{bar.rstrip()}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


def replay(
    tree_factory: Callable[[], Any],
    requests: Sequence[Request],
    progress: Progress | None = None,
    label: str = "",
) -> tuple[Any, int, int, float]:
    """Insert every request; returns (tree, block hits, blocks requested, block-seconds)."""
    tree = tree_factory()
    hits = blocks = 0
    step = max(1, len(requests) // 100)
    for i, req in enumerate(requests):
        hits += tree.insert(req.hash_ids, req.arrival_s)
        blocks += len(req.hash_ids)
        if progress is not None and (i + 1) % step == 0:
            progress.advance(step, label)
    if progress is not None:
        progress.advance(len(requests) % step, label)
    end = requests[-1].arrival_s if requests else 0.0
    return tree, hits, blocks, tree.block_seconds(end)


def frontier_block_hours(points: Sequence[Outcome], hit_rate: float) -> float | None:
    """Block-hours the global-TTL sweep needs for ``hit_rate``, by linear interpolation between
    its points (sorted by hit rate); None when the sweep never reaches it."""
    pts = sorted((p.hit_rate, p.block_hours) for p in points)
    for (h0, b0), (h1, b1) in itertools.pairwise(pts):
        if h0 <= hit_rate <= h1:
            return b0 if h1 == h0 else b0 + (b1 - b0) * (hit_rate - h0) / (h1 - h0)
    if pts and hit_rate <= pts[0][0]:
        return pts[0][1]
    return None


def _hours(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.4g}"


def ttl_text(ttl_s: float) -> str:
    """A TTL as printed: whole seconds from 10 s, tenths below (the solver picks a sample plus
    a hair, so 71.999 and 3.001 are 72 and 3 s to a reader); "0" for no pin, "inf" for no
    limit."""
    if not math.isfinite(ttl_s):
        return "inf"
    if ttl_s == 0:
        return "0"
    return f"{ttl_s:.0f}" if ttl_s >= 10 else f"{ttl_s:.1f}"


def group_name(key: Sequence[int], scopes: HashScopes) -> str:
    """A group as people read it: ``session:blocks`` for per-file block ids (the ids the trace
    recorded, not the 64-bit ids made unique across files), the ids themselves otherwise."""
    origins = [o for o in (scopes.origin(h) for h in key) if o is not None]
    if origins and len(origins) == len(key) and len({o[0] for o in origins}) == 1:
        text = f"{origins[0][0]}:" + ",".join(str(o[1]) for o in origins)
    else:
        text = ",".join(str(h) for h in key)
    return text if len(text) <= 24 else text[:21] + "..."


@dataclass
class Study:
    """What ``run`` replayed, for its report: the trace, its requests and block size, the
    prices, the learned groups, and each replay's outcome (per tier: the price of a
    block-hour, the group TTLs, the ROI global TTL's outcome and the group TTLs')."""

    trace: str
    requests: list[Request]
    block_tokens: int
    scopes: HashScopes
    block_gib: float
    benefit: float
    tiers: dict[str, float]
    capacity: int
    distinct: int
    groups: list[Any]
    lru: Outcome
    sweep: list[Outcome]
    per_tier: dict[str, tuple[float, dict, Outcome, Outcome]]


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    study = replay_all(args)
    report_groups(study, args, out)
    report_tiers(study, out)
    return 0


def replay_all(args: argparse.Namespace) -> Study:
    """Every replay ``run`` reports: learning (unbounded), LRU, the global TTL sweep, and per
    tier the ROI global TTL and the group TTLs."""
    import ttlpolicy as tp

    prices = load_prices(args.prices)  # a bad table is refused before any replay
    tiers = parse_tiers(args.tier, prices)  # numbers were checked by their argparse types
    gpu_usd_per_h = args.gpu_usd_per_hour
    if gpu_usd_per_h is None:
        gpu_usd_per_h = prices.gpu("h100-80g")

    trace = args.trace or str(sample_dir())
    requests, block_tokens, scopes = load_requests(trace, args.max_requests, args.max_sessions)
    block_gib = args.bytes_per_token * block_tokens / GIB
    benefit = block_tokens / args.prefill_tokens_per_s * gpu_usd_per_h / 3600.0
    grid = sorted({t for t in GLOBAL_TTL_GRID_S if t <= args.max_ttl_s} | {args.max_ttl_s})
    n_replays = 2 + len(grid) + 2 * len(tiers)
    total = n_replays * len(requests)
    stream = None if args.no_progress else sys.stderr
    progress = Progress(total, stream)

    # 1. Learn: an unbounded tree, nothing expires; every group's reuse intervals.
    unbounded = tp.PrefixTree(
        max_nodes=1 << 31, group_depth=args.group_depth, max_idle_groups=1 << 31
    )
    learned, *_ = replay(lambda: unbounded, requests, progress, "learning reuse intervals")
    distinct = len(learned)
    capacity = args.capacity_blocks if args.capacity_blocks is not None else max(1, distinct // 4)
    groups = learned.groups()
    pooled = [x for g in groups for x in g.reuse_s]

    def bounded(**kw: Any) -> Callable[[], Any]:
        return lambda: tp.PrefixTree(
            max_nodes=capacity, group_depth=args.group_depth, max_idle_groups=1 << 31, **kw
        )

    def outcome(label: str, ttl: str, factory: Callable[[], Any]) -> Outcome:
        _, hits, blocks, block_s = replay(factory, requests, progress, label)
        return Outcome(label, ttl, hits, blocks, block_s / 3600.0)

    lru = outcome("no TTL (LRU)", "inf", bounded())
    sweep = [outcome("global TTL", f"{t:g}", bounded(default_ttl_s=t)) for t in grid]
    per_tier = {}
    for name, usd_per_gib_h in tiers.items():
        price_block_h = usd_per_gib_h * block_gib
        price_block_s = price_block_h / 3600.0
        ttls = learned.group_ttls(benefit, price_block_s, args.max_ttl_s)
        roi_global = tp.solve_ttl(pooled, benefit, price_block_s, args.max_ttl_s)[0]
        roi = outcome(
            f"ROI global TTL [{name}]", ttl_text(roi_global), bounded(default_ttl_s=roi_global)
        )

        def with_group_ttls(ttls: dict = ttls) -> Any:
            tree = bounded()()
            tree.set_group_ttls(ttls)
            return tree

        grouped = outcome(f"group TTLs [{name}]", "by-group", with_group_ttls)
        per_tier[name] = (price_block_h, ttls, roi, grouped)
    progress.close()
    return Study(
        trace, requests, block_tokens, scopes, block_gib, benefit, tiers, capacity, distinct,
        groups, lru, sweep, per_tier,
    )  # fmt: skip


def report_groups(study: Study, args: argparse.Namespace, out: TextIO) -> None:
    """The trace, the prices, and the largest groups with their TTL on each tier."""
    import ttlpolicy as tp

    s = study
    trace, requests, block_tokens, scopes = s.trace, s.requests, s.block_tokens, s.scopes
    block_gib, benefit, tiers, capacity = s.block_gib, s.benefit, s.tiers, s.capacity
    distinct, groups, lru, per_tier = s.distinct, s.groups, s.lru, s.per_tier
    p = lambda *a: print(*a, file=out)  # noqa: E731
    span_s = requests[-1].arrival_s - requests[0].arrival_s
    p(f"trace: {trace}")
    p(
        f"requests {len(requests)}, blocks requested {lru.blocks}, distinct blocks {distinct}, "
        f"block = {block_tokens} tokens = {block_gib * 1024:.1f} MiB, span {span_s / 3600:.2f} h"
    )
    p(
        f"capacity {capacity} blocks ({capacity * block_gib:.1f} GiB); backend {tp.backend}; "
        f"group depth {args.group_depth}"
    )
    p(
        f"benefit per block hit ${benefit:.3g}; prices $/GiB-h: "
        + ", ".join(f"{k}={v:g}" for k, v in tiers.items())
    )
    p("")
    with_ttl = {name: sum(1 for t in v[1].values() if t > 0) for name, v in per_tier.items()}
    p(
        f"groups: {len(groups)} ("
        + ", ".join(f"TTL > 0 on {k}: {n}" for k, n in with_ttl.items())
        + ")"
    )
    top = sorted(groups, key=lambda g: (-g.hits, -g.accesses))[: args.top]
    head = f"{'group':<26}{'blocks':>8}{'accesses':>9}{'hits':>9}{'median reuse s':>16}"
    p(head + "".join(f"{'TTL ' + k + ' s':>14}" for k in tiers))
    for g in top:
        med = statistics.median(g.reuse_s) if g.reuse_s else float("nan")
        row = f"{group_name(g.key, scopes):<26}{g.blocks:>8}{g.accesses:>9}{g.hits:>9}{med:>16.1f}"
        p(row + "".join(f"{ttl_text(per_tier[k][1][tuple(g.key)]):>14}" for k in tiers))


def report_tiers(study: Study, out: TextIO) -> None:
    """Per tier, the four ways to run it; then the global TTL sweep."""
    p = lambda *a: print(*a, file=out)  # noqa: E731
    benefit, lru, sweep = study.benefit, study.lru, study.sweep
    per_tier = study.per_tier
    for name, (price_block_h, _, roi, grouped) in per_tier.items():
        best = max(sweep, key=lambda o: o.value(benefit, price_block_h))
        p("")
        p(f"tier {name}: ${price_block_h:.3g} per block-hour")
        p(f"{'policy':<30}{'TTL s':>10}{'hit rate':>10}{'block-hours':>14}{'value $':>12}")
        for o in (lru, best, roi, grouped):
            label = "best global TTL (sweep)" if o is best else o.label.split(" [")[0]
            value = o.value(benefit, price_block_h)
            p(f"{label:<30}{o.ttl:>10}{o.hit_rate:>10.4f}{_hours(o.block_hours):>14}{value:>12.4g}")
        need = frontier_block_hours(sweep, grouped.hit_rate)
        if need is None:
            p(
                f"group TTLs reach hit rate {grouped.hit_rate:.4f}, "
                "above every global TTL of the sweep"
            )
        else:
            p(
                f"same hit rate ({grouped.hit_rate:.4f}) with one global TTL: "
                f"{need:.1f} block-hours; "
                f"group TTLs: {grouped.block_hours:.1f} ({grouped.block_hours / need - 1:+.1%})"
                if need > 0
                else f"same hit rate ({grouped.hit_rate:.4f}) "
                "needs no block-hours with a global TTL"
            )
    p("")
    p("global TTL sweep (capacity as above): TTL s, hit rate, block-hours")
    p("  " + "; ".join(f"{o.ttl}: {o.hit_rate:.4f}, {o.block_hours:.1f}" for o in sweep))
