"""Where the time goes at one load point of the agentic sweep (issue 10,
docs/investigations/results-history.md, "The onset of contention on seed 2: where the time
goes").

    python bench/onset_probe.py --rate 0.004 --seed 2 [--setup llama-3.1-70b@h100-80g] \
        [--policies continuum,ttlpolicy,ttlpolicy:exact] [--trace DIR]

``--variant V`` runs the ``ttlpolicy`` policies with a candidate change to load control's rules
(``TTLPOLICY_BACKEND=python`` only: the variant subclasses the Python reference,
``ttlpolicy.reference.admission.AdmissionControl``; nothing of it is in the library):

* ``threshold=X``: the working set counts programs expected back within X times the shipped
  horizon (``n · rebuild_s · PolicyConfig.working_set_horizon_scale``; shipped: X = 1;
  ``inf``: every admitted program expected back at all), by the shipped rule (the expected
  working set, or the median rule where the config says so);
* ``sharers+waiting``: the horizon's ``n`` becomes ``n + w``, ``w`` the programs waiting for
  admission;
* ``headroom=F``: the head is admitted only when the working set and its footprint fit
  ``(1 − F) · total_blocks``;
* ``footprint=own``: the newcomer counted at its own footprint only; ``footprint=final``
  (``final-half``): at least the mean (half the mean) final footprint of the last 64 programs
  that ended;
* ``p-back``: each admitted program counted by its probability of being back within the
  threshold (the tool-gap CDF conditioned on the time away), not all-or-nothing;
* ``growth``: each program of the working set counted at its footprint plus what its last turn
  added (contexts grow: it will need that much more when back);
* ``mpl=N``: a fixed multiprogramming level, N admitted programs at most, instead of the
  working set;
* ``evict=cost``: evict first the context with the largest ``next_use / rebuild_s``;
  ``evict=ratio``: the largest ``next_use · blocks / rebuild_s``.

``--variant order=O[/CAP]`` instead changes the order in which the waiting requests of
programs that have finished a turn (returning calls: every such program is admitted) are
served, on a subclass of the reference's ``ProgramScheduler``; first calls stay behind them in
program FCFS, as admission needs.  ``CAP`` (s): a call that has waited that long goes first
(by arrival), whatever its rank.  Orders (ties: program FCFS):

* ``program``: program FCFS (the shipped order; a control);
* ``request``: request FCFS (vLLM's order);
* ``las``: least attained service of the program first (engine seconds its calls have run,
  Autellix's PLAS); ``mas``: most first;
* ``attained``: by arrival + the program's attained service (least attained service, a
  waited second worth a served second): the library's ``serve_order="attained"`` restated
  here as a check on it (what ``ttlpolicy-offload`` ships);
* ``turns``: fewest finished turns first;
* ``small`` / ``large``: the smallest / largest prompt (blocks needed) first;
* ``resident``: the most blocks of the program's context on the GPU first (the engine's KV
  cache, read live); ``resident-frac``: the largest share of its prompt resident first;
  ``missing``: the fewest blocks still to allocate (prompt − resident) first.

For each policy: mean JCT split into tool time (the sessions' own gaps, the same for every
policy), waiting before a program's first call starts (admission and memory), and the rest of
its time on the engine (its calls queued after the first, prefills, decodes); prompt tokens
recomputed; and, for the ``ttlpolicy`` variants, how long admission held the head back, how
much KV memory stood idle (neither used by a running call nor cached) meanwhile, and how many
programs were admitted then.  Then program by program against the first policy: how many
programs are faster or slower and by how much in all.
"""

from __future__ import annotations

import argparse
import bisect
import math
import sys

import numpy as np

import sim_sweep  # bench/, beside this script: loads the sessions
import ttlpolicy
from agent_sweep import OPTIONS
from ttlpolicy.reference.admission import AdmissionControl, away_samples
from ttlpolicy.reference.scheduler import ProgramScheduler
from ttlpolicy.sim import roofline
from ttlpolicy.sim.engine import Engine
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.interface import Verdict
from ttlpolicy.sim.policies import make_policy
from ttlpolicy.sim.workload import poisson_arrivals

