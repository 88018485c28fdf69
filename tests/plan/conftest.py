"""The planner tests plan a 400-request head of the shipped Mooncake excerpt (seconds, not
minutes), written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_files import write_mooncake_head


@pytest.fixture(scope="session")
def mooncake_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mooncake_head(tmp_path_factory.mktemp("mooncake"))
