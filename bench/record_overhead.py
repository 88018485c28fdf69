"""What recording traffic (``TTLPOLICY_RECORD``) costs the vLLM adapter.

1. On the tiny real vLLM CPU engine (``vllm_engine``): ``TTLScheduler`` with the recorder on
   serves programs of several turns; the recording's time on the scheduler's thread
   (``CallLog.busy_s``: noting arrivals, cached tokens and finished calls, buffering them) is
   compared with the adapter's time (``adapter_s``, the recording's part included) over the
   same steps; the writer thread's time (digests, JSON, writes) is given beside it.
2. The recorder's batch work alone on long prompts (the tiny engine's are <= 512 tokens):
   microseconds per call at 8k and 32k tokens in 16-token engine blocks (written in the
   caller's thread here, to time it), and that cost spread over the decode steps a call takes
   (``--output-tokens``).

Run with the vLLM venv:
  PYTHONPATH=python:adapters/vllm/src:bench <vllm venv>/bin/python bench/record_overhead.py
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import vllm_engine  # noqa: F401  (sets vLLM's environment before vllm is imported)


def engine_run(programs: int, turns: int, output_tokens: int) -> dict[str, float]:
    import os

    from vllm_engine import build_tiny_model, make_engine

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TTLPOLICY_RECORD"] = str(Path(tmp) / "rec")
        try:
            engine = make_engine(
                build_tiny_model(Path(tmp) / "model"), "ttlpolicy_vllm.TTLScheduler", 201
            )
        finally:
            del os.environ["TTLPOLICY_RECORD"]
        rng = random.Random(0)
        contexts = {f"p{i}": [rng.randrange(3, 300) for _ in range(96)] for i in range(programs)}
        sched = engine.scheduler
        for turn in range(turns):
            rids = {
                pid: engine.submit(
                    ctx, output_tokens, program_id=pid, tool="bash", last_turn=turn == turns - 1
                )
                for pid, ctx in contexts.items()
            }
            engine.run()
            for pid, rid in rids.items():
                out = engine.outputs[rid]
                contexts[pid] = (contexts[pid] + list(out.outputs[0].token_ids) + [7] * 32)[
                    -(512 - output_tokens - 8) :
                ]
        sched.call_log.close()
        stats = sched.ttl_stats()
        recorded = sched.call_log.busy_s
        writer = sched.call_log.recorder.writer_s
        engine.llm.llm_engine.engine_core.shutdown()
    steps = stats["schedule_calls"]
    return {
        "steps": steps,
        "calls": programs * turns,
        "adapter_us_per_step": stats["adapter_s"] / steps * 1e6,
        "record_us_per_step": recorded / steps * 1e6,
        "record_share_of_adapter": recorded / stats["adapter_s"],
        "writer_us_per_step": writer / steps * 1e6,
    }


def recorder_alone(prompt_tokens: int, calls: int, agentic: bool) -> float:
    """Microseconds per recorded call of ``prompt_tokens`` (16-token engine blocks).
    ``agentic``: 50 programs whose each call is its previous call's prompt with its last
    1024 tokens new (the shipped sessions' calls begin with their previous one's); else every
    call is new blocks of a new program (no digest reused)."""
    from ttlpolicy.serving import Recorder, RecordSettings

    blocks, fresh = prompt_tokens // 16, 1024 // 16
    base = [random.randbytes(32) for _ in range(blocks)]
    tails = [[random.randbytes(32) for _ in range(fresh)] for _ in range(8)]
    prompts: list[list[Any]] = [base[: blocks - fresh] + t for t in tails]
    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(
            RecordSettings(Path(tmp), 1 << 28, 4), engine_block_tokens=16, background=False
        )
        t0 = time.perf_counter()
        for i in range(calls):
            program = f"p{i % 50}" if agentic else f"p{i}"
            hashes = prompts[i % len(prompts)] if agentic else [random.randbytes(32), *base[1:]]
            rec.call(
                program_id=program,
                tenant="t",
                arrival_s=float(i),
                finish_s=i + 0.5,
                prompt_tokens=prompt_tokens,
                output_tokens=200,
                cached_tokens=prompt_tokens // 2,
                block_hashes=hashes,
                tool="bash",
            )
        rec.close()
        return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--output-tokens", type=int, default=64)
    args = ap.parse_args()
    r = engine_run(args.programs, args.turns, args.output_tokens)
    print(
        f"engine: {r['calls']} calls, {r['steps']:.0f} steps; adapter "
        f"{r['adapter_us_per_step']:.1f} µs/step, recording {r['record_us_per_step']:.2f} "
        f"µs/step = {100 * r['record_share_of_adapter']:.2f} % of the adapter's time; "
        f"writer thread {r['writer_us_per_step']:.2f} µs/step"
    )
    for n in (8192, 32768):
        for agentic in (True, False):
            us = recorder_alone(n, 2000, agentic)
            kind = "last 1024 tokens new" if agentic else "all blocks new"
            print(
                f"recorder alone, {n}-token prompt, {kind}: {us:.1f} µs/call = "
                f"{us / args.output_tokens:.2f} µs per step of a {args.output_tokens}-token call"
            )


if __name__ == "__main__":
    main()
