"""Prompt text from block hashes: equal hash ids give equal text, so two calls share exactly the
prefix their trace's block hashes say.

A block of ``block_tokens`` tokens is ``block_tokens`` words, each a space and a common
lower-case English word, chosen from ``WORDS`` by a SHAKE-256 stream of (salt, block id).  Why
words: BPE tokenizers (GPT-2, tiktoken, Llama 3, Qwen, Mistral's SentencePiece) split text at
spaces before merging, so no token spans two words and a prefix of words is a prefix of tokens
whatever the tokenizer; and words this frequent are single tokens in those vocabularies, so a
block is ``block_tokens`` tokens.  What is exact and what is not:

* shared prefixes are exact at the word level: calls whose first k block ids are equal send
  the same first k·block_tokens words, hence the same tokens; a call's first differing block
  differs from its word 1 on with probability 1 - 1/256 (a random word can repeat by chance,
  which extends a shared prefix by a token, rarely a whole engine block);
* token counts are exact where each word is one token; a server that adds a BOS token shifts
  every block by one (the shared prefix stays shared; the engine's cached blocks are those it
  covers whole).  The replay reports the measured difference (``usage.prompt_tokens`` minus
  the trace's input tokens) so a model whose vocabulary splits these words is seen;
* the model's generated text is not fed back: a call's context is rebuilt from the trace's
  hashes, so blocks the previous call generated are new to the server (prefill) as they would
  be to any replay that does not reproduce the original outputs.

Tokens past a call's block hashes (its last partial block, or a trace without hashes) are
words unique to the call (``call_key``), shared with no other call.

A warm shared prefix (``replay --warm-prefix``): a call's first ``common_blocks`` blocks are
the common prefix's (``common_block_words``: by position, under the run's salt alone), the same
text in every program and every copy, as tool definitions and a system prompt are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

#: 256 of the most frequent English words (one byte of the SHAKE stream picks one): words
#: this common are single tokens, with their leading space, in the usual BPE vocabularies.  Not
#: checked against any tokenizer here (none ships offline): the replay measures the count.
_WORD_TEXT = (
    "the of and to in is that for it as with was on be at by this had not are but from or "
    "have an they which one you were her all she there would their we him been has when "
    "who will more no if out so said what up its about into than them can only other new "
    "some could time these two may then do first any my now such like our over man me "
    "even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never "
    "day same another know while last might us great old year off come since against go "
    "came right used take three use tell does set put end why ask went read need land "
    "home move try kind hand again change play air away house point page letter mother "
    "answer found study learn high every near add food below country plant school father "
    "keep tree start city earth eye light thought head story saw left few along close "
    "something seem next hard open example begin always paper together got group often "
    "run important until children side feet car night walk white sea began grow took "
    "river four carry once book hear stop without second later miss idea enough eat face "
    "watch far really almost let above girl sometimes young talk soon list song"
)
WORDS: tuple[str, ...] = tuple(" " + w for w in _WORD_TEXT.split())
assert len(WORDS) == 256 and len(set(WORDS)) == 256

#: Longest text one call may be built into, in words (a bound on memory per call).
MAX_PROMPT_WORDS = 2_000_000


def _words(seed: bytes, n: int) -> list[str]:
    return [WORDS[b] for b in hashlib.shake_256(seed).digest(n)]


def block_words(salt: str, block_id: int, block_tokens: int) -> list[str]:
    """The words of the block with id ``block_id`` (a 64-bit integer) under ``salt``."""
    return _words(b"b\0" + salt.encode() + b"\0" + block_id.to_bytes(8, "little", signed=True),
                  block_tokens)  # fmt: skip


def common_block_words(salt: str, index: int, block_tokens: int) -> list[str]:
    """The words of block ``index`` of the warm shared prefix under ``salt``."""
    return _words(b"w\0" + salt.encode() + b"\0" + index.to_bytes(8, "little"), block_tokens)


def prompt_words(
    salt: str,
    hash_ids: Sequence[int],
    input_tokens: int,
    block_tokens: int,
    call_key: str,
    *,
    common_blocks: int = 0,
    common_salt: str = "",
) -> list[str]:
    """The ``input_tokens`` words of a call: one block of words per hash id (as far as they
    go; the first ``common_blocks`` the shared prefix's under ``common_salt``), then words
    unique to ``call_key``."""
    if not 0 < input_tokens <= MAX_PROMPT_WORDS:
        raise ValueError(f"input_tokens must be in [1, {MAX_PROMPT_WORDS}], got {input_tokens}")
    words: list[str] = []
    if block_tokens > 0:
        for i, h in enumerate(hash_ids[: input_tokens // block_tokens]):
            if i < common_blocks:
                words.extend(common_block_words(common_salt, i, block_tokens))
            else:
                words.extend(block_words(salt, h, block_tokens))
    rest = input_tokens - len(words)
    if rest:
        seed = b"c\0" + salt.encode() + b"\0" + call_key.encode("utf-8", "surrogatepass")
        words.extend(_words(seed, rest))
    return words


def prompt_text(
    salt: str, hash_ids: Sequence[int], input_tokens: int, block_tokens: int, call_key: str
) -> str:
    """``prompt_words`` joined: the prompt sent to the server (no warm prefix)."""
    return "".join(prompt_words(salt, hash_ids, input_tokens, block_tokens, call_key))
