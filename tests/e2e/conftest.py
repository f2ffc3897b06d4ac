"""Fixtures of the end-to-end suite: a process group that is always cleaned up, a project made
by `coordinatorctl init`, and PostgreSQL (as in tests/store/conftest.py: the server named by
`COORDINATOR_TEST_POSTGRES_URL`, default `postgresql://root@127.0.0.1:5432/root`; unreachable →
**fail** under `CI=true`, skip otherwise).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from e2e_support import Processes, Project

ADMIN_URL_VARIABLE = "COORDINATOR_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/root"


def with_database(url: str, database: str, user: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = user + "@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, "/" + database, parts.query, parts.fragment))


def _postgres_unavailable(reason: str) -> None:
    message = f"PostgreSQL is unavailable for the end-to-end suite: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: PostgreSQL tests must run)", pytrace=False)
    pytest.skip(message + f" (set {ADMIN_URL_VARIABLE} or start PostgreSQL; CI=true fails)")


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


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    return os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)


@pytest.fixture(scope="session")
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh database for this session (dropped afterwards)."""
    name = f"coordinator_e2e_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(postgres_admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        _postgres_unavailable(type(error).__name__)
    try:
        yield with_database(postgres_admin_url, name)
    finally:
        with psycopg.connect(postgres_admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_role(postgres_url: str, postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    """Login roles for `runtimeRole`; each is dropped after the session."""
    created: list[str] = []

    def create() -> str:
        role = f"coordinator_rt_{secrets.token_hex(5)}"
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
        created.append(role)
        return role

    yield create
    for role in created:
        with psycopg.connect(postgres_url, autocommit=True) as database:
            database.execute(f'DROP OWNED BY "{role}"')
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')
