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
scales the arrival rate).  ``--instances N`` runs each policy on N engines behind a
router (``--router``, a comma-separated list: every policy under every router listed); the
JSON then holds the router and each instance's figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ttlpolicy.sim import (
    GPUS,
    MODELS,
    POLICY_NAMES,
    Hardware,
    load_profile,
    open_loop_programs,
    roofline,
    simulate,
)
from ttlpolicy.sim.cluster import ROUTERS
from ttlpolicy.sim.hardware import paper_hardware
from ttlpolicy.sim.paper_workloads import PAPER_ENGINE, PAPER_RATE_PER_S, WORKLOADS, paper_programs
from ttlpolicy.sim.report import Progress, format_table
from ttlpolicy.sim.run import simulate_cluster
from ttlpolicy.sim.workload import programs_from_trace
from ttlpolicy.traces import TraceRecord, has_programs, read_trace, resolve_trace, sample_dir

from ._args import (
    add_common_prefix_argument,
    add_ids_argument,
    finite_float,
    float_in,
    int_in,
    writable_file,
)
from ._plot import pyplot

DEFAULT_POLICIES = "vllm,vllm-offload,infercept,autellix,continuum,ttlpolicy,ttlpolicy-offload"
#: With ``--workload``: the CacheTTL paper's baselines and its ablation (Fig. 8, 16).
PAPER_POLICIES = "vllm,autellix,continuum,program-fcfs,static-ttl,cachettl"
SWEEP_FACTORS = (0.5, 1.0, 2.0, 4.0)
MAX_CONCURRENCY = 1_000_000
MAX_RATE_PER_S = 1e6
MAX_CONTEXT_TOKENS = 10_000_000
MAX_INSTANCES = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    add_load_arguments(parser)
    add_run_arguments(parser)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The programs, the policies, the model and GPU."""
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        type=resolve_trace,
        help="session file or folder, or a Mooncake .jsonl / Azure .csv trace "
        "(default: the 16 shipped sample sessions)",
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
        "--programs",
        metavar="N",
        type=int_in(1, MAX_CONCURRENCY),
        default=100,
        help="with --workload: programs generated",
    )
    parser.add_argument(
        "--turn-scale",
        metavar="K",
        type=int_in(1, 1000),
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
    parser.add_argument(
        "--model", default="llama-3.1-8b", choices=sorted(MODELS), help="simulated model"
    )
    parser.add_argument(
        "--gpu",
        default=None,
        choices=sorted(GPUS),
        help="simulated GPU (default h100-80g; b200 with --workload)",
    )


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """How many programs run at once, and what each program's calls are."""
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--rate",
        metavar="PER_S",
        type=float_in(0.0, MAX_RATE_PER_S, low_open=True),
        default=None,
        help="program arrivals per second (Poisson); open-loop traces: arrival-rate scale",
    )
    load.add_argument(
        "--concurrency",
        metavar="N",
        type=int_in(1, MAX_CONCURRENCY),
        default=None,
        help="programs in flight (closed loop; default 8)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="sweep the load: × "
        + ", ".join(f"{f:g}" for f in SWEEP_FACTORS)
        + " (concurrency capped at the trace's number of programs)",
    )
    parser.add_argument(
        "--max-context",
        metavar="TOKENS",
        type=int_in(1, MAX_CONTEXT_TOKENS),
        default=120_000,
        help="token cap on a call (model limit)",
    )
    parser.add_argument(
        "--context-mode",
        choices=("truncate", "skip"),
        default="truncate",
        help="a call over --max-context: cut its context, or drop the session",
    )
    parser.add_argument(
        "--hardware",
        default=None,
        help="hardware profile JSON (bench/vllm_calibrate.py); replaces --model/--gpu",
    )
    parser.add_argument(
        "--think-cap",
        metavar="S",
        type=finite_float,
        default=300.0,
        help="cap on think/tool gaps, s (negative: no cap)",
    )
    parser.add_argument(
        "--think-scale",
        metavar="X",
        type=float_in(0.0, 1e6),
        default=1.0,
        help="multiply every think/tool gap by this",
    )
    parser.add_argument(
        "--human-turns",
        choices=("keep", "drop"),
        default="keep",
        help="keep or drop the gaps before human (non-tool) turns",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The engine's CPU tier and efficiency, the seed, a fleet, the outputs, program ids."""
    parser.add_argument(
        "--cpu-tier-gb",
        metavar="GB",
        type=float_in(0.0, 1e6),
        default=256.0,
        help="CPU (DRAM) tier of the offloading policies, GB (0: none)",
    )
    parser.add_argument(
        "--efficiency",
        metavar="FRACTION",
        type=float_in(0.0, 1.0, low_open=True),
        default=0.6,
        help="fraction of peak FLOP/s and bandwidth reached",
    )
    parser.add_argument(
        "--seed",
        metavar="N",
        type=int_in(0, 2**32 - 1),
        default=0,
        help="seed of the arrival process",
    )
    parser.add_argument(
        "--instances",
        metavar="N",
        type=int_in(1, MAX_INSTANCES),
        default=None,
        help="engine instances behind a router (default: one engine, no router)",
    )
    parser.add_argument(
        "--router",
        metavar="NAMES",
        default=None,
        help=f"with --instances: the routers, comma-separated, of {', '.join(ROUTERS)} "
        "(default round-robin)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        type=writable_file,
        default=None,
        help="write all results here (JSON)",
    )
    parser.add_argument(
        "--plot",
        metavar="PATH",
        type=writable_file,
        default=None,
        help="write a completion-time-vs-load plot here (PNG; needs matplotlib)",
    )
    add_ids_argument(parser)
    add_common_prefix_argument(parser)


def figure(results: list[dict], load_name: str, title: str) -> Any:
    """Mean completion time against load, one curve per policy (a matplotlib Figure)."""
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    policies = list(dict.fromkeys(_label(r) for r in results))
    markers, styles = "osD^vP*Xh<>", ("-", "--", "-.", ":")
    for i, pol in enumerate(policies):
        pts = sorted((r["load"], r["summary"]["jct_mean_s"]) for r in results if _label(r) == pol)
        # Policies often tie: a marker, a line style and a size each, so that curves drawn
        # on top of each other stay visible.
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=markers[i % len(markers)],
            linestyle=styles[i % len(styles)],
            markersize=9 - 0.8 * (i % 5),
            markerfacecolor="none",
            label=pol,
        )
    loads = sorted({r["load"] for r in results})
    if len(loads) > 1 and loads[0] > 0:
        ax.set_xscale("log", base=2)  # sweep points are load × 0.5, 1, 2, 4: evenly spaced
        ax.set_xticks(loads, [f"{x:g}" for x in loads])
        ax.minorticks_off()
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel(load_name)
    ax.set_ylabel("mean program completion time (s)")
    # From 0: an axis fitted to the data made a 0.9 % gap look large.
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _label(result: dict) -> str:
    """A result's curve: its policy, and its router behind a cluster."""
    router = result.get("router")
    return result["policy"] if router is None else f"{result['policy']} / {router}"


