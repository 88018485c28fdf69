"""Simulate KV-cache policies side by side on an agentic trace (ttlpolicy.sim).

Each session of the trace is an agent program; programs arrive as a Poisson process
(``--rate``, programs per second) or keep ``--concurrency`` in flight.  One table per load
point: program completion time (mean / p50 / p95; and its part not spent in the program's
own tool and human gaps, "on engine"), mean time to first token, output
throughput, prefix hit rate, recomputed tokens, pinned block-seconds and preemptions.
With ``--sweep`` the load is swept (the given load × 0.5, 1, 2, 4) and ``--plot`` draws mean
completion time against load (needs matplotlib).  Without ``--trace`` it runs on the sample
sessions shipped with the package (Apache-2.0, see its LICENSE).  A Mooncake (.jsonl) or
Azure (.csv) trace is replayed open loop, each request at its recorded time (``--rate``
scales the arrival rate).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from ttlpolicy.sim import (
    GPUS,
    MODELS,
    POLICY_NAMES,
    Hardware,
    load_profile,
    open_loop_programs,
    programs_from_trace,
    roofline,
    simulate,
)
from ttlpolicy.sim.hardware import paper_hardware
from ttlpolicy.sim.paper_workloads import PAPER_ENGINE, PAPER_RATE_PER_S, WORKLOADS, paper_programs
from ttlpolicy.sim.report import Progress, format_table, plot
from ttlpolicy.traces import detect_format, read_trace, sample_dir

DEFAULT_POLICIES = "vllm,vllm-offload,infercept,autellix,continuum,ttlpolicy,ttlpolicy-offload"
#: With ``--workload``: the CacheTTL paper's baselines and its ablation (Fig. 8, 16).
PAPER_POLICIES = "vllm,autellix,continuum,program-fcfs,static-ttl,cachettl"
SWEEP_FACTORS = (0.5, 1.0, 2.0, 4.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace", default=None, help="session file or folder (default: the shipped sample)"
    )
    parser.add_argument(
        "--workload",
        default=None,
        choices=sorted(WORKLOADS),
        help="the CacheTTL paper's generated workload instead of a trace (its engine settings: "
        "2048-token chunked prefill, 16-token blocks; default --gpu b200, --rate 0.13 for "
        "swe-bench and 5 for bfcl)",
    )
    parser.add_argument(
        "--programs", type=int, default=100, help="with --workload: programs generated"
    )
    parser.add_argument(
        "--turn-scale",
        type=int,
        default=1,
        help="with --workload: repeat each program's turns K times, tokens / K (Fig. 14)",
    )
    parser.add_argument(
        "--offload",
        action="store_true",
        help="with --workload: every policy gets the paper's CPU tier (200 GB per GPU, "
        "100 GB on A100)",
    )
    parser.add_argument(
        "--policies",
        default=None,
        help=f"comma-separated, from: {', '.join(POLICY_NAMES)} (default: {DEFAULT_POLICIES}; "
        f"with --workload: {PAPER_POLICIES})",
    )
    parser.add_argument("--model", default="llama-3.1-8b", choices=sorted(MODELS))
    parser.add_argument(
        "--gpu", default=None, choices=sorted(GPUS), help="default h100-80g (b200 with --workload)"
    )
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--rate", type=float, default=None, help="program arrivals per second (Poisson)"
    )
    load.add_argument(
        "--concurrency", type=int, default=None, help="programs in flight (default 8)"
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="sweep the load: × " + ", ".join(f"{f:g}" for f in SWEEP_FACTORS),
    )
    parser.add_argument(
        "--max-context", type=int, default=120_000, help="token cap on a call (model limit)"
    )
    parser.add_argument("--context-mode", choices=("truncate", "skip"), default="truncate")
    parser.add_argument(
        "--think-cap", type=float, default=300.0, help="cap on think/tool gaps, s (<0: none)"
    )
    parser.add_argument("--think-scale", type=float, default=1.0)
    parser.add_argument("--human-turns", choices=("keep", "drop"), default="keep")
    parser.add_argument(
        "--cpu-tier-gb", type=float, default=256.0, help="CPU tier for offloading policies"
    )
    parser.add_argument(
        "--efficiency", type=float, default=0.6, help="fraction of peak FLOP/s and bandwidth"
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="hardware profile JSON (ttlpolicy_vllm.calibrate); replaces --model/--gpu",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write all results here")
    parser.add_argument(
        "--plot", default=None, help="write a completion-time-vs-load plot here (matplotlib)"
    )


def _hardware(args: argparse.Namespace) -> Hardware:
    """A measured profile (``--hardware``) or the roofline of ``--model`` on ``--gpu``; the
    CPU tier is ``--cpu-tier-gb`` either way."""
    cpu_tier_bytes = args.cpu_tier_gb * 1e9
    if args.hardware:
        return dataclasses.replace(load_profile(args.hardware), cpu_tier_bytes=cpu_tier_bytes)
    return roofline(
        args.model,
        args.gpu or "h100-80g",
        efficiency=args.efficiency,
        cpu_tier_bytes=cpu_tier_bytes,
    )


def run(args: argparse.Namespace) -> int:
    default = PAPER_POLICIES if args.workload else DEFAULT_POLICIES
    policies = [p.strip() for p in (args.policies or default).split(",") if p.strip()]
    if not policies:
        raise ValueError("--policies is empty")
    from ttlpolicy.sim import make_policy

    for p in policies:
        make_policy(p)  # fail on a bad name before any work
    config, cpu_tier = None, None
    if args.workload:
        if args.trace:
            raise ValueError("give --trace or --workload, not both")
        if args.hardware:
            raise ValueError("give --hardware or --workload, not both (it has its own hardware)")
        if args.rate is None and args.concurrency is None:
            args.rate = PAPER_RATE_PER_S[args.workload]
        trace = f"{args.workload} (generated, seed {args.seed})"
        programs = paper_programs(
            args.workload, args.programs, args.seed, turn_scale=args.turn_scale
        )
        hw = paper_hardware(
            args.model, args.gpu or "b200", offload=args.offload, efficiency=args.efficiency
        )
        config, cpu_tier = PAPER_ENGINE, args.offload or None
    else:
        trace = args.trace or str(sample_dir())
        if not Path(trace).is_dir() and detect_format(trace) != "agentic":
            return run_open_loop(args, trace, policies)
        programs = load_trace_programs(args, trace)
        hw = _hardware(args)
    if args.rate is not None:
        load_name, base = "rate (programs/s)", args.rate
    else:
        load_name, base = (
            "concurrency (programs)",
            args.concurrency if args.concurrency is not None else 8,
        )
    loads = [base * f for f in SWEEP_FACTORS] if args.sweep else [base]
    if args.rate is None:
        loads = sorted({max(1, round(x)) for x in loads})
    print(
        f"{len(programs)} programs, {sum(len(p.turns) for p in programs)} calls from {trace}; "
        f"{hw.model.name} on {hw.model.tp}× {hw.gpu.name}, "
        f"{hw.kv_capacity_blocks(64)} KV blocks of 64 tokens"
        + (f", CPU tier {hw.cpu_tier_bytes / 1e9:g} GB" if cpu_tier else ""),
        file=sys.stderr,
    )
    bar = Progress(len(programs) * len(policies) * len(loads))
    results = []
    t0 = time.perf_counter()
    for load in loads:
        rows = []
        for pol in policies:
            kw = {"rate_per_s": load} if args.rate is not None else {"concurrency": int(load)}
            m = simulate(
                hw,
                pol,
                programs,
                seed=args.seed,
                progress=bar,
                config=config,
                cpu_tier=cpu_tier,
                **kw,
            )
            bar.next_run(len(programs))
            s = m.summary()
            rows.append((pol, s))
            results.append({"policy": pol, "load": load, "summary": s})
        bar.close()
        print(f"\n{load_name} = {load:g}")
        print(format_table(rows))
    print(f"\n(simulated in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.json:
        meta = {
            "trace": trace,
            "model": hw.model.name,
            "gpu": hw.gpu.name,
            "load": load_name,
            "seed": args.seed,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    if args.plot:
        plot(results, args.plot, load_name)
    return 0


def load_trace_programs(args: argparse.Namespace, trace: str) -> list:
    programs = programs_from_trace(
        trace,
        max_context=args.max_context,
        context_mode=args.context_mode,
        think_scale=args.think_scale,
        think_cap_s=args.think_cap if args.think_cap >= 0 else None,
        human_turns=args.human_turns,
    )
    if not programs:
        raise ValueError(f"no programs in {trace!r} (after --context-mode {args.context_mode})")
    return programs


def run_open_loop(args: argparse.Namespace, trace: str, policies: list[str]) -> int:
    """A request stream (Mooncake, Azure): each request a one-call program at its recorded
    time; ``--rate`` scales the arrival rate (default 1: as recorded)."""
    scale = args.rate if args.rate is not None else 1.0
    programs = open_loop_programs(read_trace(trace), rate_scale=scale, max_context=args.max_context)
    if not programs:
        raise ValueError(f"no requests in {trace!r}")
    hw = _hardware(args)
    bar = Progress(len(programs) * len(policies))
    results, rows = [], []
    for pol in policies:
        s = simulate(hw, pol, programs, open_loop=True, progress=bar).summary()
        bar.next_run(len(programs))
        rows.append((pol, s))
        results.append({"policy": pol, "load": scale, "summary": s})
    bar.close()
    print(f"\nopen loop, arrival rate × {scale:g}")
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "meta": {"trace": trace, "model": hw.model.name, "gpu": hw.gpu.name},
                    "results": results,
                },
                f,
                indent=1,
            )
    return 0
