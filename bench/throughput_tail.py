"""Why ttlpolicy-offload's throughput trails the strongest rival's at issue 46's heavy points
(8B 0.01/s, 70B 0.008/s; docs/investigations/2026-rivals.md, "Throughput at the heavy
points").

The simulator's throughput (``Metrics.summary()["throughput_tok_s"]``) is the run's output
tokens over its makespan, the instant the last program's last call ends.  Every policy serves
the same calls, so two policies' throughputs differ only by their makespans.  This script
runs each policy through the engine's public step loop (as a cluster drives its engines:
``prepare``, ``run_length``, ``step``, ``advance``; the figures are ``simulate``'s) and
splits the makespan:

* ``busy_s`` — seconds the engine computed; ``steps`` and the mean decode batch (calls
  decoding per step) say how well it batched, and the GPU blocks that running calls, pins
  and free cached chains held on average while it computed, where its memory went;
  ``idle_s`` the rest;
* ``last_program`` — the program that finished last, its start, completion time and tool
  time, and its completion time ``alone`` (on an engine of its own, same arrivals);
  ``lead_s`` — how much later it finished than the next-to-last program: what the one
  program adds to the makespan;
* ``last_wait_s`` — the last program's queue waits (first call and returns, as
  ``bounds.Tally`` counts them): what the order made it wait;
* ``floor_s`` — the latest ``start + alone completion`` of any program: no policy's
  makespan is below it;
* ``jct_fold<k>_s`` — the mean completion time of fold ``k``'s programs (``--folds``: the
  validation fold 3 and the tuning fold 0 by default), as bench/rivals.py counts it.

    PYTHONPATH=python:bench python bench/throughput_tail.py \\
        [--points 'llama-3.1-8b@h100-80g=0.01;llama-3.1-70b@h100-80g=0.008'] \\
        [--seeds 0,1,2,3] [--policies mori,kvflow,ttlpolicy-offload] [--folds 0,3] \\
        [--cpu-gb 256] [--json F]

Policies take ``bench/bounds.py``'s config fields (``ttlpolicy-offload/FIELD=VALUE``), and
``ttlpolicy-offload[:variant]+cap=S`` is ttlpolicy-offload whose returning calls rank by
``arrival + min(attained, S)`` instead of ``arrival + attained`` (``CappedAttainedOffload``:
bench-side, a rule the library does not have); ``+cap=S@T`` caps only programs past ``T``
seconds of service, ``+age=A`` (cap 0 unless given) only programs in the system longer than
``A`` seconds (a bound for very long programs); ``+w=W`` ranks them by ``arrival + W *
attained`` (``W = 0``: the returns' arrival order); ``+start=B`` ranks them ``B`` of their
program's age earlier (``B = 1``: by the program's start); ``+top=N`` ranks the returns of the
``N`` live programs with the most service at their arrival (no wait for it: the one program
likeliest to end the run is not held back); ``+skip=K`` after any of them passes a
head too large for memory in that order (``SkipCappedOffload``); ``mori+skip=K``,
``ttlpolicy-offload[:variant]+skip=K`` and ``+lcskip=K`` are ``skip_ahead``'s,
``ttlpolicy-offload[:variant][+skip=S]+admitskip=K[@P]`` ``admit_ahead``'s.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from admit_ahead import ADMIT_SKIP, make_admit_policy
from bounds import Tally, agentic_folds, make_variant
from heavy_bound import TakenOffload
from rivals import point_runs
from skip_ahead import LC_SKIP, SKIP, check_depth, make_skip_policy
from ttlpolicy.serving.skip_ahead import first_runnable
from ttlpolicy.sim import Engine, EngineConfig, Metrics, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import Hardware
from ttlpolicy.sim.interface import Policy, StepPlan, Verdict
from ttlpolicy.sim.policies.ttlpolicy_plugin import make_ttlpolicy
from ttlpolicy.sim.workload import Program, poisson_arrivals

POINTS = "llama-3.1-8b@h100-80g=0.01;llama-3.1-70b@h100-80g=0.008"
POLICIES = "mori,kvflow,ttlpolicy-offload"
#: the order fields of ``+FIELD=VALUE`` after ttlpolicy-offload (``make_run_policy``)
ORDER_FIELDS = ("cap", "age", "w", "start", "top")
#: the figures averaged over the seeds
MEANS = "throughput_tok_s makespan_s floor_s busy_s idle_s mean_decode_batch last_wait_s lead_s"


@dataclass
class Busy:
    """What the engine computed in a run: seconds, steps, and decode slots (calls decoding,
    summed over steps); and, over the seconds it computed, the GPU blocks that running calls
    held (held and private blocks), that pins held, and that free cached chains took
    (``KVCache.used`` less ``pinned``, ``pinned``, ``cached``), in block-seconds."""

    busy_s: float = 0.0
    steps: int = 0
    decode_slots: int = 0
    running_block_s: float = 0.0
    pinned_block_s: float = 0.0
    cached_block_s: float = 0.0

    @property
    def mean_decode_batch(self) -> float:
        return self.decode_slots / self.steps if self.steps else 0.0

    def mean_blocks(self) -> dict[str, float]:
        """The blocks running calls, pins and free cached chains held, on average while the
        engine computed."""
        span = self.busy_s or 1.0
        return {
            "running_blocks": self.running_block_s / span,
            "pinned_blocks": self.pinned_block_s / span,
            "cached_blocks": self.cached_block_s / span,
        }


#: Told of each step the engine planned, or stretch it idled (plan None, 0 steps), after
#: ``prepare`` and before the time passes: ``(engine, plan, steps, seconds, preemptions
#: before prepare)``.
Probe = Callable[[Engine, StepPlan | None, int, float, int], None]


class CappedAttainedOffload(TakenOffload):
    """ttlpolicy-offload whose unpinned returning calls — which the library ranks by
    ``arrival + attained`` (``serve_order="attained"``: the engine seconds the program has
    run, pop to finish or preemption, read when the call is queued) — rank instead by
    ``arrival - start_share * age + min(weight * attained, cap_s)``: past ``cap_s`` of service
    a program waits no longer for it, it waits for ``weight`` of its service (1: the
    library's), and its returns rank earlier by ``start_share`` of its age (the time since its
    first call arrived; 1: by the program's start instead of the return's arrival); the
    returns of the ``top_n`` live programs with the most service (when at least ``top_n`` are
    live; 0: none) rank at their arrival.
    Bench-side, through the scheduler's ``take`` (``heavy_bound.TakenOffload``): preempted
    and pinned calls, which the library serves first, and first calls, which it serves last,
    keep its order."""

    def __init__(
        self,
        cap_s: float,
        above_s: float = 0.0,
        age_s: float = math.inf,
        weight: float = 1.0,
        start_share: float = 0.0,
        top_n: int = 0,
        **options: Any,
    ) -> None:
        checks = (("cap_s", cap_s), ("above_s", above_s), ("age_s", age_s), ("weight", weight))
        for what, value in checks:
            if not value >= 0:
                raise ValueError(f"{what} must be >= 0, got {value!r}")
        if not 0 <= start_share <= 1:
            raise ValueError(f"start_share must be in [0, 1], got {start_share!r}")
        if top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {top_n!r}")
        super().__init__(**options)
        self.cap_s = cap_s
        #: the share of its service a program's returns wait for (1: the library's order)
        self.weight = weight
        #: the cap holds only for programs past this much service (the very long ones), or
        #: in the system (since their first call's arrival) longer than ``age_s``
        self.above_s = above_s
        self.age_s = age_s
        self.start_share = start_share
        self.top_n = top_n
        self._first_s: dict[str, float] = {}  # program -> its first call's arrival
        self._attained_s: dict[str, float] = {}  # program -> engine seconds run
        self._started_s: dict[int, float] = {}  # running call -> when it (re)started

    def arrive(self, call: Call, now: float) -> bool:
        self._first_s.setdefault(call.program_id, now)
        pinned = super().arrive(call, now)
        # (an unpinned returning call heads the library's queue only when no preempted or
        # pinned call waits: then the waiting unpinned returns are the calls to reorder)
        if call.turn_index and not pinned:
            served_s = self._attained_s.get(call.program_id, 0.0)
            age_s = now - self._first_s.get(call.program_id, now)
            attained = self.weight * served_s
            if served_s > self.above_s or age_s > self.age_s:
                attained = min(attained, self.cap_s)
            if self.top_n and served_s > 0:
                most = heapq.nlargest(self.top_n, self._attained_s.values())
                if len(most) == self.top_n and served_s >= most[-1]:
                    attained = 0.0
            self.reorder(call, now - self.start_share * age_s + attained)
        return pinned

    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        super().admitted(call, now, cache_dropped)
        self._started_s[call.call_id] = now

    def _ran(self, call: Call, now: float) -> None:
        started = self._started_s.pop(call.call_id, now)
        self._attained_s[call.program_id] = self._attained_s.get(call.program_id, 0.0) + (
            now - started
        )

    def requeue(self, call: Call, now: float) -> None:
        self._ran(call, now)
        super().requeue(call, now)

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        self._ran(call, now)
        if last_turn:
            self._attained_s.pop(call.program_id, None)
            self._first_s.pop(call.program_id, None)
        return super().finished(call, now, chain_blocks, last_turn)


class SkipCappedOffload(CappedAttainedOffload):
    """``ttlpolicy-offload[:variant]+cap=S[@T]+skip=K``: the capped order above, and when its
    head's whole prompt does not fit, the first of the next ``depth`` waiting calls in that
    order that fits and that load control admits runs instead (``skip_ahead``'s rule on the
    capped order; while pins give way the head is the order's own)."""

    def __init__(
        self, depth: int, cap_s: float, above_s: float, age_s: float, weight: float, **options: Any
    ) -> None:
        super().__init__(cap_s, above_s, age_s, weight, **options)
        self.depth = check_depth(depth)
        self._waiting_rids: set[str] = set()
        self._cap_rank: dict[str, float] = {}  # reordered call -> its capped rank
        self._skipping = False
        #: admissions past the capped order's head
        self.skips = 0

    def arrive(self, call: Call, now: float) -> bool:
        pinned = super().arrive(call, now)
        self._waiting_rids.add(str(call.call_id))
        return pinned

    def reorder(self, call: Call, rank: float) -> None:
        self._cap_rank[str(call.call_id)] = rank
        super().reorder(call, rank)

    def requeue(self, call: Call, now: float) -> None:
        super().requeue(call, now)
        self._waiting_rids.add(str(call.call_id))

    def _order_key(self, rid: str) -> tuple:
        key = self.sched.priority(rid)
        rank = self._cap_rank.get(rid)
        return key if rank is None else (key[0], key[1], rank, *key[3:])

    def peek(self) -> Call | None:
        self._skipping = False
        head = super().peek()
        if head is None or self._giving_way or self.prompt_fits(str(head.call_id)):
            return head
        head_rid = str(head.call_id)
        others = (rid for rid in self._waiting_rids if rid != head_rid)
        ranked = heapq.nsmallest(self.depth, others, key=self._order_key)
        rid = first_runnable(ranked, self.prompt_fits, self.may_run)  # (the library's test)
        if rid is None:
            return head
        self._chosen, self._skipping = rid, True
        return self._calls[rid]

    def popped(self, call: Call, taken: bool) -> None:
        rid = str(call.call_id)
        self._waiting_rids.discard(rid)
        self._cap_rank.pop(rid, None)
        self.skips += self._skipping
        self._skipping = False
        super().popped(call, taken)


def make_run_policy(name: str) -> Policy:
    """A policy from its name: ``bounds.make_variant``'s; ``...+skip=K`` / ``...+lcskip=K``
    (``skip_ahead``); ``...+admitskip=K[@P]`` (``admit_ahead``); or a ttlpolicy-offload policy
    with ``+cap=S[@T]``, ``+age=A``, ``+w=W``, ``+start=B``, ``+top=N`` (and ``+skip=K`` after
    them) as
    ``CappedAttainedOffload``
    (``SkipCappedOffload``)."""
    starts = [i for i in (name.find(f"+{f}=") for f in ORDER_FIELDS) if i >= 0]
    if not starts:
        if ADMIT_SKIP in name:
            return make_admit_policy(name)
        if SKIP in name or LC_SKIP in name:
            return make_skip_policy(name)
        return make_variant(name)
    base = name[: min(starts)]
    fields = dict(w.partition("=")[::2] for w in name[min(starts) + 1 :].split("+"))
    head, _, variant = base.partition(":")
    if head != "ttlpolicy-offload" or not set(fields) <= {*ORDER_FIELDS, "skip"}:
        words = ", ".join(f"+{f}=" for f in (*ORDER_FIELDS, "skip"))
        raise ValueError(f"policy {name[:64]!r}: {words} on ttlpolicy-offload only")
    cap, _, above = fields.get("cap", "0").partition("@")
    try:
        cap_s = float(cap)
        above_s = float(above or (0 if "cap" in fields else math.inf))
        age_s = float(fields.get("age", math.inf))
        weight = float(fields.get("w", 1.0))
        start = float(fields.get("start", 0.0))
        top_n = int(fields.get("top", 0))
        depth = int(fields.get("skip", 0))
    except ValueError:
        raise ValueError(
            f"policy {name[:64]!r}: cap, age, w or start {str(fields)[:64]} is not a number, or "
            "top or skip not an integer"
        ) from None
    if "skip" in fields:
        check_depth(depth)
        policy = make_ttlpolicy(
            head,
            variant,
            cls=lambda **o: SkipCappedOffload(
                depth, cap_s, above_s, age_s, weight, start_share=start, top_n=top_n, **o
            ),
        )
    else:
        policy = make_ttlpolicy(
            head,
            variant,
            cls=lambda **o: CappedAttainedOffload(
                cap_s, above_s, age_s, weight, start_share=start, top_n=top_n, **o
            ),
        )
    policy.name = name
    return policy


def run_logged(
    hw: Hardware,
    policy: Policy,
    programs: list[Program],
    rate_per_s: float,
    seed: int,
    config: EngineConfig | None = None,
    probe: Probe | None = None,
) -> tuple[Metrics, Busy]:
    """``simulate(hw, policy, programs, rate_per_s=..., seed=..., config=...)``'s run, driven
    step by step through the engine's public loop, with what it computed counted (and
    ``probe``, if given, told of each step or idle stretch as ``Probe`` says)."""
    engine = Engine(hw, policy, config)
    engine.add_programs(poisson_arrivals(programs, rate_per_s, seed))
    return drive(engine, probe)


def drive(engine: Engine, probe: Probe | None = None) -> tuple[Metrics, Busy]:
    """The engine's run (its programs added), step by step through its public loop, as
    ``run_logged`` says."""
    busy = Busy()
    while True:
        preemptions = engine.metrics.preemptions
        plan = engine.prepare()
        if plan is None:
            t = engine.next_event_s()
            if t is None:
                break
            if probe is not None:
                probe(engine, None, 0, max(t, engine.now) - engine.now, preemptions)
            engine.advance(max(t, engine.now) - engine.now)
            continue
        steps, dt = engine.run_length(plan)
        if probe is not None:
            probe(engine, plan, steps, dt, preemptions)
        busy.busy_s += dt
        busy.steps += steps
        busy.decode_slots += len(plan[0]) * steps
        kv = engine.kv  # (before the step: what the plan ran with, its first blocks allocated)
        busy.running_block_s += (kv.used - kv.pinned) * dt
        busy.pinned_block_s += kv.pinned * dt
        busy.cached_block_s += kv.cached * dt
        engine.step(plan, (steps, dt))
    return engine.finish_run(), busy


def alone_completion_s(
    hw: Hardware, programs: list[Program], rate_per_s: float, seed: int
) -> dict[str, float]:
    """Each program's completion time on an engine of its own (the ``alone`` bound)."""
    m = simulate(hw, "alone", programs, rate_per_s=rate_per_s, seed=seed)
    return {p: m.program_finish_s[p] - m.program_start_s[p] for p in m.program_finish_s}


def makespan_split(
    m: Metrics, busy: Busy, alone_s: dict[str, float], tally: Tally
) -> dict[str, object]:
    """The run's makespan split as the module doc says (``alone_s``: each program's
    completion time alone, from the same arrivals; ``tally``: the run's policy, tallied)."""
    finish = m.program_finish_s
    if len(finish) < 2:
        raise ValueError(f"a makespan split needs >= 2 finished programs, got {len(finish)}")
    last, before = sorted(finish, key=lambda p: (finish[p], p))[-1:-3:-1]
    start = m.program_start_s
    waits: dict[str, float] = dict(tally.per_program.get(last, {}))
    return {
        "throughput_tok_s": m.output_tokens / m.makespan_s,
        "makespan_s": m.makespan_s,
        "busy_s": busy.busy_s,
        "idle_s": m.makespan_s - busy.busy_s,
        "steps": busy.steps,
        "mean_decode_batch": busy.mean_decode_batch,
        **busy.mean_blocks(),
        "output_tokens": m.output_tokens,
        "prefill_tokens": m.prefill_tokens,
        "recomputed_tokens": m.recomputed_tokens,
        "last_program": last,
        "last_start_s": start[last],
        "last_jct_s": finish[last] - start[last],
        "last_think_s": m.program_think_s[last],
        "last_alone_s": alone_s[last],
        "last_wait_s": sum(
            waits.get(k, 0.0) for k in ("wait_first_s", "wait_return_kept_s", "wait_return_lost_s")
        ),
        "lead_s": finish[last] - finish[before],
        "floor_s": max(start[p] + alone_s[p] for p in finish),
    }


def fold_jct(m: Metrics, fold_ids: dict[int, set[str]]) -> dict[str, float]:
    """The mean completion time of each fold's programs that ran."""
    out = {}
    for k, ids in fold_ids.items():
        jct = [m.program_finish_s[p] - m.program_start_s[p] for p in ids if p in m.program_finish_s]
        out[f"jct_fold{k}_s"] = statistics.fmean(jct)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default=POINTS, help="'setup=rate,rate;setup=rate'")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--cpu-gb", type=float, default=256.0, help="CPU tier per GPU, GB")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--folds", default="0,3", help="folds (of 4) whose mean JCT is reported")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    loaded = agentic_folds()
    if loaded is None:
        return 2
    programs, folds = loaded
    fold_ids = {int(k): {p.program_id for p in folds[int(k)]} for k in args.folds.split(",")}
    rows = []
    for setup, rate, seed, hw, progs in point_runs(programs, args.points, args.seeds, args.cpu_gb):
        alone_s = alone_completion_s(hw, progs, rate, seed)
        for name in args.policies.split(","):
            policy = make_run_policy(name)
            tally = Tally(policy)
            m, busy = run_logged(hw, cast(Policy, tally), progs, rate, seed)
            row = {"setup": setup, "rate": rate, "seed": seed, "policy": name}
            row.update(makespan_split(m, busy, alone_s, tally))
            counts = ("skips", "lcskips", "admitskips")
            row.update({k: getattr(policy, k) for k in counts if hasattr(policy, k)})
            row.update(fold_jct(m, fold_ids))
            rows.append(row)
            print(_line(row), flush=True)
    _means(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _line(row: dict) -> str:
    return (
        f"{row['setup']} {row['rate']:g}/s seed {row['seed']} {row['policy']}: "
        f"{row['throughput_tok_s']:.2f} tok/s, makespan {row['makespan_s']:,.0f} s "
        f"(floor {row['floor_s']:,.0f}), busy {row['busy_s']:,.0f} s, steps {row['steps']:,}, "
        f"decode batch {row['mean_decode_batch']:.2f} (blocks: running "
        f"{row['running_blocks']:,.0f}, pinned {row['pinned_blocks']:,.0f}, cached "
        f"{row['cached_blocks']:,.0f}); last {row['last_program']} "
        f"start {row['last_start_s']:,.0f} JCT {row['last_jct_s']:,.0f} "
        f"(alone {row['last_alone_s']:,.0f}, tools {row['last_think_s']:,.0f}, "
        f"waits {row['last_wait_s']:,.0f}), lead {row['lead_s']:,.0f} s; "
        + ", ".join(
            f"{k} {v:,.0f}"
            for k, v in row.items()
            if k.startswith(("jct_fold", "skips", "lcskips", "admitskips"))
        )
    )


def _means(rows: list[dict]) -> None:
    """Per point and policy, the means over the seeds."""
    jcts = sorted(k for k in rows[0] if k.startswith("jct_fold"))
    print("\n| setup | rate /s | policy | tok/s | makespan s | floor s | busy s | idle s "
          "| decode batch | last's waits s | lead s | " + " | ".join(jcts) + " |")  # fmt: skip
    print("|---" * (10 + len(jcts)) + "|")
    keys = dict.fromkeys((r["setup"], r["rate"], r["policy"]) for r in rows)
    for setup, rate, policy in keys:
        sel = [r for r in rows if (r["setup"], r["rate"], r["policy"]) == (setup, rate, policy)]
        f = {k: statistics.fmean(r[k] for r in sel) for k in (*MEANS.split(), *jcts)}
        print(
            f"| {setup} | {rate:g} | {policy} | {f['throughput_tok_s']:.2f} "
            f"| {f['makespan_s']:,.0f} | {f['floor_s']:,.0f} | {f['busy_s']:,.0f} "
            f"| {f['idle_s']:,.0f} | {f['mean_decode_batch']:.2f} | {f['last_wait_s']:,.0f} "
            f"| {f['lead_s']:,.0f} | " + " | ".join(f"{f[k]:,.0f}" for k in jcts) + " |"
        )


__all__ = [
    "Busy",
    "CappedAttainedOffload",
    "SkipCappedOffload",
    "alone_completion_s",
    "drive",
    "fold_jct",
    "make_run_policy",
    "makespan_split",
    "run_logged",
]

if __name__ == "__main__":
    sys.exit(main())
