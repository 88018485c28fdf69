"""Adaptive vs exhaustive search: hypervolume reached and evaluations spent
(bench/RESULTS.md, "Tier planner").

    ttlpolicy plan ... --exhaustive --json ex.json
    ttlpolicy plan ... --json ad.json          # same options; reuses the recorded points
    PYTHONPATH=python python bench/plan_hv.py ex.json ad.json

Both fronts are measured on the exhaustive run's bounds (``ttlpolicy.plan.front``), with the
cost the runs optimised (their ``meta.billing``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from ttlpolicy.plan.front import as_min, front_indices, hypervolume


def main(ex_path: str, ad_path: str) -> int:
    ex, ad = (json.loads(Path(p).read_text()) for p in (ex_path, ad_path))
    key = "cost_usd_per_h" if ex["meta"]["billing"] == "provisioned" else "cost_held_usd_per_h"
    bounds = [as_min(p, key) for p in ex["points"]]
    mine = [as_min(p, key) for p in ad["points"]]
    hv_ex = hypervolume([bounds[i] for i in front_indices(bounds)], bounds)
    hv_ad = hypervolume([mine[i] for i in front_indices(mine)], bounds)
    n_ex, n_ad = ex["evaluations"], ad["evaluations"]
    print("| trace | exhaustive evaluations | adaptive evaluations | share | hypervolume reached |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| {Path(ex['meta']['trace']).name} | {n_ex} | {n_ad} | {n_ad / n_ex:.1%} "
        f"| {hv_ad / hv_ex:.2%} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
