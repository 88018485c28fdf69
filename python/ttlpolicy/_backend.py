"""Which implementation serves the public names: the Rust core or the Python reference.

``rust`` when the native module loads, else ``python``; ``TTLPOLICY_BACKEND=python`` forces
the reference, ``TTLPOLICY_BACKEND=rust`` makes a missing native module an error.  In a
checkout, a native module built from other sources than the checkout's (``_source_digest``)
is refused with both digests named: it would serve another commit's rules.
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
    from ._source_digest import checkout_root, source_digest

    _root = checkout_root()
    _built = getattr(native, "SOURCE_DIGEST", None)
    if _root is not None and _built != "unknown":
        _here = source_digest(_root)
        if _built != _here:
            raise ImportError(
                f"ttlpolicy._native (version {getattr(native, '__version__', '?')}) was built "
                f"from sources {str(_built)[:16]}, but this checkout's are {_here[:16]} "
                f"({_root}): rebuild it (bash scripts/env.sh, or maturin develop --release), "
                "or set TTLPOLICY_BACKEND=python"
            )

    # The native TTLPolicy checks and builds configs of this class; the native module itself
    # imports nothing from the package.
    from .config import PolicyConfig

    native.set_config_class(PolicyConfig)

backend: str = "rust" if native is not None else "python"
