"""``inspect.signature(TTLPolicy.decide)`` shows its defaults in both backends (issue 47: the
native one showed ``request_blocks=Ellipsis``, pyo3's rendering of a default it cannot
print); tests/core/test_public_surface.py holds the shown values to the reference's."""

from __future__ import annotations

import inspect


def test_decide_shows_every_default(impl) -> None:
    params = inspect.signature(impl.TTLPolicy.decide).parameters
    shown = {name: p.default for name, p in params.items() if name != "self"}
    assert Ellipsis not in shown.values(), shown
    assert shown["request_blocks"] == 0 and shown["tool"] is None
    # and the defaults shown are the ones a call that omits them gets
    policy = impl.TTLPolicy()
    assert policy.decide() == policy.decide(**shown)
