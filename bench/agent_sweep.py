"""Load sweep on the agentic sessions cut to one task each (issue 10, bench/RESULTS.md,
"Simulator: agentic sessions, Poisson arrivals").  Programs arrive as a Poisson process; one
table per load point.

    python bench/agent_sweep.py --rates 0.003,0.005,0.01 \
        [--programs N] [--setups llama-3.1-8b@h100-80g] [--policies vllm,ttlpolicy] [--json F]

``--programs N`` keeps the first N programs of the seeded arrival order (a shorter run on a
busy machine; the arrival process is the same, cut after N programs).  Parsed sessions are
cached under ~/.cache/ttlpolicy/ keyed by the trace path and options.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import sim_sweep  # bench/, beside this script: loads the sessions
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.report import format_table

POLICIES = "vllm,continuum,ttlpolicy,vllm-offload,infercept,ttlpolicy-offload"
OPTIONS = {"max_context": 120_000, "think_cap_s": 300.0, "human_turns": "drop"}


def subset(programs: list, seed: int, limit: int | None) -> list:
    """The first ``limit`` programs of the seeded arrival order (all when None); the arrival
    process shuffles again with the same seed: a subset, not a prefix of time."""
    if limit is None:
        return programs
    order = list(programs)
    random.Random(seed).shuffle(order)
    return order[:limit]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--rates", default="0.003,0.004,0.005,0.01", help="programs per second")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--setups", default="llama-3.1-8b@h100-80g")
    ap.add_argument("--programs", type=int, default=None, help="first N programs only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(args.trace, OPTIONS)
    if programs is None:
        return 2
    programs = subset(programs, args.seed, args.programs)
    results = []
    for setup in args.setups.split(","):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for rate in (float(x) for x in args.rates.split(",")):
            rows = []
            for pol in args.policies.split(","):
                t = time.perf_counter()
                s = simulate(hw, pol, programs, rate_per_s=rate, seed=args.seed).summary()
                wall = time.perf_counter() - t
                rows.append((pol, s))
                results.append(
                    {"setup": setup, "rate": rate, "policy": pol, "wall_s": wall, "summary": s}
                )
                print(f"  {setup} rate={rate} {pol}: {wall:.1f} s", file=sys.stderr, flush=True)
            print(f"\n{model} on {MODELS[model].tp}× {gpu}, {rate:g} programs/s")
            print(format_table(rows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
