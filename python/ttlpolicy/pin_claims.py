"""What a program's new call does with the program's pin: take it, or supersede it (issue 45).

A pin holds a program's context while the program is away.  Its next call usually extends
that context: it *continues* the pinned turn when its prompt begins with at least
``ttlpolicy.ids.CONTINUATION_SHARE`` of the pinned turn's prompt (``continues_context``;
engines check it on chained block hashes, or on a digest of that share of the tokens).  Then
the call takes the pin over, as ever.  A call of the same program that does not continue it
— a compaction, an edited history, a retry from an earlier point — *supersedes* the pinned
context: what the pin holds beyond the call's prompt will never be read again, so the pin is
released at once (counted in ``contexts_superseded``) rather than at its TTL, and the call is
served as the program's next call: it keeps the program's queue place, and the tool gap it
closes feeds the program's statistics as any return does.  (It takes the pin over in the
``ProgramScheduler``, which ranks it once as a returning pinned call: a superseding prompt is
usually short, a compaction.  The blocks it shares with the old context stay prefix-cacheable
after the release, in the engine's free queue, until evicted.)

Why a program's own call may release its pin: a program is its tenant's alone (``program_key``
scopes a client's id by the tenant), so a call naming the program is its owner's, who is
trusted to harm only itself; another tenant naming the same id names another program and
reaches nothing of this one.  Inferred programs (``ProgramLinker``) link a call to a program
only when it continues at least ``min_depth_fraction`` of that program's latest prompt, so a
linked call never supersedes; a compaction without an id links as a new program, and the old
program's pin lapses at its TTL (docs/investigations/supersede.md measures why no rule
releases it there).

Both adapters and the simulator call ``claim_pin``; none restates the rule.
"""

from __future__ import annotations

import enum

from .ids import continuation_index

__all__ = ["PinClaim", "claim_pin", "continues_context"]


class PinClaim(enum.Enum):
    """What a call naming a program does with the program's pin."""

    #: the program holds no pin: nothing to take or release
    NO_PIN = "no_pin"
    #: the call continues the pinned context: the pin is handed over to it
    TAKE = "take"
    #: the call does not continue it: the pin is released at once (``contexts_superseded``),
    #: the call served as the program's next call
    SUPERSEDE = "supersede"


def continues_context(pinned_prompt_units: int, shared_units: int) -> bool:
    """Whether a prompt sharing its first ``shared_units`` units (blocks, or tokens) with a
    pinned turn's prompt of ``pinned_prompt_units`` units continues that turn: it shares the
    unit at ``continuation_index`` (a pinned prompt of no unit is continued by any)."""
    if isinstance(pinned_prompt_units, bool) or not isinstance(pinned_prompt_units, int):
        raise TypeError(
            f"pinned_prompt_units must be an int, got {type(pinned_prompt_units).__name__}"
        )
    if isinstance(shared_units, bool) or not isinstance(shared_units, int):
        raise TypeError(f"shared_units must be an int, got {type(shared_units).__name__}")
    if pinned_prompt_units < 0 or shared_units < 0:
        raise ValueError(
            f"pinned_prompt_units and shared_units must be >= 0, got "
            f"{pinned_prompt_units} and {shared_units}"
        )
    return shared_units > continuation_index(pinned_prompt_units)


def claim_pin(holds_pin: bool, continues: bool) -> PinClaim:
    """What a call of a program (of its own tenant: ``program_key``) does with the program's
    pin: ``NO_PIN`` when the program holds none; ``TAKE`` when the call ``continues`` the
    pinned context (``continues_context``, or an engine's equivalent check); else
    ``SUPERSEDE`` — release the pin at once and serve the call as the program's next."""
    if not isinstance(holds_pin, bool) or not isinstance(continues, bool):
        raise TypeError(
            f"holds_pin and continues must be bools, got {type(holds_pin).__name__} and "
            f"{type(continues).__name__}"
        )
    if not holds_pin:
        return PinClaim.NO_PIN
    return PinClaim.TAKE if continues else PinClaim.SUPERSEDE
