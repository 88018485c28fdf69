"""``ttlpolicy.serving.inferred``: the prefix hashes the adapters make where an engine gives
none, and ``InferredPrograms``, which every place a request enters links through."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.ids import INFERRED_PREFIX, program_key, tenant_key
from ttlpolicy.serving import AdapterMetrics
from ttlpolicy.serving.inferred import (
    CHECKPOINT_CHUNKS,
    InferredPrograms,
    PrefixHashes,
    count_link,
)

CHUNK = 4


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_a_prefix_hashes_to_the_first_items(head: bytes, tail: bytes) -> None:
    whole, part = PrefixHashes(head + tail, CHUNK), PrefixHashes(head, CHUNK)
    assert len(part) == len(head) // CHUNK and len(whole) == len(head + tail) // CHUNK
    assert list(whole)[: len(part)] == list(part)


@given(st.binary(min_size=2 * CHUNK, max_size=64), st.binary(min_size=CHUNK, max_size=CHUNK))
def test_an_item_names_its_whole_prefix(data: bytes, other: bytes) -> None:
    """Changing the first chunk changes every item (each names its whole prefix)."""
    changed = other + data[CHUNK:]
    if changed[:CHUNK] != data[:CHUNK]:
        a, b = PrefixHashes(data, CHUNK), PrefixHashes(changed, CHUNK)
        assert all(x != y for x, y in zip(a, b, strict=True))


def digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@pytest.mark.parametrize("chunks", [3, CHECKPOINT_CHUNKS, 2 * CHECKPOINT_CHUNKS + 5])
def test_items_are_the_prefix_digests_read_in_any_order(chunks: int) -> None:
    """Across the kept hash states too (``CHECKPOINT_CHUNKS``), read deepest first or not."""
    data = bytes(i % 251 for i in range(chunks * CHUNK + 1))
    for order in (range(chunks), reversed(range(chunks))):
        h = PrefixHashes(data, CHUNK)
        assert len(h) == chunks
        for k in order:
            assert h[k] == digest(data[: (k + 1) * CHUNK]), k
    h = PrefixHashes(data, CHUNK)
    assert h[-chunks] == h[0] and h[0:2] == [h[0], h[1]]
    with pytest.raises(IndexError):
        h[chunks]
    with pytest.raises(ValueError, match="chunk_bytes"):
        PrefixHashes(data, 0)


def test_links_turns_ends_and_counts() -> None:
    metrics = AdapterMetrics()
    inferred = InferredPrograms(lambda kind: count_link(metrics, kind))
    turn1 = PrefixHashes(bytes(range(64)), CHUNK)
    turn2 = PrefixHashes(bytes(range(64)) + b"answer and tool result...", CHUNK)
    tenant = tenant_key("salt-a")
    first = inferred.arrive("r1", tenant, turn1, 1.0)
    assert first.program_id.startswith(program_key(tenant, INFERRED_PREFIX))
    assert inferred.tracks("r1")
    inferred.finished("r1", turn2, len(turn1), 2.0)
    assert not inferred.tracks("r1")
    # the next call continues it; the same prompt from another tenant, or none, does not
    assert inferred.arrive("r2", tenant, turn2, 3.0) == first
    stranger = inferred.arrive("r3", tenant_key("salt-b"), turn2, 3.0)
    nobody = inferred.arrive("r4", None, turn2, 3.0)
    assert len({first.program_id, stranger.program_id, nobody.program_id}) == 3
    # a parallel call from the running program's context is a fork: a program of its own
    fork = inferred.arrive("r5", tenant, turn2, 3.0)
    assert fork != first
    counts = (metrics.calls_linked, metrics.calls_forked, metrics.calls_new_program)
    assert counts == (1, 1, 3)
    for rid in ("r2", "r3", "r4", "r5"):
        inferred.aborted(rid, 4.0)
    assert not any(inferred.tracks(rid) for rid in ("r2", "r3", "r4", "r5"))
    inferred.aborted("unknown", 4.0)  # (nothing to end)
    inferred.finished("unknown", turn2, 1, 4.0)


def test_a_retried_request_keeps_its_link() -> None:
    """An engine asks again for a request it could not track (SGLang, each pass): the
    program it was linked to, linked and counted once; once ended, it links anew."""
    metrics = AdapterMetrics()
    inferred = InferredPrograms(lambda kind: count_link(metrics, kind))
    turn1 = PrefixHashes(bytes(range(64)), CHUNK)
    tenant = tenant_key("salt-a")
    first = inferred.arrive("r1", tenant, turn1, 1.0)
    assert inferred.arrive("r1", tenant, turn1, 2.0) == first
    assert inferred.linker.program_count == 1 and metrics.calls_new_program == 1
    inferred.aborted("r1", 3.0)
    assert inferred.arrive("r1", tenant, turn1, 4.0) != first
    assert metrics.calls_new_program == 2


def test_routed_records_the_prompt_as_the_turn_end() -> None:
    """A router sees no finish: the call's next call, extending its prompt, links to it."""
    inferred = InferredPrograms()
    call1 = PrefixHashes(bytes(range(64)), CHUNK)
    call2 = PrefixHashes(bytes(range(64)) + bytes(32), CHUNK)
    first = inferred.routed(None, call1, 1.0)
    assert inferred.routed(None, call2, 2.0) == first
    assert inferred.routed(None, call2, 3.0) == first  # not a fork: nothing runs at a router
    assert inferred.routed(None, PrefixHashes(bytes(64), CHUNK), 4.0) != first


def test_the_prefix_names_the_programs_and_no_client_can() -> None:
    inferred = InferredPrograms(prefix="\x00routed:")
    info = inferred.routed(None, PrefixHashes(bytes(64), CHUNK), 1.0)
    assert info.program_id.startswith("\x00routed:")
    with pytest.raises(ValueError, match="prefix"):
        InferredPrograms(prefix="routed:")
