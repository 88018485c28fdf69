"""How long a newcomer waits for load control when many programs left on a tool and never
came back (issue 44: "with 300 one-block programs newcomers are not held ``max_ttl_s``").

Scenario, on ``AdmissionControl`` alone (no engine): ``--total-blocks`` blocks; N programs
of one block arrive together at 0 s (a cohort: all admitted), each finishes one turn at 1 s
holding 2 blocks, on the tool ``bash``, losing its context costing ``--rebuild-s``, and never
returns — nobody has returned, so they are judged by the prior.  At 2 s a one-block program
arrives; it asks ``may_run`` at every instant ``next_shrink_s`` names until admitted.

Run: ``python bench/gone_programs.py [--programs 50,100,256,300] [--rebuild-s 0.05]``
"""

from __future__ import annotations

import argparse
import json
import math

import ttlpolicy


def newcomer_wait_s(programs: int, total_blocks: int, rebuild_s: float) -> dict:
    """The newcomer's wait, and the working set when it arrived."""
    policy = ttlpolicy.TTLPolicy(ttlpolicy.PolicyConfig(admission=True))
    ac = ttlpolicy.AdmissionControl(policy, total_blocks=total_blocks)
    for i in range(programs):
        ac.arrive(f"p{i}", 0.0, 1)
        ac.may_run(f"p{i}", 0.0)
    for i in range(programs):
        ac.finish(f"p{i}", 1.0, 2, tool="bash", rebuild_s=rebuild_s)
    working = ac.working_set_blocks(2.0)
    ac.arrive("new", 2.0, 1)
    t = 2.0
    while not ac.may_run("new", t):
        t = ac.next_shrink_s(t)
        if t == math.inf:
            return {"programs": programs, "working_set": working, "wait_s": math.inf}
    return {"programs": programs, "working_set": working, "wait_s": round(t - 2.0, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="50,100,256,300")
    ap.add_argument("--total-blocks", type=int, default=200)
    ap.add_argument("--rebuild-s", type=float, default=0.05)
    args = ap.parse_args()
    for n in (int(x) for x in args.programs.split(",")):
        print(json.dumps(newcomer_wait_s(n, args.total_blocks, args.rebuild_s)))


if __name__ == "__main__":
    main()
