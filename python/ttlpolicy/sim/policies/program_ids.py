"""What program id the ttlpolicy plug-in sees for a call, when its client names none (issue 45).

* ``explicit`` — the trace's program id (the plug-in does not use this module).
* ``none`` — every call its own one-call program (what an engine does with a client that
  names nothing: stock order, no pins).
* ``inferred`` — the program ``ttlpolicy.ProgramLinker`` links the call to from its prompt's
  chained block hashes (one tenant), told each finished turn and each program's end; named
  ``"\\x00linked:<key>"`` as an engine names it (``ids.INFERRED_PREFIX``), so that load control
  judges it as inferred (``reference/admission.py``, ``inferred_away_quantile``).

The simulator's turns carry how many leading blocks they share with the previous turn's
prompt (``Turn.reusable_blocks``, from the trace's hash ids), not the ids: a call's hashes are
rebuilt from them — its previous turn's first ``reusable_blocks`` hashes, then fresh ones — the
same chained prefix structure within a program.  A program's common prefix (its
``Program.common_blocks``, ``workload``) is the same hashes in every program, as the linker
would see real sessions' shared tool definitions and system prompt.  The engine's KV cache
keeps chains by the trace's program (the cache hashes content, not ids): ids the plug-in
returns to the engine (pins expired, reclaimed, given way) are mapped back to the program of
their latest call.

**Superseded programs.** The simulator tells every mode when a program has ended (its trace
program's last turn).  A linked program can end another way: its trace program's next call
links elsewhere (a compaction or rewritten history is ``new``: with the common prefix, 97 of
the sessions' 125 such calls keep nothing but it, so no content rule can link them), and
the old linked program gets no call again.  ``arrive`` lists it in ``superseded`` (unless a
call of another trace program was linked to it since): the same knowledge of an end, told
when the simulator has it, which the plug-in may act on as at a last turn
(docs/investigations/common-prefix.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import ttlpolicy as tp
from ttlpolicy.ids import INFERRED_PREFIX

from ..call import Call

MODES = ("explicit", "inferred", "none")
#: the one tenant of the simulated engine
TENANT = "sim"
#: the common prefix's block i hashes to COMMON_HASH + i (fresh hashes count up from 1)
COMMON_HASH = 1 << 48


class ProgramIds:
    """The plug-in's program ids for ``none`` or ``inferred`` (module doc)."""

    def __init__(self, mode: str, block_tokens: int) -> None:
        if mode not in ("inferred", "none"):
            raise ValueError(f"ids must be 'inferred' or 'none' here, got {mode[:64]!r}")
        self.mode = mode
        self.block_tokens = block_tokens
        self.linker = tp.ProgramLinker() if mode == "inferred" else None
        #: calls linked as continue / new / fork
        self.links: Counter[str] = Counter()
        self._prompt: dict[str, list[int]] = {}  # engine program -> its latest prompt hashes
        self._next_hash = 1
        self._of_call: dict[str, str] = {}  # request id -> its policy program
        self._engine: dict[str, str] = {}  # policy program -> engine program of its latest call
        self._policy: dict[str, str] = {}  # engine program -> policy program of its latest call
        #: the latest call's link (``arrive``), and the engine program of its policy program's
        #: call before it (whose chain a pin of that program holds), or None
        self.last_link: tp.Link | None = None
        self.previous_engine: str | None = None
        #: policy programs ended by their trace program's next call linking elsewhere (module
        #: doc), oldest first, until ``take_superseded``
        self.superseded: list[str] = []

    def hashes(self, call: Call) -> list[int]:
        """The call's prompt block hashes (full blocks), rebuilt from its turn's reuse."""
        full = call.turn.input_tokens // self.block_tokens
        prev = self._prompt.get(call.program_id, []) if call.turn_index else []
        if not prev:
            common = min(call.prog.program.common_blocks, full)
            prev = list(range(COMMON_HASH, COMMON_HASH + common))
        keep = min(call.turn.reusable_blocks, len(prev), full)
        fresh = range(self._next_hash, self._next_hash + full - keep)
        self._next_hash += full - keep
        out = prev[:keep] + list(fresh)
        self._prompt[call.program_id] = out
        return out

    def arrive(self, call: Call, now: float) -> str:
        """The policy's program for this call, linked at its arrival."""
        rid = str(call.call_id)
        if self.linker is None:
            pid = f"call:{rid}"
        else:
            link = self.linker.link(TENANT, self.hashes(call), now)
            self.links[link.kind] += 1
            pid = f"{INFERRED_PREFIX}{link.program}"
            self.last_link = link
            old = self._policy.get(call.program_id) if call.turn_index else None
            # (its latest call was this trace program's: no other continues it)
            if old is not None and old != pid and self._engine.get(old) == call.program_id:
                self.superseded.append(old)
        self.previous_engine = self._engine.get(pid)
        self._of_call[rid] = pid
        self._engine[pid] = call.program_id
        self._policy[call.program_id] = pid
        return pid

    def take_superseded(self) -> list[str]:
        """The programs ``superseded`` lists, emptied."""
        out, self.superseded = self.superseded, []
        return out

    def of_call(self, call: Call) -> str:
        return self._of_call[str(call.call_id)]

    def finished(self, call: Call, now: float, last_turn: bool) -> None:
        """A call ended: the linker records its turn end (its prompt's blocks: the trace has
        no output hashes), and forgets its program after its last turn."""
        pid = self._of_call.pop(str(call.call_id))
        if self.linker is None:
            del self._engine[pid]  # (a one-call program: never pinned, never named again)
            return
        key = int(pid.removeprefix(INFERRED_PREFIX))
        self.linker.finished(TENANT, key, self._prompt[call.program_id], now)
        if last_turn:
            self.linker.end_program(TENANT, key)
            self._prompt.pop(call.program_id, None)

    def ended(self, engine_program: str) -> str | None:
        """The engine's program left: the policy program of its latest call (the linker
        forgets it), or None."""
        self._prompt.pop(engine_program, None)
        pid = self._policy.pop(engine_program, None)
        if pid is not None and self.linker is not None:
            self.linker.end_program(TENANT, int(pid.removeprefix(INFERRED_PREFIX)))
        return pid

    def to_engine(self, pid: str) -> str:
        """The engine's program of the policy program ``pid``'s latest call."""
        return self._engine.get(pid, pid)

    def to_policy(self, engine_program: str) -> str:
        return self._policy.get(engine_program, engine_program)

    def order(self, order: Callable[[list[str]], list[str]]) -> Callable[[list[str]], list[str]]:
        """An eviction order of policy programs as one of engine programs: each in the rank
        of its policy program (engine programs linked to one program keep their order)."""

        def engine_order(programs: list[str]) -> list[str]:
            mapped = [self.to_policy(p) for p in programs]
            rank = {p: i for i, p in enumerate(order(list(dict.fromkeys(mapped))))}
            ranked = sorted(range(len(programs)), key=lambda i: rank[mapped[i]])
            return [programs[i] for i in ranked]

        return engine_order
