"""The SGLang plug-in: ``pip install ttlpolicy-sglang``, then ``--radix-cache-backend ttlpolicy``.

SGLang's launcher, engine and each scheduler process call ``load_plugins()``, which runs every
``sglang.srt.plugins`` entry point (``SGLANG_PLUGINS`` filters them by name): ``register``
registers the ``ttlpolicy`` radix-cache backend, the waiting-queue ordering hook, the
load-control hook on the prefill admission and the hook that reads an agent client's session
headers (``headers.py``).  All are inert unless the server is started with
the backend selected.  With ``TTLPOLICY_RECORD`` set, a hook on the tree's release records
the calls served, with or without the backend (``recording``).
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.srt.mem_cache.registry import (
    create_unified_radix_cache,
    default_radix_cache_factory,
    get_radix_cache_factory,
    register_radix_cache_backend,
)
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from ttlpolicy.serving.knobs import record_from_env

from .cache import TTLRadixCache
from .headers import BACKEND, ROUTING_KEY_TARGET, routing_key_from_session
from .ordering import ADMISSION_TARGET, TARGET, admit_by_program, calc_priority_by_program
from .recording import RECORD_TARGET, record_on_release

__all__ = ["BACKEND", "build_cache", "register"]

logger = logging.getLogger("sglang.ttlpolicy")


def build_cache(ctx: Any) -> Any:
    """The radix-cache factory: a ``TTLRadixCache`` through SGLang's own builder (which keeps
    the host-tier and linker wiring).  With the radix cache disabled there is nothing to keep
    and the stock selection runs."""
    if ctx.disable_radix_cache:
        logger.warning("ttlpolicy: radix cache disabled, running the stock cache (no pins)")
        return default_radix_cache_factory(ctx)
    return create_unified_radix_cache(ctx, cache_class=TTLRadixCache)


def register() -> None:
    """Entry point of ``sglang.srt.plugins``; idempotent (SGLang may load plug-ins twice in
    one process)."""
    if get_radix_cache_factory(BACKEND) is None:
        register_radix_cache_backend(BACKEND, build_cache)
        HookRegistry.register(TARGET, calc_priority_by_program, HookType.AROUND)
        HookRegistry.register(ADMISSION_TARGET, admit_by_program, HookType.AROUND)
        HookRegistry.register(ROUTING_KEY_TARGET, routing_key_from_session, HookType.AROUND)
        if record_from_env() is not None:  # (a bad value stops the start)
            HookRegistry.register(RECORD_TARGET, record_on_release, HookType.AROUND)
