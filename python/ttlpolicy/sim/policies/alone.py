"""``alone``: a bound, not a policy an engine could run — each program's completion time when
it has the engine to itself.  ``sim.run.simulate`` sees the flag ``runs_alone`` and runs every
program through its own ``Engine`` under this policy (stock vLLM's rules), at the instant the
arrival process would have started it, then merges the runs' metrics.

Why that is the bound, on the same engine model: a program runs one call at a time, so alone
its call never waits for a slot or for memory (a context larger than the engine is an error
on any policy), its chain is the only one in the KV cache, so nothing evicts it and nothing
is preempted, and each step holds its tokens only — no other call's tokens, attention or KV
reads lengthen it.  Every other policy shares the engine, so each of its calls waits at
least as long and each step takes at least as long (tested program by program,
``tests/sim/test_bounds.py``).  A shared engine starts a program at the step boundary after
its arrival, ``alone`` at the arrival: each measures from the program's own start.
"""

from __future__ import annotations

from .vllm import VLLM


class Alone(VLLM):
    """Stock vLLM's rules on an engine that serves one program only (``runs_alone``)."""

    name = "alone"
    #: ``sim.run.simulate`` runs each program on an engine of its own under this policy
    runs_alone = True
