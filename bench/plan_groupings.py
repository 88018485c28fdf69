"""Which grouping rule wins where: the prefix-tree depth rule vs the reuse-interval classes
(bench/RESULTS.md, "Tier planner"), from an exhaustive plan's JSON.

    PYTHONPATH=python python bench/plan_groupings.py ex.json [ex2.json ...]

For every capacity pair both rules were evaluated at, compares them on mean TTFT, throughput
and the cost of what they held (``cost_held_usd_per_h``), and counts where each is better.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(paths: list[str]) -> int:
    print(
        "| trace | capacity points | lower TTFT: depth / reuse / tie | higher tok/s: depth / reuse"
        " / tie | cheaper held $/h: depth / reuse / tie | hit rate depth / reuse (mean) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for path in paths:
        doc = json.loads(Path(path).read_text())
        by: dict[Any, Any] = {}
        for p in doc["points"]:
            c = p["config"]
            if c["policy"] == "group":
                by.setdefault((c["dram_gb"], c["ssd_gb"]), {})[c["grouping"]] = p
        pairs = [v for v in by.values() if {"depth", "reuse"} <= v.keys()]

        def tally(key, better, pairs=pairs):
            w = [0, 0, 0]
            for v in pairs:
                a, b = v["depth"][key], v["reuse"][key]
                w[
                    2 if abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1) else (0 if better(a, b) else 1)
                ] += 1
            return " / ".join(map(str, w))

        hit = [
            sum(v[g]["hit_rate"] for v in pairs) / max(len(pairs), 1) for g in ("depth", "reuse")
        ]
        print(
            f"| {Path(doc['meta']['trace']).name} | {len(pairs)} "
            f"| {tally('ttft_mean_s', lambda a, b: a < b)} "
            f"| {tally('throughput_tok_s', lambda a, b: a > b)} "
            f"| {tally('cost_held_usd_per_h', lambda a, b: a < b)} "
            f"| {hit[0]:.3f} / {hit[1]:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
