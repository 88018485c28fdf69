"""ttlpolicy.toolcalls under hostile model output up to 1 MB: never raises, returns a bounded
name, and takes time linear in the input (no regular-expression backtracking blow-up).

Linearity is measured, not assumed: each adversarial pattern is timed at growing sizes and
compared with the linear extrapolation of its time at the smallest size.  A quadratic parser
exceeds the generous bound many times over at 32 KiB; a linear one stays inside it at every
size (only the last 64 KiB are parsed, so beyond that the time flattens)."""

from __future__ import annotations

import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttlpolicy._validate import MAX_TOOL_NAME_CHARS
from ttlpolicy.toolcalls import tool_name

MIB = 1 << 20

#: Pieces of every format the parser recognises, and of nothing at all.
FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    '"tool_calls"',
    '"tool_calls": [',
    '{"name": "',
    '"name"',
    '"name":',
    ' "arguments": {',
    '"function": {',
    "Action:",
    "Action: ",
    "\nAction:",
    "\n",
    " ",
    "\t",
    "```",
    "```bash\n",
    "```sh",
    "{",
    "[",
    "}",
    "]",
    '"',
    "\\",
    ".call(",
    "x.call(",
    "a" * 64,
    "é",
    "\ud800",
    "\x00",
]

#: Inputs that make backtracking parsers quadratic or worse: long runs that almost match.
ADVERSARIAL_UNITS = [
    "<tool_call>",
    "<tool_call>{",
    '<tool_call>{"name": "',
    '"name"' + " " * 7,
    '"name":' + " " * 7,
    '{"name": "a',
    "Action:" + " " * 7,
    "\n Action \t: ",
    "```",
    "``` \t",
    "<|python_tag|>",
    "<|python_tag|>a.call",
    "[TOOL_CALLS][",
    '"tool_calls"{',
    "[",
    "{",
    " ",
    "a",
    '\\"',
]


def _check(name: str | None) -> None:
    assert name is None or (isinstance(name, str) and 1 <= len(name) <= MAX_TOOL_NAME_CHARS)
    if name is not None:
        assert name == name.strip() and name.isprintable()


big_text = st.builds(
    lambda unit, size: (unit * (size // max(len(unit), 1) + 1))[:size],
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), min_size=1, max_size=8)
    .map("".join)
    .filter(bool),
    st.integers(1, MIB),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(big_text)
def test_repeated_hostile_text_up_to_1_mib(text: str) -> None:
    _check(tool_name(text))


random_text = st.builds(
    # every BMP code point, lone surrogates included (UTF-16 read with surrogatepass)
    lambda seed, n: random.Random(seed).randbytes(2 * n).decode("utf-16-le", "surrogatepass"),
    st.integers(0, 2**32),
    st.integers(0, MIB // 2),
) | st.builds(
    lambda seed, n: random.Random(seed).randbytes(n).decode("latin-1"),
    st.integers(0, 2**32),
    st.integers(0, MIB),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_text)
def test_random_text_up_to_1_mib(text: str) -> None:
    _check(tool_name(text))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=200).map(
        "".join
    ),
    st.sampled_from(["", "x" * 70_000, "\n" * 70_000]),
)
def test_hostile_text_after_a_long_prefix(text: str, prefix: str) -> None:
    # the tail window starts anywhere: inside a fragment, a surrogate pair, a JSON string
    _check(tool_name(prefix + text))


def _best_of(text: str, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        tool_name(text)
        best = min(best, time.perf_counter() - t0)
    return best


#: Sizes timed, from a size where a quadratic scan is still cheap to 1 MiB.
SIZES = [4_096, 16_384, 65_536, 262_144, MIB]
#: Generous: tool_name on n characters may take this many times the linear extrapolation
#: t(n0) · n / n0 from the smallest size.  Measured on the loaded 2-core development machine
#: the worst pattern (a run of backticks at 64 KiB) reached 2.5-4.5× in three runs (cache
#: effects); a scan quadratic in the 64 KiB window that is parsed reaches 16× at 64 KiB.
MAX_OVER_LINEAR = 10.0


def test_time_is_linear_in_input_size() -> None:
    worst: tuple[float, str, int] = (0.0, "", 0)
    for unit in ADVERSARIAL_UNITS:
        texts = [(unit * (n // len(unit) + 1))[:n] for n in SIZES]
        # the smallest size, with a floor so that timer resolution cannot set the baseline
        base_per_char = max(_best_of(texts[0]), 2e-6) / SIZES[0]
        for n, text in zip(SIZES[1:], texts[1:], strict=True):
            worst = max(worst, (_best_of(text) / (base_per_char * n), unit, n))
    ratio, unit, size = worst
    assert ratio < MAX_OVER_LINEAR, f"{unit!r} × {size} chars: {ratio:.1f}× linear"


def test_a_1_mib_input_takes_well_under_a_second() -> None:
    for unit in ADVERSARIAL_UNITS:
        text = (unit * (MIB // len(unit) + 1))[:MIB]
        assert _best_of(text, repeats=1) < 1.0, repr(unit)
