"""ProgramLinker: a call's program told from its prompt's chained block hashes (rules in
``ttlpolicy.reference.linker``'s module doc), on both backends."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttlpolicy.reference.linker import grid_positions, probe_limit

TENANT = "acme"
SYSTEM = list(range(1, 41))  # a system prompt every program of the tenant begins with


def fresh(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def turn(linker: Any, prompt: list[int], now: float, tenant: str = TENANT) -> Any:
    """Link a call and report it finished at once (prompt hashes only)."""
    link = linker.link(tenant, prompt, now)
    assert linker.finished(tenant, link.program, prompt, now)
    return link


class Counting:
    """A sequence that counts the items read."""

    def __init__(self, items: list[int]) -> None:
        self.items, self.reads = items, 0

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> int:
        self.reads += 1
        return self.items[i]


def test_grid_is_dense_near_the_end_and_probes_are_logarithmic():
    assert grid_positions(14) == [13, 12, 10, 8, 0]
    assert grid_positions(1) == [0]
    assert grid_positions(0) == []
    assert len(grid_positions(1 << 20)) <= 2 * 21
    assert probe_limit(1 << 20) == 21


def test_a_call_that_extends_the_previous_prompt_continues_its_program(impl):
    linker = impl.ProgramLinker()
    a1 = SYSTEM + fresh(1000, 60)
    first = turn(linker, a1, 0.0)
    assert first.kind == "new" and isinstance(first.program, int)
    a2 = a1 + fresh(2000, 30)  # output + tool result
    second = linker.link(TENANT, a2, 10.0)
    assert second == impl.Link("continue", first.program, None, len(a1), len(a1))
    assert linker.running(TENANT, first.program) == 1
    assert linker.finished(TENANT, first.program, a2, 12.0)
    assert linker.running(TENANT, first.program) == 0


def test_a_shared_system_prompt_never_links_two_programs(impl):
    linker = impl.ProgramLinker()
    programs = set()
    for i in range(5):
        link = turn(linker, SYSTEM + fresh(1000 * (i + 1), 50), float(i))
        assert link.kind == "new"
        programs.add(link.program)
    assert len(programs) == 5
    # each still continues its own program
    again = linker.link(TENANT, SYSTEM + fresh(3000, 50) + [99_999], 9.0)
    assert again.kind == "continue"


def test_a_prompt_only_one_program_recorded_links_to_it_then_never_once_shared(impl):
    """Identical first turns: the second cannot be told from the first's retry; once two
    programs recorded the prefix, a third call sharing only it starts anew."""
    linker = impl.ProgramLinker()
    a = turn(linker, SYSTEM, 0.0)
    b = turn(linker, SYSTEM, 1.0)
    assert (b.kind, b.program) == ("continue", a.program)
    c = turn(linker, SYSTEM + fresh(500, 10), 2.0)
    assert (c.kind, c.program) == ("continue", a.program)
    linker2 = impl.ProgramLinker()
    turn(linker2, SYSTEM + fresh(500, 10), 0.0)
    turn(linker2, SYSTEM + fresh(600, 10), 1.0)  # the prefix is now recorded by two
    assert linker2.link(TENANT, [*SYSTEM, 7], 2.0).kind == "new"


def test_a_re_rendered_turn_end_falls_back_to_a_shallower_point(impl):
    """A chat template that re-renders the previous prompt's last blocks: the call keeps
    most of it and still continues the program, with depth < context."""
    linker = impl.ProgramLinker()
    a1 = SYSTEM + fresh(1000, 100)
    first = turn(linker, a1, 0.0)
    a2 = a1[:-3] + fresh(5000, 20)
    second = linker.link(TENANT, a2, 1.0)
    assert (second.kind, second.program) == ("continue", first.program)
    assert len(a1) - 3 - 4 <= second.depth_blocks <= len(a1) - 3 < second.context_blocks


def test_output_hashes_let_the_next_call_match_deeper(impl):
    linker = impl.ProgramLinker()
    prompt = SYSTEM + fresh(1000, 50)
    output = fresh(8000, 6)
    link = linker.link(TENANT, prompt, 0.0)
    linker.finished(TENANT, link.program, prompt + output, 1.0, prompt_blocks=len(prompt))
    nxt = linker.link(TENANT, prompt + output + fresh(9000, 5), 2.0)
    assert (nxt.kind, nxt.depth_blocks, nxt.context_blocks) == (
        "continue",
        len(prompt) + len(output),
        len(prompt) + len(output),
    )


def test_a_compacted_or_rewritten_history_starts_a_new_program(impl):
    linker = impl.ProgramLinker()
    turn(linker, SYSTEM + fresh(1000, 10), 0.0)
    a = turn(linker, SYSTEM + fresh(2000, 200), 1.0)
    # compaction: only the (ambiguous) system prompt is kept
    assert linker.link(TENANT, SYSTEM + fresh(3000, 20), 2.0).kind == "new"
    # a rewrite that keeps half of the program's prompt (below min_depth_fraction)
    half = (SYSTEM + fresh(2000, 200))[:120] + fresh(4000, 50)
    assert linker.link(TENANT, half, 3.0).kind == "new"
    # with min_depth_fraction 0 the same call continues, saying what no longer serves
    loose = impl.ProgramLinker(min_depth_fraction=0.0)
    turn(loose, SYSTEM + fresh(1000, 10), 0.0)
    b = turn(loose, SYSTEM + fresh(2000, 200), 1.0)
    got = loose.link(TENANT, half, 3.0)
    assert (got.kind, got.program) == ("continue", b.program)
    assert got.depth_blocks <= 120 < got.context_blocks
    assert a.kind == "new"


def test_a_second_call_from_a_live_context_forks(impl):
    linker = impl.ProgramLinker()
    base = SYSTEM + fresh(1000, 50)
    first = turn(linker, base, 0.0)
    one = linker.link(TENANT, base + fresh(2000, 5), 1.0)
    two = linker.link(TENANT, base + fresh(3000, 5), 1.5)  # parallel call, same turn end
    assert one.kind == "continue" and one.program == first.program
    assert two.kind == "fork" and two.parent == first.program
    assert two.program != first.program and two.depth_blocks == len(base)
    assert linker.running(TENANT, two.program) == 1


def test_tenants_never_link(impl):
    linker = impl.ProgramLinker()
    prompt = SYSTEM + fresh(1000, 80)
    mine = turn(linker, prompt, 0.0)
    stranger = turn(linker, prompt + fresh(2000, 5), 1.0, tenant="stranger")
    assert stranger.kind == "new" and stranger.program != mine.program
    assert linker.finished("stranger", mine.program, prompt, 2.0) is False
    assert linker.end_program("stranger", mine.program) is False
    nxt = linker.link(TENANT, prompt + fresh(3000, 5), 3.0)
    assert (nxt.kind, nxt.program) == ("continue", mine.program)


@pytest.mark.parametrize("n", [1, 2, 63, 1000, 100_000])
def test_a_lookup_reads_at_most_its_probe_limit_whatever_the_prompt(impl, n):
    """A prompt crafted to match many recorded turns costs one lookup's probes."""
    linker = impl.ProgramLinker()
    prompt = list(range(n))
    for k in range(1, 30):  # many turn ends along the same prompt, and shared
        turn(linker, prompt[: max(1, n * k // 30)], float(k))
        turn(linker, [*prompt[: max(1, n * k // 30)], 10**9 + k], float(k))
    seq = Counting(prompt)
    linker.link(TENANT, seq, 100.0)
    assert seq.reads <= probe_limit(n) + 1  # (+1: the point found is read again)


def test_turn_ends_are_bounded_oldest_first_and_age_out(impl):
    linker = impl.ProgramLinker(max_turn_ends=3, max_age_s=10.0, max_programs=100)
    links = [turn(linker, fresh(1000 * (i + 1), 40), float(i)) for i in range(5)]
    assert linker.turn_end_count == 3
    assert linker.point_count <= 3 * len(grid_positions(40))
    # the oldest were dropped: their continuation starts anew; a recent one continues
    assert linker.link(TENANT, [*fresh(1000, 40), 7], 5.0).kind == "new"
    recent = linker.link(TENANT, [*fresh(5000, 40), 7], 5.0)
    assert recent.program == links[4].program
    linker.link(TENANT, [1], 100.0)  # all aged out
    assert linker.turn_end_count == 0 and linker.point_count == 0


def test_programs_are_bounded_least_recent_first(impl):
    linker = impl.ProgramLinker(max_programs=2)
    a = linker.link(TENANT, [1, 2], 0.0)
    b = linker.link(TENANT, [3, 4], 1.0)
    linker.link(TENANT, [5, 6], 2.0)
    assert linker.program_count == 2
    assert linker.running(TENANT, a.program) == 0  # forgotten
    assert linker.running(TENANT, b.program) == 1
    assert linker.finished(TENANT, a.program, [1, 2], 3.0) is False


def test_a_tenant_flooding_new_programs_churns_its_own_share(impl):
    """8 programs and 8 turn ends in all: tenant "b"'s two programs, least recent of all,
    still continue after "a" started 50 new ones (room was made from "a"'s own once it held
    more than "b"); "a"'s latest still continue, its earliest start anew."""
    linker = impl.ProgramLinker(max_turn_ends=8, max_programs=8)
    b_prompts = [fresh(1000 * (i + 1), 40) for i in range(2)]
    b_keys = [turn(linker, p, 0.0, tenant="b").program for p in b_prompts]
    a_prompts = [fresh(100_000 + 1000 * i, 40) for i in range(50)]
    a_keys = [turn(linker, p, 1.0 + i, tenant="a").program for i, p in enumerate(a_prompts)]
    assert (linker.program_count, linker.turn_end_count) == (8, 8)
    for p, k in zip(b_prompts, b_keys, strict=True):
        assert (linker.link("b", [*p, 7], 60.0).kind, k) == ("continue", k)
    assert linker.link("a", [*a_prompts[-1], 7], 60.0).program == a_keys[-1]
    assert linker.link("a", [*a_prompts[0], 7], 60.0).kind == "new"


def test_a_smaller_tenants_new_program_takes_room_from_the_larger(impl):
    """The table full of "a"'s programs: "b"'s new one takes the room of "a"'s least
    recent (b holds fewer), and so does the next while b still holds fewer."""
    linker = impl.ProgramLinker(max_turn_ends=100, max_programs=4)
    a_keys = [turn(linker, fresh(1000 * (i + 1), 20), float(i), tenant="a").program
              for i in range(4)]  # fmt: skip
    b_keys = [turn(linker, fresh(50_000 + 1000 * i, 20), 10.0 + i, tenant="b").program
              for i in range(2)]  # fmt: skip
    gone = [linker.finished(who, k, [1], 12.0) is False
            for who, keys in (("a", a_keys), ("b", b_keys)) for k in keys]  # fmt: skip
    assert gone == [True, True, False, False, False, False]


def test_a_fork_never_pushes_out_its_own_parent(impl):
    """Two programs in all, one each of "u" and "t": t's fork (t's program has a call
    running) takes the room of u's idle program, not of its parent, which t's one program is
    (a review's case: with ties going to the tenant's own, the parent was forgotten)."""
    linker = impl.ProgramLinker(max_turn_ends=100, max_programs=2)
    pu, pt = fresh(1000, 40), fresh(5000, 40)
    u = turn(linker, pu, 0.0, tenant="u")
    t = turn(linker, pt, 1.0, tenant="t")
    assert linker.link("t", [*pt, 1], 2.0).program == t.program  # running now
    fork = linker.link("t", [*pt, 2], 3.0)
    assert (fork.kind, fork.parent) == ("fork", t.program)
    assert linker.running("t", t.program) == 1
    assert linker.finished("u", u.program, pu, 4.0) is False


def test_the_least_recent_program_goes_after_many_uses_of_the_others(impl):
    # (hundreds of uses of two programs between b's only use and the next new program)
    linker = impl.ProgramLinker(max_programs=3)
    b = linker.link(TENANT, [7, 8], 0.0)
    busy = {p: [p] for p in (100, 200)}
    keys = {p: turn(linker, prompt, 0.0).program for p, prompt in busy.items()}
    for i in range(150):
        for p, prompt in busy.items():
            prompt.append(p * 1000 + i)
            nxt = linker.link(TENANT, prompt, 1.0 + i)
            assert (nxt.kind, nxt.program) == ("continue", keys[p])
            assert linker.finished(TENANT, nxt.program, prompt, 1.0 + i)
    linker.link(TENANT, [9], 200.0)
    assert linker.program_count == 3
    assert linker.finished(TENANT, b.program, [7, 8], 201.0) is False  # b was forgotten
    for p, prompt in busy.items():
        assert linker.link(TENANT, [*prompt, 1], 202.0).program == keys[p]


def test_explicit_ids_take_precedence_and_their_turns_link_calls_without_ids(impl):
    linker = impl.ProgramLinker()
    prompt = SYSTEM + fresh(1000, 30)
    named = linker.link(TENANT, prompt, 0.0, program="job-7")
    assert (named.kind, named.program) == ("new", "job-7")
    assert linker.finished(TENANT, "job-7", prompt, 1.0)
    anon = linker.link(TENANT, prompt + fresh(2000, 4), 2.0)
    assert (anon.kind, anon.program) == ("continue", "job-7")
    linker.finished(TENANT, "job-7", prompt + fresh(2000, 4), 3.0)
    again = linker.link(TENANT, prompt + fresh(2000, 4) + [1], 4.0, program="job-7")
    assert (again.kind, again.program, again.depth_blocks) == ("continue", "job-7", 75)
    # a named program another tenant uses is another program
    assert linker.link("other", prompt, 5.0, program="job-7").kind == "new"


def test_an_aborted_call_records_nothing_and_an_ended_program_is_forgotten(impl):
    linker = impl.ProgramLinker()
    prompt = fresh(1, 30)
    link = linker.link(TENANT, prompt, 0.0)
    assert linker.finished(TENANT, link.program, [], 1.0)
    assert linker.program_count == 0 and linker.turn_end_count == 0
    first = turn(linker, prompt, 2.0)
    assert linker.end_program(TENANT, first.program)
    assert linker.end_program(TENANT, first.program) is False
    assert linker.link(TENANT, [*prompt, 99], 3.0).kind == "new"


def test_hashes_are_read_modulo_two_to_the_64(impl):
    linker = impl.ProgramLinker()
    first = turn(linker, [-1, -2, 5], 0.0)
    nxt = linker.link(TENANT, [2**64 - 1, 2**64 - 2, 5, 6], 1.0)
    assert (nxt.kind, nxt.program) == ("continue", first.program)


def test_bytes_hashes_read_as_the_int_of_their_first_eight(impl):
    # vLLM's block hashes are 32-byte digests: the linker reads them as they are
    linker = impl.ProgramLinker()
    first = turn(linker, [11, 12, 13], 0.0)
    digests = [h.to_bytes(8, "little") + b"rest of a digest" for h in (11, 12, 13, 14)]
    nxt = linker.link(TENANT, digests, 1.0)
    assert (nxt.kind, nxt.program) == ("continue", first.program)
    assert linker.finished(TENANT, nxt.program, digests, 2.0)
    # bytes shorter than 8 are the int they spell; a different 9th byte changes nothing
    again = linker.link(TENANT, [b"\x0b", b"\x0c", b"\x0d", (14).to_bytes(9, "little"), b"x"], 3.0)
    assert (again.kind, again.program) == ("continue", first.program)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda lk: lk.link(3, [1], 0.0), TypeError, "tenant must be a str, got int"),
        (lambda lk: lk.link("t", "abc", 0.0), TypeError, "prompt_hashes must be a sequence"),
        (lambda lk: lk.link("t", [1.5], 0.0), TypeError, "prompt_hashes[0] must be an integer"),
        (lambda lk: lk.link("t", [bytearray(1)], 0.0), TypeError, "[0] must be an integer or"),
        (lambda lk: lk.link("t", [2**64], 0.0), ValueError, "prompt_hashes[0] must be in"),
        (lambda lk: lk.link("t", [1], float("nan")), ValueError, "now must be finite, got nan"),
        (lambda lk: lk.link("t", [1], 0.0, program=5), TypeError, "program must be a str"),
        (lambda lk: lk.link("t", [1], 0.0, program=""), ValueError, "program must be 1 to"),
        (lambda lk: lk.finished("t", True, [1], 0.0), TypeError, "program must be an int or"),
        (lambda lk: lk.finished("t", 0, [1], 0.0), ValueError, "program must be in [1, "),
        (lambda lk: lk.finished("t", 1, [1], 0.0, 2), ValueError, "prompt_blocks must be in"),
        (lambda lk: lk.finished("t", "p", [1, "x"], 0.0), TypeError, "hashes[1] must be an int"),
        (lambda lk: lk.link("t", [1], -1.0), ValueError, "now must be >= the last call's now"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(impl, call, error, message):
    linker = impl.ProgramLinker(max_age_s=1.0)
    turn(linker, [1, 2, 3], 0.0)
    before = (linker.turn_end_count, linker.program_count, linker.point_count)
    with pytest.raises(error) as info:
        call(linker)
    assert message in str(info.value)
    assert (linker.turn_end_count, linker.program_count, linker.point_count) == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_turn_ends": 0}, "max_turn_ends must be in [1, "),
        ({"max_age_s": 0.0}, "max_age_s must be > 0, got 0.0"),
        ({"max_programs": 2**31}, "max_programs must be in [1, "),
        ({"min_depth_fraction": 1.5}, "min_depth_fraction must be in [0, 1], got 1.5"),
    ],
)
def test_bad_bounds_are_refused(impl, kwargs, message):
    with pytest.raises(ValueError) as info:
        impl.ProgramLinker(**kwargs)
    assert message in str(info.value)


def test_links_are_values(impl):
    link = impl.Link("fork", 3, "job", 10, 12)
    assert link == impl.Link("fork", 3, "job", 10, 12) != impl.Link("fork", 3, None, 10, 12)
    assert hash(link) == hash(impl.Link("fork", 3, "job", 10, 12))
    assert pickle.loads(pickle.dumps(link)) == link
    assert repr(link) == (
        "Link(kind='fork', program=3, parent='job', depth_blocks=10, context_blocks=12)"
    )


@given(
    prompts=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 40), st.booleans()),
        min_size=1,
        max_size=40,
    ),
    bounds=st.tuples(st.integers(1, 6), st.integers(1, 6)),
)
def test_bounds_hold_and_a_tenant_never_links_to_anothers_program(impl, prompts, bounds):
    """Random traffic of chained prompts from two tenants: the tables stay within their
    bounds, every probe count within its limit, and a link never crosses tenants."""
    max_turn_ends, max_programs = bounds
    linker = impl.ProgramLinker(max_turn_ends=max_turn_ends, max_programs=max_programs)
    owner: dict[Any, str] = {}
    recorded: list[list[int]] = [list(range(1, 20))]
    fresh = iter(range(1000, 10**9))
    for k, (base, keep, extra, finish) in enumerate(prompts):
        tenant = "a" if k % 3 else "b"
        prev = recorded[base % len(recorded)]
        prompt = Counting(prev[:keep] + [next(fresh) for _ in range(extra)])
        link = linker.link(tenant, prompt, float(k))
        assert prompt.reads <= probe_limit(len(prompt)) + 1
        for key in (link.program, link.parent):
            if key is not None and link.kind != "new":
                assert owner.get(key, tenant) == tenant, (tenant, link)
        owner.setdefault(link.program, tenant)
        if finish:
            assert linker.finished(tenant, link.program, prompt.items, float(k)) in (True, False)
            recorded.append(prompt.items)
        assert linker.turn_end_count <= max_turn_ends
        assert linker.program_count <= max_programs
