"""SGLang's host tier (HiCache) under its own eviction strategies (``--radix-eviction-policy``
``lru``, ``lfu``) and ours (``--radix-cache-backend ttlpolicy``), at equal host capacities, on
the same block-hash streams, through SGLang 0.5.23's real tree, host pool and cache controller
on CPU (``bench/sglang_engine.py``; only the copy kernel is replaced).

One trace block is one token of the tree (``page_size`` 1), so capacities count blocks.  Each
request is admitted alone (match, load-back of its host hit, allocation, which evicts and
demotes to the host), emits one token and finishes (insert, write-through backup); its
program is its session (``last_turn`` on its last request).  The device pool is the same for
every policy: ``--device-blocks``, default 1.1 × the stream's largest request (it must hold
one); the host pool is a fraction of the stream's distinct blocks (SGLang's
``--hicache-ratio`` = host / device; a fraction whose host would not exceed the device is
skipped).  ``ttl`` runs the ttlpolicy backend with its GPU pins and load control off
(``TTLPOLICY_PIN_BUDGET_FRACTION=0``, ``"admission": false``), so the device tier is SGLang's
LRU as for ``lru`` and only the host order differs; ``lfu`` is SGLang's one flag for both tiers.
Host-tier hit rate = blocks found on the host (not on the device) / blocks asked; total adds
the device hits.

Run (the SGLang venv; see adapters/sglang/README.md):
    "$SGLANG_VENV/bin/python" bench/sglang_host_tier.py --sessions 12 --mooncake-requests 2000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from array import array
from pathlib import Path
from typing import Any

os.environ["TTLPOLICY_PIN_BUDGET_FRACTION"] = "0"
os.environ["TTLPOLICY_POLICY"] = '{"admission": false}'
# a block is one token: the model's chunk is one block, its group the first two (as vLLM's)
os.environ["TTLPOLICY_OFFLOAD"] = json.dumps({"chunk_tokens": 1})

import ttlpolicy_sglang
from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey

from offload_streams import Access, agentic_stream, iter_sessions, mooncake_stream
from sglang_engine import FakeClock, make_scheduler
from trace_paths import traces_dir
from ttlpolicy.traces import sample_dir

#: (label, --radix-cache-backend, --radix-eviction-policy)
POLICIES = [("lru", None, "lru"), ("lfu", None, "lfu"), ("ttl", "ttlpolicy", "lru")]
OUT_TOKEN = -1  # the one token each request emits (never a trace block id)


def replay(
    backend: str | None, policy: str, device_blocks: int, host_blocks: int, stream: list[Access]
) -> dict[str, Any]:
    clock = FakeClock()
    s = make_scheduler(
        device_blocks,
        backend,
        clock if backend else None,
        host_ratio=host_blocks / device_blocks,
        eviction_policy=policy,
        max_context=max(len(a.hash_ids) for a in stream) + 8,
    )
    asked = device_hits = host_hits = 0
    t0 = time.perf_counter()
    for a in stream:
        clock.now = 1000.0 + a.t_s
        ids = list(a.hash_ids)
        match = s.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", ids))))
        asked += len(ids)
        device_hits += match.device_prefix_len
        host_hits += min(match.host_hit_length, len(ids) - match.device_prefix_len)
        session = a.request_id.rsplit("-", 1)[0]
        req = s.submit(ids, program=session, last_turn=a.last_turn, max_new_tokens=1)
        admitted = s.schedule()
        if admitted != [req]:
            raise RuntimeError(f"request {a.request_id} ({len(ids)} blocks) was not admitted")
        s.finish(req, [OUT_TOKEN])
    wall = time.perf_counter() - t0
    s.cache.shutdown()
    return {
        "host_hit_rate": host_hits / asked,
        "total_hit_rate": (host_hits + device_hits) / asked,
        "wall_s": wall,
        "host_pool": s.cache.cache_controller.mem_pool_host.size,
    }


def run(
    name: str,
    stream: list[Access],
    fractions: list[float],
    device: int,
    out: list,
    policies: list[str] | None = None,
    beyond_device: bool = False,
) -> None:
    distinct = len({h for a in stream for h in a.hash_ids})
    asked = sum(len(a.hash_ids) for a in stream)
    largest = max(len(a.hash_ids) for a in stream)
    device = device or math.ceil(1.1 * largest)
    print(
        f"\n### {name}: {len(stream)} requests, {asked:,} blocks asked, {distinct:,} distinct,"
        f" largest request {largest:,}; device pool {device:,} blocks"
    )
    print("| host capacity (blocks) | policy | host-tier hit rate | total hit rate | wall s |")
    print("|---|---|---|---|---|")
    for frac in fractions:
        host = device + int(distinct * frac) if beyond_device else int(distinct * frac)
        if host <= device:
            print(f"| {host:,} ({frac:.0%}) | skipped: not above the device pool | | | |")
            continue
        for label, backend, policy in POLICIES:
            if policies is not None and label not in policies:
                continue
            r = replay(backend, policy, device, host, stream)
            row = {"stream": name, "fraction": frac, "host_blocks": host, "device_blocks": device}
            out.append({**row, "policy": label, **r})
            print(
                f"| {host:,} ({frac:.0%}) | {label} | {r['host_hit_rate']:.4f} |"
                f" {r['total_hit_rate']:.4f} | {r['wall_s']:.0f} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=0, help="claude-code files (0: sample only)")
    ap.add_argument("--mean-gap-s", type=float, default=60.0, help="mean gap of session starts")
    ap.add_argument("--fractions", default="0.05,0.1", help="host capacities, of distinct blocks")
    ap.add_argument("--device-blocks", type=int, default=0, help="0: 1.1 × the largest request")
    ap.add_argument("--mooncake-requests", type=int, default=0)
    ap.add_argument("--no-sample", action="store_true", help="skip the shipped sample sessions")
    ap.add_argument(
        "--host-beyond-device",
        action="store_true",
        help="host pool = device pool + the fraction (the host's room beyond the device's backups)",
    )
    ap.add_argument("--policies", default="lru,lfu,ttl", help="a subset of lru,lfu,ttl")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    policies = args.policies.split(",")
    beyond = args.host_beyond_device
    unknown = sorted(set(policies) - {label for label, _, _ in POLICIES})
    if unknown:
        ap.error(f"--policies: unknown {unknown}; known: lru, lfu, ttl")
    ttlpolicy_sglang.register()
    fractions = [float(x) for x in args.fractions.split(",")]
    rows: list = []
    if not args.no_sample:
        stream = agentic_stream(iter_sessions(sample_dir()), args.mean_gap_s)
        run(
            "agentic sample sessions (shipped)",
            stream,
            fractions,
            args.device_blocks,
            rows,
            policies,
            beyond,
        )
    if args.sessions:
        folder = traces_dir() / "claude-code"
        stream = agentic_stream(iter_sessions(folder, args.sessions), args.mean_gap_s)
        run(
            f"claude-code, first {args.sessions} files",
            stream,
            fractions,
            args.device_blocks,
            rows,
            policies,
            beyond,
        )
    if args.mooncake_requests:
        path = traces_dir() / "mooncake" / "conversation_trace.jsonl.gz"
        stream = mooncake_stream(path, args.mooncake_requests)
        name = f"Mooncake, first {args.mooncake_requests} requests"
        run(name, stream, fractions, args.device_blocks, rows, policies, beyond)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
