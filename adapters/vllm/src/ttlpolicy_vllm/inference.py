"""Programs told from the prompt, for requests that name none (``TTLPOLICY_INFER_PROGRAMS=1``).

Most agent clients send no program id, yet each call's prompt extends its previous call's,
and vLLM hashes prompts into chained blocks.  ``ttlpolicy.serving.inferred.InferredPrograms``
(shared with SGLang and the Ray router) links them with ``ttlpolicy.ProgramLinker`` and names
the program ``"\\x00linked:<key>"`` within the request's tenant; this module only hands it
vLLM's block hashes (the first 8 bytes of each, read lazily: the linker probes a few).
"""

from __future__ import annotations

from collections.abc import Sequence

from ttlpolicy.serving.inferred import NO_TENANT, HashView, InferredPrograms

__all__ = ["NO_TENANT", "BlockHashes", "InferredPrograms"]


class BlockHashes(HashView):
    """vLLM's block hashes (bytes) as the 64-bit ints the linker reads, converted on access."""

    def __init__(self, hashes: Sequence[bytes]) -> None:
        self._hashes = hashes

    def __len__(self) -> int:
        return len(self._hashes)

    def item(self, k: int) -> int:
        return int.from_bytes(bytes(self._hashes[k])[:8], "little")
