"""ProgramLinker's cost per call, from Python, at many live programs (bench/RESULTS.md,
"Program linkage").

State: ``--programs`` programs of one tenant (default 100,000), each with one recorded turn
end: a prompt of 300 to 3,000 blocks (seeded) that begins with a 269-block system prompt every
program shares (Claude Code's ~17k tokens of tools and system prompt at 64 tokens a block)
and goes on with blocks of its own; block ``i`` of program ``p`` hashes to ``i`` inside the
shared prefix, else ``p << 24 | i`` (chained: equal hashes, equal prefixes).  Then, in batches
of ``--batch`` programs, each program's next call (its prompt plus 20 new blocks, a Python
list, as an engine would pass) is linked — a lookup that continues the program — and then
reported finished, each call timed alone in the thread's CPU time (less a timer read's own
cost, the median of 10,001), the prompt list built just before it: per-call times are a
batch's mean; median and best of the batches.  Memory: the process's resident set before
and after building the state.

``--items`` says what the prompt list holds: ``int`` (the hashes as ints), ``bytes`` (32-byte
``bytes`` whose first 8 are the hash, little-endian: vLLM's block hashes, as its adapter now
passes them), ``view`` (the same bytes behind a Python ``HashView`` converting each probed item,
as the vLLM adapter did before the linker read bytes itself).

``--floor``: instead, what any call costs timed the same way right after a prompt is built
(no state): ``len`` of the prompt, and a ``link`` of an empty prompt on an empty linker (its
new program then ended) — the floor under which no lookup from Python can be measured here.
``--hot``: after building the state, one program's next call linked and finished again and
again (the same prompt, built once): the call on caches it alone uses — what the binding and
the rule's instructions cost, with no memory to wait for.
``--together``: each batch's prompts built first, then its calls linked back to back and timed
together (wall time over the batch, per call), then finished: whether the caller's own work
between two calls is what a call costs above the core (it is not: bench/RESULTS.md).

Run: ``python bench/linker_cost.py [--backend rust|python] [--programs N]
[--items int|bytes|view] [--floor | --hot | --together]``
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from ttlpolicy.serving.inferred import HashView

SHARED_BLOCKS = 269


def block(p: int, i: int) -> int:
    return i if i < SHARED_BLOCKS else (p << 24) | i


class LazyPrompt:
    """A program's prompt, its hashes made on demand (the state is built without 10^8 ints)."""

    __slots__ = ("n", "p")

    def __init__(self, p: int, n: int) -> None:
        self.p, self.n = p, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return block(self.p, i)


def as_bytes(h: int) -> bytes:
    """A block hash as vLLM gives it: 32 bytes (SHA-256), the first 8 the hash here."""
    return h.to_bytes(8, "little") + bytes(24)


class BytesView(HashView):
    """The vLLM adapter's former wrapper: each probed item converted in Python."""

    def __init__(self, hashes: list[bytes]) -> None:
        self._hashes = hashes

    def __len__(self) -> int:
        return len(self._hashes)

    def item(self, k: int) -> int:
        return int.from_bytes(bytes(self._hashes[k])[:8], "little")


def prompt_items(p: int, n: int, items: str) -> Any:
    """Program ``p``'s prompt of ``n`` blocks as ``--items`` says."""
    if items == "int":
        return [block(p, i) for i in range(n)]
    raw = [as_bytes(block(p, i)) for i in range(n)]
    return raw if items == "bytes" else BytesView(raw)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def read_cost_ns(clock: Any) -> int:
    """What one read of ``clock`` costs, ns (the median of 10,001): taken off each timing."""
    return sorted(-(clock() - clock()) for _ in range(10_001))[5_000]


