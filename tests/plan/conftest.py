"""Planner tests write their caches under a temporary folder, never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TTLPOLICY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
