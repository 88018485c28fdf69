"""How long one engine step takes: a roofline over model and GPU presets, or a calibrated fit.

A step processes some new tokens (decode tokens and prefill chunks) against their contexts.
Four numbers describe it, and every step-time model here is a function of them:

* ``tokens`` — new tokens in the step (each costs ``2 · params`` FLOPs in the linear layers);
* ``attn`` — Σ over new tokens of the context each attends to (attention FLOPs
  ``4 · layers · heads · head_dim`` per unit);
* ``kv`` — KV tokens read or written (decode: the whole context; prefill: context + chunk);
* ``seqs`` — sequences in the step (each decode and each prefill chunk is one): what an engine
  pays per request whatever its tokens — its attention call, its sampled logits, its host-side
  bookkeeping.  Without it a line cannot tell one 300-token chunk from 300 one-token decodes.

The roofline takes the slower of compute (``FLOPs / (peak · efficiency)``) and memory
(``(weights + kv · kv_bytes) / (bandwidth · efficiency)``) plus a fixed per-step overhead, and
no per-sequence cost (its term is 0).  Both are linear in (tokens, attn, kv, seqs), so a step
time is the maximum of two lines; a run of ``k`` steps whose shape grows by the same amounts
each step (a decode-only batch, or one long prefill chunked at a fixed size; the same
sequences throughout) is summed in closed form — the simulator never ticks through steps where
nothing changes.  ``calibrate`` fits one line to measured step times instead.

Figures: public spec sheets (dense BF16 tensor FLOP/s without sparsity, HBM bandwidth,
memory), and the Llama 3.1 model cards (layers, hidden size, heads, KV heads).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .. import native


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    tp: int = 1  # GPUs the model is sharded over (tensor parallel)
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head (summed over the TP shards)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.params

    @property
    def flops_per_attn_unit(self) -> float:
        """QK^T and AV: 2 · 2 · layers · heads · head_dim per (token, context token) pair."""
        return 4.0 * self.layers * self.heads * self.head_dim


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    peak_flops: float  # dense BF16, per GPU
    hbm_bytes_per_s: float
    memory_bytes: float
    pcie_bytes_per_s: float  # host link, for the CPU tier


MODELS = {
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 8.03e9, 32, 4096, 32, 8, 128, tp=1),
    "llama-3.1-70b": ModelSpec("llama-3.1-70b", 70.6e9, 80, 8192, 64, 8, 128, tp=4),
}

GPUS = {
    "a100-80g": GPUSpec("a100-80g", 312e12, 2.039e12, 80e9, 32e9),
    "h100-80g": GPUSpec("h100-80g", 989e12, 3.35e12, 80e9, 64e9),
    "h200": GPUSpec("h200", 989e12, 4.8e12, 141e9, 64e9),
    "b200": GPUSpec("b200", 2.25e15, 8.0e12, 180e9, 64e9),
}


@dataclass(frozen=True, slots=True)
class Line:
    """``c0 + c_tok · tokens + c_attn · attn + c_kv · kv + c_seq · seqs`` seconds."""

    c0: float
    c_tok: float
    c_attn: float
    c_kv: float
    c_seq: float = 0.0  # seconds per sequence in the step (0: the roofline, a /1 profile)

    def at(self, tokens: float, attn: float, kv: float, seqs: float = 0.0) -> float:
        # The per-sequence term last: with c_seq = 0 it adds +0.0, and the sum is, to the
        # bit, the three-term line's (every roofline result is unchanged by the term).
        return (
            self.c0 + self.c_tok * tokens + self.c_attn * attn + self.c_kv * kv + self.c_seq * seqs
        )


@dataclass(frozen=True, slots=True)
class StepModel:
    """Step time = max(compute line, memory line).  Equal lines give a plain linear model.

    ``decode``: a line of its own for decode-only steps (every sequence computes one token:
    ``tokens == seqs``), or None (the two lines price every step).  A calibrated CPU engine
    needs it: its steps with a prefill chunk cost ~20 ms fixed, its decode-only steps ~8 ms,
    and one line through both over-prices decode steps by ~8 % and under-prices prefill
    steps (bench/RESULTS.md, "why the hit rate read low").  A step of one 1-token chunk and
    nothing else is priced as a decode: its shape is one."""

    compute: Line
    memory: Line
    decode: Line | None = None

    def step_s(self, tokens: float, attn: float, kv: float, seqs: float = 0.0) -> float:
        """Seconds of a step of this shape (``seqs`` 0: a caller that does not count its
        sequences, priced as if they cost nothing)."""
        # (StepModel's own lines: a subclass's ``lines`` may do more, e.g. draw a ratio)
        compute_line, memory_line = StepModel.lines(self, tokens, seqs)
        compute = compute_line.at(tokens, attn, kv, seqs)
        memory = memory_line.at(tokens, attn, kv, seqs)
        return memory if memory > compute else compute  # max(), without parsing its arguments

    def lines(self, tokens: float, seqs: float) -> tuple[Line, Line]:
        """The (compute, memory) lines that price a step of ``tokens`` and ``seqs`` (a run
        of steps keeps both: ``StepRun``)."""
        decode = self.decode
        if decode is not None and tokens == seqs:
            return decode, decode
        return self.compute, self.memory

    def run_s(
        self,
        tokens: float,
        attn0: float,
        d_attn: float,
        kv0: float,
        d_kv: float,
        k: int,
        seqs: float = 0.0,
    ) -> float:
        """Σ_{j<k} step_s(tokens, attn0 + j·d_attn, kv0 + j·d_kv, seqs), in closed form."""
        if k <= 0:
            return 0.0
        return self.run(tokens, attn0, d_attn, kv0, d_kv, seqs).s(k)

    def run(
        self,
        tokens: float,
        attn0: float,
        d_attn: float,
        kv0: float,
        d_kv: float,
        seqs: float = 0.0,
    ) -> StepRun:
        """The run of steps whose first step has this shape and each further one ``d_attn``
        attention units and ``d_kv`` KV tokens more (``StepRun``)."""
        return StepRun(self, tokens, attn0, d_attn, kv0, d_kv, seqs)


class RunTimes(Protocol):
    """What the engine asks of a run of steps: ``StepRun``, or its native twin."""

    def s(self, k: int) -> float: ...
    def reach(self, start_s: float, until_s: float, k: int, s_k: float) -> tuple[int, float]: ...


class StepTimer(Protocol):
    """What the engine asks of a step-time model: ``StepModel``, or its native twin."""

    def step_s(self, tokens: float, attn: float, kv: float, seqs: float = 0.0) -> float: ...
    def run(
        self, tokens: float, attn0: float, d_attn: float, kv0: float, d_kv: float, seqs: float = 0.0
    ) -> RunTimes: ...


def native_steps(model: StepModel) -> StepTimer:
    """``model`` served by the Rust core when the native module is loaded (its ``step_s`` and
    ``run`` give the same floats, to the bit: tests/sim/test_step_time_native.py), else
    ``model`` itself.  The simulator times a run several times per LLM call; the reference's
    arithmetic in Python was a sixth of its loop.  A subclass (``JitteredSteps``, which
    scatters step times) has rules of its own and is its own timer."""
    if native is None or type(model) is not StepModel:
        return model

    def coefficients(line: Line) -> tuple[float, float, float, float, float]:
        return (line.c0, line.c_tok, line.c_attn, line.c_kv, line.c_seq)

    d = model.decode
    timer: StepTimer = native.StepModel(
        coefficients(model.compute),
        coefficients(model.memory),
        None if d is None else coefficients(d),
    )
    return timer


class StepRun:
    """The times of a run of steps whose shape grows by the same amounts each step: the
    first step has ``tokens`` new tokens, ``attn0`` attention units, ``kv0`` KV tokens and
    ``seqs`` sequences, and each further step ``d_attn`` and ``d_kv`` more (the same tokens and
    sequences).  ``s(k)`` is the time of its first ``k``
    steps; both lines' start and growth are computed once, as the engine asks for several
    ``k`` (it searches for the one that reaches its next event).

    Each line is linear in the step index, so their difference changes sign at most once:
    ``s`` sums the larger line on each side of the crossing as an arithmetic series.
    """

    __slots__ = ("a0", "b0", "da", "db", "split")

    def __init__(
        self,
        model: StepModel,
        tokens: float,
        attn0: float,
        d_attn: float,
        kv0: float,
        d_kv: float,
        seqs: float = 0.0,
    ) -> None:
        compute, memory = model.lines(tokens, seqs)
        a0 = self.a0 = compute.at(tokens, attn0, kv0, seqs)
        da = self.da = compute.c_attn * d_attn + compute.c_kv * d_kv
        b0 = self.b0 = memory.at(tokens, attn0, kv0, seqs)
        db = self.db = memory.c_attn * d_attn + memory.c_kv * d_kv
        # the first step index where the order of the two lines may flip (None: never)
        diff0, ddiff = a0 - b0, da - db
        split = None
        if ddiff != 0.0:
            cross = -diff0 / ddiff
            if cross != math.inf:  # (infinite: no crossing within any number of steps)
                split = max(0, math.ceil(cross)) if cross > 0 else 0
        self.split: int | None = split

    @property
    def monotone(self) -> bool:
        """No line starts below zero or falls: then s(k), as computed (every operation rounds
        monotonically), never decreases with k, and "the clock reaches t after k steps" holds
        from one k on; ``reach`` may then start its search at a guess."""
        return self.a0 >= 0.0 and self.b0 >= 0.0 and self.da >= 0.0 and self.db >= 0.0

    def s(self, k: int) -> float:
        """Time of the first ``k`` steps."""
        if k <= 0:
            return 0.0
        split = self.split
        if split is None or split > k:
            split = k
        a0, da, b0, db = self.a0, self.da, self.b0, self.db
        total = 0.0
        if split > 0:
            mid = (split - 1) / 2.0
            va, vb = a0 + da * mid, b0 + db * mid
            total += split * (va if va >= vb else vb)
        n = k - split
        if n > 0:
            mid = split + (n - 1) / 2.0
            va, vb = a0 + da * mid, b0 + db * mid
            total += n * (va if va >= vb else vb)
        return total

    def reach(self, start_s: float, until_s: float, k: int, s_k: float) -> tuple[int, float]:
        """The fewest steps ``j`` in [1, k] after which a clock at ``start_s`` reaches
        ``until_s`` (``start_s + s(j) >= until_s``), and ``s(j)``.  ``s_k`` is ``s(k)``, which
        must reach it.

        A bisection of [1, k]; when ``s`` never decreases (``monotone``) the first step that
        reaches is unique, so the bisection may start from the steps that the time left
        allows (the larger line at the start, growing as it does), found in a probe or two,
        and gives the same answer as from [1, k]."""
        s = self.s
        lo, hi, s_hi = 1, k, s_k
        if self.monotone:
            # s(j) ~ j·v0 + dv·j(j−1)/2 = left, solved for j (the stable form of the root)
            v0, dv = (self.a0, self.da) if self.a0 >= self.b0 else (self.b0, self.db)
            b = v0 - dv / 2.0
            left = until_s - start_s
            disc = b * b + 2.0 * dv * left
            x = 2.0 * left / (b + math.sqrt(disc)) if b > 0.0 and disc >= 0.0 else math.nan
            guess = k if not x < k else (1 if x < 1.0 else math.ceil(x))
            up = False  # the answer is above the guess
            if guess < k:
                s_g = s(guess)
                if start_s + s_g >= until_s:
                    hi, s_hi = guess, s_g
                else:
                    lo, up = guess + 1, True
            # Gallop away from the guess until the answer is bracketed (usually one probe).
            step = 1
            while lo < hi:
                j = guess + step if up else guess - step
                if j >= hi or j < lo:
                    break
                s_j = s(j)
                if start_s + s_j >= until_s:
                    hi, s_hi = j, s_j
                    if up:
                        break
                else:
                    lo = j + 1
                    if not up:
                        break
                step *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            s_mid = s(mid)
            if start_s + s_mid >= until_s:
                hi, s_hi = mid, s_mid
            else:
                lo = mid + 1
        return hi, s_hi


@dataclass(frozen=True, slots=True)
class Hardware:
    """One engine instance: a model on ``model.tp`` GPUs, with its step-time model and KV room."""

    model: ModelSpec
    gpu: GPUSpec
    steps: StepModel
    kv_capacity_bytes: float
    cpu_tier_bytes: float = 0.0

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token

    def kv_capacity_blocks(self, block_tokens: int) -> int:
        return int(self.kv_capacity_bytes // (self.kv_bytes_per_token * block_tokens))

    def cpu_capacity_blocks(self, block_tokens: int) -> int:
        return int(self.cpu_tier_bytes // (self.kv_bytes_per_token * block_tokens))

    def transfer_s(self, tokens: int) -> float:
        """Seconds to move ``tokens`` of KV over the host links (one per GPU)."""
        return tokens * self.kv_bytes_per_token / (self.gpu.pcie_bytes_per_s * self.model.tp)

    def prefill_s(self, tokens: int, budget_tokens: int, start: int = 0) -> float:
        """Seconds to prefill ``tokens`` new tokens after ``start`` cached ones, alone in the
        engine, in chunks of ``budget_tokens`` — what a lone request waits for its first token."""
        total, done = 0.0, 0
        while done < tokens:
            c = min(budget_tokens, tokens - done)
            s = start + done
            total += self.steps.step_s(c, c * s + c * (c + 1) / 2.0, s + c, 1.0)
            done += c
        return total


def roofline(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    *,
    efficiency: float = 0.6,
    step_overhead_s: float = 0.004,
    memory_utilization: float = 0.9,
    cpu_tier_bytes: float = 0.0,
) -> Hardware:
    """A roofline ``Hardware`` from presets (names as in ``MODELS`` and ``GPUS``)."""
    m = MODELS[model] if isinstance(model, str) else model
    g = GPUS[gpu] if isinstance(gpu, str) else gpu
    if not 0.0 < efficiency <= 1.0:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency!r}")
    if not 0.0 < memory_utilization <= 1.0:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization!r}")
    flops = g.peak_flops * m.tp * efficiency
    bw = g.hbm_bytes_per_s * m.tp * efficiency
    compute = Line(step_overhead_s, m.flops_per_token / flops, m.flops_per_attn_unit / flops, 0.0)
    memory = Line(step_overhead_s + m.weight_bytes / bw, 0.0, 0.0, m.kv_bytes_per_token / bw)
    kv_bytes = g.memory_bytes * m.tp * memory_utilization - m.weight_bytes
    if kv_bytes <= 0:
        raise ValueError(f"{m.name} does not fit on {m.tp} × {g.name}")
    return Hardware(m, g, StepModel(compute, memory), kv_bytes, cpu_tier_bytes)


def fit_line(rows: Iterable[Sequence[float]], *, relative: bool = True) -> Line:
    """The ``Line`` through measured steps, (tokens, attn, kv, seqs, seconds) each, with no
    negative coefficient, that minimises the squared relative error (``relative=False``: the
    squared error in seconds).

    At least five rows spanning the shapes to be simulated (isolated prefills at growing sizes
    make ``attn`` quadratic in ``tokens``; decode batches at growing size and context set
    ``kv`` and ``seqs``).
    """
    data = np.asarray([tuple(map(float, r)) for r in rows], dtype=float)
    if data.ndim != 2 or data.shape[1] != 5 or data.shape[0] < 5:
        raise ValueError(
            "calibrate needs >= 5 rows of (tokens, attn, kv, seqs, seconds), "
            f"got shape {data.shape}"
        )
    if not np.all(np.isfinite(data)) or np.any(data < 0):
        raise ValueError("calibrate rows must be finite and >= 0")
    x = np.column_stack([np.ones(len(data)), data[:, :4]])
    y = data[:, 4]
    # Least squares on relative error (each row weighted by 1 / its time): a run holds many
    # short decode steps and few long prefills, and an absolute fit would trade the former's
    # accuracy for the latter's.  Steps measured once each on a noisy machine (a replay's
    # own) are better fitted in seconds: a relative fit follows the fast mode of a skewed
    # spread and under-predicts the total; a fit in seconds with an intercept matches it.
    floor = max(float(y.max()), 1e-12) * 1e-6
    w = 1.0 / np.maximum(y, floor) if relative else np.ones_like(y)
    xw, yw = x * w[:, None], y * w
    # No coefficient below zero (a step never gets faster with more work, nor takes negative
    # time): a noisy measurement can make a free fit say so.  Drop the most negative term
    # and refit until none is left (an active-set approximation of non-negative least
    # squares; exact when the unconstrained fit is already non-negative).
    active = list(range(5))
    coef = np.zeros(5)
    while active:
        sol, *_ = np.linalg.lstsq(xw[:, active], yw, rcond=None)
        if sol.min() >= 0:
            coef[:] = 0.0
            coef[active] = sol
            break
        del active[int(np.argmin(sol))]
    return Line(*(float(c) for c in coef))


class JitteredSteps(StepModel):
    """``base``'s step times, each multiplied by a ratio drawn (seeded) from measured ones:
    ``decode_ratios`` for decode-only steps, ``other_ratios`` for the rest (``step_ratios``
    gives both, measured over modelled, each kind's mean 1).  A run of identical steps
    (``StepRun``) draws once for the whole run.

    What it is for: a real engine's steps scatter around any fit (±10–20 % on the CPU engine,
    step after step), and which calls find their prefix depends on how step times fall against
    wall-clock tool gaps — a deterministic simulation is one draw of that, the engine's hit
    rate an average over many.  Averaging simulations over seeds compares like with like."""

    __slots__ = ("_decode_ratios", "_other_ratios", "_rng")
    _decode_ratios: tuple[float, ...]
    _other_ratios: tuple[float, ...]
    _rng: random.Random

    def __init__(
        self,
        base: StepModel,
        decode_ratios: Sequence[float],
        other_ratios: Sequence[float],
        seed: int,
    ) -> None:
        if not decode_ratios or not other_ratios:
            raise ValueError("JitteredSteps needs at least one ratio of each kind")
        if not all(math.isfinite(r) and r >= 0.0 for r in (*decode_ratios, *other_ratios)):
            raise ValueError("JitteredSteps ratios must be finite and >= 0")
        super().__init__(base.compute, base.memory, base.decode)
        object.__setattr__(self, "_rng", random.Random(seed))
        object.__setattr__(self, "_decode_ratios", tuple(decode_ratios))
        object.__setattr__(self, "_other_ratios", tuple(other_ratios))

    def _ratio(self, tokens: float, seqs: float) -> float:
        pool = self._decode_ratios if tokens == seqs else self._other_ratios
        return self._rng.choice(pool)

    def step_s(self, tokens: float, attn: float, kv: float, seqs: float = 0.0) -> float:
        return StepModel.step_s(self, tokens, attn, kv, seqs) * self._ratio(tokens, seqs)

    def lines(self, tokens: float, seqs: float) -> tuple[Line, Line]:
        f = self._ratio(tokens, seqs)
        compute, memory = StepModel.lines(self, tokens, seqs)
        return _scaled(compute, f), _scaled(memory, f)


def _scaled(line: Line, f: float) -> Line:
    return Line(line.c0 * f, line.c_tok * f, line.c_attn * f, line.c_kv * f, line.c_seq * f)


def step_ratios(
    model: StepModel, rows: Iterable[Sequence[float]]
) -> tuple[list[float], list[float]]:
    """Measured over modelled step time of each row (tokens, attn, kv, seqs, seconds), split
    into decode-only steps and the rest, each kind scaled to mean 1 (so that a ratio drawn at
    random leaves the expected step time the model's); a kind without rows gets ``[1.0]``."""
    kinds: tuple[list[float], list[float]] = ([], [])
    for tokens, attn, kv, seqs, seconds in rows:
        modelled = model.step_s(tokens, attn, kv, seqs)
        if modelled > 0.0:
            kinds[0 if tokens == seqs else 1].append(seconds / modelled)
    out = []
    for ratios in kinds:
        mean = sum(ratios) / len(ratios) if ratios else 0.0
        out.append([r / mean for r in ratios] if mean > 0.0 else [1.0])
    return out[0], out[1]


#: Fewest decode-only rows, and fewest other rows, for which ``fit_steps`` fits the two kinds
#: apart (``fit_line``'s minimum for each).
SPLIT_MIN_ROWS = 5


def fit_steps(rows: Iterable[Sequence[float]], *, relative: bool = True) -> StepModel:
    """The ``StepModel`` through measured steps (tokens, attn, kv, seqs, seconds): one
    ``fit_line`` through the decode-only steps (``tokens == seqs``) as its ``decode`` line and
    one through the rest, when each kind has ``SPLIT_MIN_ROWS``; else one line through all.
    On the CPU engine a step that prefills pays a fixed cost a decode-only step does not
    (~20 against ~8 ms): no sum of the four terms tells the two kinds apart."""
    data = [tuple(map(float, r)) for r in rows]
    decode = [r for r in data if len(r) == 5 and r[0] == r[3]]
    other = [r for r in data if not (len(r) == 5 and r[0] == r[3])]
    if len(decode) < SPLIT_MIN_ROWS or len(other) < SPLIT_MIN_ROWS:
        line = fit_line(data, relative=relative)
        return StepModel(line, line)
    line = fit_line(other, relative=relative)
    return StepModel(line, line, fit_line(decode, relative=relative))


def calibrate(hw: Hardware, rows: Iterable[Sequence[float]]) -> Hardware:
    """Replace ``hw``'s roofline by a least-squares fit through measured steps
    (``fit_steps``)."""
    steps = fit_steps(rows)
    return Hardware(hw.model, hw.gpu, steps, hw.kv_capacity_bytes, hw.cpu_tier_bytes)


#: The CacheTTL paper's CPU offload tier per GPU (§6: 200 GB, 100 GB on the A100 machines).
PAPER_CPU_TIER_BYTES_PER_GPU = {"a100-80g": 100e9}
PAPER_DEFAULT_CPU_TIER_BYTES_PER_GPU = 200e9


def paper_hardware(
    model: str = "llama-3.1-8b", gpu: str = "b200", *, offload: bool = False, **roofline_options
) -> Hardware:
    """The paper's engines: Llama-3.1-8B on one GPU, Llama-3.1-70B over four (TP4), vLLM's
    default 90 % of GPU memory, and with ``offload`` a CPU tier of 200 GB per GPU (100 GB on
    A100).  The engine settings to run them with are ``sim.paper_workloads.PAPER_ENGINE``."""
    m = MODELS[model]
    per_gpu = PAPER_CPU_TIER_BYTES_PER_GPU.get(gpu, PAPER_DEFAULT_CPU_TIER_BYTES_PER_GPU)
    tier = per_gpu * m.tp if offload else 0.0
    return roofline(m, gpu, cpu_tier_bytes=tier, **roofline_options)
