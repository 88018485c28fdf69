"""abort cost vs queue size and which request is aborted: bursts of 200 (short enough to
run between the scheduler's preemptions on a loaded machine), median and best of 40, with
the peek() floor (a call through the binding) of the same scheduler and the load average.

Run: python bench/investigations/abort_breakdown.py (after scripts/env.sh)."""

import os
import random
import statistics
import time

import numpy as np

from ttlpolicy import _native as n

BURST, BURSTS = 200, 40


def per_op(W, order):
    s = n.ProgramScheduler(n.TTLPolicy(), 10 * W + 10, 10)
    ids = [f"w{i}" for i in range(W)]
    s.arrive_many(ids, [f"W{i}" for i in range(W)], 0.0, np.ones(W, np.int64))
    sel = ids[: BURST * BURSTS] if order == "id" else random.Random(1).sample(ids, BURST * BURSTS)
    ab, out = s.abort, []
    for b in range(BURSTS):
        chunk = sel[b * BURST : (b + 1) * BURST]
        t = time.perf_counter()
        for r in chunk:
            ab(r)
        out.append((time.perf_counter() - t) / BURST * 1e9)
    pk, floor = s.peek, []
    for _ in range(BURSTS):
        t = time.perf_counter()
        for _ in range(BURST):
            pk()
        floor.append((time.perf_counter() - t) / BURST * 1e9)
    return statistics.median(out), min(out), statistics.median(floor)


print(f"load average {os.getloadavg()[0]:.2f}")
for W in (10_000, 100_000):
    for order in ("id", "random"):
        med, best, floor = per_op(W, order)
        print(
            f"waiting={W:>7} order={order:>6}: abort median {med:5.0f} ns, best {best:5.0f} ns"
            f" (peek {floor:3.0f} ns)"
        )
print(f"load average {os.getloadavg()[0]:.2f}")
