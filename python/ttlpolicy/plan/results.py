"""A resumable record of evaluated configurations: one JSON line per evaluation, appended and
flushed as each finishes, under ``<cache root>/plan/<key>.jsonl`` (``traces.cache.cache_root``).
The key covers the trace (its cached form's digest), the setup and the price table's bytes, so
a rerun after a crash — or with a wider grid — evaluates only what is missing.  A torn last
line (a crash mid-write) is ignored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from ..traces.cache import cache_root
from .objectives import Config, Context

FORMAT_VERSION = 1


def key_of(ctx: Context) -> str:
    prices = Path(ctx.prices.source).read_bytes()
    setup = asdict(ctx.setup)
    setup.pop("trace")  # the trace enters by content, below
    setup.pop("prices_path")
    blob = json.dumps([FORMAT_VERSION, setup, ctx.trace.digest], sort_keys=True).encode()
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
