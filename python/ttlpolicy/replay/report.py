"""What a replay measured, as the summary ``ttlpolicy compare`` prints for a simulated policy
(where the same figure exists) plus what only a server can tell: its token counts, its cached
tokens against the hit an unbounded cache would give, and its errors.

Completion time is a program's arrival (when it was due) to its last call's end, its tool gaps
included; "on engine" leaves the gaps out.  Only finished programs count in completion times;
every answered call counts in TTFT, throughput and cached tokens.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .run import RunResult

#: (summary key, column title, format) of the table, after the server's name.
COLUMNS = (
    ("programs_finished", "done", "{:.0f}"),
    ("programs_failed", "failed", "{:.0f}"),
    ("jct_mean_s", "JCT mean s", "{:.2f}"),
    ("jct_p95_s", "p95 s", "{:.2f}"),
    ("engine_mean_s", "on engine s", "{:.2f}"),
    ("ttft_mean_s", "TTFT s", "{:.3f}"),
    ("ttft_p95_s", "TTFT p95 s", "{:.3f}"),
    ("throughput_tok_s", "out tok/s", "{:.1f}"),
    ("hit_rate", "cached", "{:.3f}"),
    ("ideal_hit_rate", "trace reuse", "{:.3f}"),
    ("errors", "errors", "{:.0f}"),
)
#: Keys whose B/A ratio ``ratios`` reports (lower is better for times, higher for the rest).
RATIO_KEYS = (
    "jct_mean_s",
    "jct_p95_s",
    "engine_mean_s",
    "ttft_mean_s",
    "ttft_p95_s",
    "throughput_tok_s",
    "hit_rate",
)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else math.nan


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else math.nan


def summary(r: RunResult) -> dict[str, Any]:
    finished = [p for p in r.programs if p.end_s is not None]
    jct = [p.end_s - p.arrival_s for p in finished if p.end_s is not None]
    engine = [p.end_s - p.arrival_s - p.gaps_s for p in finished if p.end_s is not None]
    calls = [c for p in r.programs for c in p.calls if c.error is None]
    ttft = [c.ttft_s for c in calls if c.ttft_s is not None]
    prompt = [c for c in calls if c.prompt_tokens is not None]
    cached = [c for c in calls if c.cached_tokens is not None]
    input_tokens = sum(c.input_tokens for c in calls)
    out_tokens = sum(c.completion_tokens or 0 for c in calls)
    return {
        "programs": len(r.programs),
        "programs_finished": len(finished),
        "programs_failed": sum(p.failed for p in r.programs),
        "calls": len(calls),
        "errors": sum(r.errors.values()),
        "errors_by_kind": dict(sorted(r.errors.items())),
        "stopped": r.stopped,
        "wall_s": r.wall_s,
        "jct_mean_s": _mean(jct),
        "jct_p50_s": _pct(jct, 50),
        "jct_p95_s": _pct(jct, 95),
        "engine_mean_s": _mean(engine),
        "ttft_mean_s": _mean(ttft),
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p95_s": _pct(ttft, 95),
        "ttft_p99_s": _pct(ttft, 99),
        "throughput_tok_s": out_tokens / r.wall_s if r.wall_s > 0 else math.nan,
        "input_tokens": input_tokens,
        "prompt_tokens": sum(c.prompt_tokens or 0 for c in prompt),
        # the server's token count less the trace's, per call: 0 when every word is a token
        # (1 for a BOS), more where the model's vocabulary splits the words (replay.prompts)
        "prompt_token_excess_mean": _mean(
            [float(c.prompt_tokens - c.input_tokens) for c in prompt if c.prompt_tokens]
        ),
        "cached_tokens": sum(c.cached_tokens or 0 for c in cached),
        # cached over prompt tokens, both as the server counted them
        "hit_rate": (
            sum(c.cached_tokens or 0 for c in cached)
            / max(1, sum(c.prompt_tokens or c.input_tokens for c in cached))
            if cached
            else math.nan
        ),
        "cached_reported_calls": len(cached),
        "ideal_hit_rate": (
            sum(c.ideal_cached_tokens for c in calls) / input_tokens if input_tokens else math.nan
        ),
    }


def program_rows(r: RunResult) -> list[dict[str, Any]]:
    """Per program: its completion time and its calls' figures (the JSON's detail)."""
    out = []
    for p in r.programs:
        out.append(
            {
                "program_id": p.program_id,
                "arrival_s": p.arrival_s,
                "completion_s": None if p.end_s is None else p.end_s - p.arrival_s,
                "gaps_s": p.gaps_s,
                "failed": p.failed,
                "calls": [
                    {
                        "turn": c.turn,
                        "start_s": c.start_s,
                        "latency_s": c.latency_s,
                        "ttft_s": c.ttft_s,
                        "input_tokens": c.input_tokens,
                        "prompt_tokens": c.prompt_tokens,
                        "cached_tokens": c.cached_tokens,
                        "ideal_cached_tokens": c.ideal_cached_tokens,
                        "completion_tokens": c.completion_tokens,
                        "error": c.error,
                    }
                    for c in p.calls
                ],
            }
        )
    return out


def ratios(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """B / A of the ``RATIO_KEYS`` (nan where A is 0 or either is missing)."""
    out = {}
    for k in RATIO_KEYS:
        x, y = a.get(k), b.get(k)
        ok = isinstance(x, float | int) and isinstance(y, float | int) and x and math.isfinite(x)
        out[k] = float(y) / float(x) if ok and math.isfinite(float(y)) else math.nan  # type: ignore[arg-type]
    return out


def format_table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """One row per (server name, ``summary``)."""
    head = ["server"] + [title for _, title, _ in COLUMNS]
    body = [
        [name] + [("-" if _missing(s.get(k)) else fmt.format(s[k])) for k, _, fmt in COLUMNS]
        for name, s in rows
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [head, ["-" * w for w in widths], *body]
    ]
    return "\n".join(lines)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def format_ratios(r: dict[str, float]) -> str:
    titles = {k: t for k, t, _ in COLUMNS}
    return "B / A: " + ", ".join(
        f"{titles.get(k, k)} {'-' if math.isnan(v) else f'{v:.3f}'}" for k, v in r.items()
    )


def json_safe(x: Any) -> Any:
    """nan → None, so the file is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x
