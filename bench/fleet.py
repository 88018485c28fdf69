"""Many engines behind a router (issue 31; docs/investigations/fleet-routers.md): the
router × policy table on the agentic sessions cut to one task each (Poisson arrivals, as
bench/agent_sweep.py), at ``--instances`` engines and per-instance loads swept from light to
4× the contended point; and the same per-instance load on one engine, for the share of the
single-instance gain a router keeps.

    python bench/fleet.py [--instances 8] [--rates 0.002,0.004,0.008,0.016] \
        [--setups llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g] [--policies vllm,ttlpolicy] \
        [--routers round-robin,least-loaded,session-hash,prefix,ttlpolicy] [--seeds 0] \
        [--folds 4] [--copies 1] [--ids explicit] [--common-prefix] [--json F]

``--rates`` are per instance (programs/s): the cluster gets ``instances`` × that.  The traces
are found as bench/sim_sweep.py says (``TTLPOLICY_TRACES``, default ``../shared/traces``).

**Folds** (issue 34's protocol, bench/bounds.py): every program runs in each run; each row
also holds the mean and p95 completion time over each fold's own programs (``fold_of``: the
session file name's SHA-256 mod ``--folds``).  The router's rule was chosen on folds 0–2 and
seed 0; fold 3 and other seeds are the check (the table's ``fold 3`` column, ``--seeds``).
At the end: one markdown table (mean / p95 over all programs, bold the best router of each
row) and the fold-3 means.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import sim_sweep  # bench/, beside this script: loads the sessions
from agent_sweep import OPTIONS
from bounds import fold_of
from ttlpolicy.cli import add_common_prefix_argument, add_ids_argument
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.cluster import ROUTERS
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.run import simulate_cluster
from ttlpolicy.sim.workload import Program

SETUPS = "llama-3.1-8b@h100-80g,llama-3.1-70b@h100-80g"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--rates", default="0.002,0.004,0.008,0.016", help="per instance, /s")
    ap.add_argument("--setups", default=SETUPS)
    ap.add_argument("--policies", default="vllm,ttlpolicy")
    ap.add_argument("--routers", default=",".join(ROUTERS))
    ap.add_argument("--no-single", action="store_true", help="skip the one-engine runs")
    ap.add_argument("--seeds", default="0", help="arrival seeds, comma-separated")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument(
        "--copies",
        type=int,
        default=1,
        help="play the sessions this many times over (ids suffixed #k), so that N instances "
        "get as many programs each as 8 instances get of one copy (32 instances: --copies 4)",
    )
    ap.add_argument("--json", default=None)
    add_ids_argument(ap)
    add_common_prefix_argument(ap)
    args = ap.parse_args()
    args.policies = sim_sweep.policies_with_ids(args.policies, args.ids)
    programs = sim_sweep.load_sessions(args.trace, OPTIONS, args.common_prefix)
    if programs is None:
        return 2
    n = args.instances
    if args.folds < 1:
        raise SystemExit(f"--folds must be >= 1, got {args.folds}")
    if args.copies < 1:
        raise SystemExit(f"--copies must be >= 1, got {args.copies}")
    fold = {p.program_id: fold_of(p.program_id, args.folds) for p in programs}
    if args.copies > 1:  # a copy keeps its session's fold; programs share no blocks
        programs = [
            Program(f"{p.program_id}#{k}", p.turns, p.issue_s, p.common_blocks)
            for k in range(args.copies)
            for p in programs
        ]
        fold = {p.program_id: fold[p.program_id.rsplit("#", 1)[0]] for p in programs}
    results = []
    for setup, rate, seed in (
        (setup, float(rate), int(seed))
        for setup in args.setups.split(",")
        for rate in args.rates.split(",")
        for seed in args.seeds.split(",")
    ):
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for pol in args.policies.split(","):
            runs = [] if args.no_single else [None]
            for router in [*runs, *args.routers.split(",")]:
                t = time.perf_counter()
                if router is None:
                    m = simulate(hw, pol, programs, rate_per_s=rate, seed=seed)
                    per_instance = None
                else:
                    m, per_instance = simulate_cluster(
                            hw, pol, programs, instances=n, router=router,
                            rate_per_s=rate * n, seed=seed,
                        )  # fmt: skip
                wall = time.perf_counter() - t
                s = m.summary()
                folds = fold_figures(m, fold, args.folds)
                results.append({
                        "setup": setup, "rate_per_instance": rate, "policy": pol,
                        "router": router, "instances": 1 if router is None else n,
                        "seed": seed, "wall_s": wall, "summary": s, "folds": folds,
                        "per_instance": per_instance,
                    })  # fmt: skip
                tuned = [f["jct_mean_s"] for f in folds[: min(3, args.folds)]]
                print(
                    f"{setup} {rate:g}/s/instance seed {seed} {pol} / "
                    f"{router or 'one engine'}: JCT {s['jct_mean_s']:,.0f} s "
                    f"p95 {s['jct_p95_s']:,.0f} s hit {s['hit_rate']:.2f}; folds 0-2 "
                    f"{np.mean(tuned):,.0f} s, "
                    + (f"fold 3 {folds[3]['jct_mean_s']:,.0f} s " if args.folds > 3 else "")
                    + f"({wall:.0f} s)",
                    flush=True,
                )
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def fold_figures(m, fold: dict[str, int], folds: int) -> list[dict[str, float]]:
    """Mean and p95 completion time over each fold's programs (nan: none finished)."""
    jct: list[list[float]] = [[] for _ in range(folds)]
    for pid, end in m.program_finish_s.items():
        jct[fold[pid]].append(end - m.program_start_s[pid])
    nan = float("nan")
    return [
        {
            "programs": float(len(x)),
            "jct_mean_s": float(np.mean(x)) if x else nan,
            "jct_p95_s": float(np.percentile(x, 95)) if x else nan,
        }
        for x in jct
    ]


def table(results: list[dict]) -> str:
    """Markdown: one row per (setup, rate, policy, seed), mean / p95 per router (bold: the
    lowest mean among routers), then the fold-3 means (when there are 4+ folds)."""
    routers = list(dict.fromkeys(r["router"] for r in results if r["router"] is not None))
    single = any(r["router"] is None for r in results)
    head = ["setup, /s per instance", "seed", "policy"]
    head += (["one engine"] if single else []) + routers
    with_f3 = all(len(r["folds"]) > 3 for r in results)
    head += [f"fold 3: {x}" for x in routers] if with_f3 else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    keys = dict.fromkeys(
        (r["setup"], r["rate_per_instance"], r["seed"], r["policy"]) for r in results
    )
    for setup, rate, seed, pol in keys:
        rows = {
            r["router"]: r
            for r in results
            if (r["setup"], r["rate_per_instance"], r["seed"], r["policy"])
            == (setup, rate, seed, pol)
        }
        best = min((rows[x]["summary"]["jct_mean_s"] for x in routers if x in rows), default=None)
        cells = [f"{setup.split('@')[0].split('-')[-1]} {rate:g}", str(seed), pol]
        if single:
            one = rows.get(None)
            cells.append(f"{one['summary']['jct_mean_s']:,.0f}" if one else "")
        for x in routers:
            r = rows.get(x)
            if r is None:
                cells.append("")
                continue
            mean, p95 = r["summary"]["jct_mean_s"], r["summary"]["jct_p95_s"]
            cell = f"{mean:,.0f} / {p95:,.0f}"
            cells.append(f"**{cell}**" if mean == best else cell)
        if with_f3:
            cells += [
                f"{rows[x]['folds'][3]['jct_mean_s']:,.0f}" if x in rows else "" for x in routers
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
