"""Programs told from the prompt, for requests that name none (``TTLPOLICY_INFER_PROGRAMS=1``):
what every place a request enters (vLLM's scheduler, SGLang's tree cache, the Ray router)
does the same way.

Most agent clients send no program id, yet each call's prompt extends its previous call's.
``ttlpolicy.ProgramLinker`` (the rule, in the library) says which recent turn end a request's
prompt block hashes (each naming the whole prefix up to its block) continue;
``InferredPrograms`` only hands it the hashes (ints, or bytes as vLLM's are), names the
program it answers ``"\\x00linked:<key>"`` within the request's tenant — a control
character no client id may hold, so no client can name an inferred program — and counts the
answer (``LINK_COUNTERS``: the metrics ``calls_linked``, ``calls_forked``,
``calls_new_program``). State: the live requests' links (bounded by the engine's own live
requests) and the linker's bounded turn ends.

Where an engine gives no chained block hashes (SGLang hashes pages only for its storage
tier; the Ray router sees text, not tokens), ``PrefixHashes`` makes hashes that serve the same:
the prompt's bytes (token ids as int64, or UTF-8 text) in whole chunks, item ``i`` the 64-bit
BLAKE2b of the bytes up to the end of chunk ``i`` — so it identifies the whole prefix up to
chunk ``i``, as the linker reads hashes.  Items are made on access (the linker reads a few):
the hash state is kept every ``CHECKPOINT_CHUNKS`` chunks, so the bytes up to the deepest item
read are hashed once (in C, in large pieces), and an item costs at most
``CHECKPOINT_CHUNKS`` chunks more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, overload

import ttlpolicy

from ..ids import INFERRED_PREFIX, ProgramInfo, program_key

__all__ = [
    "CHECKPOINT_CHUNKS",
    "LINK_COUNTERS",
    "NO_TENANT",
    "BlockHashSeq",
    "HashView",
    "InferredPrograms",
    "PrefixHashes",
    "count_link",
]

#: The linker's tenant for requests of no tenant (tenant keys are 32 hex digits).
NO_TENANT = "-"
#: The ``AdapterMetrics`` field (and Prometheus counter) each ``Link.kind`` moves.
LINK_COUNTERS = {"continue": "calls_linked", "fork": "calls_forked", "new": "calls_new_program"}
_DIGEST_BYTES = 8
#: What the linker reads as a prompt's block hashes: ints, or bytes (their first 8, as vLLM's).
BlockHashSeq = Sequence[int] | Sequence[bytes]
#: Chunks between two kept hash states of a ``PrefixHashes``.
CHECKPOINT_CHUNKS = 64


def count_link(metrics: Any, kind: str) -> None:
    """Count a link of ``kind`` in ``metrics`` (an ``AdapterMetrics``)."""
    name = LINK_COUNTERS[kind]
    setattr(metrics, name, getattr(metrics, name) + 1)


class HashView(Sequence[int]):
    """64-bit hashes made on access from what an engine holds (``item``), as the linker
    reads them: by index (negative from the end) or slice."""

    def item(self, k: int) -> int:
        """The hash at ``0 <= k < len(self)``."""
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        n = len(self)
        if isinstance(i, slice):
            return [self.item(k) for k in range(*i.indices(n))]
        k = i + n if i < 0 else i
        if not 0 <= k < n:
            raise IndexError(f"hash {i} out of range ({n} hashes)")
        return self.item(k)


class PrefixHashes(HashView):
    """The 64-bit hashes of ``data``'s prefixes that end at a whole ``chunk_bytes``-byte chunk
    (a partial last chunk is not hashed, as engines hash only full blocks), made on access."""

    def __init__(self, data: bytes, chunk_bytes: int) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, got {chunk_bytes}")
        self._data = memoryview(data)
        self._chunk = chunk_bytes
        self._len = len(data) // chunk_bytes
        # the hash state after m * CHECKPOINT_CHUNKS chunks, for each m reached so far
        self._states = [hashlib.blake2b(digest_size=_DIGEST_BYTES)]

    def __len__(self) -> int:
        return self._len

    def item(self, k: int) -> int:
        states, span = self._states, CHECKPOINT_CHUNKS * self._chunk
        m = k // CHECKPOINT_CHUNKS
        while len(states) <= m:  # the states up to ``k``'s, once
            h = states[-1].copy()
            h.update(self._data[(len(states) - 1) * span : len(states) * span])
            states.append(h)
        h = states[m].copy()
        h.update(self._data[m * span : (k + 1) * self._chunk])
        return int.from_bytes(h.digest(), "little")


class InferredPrograms:
    """Links requests without an id to programs, and tells the linker their turn ends.
    ``on_link`` is told each link's kind (an adapter counts it: ``count_link``); ``prefix``
    starts the programs' names (a router names its own apart from its engines')."""

    def __init__(
        self, on_link: Callable[[str], None] | None = None, prefix: str = INFERRED_PREFIX
    ) -> None:
        if not prefix.startswith("\x00"):
            raise ValueError(f"prefix must start with NUL (no client id can), got {prefix!r}")
        self.linker = ttlpolicy.ProgramLinker()
        # request id -> (linker tenant, key, its program)
        self._live: dict[str, tuple[str, Any, ProgramInfo]] = {}
        self._on_link = on_link
        self._prefix = prefix

    def _link(self, tenant: str | None, hashes: BlockHashSeq, now: float) -> tuple[str, Any]:
        t = tenant if tenant is not None else NO_TENANT
        link = self.linker.link(t, hashes, now)
        if self._on_link is not None:
            self._on_link(link.kind)
        return t, link.program

    def arrive(
        self, request_id: str, tenant: str | None, hashes: BlockHashSeq, now: float
    ) -> ProgramInfo:
        """The program of a request of ``tenant`` (a tenant key, None: none) whose prompt
        hashes are ``hashes``; it runs until ``finished`` or ``aborted``.  Asked again for a
        request that has not ended (an engine retrying one it could not track), the program
        it was linked to: a retry is not a new call."""
        live = self._live.get(request_id)
        if live is not None:
            return live[2]
        t, key = self._link(tenant, hashes, now)
        info = ProgramInfo(program_key(tenant, f"{self._prefix}{key}"), False, None)
        self._live[request_id] = (t, key, info)
        return info

    def routed(self, tenant: str | None, hashes: BlockHashSeq, now: float) -> ProgramInfo:
        """``arrive`` for a caller that sees no finish (a router): the prompt is recorded
        as its turn end at once, so the program's next call, extending it, links to it."""
        t, key = self._link(tenant, hashes, now)
        self.linker.finished(t, key, hashes, now)
        return ProgramInfo(program_key(tenant, f"{self._prefix}{key}"), False, None)

    def finished(
        self, request_id: str, hashes: BlockHashSeq, prompt_blocks: int, now: float
    ) -> None:
        """The request ended on its own: its turn end (``hashes``: prompt, then output) is
        recorded."""
        live = self._live.pop(request_id, None)
        if live is not None:
            n = min(prompt_blocks, len(hashes))
            self.linker.finished(live[0], live[1], hashes, now, n)

    def aborted(self, request_id: str, now: float) -> None:
        """The request ended without a turn end (aborted, preempted and stopped)."""
        live = self._live.pop(request_id, None)
        if live is not None:
            self.linker.finished(live[0], live[1], [], now)

    def tracks(self, request_id: str) -> bool:
        """Whether ``request_id`` was linked and has not ended (its finish is wanted)."""
        return request_id in self._live
