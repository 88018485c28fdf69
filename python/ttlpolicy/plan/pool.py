"""Where evaluations run: a local process pool (default), Ray when installed (``--ray``), or in
this process (``workers=1``).  Each worker builds its own ``Context`` once from the picklable
``Setup`` (the trace comes from the trace cache, so that costs a file read), then evaluates
configurations; the simulation is deterministic, so every backend returns the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

from .objectives import Config, Context, Setup

_CTX: Context | None = None


def _init(setup: Setup) -> None:
    global _CTX
    _CTX = Context(setup)


def _evaluate(cfg: Config) -> dict[str, float]:
    assert _CTX is not None, "worker not initialised"
    return _CTX.evaluate(cfg)


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


class LocalPool:
    """A process pool (``workers > 1``) or this process (``workers == 1``)."""

    name = "local"

    def __init__(self, setup: Setup, workers: int | None = None, context: Context | None = None):
        self.workers = workers or default_workers()
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        self._ctx = context
        self._exec: ProcessPoolExecutor | None = None
        if self.workers == 1:
            self._ctx = context or Context(setup)
        else:
            self._exec = ProcessPoolExecutor(self.workers, initializer=_init, initargs=(setup,))

    def imap(self, configs: Sequence[Config]) -> Iterator[dict[str, float]]:
        if self._exec is None:
            assert self._ctx is not None
            for c in configs:
                yield self._ctx.evaluate(c)
            return
        yield from self._exec.map(_evaluate, configs)

    def close(self) -> None:
        if self._exec is not None:
            self._exec.shutdown(cancel_futures=True)


class RayPool:
    """Ray actors, one per worker: a local Ray (``address=None``) or a running cluster.  On a
    cluster every node needs the trace at the same path (or a shared ``TTLPOLICY_CACHE``)."""

    name = "ray"

    def __init__(self, setup: Setup, workers: int | None = None, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise ValueError("--ray needs Ray: pip install 'ttlpolicy[ray]'") from None
        self._ray = ray
        self.workers = workers or default_workers()
        if not ray.is_initialized():
            kw = {"address": address} if address else {"num_cpus": self.workers}
            ray.init(include_dashboard=False, log_to_driver=False, **kw)

        @ray.remote
        class Worker:
            def __init__(self, setup: Setup) -> None:
                self.ctx = Context(setup)

            def evaluate(self, cfg: Config) -> dict[str, float]:
                return self.ctx.evaluate(cfg)

        self._actors = [Worker.remote(setup) for _ in range(self.workers)]  # type: ignore[attr-defined]

    def imap(self, configs: Sequence[Config]) -> Iterator[dict[str, float]]:
        refs = [
            self._actors[i % len(self._actors)].evaluate.remote(c) for i, c in enumerate(configs)
        ]
        for r in refs:
            yield self._ray.get(r)

    def close(self) -> None:
        for a in self._actors:
            self._ray.kill(a)
        self._actors = []
