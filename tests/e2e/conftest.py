"""Fixtures of the end-to-end suite: a process group that is always cleaned up and a project
made by `coordinatorctl init`. PostgreSQL comes from tests/conftest.py (fail under `CI=true`
when the server is missing, skip elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from e2e_support import Processes, Project


def with_database(url: str, database: str, user: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = user + "@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, "/" + database, parts.query, parts.fragment))


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
