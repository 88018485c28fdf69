"""Recording SGLang's traffic as sessions the simulator reads (``TTLPOLICY_RECORD=DIR``).

The plug-in wraps ``UnifiedRadixCache.on_release`` (an AROUND hook, installed only when the
knob is set): every request SGLang releases passes there, and one that finished on its own is
handed to the library's recorder (``ttlpolicy.serving.record``: the format, the keyed hashes,
the rotation).  Because the hook is on SGLang's own tree, it records stock SGLang (no
``--radix-cache-backend``, to record before switching) and ``--radix-cache-backend ttlpolicy``
(``TTLRadixCache`` calls it through ``super()``) alike.  Aborted and retracted releases are
not recorded (the simulator has no aborts; a retracted request is released again at its end).

Per call: the program and tool as ``identity.program_of`` reads them (else the program the
adapter inferred, ``INFERRED_PROGRAM_ATTR``), the tenant, the arrival
(when the scheduler received the request: ``time_stats.scheduler_recv_time``) and finish, the
prompt and output tokens, SGLang's own ``cached_tokens`` (what it reports in ``usage``), and
the prompt's blocks.  SGLang keys its tree by tokens, not block hashes, so the prompt's blocks
are named here: chained BLAKE2 digests of its token ids, one per full block of the
simulator's 64 tokens.  They are computed by the recorder's writer thread (``TokenBlocks`` is
lazy), not on the scheduler's thread.  With tensor parallelism every rank's scheduler sees the
same requests: only attention-TP rank 0 records.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any, overload

from sglang.srt.managers.schedule_batch import FINISH_ABORT

from ttlpolicy.ids import Tenancy
from ttlpolicy.serving import Recorder, RecordSettings
from ttlpolicy.serving.knobs import record_from_env, tenancy_from_env
from ttlpolicy.serving.record import RECORD_BLOCK_TOKENS

from .identity import program_of

#: What the plug-in wraps when ``TTLPOLICY_RECORD`` is set (SGLang 0.5.23).
RECORD_TARGET = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.on_release"
#: The tree cache's attribute holding its ``CallLog`` (made at its first release).
CALL_LOG_ATTR = "ttl_call_log"
#: A request's attribute naming the program the adapter inferred for it (a ``ProgramInfo``,
#: ``TTLPOLICY_INFER_PROGRAMS=1``), recorded when the request names none.
INFERRED_PROGRAM_ATTR = "ttl_inferred_program"
_BLOCK_DIGEST_BYTES = 16


class TokenBlocks(Sequence[bytes]):
    """The chained digests of a prompt's full blocks of ``block_tokens`` token ids (block
    ``i``'s digest covers blocks ``0..i``, as engines chain block hashes), computed when first
    read: the recorder reads them in its writer thread."""

    def __init__(self, token_ids: Sequence[int], block_tokens: int = RECORD_BLOCK_TOKENS):
        self.token_ids, self.block_tokens = token_ids, block_tokens
        self._digests: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.token_ids) // self.block_tokens

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if self._digests is None:
            self._digests = self._chain()
        return self._digests[index]

    def _chain(self) -> list[bytes]:
        ids, n = self.token_ids, self.block_tokens
        if not (isinstance(ids, array) and ids.typecode == "q"):
            ids = array("q", ids)  # (a list from the tokenizer)
        raw = memoryview(ids).cast("B")
        step = n * ids.itemsize
        digests, prev = [], b""
        for start in range(0, len(self) * step, step):
            h = hashlib.blake2b(prev, digest_size=_BLOCK_DIGEST_BYTES)
            h.update(raw[start : start + step])
            prev = h.digest()
            digests.append(prev)
        return digests


class CallLog:
    """The recorder of one tree cache: ``released`` writes a finished request (times on
    ``clock``, which tests may replace)."""

    def __init__(self, settings: RecordSettings, tenancy: Tenancy) -> None:
        self.clock: Callable[[], float] = time.monotonic
        self.recorder = Recorder(
            settings, engine_block_tokens=RECORD_BLOCK_TOKENS, clock=lambda: self.clock()
        )
        self.tenancy = tenancy

    def released(self, req: Any) -> None:
        if req.finished() and not isinstance(req.finished_reason, FINISH_ABORT):
            info = program_of(req, self.tenancy) or getattr(req, INFERRED_PROGRAM_ATTR, None)
            params = getattr(req.sampling_params, "custom_params", None)
            now = self.clock()
            # (SGLang stamps the arrival on perf_counter's clock)
            waited_s = time.perf_counter() - req.time_stats.scheduler_recv_time
            self.recorder.call(
                program_id=None if info is None else info.program_id,
                tenant=self.tenancy.tenant(
                    getattr(req, "cache_salt", None), params if isinstance(params, dict) else {}
                ),
                arrival_s=now - max(0.0, waited_s),
                finish_s=now,
                prompt_tokens=len(req.origin_input_ids),
                output_tokens=len(req.output_ids),
                cached_tokens=int(req.cached_tokens),
                block_hashes=TokenBlocks(req.origin_input_ids),
                tool=None if info is None else info.tool,
                last_turn=info is not None and info.last_turn,
            )

    def close(self) -> None:
        self.recorder.close()


def _records_here() -> bool:
    """Whether this scheduler process records: attention-TP rank 0 (the others see the same
    requests).  Without published ranks (a single process, the tests): yes."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().attn_tp_rank) == 0
    except Exception:  # (not published: one process)
        return True


def call_log_of(cache: Any) -> CallLog | None:
    """The ``CallLog`` of a tree cache, made at its first use from ``TTLPOLICY_RECORD``
    (None: not recording here, remembered)."""
    log: CallLog | None = getattr(cache, CALL_LOG_ATTR, None)
    if log is None and not hasattr(cache, CALL_LOG_ATTR):
        settings = record_from_env()
        log = CallLog(settings, tenancy_from_env()) if settings and _records_here() else None
        setattr(cache, CALL_LOG_ATTR, log)
    return log


def record_on_release(
    original: Callable[..., Any], cache: Any, req: Any, *args: Any, **kwargs: Any
) -> Any:
    """The AROUND hook on ``UnifiedRadixCache.on_release``: SGLang's release, then the record."""
    result = original(cache, req, *args, **kwargs)
    log = call_log_of(cache)
    if log is not None:
        log.released(req)
    return result
