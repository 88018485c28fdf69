"""One engine step's prefill as one sample of the cache-miss model
(``TTLPolicy.observe_prefill``).

An engine times a step as a whole, so a step that starts several requests' prefill is one
sample: their first chunks summed, and the tokens cached before them as the token-weighted
mean (the model prices a chunk's attention over the prefix it follows).  The vLLM adapter
(``TTLScheduler``) and the simulator's ``ttlpolicy`` both form their samples here.
"""

from __future__ import annotations

from collections.abc import Iterable


def step_prefill_sample(first_chunks: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """``(tokens, cached_tokens)`` for ``observe_prefill`` from the first chunks a step ran,
    each ``(new tokens, tokens cached before it)``; ``(0, 0)`` when there are none."""
    tokens = weighted_cached = 0
    for new, cached in first_chunks:
        tokens += new
        weighted_cached += new * cached
    return tokens, (weighted_cached // tokens if tokens else 0)
