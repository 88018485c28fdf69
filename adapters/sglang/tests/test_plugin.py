"""The plug-in loads the way SGLang's launcher loads plug-ins: a fresh process that calls
``sglang.srt.plugins.load_plugins()`` (what ``python -m sglang.launch_server`` runs before it
parses its arguments) finds the ``sglang.srt.plugins`` entry point of the installed package,
registers the ``ttlpolicy`` backend and wraps ``SchedulePolicy.calc_priority``; the tree cache
SGLang then builds for ``--radix-cache-backend ttlpolicy`` is the adapter's, and the wrapped
scheduling pass orders by program.  Hooks patch the whole process, hence the subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TEST_POLICY

BENCH = Path(__file__).resolve().parents[3] / "bench"  # sglang_engine, for the subprocess

SCRIPT = r"""
import json
import sglang_engine as testing  # (bench/) the CPU pools and the torchvision shim, as the tests
from sglang.srt.plugins import load_plugins
from sglang.srt.mem_cache.registry import registered_radix_cache_backends
from sglang.srt.managers.schedule_policy import SchedulePolicy

out = {"before": registered_radix_cache_backends()}
try:  # not loaded yet: SGLang refuses the name, as it would refuse the flag
    testing.make_scheduler(256, "ttlpolicy", None)
except ValueError as e:
    out["refused"] = "is not registered" in str(e)
load_plugins()
out["backends"] = registered_radix_cache_backends()
s = testing.make_scheduler(256, "ttlpolicy", testing.FakeClock())
out["cache"] = type(s.cache).__name__
prompt = testing.tokens(10_000, 50)
first = s.submit(prompt, program="agent", tool="bash")
assert s.schedule() == [first]
s.finish(first, testing.tokens(20_000, 5))
anon = s.submit(testing.tokens(30_000, 10))
back = s.submit(prompt + testing.tokens(20_000, 5) + [7], program="agent")
before = s.cache.ttl_stats()["schedule_calls"]
s.policy.calc_priority(s.waiting, None)  # the method itself, as SGLang's scheduler calls it
out["adapter_calls"] = s.cache.ttl_stats()["schedule_calls"] - before
out["order"] = [r.rid for r in s.waiting]
out["expected"] = [back.rid, anon.rid]
# load control: SGLang's PrefillAdder.add_one_req (patched by the plug-in's hook) refuses a
# program the working set holds back before the adder looks at memory
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
t = testing.make_scheduler(256, "ttlpolicy", testing.FakeClock())
x = t.submit(testing.tokens(40_000, 150), program="x", tool="bash")
assert t.schedule() == [x]
t.finish(x, testing.tokens(41_000, 5))
t.cache.ttl.clock.advance(0.5)
y = t.submit(testing.tokens(42_000, 150), program="y")
t.order()
adder = type("Adder", (), {"tree_cache": t.cache})()
out["held_back"] = PrefillAdder.add_one_req(adder, y) == AddReqResult.OTHER
print("RESULT " + json.dumps(out))
"""


def run(env_extra: dict[str, str]) -> dict:
    env = dict(os.environ, TTLPOLICY_POLICY=TEST_POLICY, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_the_launcher_loads_the_plugin_and_the_backend_orders_by_program() -> None:
    out = run({"SGLANG_PLUGINS": "ttlpolicy"})
    assert "ttlpolicy" not in out["before"] and out["refused"]
    assert "ttlpolicy" in out["backends"]
    assert out["cache"] == "TTLRadixCache"
    assert out["order"] == out["expected"], "the returning program runs first"
    assert out["adapter_calls"] == 1, "SGLang's calc_priority went through the adapter"
    assert out["held_back"], "SGLang's prefill admission went through load control"
