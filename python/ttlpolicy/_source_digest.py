"""The digest of the native module's sources in a checkout, as ``bindings/build.rs`` computes
it when it builds ``ttlpolicy._native`` (the same files and encoding: change both).

``_backend.py`` compares the two so that a native module built from other sources (an
earlier commit's build left in the package folder) is refused at import, not run silently.
Only where the sources lie beside the package, as in a clone; an installed package has none
and its module was built with it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Folders whose ``.rs`` files count, and single files, relative to the repository root.
DIRS = ("rust/src", "bindings/src")
FILES = ("python/ttlpolicy/_native.pyi",)


def checkout_root() -> Path | None:
    """The repository root this package lies in, or None when installed elsewhere."""
    root = Path(__file__).resolve().parents[2]
    if all((root / d).is_dir() for d in DIRS) and (root / "bindings" / "build.rs").is_file():
        return root
    return None


def source_digest(root: Path) -> str:
    """SHA-256 over (path relative to ``root``, NUL, content, NUL) of each file, in path
    order (byte order of the UTF-8 paths, as Rust sorts its strings)."""
    files = [p for d in DIRS for p in (root / d).rglob("*.rs") if p.is_file()]
    files += [root / f for f in FILES]
    named = sorted(
        ((p.relative_to(root).as_posix(), p) for p in files),
        key=lambda item: item[0].encode("utf-8"),
    )
    h = hashlib.sha256()
    for rel, path in named:
        h.update(rel.encode("utf-8") + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
