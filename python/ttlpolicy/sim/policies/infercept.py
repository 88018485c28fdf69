"""InferCept (Abhyankar et al., ICML'24, arXiv 2402.01869): when a call is intercepted by a
tool, keep its context the way that wastes least GPU memory·time (§4, "min-waste"):

* preserve:  W = T_int · C_i                      (the context sits idle for the tool time)
* discard:   W = T_fwd(C_i) · (C_i + C_other)     (recomputing stalls the whole batch)
* swap:      W = 2 · T_swap(C_i) · C_batch         (swap-out and swap-in stall the batch)

C_i is the call's context, C_other the rest of the running batch, C_batch both, T_int the
tool's estimated duration (its running mean; InferCept profiles it per augmentation type),
T_fwd the prefill time of C_i and T_swap its PCIe transfer time.  Preserved contexts are kept
until the program returns (reclaimed under memory pressure, most recent first); swapped ones
go to the CPU tier and are reloaded on return.  Scheduling is FCFS by original arrival.
Not modelled: chunked recomputation and the per-iteration swap budget.
"""

from __future__ import annotations

from collections import Counter

from ..call import Call
from ..interface import Verdict
from .base import PinningPolicy, ToolMeans, request_fcfs

#: preserved contexts end at the program's return; this bound only keeps every pin finite
PRESERVE_CAP_S = 24 * 3600.0


class InferCept(PinningPolicy):
    name = "infercept"
    uses_cpu_tier = True

    def __init__(self, prior_tool_s: float = 10.0) -> None:
        super().__init__()
        self.means = ToolMeans(prior_s=prior_tool_s)
        self.choices: Counter[str] = Counter()

    def key(self, call: Call) -> tuple:
        return request_fcfs(call)

    def arrive(self, call: Call, now: float) -> bool:
        if call.gap_s is not None:
            self.means.observe(call.prev_tool, call.gap_s)
        return super().arrive(call, now)

    def wastes(self, call: Call, chain_blocks: int) -> dict[str, float]:
        view = self.view
        assert view is not None
        b = view.config.block_tokens
        c_i = float(chain_blocks)
        c_other = float(view.running_blocks())  # the finishing call is already out of the batch
        tokens = chain_blocks * b
        t_int = self.means.mean_s(call.turn.tool)
        t_fwd = view.prefill_s(tokens)
        t_swap = view.hardware.transfer_s(tokens)
        return {
            "preserve": t_int * c_i,
            "discard": t_fwd * (c_i + c_other),
            "swap": 2.0 * t_swap * (c_i + c_other),
        }

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        if last_turn or chain_blocks == 0:
            return Verdict.FREE
        w = self.wastes(call, chain_blocks)
        choice = min(w, key=lambda k: (w[k], k))
        self.choices[choice] += 1
        if choice == "preserve":
            self.table.pin(call.program_id, now + PRESERVE_CAP_S, chain_blocks)
            return Verdict.PIN
        return Verdict.SWAP if choice == "swap" else Verdict.FREE

    def ttl_s(self, call: Call, now: float, chain_blocks: int) -> float:  # pragma: no cover
        raise AssertionError("InferCept decides in finished()")
