"""Hostile input the issue-16 review found handled differently by the two backends, each
checked on both: the same answer, or the same exception type and message, state unchanged.

* numpy arrays that are not native-order int64 (big-endian, other widths, uint64,
  non-contiguous) are converted by value, never misread as raw bytes;
* elements that cannot become an int (a 2-D row, a 1-element array, an ``__index__`` that
  raises) raise what the reference raises;
* ints out of range name the allowed range (and huge ints their size);
* an argument whose ``__float__``/``__index__`` calls back into the same object works;
* objects shared by threads stay bounded and exact (the threading contract,
  ``ttlpolicy/reference/_sync.py``);
* ``ProgramScheduler`` refuses a duck-typed policy; ``PolicyConfig`` refuses numbers as text.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np
import pytest

from parity import assert_same, outcome, plain
from ttlpolicy import PolicyConfig

HASHES = [3, -7, 2**40 + 5, -(2**62), 11]


def tree_view(t: Any) -> Any:
    return plain(t.groups()), len(t)


@pytest.mark.parametrize(
    "array",
    [
        np.array(HASHES, dtype=">i8"),  # big-endian
        np.array(HASHES, dtype="<i8"),
        np.array(HASHES, dtype=np.int64)[::-1][::-1],
        np.array([h for h in HASHES for _ in (0, 1)], dtype=">i8")[::2],  # strided
        np.array([3, 7, 11], dtype=">i4"),
        np.array([3, 7, 11], dtype=np.int16),
        np.array([3, 7, 2**63 + 1], dtype=np.uint64),  # the last does not fit: refused
        np.array([3, 7, 11], dtype=">u8"),
    ],
    ids=["big-endian", "little-endian", "view", "strided", ">i4", "i2", "u8-too-big", ">u8"],
)
def test_numpy_hashes_are_read_by_value(backends, array):
    as_ints = [int(x) for x in array]
    trees = [be.PrefixTree() for be in backends]
    results = [outcome(partial(t.insert, array, 1.0)) for t in trees]
    assert_same(results[0], results[1], "insert")
    if results[0][0] == "ok":
        for t in trees:
            # stored as the ints the array holds: a list of them matches in full
            assert t.match_len(as_ints) == len(as_ints)
            assert t.match_len(array) == len(as_ints)
    else:
        assert [len(t) for t in trees] == [0, 0]
    assert_same(tree_view(trees[0]), tree_view(trees[1]), "state")


class IndexRaises:
    def __index__(self) -> int:
        raise RuntimeError("no index today")


@pytest.mark.parametrize(
    "hash_ids",
    [
        [1, np.array([[1, 2]])],
        [1, np.array([2])],
        np.array([[1, 2], [3, 4]]),
        [1, IndexRaises()],
        [1, 2.0],
        [1, 2**64],
        [1, -(2**200)],
        [1, 2**5000],
        [1, "2"],
    ],
    ids=["2-D row", "1-element array", "2-D array", "index raises", "float", "2**64",
         "-2**200", "2**5000", "str"],
)  # fmt: skip
def test_unconvertible_hashes_raise_alike(backends, hash_ids):
    trees = [be.PrefixTree() for be in backends]
    for t in trees:
        t.insert([1, 9], 0.0)
    before = [tree_view(t) for t in trees]
    results: list[tuple[object, ...]] = []
    for t in trees:
        try:
            t.insert(hash_ids, 1.0)
            results.append(("ok",))
        except Exception as e:  # the reference lets the object's own error through
            results.append((type(e), str(e)))
    assert results[0] == results[1]
    assert results[0][0] in (TypeError, ValueError, RuntimeError)
    assert [tree_view(t) for t in trees] == before


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda be: be.ToolHistory(window=2**70), "window must be in [1, 1048576], got "),
        (lambda be: be.EtaEstimator(4, 1).observe(-(2**80)), "total_turns must be in [1, "),
        (lambda be: be.PrefixTree(max_nodes=2**64), "max_nodes must be in [1, 2147483648], "),
        (lambda be: be.TTLPolicy().decide(request_blocks=2**3000), "an int of 3001 bits"),
    ],
)
def test_out_of_range_ints_name_the_allowed_range(backends, make, expected):
    results = [outcome(partial(make, be)) for be in backends]
    assert results[0] == results[1]
    kind, (exc, message) = results[0]
    assert kind == "raised" and exc is ValueError and expected in message


class OwnFloat(float):
    """A float whose ``__float__`` says otherwise: ``float(x)`` reads that."""

    def __float__(self) -> float:
        return 99.0


class CountedIndex:
    """An int too large for the core, a larger one each time it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __index__(self) -> int:
        self.reads += 1
        return 2**70 + self.reads


