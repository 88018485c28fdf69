"""Workload loading, parsed vs from the trace cache, and the simulator loop's speed
(bench/RESULTS.md, "Tier planner").

    PYTHONPATH=python python bench/plan_load.py [--trace DIR] [--policies P,Q] [--repeat N]

Parse: the first ``programs_from_trace`` call (it parses as ``compare`` did before the cache,
then stores the entry); cached: the same call again (``ttlpolicy.traces.cache``).  (The tiered
simulator's block form, ``load_block_trace``, is cached the same way; ``ttlpolicy plan``
prints its load time.)  The cache goes to a fresh temporary folder, so the
first load builds it.  Then each policy's engine loop runs on the loaded programs (8 in
flight, as ``compare``'s default), reported as LLM calls per CPU second (wall time printed
beside: the development machine is shared).  ``--repeat N`` runs each loop N times and
reports the best and the median (neighbours slow CPU time too, by up to a fifth here).
The library backend is printed (``TTLPOLICY_BACKEND=python`` runs the Python reference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from trace_paths import traces_dir
from ttlpolicy import backend
from ttlpolicy.sim import programs_from_records, programs_from_trace, roofline, simulate
from ttlpolicy.traces import read_trace

OPTIONS: dict[str, Any] = {"max_context": 120_000, "context_mode": "truncate", "think_cap_s": 300.0}


def timed(f):
    """(result, CPU seconds of this process): on a shared machine wall time measures the
    neighbours; both are printed."""
    t, c = time.perf_counter(), time.process_time()
    out = f()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"  ({wall:.2f} s wall, {cpu:.2f} s CPU)")
    return out, cpu


def main() -> int:
    traces = traces_dir()
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(traces / "claude-code"))
    ap.add_argument("--policies", default="vllm,ttlpolicy")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--check", action="store_true", help="also compare with an uncached parse")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each loop (best, median)")
    args = ap.parse_args()
    os.environ["TTLPOLICY_CACHE"] = tempfile.mkdtemp(prefix="ttlpolicy-bench-")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2-core machine); backend {backend}")
    # the first call parses (as compare did before the cache) and stores the entry
    parsed, t_parse = timed(lambda: programs_from_trace(args.trace, **OPTIONS))
    cached, t_cached = timed(lambda: programs_from_trace(args.trace, **OPTIONS))
    assert cached == parsed, "cached programs differ from the parse"
    if args.check:
        assert parsed == programs_from_records(read_trace(args.trace), **OPTIONS)
    calls = sum(len(p.turns) for p in parsed)
    print(f"{len(parsed)} programs, {calls} calls")
    print(f"parse + store (first run) {t_parse:8.2f} CPU s")
    print(f"cached programs           {t_cached:8.2f} CPU s ({t_parse / t_cached:.0f}x faster)")
    hw = roofline("llama-3.1-8b", "h100-80g", cpu_tier_bytes=256e9)
    for pol in args.policies.split(","):
        runs = [
            timed(lambda pol=pol: simulate(hw, pol, cached, concurrency=args.concurrency))
            for _ in range(max(1, args.repeat))
        ]
        rates = sorted(m.calls_done / t for m, t in runs)
        line = f"simulator loop {pol:<12} {rates[-1]:10.0f} calls per CPU s"
        if len(rates) > 1:
            line += f" (best of {len(rates)}; median {statistics.median(rates):.0f})"
        print(f"{line} ({min(t for _, t in runs):.2f} s)")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
