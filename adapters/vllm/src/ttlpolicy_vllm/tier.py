"""What vLLM's CPU offload tier holds of a request, for GPU pin decisions.

With ``--kv-transfer-config`` naming the ``OffloadingConnector``, a finished request's
prefix is often already in the CPU tier (the connector stores blocks as they are computed).
Losing the GPU copy then costs a reload, not a prefill: ``TTLScheduler`` passes the tier's
share as ``offloaded_tokens`` to ``ProgramScheduler.finish``, and the library prices the miss
as ``min(prefill(all), reload(offloaded) + prefill(rest))`` (``CacheMissModel``; it needs
``offload_bandwidth_bytes_per_s`` in the ``PolicyConfig``, else a miss is a full prefill).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from .compat import LookupResult, ReqContext, make_offload_key, manager_lock


def offload_manager(connector: Any) -> tuple[Any, Any] | None:
    """(manager, first KV group's offload config) of an OffloadingConnector's scheduler
    side, or None when the engine has no such connector."""
    side = getattr(connector, "connector_scheduler", None)
    manager = getattr(side, "manager", None)
    groups = getattr(getattr(side, "config", None), "kv_group_configs", None)
    if manager is None or not groups:
        return None
    return manager, groups[0]


def offloaded_prefix_tokens(connector: Any, request: Any) -> int:
    """Leading tokens of ``request`` whose chunks the offload tier holds, ready to load
    (looked up as the connector does: one key per chunk, head first, until the first miss)."""
    found = offload_manager(connector)
    if found is None:
        return 0
    manager, group = found
    step = group.hashes_per_chunk
    ctx = ReqContext(request.request_id)
    chunks = 0
    # (a request finishes outside schedule(), where the connector holds no lock of its own)
    with manager_lock(manager):
        for block_hash in islice(request.block_hashes, step - 1, None, step):
            key = make_offload_key(block_hash, group.group_idx)
            if manager.lookup(key, ctx) is not LookupResult.HIT:
                break
            chunks += 1
    return chunks * group.tokens_per_chunk
