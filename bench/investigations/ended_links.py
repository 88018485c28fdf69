"""bench/bounds.py or bench/fleet.py with the plug-in told of superseded linked programs
(issue 45 part 4; docs/investigations/common-prefix.md): a linked program whose trace
program's next call links elsewhere (``ProgramIds.superseded``) ends in the policy at that
call's arrival, as a program ends at its last turn, and its pin, if any, is released.  The
wiring is what the plug-in (``TTLPolicyPlugin.arrive``) would do; here it is patched in, the
rest is the script as is.

    cd bench && PYTHONPATH=../python:. python investigations/ended_links.py bounds|fleet [options]
"""

from __future__ import annotations

import sys

import bounds
import fleet
from ttlpolicy.sim.call import Call
from ttlpolicy.sim.policies.ttlpolicy_plugin import TTLPolicyPlugin

_arrive = TTLPolicyPlugin.arrive


def arrive(self: TTLPolicyPlugin, call: Call, now: float) -> bool:
    pinned = _arrive(self, call, now)
    ids = self._ids
    if ids is None or not ids.superseded:
        return pinned
    released = False
    for old in ids.take_superseded():
        try:
            ended = self.life.end_program(old)
        except KeyError:
            continue  # (forgotten already)
        released = released or ended.pin is not None
    self._refused_rid = None  # (admission's state changed: ask again)
    # its pin was on this call's trace program's chain: the engine unpins it now
    return pinned or released


if __name__ == "__main__":
    TTLPolicyPlugin.arrive = arrive  # type: ignore[method-assign]
    script = sys.argv.pop(1)
    sys.exit({"bounds": bounds.main, "fleet": fleet.main}[script]())
