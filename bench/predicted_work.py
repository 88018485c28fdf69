"""A program's remaining work **predicted** without reading its future (issue 46's open
question: can an order without foresight get the room that ``mori+sjf`` / ``mori+srpt`` find
at 8B 0.01/s by reading each program's real remaining work?).

What the prediction reads of a call, when it is queued (``seen``) — nothing else:

* ``sub_agent`` — whether the program is a sub-agent (its id is ``<session>/<agent>``: the
  engine knows which program a request belongs to);
* ``turn_index`` — how many calls of its program have finished (0: its first call);
* ``prompt_tokens`` — the call's prompt (the whole context it sends), known on arrival.

Not read: the call's own output tokens or tool (they come at its end), any later call, the
program's length.  The prediction is the mean remaining work (uncached prompt tokens plus
``decode_weight`` × output tokens, from this call on — ``heavy_bound.OrderedMori.work``) of
the training calls in the same bucket: sub-agent or not × turns done (0, 1–4, 5–19, 20+) ×
prompt size (``PROMPT_BINS`` quantiles of the training calls' prompts); a bucket with fewer
than ``MIN_SAMPLES`` calls falls back to sub-agent × turns done, then to all calls.

**Fitted on training folds only** (``fit_cross``): the folds are bench/bounds.py's
(``fold_of``); the validation fold (3) never enters a fit, and each training fold's programs
are predicted by a table fitted on the *other* training folds (cross-fitting), so no
program's prediction has seen its own future.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bounds import fold_of
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.workload import Program, Turn

#: turns done: bucket edges (0 | 1–4 | 5–19 | 20+)
TURN_EDGES = (1, 5, 20)
#: prompt-size buckets (quantiles of the training calls' prompts)
PROMPT_BINS = 3
#: a bucket with fewer training calls falls back to a coarser one
MIN_SAMPLES = 20
FOLDS = 4
VALIDATION_FOLD = 3


@dataclass(frozen=True, slots=True)
class Seen:
    """What is known of a program when its call ``turn_index`` is queued."""

    sub_agent: bool
    turn_index: int
    prompt_tokens: int


def seen(call: Call) -> Seen:
    """The call's known inputs: its program id, its index, its prompt — never its output,
    its tool or a later turn."""
    return Seen("/" in call.program_id, call.turn_index, call.turn.input_tokens)


def turn_work(turn: Turn, block_tokens: int, decode_weight: float) -> float:
    """One call's work in prefill-token equivalents (uncached prompt + weighted output)."""
    uncached = max(0, turn.input_tokens - turn.reusable_blocks * block_tokens)
    return uncached + decode_weight * turn.output_tokens


class WorkTable:
    """Mean remaining work by bucket of ``Seen``, fitted on some programs' whole runs."""

    def __init__(
        self, programs: Iterable[Program], block_tokens: int, decode_weight: float
    ) -> None:
        samples: list[tuple[Seen, float]] = []
        for prog in programs:
            work = [turn_work(t, block_tokens, decode_weight) for t in prog.turns]
            remaining = sum(work)
            for k, turn in enumerate(prog.turns):
                samples.append((Seen("/" in prog.program_id, k, turn.input_tokens), remaining))
                remaining -= work[k]
        if not samples:
            raise ValueError("WorkTable needs at least one training program, got none")
        prompts = sorted(s.prompt_tokens for s, _ in samples)
        self.prompt_edges = tuple(
            prompts[len(prompts) * i // PROMPT_BINS] for i in range(1, PROMPT_BINS)
        )
        fine: dict[tuple, list[float]] = {}
        coarse: dict[tuple, list[float]] = {}
        for s, r in samples:
            fine.setdefault(self._fine_key(s), []).append(r)
            coarse.setdefault(self._fine_key(s)[:2], []).append(r)
        self._fine = {k: bucket(v) for k, v in fine.items() if len(v) >= MIN_SAMPLES}
        self._coarse = {k: bucket(v) for k, v in coarse.items() if len(v) >= MIN_SAMPLES}
        self._all = bucket([r for _, r in samples])

    def _fine_key(self, s: Seen) -> tuple[bool, int, int]:
        return (
            s.sub_agent,
            bisect.bisect(TURN_EDGES, s.turn_index),
            bisect.bisect(self.prompt_edges, s.prompt_tokens),
        )

    def _bucket(self, s: Seen) -> tuple[float, float]:
        key = self._fine_key(s)
        got = self._fine.get(key)
        return got if got is not None else self._coarse.get(key[:2], self._all)

    def predict(self, s: Seen) -> float:
        """The expected remaining work of a program seen as ``s``."""
        return self._bucket(s)[0]

    def gittins_index(self, s: Seen) -> float:
        """The Gittins index of a program seen as ``s`` (``bucket``): serve the highest."""
        return self._bucket(s)[1]


def bucket(remaining: list[float]) -> tuple[float, float]:
    """The mean of the remaining works, and their Gittins index: the most, over a budget
    ``q``, of P(done within ``q``) / E[work spent within ``q``] — what a program seen so is
    worth serving per unit of work, given only the distribution its like have shown."""
    r = sorted(remaining)
    n, spent, best = len(r), 0.0, 0.0
    for j, q in enumerate(r, 1):
        spent += q
        cost = spent + (n - j) * q
        # (done with no work at all: served first)
        best = max(best, j / cost) if cost > 0.0 else math.inf
    return statistics.fmean(r), best


class CrossFitPredictor:
    """Per program, the table fitted on the training folds other than its own (the
    validation fold's programs: on every training fold)."""

    def __init__(self, tables: dict[int, WorkTable], folds: int = FOLDS) -> None:
        self.tables = tables
        self.folds = folds

    def table(self, call: Call) -> WorkTable:
        return self.tables[fold_of(call.program_id, self.folds)]

    def remaining_work(self, call: Call) -> float:
        """The predicted work of the call's program from this call on."""
        return self.table(call).predict(seen(call))

    def gittins_index(self, call: Call) -> float:
        """The Gittins index of the call's program, as seen now (``bucket``)."""
        return self.table(call).gittins_index(seen(call))


def fit_cross(
    programs: Sequence[Program],
    block_tokens: int,
    decode_weight: float,
    folds: int = FOLDS,
    validation_fold: int = VALIDATION_FOLD,
) -> CrossFitPredictor:
    """The cross-fitted predictor; the ``validation_fold``'s programs are never read."""
    if not 0 <= validation_fold < folds:
        raise ValueError(f"validation_fold must be in [0, {folds}), got {validation_fold!r}")
    by_fold: dict[int, list[Program]] = {f: [] for f in range(folds)}
    for prog in programs:
        by_fold[fold_of(prog.program_id, folds)].append(prog)
    training = [f for f in range(folds) if f != validation_fold]
    tables = {}
    for f in range(folds):
        used = [p for g in training if g != f for p in by_fold[g]]
        tables[f] = WorkTable(used, block_tokens, decode_weight)
    return CrossFitPredictor(tables, folds)
