"""The Rust core's ProgramLinker against the reference: random traffic of chained prompts
(programs that extend, re-render, rewrite and share prefixes, from three tenants, with
explicit ids mixed in, bad input among them), every answer, error and count alike."""

from __future__ import annotations

from functools import partial
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from parity import API_ERRORS

LINK_FIELDS = ("kind", "program", "parent", "depth_blocks", "context_blocks")


def answer(call: Any) -> tuple[str, Any]:
    """("ok", result with a Link as a tuple) or ("raised", (type, message))."""
    try:
        r = call()
    except API_ERRORS as e:
        return "raised", (type(e), str(e))
    if type(r).__name__ == "Link":
        return "ok", tuple(getattr(r, f) for f in LINK_FIELDS)
    return "ok", r


def as_bytes(prompt: list[int], seed: int) -> list[bytes]:
    """The prompt's hashes as bytes whose first 8 are the hash, little-endian (vLLM's are 32
    long; some shorter than 8 here, read as the int they spell)."""
    out = []
    for i, h in enumerate(prompt):
        raw = (h % 2**64).to_bytes(8, "little")
        out.append(raw + bytes(24) if (seed + i) % 4 else raw.rstrip(b"\0"))
    return out


def counts(linker: Any) -> tuple[int, int, int]:
    return linker.turn_end_count, linker.program_count, linker.point_count


op = st.tuples(
    st.sampled_from(["link", "link", "link", "finish", "finish", "end", "bad"]),
    st.integers(0, 1_000_000),  # a seed for the op's choices
    st.floats(0.0, 8.0),  # time step
)


@given(
    ops=st.lists(op, min_size=1, max_size=60),
    bounds=st.tuples(
        st.integers(1, 12),
        st.floats(5.0, 200.0),
        st.integers(1, 8),
        st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    ),
)
def test_linkers_agree_on_random_traffic(backends, ops, bounds):
    ref_mod, nat_mod = backends
    max_turn_ends, max_age_s, max_programs, fraction = bounds
    linkers = [
        m.ProgramLinker(max_turn_ends, max_age_s, max_programs, fraction)
        for m in (ref_mod, nat_mod)
    ]
    prompts: list[list[int]] = [[1, 2, 3, 4, 5, 6, 7, 8]]  # a shared system prompt first
    fresh = iter(range(1000, 10**9))
    programs: list[Any] = [1, "named"]
    pending: list[tuple[str, Any, list[int]]] = []  # running calls: (tenant, program, prompt)
    recorded: list[list[int]] = []  # finished calls' prompts
    now = 0.0
    for kind, seed, dt in ops:
        now += dt
        # mostly a recently finished call's prompt, whose continuation links
        pool = recorded if recorded and seed % 3 else prompts
        base = pool[-1 - seed % min(3, len(pool))]
        tenant = "aaabc"[seed % 5]  # (three tenants of unequal traffic: the shares' rule)
        cut = len(base) - (seed >> 3) % 4 if seed % 7 == 0 else len(base)  # a re-render
        prompt = base[: max(0, cut)] + [next(fresh) for _ in range((seed >> 5) % 40)]
        prompts.append(prompt)
        call: tuple[Any, ...]
        if kind == "link":
            # (a third of the calls hand their hashes as bytes, as vLLM's adapter does)
            given = as_bytes(prompt, seed) if seed % 3 == 1 else prompt
            call = ("link", tenant, given, now, "named" if seed % 11 == 0 else None)
        elif kind == "finish":
            if pending and seed % 4:  # mostly a running call's own end, with its output
                tenant, program, prompt = pending.pop(seed % len(pending))
                prompt = prompt + [next(fresh) for _ in range(seed % 3)]
            else:
                program = programs[(seed >> 2) % len(programs)]
            k = None if seed % 3 else (seed >> 4) % (len(prompt) + 1)
            call = ("finished", tenant, program, prompt, now, k)
        elif kind == "end":
            call = ("end_program", tenant, programs[(seed >> 2) % len(programs)])
        else:
            bad: list[Any] = [[1, 2.5], [2**64], "text", [1, None], [1, bytearray(b"x")]]
            pick = bad[seed % len(bad)]
            call = ("link", tenant, pick if isinstance(pick, str) else prompt + pick, now)
        got = [answer(partial(getattr(lk, call[0]), *call[1:])) for lk in linkers]
        assert got[0] == got[1], (kind, got)
        if got[0][0] == "ok" and kind == "finish":
            recorded.append(prompt)
        if got[0][0] == "ok" and kind == "link":
            programs.append(got[0][1][1])
            pending.append((tenant, got[0][1][1], prompt))
        assert counts(linkers[0]) == counts(linkers[1])
        program = programs[seed % len(programs)]
        assert linkers[0].running(tenant, program) == linkers[1].running(tenant, program)


def test_errors_name_the_first_bad_argument_alike(backends):
    for args in [
        (3, "x", float("nan")),
        ("t", "x", float("nan")),
        ("t", [1], float("nan"), 5),
        ("t", [1], 1.0, 5),
        ("", [1], 1.0),
    ]:
        got = [answer(partial(m.ProgramLinker().link, *args)) for m in backends]
        assert got[0] == got[1] and got[0][0] == "raised", got
    for args in [
        ("t", 1.5, [1], 0.0),
        ("t", 2**70, [1], 0.0),
        ("t", "p", [1], float("inf"), -1),
        ("t", "p", [1], 0.0, -1),
        ("t", "p", [1, 2**63], 0.0, 1),
    ]:
        got = [answer(partial(m.ProgramLinker().finished, *args)) for m in backends]
        assert got[0] == got[1], got
