"""Why calls wait while GPU blocks sit in free cached chains (issue 46, the batching part of
the throughput gap at 8B 0.01/s: docs/investigations/2026-rivals.md, "Throughput at the
heavy points").

Each run goes through ``throughput_tail.run_logged``'s step loop (``simulate``'s figures);
after each ``prepare`` — the engine's admission done for the step — a step (or an idle
stretch) in which calls still wait is put down to the first of these that holds, in the
order the engine's ``_admit`` meets them:

* ``preempted`` — the step preempted a running call (vLLM admits nothing then);
* ``seq_cap`` — ``max_seqs`` calls run (vLLM's ``max_num_seqs``);
* ``token_budget`` — the running calls' prefill chunks and decodes take the step's token
  budget (``max_num_batched_tokens``: chunked prefill);
* ``refused`` — the policy names no head (``peek`` None): ttlpolicy's load control, MORI's
  CPU-tier admission;
* ``head_memory`` — the head's whole prompt (``scheduler_reserve_full_isl``) needs more
  blocks than are free, free cached chains and its own pin included: it waits, and every
  call behind it (vLLM's ``schedule`` stops at the first waiting request that does not fit);
  ``skip_fits`` says how often a call behind it would have fitted;
* ``head_fits`` — none of these (the head fits: the engine's pin reclaim is what left it).

Seconds are counted per cause, busy and idle apart, and while the engine computes: the
blocks that free cached chains hold and those that running calls reloading from the CPU
tier hold without computing; and by cause, the blocks left free or in free cached chains
(what an admission could take).

    PYTHONPATH=python:bench python bench/batch_wait.py \\
        [--points 'llama-3.1-8b@h100-80g=0.01'] [--seeds 0] \\
        [--policies mori,ttlpolicy-offload] [--cpu-gb 256] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import agent_sweep
import sim_sweep
from bounds import Tally
from rivals import point_runs
from throughput_tail import make_run_policy, run_logged
from ttlpolicy.sim import Engine
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Policy, StepPlan

CAUSES = ("preempted", "seq_cap", "token_budget", "refused", "head_memory", "head_fits")


class WaitWatch(Tally):
    """``Tally`` that also keeps the calls waiting in the policy's queue (arrived or requeued,
    not yet popped), which no policy lists publicly."""

    # (the inner policy's, bound by ``Tally``)
    peek: Callable[[], Call | None]
    pop: Callable[[], Call]
    waiting: Callable[[], int]

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner)
        self.waiting_calls: dict[int, Call] = {}
        pop = inner.pop

        def popped() -> Call:
            call = pop()
            self.waiting_calls.pop(call.call_id, None)
            return call

        self.pop = popped

    def arrive(self, call: Call, now: float) -> bool:
        self.waiting_calls[call.call_id] = call
        return super().arrive(call, now)

    def requeue(self, call: Call, now: float) -> None:
        self.waiting_calls[call.call_id] = call
        super().requeue(call, now)


def prompt_blocks(engine: Engine, call: Call) -> int:
    """Blocks the call's whole prompt takes (what admission asks of memory)."""
    return -(-call.prompt // engine.config.block_tokens)


def budget_left(engine: Engine) -> int:
    """The token budget the running calls leave for admissions (as ``Engine._admit``)."""
    left = engine.config.token_budget
    for c in engine.running:
        rest = c.prompt - c.computed
        left -= rest if rest > 1 else 1
    return left


def wait_cause(engine: Engine, watch: WaitWatch, preemptions_before: int) -> str:
    """Why no waiting call was admitted (``CAUSES``) at this point of the run."""
    if engine.metrics.preemptions != preemptions_before:
        return "preempted"
    if len(engine.running) >= engine.config.max_seqs:
        return "seq_cap"
    if budget_left(engine) <= 0:
        return "token_budget"
    head = watch.peek()
    if head is None:
        return "refused"
    if prompt_blocks(engine, head) > engine.kv.available_for(head.program_id):
        return "head_memory"
    return "head_fits"


def another_fits(engine: Engine, watch: WaitWatch, head: Call | None) -> bool:
    """Whether a waiting call other than ``head`` would fit in memory now."""
    kv = engine.kv
    return any(
        c is not head and prompt_blocks(engine, c) <= kv.available_for(c.program_id)
        for c in watch.waiting_calls.values()
    )


class WaitProbe:
    """A ``throughput_tail.Probe``: seconds (and steps) by cause of waiting, and the blocks
    free cached chains and reloading calls held while the engine computed."""

    def __init__(self, watch: WaitWatch) -> None:
        self.watch = watch
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.steps: defaultdict[str, int] = defaultdict(int)
        self.head_short_block_s = 0.0  # blocks the head lacked, over head_memory busy seconds
        self.head_block_s = 0.0  # the head's prompt blocks, over the same seconds
        self.reloading_block_s = 0.0  # blocks of running calls still reloading, busy seconds
        self.cached_block_s = 0.0
        self.unused_block_s: defaultdict[str, float] = defaultdict(float)  # by cause, busy

    def __call__(
        self, engine: Engine, plan: StepPlan | None, steps: int, dt: float, preempt: int
    ) -> None:
        phase = "busy" if plan is not None else "idle"
        now, kv = engine.now, engine.kv
        if plan is not None:
            self.cached_block_s += kv.cached * dt
            self.reloading_block_s += dt * sum(c.blocks for c in engine.running if c.ready_s > now)
        if not self.watch.waiting():
            cause = "none_waiting"
        else:
            cause = wait_cause(engine, self.watch, preempt)
            if cause == "head_memory":
                head = cast(Call, self.watch.peek())
                if another_fits(engine, self.watch, head):
                    self._count(f"{phase}:head_memory:skip_fits", steps, dt)
                if plan is not None:
                    need = prompt_blocks(engine, head)
                    self.head_block_s += need * dt
                    self.head_short_block_s += (need - kv.available_for(head.program_id)) * dt
        self._count(f"{phase}:{cause}", steps, dt)
        if plan is not None:  # (free and free cached blocks: what an admission may take)
            self.unused_block_s[cause] += (kv.capacity - kv.used) * dt
        if kv.cached:
            self._count(f"{phase}:{cause}:cached", steps, dt)

    def _count(self, key: str, steps: int, dt: float) -> None:
        self.seconds[key] += dt
        self.steps[key] += steps

    def summary(self) -> dict[str, Any]:
        """Seconds and steps by cause, and the mean blocks over the computed seconds."""
        busy_s = sum(v for k, v in self.seconds.items() if k.count(":") == 1 and "busy" in k)
        span = busy_s or 1.0
        memory_s = self.seconds.get("busy:head_memory", 0.0) or 1.0
        return {
            "seconds": dict(sorted(self.seconds.items())),
            "steps": dict(sorted(self.steps.items())),
            "cached_blocks": self.cached_block_s / span,
            "reloading_blocks": self.reloading_block_s / span,
            "unused_blocks": {
                k: v / (self.seconds[f"busy:{k}"] or 1.0) for k, v in self.unused_block_s.items()
            },
            "head_memory_head_blocks": self.head_block_s / memory_s,
            "head_memory_short_blocks": self.head_short_block_s / memory_s,
        }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="llama-3.1-8b@h100-80g=0.01")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--cpu-gb", type=float, default=256.0, help="CPU tier per GPU, GB")
    ap.add_argument("--policies", default="mori,ttlpolicy-offload")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(None, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    rows = []
    for setup, rate, seed, hw, progs in point_runs(programs, args.points, args.seeds, args.cpu_gb):
        for name in args.policies.split(","):
            watch = WaitWatch(make_run_policy(name))
            probe = WaitProbe(watch)
            m, busy = run_logged(hw, cast(Policy, watch), progs, rate, seed, probe=probe)
            row = {"setup": setup, "rate": rate, "seed": seed, "policy": name}
            row.update(throughput_tok_s=m.output_tokens / m.makespan_s, busy_s=busy.busy_s,
                       mean_decode_batch=busy.mean_decode_batch)  # fmt: skip
            row.update(probe.summary())
            rows.append(row)
            print(json.dumps(row, indent=1), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


__all__ = ["CAUSES", "WaitProbe", "WaitWatch", "another_fits", "budget_left", "wait_cause"]

if __name__ == "__main__":
    sys.exit(main())
