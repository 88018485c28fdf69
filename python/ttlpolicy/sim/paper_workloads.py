"""The CacheTTL paper's two workloads as seeded generators (Continuum, arXiv 2511.02230, §6,
Table 2: GPT-5 traces, 100 programs each).  The paper ships no traces; these reproduce its
published statistics, and every parameter below is stated with where it comes from.

* ``swe-bench`` — mini-swe-agent on SWE-bench: 10.9 ± 2.1 turns per program; tool time
  925 ± 3,550 ms, long-tailed; 70,126 ± 19,732 prompt tokens per program summed over its
  calls (≈ 6k per call, the context growing turn by turn); tools are a bash agent's, named
  by the command's first word, each with its own duration distribution.
* ``bfcl`` — BFCL v4 web search: 6.3 ± 2.3 turns; tool time 1,923 ± 2,133 ms (a
  fetch_url-like tail); 93,256 ± 68,687 tokens per program, scaled by 0.4 as the paper does.

No human think time: a call is issued when the previous one finished plus its tool's time.
``turn_scale`` K repeats each program's turns K times with token counts scaled by 1/K (the
paper's Fig. 14): same tokens in all, K times the turns and tool calls.

Output lengths are not in Table 2 (GPT-5's completion tokens include hidden reasoning);
``output_mean_tokens`` is the one parameter set from the paper's load regime, not its
table: the value at which stock vLLM's mean JCT at the paper's highest load comes near the
paper's (8B on one B200; measured in bench/RESULTS.md, "CacheTTL paper reproduction").  Of
each output only the visible action (``action_mean_tokens``) stays in the next prompt, as
with a reasoning model, which keeps contexts at Table 2's size.  With a few hundred output
tokens, as a non-reasoning model writes, the engine is idle at the paper's rates.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from .interface import EngineConfig
from .workload import Program, Turn

#: The paper's engine (§6): vLLM 0.10.2 defaults (16-token blocks, 256 sequences) with
#: chunked prefill at a 2048-token budget per step.
PAPER_ENGINE = EngineConfig(block_tokens=16, token_budget=2048, max_seqs=256)


@dataclass(frozen=True, slots=True)
class PaperWorkload:
    """One workload's generator parameters (tokens after ``token_scale``)."""

    name: str
    turns_mean: float
    turns_sd: float
    min_turns: int
    first_prompt_tokens: int  # system prompt + task
    observation_mean_tokens: float  # tool output appended per turn (exponential)
    observation_sigma: float  # log-normal sigma of a tool output's size
    output_mean_tokens: float  # generated per call (exponential, at least MIN_OUTPUT_TOKENS)
    action_mean_tokens: float  # of them, kept in the context (the visible action; exponential)
    #: tool → (median seconds, log-normal sigma, weight)
    tools: tuple[tuple[str, float, float, float], ...]
    token_scale: float = 1.0


MIN_OUTPUT_TOKENS = 16

#: mini-swe-agent on SWE-bench.  Turns: Table 2.  Tokens: a 1.5k first prompt plus ~1k per
#: turn (observation + the model's action) gives 10.9 × 1.5k + 54 × 1k ≈ 70k per program and
#: a last call of ~11–14k.  Tools: log-normal per command; the mixture has mean 0.94 s and sd
#: 3.53 s (Table 2: 0.925 ± 3.55 s), and its slowest 10 % of calls carry ~80 % of the time.
SWE_BENCH = PaperWorkload(
    name="swe-bench",
    turns_mean=10.9,
    turns_sd=2.1,
    min_turns=2,
    first_prompt_tokens=1500,
    observation_mean_tokens=750.0,
    observation_sigma=1.0,
    output_mean_tokens=6000.0,
    action_mean_tokens=250.0,
    tools=(
        ("cat", 0.03, 0.6, 0.22),
        ("sed", 0.03, 0.5, 0.16),
        ("grep", 0.06, 0.8, 0.14),
        ("ls", 0.02, 0.5, 0.10),
        ("find", 0.15, 1.0, 0.06),
        ("cd", 0.02, 0.5, 0.05),
        ("echo", 0.01, 0.4, 0.04),
        ("python", 1.2, 1.2, 0.15),
        ("pytest", 4.0, 1.0, 0.08),
    ),
)

#: BFCL v4 web search.  Turns: Table 2.  Tokens (after the paper's 0.4 scale): a 2k first
#: prompt (function docs + question) plus fetched pages of ~1k mean with a heavy log-normal
#: spread: 6.3 × 2k + 16.7 × 1.3k ≈ 35k per program (Table 2: 93,256 × 0.4 = 37,302).
#: Tools: the mixture has mean 1.92 s and sd 2.08 s (Table 2: 1.923 ± 2.133 s).
BFCL = PaperWorkload(
    name="bfcl",
    turns_mean=6.3,
    turns_sd=2.3,
    min_turns=2,
    first_prompt_tokens=2000,
    observation_mean_tokens=1000.0,
    observation_sigma=1.0,
    output_mean_tokens=2300.0,
    action_mean_tokens=150.0,
    tools=(
        ("search", 1.0, 0.5, 0.4),
        ("fetch_url", 1.7, 0.85, 0.6),
    ),
)

