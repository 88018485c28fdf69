"""matplotlib for the commands' ``--plot`` options: optional, imported only when asked for,
with the Agg backend (no display), and a missing install refused with how to get it."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib (pip install matplotlib)") from None
    return plt
