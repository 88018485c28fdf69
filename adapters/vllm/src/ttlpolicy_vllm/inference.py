"""Programs told from the prompt, for requests that name none (``TTLPOLICY_INFER_PROGRAMS=1``).

Most agent clients send no program id, yet each call's prompt extends its previous call's,
and vLLM hashes prompts into chained blocks.  ``ttlpolicy.ProgramLinker`` (the rule, in the
library) says which recent turn end a request continues; this module only hands it vLLM's
block hashes (the first 8 bytes of each, read lazily: the linker probes a few) and names the
program it answers ``"\\x00linked:<key>"`` within the request's tenant — a control character no
client id may hold, so no client can name an inferred program.  State: the live requests'
links (bounded by vLLM's own live requests) and the linker's bounded turn ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import ttlpolicy
from ttlpolicy.ids import ProgramInfo, program_key

#: The linker's tenant for requests of no tenant (tenant keys are 32 hex digits).
NO_TENANT = "-"


class BlockHashes(Sequence[int]):
    """vLLM's block hashes (bytes) as the 64-bit ints the linker reads, converted on access."""

    def __init__(self, hashes: Sequence[bytes]) -> None:
        self._hashes = hashes

    def __len__(self) -> int:
        return len(self._hashes)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return [int.from_bytes(bytes(h)[:8], "little") for h in self._hashes[i]]
        return int.from_bytes(bytes(self._hashes[i])[:8], "little")


class InferredPrograms:
    """Links requests without an id to programs, and tells the linker their turn ends."""

    def __init__(self) -> None:
        self.linker = ttlpolicy.ProgramLinker()
        self._live: dict[str, tuple[str, Any]] = {}  # request id -> (linker tenant, key)
        self.linked = {"continue": 0, "fork": 0, "new": 0}

    def arrive(
        self, request_id: str, tenant: str | None, block_hashes: Sequence[bytes], now: float
    ) -> ProgramInfo:
        t = tenant if tenant is not None else NO_TENANT
        link = self.linker.link(t, BlockHashes(block_hashes), now)
        self.linked[link.kind] += 1
        self._live[request_id] = (t, link.program)
        return ProgramInfo(program_key(tenant, f"\x00linked:{link.program}"), False, None)

    def finished(
        self, request_id: str, block_hashes: Sequence[bytes], prompt_blocks: int, now: float
    ) -> None:
        """The request ended on its own: its turn end is recorded."""
        live = self._live.pop(request_id, None)
        if live is not None:
            n = min(prompt_blocks, len(block_hashes))
            self.linker.finished(live[0], live[1], BlockHashes(block_hashes), now, n)

    def aborted(self, request_id: str, now: float) -> None:
        """The request ended without a turn end (aborted, preempted and stopped)."""
        live = self._live.pop(request_id, None)
        if live is not None:
            self.linker.finished(live[0], live[1], [], now)
