"""A resumable record of evaluated configurations: one JSON line per evaluation, appended and
flushed as each finishes, under ``<cache root>/plan/<key>.jsonl`` (``traces.cache.cache_root``).
The key covers the trace (its cached form's digest), the setup, the price table's bytes and
the code that evaluates (``code_digest``: an upgrade or a local change to a rule starts a new
record instead of reusing figures of the old code), so a rerun after a crash — or with a wider
grid — evaluates only what is missing.  A torn last line (a crash mid-write) is ignored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TextIO

from ..traces.cache import cache_root
from .objectives import Config, Context

FORMAT_VERSION = 1


#: The installed package: its Python files and native module are the code a plan evaluates.
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@cache
def code_digest(package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 of the package's code: every ``*.py`` file and the native module, by relative
    path and bytes (a few MB, read once a process)."""
    h = hashlib.sha256()
    files = [
        *package_dir.rglob("*.py"),
        *package_dir.glob("_native*.so"),
        *package_dir.glob("_native*.pyd"),
    ]
    for path in sorted(files):
        h.update(str(path.relative_to(package_dir)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def key_of(ctx: Context, code: str | None = None) -> str:
    """The record's key; ``code``: the code's digest (default ``code_digest()``)."""
    prices = Path(ctx.prices.source).read_bytes()
    setup = asdict(ctx.setup)
    setup.pop("trace")  # the trace enters by content, below
    setup.pop("prices_path")
    code = code_digest() if code is None else code
    blob = json.dumps([FORMAT_VERSION, setup, ctx.trace.digest, code], sort_keys=True).encode()
    return hashlib.sha256(blob + prices).hexdigest()[:24]


class ResultCache:
    def __init__(self, key: str, enabled: bool = True) -> None:
        self.path = cache_root() / "plan" / f"{key}.jsonl"
        self.enabled = enabled
        self._done: dict[Config, dict[str, float]] = {}
        if enabled and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self._done[Config.from_json(row["config"])] = row["result"]
                except (ValueError, KeyError, TypeError):
                    continue
        self._fh: TextIO | None = None

    def __len__(self) -> int:
        return len(self._done)

    def get(self, cfg: Config) -> dict[str, float] | None:
        return self._done.get(cfg)

    def put(self, cfg: Config, result: dict[str, float]) -> None:
        self._done[cfg] = result
        if not self.enabled:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._fh.write(json.dumps({"config": cfg.to_json(), "result": result}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
