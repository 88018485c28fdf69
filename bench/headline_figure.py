"""The README's headline figure: mean program completion time against load for stock vLLM,
Continuum, the published CacheTTL model and ttlpolicy, on the agentic sessions cut to one task
each (``agent_sweep.py``'s workload and engines), written as a PNG under docs/.

    PYTHONPATH=python python bench/headline_figure.py [--programs N] [--out docs/headline.png]

Prints the table behind each point (bench/RESULTS.md, "Simulator: agentic sessions, Poisson
arrivals").  The full 512 programs by default (~2 min on two shared cores); ``--programs N``
keeps the first N of the seeded arrival order.
"""

from __future__ import annotations

import argparse
import sys
import time

import agent_sweep  # bench/, beside this script: the sweep's workload and options
import sim_sweep
from ttlpolicy.cli.compare import plot
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.report import format_table

POLICIES = "vllm,continuum,cachettl,ttlpolicy"
RATES = "0.002,0.003,0.004,0.005,0.01,0.02"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--rates", default=RATES, help="programs arriving per second")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--setup", default="llama-3.1-8b@h100-80g")
    ap.add_argument("--programs", type=int, default=None, help="first N programs only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/headline.png")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(args.trace, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    programs = agent_sweep.subset(programs, args.seed, args.programs)
    model, gpu = args.setup.split("@")
    hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
    results = []
    for rate in (float(x) for x in args.rates.split(",")):
        rows = []
        for pol in args.policies.split(","):
            t = time.perf_counter()
            s = simulate(hw, pol, programs, rate_per_s=rate, seed=args.seed).summary()
            print(f"  rate={rate} {pol}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
            rows.append((pol, s))
            results.append({"policy": pol, "load": rate, "summary": s})
        print(f"\n{model} on {MODELS[model].tp}× {gpu}, {rate:g} programs/s")
        print(format_table(rows), flush=True)
    title = f"{len(programs)} agentic programs, {model} on {MODELS[model].tp}× {gpu} (simulated)"
    plot(results, args.out, "programs arriving per second (Poisson)", title)
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
