"""Superseded contexts (issue 45 part 3): pinned block-seconds never hit, and hit rates, on the
sessions that compact or rewrite their context, with each ``PIN_CLAIMS`` rule.

    python bench/supersede.py [--point llama-3.1-8b@h100-80g=0.004] [--seeds 0,1] \\
        [--fold 3 --folds 4] [--claims supersede,take,refuse] [--ids explicit,inferred] \\
        [--variant classic] [--config /scale_cost_by_memory=false]

All programs run together (as bench/bounds.py); the figures are over the reported fold's
programs: *rewriting* ones have a call whose prompt keeps < 90 % of the previous prompt's
full blocks (``ttlpolicy.pin_claims.continues_context`` false), *compacting* ones < 50 %.
"Pinned never hit" is ``Metrics.in_vain_by_program`` (``sim.pin_ledger``) summed over them;
hit rates are prompt tokens served from cache over prompt tokens, of those programs (first
admissions: a preempted call's readmission not counted, as ``Metrics.hit_rate``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import agent_sweep  # bench/, beside this script
import sim_sweep
from bounds import make_variant, split_folds
from trace_paths import traces_dir
from ttlpolicy.pin_claims import continues_context
from ttlpolicy.sim import roofline, simulate
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.hardware import MODELS
from ttlpolicy.sim.interface import Policy
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin
from ttlpolicy.sim.workload import Program

WORDS = {"supersede": "", "take": "take-claims", "refuse": "refuse-claims"}
IDS = {"explicit": "", "inferred": "inferred-ids"}


def rewrites(prog: Program, block_tokens: int, share: float | None = None) -> bool:
    """Whether a call of ``prog`` keeps too little of its previous prompt: not a continuation
    (``share`` None), or fewer than ``share`` of its full blocks."""
    for prev, turn in zip(prog.turns, prog.turns[1:], strict=False):
        blocks = prev.input_tokens // block_tokens
        if share is None and not continues_context(blocks, min(turn.reusable_blocks, blocks)):
            return True
        if share is not None and turn.reusable_blocks < share * blocks:
            return True
    return False


class Hits:
    """Wraps a policy: each program's prompt tokens and hit tokens at first admissions."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.tokens: dict[str, list[int]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def admitted(self, call: Call, now: float, cache_dropped: bool) -> None:
        if not call.preempted:
            t = self.tokens.setdefault(call.program_id, [0, 0])
            t[0] += call.prompt
            t[1] += call.computed
        self.inner.admitted(call, now, cache_dropped)


def measure(args: argparse.Namespace, programs: list[Program], groups: dict) -> list[dict]:
    setup, _, rate = args.point.partition("=")
    model, gpu = setup.split("@")
    hw = roofline(model, gpu, cpu_tier_bytes=256e9 * MODELS[model].tp)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for ids in args.ids.split(","):
            for claims in args.claims.split(","):
                words = "+".join(w for w in (args.variant, WORDS[claims], IDS[ids]) if w)
                name = "ttlpolicy" + (":" + words if words else "") + args.config
                policy = make_variant(name)
                wrapped = Hits(policy)
                t0 = time.perf_counter()
                m = simulate(hw, wrapped, programs, rate_per_s=float(rate), seed=seed)  # type: ignore[arg-type]
                row = {
                    "seed": seed,
                    "ids": ids,
                    "claims": claims,
                    "wall_s": time.perf_counter() - t0,
                }
                assert isinstance(policy, TTLPolicyPlugin)
                row["superseded"] = policy.contexts_superseded
                row["refused"] = policy.pin_claims_refused
                for part, block_s in policy.not_continued_block_s.items():
                    row[f"not_continued_block_s_{part}"] = block_s
                row["hit_rate_all"] = m.summary()["hit_rate"]
                row["pinned_block_s_all"] = m.pinned_block_s
                row["in_vain_block_s_all"] = m.pinned_in_vain_block_s
                for name, members in groups.items():
                    tok = [wrapped.tokens.get(p, [0, 0]) for p in members]
                    inp, hit = sum(t[0] for t in tok), sum(t[1] for t in tok)
                    row[f"hit_rate_{name}"] = hit / inp if inp else 0.0
                    row[f"in_vain_block_s_{name}"] = sum(
                        m.in_vain_by_program.get(p, 0.0) for p in members
                    )
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=None)
    ap.add_argument("--point", default="llama-3.1-8b@h100-80g=0.004")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--fold", type=int, default=3)
    ap.add_argument("--claims", default="take,refuse,supersede")
    ap.add_argument("--ids", default="explicit,inferred")
    ap.add_argument("--variant", default="", help="more variant words, e.g. 'classic'")
    ap.add_argument("--config", default="", help="PolicyConfig fields: '/FIELD=VALUE/...'")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    programs = sim_sweep.load_sessions(args.trace, agent_sweep.OPTIONS)
    if programs is None:
        return 2
    folds = split_folds(programs, args.folds, Path(args.trace or traces_dir() / "claude-code"))
    fold, b = folds[args.fold], 64  # (64: the simulator's block, the traces')
    groups = {
        "fold": [p.program_id for p in fold],
        "rewrite": [p.program_id for p in fold if rewrites(p, b)],
        "compact": [p.program_id for p in fold if rewrites(p, b, 0.5)],
    }
    print({k: len(v) for k, v in groups.items()}, file=sys.stderr)
    rows = measure(args, programs, groups)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
