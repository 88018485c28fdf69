"""Simulator fidelity in virtual time: vLLM's real scheduler logic vs ``ttlpolicy.sim``.

``bench/fidelity.py`` compares the simulator with a real CPU engine, whose step times on the
shared machine vary 3–4× for the same shape, so simulator error and machine noise cannot be
told apart there.  This harness removes the model: the same workload (``fidelity.py``'s
sessions, built by ``vllm_replay.load_sessions``) is replayed through vLLM's real v1
``Scheduler`` — its real ``KVCacheManager`` and ``BlockPool``, prefix caching on — and each
step's model output is fabricated (one sampled token per request that finished its prompt).
Time is virtual: each step lasts what the simulator's hardware model says a step of that
shape takes (``StepModel.step_s`` on ``profile.prefill_shape`` per scheduled request, the
shapes the simulator's engine uses), and tool gaps and arrivals run on the same clock.  What
is left between the two sides is logic: scheduling order, chunking, block accounting,
prefix-cache hits, preemption.

Both of vLLM's schedulers run (stock ``Scheduler`` and ``ttlpolicy_vllm.TTLScheduler``, whose
clock is the virtual one) and the simulator with policies ``vllm`` and ``ttlpolicy:adapter``
(``ttlpolicy`` pricing a lost prefix as the adapter does; ``--sim-policy`` to change it) on the
same hardware, KV blocks, block size, token budget and maximum sequences.  Per side: mean and
p90 TTFT, output throughput, prefix hit rate, mean program completion, preemptions, and the
simulator's error on each; per request, the prompt tokens served from cache on each side.

``--engine-like-sim`` switches vLLM behaviours to the simulator's, one at a time, to measure
what each difference is worth (see ``KNOBS``; ``d``, vLLM allocating a prompt whole, is gone:
the simulator allocates chunk by chunk as vLLM does; so is ``e``, pins expired before the
requests that arrived in the same step: the simulator takes arrivals first, as vLLM does).
Deterministic: no wall clock is read.

Run (the vLLM venv; ~10-60 s per configuration):
    "$TTLPOLICY_VLLM_VENV/bin/python" bench/fidelity_logic.py [--json out.json]
"""

from __future__ import annotations

# vLLM's environment before vllm is imported (fidelity imports ttlpolicy_vllm first).  No
# model runs here: vLLM's CPU platform, also where its only build is CUDA's (0.33) and no
# GPU is present (its config would fail to infer a device).
import os  # isort: skip

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
import fidelity  # isort: skip

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ttlpolicy.sim import Hardware, Verdict, load_profile, roofline
from ttlpolicy.sim import Program as SimProgram
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.policies import make_policy
from vllm_calibrate import SHAPES, EngineSettings, scheduled_shape, write_model_dir
from vllm_replay import Program, finish_turn, issue_due_turns
from vllm_replay import Turn as ReplayTurn

#: vLLM behaviours ``--engine-like-sim`` can switch to the simulator's (one letter each).
KNOBS = {
    "a": "cache only a request's prompt blocks (vLLM also caches full blocks of its output)",
    "b": "a program's last request frees its blocks uncached, to the front of the free queue "
    "(vLLM keeps them cached, at the most-recently-used end)",
    "o": "TTLScheduler puts the free queue in eviction order before every step, nearer the "
    "simulator's order at each eviction (the adapter: after a turn finished or every second)",
}
#: (engine scheduler, simulator policy): the simulator's ttlpolicy with the adapter's rules
PAIRS = ((fidelity.STOCK, "vllm"), (fidelity.TTL, "ttlpolicy:adapter"))
SAMPLED_TOKEN = 7  # what the fabricated model output samples (ignore_eos: never stops early)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One configuration: ``fidelity.py``'s session scaling plus the engine's limits."""

    programs: int = 16
    turns: int = 10
    max_context: int = 6000
    max_out: int = 200
    time_scale: float = 0.02
    max_gap_s: float = 4.0
    blocks: int = 3000  # usable KV blocks (vLLM adds its null block)
    block_size: int = 16
    token_budget: int = 2048
    max_seqs: int = 32
    concurrency: int = 0  # programs in flight, each later one when one ends (0: all at once)

    def settings(self) -> EngineSettings:
        return EngineSettings(
            self.blocks, self.block_size, self.token_budget, self.max_seqs, self.max_model_len
        )

    @property
    def max_model_len(self) -> int:
        return self.max_context + self.max_out + self.block_size

    def sessions(self) -> list[list[ReplayTurn]]:
        return fidelity.workload_sessions(self)  # its fields are the workload flags