#: (upper bound s, label) of the gaps before a re-prefilling call: the tool gap and its wait in
#: the queue (the sessions' gaps are capped at 300 s, so past that the queue made it longer)
GAP_BUCKETS = (
    (10, "< 10 s"),
    (30, "10-30 s"),
    (60, "30-60 s"),
    (300, "60-300 s"),
    (math.inf, ">= 300 s"),
)


def variant_class(variant: str) -> type[AdmissionControl]:
    """The reference's ``AdmissionControl`` with one rule changed (see the module doc)."""
    name, _, arg = variant.partition("=")

    class Variant(AdmissionControl):
        finals: list[int]

        def _sharers(self) -> float:
            n = float(len(self._admitted))
            if name == "threshold":
                return n * float(arg)
            return n + self.waiting_count if name == "sharers+waiting" else n

        def _p_back(self, prog, t: float, horizon: float) -> float:
            if prog.live > 0:
                return 1.0
            if prog.tool is None or prog.away_since_s is None:
                return 0.0
            elapsed, cfg = t - prog.away_since_s, self.policy.config
            if elapsed > cfg.max_ttl_s:
                return 0.0
            samples = away_samples(self.policy, prog.tool, prog.tenant)
            if not samples:
                return 1.0 - math.exp(-horizon / cfg.prior_mean_s)
            k = bisect.bisect_right(samples, elapsed)
            if k == len(samples):
                return 0.0
            return (bisect.bisect_right(samples, elapsed + horizon) - k) / (len(samples) - k)

        def _load(self, t: float) -> tuple[int, int]:
            n = len(self._admitted)
            if name == "mpl":  # over the level: refuse (working set > memory); else admit
                return (self.total_blocks + 1 if n >= int(arg) else 0), 0
            working, total = 0.0, 0
            # the shipped horizon (``n · rebuild_s``, scaled by the config), widened as asked
            widen = self._sharers() / n if n else 1.0
            for pid in self._admitted:
                prog = self._programs[pid]
                total += prog.blocks
                horizon = self._horizon_s(prog) * widen
                if name == "p-back":
                    working += prog.blocks * self._p_back(prog, t, horizon)
                elif self.policy.config.expected_working_set and name != "growth":
                    working += self._expected_blocks(prog, t, horizon)  # (the shipped rule)
                elif self._next_use(prog, t) <= horizon:
                    working += prog.blocks
                    if name == "growth":  # as it will be when back: + its last turn's growth
                        working += getattr(self, "grown", {}).get(pid, 0)
            if name == "headroom":
                working += float(arg) * self.total_blocks
            # (may_run counts the newcomer at max(its own, total // n): steer that here)
            finals = getattr(self, "finals", None)
            if name == "footprint" and arg == "own":
                total = 0
            elif name == "footprint" and finals:
                total = n * (sum(finals) // len(finals)) // (2 if arg == "final-half" else 1)
            return int(working), total

        def finish(self, program_id, now, blocks_held, tool=None, rebuild_s=0.0, last_turn=False):
            prog = self._programs.get(str(program_id))
            if prog is not None and name == "growth":
                grown = self.__dict__.setdefault("grown", {})
                grown[str(program_id)] = max(0, int(blocks_held) - prog.blocks)
            if last_turn and prog is not None:
                self.finals = [*getattr(self, "finals", []), max(prog.blocks, blocks_held)][-64:]
            super().finish(program_id, now, blocks_held, tool, rebuild_s, last_turn)

        def eviction_order(self, program_ids, now):
            if name != "evict":
                return super().eviction_order(program_ids, now)
            ids, t = list(program_ids), float(now)
            unknown = [p for p in ids if p not in self._programs]
            progs = self._programs

            def key(p: str) -> tuple:
                prog = progs[p]
                weight = prog.blocks if arg == "ratio" else 1
                value = self._next_use(prog, t) * weight / max(prog.rebuild_s, 1e-9)
                return (-value, -prog.arrival_s, p)

            return unknown + sorted((p for p in ids if p in progs), key=key)

    return Variant


ORDERS = ("program", "request", "las", "mas", "attained", "turns", "small", "large",
          "resident", "resident-frac", "missing")  # fmt: skip


def order_class(spec: str) -> type[ProgramScheduler]:
    """The reference's ``ProgramScheduler`` serving returning calls in another order (see the
    module doc: ``order=O[/CAP]``)."""
    order, _, cap = spec.partition("/")
    if order not in ORDERS:
        raise SystemExit(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
    cap_s = float(cap) if cap else math.inf
    live = order.startswith("resident") or order == "missing" or cap  # keys that move

    class Ordered(ProgramScheduler):
        kv = None  # the engine's KVCache (set by the probe), for the resident orders

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._need: dict[str, int] = {}  # request → blocks needed at arrival
            self._service: dict[str, float] = {}  # program → engine seconds run
            self._since: dict[str, float] = {}  # running request → when it (re)started
            self._returning: set[str] = set()  # waiting returning calls (their keys may move)
            # the choice an order has: pops of a returning call, those made while another
            # returning call waited too, and the seconds returning calls waited in all
            self.pops = {"returning": 0, "with a choice": 0, "wait_s": 0.0}

        def arrive(self, request_id, program_id, now, blocks_needed):
            self._need[request_id] = int(blocks_needed)
            return super().arrive(request_id, program_id, now, blocks_needed)

        def _rank(self, rid, req, prog) -> float:
            pid = req.program_id
            if order == "program":
                return prog.arrival_s
            if order == "request":
                return req.arrival_s
            if order == "attained":
                return req.arrival_s + self._service.get(pid, 0.0)
            if order in ("las", "mas"):
                s = self._service.get(pid, 0.0)
                return s if order == "las" else -s
            if order == "turns":
                return float(prog.turns)
            need = self._need.get(rid, 0)
            if order in ("small", "large"):
                return float(need) if order == "small" else -float(need)
            resident = min(self.kv.chain_blocks(pid), need) if self.kv is not None else 0
            if order == "resident":
                return -float(resident)
            if order == "resident-frac":
                return -resident / max(need, 1)
            return float(need - resident)  # missing

        # (the reference computes a waiting request's key where it queues it: the three places
        # below queue it again with this order's key, the reference's entry goes stale)
        def _requeue(self, rid: str) -> None:
            req = self._requests[rid]
            self._queue.push(self._key(rid, req, self._programs[req.program_id]))

        def _arrive(self, rid, pid, t):
            consumed = super()._arrive(rid, pid, t)
            self._requeue(rid)
            return consumed

        def _rekey_waiting(self, pid):
            super()._rekey_waiting(pid)
            for rid in self._programs[pid].live:
                if rid in self._queue:
                    self._requeue(rid)

        def _key(self, rid, req, prog):
            if prog.turns == 0 or req.preempted:  # first calls: program FCFS, as shipped
                return (not req.preempted, not req.pinned, 1, 0, prog.arrival_s, prog.order,
                        req.arrival_s, rid)  # fmt: skip
            self._returning.add(rid)
            aged = self._now - req.arrival_s >= cap_s
            return (True, not req.pinned, 0, 0 if aged else 1,
                    req.arrival_s if aged else self._rank(rid, req, prog), prog.order,
                    req.arrival_s, rid)  # fmt: skip

        def _refresh(self) -> None:
            for rid in list(self._returning):
                if rid not in self._queue:
                    self._returning.discard(rid)
                    continue
                req = self._requests[rid]
                key = self._key(rid, req, self._programs[req.program_id])
                if key != self._queue.key(rid):  # (a key that moved: queue it again)
                    self._queue.push(key)

        def peek(self):
            if live:
                self._refresh()
            return super().peek()

        def pop(self, now):
            if live:
                self._refresh()
            waiting = sum(1 for r in self._returning if r in self._queue)
            rid = super().pop(now)
            if rid is not None and rid in self._returning:
                self.pops["returning"] += 1
                self.pops["with a choice"] += waiting > 1
                self.pops["wait_s"] += self._now - self._requests[rid].arrival_s
                self._returning.discard(rid)
            if rid is not None:
                self._since[rid] = self._now
                self._need.pop(rid, None)
            return rid

        def _ran(self, rid: str, now) -> None:
            since = self._since.pop(rid, None)
            if since is not None:
                pid = self._requests[rid].program_id
                self._service[pid] = self._service.get(pid, 0.0) + float(now) - since

        def preempt(self, request_id, now):
            self._ran(request_id, now)
            super().preempt(request_id, now)
            self._requeue(request_id)

        def _finish_checked(self, plan):
            # (where every finish commits: ProgramLifecycle checks load control in between)
            self._ran(plan.request_id, plan.now)
            return super()._finish_checked(plan)

    return Ordered


class _Probe:
    """Wraps a policy's ``peek`` and ``admitted`` to time admission holds and first starts."""

    def __init__(self, policy, engine: Engine) -> None:
        self.engine = engine
        self.first_admit_s: dict[str, float] = {}
        self.held_s = 0.0  # time the head waited for admission (between scheduling passes)
        self.held_idle_block_s = 0.0  # idle blocks × that time
        self.held_admitted_s = 0.0  # admitted programs × that time
        self._held_since: float | None = None
        self.held_working_block_s = 0.0  # the working set × that time
        self._held_idle = 0
        self._held_admitted = 0
        self._held_working = 0
        gate = getattr(policy, "admission_gate", None)
        self.lost_by_gap: dict[str, float] = {}  # recomputed prompt tokens by the gap before
        self._last_finish: dict[str, float] = {}
        # pins made, and how they ended: taken by the program's next call ("hit": at its
        # arrival, or when it is scheduled under the published model), expired, reclaimed
        self.pins = {"made": 0, "hit": 0, "expired": 0, "reclaimed": 0}
        peek, admitted, finished = policy.peek, policy.admitted, policy.finished
        expire, reclaim = policy.expire, policy.reclaim

        def probed_peek():
            call = peek()
            now = engine.now
            self._close(now)
            if call is None and gate is not None and policy.sched.peek() is not None:
                kv = engine.kv
                self._held_since = now
                self._held_idle = kv.capacity - kv.used  # not computed on: cached or free
                self._held_admitted = gate.admitted_count
                self._held_working = gate.working_set_blocks(now)
            return call

        def probed_admitted(call, now, cache_dropped):
            self.first_admit_s.setdefault(call.program_id, now)
            if cache_dropped and not call.preempted:
                b = engine.config.block_tokens
                lost = min(call.turn.reusable_blocks, (call.prompt - 1) // b) * b - call.computed
                gap = now - self._last_finish.get(call.program_id, now)
                bucket = next(label for g, label in GAP_BUCKETS if gap < g)
                self.lost_by_gap[bucket] = self.lost_by_gap.get(bucket, 0) + max(lost, 0)
            return admitted(call, now, cache_dropped)

        def probed_finished(call, now, chain_blocks, last_turn):
            self._last_finish[call.program_id] = now
            verdict = finished(call, now, chain_blocks, last_turn)
            self.pins["made"] += verdict is Verdict.PIN
            return verdict

        def probed_expire(now):
            gone = expire(now)
            self.pins["expired"] += len(gone)
            return gone

        def probed_reclaim(blocks_needed, now, for_program=None):
            gone = reclaim(blocks_needed, now, for_program)
            self.pins["reclaimed"] += len(gone)
            return gone

        policy.peek, policy.admitted = probed_peek, probed_admitted
        policy.finished = probed_finished
        policy.expire, policy.reclaim = probed_expire, probed_reclaim

    def _close(self, now: float) -> None:
        if self._held_since is not None:
            dt = now - self._held_since
            self.held_s += dt
            self.held_idle_block_s += self._held_idle * dt
            self.held_admitted_s += self._held_admitted * dt
            self.held_working_block_s += self._held_working * dt
            self._held_since = None


def run(hw, name: str, programs: list, rate: float, seed: int):
    policy = make_policy(name)
    engine = Engine(hw, policy)
    sched = getattr(policy, "sched", None)
    if sched is not None and hasattr(sched, "kv"):
        sched.kv = engine.kv  # (an order=resident variant reads the cache live)
    probe = _Probe(policy, engine)  # (after bind: the gate exists)
    engine.add_programs(poisson_arrivals(programs, rate, seed))
    metrics = engine.run()
    pins = probe.pins
    left = engine.kv.pins_held  # pins still held when the run ends
    pins["hit"] = pins["made"] - pins["expired"] - pins["reclaimed"] - left
    return metrics, probe, engine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=0.004)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--trace", default=None, help="session folder (default: see sim_sweep)")
    ap.add_argument("--setup", default="llama-3.1-8b@h100-80g")
    ap.add_argument("--policies", default="continuum,ttlpolicy")
    ap.add_argument(
        "--variant",
        action="append",
        default=None,
        help="a candidate rule (module doc); one order= and one other may combine",
    )
    args = ap.parse_args(argv)
    if args.variant is not None:
        if ttlpolicy.backend != "python":
            print("--variant needs TTLPOLICY_BACKEND=python (it changes the reference)")
            return 2
        for variant in args.variant:  # what the plugin builds
            if variant.startswith("order="):
                ttlpolicy.ProgramScheduler = order_class(variant[len("order=") :])
            else:
                ttlpolicy.AdmissionControl = variant_class(variant)
    programs = sim_sweep.load_sessions(args.trace, OPTIONS)
    if programs is None:
        return 2
    model, gpu = args.setup.split("@")
    hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
    base_jct = None
    variants = "+".join(args.variant or ["none"])
    print(f"{args.setup}, {args.rate:g} programs/s, seed {args.seed}, variant {variants}")
    for name in args.policies.split(","):
        m, probe, engine = run(hw, name, programs, args.rate, args.seed)
        ids = sorted(m.program_finish_s)
        jct = np.array([m.program_finish_s[p] - m.program_start_s[p] for p in ids])
        think = np.array([m.program_think_s[p] for p in ids])
        first = np.array([probe.first_admit_s[p] - m.program_start_s[p] for p in ids])
        horizon = m.makespan_s or 1.0
        line = (
            f"{name:22s} JCT {jct.mean():7.1f}  p95 {np.percentile(jct, 95):7.1f}  tool "
            f"{think.mean():6.1f}  first start "
            f"{first.mean():6.1f}  rest on engine {(jct - think - first).mean():6.1f}  hit "
            f"{m.hit_tokens / m.input_tokens:.3f}  recomputed {m.recomputed_tokens:.3g}  "
            f"preempt {m.preemptions}\n{'':22s} pins: "
            + ", ".join(f"{k} {v}" for k, v in probe.pins.items())
            + f", pinned block-s {m.pinned_block_s:.3g}"
        )
        if probe.held_s:
            line += (
                f"\n{'':22s} admission held the head {probe.held_s:7.0f} s "
                f"({probe.held_s / horizon:.0%} of the run), KV outside running calls then "
                f"{probe.held_idle_block_s / probe.held_s / engine.kv.capacity:.0%}, "
                f"working set {probe.held_working_block_s / probe.held_s / engine.kv.capacity:.0%}"
                f", admitted programs {probe.held_admitted_s / probe.held_s:.2f}"
            )
        pops = getattr(getattr(engine.policy, "sched", None), "pops", None)  # (order=)
        if pops:
            line += (
                f"\n{'':22s} returning calls served {pops['returning']}, "
                f"{pops['with a choice']} of them while another waited; their waits "
                f"{pops['wait_s'] / len(ids):.1f} s per program"
            )
        lost = probe.lost_by_gap
        if lost:
            line += (
                f"\n{'':22s} re-prefilled tokens of returning calls by the gap before: "
                + ", ".join(f"{k} {lost[k]:.3g}" for _, k in GAP_BUCKETS if k in lost)
            )
        print(line)
        if base_jct is None:
            base_jct = jct
        else:
            diff = jct - base_jct  # < 0: faster than the first policy
            print(
                f"{'':22s} vs the first: {np.sum(diff < -1)} programs faster "
                f"(sum {-diff[diff < -1].sum():.0f} s), {np.sum(diff > 1)} slower "
                f"(sum {diff[diff > 1].sum():.0f} s); by JCT quartile of the first "
                + " / ".join(
                    f"{diff[(base_jct >= lo) & (base_jct <= hi)].mean():+.0f}"
                    for lo, hi in zip(
                        np.percentile(base_jct, [0, 25, 50, 75]),
                        np.percentile(base_jct, [25, 50, 75, 100]),
                        strict=True,
                    )
                )
                + " s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