def test_numbers_are_read_once_as_python_reads_them(backends):
    """A float subclass is read through its ``__float__``; ``__index__`` is called once, and
    the int it gave is the one the error names."""
    results = []
    for be in backends:
        h = be.ToolHistory(8, 4)
        h.observe("a", OwnFloat(1.0))
        index = CountedIndex()
        refused = outcome(partial(be.ProgramScheduler, be.TTLPolicy(), index, 1))
        results.append((h.samples("a"), be.solve_ttl([OwnFloat(1.0)], 10.0, 0.1, 100.0),
                        refused, index.reads))  # fmt: skip
    assert_same(results[0], results[1])
    assert results[0][0] == [99.0] and results[0][3] == 1
    assert str(2**70 + 1) in results[0][2][1][1]


class GrowsDict:
    """A weight whose ``__index__`` adds a tenant to the dict being read."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table

    def __index__(self) -> int:
        self.table["a" * 32] = 1
        return 2


class OwnItems(dict):
    """A dict whose ``items()`` says otherwise: the dict's own entries are read."""

    def items(self) -> Any:
        return [("0" * 32, 7)]


def growing_weights() -> dict[str, Any]:
    table: dict[str, Any] = {}
    table["0" * 32] = GrowsDict(table)
    return table


def test_tenant_weights_are_read_from_a_snapshot_of_the_dict(backends):
    results: list[tuple[str, Any]] = []
    for be in backends:
        makes = (
            partial(be.ProgramScheduler, be.TTLPolicy(), 10, 1),
            partial(be.AdmissionControl, be.TTLPolicy(), total_blocks=10),
        )
        for make in makes:
            for weights in (growing_weights(), OwnItems({"0" * 32: "x"})):
                kind, result = outcome(partial(make, tenant_weights=weights))
                results.append((kind, None if kind == "ok" else result))
    assert results[:4] == results[4:]
    assert results[0] == results[2] == ("ok", None)  # (the weight read, 2, is in range)
    assert results[1] == ("raised", (TypeError, results[1][1][1]))  # the entry "x"


class LyingLength(list):
    """A list whose ``__len__`` claims 2**40 items: a size taken on trust aborts the process."""

    def __len__(self) -> int:
        return 2**40


def test_a_lying_length_is_not_taken_as_a_size(backends):
    results = []
    for be in backends:
        pin = be.Pin("p", 1, 1.0)
        built = (
            be.Ended("p", 1, None, LyingLength(["r1"])),
            be.Finished(None, None, None, LyingLength([pin])),
            be.GroupStats(LyingLength([1]), 1, 1, 1, LyingLength([1.0]), 1.0, None),
        )
        results.append(([plain(x) for x in built], built[0].request_ids, built[2].reuse_s))
    assert_same(results[0], results[1])
    assert results[0][1:] == (("r1",), (1.0,))


class ListItems(Mapping[Any, Any]):
    """A mapping whose ``items()`` yields lists, not the pairs a mapping yields."""

    def __init__(self, *items: Any) -> None:
        self._items = items

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> Any:
        return list(self._items)


def test_group_ttls_items_must_be_pairs(backends):
    results = []
    for be in backends:
        tree = be.PrefixTree()
        for items in (((1,), 5.0), [(1,), 5.0], ((1,), 5.0, 0)):
            results.append(outcome(partial(tree.set_group_ttls, ListItems(items))))
    assert results[:3] == results[3:]
    assert results[0] == ("ok", None)
    assert results[1][0] == results[2][0] == "raised" and results[1][1][0] is TypeError


class Named(str):
    """A str subclass whose ``__str__`` says otherwise: held as a plain str of its own
    characters by a result type."""

    def __str__(self) -> str:
        return "OTHER"


