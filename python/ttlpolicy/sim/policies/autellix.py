"""Autellix (Luo et al., 2025, arXiv 2502.13965): program-level least-attained-service.

A program's attained service is the engine time its finished calls have received; a waiting
call is placed in the multi-level queue of its program's attained service (level i holds
programs with service in [Q·2^(i-1), Q·2^i), level 0 below Q), lower levels first, FCFS by
call arrival within a level — so short programs are not stuck behind long ones.  Blocks are
freed at the end of each call as in vLLM.  Not modelled: Autellix's preemption of running
calls on demotion, and its multi-engine load balancer (one engine here).
"""

from __future__ import annotations

import math

from ..call import Call
from .base import QueuePolicy


class Autellix(QueuePolicy):
    name = "autellix"

    def __init__(self, quantum_s: float = 1.0, levels: int = 8) -> None:
        super().__init__()
        self.quantum_s = quantum_s
        self.levels = levels

    def level(self, attained_s: float) -> int:
        if attained_s < self.quantum_s:
            return 0
        return min(self.levels - 1, 1 + int(math.log2(attained_s / self.quantum_s)))

    def key(self, call: Call) -> tuple:
        return (self.level(call.prog.attained_s), call.issue_s)
