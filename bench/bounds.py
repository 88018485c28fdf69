"""How close ttlpolicy comes to the bounds (issue 34), per fold of the sessions and arrival
seed: mean completion time of each policy at the contended load points, the share of the
clairvoyant policy's gain over stock vLLM that ttlpolicy captures (and of ``alone``'s), the
ratios against Continuum and CacheTTL, and where the remaining gap to ``clairvoyant`` goes.

    python bench/bounds.py [--folds 4] [--seeds 0,1,2,3] [--only-folds 0,2] \\
        [--points 'llama-3.1-8b@h100-80g=0.004,0.005;llama-3.1-70b@h100-80g=0.003,0.004'] \\
        [--policies vllm,continuum,cachettl,ttlpolicy,alone,clairvoyant] [--programs N] \\
        [--ours ttlpolicy,ttlpolicy/expected_working_set=true] [--ids explicit] \\
        [--common-prefix] [--json F]

**Variants** (for tuning, issue 34 part 4): a policy ``ttlpolicy/FIELD=VALUE/...`` is the
simulator's ``ttlpolicy`` (any variant, e.g. ``ttlpolicy:pins/...``) with those
``PolicyConfig`` fields replaced (VALUE read as JSON: ``true``, ``1.5``, ``"text"``);
``--ours`` names the policies whose captured share and ratios are reported, one table each
(default ``ttlpolicy``).  Tune on some folds (``--only-folds 0,1,2`` reports those only) and
report the fold left out.

**Folds** (deterministic; bench/RESULTS.md, "How close to the limit"): a session belongs to fold
``int(sha256(file name)[:8 bytes], big-endian) mod K``, the file name being
``<session id>.json.gz`` — the reader takes a session's id from its file, whose stem it is in
the claude-code trace (checked: a session whose file is not found is an error); sub-agents
(``<session id>/<agent>``) stay in their session's fold.  All programs run together, as the
seeded Poisson process at the given rate (the load of the whole set, where the contended
points were found), and each fold's figures are means over its own programs; ``--separate``
runs each fold's programs alone instead (a quarter of the programs at the same rate is a
lighter load: the queue of an overloaded engine grows with the run's length).  Nothing is
tuned here; a fold reported is a validation fold when no rule or constant was chosen on it.

**Gap** (one table per setup, contended points): each policy's mean completion time split
into the programs' own tool/human time, queue waits of first calls, of returns that kept
their prefix and of returns that lost some of it, and the rest (service: prefill, decode,
recomputation); and the returns that lost their prefix by cause — the pin expired before the
return, the pin was reclaimed, the call was never pinned, or the pin was taken over at the
return and the chain lost while the call waited — counted by a wrapper around the policy
(``Tally``), which changes nothing of its answers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import cast

import agent_sweep  # bench/, beside this script: the sessions' options, subsets
import sim_sweep
from trace_paths import traces_dir
from ttlpolicy import PolicyConfig
from ttlpolicy.cli import add_common_prefix_argument, add_ids_argument
from ttlpolicy.sim import make_policy, roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.interface import Policy, PolicyHooks, Unpin, Verdict
from ttlpolicy.sim.metrics import Metrics
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.workload import Program

POLICIES = "vllm,continuum,cachettl,ttlpolicy,alone,clairvoyant"
#: the contended points of bench/RESULTS.md, "Beyond the paper" (issue 10): vllm's hit rate
#: below 0.5 there on seed 0
POINTS = "llama-3.1-8b@h100-80g=0.004,0.005;llama-3.1-70b@h100-80g=0.003,0.004"
CAUSES = ("expired", "reclaimed", "never pinned", "lost while waiting")


def session_file(program_id: str) -> str:
    """The trace file a program comes from (sub-agents: their session's)."""
    return program_id.split("/", 1)[0] + ".json.gz"


def fold_of(program_id: str, folds: int) -> int:
    """The program's fold: its session file name's SHA-256, first 8 bytes, mod ``folds``."""
    digest = hashlib.sha256(session_file(program_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") % folds


def split_folds(programs: list[Program], folds: int, trace: Path | None) -> list[list[Program]]:
    """The programs of each fold, in their given order; with ``trace``, every program's
    session file must be in that folder (else the fold key would not be its file name)."""
    if folds < 1:
        raise ValueError(f"folds must be >= 1, got {folds!r}")
    out: list[list[Program]] = [[] for _ in range(folds)]
    for prog in programs:
        if trace is not None and not (trace / session_file(prog.program_id)).exists():
            raise ValueError(
                f"program {prog.program_id!r}: no file {session_file(prog.program_id)!r} in "
                f"{trace}; the fold key is the file name"
            )
        out[fold_of(prog.program_id, folds)].append(prog)
    return out


def agentic_folds(folds: int = 4) -> tuple[list[Program], list[list[Program]]] | None:
    """The agentic sessions (``agent_sweep.OPTIONS``, under the documented traces folder) and
    their ``folds`` folds; None when the traces are missing (``load_sessions`` said why)."""
    programs = sim_sweep.load_sessions(None, agent_sweep.OPTIONS)
    if programs is None:
        return None
    return programs, split_folds(programs, folds, traces_dir() / "claude-code")


def make_variant(spec: str) -> Policy:
    """A policy from its name, or ``ttlpolicy[:variant]/FIELD=VALUE/...``: the plug-in with
    those ``PolicyConfig`` fields replaced in the config it builds for the engine."""
    name, *sets = spec.split("/")
    policy = make_policy(name)
    if not sets:
        return policy
    if not isinstance(policy, TTLPolicyPlugin):
        raise ValueError(f"policy {spec[:64]!r}: only ttlpolicy takes config fields")
    update: dict[str, object] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or key not in PolicyConfig.model_fields:
            raise ValueError(f"policy {spec[:64]!r}: {item[:64]!r} is not FIELD=VALUE")
        try:
            update[key] = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(
                f"policy {spec[:64]!r}: {key} value {value[:64]!r} is not JSON"
            ) from None
    engine_config = policy.default_config  # (the plug-in's config for the engine it binds)

    def configured(view: object) -> PolicyConfig:
        # validated: a bad field value fails here, naming the field
        return PolicyConfig(**{**engine_config(view).model_dump(), **update})  # type: ignore[arg-type]

    policy.default_config = configured  # type: ignore[method-assign]
    policy.name = spec
    PolicyConfig(**update)  # (a bad value fails before the first run, not inside it)
    return policy


class Tally(PolicyHooks):
    """A policy as it is, with each program's queue waits and preemptions recorded and the
    fate of its chain followed to its return: why a returning call lost its prefix
    (``CAUSES``), in ``per_program``.  The engine's optional hooks and flags are the inner
    policy's own; no answer of the policy changes."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.uses_cpu_tier = inner.uses_cpu_tier
        self.fate: dict[str, str] = {}
        #: program → seconds and counts: queue waits (first call, returns that kept / lost
        #: their prefix), returns lost by cause, preemptions
        self.per_program: dict[str, defaultdict[str, float]] = {}
        # the queue and the hooks the tally does not watch, bound once (asked at every step)
        for attr in ("bind", "peek", "pop", "waiting", "next_deadline"):
            setattr(self, attr, getattr(inner, attr))
        for attr in ("eviction_order", "eviction_order_change_s", "stepped", "prefetch"):
            setattr(self, attr, getattr(inner, attr))
        for flag in ("holds_handed_pins", "reclaims_ahead", "runs_alone", "prefetches"):
            setattr(self, flag, getattr(inner, flag))

    def arrive(self, call: Call, now: float) -> bool:
        taken = self.inner.arrive(call, now)
        if taken:
            self.fate[call.program_id] = "lost while waiting"
        return taken

    def _record(self, program: str) -> defaultdict[str, float]:
        rec = self.per_program.get(program)
        if rec is None:
            rec = self.per_program[program] = defaultdict(float)
        return rec

    def requeue(self, call: Call, now: float) -> None:
        self.inner.requeue(call, now)
        self._record(call.program_id)["preemptions"] += 1

    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        self.inner.admitted(call, now, cache_dropped)
        if call.preempted:
            return  # (a resumed call: its wait was counted at its first admission)
        rec = self._record(call.program_id)
        wait_s = now - call.issue_s  # as the engine's metrics count it (``Metrics.queued``)
        if not call.turn_index:
            rec["wait_first_s"] += wait_s
        elif cache_dropped:
            rec["wait_return_lost_s"] += wait_s
            rec["returns_lost"] += 1
            rec[f"lost_{self.fate.get(call.program_id, 'never pinned')}"] += 1
        else:
            rec["wait_return_kept_s"] += wait_s

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        verdict = self.inner.finished(call, now, chain_blocks, last_turn)
        self.fate[call.program_id] = "pinned" if verdict is Verdict.PIN else "never pinned"
        return verdict

    def _ended(self, programs: list[str], cause: str) -> list[str]:
        for program in programs:
            self.fate[program] = cause
        return programs

    def expire(self, now: float) -> list[str]:
        return self._ended(self.inner.expire(now), "expired")

    def reclaim(self, blocks_needed: int, now: float, for_program: str | None = None) -> list[str]:
        return self._ended(self.inner.reclaim(blocks_needed, now, for_program), "reclaimed")

    def give_way(self, step_blocks: int, now: float, unpin: Unpin) -> None:
        def noted(program: str) -> None:
            if self.fate.get(program) != "lost while waiting":  # (a held chain stays so)
                self.fate[program] = "reclaimed"
            unpin(program)

        self.inner.give_way(step_blocks, now, noted)

    def program_done(self, program_id: str, turns: int) -> None:
        self.inner.program_done(program_id, turns)
        self.fate.pop(program_id, None)


#: the parts of a program's completion time, and the counts, a breakdown reports
PARTS = ("jct_s", "think_s", "wait_first_s", "wait_return_kept_s", "wait_return_lost_s",
         "service_s", "returns_lost", *(f"lost_{c}" for c in CAUSES), "preemptions")  # fmt: skip


def breakdown(m: Metrics, tally: Tally, programs: list[str]) -> dict[str, float]:
    """Means per program of ``programs``: completion time, own tool/human time, queue waits
    (first calls, returns that kept / lost their prefix), the rest (service: prefill, decode,
    recomputation); returns lost (by cause) and preemptions."""
    n = len(programs)
    out = dict.fromkeys(PARTS, 0.0)
    for program in programs:
        out["jct_s"] += m.program_finish_s[program] - m.program_start_s[program]
        out["think_s"] += m.program_think_s[program]
        for key, value in tally.per_program.get(program, {}).items():
            out[key] += value
    waits = out["think_s"] + out["wait_first_s"] + out["wait_return_kept_s"]
    out["service_s"] = out["jct_s"] - waits - out["wait_return_lost_s"]
    return {key: value / n for key, value in out.items()}


def gain(vllm_s: float, ours_s: float, bound_s: float) -> float:
    """The share of the bound's gain over vllm that ``ours`` captures (nan without a gain)."""
    span = vllm_s - bound_s
    return (vllm_s - ours_s) / span if span > 0 else float("nan")


def _fmt(x: float, digits: int = 0) -> str:
    return "nan" if x != x else f"{x:,.{digits}f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--only-folds", default=None, help="comma-separated folds (default: all)")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--points", default=POINTS, help="'setup=rate,rate;setup=rate'")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument(
        "--ours",
        default=None,
        help="policies reported against the bounds, one table each (default: every ttlpolicy)",
    )
    ap.add_argument("--programs", type=int, default=None, help="first N programs per run")
    ap.add_argument(
        "--separate",
        action="store_true",
        help="run each fold's programs alone (default: all programs in one run, each fold's "
        "figures over its own programs — the load of the whole set)",
    )
    ap.add_argument("--json", default=None)
    add_ids_argument(ap)
    add_common_prefix_argument(ap)
    args = ap.parse_args()
    args.policies = sim_sweep.policies_with_ids(args.policies, args.ids)
    if args.ours:
        args.ours = sim_sweep.policies_with_ids(args.ours, args.ids)
    programs = sim_sweep.load_sessions(args.trace, agent_sweep.OPTIONS, args.common_prefix)
    if programs is None:
        return 2
    trace = Path(args.trace) if args.trace else traces_dir() / "claude-code"
    folds = split_folds(programs, args.folds, trace)
    print("programs per fold: " + ", ".join(str(len(f)) for f in folds), file=sys.stderr)
    only = list(
        range(args.folds) if args.only_folds is None else map(int, args.only_folds.split(","))
    )
    # what one run holds: every program (figures per fold), or one fold's
    runs = [(only, programs)] if not args.separate else [([k], folds[k]) for k in only]
    fold_ids = [{p.program_id for p in f} for f in folds]
    policies = args.policies.split(",")
    ours_list = (
        args.ours.split(",") if args.ours else [p for p in policies if p.startswith("ttlpolicy")]
    )
    for name in ours_list:
        if name not in policies:
            raise SystemExit(f"--ours {name!r} is not one of --policies")
    for name in policies:
        make_variant(name)  # (a bad name fails now, not after hours of runs)
    results = []
    for point in args.points.split(";"):
        setup, _, rates = point.partition("=")
        model, gpu = setup.split("@")
        hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
        for reported, run_programs in runs:
            for seed in (int(s) for s in args.seeds.split(",")):
                progs = agent_sweep.subset(run_programs, seed, args.programs)
                for rate in (float(r) for r in rates.split(",")):
                    rows = [
                        {"setup": setup, "rate": rate, "fold": k, "seed": seed,
                         "programs": [p.program_id for p in progs if p.program_id in fold_ids[k]]}
                        for k in reported
                    ]  # fmt: skip
                    for name in policies:
                        t = time.perf_counter()
                        inner = make_variant(name)
                        pol = Tally(inner)
                        # (``alone`` runs each program on its own engine: nothing to follow)
                        run = inner if inner.runs_alone else cast(Policy, pol)
                        m = simulate(hw, run, progs, rate_per_s=rate, seed=seed)
                        wall_s = time.perf_counter() - t
                        hit_rate = m.summary()["hit_rate"]  # (of the whole run)
                        for row in rows:
                            row[name] = breakdown(m, pol, row["programs"])
                            row[name]["wall_s"] = wall_s
                            row[name]["run_hit_rate"] = hit_rate
                    for row in rows:
                        results.append(row)
                        print(_row_line(row, policies, ours_list), flush=True)
    for ours in ours_list:
        print(f"\n## {ours}")
        _summary(results, policies, ours)
        _per_seed(results, policies, ours)
        _gaps(results, ours)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def _ratios(row: dict, ours_name: str) -> dict[str, float]:
    """The issue's figures of one run for ``ours_name`` (policies absent: nan)."""
    nan = float("nan")

    def jct(name: str) -> float:
        return row[name]["jct_s"] if name in row else nan

    ours, vllm = jct(ours_name), jct("vllm")
    return {
        "captured_clairvoyant": gain(vllm, ours, jct("clairvoyant")),
        "captured_alone": gain(vllm, ours, jct("alone")),
        "x_vllm": vllm / ours,
        "x_continuum": jct("continuum") / ours,
        "x_cachettl": jct("cachettl") / ours,
    }


def _row_line(row: dict, policies: list[str], ours_list: list[str]) -> str:
    jcts = " ".join(f"{p}={_fmt(row[p]['jct_s'])}" for p in policies)
    walls = "+".join(f"{row[p]['wall_s']:.1f}" for p in policies)
    line = (
        f"{row['setup']} {row['rate']:g}/s fold {row['fold']} seed {row['seed']} "
        f"({len(row['programs'])} programs): {jcts}"
    )
    for ours in ours_list:
        r = _ratios(row, ours)
        line += (
            f" | {ours}: captured {_fmt(100 * r['captured_clairvoyant'])} % (alone "
            f"{_fmt(100 * r['captured_alone'])} %), × vllm {r['x_vllm']:.2f} continuum "
            f"{r['x_continuum']:.2f} cachettl {r['x_cachettl']:.2f}"
        )
    return line + f" | wall {walls} s"


def _summary(results: list[dict], policies: list[str], ours: str) -> None:
    """Means over seeds per (setup, rate, fold) and over folds too, then the gap tables per
    setup.  "captured" is the share of the bound's gain over vllm of the mean JCTs over the
    seeds; "captured/seed" the mean of each seed's share; "min ×" the least of the ratios
    against continuum and cachettl over the seeds (the issue's "every seed" target)."""
    if not results:
        return
    print("\n| setup | rate /s | fold | " + " | ".join(policies) + " | captured (clairv.) "
          "| captured/seed | captured (alone) | × vllm | × continuum | × cachettl "
          f"| min × cont./cachettl | max {ours}/vllm |")  # fmt: skip
    print("|" + "---|" * (len(policies) + 11))
    keys = sorted({(r["setup"], r["rate"]) for r in results})
    for setup, rate in keys:
        here = [r for r in results if (r["setup"], r["rate"]) == (setup, rate)]
        for fold in sorted({r["fold"] for r in here}):
            rows = [r for r in here if r["fold"] == fold]
            _summary_line(setup, rate, str(fold), rows, policies, ours)
        if len({r["fold"] for r in here}) > 1:
            _summary_line(setup, rate, "all", here, policies, ours)


def _summary_line(
    setup: str, rate: float, fold: str, rows: list[dict], policies: list[str], ours: str
) -> None:
    means = {p: statistics.fmean(r[p]["jct_s"] for r in rows) for p in policies}
    ratios = [_ratios(r, ours) for r in rows]
    mean_ratios = _ratios({p: {"jct_s": v} for p, v in means.items()}, ours)

    def avg(key: str) -> float:
        return statistics.fmean(x[key] for x in ratios)

    worst = min(min(x["x_continuum"], x["x_cachettl"]) for x in ratios)
    worst_vllm = max(1.0 / x["x_vllm"] for x in ratios)
    print(
        f"| {setup} | {rate:g} | {fold} | "
        + " | ".join(_fmt(means[p]) for p in policies)
        + f" | {_fmt(100 * mean_ratios['captured_clairvoyant'])} %"
        f" | {_fmt(100 * avg('captured_clairvoyant'))} %"
        f" | {_fmt(100 * mean_ratios['captured_alone'])} %"
        f" | {mean_ratios['x_vllm']:.2f} | {mean_ratios['x_continuum']:.2f}"
        f" | {mean_ratios['x_cachettl']:.2f} | {worst:.2f} | {worst_vllm:.3f} |"
    )


def _per_seed(results: list[dict], policies: list[str], ours: str) -> None:
    """Per (setup, rate, seed), over every program reported (folds weighted by their
    programs): vllm's hit rate (is the point contended?), the gain captured, the ratios."""
    head = " | captured (clairv.) | captured (alone) | × vllm | × continuum | × cachettl |"
    print("\n| setup | rate /s | seed | vllm hit | " + " | ".join(policies) + head)
    print("|" + "---|" * (len(policies) + 9))
    for setup, rate, seed in sorted({(r["setup"], r["rate"], r["seed"]) for r in results}):
        rows = [r for r in results if (r["setup"], r["rate"], r["seed"]) == (setup, rate, seed)]
        n = sum(len(r["programs"]) for r in rows)
        means = {p: sum(r[p]["jct_s"] * len(r["programs"]) for r in rows) / n for p in policies}
        x = _ratios({p: {"jct_s": v} for p, v in means.items()}, ours)
        # (one run for all folds; with --separate, the mean of the folds' runs)
        hits = [r["vllm"]["run_hit_rate"] for r in rows if "vllm" in r]
        hit = statistics.fmean(hits) if hits else float("nan")
        print(
            f"| {setup} | {rate:g} | {seed} | {hit:.2f} | "
            + " | ".join(_fmt(means[p]) for p in policies)
            + f" | {_fmt(100 * x['captured_clairvoyant'])} % | {_fmt(100 * x['captured_alone'])} %"
            f" | {x['x_vllm']:.2f} | {x['x_continuum']:.2f} | {x['x_cachettl']:.2f} |"
        )


def _gaps(results: list[dict], ours: str) -> None:
    for setup in sorted({r["setup"] for r in results}):
        rows = [r for r in results if r["setup"] == setup]
        print(f"\nGap, {setup} (mean over its points, folds and seeds; per program)")
        shown = [p for p in ("vllm", ours, "clairvoyant") if p in rows[0]]
        print("| part | " + " | ".join(shown) + f" | {ours} − clairvoyant |")
        print("|" + "---|" * (len(shown) + 2))
        for part in PARTS:
            vals = {p: statistics.fmean(r[p][part] for r in rows) for p in shown}
            diff = vals.get(ours, float("nan")) - vals.get("clairvoyant", float("nan"))
            digits = 0 if part.endswith("_s") else 1
            print(f"| {part} | " + " | ".join(_fmt(vals[p], digits) for p in shown)
                  + f" | {_fmt(diff, digits)} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
