"""The ``TTLPolicyRouter`` objects made in this process.  Its own module: Ray ships the router
class with cloudpickle, which rebuilds the class's methods with globals (and class attributes)
of their own each time it unpickles it; a module is pickled by reference, so this list is the
one every copy of the class appends to."""

from __future__ import annotations

from typing import Any

ROUTERS: list[Any] = []
