"""Programs told from the prompt for SGLang requests that name none
(``TTLPOLICY_INFER_PROGRAMS=1``): ``ttlpolicy.serving.inferred.InferredPrograms`` (the same as
vLLM's and the Ray router's) reads hashes of the request's token ids' prefixes, one per block.

Why hash the tokens rather than read the radix tree's match: the tree holds no chained hashes
(it hashes pages only for its storage tier, when one is configured), its nodes split and are
evicted, and a program must be told even when its context was evicted (that is when a pin
would have helped: its next turns are then pinned).  The tokens are what the tree keys on, so
a request linked to a program is one whose prompt the tree would match against that
program's turn.  The hash block is ``HASH_BLOCK_TOKENS`` tokens whatever the page size
(SGLang's default page is one token: a hash per token would cost 16 times as much for nothing
the linker needs; vLLM's default block is 16).  Cost: the prompt's bytes hashed once at
arrival and once at finish (``PrefixHashes``: in C, in large pieces).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from ttlpolicy.serving.inferred import PrefixHashes

__all__ = ["HASH_BLOCK_TOKENS", "token_hashes"]

#: Tokens per hashed block.
HASH_BLOCK_TOKENS = 16
_TOKEN_BYTES = 8  # int64, as ``array("q")``


def token_hashes(*token_ids: Sequence[int]) -> PrefixHashes:
    """The prefix hashes of the tokens of ``token_ids`` (concatenated: prompt, then output),
    in whole blocks of ``HASH_BLOCK_TOKENS``."""
    tokens = array("q")
    for ids in token_ids:
        tokens.extend(ids)
    return PrefixHashes(tokens.tobytes(), HASH_BLOCK_TOKENS * _TOKEN_BYTES)