def plot(results: list[dict], path: str, load_name: str, title: str) -> None:
    fig = figure(results, load_name, title)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


#: What the columns the tables leave cryptic mean (docs/simulate.md, "What the demo shows").
LEGEND = (
    "JCT: a program's completion time, first call to last answer (its tool gaps included); "
    "on engine: JCT less those gaps; hit rate: prompt tokens served from cache; "
    "pinned blk·s: KV blocks kept for returning programs × seconds kept"
)
#: Mean completion times within this share of each other are called a tie.
TIE_SHARE = 0.002


def verdict(results: list[dict], load_name: str, ours: str = "ttlpolicy") -> str | None:
    """The tables in one line, from their figures: ``ours``'s mean completion time
    against stock vLLM's (``vllm``) at each load; None unless both ran (on one engine)."""
    jct = {
        (r["policy"], r["load"]): r["summary"]["jct_mean_s"] for r in results if "router" not in r
    }
    loads = sorted({load for _, load in jct})
    if not loads or any((ours, x) not in jct or ("vllm", x) not in jct for x in loads):
        return None
    unit = "programs in flight" if load_name.startswith("concurrency") else "programs/s"
    ties, gaps = [], []
    for load in loads:
        ratio = jct["vllm", load] / jct[ours, load]
        if abs(ratio - 1) <= TIE_SHARE:
            ties.append(f"{load:g}")
            continue
        r = max(ratio, 1 / ratio)
        size = f"{100 * (r - 1):.1f} %" if r < 1.1 else f"{r:.2f}×"
        gaps.append(f"{size} {'sooner' if ratio > 1 else 'later'} at {load:g}")
    parts = []
    if ties:
        tied = ties[0] if len(ties) == 1 else ", ".join(ties[:-1]) + " and " + ties[-1]
        parts.append(f"as fast as stock vLLM (within {100 * TIE_SHARE:g} %) at {tied} {unit}")
    if gaps:
        gaps[0] = gaps[0].replace(" at ", " than stock vLLM at ", 1)
        parts.append(", ".join(gaps) + ("" if ties else f" {unit}"))
    return f"verdict: on mean completion time, {ours} finished the programs " + "; ".join(parts)


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
    policies = _policies(args)
    routers = _routers(args)
    if args.plot:
        pyplot()  # and on a missing matplotlib
    if not args.workload:
        trace = args.trace or str(sample_dir())
        if not has_programs(trace):
            _refuse_session_flags(args, trace)
            return run_open_loop(args, trace, policies)
    trace, programs, hw, config, cpu_tier = _workload(args)
    load_name, loads = _loads(args, len(programs))
    print(
        f"{len(programs)} programs, {sum(len(p.turns) for p in programs)} calls from {trace}; "
        f"{hw.model.name} on {hw.model.tp}× {hw.gpu.name}, "
        f"{hw.kv_capacity_blocks(64)} KV blocks of 64 tokens"
        + (f", CPU tier {hw.cpu_tier_bytes / 1e9:g} GB" if cpu_tier else ""),
        file=sys.stderr,
    )
    cluster: list[str | None] = list(routers) if routers else [None]
    runs = [(r, p) for r in cluster for p in policies]
    results = _simulate_loads(args, hw, programs, runs, loads, load_name, (config, cpu_tier))
    _report(args, results, load_name, trace, programs, hw)
    return 0


