"""Does a CPU vLLM step pay a one-off cost for a new token count?  Lone prefills of repeated
and new sizes on the calibration engine (``bench/vllm_calibrate.py``), one line each.

    PYTHONPATH=bench "$TTLPOLICY_VLLM_VENV/bin/python" bench/investigations/fidelity_shape_probe.py
"""

from __future__ import annotations

from vllm_calibrate import (  # isort: skip
    SHAPES,
    EngineSettings,
    make_llm,
    write_model_dir,
)

import random
import tempfile
import time
from pathlib import Path

SIZES = (100, 100, 100, 101, 101, 137, 137, 100, 300, 300, 301)


def main() -> None:
    from vllm import SamplingParams

    shape = SHAPES["cpu-small"]
    with tempfile.TemporaryDirectory() as d:
        llm = make_llm(write_model_dir(Path(d), shape), shape, EngineSettings(),
                       "vllm.v1.core.sched.scheduler.Scheduler")  # fmt: skip
        engine = llm.llm_engine
        rng = random.Random(0)
        for k, n in enumerate(SIZES):
            llm.reset_prefix_cache()
            prompt = [rng.randrange(3, 500) for _ in range(n)]
            engine.add_request(f"r{k}", {"prompt_token_ids": prompt},
                               SamplingParams(max_tokens=1, ignore_eos=True))  # fmt: skip
            start = time.perf_counter()
            engine.step()
            seconds = time.perf_counter() - start
            while engine.has_unfinished_requests():
                engine.step()
            print(f"prefill {n}: {seconds * 1e3:.1f} ms", flush=True)
        engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