def test_a_result_type_holds_ids_as_plain_str(backends):
    held = []
    for be in backends:
        pin = be.Pin(Named("p"), 1, 1.0)
        ended = be.Ended(Named("p"), 1, None, [Named("r1")])
        link = be.Link("fork", Named("x"), Named("y"), 1, 2)
        values = (pin.program_id, *ended.request_ids, link.parent)
        held.append([(type(v), str.__str__(v)) for v in values])
    assert held[0] == held[1] == [(str, "p"), (str, "r1"), (str, "y")]


# -- re-entrant arguments ------------------------------------------------------------------------


class CallsBack:
    """A number whose conversion first uses the object it is passed to."""

    def __init__(self, value: float, call: Any) -> None:
        self.value, self.call = value, call

    def __float__(self) -> float:
        self.call()
        return float(self.value)

    def __index__(self) -> int:
        self.call()
        return int(self.value)


def test_arguments_calling_back_into_the_same_object_work(backends):
    views = []
    for be in backends:
        h = be.ToolHistory(8, 4)
        h.observe("a", CallsBack(2.0, lambda h=h: h.observe("a", 1.0)))
        h.cdf("a", CallsBack(1.5, lambda h=h: h.observe("b", 3.0)))
        p = be.TTLPolicy()
        p.decide(
            tool="a",
            request_blocks=CallsBack(2, lambda p=p: p.observe_tool("a", 4.0)),
            mean_active_blocks=CallsBack(4.0, lambda p=p: p.observe_program(3)),
        )
        s = be.ProgramScheduler(be.TTLPolicy(), 100, 10)
        s.arrive("r1", "A", CallsBack(1.0, lambda s=s: s.arrive("r0", "Z", 0.5, 1)), 1)
        s.pop(CallsBack(2.0, lambda s=s: s.pop(1.5)))
        t = be.PrefixTree()
        t.insert([1, CallsBack(2, lambda t=t: t.insert([7], 0.5))], 1.0)
        first = s.first_waiting(CallsBack(2, lambda s=s: s.arrive("r2", "Y", 2.5, 1)))
        a = be.AdmissionControl(be.TTLPolicy(), total_blocks=100)
        a.arrive("x", CallsBack(1.0, lambda a=a: a.arrive("y", 0.5, 1)), 1)
        a.admit("x", CallsBack(1.0, lambda a=a: a.program_count))
        used = a.working_set_blocks(CallsBack(2.0, lambda a=a: a.arrive("z", 1.5, 1)))
        order = a.eviction_order(
            (pid for pid in ("x", "y") if a.knows(pid)), CallsBack(2.0, lambda a=a: a.end("z"))
        )
        views.append(
            (
                [(x, h.samples(x)) for x in (None, "a", "b")],
                p.tool_count("a"),
                p.eta,
                s.waiting_count,
                s.running_count,
                plain(t.groups()),
                first,
                (a.program_count, a.admitted_count, used, order),
            )
        )
    assert_same(views[0], views[1], "after re-entrant calls")


# -- threads -------------------------------------------------------------------------------------

THREADS, PER_THREAD = 4, 3000


