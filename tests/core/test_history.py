"""ToolHistory: bounded windows, a bounded set of tools, untrusted names — on both backends."""

from __future__ import annotations

import math
from collections import OrderedDict, deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

MAX_NAME = 128

tools_st = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", "e"]))
durations = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)
observations = st.lists(st.tuples(tools_st, durations), max_size=80)


class Model:
    """The specification, stated the plainest way: deques and an LRU of tool names."""

    def __init__(self, window: int, max_tools: int) -> None:
        self.window, self.max_tools = window, max_tools
        self.tools: OrderedDict[str, deque[float]] = OrderedDict()
        self.all: deque[float] = deque(maxlen=window)

    def observe(self, tool: str | None, d: float) -> None:
        if tool is not None:
            if tool not in self.tools and len(self.tools) == self.max_tools:
                self.tools.popitem(last=False)
            self.tools.setdefault(tool, deque(maxlen=self.window)).append(d)
            self.tools.move_to_end(tool)
        self.all.append(d)

    def window_of(self, tool: str | None) -> list[float]:
        return list(self.all) if tool is None else list(self.tools.get(tool, ()))


@given(st.integers(1, 6), st.integers(1, 4), observations)
def test_windows_and_tool_cap_hold_under_any_sequence(impl, window, max_tools, obs) -> None:
    h = impl.ToolHistory(window=window, max_tools=max_tools)
    model = Model(window, max_tools)
    for tool, d in obs:
        h.observe(tool, d)
        model.observe(tool, d)
        assert h.num_tools() <= max_tools
        assert h.total_count() <= window
    assert h.tools() == list(model.tools)
    for tool in [None, *"abcde"]:
        expected = model.window_of(tool)
        assert h.count(tool) <= window
        assert h.count(tool) == len(expected)
        assert h.samples(tool) == sorted(expected)


@given(st.lists(durations, min_size=1, max_size=50), durations, st.floats(0.0, 1.0))
def test_cdf_quantile_mean_follow_their_definitions(impl, xs, t, q) -> None:
    h = impl.ToolHistory(window=64)
    for x in xs:
        h.observe("t", x)
    n = len(xs)
    assert h.cdf("t", t) == sum(1 for x in xs if x <= t) / n
    # Nearest rank: the smallest sample whose CDF reaches q.
    assert h.quantile("t", q) == min(x for x in xs if sum(1 for y in xs if y <= x) / n >= q)
    mean = h.mean("t")
    assert mean is not None and math.isclose(mean, sum(xs) / n, rel_tol=1e-12, abs_tol=1e-300)


def test_unknown_tool_has_no_samples(impl) -> None:
    h = impl.ToolHistory()
    h.observe("known", 1.0)
    assert h.count("unknown") == 0
    assert h.cdf("unknown", 5.0) == 0.0
    assert h.quantile("unknown", 0.5) is None
    assert h.mean("unknown") is None
    assert h.samples("unknown") == []
    assert h.count(None) == 1  # None: the global window


def test_least_recently_observed_tool_is_dropped(impl) -> None:
    h = impl.ToolHistory(window=4, max_tools=2)
    h.observe("a", 1.0)
    h.observe("b", 2.0)
    h.observe("a", 3.0)
    h.observe("c", 4.0)
    assert h.tools() == ["a", "c"]
    assert h.count("b") == 0
    # Reading does not refresh a tool: only observing does.
    assert h.count("a") == 2
    h.observe("d", 5.0)
    assert h.tools() == ["c", "d"]


def test_constructor_settings_are_visible(impl) -> None:
    h = impl.ToolHistory(window=7, max_tools=3)
    assert (h.window, h.max_tools) == (7, 3)
    d = impl.ToolHistory()
    assert (d.window, d.max_tools) == (1024, 1024)


# -- untrusted tool names ----------------------------------------------------------------------

weird_names = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec=None), min_size=120, max_size=400),
    st.lists(st.sampled_from(["\ud800", "\udfff", "\x00", "é", "😀", "a"]), max_size=200).map(
        "".join
    ),
)


@given(st.lists(weird_names, min_size=1, max_size=20))
def test_untrusted_names_never_crash_and_are_capped(impl, names) -> None:
    h = impl.ToolHistory(window=4, max_tools=8)
    for i, name in enumerate(names):
        h.observe(name, float(i))
        assert h.count(name) >= 1
    for tracked in h.tools():
        assert len(tracked) <= MAX_NAME
        tracked.encode("utf-8")  # no lone surrogates survive: always encodable
    assert h.num_tools() <= 8


def test_names_differing_after_the_cap_share_a_window(impl) -> None:
    h = impl.ToolHistory()
    base = "x" * MAX_NAME
    h.observe(base + "-one", 1.0)
    h.observe(base + "-two", 2.0)
    assert h.num_tools() == 1
    assert h.count(base) == 2
    assert h.tools() == [base]


def test_huge_name_is_cut(impl) -> None:
    h = impl.ToolHistory()
    h.observe("é" * 10_000_000, 1.0)
    assert h.tools() == ["é" * MAX_NAME]


def test_lone_surrogates_become_replacement_characters(impl) -> None:
    h = impl.ToolHistory()
    h.observe("a\ud800b\udfffc", 1.0)
    assert h.tools() == ["a\ufffdb\ufffdc"]
    # The same name finds the same window; a valid surrogate pair is one character.
    assert h.count("a\ud800b\udfffc") == 1
    h.observe("\ud83d\ude00", 2.0)
    assert h.tools()[-1] == "😀"


def test_nul_and_control_characters_are_ordinary(impl) -> None:
    h = impl.ToolHistory()
    h.observe("a\x00b", 1.0)
    h.observe("a", 2.0)
    assert h.tools() == ["a\x00b", "a"]


@pytest.mark.parametrize("bad", [b"bytes", 3, 1.5, ["a"], object()])
def test_non_str_names_raise_type_error(impl, bad) -> None:
    h = impl.ToolHistory()
    with pytest.raises(TypeError, match="tool"):
        h.observe(bad, 1.0)
    assert h.total_count() == 0