def _policies(args: argparse.Namespace) -> list[str]:
    """The policies asked for, each checked (a bad name fails before any work)."""
    default = PAPER_POLICIES if args.workload else DEFAULT_POLICIES
    policies = [p.strip() for p in (args.policies or default).split(",") if p.strip()]
    if not policies:
        raise ValueError("--policies is empty")
    from ttlpolicy.sim import make_policy
    from ttlpolicy.sim.policies.ttlpolicy_plugin import with_ids

    policies = [with_ids(p, args.ids) for p in policies]

    for p in policies:
        make_policy(p)  # fail on a bad name before any work
    return policies


def _refuse_session_flags(args: argparse.Namespace, trace: str) -> None:
    """Open loop: these flags would be silently ignored, so refuse them."""
    ignored = {
        "--concurrency": args.concurrency is not None,
        "--sweep": args.sweep,
        "--plot": args.plot is not None,
        "--instances": args.instances is not None,
        "--router": args.router is not None,
    }
    for flag, given in ignored.items():
        if given:
            raise ValueError(
                f"{flag} applies to agentic sessions; {trace!r} is a request trace, "
                "replayed open loop at its recorded times (--rate scales them)"
            )


def _workload(args: argparse.Namespace) -> tuple[str, list, Hardware, Any, Any]:
    """(trace name, programs, hardware, engine config, CPU tier): a paper workload
    generated, or the agentic sessions of a trace."""
    if not args.workload:
        trace = args.trace or str(sample_dir())
        return trace, load_trace_programs(args, trace), _hardware(args), None, None
    if args.trace:
        raise ValueError("give --trace or --workload, not both")
    if args.hardware:
        raise ValueError("give --hardware or --workload, not both (it has its own hardware)")
    if args.rate is None and args.concurrency is None:
        args.rate = PAPER_RATE_PER_S[args.workload]
    trace = f"{args.workload} (generated, seed {args.seed})"
    programs = paper_programs(args.workload, args.programs, args.seed, turn_scale=args.turn_scale)
    hw = paper_hardware(
        args.model, args.gpu or "b200", offload=args.offload, efficiency=args.efficiency
    )
    return trace, programs, hw, PAPER_ENGINE, args.offload or None