WORKLOADS = {w.name: w for w in (SWE_BENCH, BFCL)}
#: The paper's highest job-arrival rate per workload (Fig. 8, 16).
PAPER_RATE_PER_S = {"swe-bench": 0.13, "bfcl": 5.0}


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    """A log-normal draw with the given mean."""
    return mean * math.exp(rng.gauss(-sigma * sigma / 2.0, sigma))


def paper_programs(
    workload: str | PaperWorkload,
    n: int = 100,
    seed: int = 0,
    *,
    turn_scale: int = 1,
    block_tokens: int = 16,
    output_mean_tokens: float | None = None,
    keep_whole_output: bool = False,
    observation_mean_tokens: float | None = None,
) -> list[Program]:
    """``n`` programs of ``workload`` (``"swe-bench"`` or ``"bfcl"``); the same arguments give
    the same programs.  ``output_mean_tokens`` overrides the workload's output length;
    ``keep_whole_output`` keeps every generated token in the next prompt (reasoning included:
    contexts then outgrow Table 2's); ``observation_mean_tokens`` overrides the tool output
    appended per turn (how fast contexts grow)."""
    w = WORKLOADS.get(workload) if isinstance(workload, str) else workload
    if w is None:
        raise ValueError(f"workload must be one of {sorted(WORKLOADS)}, got {workload!r}")
    if observation_mean_tokens is not None:
        if not observation_mean_tokens >= 1 or not math.isfinite(observation_mean_tokens):
            raise ValueError(
                f"observation_mean_tokens must be >= 1, got {observation_mean_tokens!r}"
            )
        w = replace(w, observation_mean_tokens=float(observation_mean_tokens))
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not isinstance(turn_scale, int) or turn_scale < 1:
        raise ValueError(f"turn_scale must be an integer >= 1, got {turn_scale!r}")
    out_mean = w.output_mean_tokens if output_mean_tokens is None else output_mean_tokens
    if not out_mean >= MIN_OUTPUT_TOKENS or not math.isfinite(out_mean):
        raise ValueError(
            f"output_mean_tokens must be >= {MIN_OUTPUT_TOKENS}, got {output_mean_tokens!r}"
        )
    rng = random.Random(f"{w.name}:{seed}")
    names = [t[0] for t in w.tools]
    weights = [t[3] for t in w.tools]
    programs = []
    for i in range(n):
        n_turns = max(w.min_turns, round(rng.gauss(w.turns_mean, w.turns_sd)))
        # One trace: per turn, the tokens appended before it, its output, the tool it calls.
        grow = [w.first_prompt_tokens] + [
            max(1, int(_lognormal(rng, w.observation_mean_tokens, w.observation_sigma)))
            for _ in range(n_turns - 1)
        ]
        outputs = [
            max(MIN_OUTPUT_TOKENS, int(rng.expovariate(1.0 / out_mean))) for _ in range(n_turns)
        ]
        # What the next prompt keeps of an output: the visible action (hidden reasoning is
        # not sent back), never more than was generated.
        kept = [min(o, max(1, int(rng.expovariate(1.0 / w.action_mean_tokens)))) for o in outputs]
        if keep_whole_output:
            kept = outputs
        calls = []
        for _ in range(n_turns):
            tool = rng.choices(names, weights)[0]
            _, median_s, sigma, _ = w.tools[names.index(tool)]
            calls.append((tool, median_s * math.exp(rng.gauss(0.0, sigma))))
        programs.append(
            Program(f"{w.name}-{i}", _turns(grow, outputs, kept, calls, turn_scale, block_tokens))
        )
    return programs


def _turns(
    grow: list[int],
    outputs: list[int],
    kept: list[int],
    calls: list[tuple[str, float]],
    k: int,
    block_tokens: int,
) -> tuple[Turn, ...]:
    """The trace repeated ``k`` times with its token counts divided by ``k`` (at least 1); the
    context keeps growing across repetitions and the tool between two repetitions is the
    trace's first.  The last turn ends the program (tool ``None``)."""
    turns: list[Turn] = []
    ctx = 0
    n = len(grow)
    for rep in range(k):
        for j in range(n):
            ctx += max(1, grow[j] // k)
            out = max(1, outputs[j] // k)
            first = not turns
            # Turn j follows call j − 1's tool; a repetition's first turn follows call 0's.
            prev_tool_s = 0.0 if first else calls[j - 1 if j else 0][1]
            last = rep == k - 1 and j == n - 1
            tool = None if last else calls[j if j < n - 1 else 0][0]
            reusable = 0 if first else turns[-1].input_tokens // block_tokens
            turns.append(Turn(ctx, out, reusable, prev_tool_s, tool))
            ctx += max(1, kept[j] // k)
    return tuple(turns)


def describe(programs: list[Program]) -> dict[str, tuple[float, float]]:
    """(mean, sd) of turns, tool seconds and prompt tokens per program — Table 2's columns."""

    def ms(xs: list[float]) -> tuple[float, float]:
        m = sum(xs) / len(xs)
        return m, math.sqrt(sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1))

    tool_s = [t.think_s for p in programs for t in p.turns[1:]]
    return {
        "turns": ms([float(len(p.turns)) for p in programs]),
        "tool_s": ms(tool_s),
        "prompt_tokens": ms([float(sum(t.input_tokens for t in p.turns)) for p in programs]),
    }
