"""ttlpolicy against 2026's rivals (issue 46): MORI, Tokencake and KVFlow as simulator
policies (``sim/policies/{mori,tokencake,kvflow}.py``), beside the offloading baselines, on
the agentic sessions with the CPU tier — the validation fold (3 of bench/bounds.py's four),
arrival seeds 0–3, the contended points of the bounds (and heavier ones with ``--points``).

    python bench/rivals.py [--points 'llama-3.1-8b@h100-80g=0.004,0.005;...'] \\
        [--seeds 0,1,2,3] [--fold 3] [--cpu-gb 256] [--policies ...] [--json F]

All programs run together, as bench/bounds.py runs them (the load of the whole set); the
completion times (mean, p95) are over the fold's programs, the TTFT (mean, p95 over calls)
and the throughput (output tokens per second of the run) over the whole run — the engine
does not record which program a first token belongs to.  The CPU tier is ``--cpu-gb`` GB per
GPU (bench/bounds.py's 256 GB; 70B runs on 4 GPUs: 4 × that).  The last table gives each
point's mean over the seeds and ttlpolicy-offload's ratio to the strongest rival (the lowest
mean completion among the others); ``--ours`` names the policy compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import agent_sweep  # bench/, beside this script: the sessions' options, subsets
import sim_sweep
from bounds import POINTS, split_folds
from trace_paths import traces_dir
from ttlpolicy.sim import make_policy, roofline, simulate
from ttlpolicy.sim.hardware import MODELS, Hardware
from ttlpolicy.sim.kv_cache import KVCache
from ttlpolicy.sim.workload import Program

POLICIES = "vllm-offload,infercept,continuum,mori,tokencake,kvflow,ttlpolicy-offload"
#: policies that read the future or run alone: never the strongest rival
BOUNDS = ("alone", "clairvoyant")
#: the figures of one run
FIGURES = ("jct_mean_s", "jct_p95_s", "ttft_mean_s", "ttft_p95_s", "throughput_tok_s")


def run_figures(m, programs: list[str]) -> dict[str, float]:
    """Completion time of ``programs`` (mean, p95), TTFT and throughput of the run."""
    jct = np.array([m.program_finish_s[p] - m.program_start_s[p] for p in programs])
    summary = m.summary()
    return {
        "jct_mean_s": float(jct.mean()),
        "jct_p95_s": float(np.percentile(jct, 95)),
        "ttft_mean_s": summary["ttft_mean_s"],
        "ttft_p95_s": float(np.percentile(m.ttfts_s, 95)),
        "throughput_tok_s": summary["throughput_tok_s"],
        "hit_rate": summary["hit_rate"],
        # the prefetch target's measures (issue 46 part 3): returns whose tool outlasted a
        # reload, the share of them that found their prefix on the GPU; pinned GPU block-s
        "long_returns": summary["long_returns"],
        "long_returns_on_gpu": summary["long_returns_on_gpu"],
        "pinned_block_s": summary["pinned_block_s"],
    }


class CPUPeak:
    """The CPU tier's peak use (share of its capacity) while the block runs: the simulator's
    tier keeps no peak, so its writes are watched (``KVCache.to_cpu``) and put back after."""

    def __enter__(self) -> CPUPeak:
        self.fraction = 0.0
        self._orig = orig = KVCache.to_cpu
        peak = self

        def watched(kv: KVCache, program: str, start: int, end: int) -> None:
            orig(kv, program, start, end)
            if kv.cpu_capacity and kv.cpu_used > peak.fraction * kv.cpu_capacity:
                peak.fraction = kv.cpu_used / kv.cpu_capacity

        KVCache.to_cpu = watched  # type: ignore[assignment,method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        KVCache.to_cpu = self._orig  # type: ignore[method-assign]


def why(hw, policy, m, cpu_peak: float) -> dict[str, float]:
    """What a rival's mechanism could change in a run: the seconds per program its calls
    spent reading KV back from the CPU at admission (what a prefetch can hide), the CPU
    tier's peak use, the tokens recomputed, preemptions, and the policy's own counters."""
    programs = max(1, m.programs_done)
    out = {
        "reload_s_per_program": hw.transfer_s(m.reloaded_tokens) / programs,
        "cpu_tier_peak": cpu_peak,
        "recomputed_tokens_per_program": m.recomputed_tokens / programs,
        "preemptions": float(m.preemptions),
    }
    for counter in ("offloads", "uploads", "prefetched", "demotions", "parked"):
        if hasattr(policy, counter):
            out[counter] = float(getattr(policy, counter))
    return out


def point_runs(
    programs: list[Program], points: str, seeds: str, cpu_gb: float
) -> Iterator[tuple[str, float, int, Hardware, list[Program]]]:
    """Each run of ``points`` (``'setup=rate,rate;setup=rate'``) × ``seeds`` (``'0,1'``): its
    setup, rate and seed, the setup's hardware with a CPU tier of ``cpu_gb`` GB a GPU, and the
    seed's programs (``agent_sweep.subset``)."""
    for point in points.split(";"):
        setup, _, rates = point.partition("=")
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=cpu_gb * 1e9 * MODELS[model].tp)
        for rate in (float(r) for r in rates.split(",")):
            for seed in (int(s) for s in seeds.split(",")):
                yield setup, rate, seed, hw, agent_sweep.subset(programs, seed, None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None)
    ap.add_argument("--points", default=POINTS, help="'setup=rate,rate;setup=rate'")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--fold", type=int, default=3, help="the fold reported (validation: 3)")
    ap.add_argument("--cpu-gb", type=float, default=256.0, help="CPU tier per GPU, GB")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--ours", default="ttlpolicy-offload")
    ap.add_argument(
        "--why",
        action="store_true",
        help="per run, what the rivals' mechanisms could change: reload seconds per program, "
        "the CPU tier's peak use, and each policy's own counters",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(args.trace, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    trace = Path(args.trace) if args.trace else traces_dir() / "claude-code"
    fold = {p.program_id for p in split_folds(programs, args.folds, trace)[args.fold]}
    policies = args.policies.split(",")
    if args.ours not in policies:
        raise SystemExit(f"--ours {args.ours!r} is not one of --policies")
    results = []
    for setup, rate, seed, hw, progs in point_runs(programs, args.points, args.seeds, args.cpu_gb):
        ids = [p.program_id for p in progs if p.program_id in fold]
        row: dict = {"setup": setup, "rate": rate, "seed": seed, "programs": len(ids)}
        for name in policies:
            t = time.perf_counter()
            policy = make_policy(name)
            with CPUPeak() as peak:
                m = simulate(hw, policy, progs, rate_per_s=rate, seed=seed)
            row[name] = run_figures(m, ids)
            row[name]["wall_s"] = time.perf_counter() - t
            if args.why:
                row[name].update(why(hw, policy, m, peak.fraction))
                print(f"  {name}: {row[name]}", flush=True)
        results.append(row)
        print(
            f"{setup} {rate:g}/s seed {seed}: "
            + " ".join(f"{p}={row[p]['jct_mean_s']:,.0f}" for p in policies),
            flush=True,
        )
    _table(results, policies, args.ours)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _table(results: list[dict], policies: list[str], ours: str) -> None:
    """Per point, each policy's figures as means over the seeds; then ours against the
    strongest rival (lowest mean completion among the rest) per point."""
    print("\n| setup | rate /s | policy | JCT mean s | JCT p95 s | TTFT mean s | TTFT p95 s "
          "| tok/s | hit |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for setup, rate in sorted({(r["setup"], r["rate"]) for r in results}):
        rows = [r for r in results if (r["setup"], r["rate"]) == (setup, rate)]
        means = {
            p: {k: statistics.fmean(r[p][k] for r in rows) for k in (*FIGURES, "hit_rate")}
            for p in policies
        }
        for p in policies:
            f = means[p]
            print(
                f"| {setup} | {rate:g} | {p} | {f['jct_mean_s']:,.0f} | {f['jct_p95_s']:,.0f} "
                f"| {f['ttft_mean_s']:.2f} | {f['ttft_p95_s']:.2f} "
                f"| {f['throughput_tok_s']:.1f} | {f['hit_rate']:.3f} |"
            )
        rivals = [p for p in policies if p != ours and p not in BOUNDS]
        best = min(rivals, key=lambda p: means[p]["jct_mean_s"])
        verdicts.append((setup, rate, best, means[best]["jct_mean_s"] / means[ours]["jct_mean_s"]))
    print(f"\n| setup | rate /s | strongest rival | its mean JCT / {ours}'s |")
    print("|---|---|---|---|")
    for setup, rate, best, ratio in verdicts:
        print(f"| {setup} | {rate:g} | {best} | {ratio:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
