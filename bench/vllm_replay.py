"""Replay agentic sessions on a real vLLM engine (CPU), stock scheduler vs TTLScheduler.

N programs run concurrently, each replaying one of the shipped sample sessions
(``ttlpolicy.traces.sample_dir()``, claude-code traces): every request's context and output
are scaled to the tiny model (the largest context of a session becomes ``--max-context``
tokens), each turn's prompt is the previous context plus new "tool result" tokens, and the
recorded think/tool time before a request is waited, scaled by ``--time-scale`` (capped at
``--max-gap-s``).  The KV cache is kept small (``--blocks``) so programs compete for it.

Reported per scheduler: mean and p90 program completion time (first arrival to last finish),
prefix-cache hit rate over all prompt tokens, engine step time, and for TTLScheduler its own
time per ``schedule()`` call and as a share of the step time.

Run (uses the vLLM test venv):
    source scripts/vllm-env.sh && "$VLLM_VENV/bin/python" bench/vllm_replay.py
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlpolicy.traces import read_agentic, sample_dir

# The adapter tests' engine setup: importing it sets vLLM's environment (in-process engine
# core, offline, temp cache) before vllm is imported, and builds the same tiny model.
from vllm_engine import BLOCK, build_tiny_model

STOCK = "vllm.v1.core.sched.scheduler.Scheduler"
TTL = "ttlpolicy_vllm.TTLScheduler"


@dataclass
class Turn:
    new_tokens: int  # tokens appended to the context before this request
    output_tokens: int
    gap_s: float  # wait after the previous turn finished


@dataclass
class Program:
    pid: str
    turns: list[Turn]
    rng: random.Random
    context: list[int] = field(default_factory=list)
    next_turn: int = 0
    due_s: float = 0.0
    first_s: float | None = None
    done_s: float | None = None
    in_flight: str | None = None


def load_sessions(n: int, turns: int, max_context: int, max_out: int, time_scale: float,
                  max_gap_s: float) -> list[list[Turn]]:  # fmt: skip
    sessions = []
    for path in sorted(sample_dir().glob("trace_*.json.gz")):
        records = [r for r in read_agentic(path) if "/" not in r.session_id][:turns]
        if len(records) < turns:
            continue
        scale = max_context / max(r.input_tokens + r.output_tokens for r in records)
        out: list[Turn] = []
        ctx = 0
        for r in records:
            target = max(int(r.input_tokens * scale), ctx + 8)
            o = max(1, min(max_out, int(r.output_tokens * scale)))
            gap = min(max_gap_s, r.think_time_s * time_scale) if out else 0.0
            out.append(Turn(target - ctx, o, gap))
            ctx = target + o
        sessions.append(out)
        if len(sessions) == n:
            break
    return sessions


def issue_due_turns(
    engine: Any, programs: list[Program], now: float, vocab: int
) -> list[tuple[str, Program]]:
    """Send the next turn of every program whose tool call is over (its context grows by the
    turn's new tokens); the (request id, program) pairs sent."""
    from vllm import SamplingParams

    sent = []
    for p in programs:
        if p.done_s is None and p.in_flight is None and p.due_s <= now:
            turn = p.turns[p.next_turn]
            p.context += [p.rng.randrange(3, vocab) for _ in range(turn.new_tokens)]
            last = p.next_turn == len(p.turns) - 1
            rid = f"{p.pid}-{p.next_turn:04d}"
            params = SamplingParams(
                max_tokens=turn.output_tokens, temperature=0.0, ignore_eos=True,
                extra_args={"program_id": p.pid, "tool": "bash", "last_turn": last},
            )  # fmt: skip
            engine.add_request(rid, {"prompt_token_ids": list(p.context)}, params)
            p.in_flight = rid
            if p.first_s is None:
                p.first_s = now
            sent.append((rid, p))
    return sent


def finish_turn(p: Program, output_ids: list[int], now: float) -> None:
    """A program's turn finished at ``now`` with ``output_ids``: its context grows by them and
    its next turn is due after its tool gap (or the program is done)."""
    p.context += output_ids
    p.in_flight = None
    p.next_turn += 1
    if p.next_turn == len(p.turns):
        p.done_s = now
    else:
        p.due_s = now + p.turns[p.next_turn].gap_s


def replay(model: Path, scheduler_cls: str, sessions: list[list[Turn]], blocks: int,
           vocab_hint: int) -> dict[str, Any]:  # fmt: skip
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model), tokenizer=str(model), dtype="float32", block_size=BLOCK,
              max_model_len=512, max_num_batched_tokens=512, max_num_seqs=16,
              enforce_eager=True, enable_prefix_caching=True,
              num_gpu_blocks_override=blocks, scheduler_cls=scheduler_cls, seed=0)  # fmt: skip
    vocab = min(vocab_hint, len(llm.get_tokenizer()))
    engine = llm.llm_engine
    # Warm up (first steps pay one-off costs), then start from an empty prefix cache.
    warm = random.Random(-1)
    llm.generate([{"prompt_token_ids": [warm.randrange(3, vocab) for _ in range(n)]}
                  for n in (16, 200, 400)], SamplingParams(max_tokens=4, ignore_eos=True),
                 use_tqdm=False)  # fmt: skip
    llm.reset_prefix_cache()
    sched = engine.engine_core.engine_core.scheduler
    if hasattr(sched, "ttl_metrics"):
        sched.ttl_metrics = sched.ttl_metrics.fresh()  # count the replay only
    programs = [Program(f"prog{i}", s, random.Random(i)) for i, s in enumerate(sessions)]
    by_rid: dict[str, Program] = {}
    prompt_tokens = cached_tokens = 0
    step_s: list[float] = []
    t0 = time.monotonic()
    while any(p.done_s is None for p in programs):
        now = time.monotonic() - t0
        for rid, p in issue_due_turns(engine, programs, now, vocab):
            by_rid[rid] = p
        if not engine.has_unfinished_requests():
            time.sleep(0.005)  # every program is in a tool call
            continue
        s = time.perf_counter()
        outs = engine.step()
        step_s.append(time.perf_counter() - s)
        now = time.monotonic() - t0
        for out in outs:
            if not out.finished:
                continue
            prog = by_rid.pop(out.request_id, None)
            if prog is None:
                continue
            prompt_tokens += len(out.prompt_token_ids or ())
            cached_tokens += out.num_cached_tokens or 0
            finish_turn(prog, list(out.outputs[0].token_ids), now)
    stats = sched.ttl_stats() if hasattr(sched, "ttl_stats") else {}
    pct = [p.done_s - p.first_s for p in programs]  # type: ignore[operator]
    result = {
        "scheduler": scheduler_cls.rsplit(".", 1)[1],
        "programs": len(programs),
        "requests": sum(len(p.turns) for p in programs),
        "pct_mean_s": statistics.fmean(pct),
        "pct_p90_s": sorted(pct)[int(0.9 * (len(pct) - 1))],
        "hit_rate": cached_tokens / prompt_tokens if prompt_tokens else 0.0,
        "steps": len(step_s),
        "step_ms_mean": 1e3 * statistics.fmean(step_s),
    }
    if stats:
        result["adapter_us_per_schedule"] = stats["adapter_us_per_schedule"]
        result["adapter_share_of_step"] = stats["adapter_s"] / sum(step_s)
        for k in ("pins", "expiries", "reclaims", "pinned_prefix_hits"):
            result[k] = stats[k]
    engine.engine_core.shutdown()
    del llm, engine
    gc.collect()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=6)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--blocks", type=int, default=40, help="KV blocks of 32 tokens")
    ap.add_argument("--max-context", type=int, default=400)
    ap.add_argument("--max-out", type=int, default=16)
    ap.add_argument("--time-scale", type=float, default=0.05)
    ap.add_argument("--max-gap-s", type=float, default=2.0)
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat, alternating which scheduler runs first (machine noise)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON line per scheduler")
    args = ap.parse_args()
    sessions = load_sessions(args.programs, args.turns, args.max_context, args.max_out,
                             args.time_scale, args.max_gap_s)  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        model = build_tiny_model(Path(d))
        results = []
        for rnd in range(args.rounds):
            order = (STOCK, TTL) if rnd % 2 == 0 else (TTL, STOCK)
            for cls in order:
                results.append(replay(model, cls, sessions, args.blocks, 250) | {"round": rnd})
    for r in results:
        if args.json:
            print(json.dumps(r))
            continue
        line = (f"round {r['round']} {r['scheduler']:>13}: {r['programs']} programs, "
                f"{r['requests']} requests, completion mean {r['pct_mean_s']:.2f} s "
                f"p90 {r['pct_p90_s']:.2f} s, "
                f"hit rate {100 * r['hit_rate']:.1f}%, "
                f"step {r['step_ms_mean']:.1f} ms")  # fmt: skip
        if "adapter_us_per_schedule" in r:
            line += (f", adapter {r['adapter_us_per_schedule']:.0f} us/schedule "
                     f"({100 * r['adapter_share_of_step']:.2f}% of step), pins {r['pins']}, "
                     f"expiries {r['expiries']}, reclaims {r['reclaims']}, "
                     f"pinned-prefix hits {r['pinned_prefix_hits']}")  # fmt: skip
        print(line)


if __name__ == "__main__":
    main()
