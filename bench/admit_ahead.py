"""Load control that lets a younger program pass a head it refuses (issue 46, the throughput
gap; docs/investigations/2026-rivals.md, "A younger program past a refused head").

ttlpolicy's load control (``AdmissionControl.may_run``) admits programs first-come-first-served:
while the oldest waiting program is refused (``working + max(blocks, mean) > total``), every
younger one is refused too, whatever its own footprint.  This bench-side variant — not a rule
of the library, whose rule files stay as they are — asks instead, when the library's head is
refused, whether one of the next ``depth`` waiting calls (in the library's order: first calls
by program arrival) would fit by the same rule with its own footprint, ``working + max(its
blocks, mean) <= total``, and whose whole prompt fits in memory now; the first that does is
admitted (``AdmissionControl.admit``) and runs.  The head keeps its place and load control's
count of its refusals (and its bounded wait, ``MAX_TURNS_AHEAD``).  Starvation: one refused
head is passed at most ``max_passes`` times; after that only it may be admitted.

* ``ttlpolicy-offload[:variant]+admitskip=K[@P]`` — K calls looked at, P passes of one head
  at most (default ``DEFAULT_PASSES``);
* ``ttlpolicy-offload[:variant]+skip=S+admitskip=K[@P]`` — with ``skip_ahead``'s ``+skip=S``
  past a head too large for memory as well.

The footprint (each program's largest prompt or held chain, in blocks) and the mean over the
admitted programs are load control's; its object does not show them, so the policy keeps
them beside it from the same arrivals and finishes (``_footprint_blocks``).  ``admitskips``
counts the programs admitted past a refused head.
"""

from __future__ import annotations

from typing import Any

from heavy_bound import ChosenOffload
from skip_ahead import SKIP, SkipAheadOffload, check_depth
from ttlpolicy.serving.skip_ahead import waiting_after
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.interface import Policy, Verdict
from ttlpolicy.sim.policies.ttlpolicy_plugin import make_ttlpolicy

ADMIT_SKIP = "+admitskip="
#: passes of one refused head at most, unless the name gives ``@P``
DEFAULT_PASSES = 8


