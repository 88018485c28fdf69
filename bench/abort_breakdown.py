"""abort cost vs queue size and which request is aborted: bursts of 200 (short enough to
run between the scheduler's preemptions on a loaded machine), median and best of 40."""

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
    pk = s.peek
    t = time.perf_counter()
    for _ in range(BURST):
        pk()
    return statistics.median(out), min(out)


for W in (10_000, 100_000):
    for order in ("id", "random"):
        med, best = per_op(W, order)
        print(f"waiting={W:>7} order={order:>6}: abort median {med:5.0f} ns, best {best:5.0f} ns")