def _loads(args: argparse.Namespace, n_programs: int) -> tuple[str, list]:
    """The load's name and the loads run (a sweep's, or one)."""
    if args.rate is not None:
        load_name, base = "rate (programs/s)", args.rate
    else:
        load_name, base = (
            "concurrency (programs)",
            args.concurrency if args.concurrency is not None else 8,
        )
    asked = [base * f for f in SWEEP_FACTORS] if args.sweep else [base]
    loads = asked
    if args.rate is None:
        # More programs in flight than the trace has would only repeat the last point.
        loads = sorted({min(max(1, round(x)), n_programs) for x in asked})
        if max(asked) > n_programs:
            print(f"(concurrency capped at the trace's {n_programs} programs)", file=sys.stderr)
    return load_name, loads


def _simulate_loads(
    args: argparse.Namespace,
    hw: Hardware,
    programs: list,
    runs: list[tuple[str | None, str]],
    loads: list,
    load_name: str,
    engine: tuple[Any, Any],
) -> list[dict[str, Any]]:
    """Each (router, policy) of ``runs`` at each load, a table per load printed; the
    results (``engine``: the engine config and CPU tier)."""
    config, cpu_tier = engine
    bar = Progress(len(programs) * len(loads) * len(runs))
    results = []
    t0 = time.perf_counter()
    for load in loads:
        rows = []
        for router, pol in runs:
            kw: dict[str, Any] = (
                {"rate_per_s": load} if args.rate is not None else {"concurrency": int(load)}
            )
            kw.update(seed=args.seed, progress=bar, config=config, cpu_tier=cpu_tier)
            if router is None:
                s = simulate(hw, pol, programs, **kw).summary()
                result: dict[str, Any] = {"policy": pol, "load": load, "summary": s}
            else:
                m, per_instance = simulate_cluster(
                    hw, pol, programs, instances=args.instances or 1, router=router, **kw
                )
                s = m.summary()
                result = {"policy": pol, "router": router, "instances": args.instances or 1,
                          "load": load, "summary": s, "per_instance": per_instance}  # fmt: skip
            bar.next_run(len(programs))
            rows.append((_label(result), s))
            results.append(result)
        bar.close()
        print(f"\n{load_name} = {load:g}")
        print(format_table(rows))
    print(f"\n(simulated in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return results


def _report(
    args: argparse.Namespace,
    results: list[dict[str, Any]],
    load_name: str,
    trace: str,
    programs: list,
    hw: Hardware,
) -> None:
    """The legend and verdict, then the JSON and the plot asked for."""
    from ttlpolicy.sim.policies.ttlpolicy_plugin import with_ids

    print(f"\n{LEGEND}")
    line = verdict(results, load_name, ours=with_ids("ttlpolicy", args.ids))
    if line:
        print(line)
    if args.json:
        meta = {
            "trace": trace,
            "model": hw.model.name,
            "gpu": hw.gpu.name,
            "load": load_name,
            "seed": args.seed,
            "instances": args.instances,
        }
        if args.ids != "explicit":  # (the default's files stay as they were)
            meta["ids"] = args.ids
        if args.common_prefix:
            meta["common_prefix"] = True
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    if args.plot:
        source = (
            "the shipped sample sessions"
            if args.trace is None and not args.workload
            else Path(trace).name
        )
        title = (
            f"{len(programs)} programs from {source}, {hw.model.name} on {hw.gpu.name}\n"
            "(curves drawn on top of each other: policies that tie)"
        )
        plot(results, args.plot, load_name, title)


def reading(trace: str) -> Iterator[TraceRecord]:
    """``read_trace``'s records, counting sessions and requests on stderr as they are read:
    the first load of a big trace parses for seconds (the 471 public sessions: ~13 s), and a
    silent wait looks like a hang.  Later loads come from the trace cache and never get here."""
    tty = sys.stderr.isatty()
    sessions, last = 0, None
    for requests, r in enumerate(read_trace(trace)):
        top = r.session_id.split("/")[0]  # sub-agents (session/agent) belong to their session
        if top != last:
            last, sessions = top, sessions + 1
            if tty or sessions % 100 == 1:
                line = f"  reading {trace}: session {sessions}, {requests} requests so far"
                print(line, end="\r" if tty else "\n", file=sys.stderr, flush=True)
        yield r
    if tty:
        print(file=sys.stderr)


def load_trace_programs(args: argparse.Namespace, trace: str) -> list:
    options = {
        "max_context": args.max_context,
        "context_mode": args.context_mode,
        "think_scale": args.think_scale,
        "think_cap_s": args.think_cap if args.think_cap >= 0 else None,
        "human_turns": args.human_turns,
        "common_prefix": args.common_prefix,
    }
    t0 = time.perf_counter()
    print(f"loading {trace} (parsed once, then from the trace cache)", file=sys.stderr, flush=True)
    # (the records counted as they are parsed)
    programs = programs_from_trace(trace, records=lambda: reading(trace), **options)
    print(f"  loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if not programs:
        raise ValueError(f"no programs in {trace!r} (after --context-mode {args.context_mode})")
    return programs


def no_reuse_note(trace: str, has_hashes: bool) -> str:
    """Why every policy shows hit rate 0 on a request trace: its requests are replayed as
    independent one-call programs, and a trace without block hashes (Azure) could not say
    which prefixes repeat anyway."""
    if not has_hashes:
        return (
            f"warning: {Path(trace).name} carries no prefix information (no block hashes), so "
            "no request can reuse a cached prefix: every policy gets hit rate 0 and they differ "
            "only in scheduling; compare cache policies on a trace with block hashes (agentic "
            "sessions)"
        )
    return (
        f"note: {Path(trace).name} is replayed as independent one-call requests: prefix reuse "
        "between them is not simulated here (hit rate 0 for every policy); `ttlpolicy groups` "
        "and `ttlpolicy plan` replay its block hashes"
    )


def _routers(args: argparse.Namespace) -> list[str] | None:
    """The routers asked for (None: one engine, no router)."""
    if args.instances is None and args.router is None:
        return None
    names = [r.strip() for r in (args.router or "round-robin").split(",") if r.strip()]
    for name in names:
        if name not in ROUTERS:
            raise ValueError(f"--router must name routers of {', '.join(ROUTERS)}, got {name!r}")
    if not names:
        raise ValueError("--router is empty")
    return names


def run_open_loop(args: argparse.Namespace, trace: str, policies: list[str]) -> int:
    """A request stream (Mooncake, Azure): each request a one-call program at its recorded
    time; ``--rate`` scales the arrival rate (default 1: as recorded)."""
    scale = args.rate if args.rate is not None else 1.0
    hashed = [0]

    def counted(records: Iterator[TraceRecord]) -> Iterator[TraceRecord]:
        for r in records:
            hashed[0] += bool(r.hash_ids)
            yield r

    programs = open_loop_programs(
        counted(read_trace(trace)), rate_scale=scale, max_context=args.max_context
    )
    if not programs:
        raise ValueError(f"no requests in {trace!r}")
    print(no_reuse_note(trace, has_hashes=hashed[0] > 0), file=sys.stderr)
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
