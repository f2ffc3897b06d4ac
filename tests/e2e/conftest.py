"""Fixtures of the end-to-end suite: a process group that is always cleaned up and a project
made by `coordinatorctl init`. PostgreSQL comes from tests/conftest.py (fail under `CI=true`
when the server is missing, skip elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Project

from coordinator_sandbox.testing import Processes


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def project(tmp_path: Path, processes: Processes) -> Project:
    return Project.create(tmp_path, processes)
