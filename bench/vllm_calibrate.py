"""Calibrate ``ttlpolicy.sim`` on a running vLLM engine: measure step times, fit the step
model, write a hardware profile (``ttlpolicy compare --hardware profile.json``).

    python bench/vllm_calibrate.py --out profile.json              # CPU, small Llama
    python bench/vllm_calibrate.py --shape llama-3.1-8b --device cuda --out profile.json

The recipe (``measure_steps``): isolated prefills at growing sizes, alone in the engine (the
attention term makes their time quadratic in the size), prefills after a cached prefix (the
context term), and decode steps at growing batch and context.  Every measured step becomes a
row (tokens, attn, kv, seqs, seconds) with the simulator's own step shapes
(``ttlpolicy.sim.profile.prefill_shape`` / ``decode_shape``), and ``fit_hardware`` fits them.
Each shape is measured ``repeats`` times and its median kept: the machines here are shared.

The model is a Llama of a named shape (``SHAPES``) with random weights
(``load_format="dummy"``): only a config.json and a locally trained tokenizer are written, no
weights are downloaded.
"""

from __future__ import annotations

# vLLM's environment (in-process engine core, offline, temp cache) before vllm is imported.
from vllm_engine import save_tokenizer  # isort: skip

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttlpolicy.sim.hardware import GPUSpec, Hardware, ModelSpec
from ttlpolicy.sim.profile import (
    StepShape,
    decode_shape,
    fit_hardware,
    prefill_shape,
    save_profile,
    step_shape,
)

#: A measured step: its shape (tokens, attn, kv, seqs) and its seconds.
Row = tuple[float, float, float, float, float]


