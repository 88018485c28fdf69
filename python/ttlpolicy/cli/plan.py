"""Plan the KV tiers (Kareto): search DRAM/SSD capacities and tier policies for the Pareto front
of cost, throughput and TTFT, by simulating the trace on each configuration.

Each configuration is replayed open loop through a tiered KV store (HBM → DRAM → SSD, blocks
keyed by prefix hash; ``ttlpolicy.plan.tiers``) on one engine instance (``--model`` on its
tensor-parallel GPUs, roofline timing).  The search (``ttlpolicy.plan.search``) grows each tier
by doublings until a doubling gains less than ``--gain-threshold``, then refines around the
front until the hypervolume gains less than ``--hv-threshold``; ``--exhaustive`` evaluates the
whole grid.  Prices come from the shipped table (``ttlpolicy/data/prices.json``, sources
inside) or ``--prices FILE``.  Evaluations run on a local process pool (``--workers``), or on
Ray (``--ray``, ``--ray-address`` to join a cluster); results are recorded as they finish under
``$TTLPOLICY_CACHE/plan`` (default ``~/.cache/ttlpolicy/plan``) so a rerun resumes.

Output: the front as a table, the best configuration per objective with its change against
``--baseline`` (default ``dram=1024``: a static 1,024 GB DRAM tier, LRU), ``--json`` with every
evaluated point, ``--plot`` with cost against throughput and TTFT (matplotlib).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..sim.hardware import GPUS, MODELS
from ..traces import resolve_trace, sample_dir
from ._args import writable_file
from ._plot import pyplot
from .groups import Progress

if TYPE_CHECKING:
    from ..plan.objectives import Config, Context, Setup
    from ..plan.results import ResultCache
    from ..plan.search import Grid, Search

OBJECTIVES = (
    ("throughput_tok_s", "throughput", max),
    ("ttft_mean_s", "mean TTFT", min),
    ("ttft_p99_s", "p99 TTFT", min),
    ("cost_usd_per_h", "cost", min),
    ("usd_per_m_tok", "$ per M tokens", min),
)


def _floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers, got {text!r}") from None
    for v in vals:
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"--{name}: values must be finite numbers >= 0, got {v!r}")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--trace",
        default=None,
        type=resolve_trace,
        help="trace file or session folder (default: shipped sample)",
    )
    a("--model", default="llama-3.1-8b", help=f"one of: {', '.join(MODELS)}")
    a("--gpu", default="h100-80g", help=f"one of: {', '.join(GPUS)}")
    a("--prices", default=None, help="price table (JSON, layout of the shipped prices.json)")
    a("--json", default=None, type=writable_file, help="write every evaluated point here")
    a(
        "--plot",
        default=None,
        type=writable_file,
        help="write the front as a figure here (PNG; needs matplotlib)",
    )
    a("--exhaustive", action="store_true", help="evaluate the whole grid")
    a("--baseline", default="dram=1024", help="configuration to compare with: dram=GB,ssd=GB")
    a("--dram-gb", default="64:8192", help="DRAM grid START:MAX, doubling (0 always in)")
    a("--ssd-gb", default="512:32768", help="SSD grid START:MAX, doubling (0 always in)")
    a("--ttls", default="60,600", help="global TTLs (s) searched as policies ('' for none)")
    a(
        "--groupings",
        default="depth,reuse",
        help="group-TTL rules searched: depth,reuse ('' for none)",
    )
    a(
        "--billing",
        choices=("provisioned", "held"),
        default="provisioned",
        help="charge DRAM/SSD for the capacity provisioned, or for the GB-hours actually held",
    )
    a("--gain-threshold", type=float, default=0.02, help="stop growing a tier below this gain")
    a("--hv-threshold", type=float, default=0.002, help="stop refining below this HV gain")
    a("--rate-scale", type=float, default=1.0, help="arrival rate multiplier (load)")
    a("--session-rate", type=float, default=None, help="agentic session starts per second")
    a("--block-tokens", type=int, default=None, help="tokens per simulated block")
    a("--max-requests", type=int, default=None, help="replay only the first N requests")
    a("--hbm-fraction", type=float, default=0.5, help="share of KV memory caching prefixes")
    a("--decode-batch", type=int, default=32, help="decode batch the per-token cost assumes")
    a("--workers", type=int, default=None, help="parallel evaluations (default: cores, <= 8)")
    a("--ray", action="store_true", help="evaluate on Ray (pip install 'ttlpolicy[ray]')")
    a("--ray-address", default=None, help="join this Ray cluster (implies --ray)")
    a("--no-cache", action="store_true", help="do not read or record evaluated points")
    a("--no-progress", action="store_true", help="no progress line on stderr")


def parse_grid(text: str, name: str) -> tuple[float, ...]:
    from ..plan.search import doubling

    start, sep, maximum = text.partition(":")
    vals = _floats(f"{start},{maximum}", name) if sep else []
    if len(vals) != 2 or vals[0] <= 0:
        raise ValueError(f"--{name} must be START:MAX with 0 < START <= MAX GB, got {text!r}")
    return doubling(*vals)


def parse_baseline(text: str):
    from ..plan.objectives import Config

    fields = {"dram": 0.0, "ssd": 0.0}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ValueError(f"--baseline: expected dram=GB[,ssd=GB], got {part!r}")
        try:
            v = float(value)
        except ValueError:
            raise ValueError(f"--baseline {name}: not a number: {value!r}") from None
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"--baseline {name}: must be a finite number >= 0, got {value!r}")
        fields[name] = v
    return Config(fields["dram"], fields["ssd"]).canonical()


def _atomic_write(path: str, write) -> None:
    """Write through a temporary file in the target folder, renamed into place when complete."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent or Path("."), suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def format_front(rows: list[tuple[str, dict]], cost_key: str) -> str:
    head = ["", "DRAM GB", "SSD GB", "policy", "$/h", "tok/s", "TTFT s", "p99 s", "$/Mtok", "hit"]
    body = []
    for label, p in rows:
        c, r = p["config"], p
        body.append(
            [
                label,
                f"{c['dram_gb']:g}",
                f"{c['ssd_gb']:g}",
                c["label"],
                f"{r[cost_key]:.2f}",
                f"{r['throughput_tok_s']:.1f}",
                f"{r['ttft_mean_s']:.3g}",
                f"{r['ttft_p99_s']:.3g}",
                f"{r['usd_per_m_tok']:.3g}",
                f"{r['hit_rate']:.3f}",
            ]
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def tier_label(config: dict) -> str:
    """A configuration's tier sizes and policy, short enough to print beside a point."""
    return f"D{config['dram_gb']:g}/S{config['ssd_gb']:g} {config['label']}"


def figure(points: list[dict], front: list[int], baseline: int, cost_key: str, title: str) -> Any:
    """Cost against throughput and against mean TTFT: every evaluated configuration, the
    Pareto front (each point labelled with its tier sizes, GB) and the baseline."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    fr = sorted(front, key=lambda i: points[i][cost_key])
    cost_name = "$/h (provisioned)" if cost_key == "cost_usd_per_h" else "$/h (GB-hours held)"
    for ax, key, label in (
        (axes[0], "throughput_tok_s", "output tokens/s"),
        (axes[1], "ttft_mean_s", "mean TTFT (s)"),
    ):
        ax.scatter(
            [p[cost_key] for p in points],
            [p[key] for p in points],
            s=10,
            c="0.7",
            label="evaluated configurations",
        )
        xs, ys = [points[i][cost_key] for i in fr], [points[i][key] for i in fr]
        ax.plot(xs, ys, "o-", ms=4, label="Pareto front")
        for i, x, y in zip(fr, xs, ys, strict=True):
            ax.annotate(
                tier_label(points[i]["config"]),
                (x, y),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
        b = points[baseline]
        ax.plot([b[cost_key]], [b[key]], "k*", ms=10, label="baseline")
        ax.set_xlabel(cost_name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title + "\nfront points: D<DRAM GB>/S<SSD GB> <tier policy>", fontsize="medium")
    fig.tight_layout()
    return fig


def plot(
    points: list[dict], front: list[int], baseline: int, path: str, cost_key: str, title: str
) -> None:
    fig = figure(points, front, baseline, cost_key, title)
    fig.savefig(path, dpi=110, format="png")
    pyplot().close(fig)


def overload_warning(trace: Any, points: list[dict]) -> str | None:
    """A warning when no configuration keeps up with the trace: the best throughput is under
    90 % of what the trace offers (its output tokens over its arrival span), so its TTFTs and
    $/token measure a queue that grows for the whole replay, which no tier removes."""
    span_s = float(trace.arrival_s[-1] - trace.arrival_s[0]) if len(trace.arrival_s) else 0.0
    if span_s <= 0 or not points:
        return None
    offered = float(trace.output_tokens.sum()) / span_s
    best = max(p["throughput_tok_s"] for p in points)
    if best >= 0.9 * offered:
        return None
    return (
        f"warning: the simulated engine is overloaded: at best it serves {best:.3g} output "
        f"tokens/s of the {offered:.3g} the trace offers, so the TTFTs and $/token above "
        "measure a growing queue, whatever the tiers; lower --rate-scale or --session-rate, "
        "or plan for more engines"
    )


def _checked(args: argparse.Namespace) -> tuple[Grid, Config, Setup]:
    """The search grid, the baseline and the setup: everything is checked before any work."""
    from ..plan.objectives import Setup
    from ..plan.search import Grid, policies

    grid = Grid(
        parse_grid(args.dram_gb, "dram-gb"),
        parse_grid(args.ssd_gb, "ssd-gb"),
        policies(
            _floats(args.ttls, "ttls"),
            [g.strip() for g in args.groupings.split(",") if g.strip()],
        ),
    )
    baseline = parse_baseline(args.baseline)
    for name in ("gain_threshold", "hv_threshold"):
        v = getattr(args, name)
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.decode_batch < 1:
        raise ValueError(f"--decode-batch must be >= 1, got {args.decode_batch}")
    if args.plot:
        pyplot()  # a missing matplotlib, before the search rather than after it
    setup = Setup(
        trace=args.trace or str(sample_dir()),
        model=args.model,
        gpu=args.gpu,
        prices_path=args.prices,
        block_tokens=args.block_tokens,
        session_rate_per_s=args.session_rate,
        max_requests=args.max_requests,
        rate_scale=args.rate_scale,
        hbm_fraction=args.hbm_fraction,
        decode_batch=args.decode_batch,
    )
    setup.validate()
    return grid, baseline, setup


def _cost_key(args: argparse.Namespace) -> str:
    return "cost_usd_per_h" if args.billing == "provisioned" else "cost_held_usd_per_h"


def _searched(
    args: argparse.Namespace, setup: Setup, grid: Grid, baseline: Config
) -> tuple[Context, Search, dict[str, int], ResultCache, float]:
    """The search run (the baseline evaluated too): its context, the search with its results,
    the counts simulated and read from the cache, the cache, and the seconds it took."""
    from ..plan.objectives import Context
    from ..plan.pool import LocalPool, RayPool
    from ..plan.results import ResultCache, key_of
    from ..plan.search import Search

    t0 = time.perf_counter()
    ctx = Context(setup)  # loads prices (validated) and the trace (cached form)
    t_load = time.perf_counter() - t0
    cache = ResultCache(key_of(ctx), enabled=not args.no_cache)
    use_ray = args.ray or args.ray_address is not None
    workers = args.workers
    pool = (
        RayPool(setup, workers, args.ray_address)
        if use_ray
        else LocalPool(setup, workers, context=ctx)
    )
    stream = None if args.no_progress else sys.stderr
    print(
        f"{len(ctx.trace)} requests, {len(ctx.trace.keys)} blocks of {ctx.trace.block_tokens} "
        f"tokens ({t_load:.1f} s to load); {args.model} on {MODELS[args.model].tp}x {args.gpu}, "
        f"HBM cache {ctx.hbm_blocks} blocks; {pool.name} pool, {pool.workers} workers; "
        f"{len(cache)} points recorded before",
        file=sys.stderr,
    )
    evaluated = {"run": 0, "cached": 0}

    def evaluate(configs: list[Config]) -> list[dict[str, float]]:
        out: dict[Config, dict[str, float]] = {}
        todo = []
        for c in configs:
            r = cache.get(c)
            if r is None:
                todo.append(c)
            else:
                out[c] = r
                evaluated["cached"] += 1
        bar = Progress(len(todo), stream)
        for c, r in zip(todo, pool.imap(todo), strict=True):
            cache.put(c, r)
            out[c] = r
            evaluated["run"] += 1
            bar.advance(1, f"{len(search.results) + len(out)} evaluated")
        bar.close()
        return [out[c] for c in configs]

    search = Search(grid, evaluate, ctx.cost_usd_per_h, _cost_key(args))
    try:
        if args.exhaustive:
            search.exhaustive()
        else:
            search.adaptive(args.gain_threshold, args.hv_threshold)
        search.run_batch([baseline])
    finally:
        pool.close()
        cache.close()
    return ctx, search, evaluated, cache, time.perf_counter() - t0


def _points(search: Search, configs: list[Config], cost_key: str) -> list[dict[str, Any]]:
    """Each evaluated configuration with its results and its $ per million output tokens."""
    points: list[dict[str, Any]] = []
    for c in configs:
        cj = c.to_json()
        cj["label"] = c.policy_label
        r = dict(search.results[c])
        # $ per million output tokens at the billed cost
        thr = r["throughput_tok_s"]
        r["usd_per_m_tok"] = r[cost_key] / (thr * 3600.0) * 1e6 if thr > 0 else math.inf
        points.append({"config": cj, **r})
    return points


def _print_front(
    points: list[dict[str, Any]], objs: list[Any], front: list[int], baseline: Config,
    base: dict[str, Any], cost_key: str,
) -> None:  # fmt: skip
    """The front by cost, then the best point per objective against the baseline."""
    print(f"\nPareto front ({len(front)} of {len(points)} evaluated points), by cost:")
    print(format_front([("", points[i]) for i in sorted(front, key=lambda i: objs[i])], cost_key))
    print(
        f"\nbest per objective against the baseline ({baseline.policy_label}, "
        f"DRAM {baseline.dram_gb:g} GB, SSD {baseline.ssd_gb:g} GB):"
    )
    rows = [("baseline", base)]
    for key, name, pick in OBJECTIVES:
        k = cost_key if key == "cost_usd_per_h" else key
        values = [float(p[k]) for p in points]
        best = values.index(pick(values))
        change = (points[best][k] - base[k]) / base[k] if base[k] else math.nan
        rows.append((f"best {name} ({change:+.1%})", points[best]))
    print(format_front(rows, cost_key))


def run(args: argparse.Namespace) -> int:
    from ..plan.front import as_min, front_indices

    grid, baseline, setup = _checked(args)
    ctx, search, evaluated, cache, elapsed = _searched(args, setup, grid, baseline)

    # ---- report ---------------------------------------------------------------------------
    cost_key = _cost_key(args)
    configs = list(search.results)
    points = _points(search, configs, cost_key)
    objs = [as_min(p, cost_key) for p in points]
    front = front_indices(objs)
    base_i = configs.index(baseline)
    _print_front(points, objs, front, baseline, points[base_i], cost_key)
    warning = overload_warning(ctx.trace, points)
    if warning:
        print(f"\n{warning}", file=sys.stderr)
    print(
        f"\n{len(points)} points ({evaluated['run']} simulated now, {evaluated['cached']} from "
        f"{cache.path if cache.enabled else 'no cache'}) in {elapsed:.1f} s",
        file=sys.stderr,
    )
    doc = {
        "evaluations": len(points),
        "points": points,
        "front": front,
        "baseline": base_i,
        "meta": {
            "trace": setup.trace,
            "model": args.model,
            "gpu": args.gpu,
            "prices": ctx.prices.source,
            "billing": args.billing,
            "search": "exhaustive" if args.exhaustive else "adaptive",
            "grid_points": len(grid.all()),
            "block_tokens": ctx.trace.block_tokens,
            "hbm_blocks": ctx.hbm_blocks,
            "seconds": elapsed,
        },
    }
    if args.json:

        def write_json(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)

        _atomic_write(args.json, write_json)
    if args.plot:
        title = (
            f"{Path(setup.trace).name}: {len(ctx.trace)} requests, {args.model} on "
            f"{MODELS[args.model].tp}x {args.gpu}, {args.billing} billing"
        )
        _atomic_write(args.plot, lambda tmp: plot(points, front, base_i, tmp, cost_key, title))
    return 0
