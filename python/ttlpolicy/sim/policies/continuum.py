"""Continuum as its authors' public code does it (github.com/Hanchenli/vllm-continuum,
arXiv 2511.02230): when a call ends in a tool call, pin its blocks for 2 s if that tool's mean
observed duration is at most 2 s, else not at all; schedule waiting calls program-level FCFS
(by the program's first arrival)."""

from __future__ import annotations

from ..call import Call
from .base import PinningPolicy, ToolMeans

PIN_S = 2.0


class Continuum(PinningPolicy):
    name = "continuum"

    def __init__(self) -> None:
        super().__init__()
        # Unseen tools: the code starts from no history, i.e. no reason to pin.
        self.means = ToolMeans(prior_s=float("inf"))

    def key(self, call: Call) -> tuple:
        return (call.program_arrival_s, call.issue_s)

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        return super().arrive(call, now)

    def ttl_s(self, call: Call, now: float, chain_blocks: int) -> float:
        return PIN_S if self.means.mean_s(call.turn.tool) <= PIN_S else 0.0