def hardware(
    model: str, gpu: str, blocks: int, block_size: int, profile: Hardware | None = None
) -> Hardware:
    """The roofline of ``model`` on ``gpu`` (or ``profile``: a calibrated one, e.g. the CPU
    engine's) holding exactly ``blocks`` KV blocks; both sides run on its step times."""
    hw = profile if profile is not None else roofline(model, gpu)
    return dataclasses.replace(
        hw, kv_capacity_bytes=float(blocks * block_size * hw.kv_bytes_per_token)
    )


# -- the engine side: vLLM's scheduler, no model ---------------------------------------------
def bare_scheduler(model_dir: Path, cls: str, w: Workload) -> Any:
    """vLLM's scheduler ``cls`` built from configs as its engine core builds it, with
    ``w.blocks`` usable KV blocks and no model runner."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
        max_model_len=w.max_model_len,
    )  # fmt: skip
    cache = CacheConfig(block_size=w.block_size, enable_prefix_caching=True)
    cache.num_gpu_blocks = w.blocks + 1  # + vLLM's null block
    config = VllmConfig(
        model_config=model,
        cache_config=cache,
        scheduler_config=SchedulerConfig(
            max_num_seqs=w.max_seqs,
            max_num_batched_tokens=w.token_budget,
            max_model_len=w.max_model_len,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            scheduler_cls=cls,
        ),
    )
    # The KV spec's sizes matter to the block pool only through the block count.
    spec = FullAttentionSpec(
        block_size=w.block_size, num_kv_heads=1, head_size=32, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=w.blocks + 1,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    sched_cls = config.scheduler_config.get_scheduler_cls()
    return sched_cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=w.block_size,
    )


class _Submitter:
    """``issue_due_turns``' engine: turns a prompt into vLLM's ``Request`` for the scheduler.

    vLLM knows each request by the number of requests issued before it, as the simulator
    numbers its calls: ``ProgramScheduler`` breaks ties in its queue order (programs that
    arrived at the same instant, common in virtual time) by request id, so both sides must
    use the same ids.  ``names`` maps them back to ``issue_due_turns``' names."""

    def __init__(
        self, sched: Any, block_size: int, clock: Callable[[], float], tick: Callable[[], None]
    ) -> None:
        from vllm.utils.hashing import sha256_cbor
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(sha256_cbor)
        self.sched = sched
        self.clock = clock
        self.tick = tick  # called before each request: its arrival gets its own instant
        self.hasher = get_request_block_hasher(block_size, sha256_cbor)
        self.requests: dict[str, Any] = {}  # by name
        self.names: dict[str, str] = {}  # vLLM's request id → name

    def add_request(self, name: str, prompt: dict[str, list[int]], params: Any) -> None:
        from vllm.v1.request import Request

        self.tick()
        rid = str(len(self.names))
        req = Request(rid, prompt["prompt_token_ids"], params, None,
                      arrival_time=self.clock(), block_hasher=self.hasher)  # fmt: skip
        self.requests[name], self.names[rid] = req, name
        self.sched.add_request(req)


def engine_like_sim(sched: Any, knobs: str) -> None:
    """Switch the vLLM behaviours named in ``knobs`` (``KNOBS``) to the simulator's."""
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"--engine-like-sim: unknown knob {sorted(unknown)[0]!r}; "
                         f"known: {', '.join(KNOBS)}")  # fmt: skip
    kvm = sched.kv_cache_manager
    if "a" in knobs:
        coord = kvm.coordinator
        cache = coord.cache_blocks

        def prompt_only(request: Any, num_computed_tokens: int) -> None:
            cache(request, min(num_computed_tokens, request.num_prompt_tokens))

        coord.cache_blocks = prompt_only
    if "b" in knobs:
        pool, free = kvm.block_pool, kvm.free

        def drop_last(request: Any) -> None:
            xargs = request.sampling_params.extra_args or {}
            if xargs.get("last_turn") and request.is_finished():
                for blocks in kvm.get_blocks(request.request_id).blocks:
                    for block in blocks:
                        if block.ref_cnt == 1:  # this request's alone: uncache it, so that
                            pool._maybe_evict_cached_block(block)  # free_blocks prepends it
            free(request)

        kvm.free = drop_last
    if "o" in knobs and hasattr(sched, "order_free_blocks"):
        order = sched.order_free_blocks

        def every_step(now: float, *, force: bool = False) -> None:
            order(now, force=True)

        sched.order_free_blocks = every_step


