"""Which implementation serves the public names: the Rust core or the Python reference.

``rust`` when the native module loads, else ``python``; ``TTLPOLICY_BACKEND=python`` forces
the reference, ``TTLPOLICY_BACKEND=rust`` makes a missing native module an error.
"""

from __future__ import annotations

import os
from types import ModuleType

_requested = os.environ.get("TTLPOLICY_BACKEND", "").strip().lower()
if _requested not in ("", "rust", "python"):
    raise ImportError(f"TTLPOLICY_BACKEND must be 'rust' or 'python', got {_requested!r}")

native: ModuleType | None = None
if _requested != "python":
    try:
        from . import _native as native
    except ImportError:
        if _requested == "rust":
            raise
        native = None

if native is not None:
    # The native TTLPolicy checks and builds configs of this class; the native module itself
    # imports nothing from the package.
    from .config import PolicyConfig

    native.set_config_class(PolicyConfig)

backend: str = "rust" if native is not None else "python"
