"""bench/linkage.py's modelling: a call's output as its session's next call carries it
(``--outputs``), and the prefix made common (``--common tools``) a main session's or a
sub-agent's own."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import linkage  # (bench/)


def test_an_output_is_carried_only_by_a_call_that_extends_the_prompt() -> None:
    prompt = np.array([5, 6, 7])
    assert linkage.carried_blocks(prompt, np.array([5, 6, 7, 8, 9, 10]), 2) == 2
    assert linkage.carried_blocks(prompt, np.array([5, 6, 7, 8]), 2) == 1  # (what it holds)
    assert linkage.carried_blocks(prompt, np.array([5, 6, 9, 8, 9]), 2) == 0  # rewritten
    assert linkage.carried_blocks(prompt, np.array([5, 6, 7]), 2) == 0  # nothing after it
    assert linkage.carried_blocks(prompt, None, 2) == 0  # no next call


def test_a_turn_end_holds_the_prompt_then_its_output() -> None:
    base = 3 << 32
    p = linkage.Prompt(np.array([5, 6, 7]), base, 0)
    after = linkage.Prompt(np.array([5, 6, 7, 8, 9]), base, 0)
    out = p.with_output(after, 3, call=4)
    assert out[:5] == [base | 5, base | 6, base | 7, base | 8, base | 9]
    assert out[5] == linkage.OWN_BASE | 4 << 20 | 0  # the block no later call carries
    other = linkage.Prompt(np.array([5, 6, 7]), base, 0).with_output(None, 3, call=5)
    assert not set(out[3:]) & set(other[3:])  # two calls' own outputs never meet


def test_common_ids_are_a_main_sessions_or_a_sub_agents() -> None:
    main = linkage.Prompt(np.array([1, 2, 3]), 1 << 32, 2)
    other_file = linkage.Prompt(np.array([8, 9, 3]), 2 << 32, 2)
    sub = linkage.Prompt(np.array([1, 2, 3]), 1 << 32, 2, linkage.COMMON_BASE | linkage.SUB_COMMON)
    assert main.full()[:2] == other_file.full()[:2]  # every main session's prefix: the same
    assert main.full()[2] != other_file.full()[2]  # then each file's own
    assert not set(sub.full()[:2]) & set(main.full())  # a sub-agent's prefix is not a main's