def _runner_output(sched: Any, out: Any) -> Any:
    """The model's output for ``out``: one token for each request whose prompt is done."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(out.num_scheduled_tokens)
    sampled = [[] if sched.requests[r].is_prefill_chunk else [SAMPLED_TOKEN] for r in ids]
    return ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
    )


def step_s(hw: Hardware, sched: Any, out: Any) -> float:
    """How long the simulator's hardware model says this step takes: its shape as the
    simulator counts it (``calibrate.scheduled_shape``), priced by the step-time model."""
    return hw.steps.step_s(*scheduled_shape(sched, out))


def _next_event_s(sched: Any, programs: list[Program], now: float) -> float:
    """When something can change after a step that scheduled nothing: a program's next turn
    or (TTLScheduler) a pin's deadline, or when load control may admit the waiting head (the
    real engine asks at every turn of its busy loop); an error when nothing ever will."""
    times = [p.due_s for p in programs if p.done_s is None and p.in_flight is None]
    deadline = getattr(getattr(sched, "programs", None), "next_deadline_s", None)
    if deadline is not None:
        times.append(deadline)
    admission = getattr(sched, "admission", None)
    if admission is not None:
        times.append(admission.next_shrink_s(now))
    later = [t for t in times if t > now]
    if not later:
        raise RuntimeError(
            f"vLLM scheduled nothing at t={now:.3f} s with {len(sched.running)} running, "
            f"{len(sched.waiting)} waiting, and no event is due"
        )
    return min(later)


def _count_calls(obj: Any, method: str) -> list[int]:
    """Wrap ``obj.method`` to count its calls (those returning a falsy bool not counted);
    the count is ``[n]``, updated in place."""
    count, call = [0], getattr(obj, method)

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        count[0] += result is not False
        return result

    setattr(obj, method, counted)
    return count


def _count_full_prompt_hits(sched: Any) -> list[int]:
    """Count lookups where every block of the prompt is cached: vLLM then recomputes the whole
    last block (its hit stops at prompt − 1 tokens, block-aligned: ``get_computed_blocks`` in
    vllm/v1/core/kv_cache_manager.py), where the simulator hits prompt − 1 tokens."""
    kvm, count = sched.kv_cache_manager, [0]
    lookup = kvm.get_computed_blocks

    def counted(request: Any, *cap: Any) -> Any:
        # (vLLM 0.33 also passes ``max_cache_hit_length``: None, the default, here)
        n = request.num_tokens
        if n % sched.block_size == 0 and request.num_computed_tokens == 0:
            hit = kvm.coordinator.find_longest_cache_hit(request.block_hashes, n)[1]
            count[0] += hit == n
        return lookup(request, *cap)

    kvm.get_computed_blocks = counted
    return count


def replay_engine(
    sched: Any, hw: Hardware, sessions: list[list[ReplayTurn]], w: Workload, vocab: int
) -> dict[str, Any]:
    """Run the workload through ``sched`` in virtual time; the same measurements as
    ``fidelity.replay_engine`` plus per-request cache hits and the block pool's balance."""
    now = 0.0

    def clock() -> float:
        return now

    sched.clock = clock  # TTLScheduler's only clock (expiry, observed prefill times)
    arrived_s = -math.inf

    def arrive_apart() -> None:
        """vLLM's ``add_request`` reads the clock per request, so no two requests arrive at
        one instant (programs of one instant would be one admission cohort); the virtual
        clock moves on by the least step after an arrival at the same instant, as the
        simulator's engine does."""
        nonlocal now, arrived_s
        if arrived_s == now:
            now = math.nextafter(now, math.inf)
        arrived_s = now

    pool = sched.kv_cache_manager.block_pool
    preemptions = _count_calls(sched, "_preempt_request")
    evicted = _count_calls(pool, "_maybe_evict_cached_block")  # True: a cached block went
    full_hits = _count_full_prompt_hits(sched)
    submit = _Submitter(sched, w.block_size, clock, arrive_apart)
    programs = [Program(f"prog{i}", s, random.Random(i)) for i, s in enumerate(sessions)]
    in_flight = w.concurrency or None
    queue = fidelity.ProgramQueue(programs, fidelity.arrival_order(sessions, in_flight), in_flight)
    programs = queue.programs  # in start order: the ties at 0 below go in it
    finished_seq = {p.pid: i - len(programs) for i, p in enumerate(programs)}
    finishes = itertools.count()
    by_rid: dict[str, Program] = {}
    issued: dict[str, float] = {}
    ttfts: list[float] = []
    hits: dict[str, list[int]] = {}  # request → [prompt tokens, cached tokens]
    cached: dict[str, int] = {}
    output_tokens = steps = 0
    while any(p.done_s is None for p in programs):
        # Turns due at the same instant go in the order their previous turns finished (the
        # simulator's event order), not by program index: virtual time makes such ties common.
        programs.sort(key=lambda p: (p.due_s, finished_seq[p.pid]))
        for rid, p in issue_due_turns(submit, programs, now, vocab):
            by_rid[rid], issued[rid] = p, now
        if not sched.has_unfinished_requests():
            now = max(now, min(p.due_s for p in programs if p.done_s is None))
            continue  # every program is in a tool call
        out = sched.schedule()
        if not out.num_scheduled_tokens:  # memory held (pins): wait for the next event
            now = _next_event_s(sched, programs, now)
            continue
        now += step_s(hw, sched, out)
        steps += 1
        outputs = sched.update_from_output(out, _runner_output(sched, out))
        for client in outputs.values():  # what the engine reports as num_cached_tokens
            for o in client.outputs:
                if o.prefill_stats is not None:
                    cached[submit.names[o.request_id]] = o.prefill_stats.num_cached_tokens
        for rid in map(submit.names.__getitem__, out.num_scheduled_tokens):
            req = submit.requests[rid]
            if rid in issued and req.num_output_tokens:
                ttfts.append(now - issued.pop(rid))
            if not req.is_finished():
                continue
            p = by_rid.pop(rid)
            hits[rid] = [req.num_prompt_tokens, cached.pop(rid, 0)]
            output_tokens += req.num_output_tokens
            finish_turn(p, list(req.output_token_ids), now)
            queue.finished(p, now)
            finished_seq[p.pid] = next(finishes)
    leaked = [b.block_id for b in pool.blocks if b.ref_cnt and not b.is_null]
    makespan = max(p.done_s for p in programs if p.done_s is not None)
    jct = [p.done_s - p.first_s for p in programs]  # type: ignore[operator]
    prompt_tokens = sum(h[0] for h in hits.values())
    return {
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p90_s": fidelity.p90(ttfts),
        "throughput_tok_s": output_tokens / makespan,
        "hit_rate": sum(h[1] for h in hits.values()) / prompt_tokens,
        "jct_mean_s": statistics.fmean(jct),
        "preemptions": float(preemptions[0]),
        "makespan_s": makespan,
        "steps": float(steps),
        "pins": float(sched.ttl_stats()["pins"]) if hasattr(sched, "ttl_stats") else 0.0,
        "full_prompt_hits": float(full_hits[0]),
        "evicted_blocks": float(evicted[0]),  # cached blocks reused for others
        "free_blocks_end": float(pool.get_num_free_blocks()),
        "leaked_blocks": float(len(leaked)),
        "per_request": hits,
    }


