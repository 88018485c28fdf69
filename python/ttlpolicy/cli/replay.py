"""Replay agent programs against an OpenAI-compatible server and measure what ttlpolicy gains.

Plays the sessions of a trace (default: the shipped sample sessions; agentic sessions, TraceLab
round traces, or a Mooncake/Azure stream at its recorded times) against ``--endpoint``'s
``/v1/completions``: prompts built from the trace's block hashes, so calls share exactly the
prefixes the trace says (docs/replay.md: how exact); each program waits its tool gaps
(``--time-scale``); programs arrive as a seeded Poisson process (``--rate``) or keep
``--concurrency`` in flight, in the order ``ttlpolicy compare`` simulates.  With ``--ids
explicit`` each request names its program, tool and last turn (``vllm_xargs``, or SGLang's
``custom_params`` with ``--id-field``), as the ttlpolicy adapters read them.

Reports per server: programs done and failed, completion time (mean, p95; "on engine": less
the tool gaps), TTFT, output throughput, the cached share of prompt tokens the server reported
(vLLM: ``--enable-prompt-tokens-details``) beside the share the trace's prefixes allow.
``--ab URL2`` plays the same arrivals against a second server and prints B / A.
``--capacity`` finds how many concurrent agents the server holds under ``--ttft-bound``.
``--warm-prefix`` makes each program's first tokens (tool definitions and system prompt) one
prefix shared by all, sent once before the run, as kv-cache-tester's replay warms them.
Errors are counted; the run stops after ``--max-errors`` and, like Ctrl-C, still reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from ttlpolicy.replay import (
    Client,
    Options,
    Replay,
    RunResult,
    Workload,
    find_capacity,
    format_ratios,
    format_table,
    load_programs,
    ratios,
    summary,
)
from ttlpolicy.replay.client import CallError
from ttlpolicy.replay.programs import MAX_PROGRAMS
from ttlpolicy.replay.report import json_safe, program_rows
from ttlpolicy.replay.run import MAX_INFLIGHT
from ttlpolicy.traces import resolve_trace, sample_dir

from ._args import finite_float, float_in, int_in, writable_file

#: Context cap when the server does not say its own (vLLM's /v1/models has max_model_len).
DEFAULT_MAX_CONTEXT = 32_768
MAX_CONTEXT_TOKENS = 10_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    add_request_arguments(parser)
    add_run_arguments(parser)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The servers, the trace and the load."""
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        required=True,
        help="the server (A), e.g. http://127.0.0.1:8000",
    )
    parser.add_argument(
        "--ab",
        metavar="URL2",
        default=None,
        help="a second server (B): same arrivals, B / A printed",
    )
    parser.add_argument(
        "--ab-order",
        choices=("sequential", "concurrent"),
        default="sequential",
        help="A then B (each server has the client alone), or both at once (half the time; "
        "only for servers that share no hardware)",
    )
    parser.add_argument(
        "--trace",
        metavar="PATH",
        default=None,
        type=resolve_trace,
        help="a trace, as for `ttlpolicy compare` (default: the shipped sample sessions)",
    )
    parser.add_argument(
        "--model", default=None, help="model name sent (default: the server's first in /v1/models)"
    )
    parser.add_argument(
        "--programs",
        metavar="N",
        type=int_in(1, MAX_PROGRAMS),
        default=16,
        help="sessions (or requests of a stream) read from the trace",
    )
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--rate",
        metavar="PER_S",
        type=float_in(0.0, 1e6, low_open=True),
        default=None,
        help="program arrivals per second (seeded Poisson); a request stream: its rate scale",
    )
    load.add_argument(
        "--concurrency",
        metavar="N",
        type=int_in(1, MAX_INFLIGHT),
        default=None,
        help="programs in flight (closed loop; default 4)",
    )
    parser.add_argument(
        "--seed",
        metavar="N",
        type=int_in(0, 2**32 - 1),
        default=0,
        help="seed of the arrival order and times",
    )
    parser.add_argument(
        "--time-scale",
        metavar="X",
        type=float_in(0.0, 1e6),
        default=1.0,
        help="multiply every tool/human gap by this (0.01: a hundred times faster)",
    )
    parser.add_argument(
        "--think-cap",
        metavar="S",
        type=finite_float,
        default=300.0,
        help="cap on a gap before --time-scale, s (negative: no cap)",
    )
    parser.add_argument(
        "--human-turns",
        choices=("keep", "drop"),
        default="keep",
        help="keep a program's human turns, or end it at its first",
    )


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """What each request carries and how long it may take."""
    parser.add_argument(
        "--max-context",
        metavar="TOKENS",
        type=int_in(128, MAX_CONTEXT_TOKENS),
        default=None,
        help="cap on a call's context + output (default: the server's max_model_len, else 32768)",
    )
    parser.add_argument(
        "--max-output-tokens",
        metavar="N",
        type=int_in(1, 1_000_000),
        default=None,
        help="cap on a call's output (default: the trace's)",
    )
    parser.add_argument(
        "--ids",
        choices=("explicit", "none"),
        default="explicit",
        help="name program, tool and last turn on each request, or send none (anonymous)",
    )
    parser.add_argument(
        "--id-field",
        choices=("vllm_xargs", "custom_params"),
        default="vllm_xargs",
        help="the request field carrying the ids (vLLM; SGLang)",
    )
    parser.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send ignore_eos (servers that refuse it; outputs may then end early)",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float_in(0.0, 86400.0, low_open=True),
        default=600.0,
        help="per call",
    )
    parser.add_argument(
        "--max-errors",
        metavar="N",
        type=int_in(1, 1_000_000),
        default=10,
        help="stop the run after this many failed calls",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """When a run stops, how many programs it keeps in flight, capacity search, output."""
    parser.add_argument(
        "--duration",
        metavar="S",
        type=float_in(0.0, 1e7, low_open=True),
        default=None,
        help="stop the run after this long",
    )
    parser.add_argument(
        "--max-inflight",
        metavar="N",
        type=int_in(1, MAX_INFLIGHT),
        default=256,
        help="programs in flight at most (timed arrivals wait for a slot)",
    )
    parser.add_argument(
        "--salt",
        default="0",
        help="prompt text depends on it: change it for a cold start on a warm server",
    )
    parser.add_argument(
        "--warm-prefix",
        metavar="trace|TOKENS",
        type=_warm_prefix,
        default=None,
        help="each program begins with one shared prefix, sent once before the run: its "
        "session's tool_tokens + system_tokens (trace), or this many tokens (default: none)",
    )
    parser.add_argument(
        "--capacity",
        action="store_true",
        help="find the concurrent agents the server holds under --ttft-bound",
    )
    parser.add_argument(
        "--ttft-bound",
        metavar="S",
        type=float_in(0.0, 1e5, low_open=True),
        default=None,
        help="with --capacity: the TTFT bound",
    )
    parser.add_argument(
        "--ttft-quantile",
        choices=("p50", "p95", "p99"),
        default="p95",
        help="with --capacity: which TTFT the bound applies to",
    )
    parser.add_argument(
        "--step-duration",
        metavar="S",
        type=float_in(0.0, 1e5, low_open=True),
        default=60.0,
        help="with --capacity: length of each step",
    )
    parser.add_argument(
        "--max-agents",
        metavar="N",
        type=int_in(1, MAX_INFLIGHT),
        default=64,
        help="with --capacity: the most agents tried",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        type=writable_file,
        default=None,
        help="write all results here (JSON)",
    )


def _warm_prefix(text: str) -> str | int:
    if text == "trace":
        return text
    return int_in(1, MAX_CONTEXT_TOKENS)(text)


def _warm_up(replay: Replay, w: Workload) -> dict[str, Any] | None:
    """The warm prefix sent to one server (None: no warm prefix)."""
    block_tokens = w.programs[0].block_tokens
    got = replay.warm_up(w.warm_blocks, block_tokens)
    if got is None:
        return None
    return {"tokens": got.input_tokens, "latency_s": got.latency_s, "error": got.error}


class _ProgressLine:
    """One progress line on stderr, at most once a second per server."""

    def __init__(self, name: str, total: int) -> None:
        self.name, self.total, self._last = name, total, 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, r: RunResult) -> None:
        now = time.monotonic()
        if now - self._last < (1.0 if self.tty else 10.0):
            return
        self._last = now
        done = sum(p.end_s is not None for p in r.programs)
        calls = sum(len(p.calls) for p in r.programs)
        errors = sum(r.errors.values())
        line = (
            f"  {self.name}: {done}/{self.total} programs done, {calls} calls, "
            f"{errors} errors, {r.wall_s:.0f} s"
        )
        print(line, end="\r" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _discover(client: Client, model: str | None) -> tuple[str, int | None]:
    """(model name, the server's max_model_len if it says)."""
    try:
        models = client.models()
    except CallError as e:
        if model is not None and e.kind.startswith("http"):
            return model, None  # a server without /v1/models: the name given is enough
        raise ValueError(f"/v1/models: {e}") from None  # e names the kind and the URL
    entry = next((m for m in models if model is None or m.get("id") == model), None)
    if entry is None:
        names = ", ".join(str(m.get("id")) for m in models[:10])
        if model is None:
            raise ValueError(f"{client.url}/v1/models lists no model; give --model")
        raise ValueError(f"{client.url} serves no model {model!r} (it has: {names})")
    n = entry.get("max_model_len")
    return str(entry.get("id")), n if isinstance(n, int) and n > 0 else None


def _options(args: argparse.Namespace, model: str, salt: str, duration_s: float | None) -> Options:
    return Options(
        model=model,
        time_scale=args.time_scale,
        ids=args.ids,
        id_field=args.id_field,
        ignore_eos=not args.no_ignore_eos,
        salt=salt,
        max_inflight=args.max_inflight,
        max_errors=args.max_errors,
        duration_s=duration_s,
    )


def _play(args: argparse.Namespace, w: Workload, replay: Replay) -> tuple[RunResult, str, float]:
    """One run: (result, load name, load)."""
    if w.open_loop:
        scale = args.rate if args.rate is not None else 1.0
        return replay.run_timed(w.recorded(scale)), "arrival-rate scale", scale
    if args.rate is not None:
        return replay.run_timed(w.poisson(args.rate, args.seed)), "rate (programs/s)", args.rate
    n = args.concurrency if args.concurrency is not None else 4
    return replay.run_closed(w.closed(args.seed), n), "concurrency (programs)", float(n)


def run(args: argparse.Namespace) -> int:
    if args.capacity and args.ttft_bound is None:
        raise ValueError("--capacity needs --ttft-bound")
    if args.capacity and (args.ab or args.rate is not None):
        raise ValueError("--capacity measures one server in closed loops: no --ab or --rate")
    model, clients, w, meta = _prepare(args)
    if args.capacity:
        return _capacity(args, w, clients[0], model, meta)
    names = ["A", "B"][: len(clients)]
    replays = [Replay(c, _options(args, model, args.salt, args.duration)) for c in clients]
    bars = [_ProgressLine(n, len(w.programs)) for n in names]
    for r, bar in zip(replays, bars, strict=True):
        r.progress = bar
    warm = [_warm_up(r, w) for r in replays]
    results: list[tuple[RunResult, str, float]] = []
    if args.ab and args.ab_order == "concurrent":
        results = _concurrent(args, w, replays)
    else:
        for r in replays:
            results.append(_play(args, w, r))
            if results[-1][0].stopped == "interrupted":
                break  # Ctrl-C: B is not started
    for b in bars:
        b.close()
    return _report(args, names, results, len(replays), meta, warm)


def _prepare(
    args: argparse.Namespace,
) -> tuple[str, list[Client], Workload, dict[str, Any]]:
    """The servers asked for their model, the workload read from the trace: (model, a
    client per server, workload, the run's description for the JSON)."""
    trace = args.trace or str(sample_dir())
    urls = [args.endpoint] + ([args.ab] if args.ab else [])
    clients = [Client(u, timeout_s=args.timeout) for u in urls]
    found = [_discover(c, args.model) for c in clients]
    model = found[0][0]
    if args.ab and found[1][0] != model:
        raise ValueError(
            f"A serves {model!r} and B {found[1][0]!r}: give --model to send one name to both"
        )
    lens = [n for _, n in found if n is not None]
    max_context = args.max_context or (min(lens) - 8 if lens else DEFAULT_MAX_CONTEXT)
    w = load_programs(
        trace,
        max_programs=args.programs,
        max_context=max_context,
        think_cap_s=args.think_cap if args.think_cap >= 0 else None,
        human_turns=args.human_turns,
        max_output_tokens=args.max_output_tokens,
        warm_prefix=args.warm_prefix,
    )
    calls = sum(len(p.calls) for p in w.programs)
    print(
        f"{len(w.programs)} programs, {calls} calls from {trace}; model {model!r}, contexts "
        f"capped at {max_context} tokens, gaps × {args.time_scale:g}, ids {args.ids}",
        file=sys.stderr,
    )
    meta: dict[str, Any] = {
        "trace": trace,
        "model": model,
        "programs": len(w.programs),
        "seed": args.seed,
        "time_scale": args.time_scale,
        "ids": args.ids,
        "max_context": max_context,
        "ab_order": args.ab_order if args.ab else None,
        "warm_prefix": args.warm_prefix,
        "warm_prefix_tokens": w.warm_blocks * w.programs[0].block_tokens,
    }
    return model, clients, w, meta


def _report(
    args: argparse.Namespace,
    names: list[str],
    results: list[tuple[RunResult, str, float]],
    n_replays: int,
    meta: dict[str, Any],
    warm: list[dict[str, Any] | None],
) -> int:
    """The table (and B / A), warnings, the JSON (``warm``: each server's warm-up); the exit
    code (130: interrupted, 1: stopped by errors)."""
    rows: list[tuple[str, dict[str, Any]]] = []
    out: list[dict[str, Any]] = []
    for name, (res, load_name, load) in zip(names, results, strict=False):
        s = summary(res)
        rows.append((f"{name} {res.url}", s))
        out.append(
            {
                "server": name,
                "url": res.url,
                "load_name": load_name,
                "load": load,
                "warm_up": warm[len(out)],
                "summary": s,
                "programs": program_rows(res),
            }
        )
    print(f"\n{out[0]['load_name']} = {out[0]['load']:g}")
    print(format_table(rows))
    doc: dict[str, Any] = {"meta": meta, "results": out}
    if len(rows) == 2:
        doc["ratios"] = ratios(rows[0][1], rows[1][1])
        print(format_ratios(doc["ratios"]))
    for name, s in rows:
        if s["stopped"]:
            print(
                f"({name}: stopped early: {s['stopped']}; errors {s['errors_by_kind']})",
                file=sys.stderr,
            )
        elif s["errors"]:
            print(f"({name}: errors {s['errors_by_kind']})", file=sys.stderr)
        if s["calls"] and s["cached_reported_calls"] == 0:
            print(
                f"({name}: the server reported no cached tokens; "
                "vLLM needs --enable-prompt-tokens-details)",
                file=sys.stderr,
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(json_safe(doc), f, indent=1)
    stops = [s["stopped"] for _, s in rows] + ([None] if len(rows) < n_replays else [])
    if "interrupted" in stops or len(rows) < n_replays:
        return 130
    return 1 if "errors" in stops else 0


def _concurrent(
    args: argparse.Namespace, w: Workload, replays: list[Replay]
) -> list[tuple[RunResult, str, float]]:
    """A in this thread (it sees Ctrl-C), B in another, stopped with A when A is interrupted."""
    got: list[Any] = [None]

    def play_b() -> None:
        got[0] = _play(args, w, replays[1])

    t = threading.Thread(target=play_b, daemon=True)
    t.start()
    a = _play(args, w, replays[0])
    if a[0].stopped == "interrupted":
        replays[1].stop.set()
        replays[1].client.cancel_all()
    while t.is_alive():
        try:
            t.join(0.2)
        except KeyboardInterrupt:
            replays[1].stop.set()
            replays[1].client.cancel_all()
    return [a] + ([got[0]] if got[0] is not None else [])


def _capacity(args: argparse.Namespace, w: Workload, client: Client, model: str, meta: dict) -> int:
    key = f"ttft_{args.ttft_quantile}_s"

    def measure(n: int) -> dict[str, Any]:
        c = Client(client.url, timeout_s=args.timeout)  # a client serves one run
        replay = Replay(c, _options(args, model, f"{args.salt}/agents{n}", args.step_duration))
        _warm_up(replay, w)  # (each step's salt: its own warm prefix)
        res = replay.run_closed(w.closed(args.seed, cycle=True), n)
        s = summary(res)
        q = s[key]
        print(
            f"  {n} agents: TTFT {args.ttft_quantile} {q:.3f} s, {s['calls']} calls, "
            f"{s['errors']} errors",
            file=sys.stderr,
        )
        return s

    result = find_capacity(
        measure, ttft_bound_s=args.ttft_bound, quantile_key=key, max_agents=args.max_agents
    )
    n = result["capacity_agents"]
    more = " (the most tried: it may hold more)" if result["reached_max_agents"] else ""
    print(
        f"\n{client.url} holds {n} concurrent agents with TTFT {args.ttft_quantile} "
        f"<= {args.ttft_bound:g} s{more}"
    )
    if result["stopped"]:
        print("(interrupted: the search ended early)", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                json_safe(
                    {
                        "meta": {
                            **meta,
                            "ttft_bound_s": args.ttft_bound,
                            "quantile": args.ttft_quantile,
                        },
                        "capacity": result,
                    }
                ),
                f,
                indent=1,
            )
    return 130 if result["stopped"] else 0