@dataclass(frozen=True)
class Shape:
    """A Llama's size; ``dtype`` as vLLM spells it."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype: str

    @property
    def params(self) -> float:
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return float(self.layers * (attn + mlp) + 2 * self.vocab * self.hidden)

    @property
    def dtype_bytes(self) -> int:
        return 4 if self.dtype == "float32" else 2


SHAPES = {
    # ~20 M parameters, ~80 MB in float32: a cache miss of a few hundred tokens costs tens of
    # ms on 2 idle CPU cores (CPU attention wants head_dim 32/64/80).  Larger shapes did not
    # calibrate within 8 minutes on the shared, loaded machine (load average 15 on 2 cores).
    "cpu-small": Shape(8, 512, 8, 4, 64, 1024, 512, "float32"),
    # Llama-3.1-8B's model card.
    "llama-3.1-8b": Shape(32, 4096, 32, 8, 128, 14336, 128256, "bfloat16"),
}


def write_model_dir(path: Path, shape: Shape) -> Path:
    """config.json of a Llama of ``shape`` and a local tokenizer; no weights (vLLM's
    ``load_format="dummy"`` draws them)."""
    from transformers import LlamaConfig

    fast = save_tokenizer(path)
    LlamaConfig(
        vocab_size=max(shape.vocab, len(fast)),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=131072,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype=shape.dtype,
    ).save_pretrained(path)
    return path


@dataclass(frozen=True)
class EngineSettings:
    """What the engine and the simulator must agree on."""

    blocks: int = 40
    block_size: int = 32
    token_budget: int = 512  # vLLM max_num_batched_tokens
    max_seqs: int = 16
    max_model_len: int = 512


def make_llm(model_dir: Path, shape: Shape, settings: EngineSettings, scheduler_cls: str) -> Any:
    from vllm import LLM

    return LLM(
        model=str(model_dir),
        tokenizer=str(model_dir),
        load_format="dummy",
        dtype=shape.dtype,
        block_size=settings.block_size,
        max_model_len=settings.max_model_len,
        max_num_batched_tokens=settings.token_budget,
        max_num_seqs=settings.max_seqs,
        enforce_eager=True,
        enable_prefix_caching=True,
        num_gpu_blocks_override=settings.blocks,
        scheduler_cls=scheduler_cls,
        seed=0,
    )


def usable_blocks(llm: Any) -> int:
    """KV blocks a request can use (vLLM keeps one null block out of the pool)."""
    pool = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool
    return int(pool.get_num_free_blocks())


def _log(msg: str) -> None:
    print(f"[calibrate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _timed_step(engine: Any) -> tuple[float, list[Any]]:
    s = time.perf_counter()
    outs = engine.step()
    return time.perf_counter() - s, outs


def scheduled_chunks(scheduler: Any, out: Any) -> list[tuple[int, int]]:
    """(new tokens, tokens computed before) of each request in the step ``out`` that
    ``scheduler.schedule()`` just returned (a decode is a chunk of one)."""
    return [
        (n, scheduler.requests[rid].num_computed_tokens - n)  # schedule() advanced it
        for rid, n in out.num_scheduled_tokens.items()
    ]


def scheduled_shape(scheduler: Any, out: Any) -> StepShape:
    """(tokens, attn, kv, seqs) of the step ``out`` that ``scheduler.schedule()`` just
    returned, as the simulator counts it (``profile.step_shape`` of its chunks)."""
    return step_shape(scheduled_chunks(scheduler, out))


class StepRecorder:
    """The steps an engine runs while it serves, as calibration rows (tokens, attn, kv,
    seqs, seconds): each step's shape from its ``schedule()`` output, its time the wall time
    of ``engine.step()`` around it (host work included, as a served request waits for it).
    ``model_s`` holds, per row, the part spent in the model executor, ``cpu_s`` the CPU time
    the process spent in the step (all its threads: with one engine thread, a measure of the
    step's work that other jobs on a shared machine barely move, where wall time doubles),
    and ``chunks`` the step's (new tokens, tokens before) per request, from which other
    shapes can be computed offline.

    Fitting the rows of a replay gives a profile measured under the replay's own conditions
    — the same load on a shared machine, the same mix of step shapes — where the probe
    (``measure_steps``) runs minutes apart on isolated shapes."""

    def __init__(self, llm: Any) -> None:
        core = llm.llm_engine.engine_core.engine_core
        self.rows: list[Row] = []
        self.model_s: list[float] = []
        self.cpu_s: list[float] = []
        self.chunks: list[list[tuple[int, int]]] = []
        self._chunks: list[tuple[int, int]] | None = None
        self._exec_s = 0.0
        sched, executor = core.scheduler, core.model_executor
        schedule, execute, sample = (
            sched.schedule,
            executor.execute_model,
            executor.sample_tokens,
        )

        def recorded_schedule(*a: Any, **k: Any) -> Any:
            out = schedule(*a, **k)
            if out.total_num_scheduled_tokens > 0:
                self._chunks = scheduled_chunks(sched, out)
            return out

        def timed(f: Any) -> Any:
            def call(*a: Any, **k: Any) -> Any:
                s = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    self._exec_s += time.perf_counter() - s

            return call

        sched.schedule = recorded_schedule
        executor.execute_model = timed(execute)
        executor.sample_tokens = timed(sample)

    def step(self, engine: Any) -> list[Any]:
        """``engine.step()``, recorded when it ran the model."""
        self._chunks, self._exec_s = None, 0.0
        s, cpu = time.perf_counter(), time.process_time()
        outs = engine.step()
        dt, cpu = time.perf_counter() - s, time.process_time() - cpu
        if self._chunks is not None:
            self.rows.append((*step_shape(self._chunks), dt))
            self.model_s.append(self._exec_s)
            self.cpu_s.append(cpu)
            self.chunks.append(self._chunks)
        return outs


def measure_steps(
    llm: Any,
    *,
    prefill_sizes: list[int],
    cached_prefills: list[tuple[int, int]],
    decode_points: list[tuple[int, int]],
    multi_prefills: Sequence[tuple[int, int]] = (),
    decode_steps: int = 6,
    repeats: int = 3,
    vocab: int = 500,
) -> list[Row]:
    """Rows (tokens, attn, kv, seqs, seconds) measured on ``llm``'s engine, which must be
    idle.

    ``prefill_sizes``: lone prompts prefilled in one step (each ≤ the token budget).
    ``cached_prefills``: (cached, new) — a prompt of ``cached`` tokens, then one extending it
    by ``new``: the second step's chunk attends to the cached context.
    ``multi_prefills``: (prompts, tokens) — that many prompts of that many tokens submitted
    together and prefilled in one step: the same tokens as a lone prompt of their sum, more
    sequences (what tells the per-sequence term from the per-token one).
    ``decode_points``: (batch, context) — that many requests of that context decoding
    together, ``decode_steps`` steps each.
    """
    from vllm import SamplingParams

    engine = llm.llm_engine
    rng = random.Random(0)
    counter = 0

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    def submit(prompt: list[int], max_tokens: int) -> str:
        nonlocal counter
        counter += 1
        rid = f"cal{counter:06d}"
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(rid, {"prompt_token_ids": prompt}, params)
        return rid

    def drain() -> None:
        while engine.has_unfinished_requests():
            engine.step()

    # Warm up: the first steps of each size pay one-off costs (allocations, kernel choice).
    for n in (max(prefill_sizes), min(prefill_sizes)):
        submit(tokens(n), 4)
    drain()
    samples: dict[StepShape, list[float]] = {}
    for r in range(repeats):
        _log(f"calibration round {r + 1}/{repeats}")
        for n in prefill_sizes:
            llm.reset_prefix_cache()
            submit(tokens(n), 1)
            dt, _ = _timed_step(engine)
            samples.setdefault(prefill_shape(n), []).append(dt)
            drain()
        for cached, new in cached_prefills:
            llm.reset_prefix_cache()
            prompt = tokens(cached)
            submit(prompt, 1)
            drain()
            submit(prompt + tokens(new), 1)
            dt, outs = _timed_step(engine)
            hit = outs[0].num_cached_tokens if outs else 0
            total = cached + new
            samples.setdefault(prefill_shape(total - hit, hit), []).append(dt)
            drain()
        for k, m in multi_prefills:
            llm.reset_prefix_cache()
            for _ in range(k):
                submit(tokens(m), 1)
            dt, outs = _timed_step(engine)
            if len(outs) == k:  # all prefilled in that one step (each finished: 1 token)
                samples.setdefault(step_shape([(m, 0)] * k), []).append(dt)
            drain()
        for batch, ctx in decode_points:
            llm.reset_prefix_cache()
            rids = {submit(tokens(ctx), decode_steps + 2) for _ in range(batch)}
            generated = dict.fromkeys(rids, 0)
            while min(generated.values()) == 0:  # prefill every request first
                for out in engine.step():
                    generated[out.request_id] = len(out.outputs[0].token_ids)
            for _ in range(decode_steps):
                # each request holds its prompt + what it generated (the KV it reads)
                shape = decode_shape([ctx + generated[r] for r in sorted(rids)])
                dt, outs = _timed_step(engine)
                if len(outs) != batch:
                    break  # a request finished or was preempted: not a clean batch
                samples.setdefault(shape, []).append(dt)
                for out in outs:
                    generated[out.request_id] = len(out.outputs[0].token_ids)
            drain()
        _log(f"{len(samples)} shapes measured")
    llm.reset_prefix_cache()
    return [(*shape, statistics.median(ts)) for shape, ts in samples.items()]


def probe(llm: Any, settings: EngineSettings, *, repeats: int = 2) -> list[Row]:
    """The calibration probe's rows on ``llm`` (idle, built by ``make_llm``): ``measure_steps``
    over shapes sized to ``settings``."""
    budget = settings.token_budget
    limit = min(budget, settings.max_model_len - 8)
    sizes = sorted({max(16, limit * k // 4) for k in range(1, 5)})
    # a chunk after a cached prefix, and short chunks after a long one (a returning program's
    # new tool output: the shape the TTL scheduler's replay runs most)
    cached = [(limit // 2, limit // 4), (3 * limit // 4, 16), (3 * limit // 4, limit // 8)]
    # half the largest prefill, split over 2, 4, 8 prompts in one step
    multi = [(k, limit // (2 * k)) for k in (2, 4, 8) if k <= settings.max_seqs]
    batches = sorted({b for b in (1, 4, 16, 64) if b <= settings.max_seqs})
    room = (settings.blocks - 2) * settings.block_size
    points = []
    for b in batches:
        longest = min(limit, room // b - settings.block_size)  # the batch fits in the cache
        if longest >= 16:
            points += sorted({(b, longest // 4), (b, longest)})
    return measure_steps(
        llm,
        prefill_sizes=sizes,
        cached_prefills=cached,
        decode_points=points,
        multi_prefills=multi,
        repeats=repeats,
    )


def calibrate_llm(
    llm: Any, shape: Shape, settings: EngineSettings, device_name: str, *, repeats: int = 2
) -> tuple[Hardware, dict[str, Any]]:
    """Measure ``llm`` (idle, built by ``make_llm``) and fit; the ``Hardware`` and the
    calibration record (rows, fit error) that goes into the profile."""
    t0 = time.perf_counter()
    rows = probe(llm, settings, repeats=repeats)
    seconds = time.perf_counter() - t0
    hw, record = fit_rows(rows, shape, settings, device_name, usable_blocks(llm))
    record["measure_s"] = seconds
    return hw, record


def fit_rows(
    rows: list[Row],
    shape: Shape,
    settings: EngineSettings,
    device_name: str,
    kv_blocks: int,
    *,
    relative: bool = True,
) -> tuple[Hardware, dict[str, Any]]:
    """The ``Hardware`` fitted to measured step rows (tokens, attn, kv, seqs, seconds) of a
    model of ``shape`` with ``kv_blocks`` usable KV blocks, and its calibration record.
    ``relative``: minimise relative error (medians of repeated shapes) or error in seconds
    (single noisy steps, as a replay records them: ``hardware.fit_line``)."""
    model = ModelSpec(
        f"llama-{shape.layers}x{shape.hidden}",
        shape.params,
        shape.layers,
        shape.hidden,
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        dtype_bytes=shape.dtype_bytes,
    )
    # A calibrated profile needs no peak FLOP/s or bandwidth; the host link is only used by
    # offloading policies (a guess: 10 GB/s).
    device = GPUSpec(device_name, 0.0, 0.0, 0.0, 1e10)
    hw = fit_hardware(
        model,
        device,
        rows,
        kv_capacity_blocks=kv_blocks,
        block_tokens=settings.block_size,
        relative=relative,
    )
    errors = [abs(hw.steps.step_s(*r[:4]) - r[4]) / r[4] for r in rows if r[4] > 0]
    record = {
        "engine": "vllm " + _vllm_version(),
        "device": device_name,
        "settings": settings.__dict__,
        "shape": shape.__dict__,
        "rows": [list(r) for r in rows],
        "fit_mean_rel_error": statistics.fmean(errors),
        "fit_max_rel_error": max(errors),
    }
    return hw, record


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return str(torch.cuda.get_device_name(0))
    return "cpu"


def add_engine_arguments(ap: argparse.ArgumentParser) -> None:
    """The engine options shared with ``bench/fidelity.py`` (the two must agree)."""
    d = EngineSettings()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="cpu-small")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--blocks", type=int, default=d.blocks, help="KV blocks (engine override)")
    ap.add_argument("--block-size", type=int, default=d.block_size)
    ap.add_argument("--token-budget", type=int, default=d.token_budget)
    ap.add_argument("--max-seqs", type=int, default=d.max_seqs)
    ap.add_argument("--max-model-len", type=int, default=d.max_model_len)


def settings_from(args: argparse.Namespace) -> EngineSettings:
    for name in ("blocks", "block_size", "token_budget", "max_seqs", "max_model_len"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return EngineSettings(
        args.blocks, args.block_size, args.token_budget, args.max_seqs, args.max_model_len
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(ap)
    ap.add_argument("--repeats", type=int, default=2, help="measurements per shape (median)")
    ap.add_argument("--out", required=True, help="profile JSON to write")
    args = ap.parse_args(argv)
    import tempfile

    settings = settings_from(args)
    shape = SHAPES[args.shape]
    with tempfile.TemporaryDirectory() as d:
        llm = make_llm(
            write_model_dir(Path(d), shape),
            shape,
            settings,
            "vllm.v1.core.sched.scheduler.Scheduler",
        )
        hw, record = calibrate_llm(llm, shape, settings, device_name(args.device),
                                   repeats=args.repeats)  # fmt: skip
        llm.llm_engine.engine_core.shutdown()
    save_profile(args.out, hw, record)
    line = hw.steps.compute
    print(
        json.dumps(
            {
                "out": args.out,
                "rows": len(record["rows"]),
                "c0_ms": 1e3 * line.c0,
                "c_tok_us": 1e6 * line.c_tok,
                "c_attn_ns": 1e9 * line.c_attn,
                "c_kv_ns": 1e9 * line.c_kv,
                "fit_mean_rel_error": record["fit_mean_rel_error"],
                "measure_s": record["measure_s"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
