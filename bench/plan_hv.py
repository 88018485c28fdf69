"""Adaptive vs exhaustive search: hypervolume reached and evaluations spent
(bench/RESULTS.md, "Tier planner").

    ttlpolicy plan ... --exhaustive --json ex.json
    PYTHONPATH=python python bench/plan_hv.py ex.json [--gain-threshold G] [--hv-threshold H]

Replays the adaptive search (``ttlpolicy.plan.search``, the code ``ttlpolicy plan`` runs) over
the exhaustive run's points: the simulation is deterministic, so looking a point up is the same
as simulating it again, and ``ttlpolicy plan`` without ``--exhaustive`` on the same options
gives the same front (it reads the same points from its result cache).  Both fronts are
measured on the exhaustive run's bounds, with the cost the run optimised (``meta.billing``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ttlpolicy.plan.front import as_min, front_indices, hypervolume
from ttlpolicy.plan.objectives import Config
from ttlpolicy.plan.search import Grid, Search


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("exhaustive", nargs="+")
    ap.add_argument("--gain-threshold", type=float, default=0.02)
    ap.add_argument("--hv-threshold", type=float, default=0.002)
    ap.add_argument(
        "--billing", choices=("provisioned", "held"), default=None, help="default: the run's"
    )
    args = ap.parse_args()
    print("| trace | billing | grid points | adaptive evaluations | share | hypervolume reached |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in args.exhaustive:
        ex = json.loads(Path(path).read_text())
        billing = args.billing or ex["meta"]["billing"]
        key = "cost_usd_per_h" if billing == "provisioned" else "cost_held_usd_per_h"
        table = {Config.from_json(p["config"]): p for p in ex["points"]}
        grid_cfgs = list(table)
        dram = tuple(sorted({c.dram_gb for c in grid_cfgs}))
        ssd = tuple(sorted({c.ssd_gb for c in grid_cfgs}))
        pols = tuple(dict.fromkeys(Config(0, 0, c.policy, c.ttl_s, c.grouping) for c in grid_cfgs))
        grid = Grid(dram, ssd, pols)
        asked: list[Config] = []

        def evaluate(configs, table=table, asked=asked):
            asked.extend(configs)
            return [table[c] for c in configs]

        def config_cost(c: Any, table: Any = table) -> float:
            return float(table[c]["cost_usd_per_h"])

        s = Search(grid, evaluate, config_cost, key)
        s.adaptive(args.gain_threshold, args.hv_threshold)
        bounds = [as_min(p, key) for p in ex["points"]]
        mine = [as_min(table[c], key) for c in s.results]
        hv_ex = hypervolume([bounds[i] for i in front_indices(bounds)], bounds)
        hv_ad = hypervolume([mine[i] for i in front_indices(mine)], bounds)
        n = len(grid.all())
        print(
            f"| {Path(ex['meta']['trace']).name} | {billing} | {n} | {len(asked)} "
            f"| {len(asked) / n:.1%} "
            f"| {hv_ad / hv_ex:.2%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