# -- the simulator side ----------------------------------------------------------------------
def replay_sim(
    hw: Hardware, policy: str, programs: list[SimProgram], w: Workload
) -> dict[str, Any]:
    """``fidelity.replay_sim``'s measurements, plus each call's cache hit (its tokens already
    computed when admitted), named as the engine names the request."""
    pol = make_policy(policy)
    pins, finished = [0], pol.finished

    def count_pins(call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        verdict = finished(call, now, chain_blocks, last_turn)
        pins[0] += verdict is Verdict.PIN
        return verdict

    pol.finished = count_pins  # type: ignore[method-assign]
    calls: list[dict[str, Any]] = []
    out: dict[str, Any] = fidelity.replay_sim(hw, pol, programs, w.settings(), calls,
                                              w.concurrency or None)  # fmt: skip
    hits = {f"{c['program']}-{c['turn']:04d}": [c["prompt"], c["cached"]] for c in calls}
    return out | {"pins": float(pins[0]), "per_request": hits}


def request_diffs(engine: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    """Per request, cached prompt tokens engine vs simulator: how many differ, by how much."""
    e, s = engine["per_request"], sim["per_request"]
    common = sorted(set(e) & set(s))
    diffs = [(r, e[r][1], s[r][1]) for r in common if e[r][1] != s[r][1]]
    return {
        "requests": len(common),
        "differ": len(diffs),
        "sim_more_hit_tokens": sum(max(0, si - en) for _, en, si in diffs),
        "sim_fewer_hit_tokens": sum(max(0, en - si) for _, en, si in diffs),
        "first": [{"request": r, "engine": en, "sim": si} for r, en, si in diffs[:8]],
    }


# -- one configuration, both schedulers ------------------------------------------------------
def adapter_env(policy: str, hw: Hardware) -> dict[str, str]:
    """TTLScheduler's knobs for the simulator's policy ``policy``: the same ``PolicyConfig``
    (load-control switches as the simulator's plug-in sets them) and pin budget."""
    plugin = make_policy(policy)
    switches = getattr(
        plugin, "load_control_switches", {"admission": False, "evict_by_next_use": False}
    )
    cfg = {"kv_bytes_per_token": hw.kv_bytes_per_token, **switches}
    budget = getattr(plugin, "pin_budget_fraction", 0.5)
    return {"TTLPOLICY_POLICY": json.dumps(cfg), "TTLPOLICY_PIN_BUDGET_FRACTION": str(budget)}


@contextlib.contextmanager
def _adapter_settings(env: dict[str, str]) -> Iterator[None]:
    """``env`` set while a scheduler reads it (at construction), then as it was."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def run(
    w: Workload,
    model_dir: Path,
    *,
    model: str = "llama-3.1-8b",
    gpu: str = "h100-80g",
    knobs: str = "",
    pairs: tuple[tuple[str, str], ...] = PAIRS,
    profile: Hardware | None = None,
) -> list[dict[str, Any]]:
    sessions = w.sessions()
    hw = hardware(model, gpu, w.blocks, w.block_size, profile)
    sim_programs = fidelity.sim_programs(sessions, w.block_size)
    rows = []
    for cls, policy in pairs:
        with _adapter_settings(adapter_env(policy, hw)):
            sched = bare_scheduler(model_dir, cls, w)
        engine_like_sim(sched, knobs)
        engine = replay_engine(sched, hw, sessions, w, vocab=500)
        sim = replay_sim(hw, policy, sim_programs, w)
        rows.append({
            "scheduler": cls.rsplit(".", 1)[1], "policy": policy, "engine": engine, "sim": sim,
            "error": fidelity.errors(engine, sim), "requests": request_diffs(engine, sim),
        })  # fmt: skip
    return rows


def summary_table(rows: list[dict[str, Any]]) -> str:
    """``fidelity.table``'s rows, then the per-request hit differences."""
    agree = fidelity.ranking(rows) if len(rows) == 2 else {}
    lines = [fidelity.table(rows, agree)]
    for r in rows:
        d, e = r["requests"], r["engine"]
        lines.append(
            f"{r['scheduler']:>14}: {d['differ']}/{d['requests']} requests hit differently "
            f"(sim +{d['sim_more_hit_tokens']} / -{d['sim_fewer_hit_tokens']} tokens); "
            f"engine steps {e['steps']:.0f}, pins {e['pins']:.0f}, fully cached prompts "
            f"{e['full_prompt_hits']:.0f}, leaked blocks {e['leaked_blocks']:.0f}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Workload()
    for f in dataclasses.fields(Workload):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(d, f.name)),
                        default=getattr(d, f.name))  # fmt: skip
    ap.add_argument("--model", default="llama-3.1-8b", help="roofline model (sim.MODELS)")
    ap.add_argument("--gpu", default="h100-80g", help="roofline GPU (sim.GPUS)")
    ap.add_argument("--profile", default=None,
                    help="a hardware profile (e.g. calibrated on the CPU engine) instead of "
                    "the roofline")  # fmt: skip
    ap.add_argument("--engine-like-sim", default="", metavar="KNOBS",
                    help="vLLM behaviours switched to the simulator's: " +
                    "; ".join(f"{k}: {v}" for k, v in KNOBS.items()))  # fmt: skip
    ap.add_argument("--stock-only", action="store_true", help="skip TTLScheduler / ttlpolicy")
    ap.add_argument("--sim-policy", default=None, help="simulator policy paired with TTLScheduler")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    w = Workload(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Workload)})
    pairs = PAIRS[:1] if args.stock_only else PAIRS
    if args.sim_policy and not args.stock_only:
        pairs = (PAIRS[0], (PAIRS[1][0], args.sim_policy))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model_dir(Path(tmp), SHAPES["llama-3.1-8b"])
        rows = run(w, model_dir, model=args.model, gpu=args.gpu, knobs=args.engine_like_sim,
                   pairs=pairs,
                   profile=load_profile(args.profile) if args.profile else None)  # fmt: skip
    print(summary_table(rows))
    if args.json:
        meta = {"args": vars(args), "workload": dataclasses.asdict(w)}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
