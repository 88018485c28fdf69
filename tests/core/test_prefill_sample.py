"""``step_prefill_sample``: a step's first chunks as one cache-miss-model sample."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.prefill_sample import step_prefill_sample

chunks = st.lists(st.tuples(st.integers(1, 1 << 20), st.integers(0, 1 << 30)), max_size=16)


@given(chunks)
def test_tokens_sum_and_cached_is_the_token_weighted_mean(first_chunks) -> None:
    tokens, cached = step_prefill_sample(first_chunks)
    assert tokens == sum(n for n, _ in first_chunks)
    if not first_chunks:
        assert cached == 0
        return
    mean = Fraction(sum(n * c for n, c in first_chunks), tokens)  # exact, then floored
    assert cached <= mean < cached + 1
    assert min(c for _, c in first_chunks) <= cached <= max(c for _, c in first_chunks)


def test_a_long_chunk_after_nothing_outweighs_a_short_one_after_a_long_prefix() -> None:
    # 2,000 tokens from scratch and 100 after 40,000 cached: (100 · 40,000) / 2,100
    assert step_prefill_sample([(2000, 0), (100, 40_000)]) == (2100, 1904)