class AdmitAheadOffload(SkipAheadOffload):
    """``ttlpolicy-offload[:variant][+skip=S]+admitskip=K[@P]`` (module doc)."""

    def __init__(
        self, depth: int, max_passes: int, large_skip_depth: int = 0, **options: Any
    ) -> None:
        super().__init__(large_skip_depth or 1, **options)
        self.admit_depth = check_depth(depth)
        if not isinstance(max_passes, int) or max_passes < 0:
            raise ValueError(f"max_passes must be an integer >= 0, got {max_passes!r}")
        self.max_passes = max_passes
        self.large_skip_depth = large_skip_depth
        #: program -> its footprint (load control's ``blocks``); program -> live calls
        self._footprint_blocks: dict[str, int] = {}
        self._live: dict[str, int] = {}
        self._passed_head: str | None = None  # the refused head's program, and its passes
        self._passes = 0
        self._admitting: tuple[str, str] | None = None  # (request, program) peek named
        #: programs admitted past a refused head
        self.admitskips = 0

    def arrive(self, call: Call, now: float) -> bool:
        pinned = super().arrive(call, now)
        pid = self._program(call)
        blocks = min(-(-call.prompt // self.view.config.block_tokens), self._total)
        self._footprint_blocks[pid] = max(self._footprint_blocks.get(pid, 0), blocks)
        self._live[pid] = self._live.get(pid, 0) + 1
        return pinned

    def finished(self, call: Call, now: float, chain_blocks: int, last_turn: bool) -> Verdict:
        pid = self._program(call)
        anonymous = pid != call.program_id and pid.startswith("anonymous:")
        verdict = super().finished(call, now, chain_blocks, last_turn)
        if last_turn or anonymous:
            self._footprint_blocks.pop(pid, None)
            self._live.pop(pid, None)
        else:
            self._footprint_blocks[pid] = max(self._footprint_blocks.get(pid, 0), chain_blocks)
            self._live[pid] -= 1
        return verdict

    def peek(self) -> Call | None:
        self._admitting = None
        if self.large_skip_depth:
            head = super().peek()
        else:
            self._chosen, self._past_refused = None, False
            head = ChosenOffload.peek(self)  # (the library's head, no skip)
        if head is not None or self._giving_way or self._gate is None:
            return head
        library_head = self.sched.peek()
        return None if library_head is None else self._admit_past(library_head)

    def _mean_blocks(self) -> int:
        """Load control's mean footprint of the admitted programs (0 beside a lone program
        in flight, as its bounded wait says)."""
        gate = self._gate
        assert gate is not None
        admitted = [p for p in self._footprint_blocks if gate.admitted(p)]
        n = gate.admitted_count
        if n == 0 or (n == 1 and len(admitted) == 1 and self._live.get(admitted[0], 0) > 0):
            return 0
        return sum(self._footprint_blocks[p] for p in admitted) // n

    def _admit_past(self, head_rid: str) -> Call | None:
        """The first of the next ``admit_depth`` waiting calls after the refused ``head_rid``
        whose program fits load control's rule by its own footprint and whose prompt fits
        in memory, named as the head; None if none, or the head was passed enough."""
        gate = self._gate
        assert gate is not None
        head_pid = self._program(self._calls[head_rid])
        if head_pid != self._passed_head:
            self._passed_head, self._passes = head_pid, 0
        if self._passes >= self.max_passes:
            return None
        now = self.view.now
        room = gate.total_blocks - gate.working_set_blocks(now)
        mean = self._mean_blocks()
        for rid in waiting_after(self.sched, head_rid, self.admit_depth):
            call = self._calls[rid]
            pid = self._program(call)
            if pid == head_pid or not self.prompt_fits(rid):
                continue
            if gate.admitted(pid) or max(self._footprint_blocks.get(pid, 0), mean) <= room:
                self._chosen, self._admitting = rid, (rid, pid)
                return call
        return None

    def popped(self, call: Call, taken: bool) -> None:
        admitting, self._admitting = self._admitting, None
        if taken and admitting is not None and admitting[0] == str(call.call_id):
            gate = self._gate
            assert gate is not None
            if not gate.admitted(admitting[1]):
                gate.admit(admitting[1], self.view.now)
                self.admitskips += 1
                self._passes += 1
            self.skips -= 1  # (counted here, not as a skip past a head too large)
        super().popped(call, taken)


def make_admit_policy(name: str) -> Policy:
    """``ttlpolicy-offload[:variant][+skip=S]+admitskip=K[@P]`` as the module doc says."""
    head, _, spec = name.rpartition(ADMIT_SKIP)
    depth_text, _, passes_text = spec.partition("@")
    base, _, skip_text = head.partition(SKIP)
    try:
        depth = int(depth_text)
        passes = int(passes_text) if passes_text else DEFAULT_PASSES
        skip_depth = int(skip_text) if skip_text else 0
    except ValueError:
        raise ValueError(
            f"policy {name[:64]!r}: admitskip depth, passes or skip depth {spec[:32]!r} is not "
            "an integer"
        ) from None
    check_depth(depth)
    if skip_text:
        check_depth(skip_depth)
    if passes < 0:
        raise ValueError(f"policy {name[:64]!r}: passes must be >= 0, got {passes}")
    policy_name, _, variant = base.partition(":")
    if policy_name != "ttlpolicy-offload":
        raise ValueError(f"policy {name[:64]!r}: {ADMIT_SKIP} applies to ttlpolicy-offload")
    policy = make_ttlpolicy(
        policy_name,
        variant,
        cls=lambda **o: AdmitAheadOffload(depth, passes, skip_depth, **o),
    )
    policy.name = name
    return policy
