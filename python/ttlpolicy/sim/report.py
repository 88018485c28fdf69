"""Reports of simulation runs: a text table of run summaries (one row a policy), a progress
bar.  Used by ``ttlpolicy compare`` and ``bench/`` (the plot: ``ttlpolicy.cli.compare.figure``)."""

from __future__ import annotations

import sys

COLUMNS = (
    ("jct_mean_s", "JCT mean s", "{:.1f}"),
    ("jct_p50_s", "p50 s", "{:.1f}"),
    ("jct_p95_s", "p95 s", "{:.1f}"),
    ("engine_mean_s", "on engine s", "{:.1f}"),
    ("ttft_mean_s", "TTFT s", "{:.3f}"),
    ("throughput_tok_s", "out tok/s", "{:.1f}"),
    ("hit_rate", "hit rate", "{:.3f}"),
    ("recomputed_tokens", "recomputed", "{:.3g}"),
    ("pinned_block_s", "pinned blk·s", "{:.3g}"),
    ("preemptions", "preempt", "{:.0f}"),
)


class Progress:
    """A one-line progress bar on stderr (programs finished out of all runs)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.base, self._last = total, 0, 0, -1
        self.tty = sys.stderr.isatty()

    def __call__(self, finished_in_run: int) -> None:
        done = self.base + finished_in_run
        pct = 100 * done // max(self.total, 1)
        if pct != self._last:
            self._last = pct
            bar = "#" * (pct // 4)
            end = "\r" if self.tty else "\n"
            if self.tty or pct % 25 == 0:
                print(f"  [{bar:<25}] {pct:3d}%", end=end, file=sys.stderr, flush=True)

    def next_run(self, programs: int) -> None:
        self.base += programs

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def format_table(rows: list[tuple[str, dict[str, float]]]) -> str:
    """One row per (policy name, ``Metrics.summary()``), the ``COLUMNS`` aligned."""
    head = ["policy"] + [title for _, title, _ in COLUMNS]
    body = [[name] + [fmt.format(s[key]) for key, _, fmt in COLUMNS] for name, s in rows]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [head, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
