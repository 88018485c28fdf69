"""How much of seed 2's onset is the KV memory, and how much the engine's shared compute?
(docs/investigations/bounds-folds-and-the-expected-working-set.md, "More memory instead").

Change one assumption: the same engine, the same arrivals, with its KV capacity scaled (×100
is unlimited: nothing waits for memory, no context is ever evicted).  What is left at
unlimited memory is calls sharing the engine's steps — a decode step with many sequences takes
longer than one alone — which no KV policy can remove.  The baselines' mean completion time
at the real capacity (×1) sets what 1.4× needs.

    PYTHONPATH=python:bench python bench/investigations/memory_bound.py \
        [--points 'llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003'] [--seed 2] \
        [--memory-scales 1,1.25,1.5,2,4,100]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np
from order_bound import jct_s, point_hardware

import sim_sweep
from agent_sweep import OPTIONS
from ttlpolicy.sim import make_policy, simulate

POLICIES = ("vllm", "continuum", "cachettl", "ttlpolicy", "clairvoyant", "alone")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="llama-3.1-8b@h100-80g=0.004;llama-3.1-70b@h100-80g=0.003")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--memory-scales", default="1,1.25,1.5,2,4,100")
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, OPTIONS)
    if programs is None:
        return 2
    print("| point | seed | KV memory × | " + " | ".join(POLICIES) + " | needed for 1.4× both |")
    print("|---" * (len(POLICIES) + 4) + "|")
    for point in args.points.split(";"):
        model, rate_s, real = point_hardware(point)
        needed = float("nan")
        for scale in map(float, args.memory_scales.split(",")):
            hw = dataclasses.replace(real, kv_capacity_bytes=real.kv_capacity_bytes * scale)
            mean = {}
            for name in POLICIES:
                m = simulate(
                    hw, make_policy(name), programs, rate_per_s=float(rate_s), seed=args.seed
                )
                mean[name] = float(np.mean(list(jct_s(m).values())))
            if scale == 1:
                needed = min(mean["continuum"], mean["cachettl"]) / 1.4
            cells = [f"{model} {rate_s}/s", str(args.seed), f"{scale:g}"]
            cells += [f"{mean[n]:,.0f}" for n in POLICIES] + [f"{needed:,.0f}"]
            print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
