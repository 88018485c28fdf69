"""``ttlpolicy.replay``: plays a trace's agent programs against an OpenAI-compatible server
(vLLM, SGLang, Ray Serve LLM) and measures what the simulator predicts: completion time, TTFT,
throughput, cached tokens.  ``ttlpolicy replay`` is its command; docs/replay.md the guide.

* ``programs`` — the trace's programs (the simulator's, ``sim.workload``) with block hashes;
* ``prompts`` — text from block hashes (equal hashes, equal tokens);
* ``client`` — the HTTP client (standard library only);
* ``run`` — the scheduler of programs against one server;
* ``report`` — summaries, tables, A/B ratios;
* ``capacity`` — agents held under a TTFT bound.
"""

from __future__ import annotations

from .capacity import find_capacity
from .client import CallError, Client, Completion
from .programs import Call, ReplayProgram, Workload, load_programs
from .prompts import block_words, prompt_text, prompt_words
from .report import format_ratios, format_table, ratios, summary
from .run import Options, Replay, RunResult

__all__ = [
    "Call",
    "CallError",
    "Client",
    "Completion",
    "Options",
    "Replay",
    "ReplayProgram",
    "RunResult",
    "Workload",
    "block_words",
    "find_capacity",
    "format_ratios",
    "format_table",
    "load_programs",
    "prompt_text",
    "prompt_words",
    "ratios",
    "summary",
]