def _hammer(target: Any) -> None:
    start = threading.Barrier(THREADS)

    def work(k: int) -> None:
        start.wait()
        target(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_tool_history_shared_by_threads_stays_bounded_and_exact(impl):
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to make races show
    try:
        h = impl.ToolHistory(window=16, max_tools=4)

        def observe(k: int) -> None:
            for i in range(PER_THREAD):
                h.observe(f"tool{(i + k) % 6}", float(i % 50))

        _hammer(observe)
    finally:
        sys.setswitchinterval(saved)
    assert h.total_count() == 16
    assert h.num_tools() == 4
    for tool in [None, *h.tools()]:
        samples = h.samples(tool)
        assert len(samples) == h.count(tool) <= 16
        assert set(samples) <= {float(i) for i in range(50)}
        # the sorted view agrees with the samples: quantiles are real samples, CDF counts them
        assert h.quantile(tool, 1.0) == max(samples)
        assert h.cdf(tool, max(samples)) == 1.0


def test_scheduler_shared_by_threads_stays_consistent(impl):
    s = impl.ProgramScheduler(impl.TTLPolicy(), 10**6, 0, max_idle_programs=100)
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def cycle(k: int) -> None:
        for i in range(PER_THREAD // 3):
            s.arrive(f"r{k}.{i}", f"P{k}.{i % 300}", 0.0, 1)
            running = s.pop(0.0)  # any thread's request
            if running is not None:
                s.finish(running, 0.0, 1)

    try:
        _hammer(cycle)
    finally:
        sys.setswitchinterval(saved)
    while (running := s.pop(0.0)) is not None:
        s.finish(running, 0.0, 1)
    assert s.waiting_count == s.running_count == 0
    assert s.program_count == 100  # all idle, capped
    assert s.dropped_idle_programs >= THREADS * 300 - 100


def test_admission_shared_by_threads_stays_consistent(impl):
    policy = impl.TTLPolicy()
    for i in range(40):
        policy.observe_tool("edit", float(1 + i % 7))
    a = impl.AdmissionControl(policy, 10**6, max_idle_programs=100)
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def cycle(k: int) -> None:
        for i in range(PER_THREAD // 3):
            pid = f"P{k}.{i % 300}"
            a.arrive(pid, 0.0, 1 + i % 5)
            a.may_run(pid, 0.0)
            a.eviction_order([pid, f"P{k}.{(i + 1) % 300}"], 0.0)
            a.finish(pid, 0.0, 1 + i % 5, "edit", 0.5)  # idle: past the cap, the oldest drop

    try:
        _hammer(cycle)
    finally:
        sys.setswitchinterval(saved)
    # every program idle, at most the cap of them kept, the rest dropped (none twice)
    assert a.program_count == 100
    assert a.admitted_count <= 100
    assert a.dropped_idle_programs >= THREADS * 300 - 100
    assert a.working_set_blocks(0.0) <= 100 * 5


# -- policies and configs ------------------------------------------------------------------------


class DuckPolicy:
    def decide(self, **kwargs: Any) -> Any:
        raise AssertionError("never called")


def test_scheduler_refuses_a_duck_typed_policy_alike(backends):
    results = [outcome(partial(be.ProgramScheduler, DuckPolicy(), 10, 1)) for be in backends]
    assert (
        results[0]
        == results[1]
        == (
            "raised",
            (TypeError, "policy must be a TTLPolicy, got DuckPolicy"),
        )
    )
    # nor the other backend's policy: each scheduler drives its own backend's policy
    ref, nat = backends
    with pytest.raises(TypeError, match="policy must be a TTLPolicy"):
        nat.ProgramScheduler(ref.TTLPolicy(), 10, 1)
    with pytest.raises(TypeError, match="policy must be a TTLPolicy"):
        ref.ProgramScheduler(nat.TTLPolicy(), 10, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(window="8"), "window must be an integer, got '8'"),
        (dict(max_ttl_s="120"), "max_ttl_s must be a number, got '120'"),
        (dict(window=8.0), "window must be an integer, got 8.0"),
        (dict(offload_bandwidth_bytes_per_s="1e9"), "must be a number, got '1e9'"),
        (dict(kv_bytes_per_token=b"1"), "kv_bytes_per_token must be an integer, got b'1'"),
        (dict(prefill_chunk_tokens="2048"), "prefill_chunk_tokens must be an integer, got '2048'"),
        (dict(prefill_chunk_tokens=2048.0), "prefill_chunk_tokens must be an integer, got 2048.0"),
    ],
)
def test_config_refuses_numbers_as_text_like_decide(impl, kwargs, message):
    with pytest.raises(TypeError) as refused:
        PolicyConfig(**kwargs)
    assert message in str(refused.value)
    # as the policy's own methods refuse text
    field = next(iter(kwargs))
    with pytest.raises(TypeError, match="must be"):
        impl.TTLPolicy().decide(request_blocks="8")
    assert field in str(refused.value)


def test_config_takes_numpy_numbers_as_the_methods_do(impl):
    cfg = PolicyConfig(window=np.int64(64), max_ttl_s=np.float64(120.0), prior_mean_s=5)
    assert (cfg.window, cfg.max_ttl_s, cfg.prior_mean_s) == (64, 120.0, 5.0)
    assert type(cfg.window) is int and type(cfg.prior_mean_s) is float
    assert impl.TTLPolicy(cfg).config == cfg
