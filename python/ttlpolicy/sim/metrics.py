"""What a simulation run measured, and its summary row."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Metrics:
    program_start_s: dict[str, float] = field(default_factory=dict)
    program_finish_s: dict[str, float] = field(default_factory=dict)
    program_think_s: dict[str, float] = field(default_factory=dict)  # tool + human gaps
    ttfts_s: list[float] = field(default_factory=list)
    # Issue → first admission (the queue wait, prefill not included), per call: programs'
    # first calls; returning calls whose whole reusable prefix was still cached (GPU or CPU
    # tier); returning calls that had lost some of it.  Where a policy's JCT goes.
    first_waits_s: list[float] = field(default_factory=list)
    return_waits_kept_s: list[float] = field(default_factory=list)
    return_waits_lost_s: list[float] = field(default_factory=list)
    calls_done: int = 0
    input_tokens: int = 0
    hit_tokens: int = 0  # prompt tokens served from cache (GPU, or reloaded from CPU)
    reloaded_tokens: int = 0
    recomputed_tokens: int = 0  # computed before and computed again (cache lost, preemption)
    prefill_tokens: int = 0
    output_tokens: int = 0
    preemptions: int = 0
    pinned_block_s: float = 0.0
    # of which the blocks no call read: pins released before their program's next call, and
    # the blocks beyond what that call's prompt found (``pin_ledger``); per program too
    pinned_in_vain_block_s: float = 0.0
    in_vain_by_program: dict[str, float] = field(default_factory=dict)
    evicted_blocks: int = 0
    offloaded_blocks: int = 0
    makespan_s: float = 0.0
    # Returns whose tool ran longer than reloading their reusable prefix from the CPU tier,
    # and those of them that found it all on the GPU at arrival (what a prefetch ahead of
    # the predicted return is for; issue 46)
    long_returns: int = 0
    long_returns_on_gpu: int = 0

    @property
    def programs_done(self) -> int:
        return len(self.program_finish_s)

    def program_started(self, program_id: str, now: float) -> None:
        if program_id in self.program_start_s:
            raise ValueError(f"program {program_id!r} started twice: program ids must be unique")
        self.program_start_s[program_id] = now

    def program_finished(self, program_id: str, now: float, think_s: float = 0.0) -> None:
        self.program_finish_s[program_id] = now
        self.program_think_s[program_id] = think_s

    def call_finished(self, program_id: str, now: float) -> None:
        self.calls_done += 1

    def ttft(self, seconds: float) -> None:
        self.ttfts_s.append(seconds)

    def queued(self, returning: bool, cache_lost: bool, wait_s: float) -> None:
        """A call was admitted for the first time ``wait_s`` after it was issued."""
        if not returning:
            self.first_waits_s.append(wait_s)
        elif cache_lost:
            self.return_waits_lost_s.append(wait_s)
        else:
            self.return_waits_kept_s.append(wait_s)

    def long_return(self, on_gpu: bool) -> None:
        """A returning call whose tool outlasted its prefix's reload arrived; ``on_gpu``: it
        found that prefix on the GPU, fully copied."""
        self.long_returns += 1
        if on_gpu:
            self.long_returns_on_gpu += 1

    def absorb(self, other: Metrics) -> None:
        """Adds ``other``'s programs, calls and counters to these (runs of disjoint programs,
        e.g. each program on an engine of its own: the ``alone`` bound); the makespan is the
        later of the two."""
        for program_id, start_s in other.program_start_s.items():
            self.program_started(program_id, start_s)
        self.program_finish_s.update(other.program_finish_s)
        self.program_think_s.update(other.program_think_s)
        for name in ("ttfts_s", "first_waits_s", "return_waits_kept_s", "return_waits_lost_s"):
            getattr(self, name).extend(getattr(other, name))
        for name in (
            "calls_done",
            "input_tokens",
            "hit_tokens",
            "reloaded_tokens",
            "recomputed_tokens",
            "prefill_tokens",
            "output_tokens",
            "preemptions",
            "pinned_block_s",
            "pinned_in_vain_block_s",
            "evicted_blocks",
            "offloaded_blocks",
            "long_returns",
            "long_returns_on_gpu",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for program, block_s in other.in_vain_by_program.items():
            self.in_vain_by_program[program] = self.in_vain_by_program.get(program, 0.0) + block_s
        self.makespan_s = max(self.makespan_s, other.makespan_s)

    def completion_times_s(self) -> np.ndarray:
        return np.array(
            [self.program_finish_s[p] - self.program_start_s[p] for p in self.program_finish_s],
            dtype=float,
        )

    def summary(self) -> dict[str, float]:
        jct = self.completion_times_s()
        kept = self.return_waits_kept_s
        returns = len(kept) + len(self.return_waits_lost_s)
        span = self.makespan_s or 1.0
        return {
            "programs": float(len(jct)),
            # what was served: the figures a recording of live traffic is checked against
            "calls": float(self.calls_done),
            "input_tokens": float(self.input_tokens),
            "output_tokens": float(self.output_tokens),
            "hit_tokens": float(self.hit_tokens),
            "jct_mean_s": float(jct.mean()) if len(jct) else 0.0,
            "jct_p50_s": float(np.percentile(jct, 50)) if len(jct) else 0.0,
            "jct_p95_s": float(np.percentile(jct, 95)) if len(jct) else 0.0,
            # completion time less the program's own tool/human gaps: time spent on the engine
            "engine_mean_s": float(
                np.mean(
                    [
                        self.program_finish_s[p]
                        - self.program_start_s[p]
                        - self.program_think_s.get(p, 0.0)
                        for p in self.program_finish_s
                    ]
                )
            )
            if len(jct)
            else 0.0,
            "ttft_mean_s": float(np.mean(self.ttfts_s)) if self.ttfts_s else 0.0,
            "wait_first_call_s": _mean(self.first_waits_s),
            "wait_return_kept_s": _mean(self.return_waits_kept_s),
            "wait_return_lost_s": _mean(self.return_waits_lost_s),
            "returns_kept": len(kept) / returns if returns else 0.0,
            "throughput_tok_s": self.output_tokens / span,
            "hit_rate": self.hit_tokens / self.input_tokens if self.input_tokens else 0.0,
            "recomputed_tokens": float(self.recomputed_tokens),
            "pinned_block_s": self.pinned_block_s,
            "pinned_in_vain_block_s": self.pinned_in_vain_block_s,
            "long_returns": float(self.long_returns),
            "long_returns_on_gpu": self.long_returns_on_gpu / self.long_returns
            if self.long_returns
            else 0.0,
            "preemptions": float(self.preemptions),
            "makespan_s": self.makespan_s,
        }


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0