def median_us(ns: list[float]) -> float:
    """The median of per-call nanoseconds (sorted), in microseconds."""
    return ns[len(ns) // 2] / 1000


def floor_us(mod: Any, batches: int, batch: int, items: str) -> None:
    """``--floor`` (module doc): per call, the median batch's mean, microseconds."""
    linker: Any = mod.ProgramLinker()
    clock = time.thread_time_ns
    empty = read_cost_ns(clock)
    spent_len: list[float] = []
    spent_link: list[float] = []
    for b in range(batches):
        len_ns = link_ns = 0
        for p in range(batch):
            h = prompt_items(p, 1_620, items)  # (the state's mean prompt, built as in main)
            t0 = clock()
            len(h)
            t1 = clock()
            h = prompt_items(p, 1_620, items)
            t2 = clock()
            lk = linker.link("tenant", [], float(b))
            t3 = clock()
            linker.end_program("tenant", lk.program)
            len_ns += t1 - t0 - empty
            link_ns += t3 - t2 - empty
        spent_len.append(len_ns / batch)
        spent_link.append(link_ns / batch)
    spent_len.sort()
    spent_link.sort()
    print(
        f"floor: len(prompt) {median_us(spent_len):.2f} us, "
        f"link of an empty prompt {median_us(spent_link):.2f} us "
        f"(median of {batches} batches of {batch}, each timed right after a prompt is built)"
    )


def hot_us(linker: Any, p: int, n: int, batches: int, batch: int, items: str, t: float) -> None:
    """``--hot`` (module doc): per call, the median batch's mean, microseconds."""
    clock = time.thread_time_ns
    empty = read_cost_ns(clock)
    h = prompt_items(p, n + 20, items)
    spent: list[float] = []
    kinds: set[str] = set()
    for _ in range(batches):
        t += 1.0
        link_ns = 0
        for _ in range(batch):
            t0 = clock()
            lk = linker.link("tenant", h, t)
            t1 = clock()
            linker.finished("tenant", lk.program, h, t)
            link_ns += t1 - t0 - empty
            kinds.add(lk.kind)
        spent.append(link_ns / batch)
    spent.sort()
    print(
        f"hot: link {median_us(spent):.2f} us, best {spent[0] / 1000:.2f} "
        f"(one program's call again and again, kinds {sorted(kinds)}; median of {batches} "
        f"batches of {batch})"
    )


def together_us(linker: Any, lengths: list[int], args: Any, rng: random.Random, t: float) -> None:
    """``--together`` (module doc): per call, the median batch's mean, microseconds."""
    spent: list[float] = []
    kinds: dict[str, int] = {}
    for _ in range(args.batches):
        batch = rng.sample(range(len(lengths)), args.batch)
        t += 1.0
        prompts = [prompt_items(p, lengths[p] + 20, args.items) for p in batch]
        t0 = time.perf_counter_ns()
        links = [linker.link("tenant", h, t) for h in prompts]
        spent.append((time.perf_counter_ns() - t0) / len(batch))
        for p, h, lk in zip(batch, prompts, links, strict=True):
            linker.finished("tenant", lk.program, h, t)
            kinds[lk.kind] = kinds.get(lk.kind, 0) + 1
            lengths[p] = len(h)
    spent.sort()
    print(
        f"together: link {median_us(spent):.2f} us, best {spent[0] / 1000:.2f} (a batch's "
        f"{args.batch} prompts built first, its calls linked back to back; kinds {kinds}; "
        f"median of {args.batches} batches)"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("rust", "python"), default="rust")
    ap.add_argument("--programs", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=2_000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--items", choices=("int", "bytes", "view"), default="int")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--floor", action="store_true", help="time the floor instead (module doc)")
    mode.add_argument("--hot", action="store_true", help="time hot calls instead (module doc)")
    mode.add_argument(
        "--together", action="store_true", help="time a batch's calls back to back (module doc)"
    )
    args = ap.parse_args(argv)
    if args.backend == "rust":
        from ttlpolicy import _native as mod
    else:
        from ttlpolicy.reference import linker as mod  # type: ignore[no-redef]
    if args.floor:
        floor_us(mod, args.batches, args.batch, args.items)
        return
    rng = random.Random(0)
    lengths = [rng.randrange(300, 3000) for _ in range(args.programs)]
    rss0 = rss_bytes()
    linker: Any = mod.ProgramLinker(max_turn_ends=1 << 20, max_programs=1 << 20)
    keys = []
    t = 0.0
    for p, n in enumerate(lengths):
        link = linker.link("tenant", LazyPrompt(p, n), t)
        linker.finished("tenant", link.program, LazyPrompt(p, n), t)
        keys.append(link.program)
    rss1 = rss_bytes()
    if args.hot:
        hot_us(linker, 0, lengths[0], args.batches, args.batch, args.items, t)
        return
    if args.together:
        together_us(linker, lengths, args, rng, t)
        return
    link_ns: list[float] = []
    finish_ns: list[float] = []
    kinds: dict[str, int] = {}
    # CPU time of this thread, not wall time: on a shared machine a wall clock also counts
    # the time the process waits for a core (the figures say which machine and load)
    clock = time.thread_time_ns
    empty = read_cost_ns(clock)
    for _ in range(args.batches):
        batch = rng.sample(range(args.programs), args.batch)
        t += 1.0
        spent_link = spent_finish = 0
        for p in batch:
            # (built just before its call, as an engine passes a prompt it just hashed)
            h = prompt_items(p, lengths[p] + 20, args.items)
            t0 = clock()
            lk = linker.link("tenant", h, t)
            t1 = clock()
            linker.finished("tenant", lk.program, h, t)
            t2 = clock()
            spent_link += t1 - t0 - empty
            spent_finish += t2 - t1 - empty
            kinds[lk.kind] = kinds.get(lk.kind, 0) + 1
            lengths[p] = len(h)
        link_ns.append(spent_link / len(batch))
        finish_ns.append(spent_finish / len(batch))
    link_ns.sort()
    finish_ns.sort()
    print(
        f"backend={args.backend} items={args.items} programs={linker.program_count} "
        f"turn_ends={linker.turn_end_count} points={linker.point_count} kinds={kinds}\n"
        f"link_us median={median_us(link_ns):.2f} best={link_ns[0] / 1000:.2f} "
        f"finished_us median={median_us(finish_ns):.2f} "
        f"best={finish_ns[0] / 1000:.2f}\n"
        f"state_rss_mb={(rss1 - rss0) / 2**20:.0f} "
        f"per_program_bytes={(rss1 - rss0) / args.programs:.0f}"
    )


if __name__ == "__main__":
    main()
