"""The threading contract of the reference classes (the native ones keep it too).

Any object may be shared between threads: each public method call (and property read) is
atomic — it sees and leaves the object in a consistent state, so windows stay bounded and
counts exact under concurrent use.  The reference holds a per-object lock for each call; the
native classes run each call under the GIL without releasing it.  The lock is re-entrant: an
argument whose ``__float__``/``__index__`` calls back into the same object works, as it does
on the native side (which converts arguments before borrowing the object).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return call


def synchronized(cls: type[T]) -> type[T]:
    """Give every instance a re-entrant lock and hold it in each public method, property
    getter and ``__len__`` of ``cls``."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self._lock = threading.RLock()
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010 (mypy refuses assigning a method)
    for name, attr in list(vars(cls).items()):
        if name.startswith("_") and name != "__len__":
            continue
        if isinstance(attr, property) and attr.fget is not None:
            setattr(cls, name, property(_locked(attr.fget), attr.fset, attr.fdel, attr.__doc__))
        elif callable(attr) and not isinstance(attr, (staticmethod, classmethod, type)):
            setattr(cls, name, _locked(attr))
    return cls


def lock_of(obj: Any) -> threading.RLock:
    """The lock that ``synchronized`` gave ``obj`` (``ProgramLifecycle`` holds its parts' locks
    across a call's checks and changes)."""
    lock: threading.RLock = obj._lock
    return lock
