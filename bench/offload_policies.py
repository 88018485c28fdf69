"""vLLM's CPU offload tier under its own policies (``lru``, ``arc``) and ours
(``TTLCachePolicy``, loaded by module path), at equal capacities, on the same block-hash
streams, through vLLM's real ``CPUOffloadingManager`` (``bench/vllm_offload_replay.py``).

Streams: agentic sessions (the package's 4 sample sessions; with ``--sessions N`` also the
first N files of ``$TTLPOLICY_TRACES/claude-code``) started at Poisson arrivals, and the
Mooncake trace's first ``--mooncake-requests`` requests.  Capacities: fractions of the
stream's distinct chunks.  ``ttl+hints`` is ours told each program's last request (what
``TTLScheduler`` passes on from ``last_turn``).

Per run: hit rate (chunks found in the tier / chunks asked), reloaded GiB (hits × chunk
bytes), chunk-hours allocated in the tier, value $ = hits × benefit − chunk-hours × price
(``OffloadSettings`` prices for the trace's block size), and policy time per call.

Run (the vLLM venv; see adapters/vllm/README.md):
    "$VLLM_VENV/bin/python" bench/offload_policies.py --sessions 12
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from trace_paths import traces_dir
from ttlpolicy.traces import sample_dir
from ttlpolicy_vllm.offload import OffloadSettings
from vllm_offload_replay import (
    agentic_stream,
    iter_sessions,
    mooncake_stream,
    replay,
)

POLICIES = [("lru", False), ("arc", False), ("ttl", False), ("ttl", True)]


def run(
    name: str,
    stream: list,
    block_tokens: int,
    fractions: list[float],
    out: list,
    policies: list[str] | None = None,
) -> None:
    distinct = len({h for a in stream for h in a.hash_ids})
    asked = sum(len(a.hash_ids) for a in stream)
    settings = OffloadSettings(chunk_tokens=block_tokens)
    os.environ["TTLPOLICY_OFFLOAD"] = json.dumps({"chunk_tokens": block_tokens})
    span_h = (stream[-1].t_s - stream[0].t_s) / 3600
    print(
        f"\n### {name}: {len(stream)} requests, {asked:,} chunks asked, {distinct:,} distinct"
        f" ({block_tokens}-token chunks, {settings.chunk_bytes / 2**20:.0f} MiB), {span_h:.1f} h"
    )
    print(
        "| capacity (chunks) | policy | hit rate | reloaded GiB | chunk-hours | value $ |"
        " µs per policy call | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for frac in fractions:
        capacity = max(1, int(distinct * frac))
        for policy, hints in POLICIES:
            label = policy + ("+hints" if hints else "")
            if policies is not None and label not in policies:
                continue
            t0 = time.perf_counter()
            s = replay(policy, capacity, stream, hints=hints)
            wall = time.perf_counter() - t0
            chunk_h = s.chunk_seconds / 3600
            value = s.hit_chunks * settings.benefit_per_hit - s.chunk_seconds * (
                settings.price_per_chunk_s
            )
            row = {
                "stream": name,
                "capacity": capacity,
                "fraction": frac,
                "policy": label,
                "hit_rate": s.hit_rate,
                "reloaded_gib": s.hit_chunks * settings.chunk_bytes / 2**30,
                "chunk_hours": chunk_h,
                "value": value,
                "us_per_call": 1e6 * s.policy_seconds / max(1, s.policy_calls),
                "wall_s": wall,
                "store_failures": s.store_failures,
            }
            out.append(row)
            print(
                f"| {capacity:,} ({frac:.0%}) | {label} | {s.hit_rate:.4f} |"
                f" {row['reloaded_gib']:,.0f} | {chunk_h:,.0f} | {value:,.2f} |"
                f" {row['us_per_call']:.2f} | {wall:.0f} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=0, help="claude-code files (0: sample only)")
    ap.add_argument("--mean-gap-s", type=float, default=60.0, help="mean gap of session starts")
    ap.add_argument("--fractions", default="0.05,0.1,0.2", help="capacities, of distinct chunks")
    ap.add_argument("--mooncake-requests", type=int, default=0)
    ap.add_argument("--no-sample", action="store_true", help="skip the shipped sample sessions")
    ap.add_argument("--policies", default="lru,arc,ttl,ttl+hints", help="a subset of these")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    fractions = [float(x) for x in args.fractions.split(",")]
    policies = args.policies.split(",")
    known = [p + ("+hints" if h else "") for p, h in POLICIES]
    if sorted(set(policies) - set(known)):
        ap.error(f"--policies: unknown {sorted(set(policies) - set(known))}; known: {known}")
    rows: list = []
    if not args.no_sample:
        stream = agentic_stream(iter_sessions(sample_dir()), args.mean_gap_s)
        run("agentic sample sessions (4 files, shipped)", stream, 64, fractions, rows, policies)
    if args.sessions:
        folder = traces_dir() / "claude-code"
        stream = agentic_stream(iter_sessions(folder, args.sessions), args.mean_gap_s)
        run(f"claude-code, first {args.sessions} files", stream, 64, fractions, rows, policies)
    if args.mooncake_requests:
        path = traces_dir() / "mooncake" / "conversation_trace.jsonl.gz"
        stream = mooncake_stream(path, args.mooncake_requests)
        run(
            f"Mooncake, first {args.mooncake_requests} requests",
            stream,
            512,
            fractions,
            rows,
            policies,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
