"""A program run and its LLM calls, as the engine tracks them and a policy reads them."""

from __future__ import annotations

from .workload import Program


class ProgramRun:
    """One program in flight: when it arrived and the service it has received."""

    __slots__ = ("arrival_s", "attained_s", "program")

    def __init__(self, program: Program, arrival_s: float) -> None:
        self.program = program
        self.arrival_s = arrival_s
        self.attained_s = 0.0  # service received so far (Autellix)


class Call:
    """One LLM call of a program, from issue to finish."""

    __slots__ = (
        "admit_s",
        "admit_seq",
        "blocks",
        "call_id",
        "computed",
        "first_token_s",
        "gap_s",
        "generated",
        "issue_s",
        "output",
        "preempted",
        "prev_tool",
        "prog",
        "program_id",
        "prompt",
        "ready_s",
        "turn",
        "turn_index",
    )

    def __init__(self, call_id: int, prog: ProgramRun, turn_index: int, issue_s: float) -> None:
        turn = prog.program.turns[turn_index]
        self.call_id = call_id
        self.program_id = prog.program.program_id
        self.prog = prog
        self.turn_index = turn_index
        self.turn = turn
        self.issue_s = issue_s
        self.prompt = turn.input_tokens  # tokens to hold before decoding (grows on preemption)
        self.output = turn.output_tokens
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.first_token_s: float | None = None
        self.admit_s: float | None = None
        self.ready_s = 0.0
        self.preempted = False
        prev = prog.program.turns[turn_index - 1] if turn_index else None
        self.prev_tool = prev.tool if prev is not None else None
        self.gap_s = turn.think_s if turn_index else None
        self.admit_seq = 0

    @property
    def program_arrival_s(self) -> float:
        return self.prog.arrival_s
